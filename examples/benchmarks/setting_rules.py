"""Which rule for choosing alpha and m could meet issue 19's bars on the example datasets?

    .venv/bin/python examples/benchmarks/setting_rules.py --target xgb
    .venv/bin/python examples/benchmarks/setting_rules.py --target rf
    .venv/bin/python examples/benchmarks/setting_rules.py --report

For every example instance (``surrogates.py``'s protocol, HiGHS, depth D given) the fit
runs its held-out folds over a wider grid than the estimator's, alpha in
:data:`ALPHAS` at m 0.9 and alpha 0.5 at m 1.0, and then, once per setting, finishes
with that setting forced (``grid.choose`` wrapped: the depth and the folds are the
estimator's own, only the returned setting differs). One row per (dataset, depth,
setting) in ``results_setting_rules_examples_<target>.csv``: test fidelity and features
of the returned tree, and the MIRET procedure's held-out fidelity and mean fold features
at that setting. ``--report`` replays rules on those rows and writes
``results_setting_rules.md``: the estimator today (its MIRET rows of
``results_surrogates_examples_<target>.csv``), its rule on the wider grid, each setting
fixed, and two sparsity
exchange rates: the setting with the most held-out fidelity points minus ``rate`` points
per fold feature, or minus ``k`` standard errors of its held-out fidelity per fold feature
(``sqrt(p (1 - p) / n)`` on the ``n`` held-out rows: a feature must buy ``k`` standard
errors), or ``rate`` points per fold feature beyond the features of the instance's CART
tree (the bar compares with CART). ``--seed K`` runs another split and ensemble seed
(``_seed<K>`` in the file name); the report's last section pools the seeds, with the
peers of ``surrogates.py --seed K``. ``--group unseen`` runs the data sets set aside
(``results_setting_rules_unseen_<target>[_seed<K>].csv``), to check a rule chosen on the
examples. An experiment for the issue's note, not a product code path.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import paper
import surrogates

from miret_governance.governance.miret import MiretSurrogate
from miret_governance.governance.miret.fit import grid

HERE = Path(__file__).resolve().parent
ALPHAS = (0.2, 0.5, 0.8, 2.0)
RATES = (0.0, 1.0, 1.5, 2.0, 2.5, 3.0)
ERRORS = (0.5, 1.0, 1.5, 2.0)
BEYOND_RATES = (1.0, 2.0, np.inf)
INCUMBENT = grid.incumbent(grid.settings(None, None))  # the paper's alpha 0.5 and m 0.9


def run(target: str, seed: int, group: str = "examples") -> None:
    """Fit every instance of ``group`` (``surrogates.GROUPS``) of split seed ``seed``
    once per setting of the wider grid."""
    original, state = grid.choose, {}

    def forced(right, features, depths, tried):
        depth, setting = original(right, features, depths, tried)
        state["rule"] = setting
        return depth, state["setting"]

    grid.choose, grid.ALPHA_GRID = forced, ALPHAS
    rows = []
    for depth in (2, 3, 4):
        for csv in sorted(surrogates.GROUPS[group].glob("*.csv")):
            inst = paper.make_instance(
                pd.read_csv(csv), paper.ensemble_model(target, depth, seed), depth, seed
            )
            for setting in grid.settings(None, None):
                state["setting"] = setting
                fit = MiretSurrogate(inst.model, depth=depth, solver="highs").fit(inst.X_train)
                report = fit.solve_report_
                held_out = next(
                    row
                    for row in report.grid["rows"]
                    if row["candidate"] == "miret"
                    and (row["alpha"], row["proximity_threshold"]) == setting
                )
                rows.append(
                    {
                        "dataset": csv.stem,
                        "depth": depth,
                        "held_out_rows": fit.n_rows_used_,
                        "alpha": setting[0],
                        "m": setting[1],
                        "rule_alpha": state["rule"][0],
                        "rule_m": state["rule"][1],
                        "test_fidelity": 100 * fit.score(inst.X_test, inst.labels_test),
                        "features": len(fit.selected_features_),
                        "chosen": report.chosen,
                        "cv_miret": held_out["cv_fidelity"],
                        "fold_features": held_out["features"],
                    }
                )
            print(f"{csv.stem} D={depth}", flush=True)
    path = HERE / f"results_setting_rules_{group}_{target}{surrogates.seed_suffix(seed)}.csv"
    pd.DataFrame(rows).to_csv(path, index=False)


def _at(instance: pd.DataFrame, alpha: float, m: float) -> pd.Series:
    """One instance's row of the setting ``(alpha, m)``."""
    return instance[(instance["alpha"] == alpha) & (instance["m"] == m)].iloc[0]


def _pick(instance: pd.DataFrame, rule, cart_features: float) -> pd.Series:
    """The row ``rule`` returns among one instance's settings (``cart_features``: the
    features of the instance's CART tree, for the rules that charge only features
    beyond CART's)."""
    if rule == "estimator":
        return _at(instance, instance["rule_alpha"].iloc[0], instance["rule_m"].iloc[0])
    if rule[0] == "fixed":
        return _at(instance, *rule[1])
    kind, rate, alphas = rule
    allowed = instance[instance["alpha"].isin(alphas) | (instance["m"] != 0.9)]
    held_out = allowed["cv_miret"]
    if kind == "errors":  # rate standard errors of the held-out fidelity, in points
        rate = rate * 100 * np.sqrt(held_out * (1 - held_out) / allowed["held_out_rows"])
    charged = allowed["fold_features"]
    if kind == "beyond":  # only the features beyond CART's; inf: never more than CART
        charged = np.maximum(charged - cart_features, 0)
    score = (100 * held_out - np.where(charged > 0, rate * charged, 0)).round(9)
    incumbent = (allowed["alpha"] == INCUMBENT[0]) & (allowed["m"] == INCUMBENT[1])
    order = np.lexsort((~incumbent.to_numpy(), -score.to_numpy()))
    return allowed.iloc[order[0]]


def _rules() -> list:
    fixed = [("fixed", (alpha, 0.9)) for alpha in ALPHAS] + [("fixed", (0.5, 1.0))]
    grids = ((0.2, 0.5, 2.0), ALPHAS)
    rates = [("rate", rate, alphas) for alphas in grids for rate in RATES]
    errors = [("errors", k, alphas) for alphas in grids for k in ERRORS]
    beyond = [("beyond", rate, alphas) for alphas in grids for rate in BEYOND_RATES]
    return ["estimator", *fixed, *rates, *errors, *beyond]


def _label(rule) -> str:
    if rule == "today":
        return "the estimator today (alphas 0.2, 0.5, 0.8; ``results_surrogates.md``)"
    if rule == "estimator":
        return "the estimator's rule on this grid"
    if rule[0] == "fixed":
        return f"alpha {rule[1][0]:g}, m {rule[1][1]:g} fixed"
    alphas = ", ".join(f"{alpha:g}" for alpha in rule[2])
    if rule[0] == "beyond" and np.isinf(rule[1]):
        return f"no more fold features than CART's tree has, alphas {alphas}"
    if rule[0] == "beyond":
        return f"{rule[1]:g} points per fold feature beyond CART's, alphas {alphas}"
    unit = "points" if rule[0] == "rate" else "standard errors"
    return f"{rule[1]:g} {unit} per feature, alphas {alphas}"


def report() -> None:
    lines = [
        "# Rules for choosing alpha and m against issue 19's bars (example datasets)",
        "",
        __doc__.split("\n\n")[2].replace("\n", " "),
        "",
        (
            "Each cell: MIRET - best of CART/GOSDT/STreeD (test fidelity points) / mean "
            "features (**ok** when <= CART's) / worst MIRET - CART. Peers from "
            "``results_surrogates_examples_<target>.csv``."
        ),
        "",
    ]
    for target in ("rf", "xgb"):
        path = HERE / f"results_setting_rules_examples_{target}.csv"
        if not path.exists():
            continue
        frame = pd.read_csv(path)
        peers = pd.read_csv(HERE / f"results_surrogates_examples_{target}.csv")
        wide = peers.pivot_table(
            index=["dataset", "depth"], columns="method", values=["test_fidelity", "features"]
        )
        today = peers[peers["method"] == "MIRET"]
        lines += [f"## {target.upper()}", "", "| rule | D2 | D3 | D4 |", "|---|---|---|---|"]
        for rule in ["today", *_rules()]:
            cells = []
            for depth in (2, 3, 4):
                part = frame[frame["depth"] == depth]
                cart_of = wide["features"].xs(depth, level="depth")["CART"]
                if rule == "today":
                    picked = today[today["depth"] == depth].set_index("dataset")
                else:
                    picked = pd.DataFrame(
                        [
                            _pick(instance, rule, cart_of[dataset])
                            for dataset, instance in part.groupby("dataset")
                        ]
                    ).set_index("dataset")
                fid = wide["test_fidelity"].xs(depth, level="depth")
                best_peer = max(fid[name].mean() for name in surrogates.PEERS)
                cart_features = wide["features"].xs(depth, level="depth")["CART"].mean()
                features = picked["features"].mean()
                worst = (picked["test_fidelity"] - fid["CART"]).min()
                verdict = "**ok**" if features <= cart_features else "over"
                cells.append(
                    f"{picked['test_fidelity'].mean() - best_peer:+.2f} / {features:.2f} "
                    f"{verdict} / {worst:+.1f}"
                )
            lines.append(f"| {_label(rule)} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += _pooled()
    (HERE / "results_setting_rules.md").write_text("\n".join(lines))
    print(f"wrote {HERE / 'results_setting_rules.md'}")


def _seed_frames(group: str, target: str) -> dict[int, tuple[pd.DataFrame, pd.DataFrame]]:
    """``{seed: (setting rows, surrogates.py rows)}`` of every seed with both files."""
    rules = surrogates.seed_paths(f"results_setting_rules_{group}_{target}")
    peers = surrogates.seed_paths(f"results_surrogates_{group}_{target}")
    return {
        seed: (pd.read_csv(path), pd.read_csv(peers[seed]))
        for seed, path in rules.items()
        if seed in peers
    }


def _pooled() -> list[str]:
    """The rules over every seed run (``--seed``), instance by instance pooled."""
    lines = [
        "## Over every seed run",
        "",
        (
            "Each rule on the instances of every seed run (``--seed K``, peers from "
            "``surrogates.py --seed K``), pooled: MIRET - best peer on the mean test "
            "fidelity over all (seed, dataset) instances (in brackets: the seeds whose own "
            "mean meets the bar) / mean features (**ok** when <= CART's) / instances more "
            "than 3 points below CART."
        ),
        "",
    ]
    for group, target in itertools.product(surrogates.GROUPS, ("rf", "xgb")):
        frames = _seed_frames(group, target)
        if len(frames) < 2:
            continue
        lines += [
            f"### {group}, {target.upper()}, seeds {', '.join(map(str, sorted(frames)))}",
            "",
            "| rule | D2 | D3 | D4 |",
            "|---|---|---|---|",
        ]
        for rule in ["today", *_rules()]:
            cells = []
            for depth in (2, 3, 4):
                picked, peers = [], []
                for seed, (rows, found) in sorted(frames.items()):
                    part = rows[rows["depth"] == depth]
                    wide = found[found["depth"] == depth].pivot_table(
                        index="dataset", columns="method", values=["test_fidelity", "features"]
                    )
                    cart_of = wide["features"]["CART"]
                    if rule == "today":
                        mine = found[(found["method"] == "MIRET") & (found["depth"] == depth)]
                    else:
                        mine = pd.DataFrame(
                            [
                                _pick(inst, rule, cart_of[dataset])
                                for dataset, inst in part.groupby("dataset")
                            ]
                        )
                    picked.append(mine.assign(seed=seed).set_index(["seed", "dataset"]))
                    peers.append(pd.concat({seed: wide}, names=["seed"]))
                mine, wide = pd.concat(picked), pd.concat(peers)
                fid = wide["test_fidelity"]
                best = max(fid[name].mean() for name in surrogates.PEERS)
                met = surrogates.seeds_meeting_bar(
                    mine["test_fidelity"], fid[list(surrogates.PEERS)]
                )
                features, cart_features = mine["features"].mean(), wide["features"]["CART"].mean()
                verdict = "**ok**" if features <= cart_features else "over"
                below = int((mine["test_fidelity"] - fid["CART"] < -3).sum())
                cells.append(
                    f"{mine['test_fidelity'].mean() - best:+.2f} ({met}/{len(frames)}) / "
                    f"{features:.2f} {verdict} / {below}"
                )
            lines.append(f"| {_label(rule)} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines if len(lines) > 6 else []


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("rf", "xgb"), default="xgb")
    surrogates.add_seed_argument(parser)
    parser.add_argument(
        "--group",
        choices=tuple(surrogates.GROUPS),
        default="examples",
        help="the data sets (unseen: to check a rule chosen on the examples, never to "
        "choose one); the report's last section has each group",
    )
    parser.add_argument("--report", action="store_true", help="only write the Markdown")
    args = parser.parse_args(argv)
    report() if args.report else run(args.target, args.seed, args.group)


if __name__ == "__main__":
    main()
