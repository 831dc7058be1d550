"""Issue 43's engine benchmark: MIRET variants against CART, GOSDT and STreeD over five
splits, each fit's CPU seconds on one core.

    nice -n 10 .venv/bin/python examples/benchmarks/engine_bench.py --group examples \\
        --target rf --seeds 0 1 2 3 4 --depths 2 3 4 --variant legacy fixed --resume
    .venv/bin/python examples/benchmarks/engine_bench.py --report

writes ``results_engine_<group>_<target>[_<tag>].csv`` (one row per instance, method and
MIRET variant; ``--resume`` keeps the rows there and fits only what no CSV of that group
and target has); ``--report`` writes ``results_engine.md`` from every such CSV present.

Protocol: ``paper.py``'s (per seed a stratified 80/20 split and the ensemble's seed; a
MinMaxScaler and 100 trees of depth D, ``rf`` RandomForest with ``max_features=None``,
``xgb`` XGBClassifier at its defaults). Every surrogate of depth D is fitted on the
ensemble's training labels and scored by test fidelity (agreement with the ensemble on
the real test rows). MIRET runs as ``MiretSurrogate(pipeline, depth=D,
random_state=seed, **VARIANTS[name])``: the estimator's defaults (solver ``auto``: the
node MILPs that fit Gurobi's size-limited licence go to Gurobi, the others to HiGHS)
changed only by the variant's parameters. The peers are ``paper.py``'s: CART, GOSDT
(leaf penalty 1e-3) and STreeD on GOSDT's threshold guessing, 60 s caps; TAO only with
``--tao``. Times are CPU seconds (``time.process_time``) of this one process, pinned to
one core (``--core``), its BLAS/OpenMP pools limited to one thread, after one untimed warm-up fit
(the engine's compiled kernels loaded): GOSDT's and STreeD's
include the guessing (one binarizer fitted per instance and charged to both). The
machine is shared, so CPU seconds, not wall seconds, are compared; a MIRET fit that hits
its 60 s time limit (a wall-clock safety cap that only the load makes it reach: its tree
would depend on the load) is not kept, and ``--resume`` fits it again. ``examples`` are the
seven ``examples/data`` CSVs, ``unseen`` the six of ``examples/data/unseen`` and
``holdout`` the six of ``examples/data/holdout`` (``unseen_data.py``), run once at the end;
``holdout2`` the six of ``examples/data/holdout2``, set aside after ``holdout`` was run and
before the next engine change, judges that change once.
"""

from __future__ import annotations

import os

for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_pool] = "1"  # before numpy, xgboost or a solver loads its thread pool

import argparse
import hashlib
import inspect
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import paper
from threadpoolctl import threadpool_limits

from miret_governance.governance.miret import MiretSurrogate
from miret_governance.governance.miret.fit import engine

HERE = Path(__file__).resolve().parent
GROUPS = {
    "examples": paper.DATA,
    "unseen": paper.DATA / "unseen",
    "holdout": paper.DATA / "holdout",
    "holdout2": paper.DATA / "holdout2",
}
PEERS = ("CART", "GOSDT", "STreeD")  # the issue's bar: MIRET >= the best of these
# The variants the ablation compares every other one with, and what to read it with.
REFERENCES = {
    "default": "",
    "legacy (before)": (
        "legacy (before) is today's default on the engine before issue 43: the same trees "
        "as legacy now (issue 43 keeps them bit for bit), the CPU seconds of that older, "
        "slower engine (the CPU difference is then the variant's and the engine's)."
    ),
}
# The values that reproduce the fit before issue 43: an estimator without one of these
# parameters behaves as if it were set to this value.
LEGACY = {
    "fallbacks": True,
    "univariate_seed": True,
    "milp_share": None,
    "generated_rows": 0.0,
    "alpha_grid": [0.2, 0.5, 0.8],
}
OLD_FIT = {**LEGACY, "cart_guarantee": True, "alpha": None, "proximity_threshold": None}
LEAN = {**OLD_FIT, "fallbacks": False, "univariate_seed": False}
FIXED = {"cart_guarantee": False, "alpha": 0.5, "proximity_threshold": 0.9}
VARIANTS = {
    "legacy": OLD_FIT,
    "default": {},
    "fixed": {**OLD_FIT, **FIXED},
    "no-fallbacks": {**OLD_FIT, "fallbacks": False},
    "no-univariate-seed": {**OLD_FIT, "univariate_seed": False},
    "no-node-milp": {**OLD_FIT, "milp_share": 0.0},
    "milp-share-0.15": {**OLD_FIT, "milp_share": 0.15},
    "generated-1": {"generated_rows": 1.0},
    "lean": LEAN,
    "lean-milp-0.025": {**LEAN, "milp_share": 0.025},
    "lean-fixed": {**LEAN, "milp_share": 0.025, **FIXED},
    "seeded": {**LEAN, "univariate_seed": True, "milp_share": 0.025},
    "fallbacks-milp": {**LEAN, "fallbacks": True, "milp_share": 0.025},
    "both-milp": {**OLD_FIT, "milp_share": 0.025},
}
"""MIRET variants: name -> ``MiretSurrogate`` parameters. All but ``default`` and
``generated-1`` (the estimator's defaults, with generated rows) are spelled out from the
fit before issue 43 (``legacy``), so they keep their meaning when the defaults change."""
BEFORE = "503413e"  # the engine's last commit before issue 43: its rows are "(before)"
PREVIOUS_DEFAULT = "36f07ae"  # the last engine whose default fit also tried alpha 0.8
# Engine commits that changed no fit with given parameters (the estimator's defaults, its
# docstrings, and generated_rows at 0.0 the fit before it): their fits are 95638c9's.
SAME_FITS = dict.fromkeys(
    ("2cda9db", "3d36c34", "511cc8f", "15beb58", "0e12535", "a0df9c5", "e5f9a08", "c1eb0d6"),
    "95638c9",
) | {"08208b4": "c5799a7"}  # alpha_grid made a parameter at its default: the same fits
# Fits in one process: the bar compares like with like (if the estimator can use more).
ONE_PROCESS = {"n_jobs": 1} if "n_jobs" in inspect.signature(MiretSurrogate).parameters else {}
IMPROVED = 1e-9  # an objective lower by more than this is an improvement
BELOW_CART = 3.0  # bar (b): instances more than this many points below CART
TIME_BAR, MILP_BAR = 5.0, 0.15  # bars: fit <= 5 x GOSDT+guess; idle MILP <= 15% of a fit


def variant_kwargs(name: str) -> dict | None:
    """The parameters of variant ``name`` for the installed estimator, or None when it
    lacks one that the variant sets away from its legacy value."""
    accepted = inspect.signature(MiretSurrogate.__init__).parameters
    kwargs = {}
    for key, value in VARIANTS[name].items():
        if key in accepted:
            kwargs[key] = value
        elif key not in LEGACY or LEGACY[key] != value:
            return None
    return kwargs


def engine_commit() -> str:
    """The short hash of the last commit that changed the engine (``governance/miret``)."""
    found = subprocess.run(
        ["git", "log", "-1", "--format=%h", "--", ":/governance/miret"],
        cwd=HERE,
        capture_output=True,
        text=True,
        check=False,
    )
    commit = found.stdout.strip() or "unknown"
    return SAME_FITS.get(commit, commit)


def timed(fit, *args) -> tuple[paper.Surrogate, float, float]:
    """``fit(*args)`` with its CPU seconds (children waited for included) and wall
    seconds."""
    cpu, wall = _cpu(), time.perf_counter()
    surrogate = fit(*args)
    return surrogate, _cpu() - cpu, time.perf_counter() - wall


def _cpu() -> float:
    """CPU seconds of this process and of the child processes it waited for."""
    spent = os.times()
    return time.process_time() + spent.children_user + spent.children_system


class MilpClock:
    """CPU seconds spent in the engine's MILP phase during a fit: the node MILPs
    (``engine.reoptimize``) and the whole MILP (``engine.solve``), timed by wrapping
    those two functions of :mod:`governance.miret.fit.engine` for the fit's duration (the
    report times phases in wall seconds, which a shared machine inflates unevenly). A
    function the engine no longer has is not timed."""

    NAMES = ("reoptimize", "solve")

    def __init__(self):
        self.seconds = 0.0
        self._saved = {}

    def __enter__(self):
        for name in self.NAMES:
            if callable(original := getattr(engine, name, None)):
                self._saved[name] = original
                setattr(engine, name, self._timing(original))
        return self

    def __exit__(self, *exc):
        for name, original in self._saved.items():
            setattr(engine, name, original)

    def _timing(self, original):
        def timed_call(*args, **kwargs):
            begin = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - begin

        return timed_call


def choices_digest(model: MiretSurrogate) -> str:
    """sha256 of everything a fit chose besides its tree (whose digest is
    :meth:`MiretSurrogate.tree_digest`): depth, alpha, ``m``, the returned candidate and
    the tree's source, the objective, the CART baseline, the folds' held-out fidelities
    and features of every procedure, the features used."""
    report = model.solve_report_
    text = json.dumps(
        {
            "depth": int(model.depth_),
            "alpha": float(model.alpha_),
            "m": float(model.proximity_threshold_),
            "chosen": report.chosen,
            "source": report.incumbent_source,
            "objective": float(report.objective).hex(),
            "baseline": model.baseline_,
            "cv_fidelity": report.cv_fidelity,
            "grid": report.grid,
            "features": model.selected_features_.tolist(),
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def miret_fields(
    surrogate: MiretSurrogate, kwargs: dict, cpu: float, wall: float, milp_cpu: float
) -> dict:
    """What the fit did: every scalar of its report (``r_``), the node MILPs' outcome and
    the MILP phase's share of the fit's CPU seconds (``milp_cpu`` of ``cpu``) and of its
    wall seconds (the report's phase times)."""
    report = surrogate.solve_report_.to_dict()
    fields = {
        f"r_{key}": value
        for key, value in report.items()
        if value is None or isinstance(value, (bool, int, float, str))
    }
    statuses = list(report["node_statuses"].values())
    decided = sum(status != "nothing_to_decide" for status in statuses)
    too_large = sum(status == "too_large" for status in statuses)
    ran = report["chosen"] == "miret" and decided > too_large
    before, after = report["node_objective_before"], report["objective"]
    milp_s = report["node_time"] + (report["solve_time"] if report["global_milp"] else 0.0)
    return {
        **fields,
        "params": json.dumps(kwargs, sort_keys=True),
        "tree_digest": surrogate.tree_digest(),
        "choices_digest": choices_digest(surrogate),
        "alpha_": surrogate.alpha_,
        "m_": surrogate.proximity_threshold_,
        "nodes_optimal": sum(status == "optimal" for status in statuses),
        "nodes_decided": decided,
        "nodes_too_large": too_large,
        "milp_ran": ran,
        "milp_improved": bool(ran and before is not None and after < before - IMPROVED),
        "milp_cpu_s": milp_cpu,
        "milp_share": milp_cpu / cpu if cpu > 0 else np.nan,
        "milp_wall_share": milp_s / wall if wall > 0 else np.nan,
    }


def peer_fitters(args) -> dict:
    """Peer name -> ``fit(inst, guess)`` (``guess``: the instance's binarizer, lazily)."""
    found = {
        "CART": lambda inst, guess: paper.fit_cart(inst, {}, args),
        "GOSDT": lambda inst, guess: paper.gosdt_on(inst, *guess()[:2], args),
        "STreeD": lambda inst, guess: paper.streed_on(inst, *guess()[:2], args),
    }
    if args.tao:
        found["TAO"] = lambda inst, guess: paper.fit_tao(inst, {}, args)
    return found


def run_instance(inst: paper.Instance, todo: list[tuple[str, str]], args) -> list[dict]:
    """Fit each ``(method, variant)`` of ``todo`` on ``inst``: one row each."""
    peers, cache = peer_fitters(args), {}

    def guess():  # GOSDT's threshold guessing, once per instance, timed once
        if not cache:
            found, cpu, _ = timed(paper.binarized, inst, inst.seed)
            cache["value"] = (*found, cpu)
        return cache["value"]

    rows, fitted = [], {}  # fitted: the row of each MIRET parameter set fitted here
    for method, variant in todo:
        extra, kwargs = {}, {}
        if method == "MIRET":
            kwargs = variant_kwargs(variant)
            model = MiretSurrogate(
                inst.model, depth=inst.depth, random_state=inst.seed, **ONE_PROCESS, **kwargs
            )
            params = json.dumps(model.get_params(deep=False), default=repr, sort_keys=True)
            if params in fitted:  # the same fit as another variant's (e.g. default = legacy)
                rows.append({**fitted[params], "variant": variant, "params": json.dumps(kwargs)})
                continue
            with MilpClock() as clock:
                _, cpu, wall = timed(model.fit, inst.X_train)
            predict, n_features, status = (
                model.predict,
                len(model.selected_features_),
                model.solve_report_.stop_reason,
            )
            if model.solve_report_.time_limit_hit:  # the wall-clock cap: the load's tree
                print(f"MIRET {variant} hit the time limit: not kept", flush=True)
                continue
            extra = miret_fields(model, kwargs, cpu, wall, clock.seconds)
        else:
            surrogate, cpu, wall = timed(peers[method], inst, guess)
            predict, n_features, status = surrogate.predict, surrogate.n_features, surrogate.status
            if method in ("GOSDT", "STreeD"):  # the guessing is part of their fit
                extra = {"guess_cpu_s": guess()[2]}
                cpu += guess()[2]
        rows.append(
            row := {
                "method": method,
                "variant": variant,
                "test_fidelity": 100 * np.mean(predict(inst.X_test) == inst.labels_test),
                "train_fidelity": 100 * np.mean(predict(inst.X_train) == inst.labels_train),
                "features": n_features,
                "cpu_s": cpu,
                "wall_s": wall,
                "status": status,
                "ensemble_test_acc": 100 * np.mean(inst.labels_test == inst.y_test),
                **extra,
            }
        )
        if method == "MIRET":
            fitted[params] = row
    return rows


def warm_up() -> None:
    """One small untimed fit: the engine's compiled kernels load (or compile) before the
    first timed fit, as in any process that has fitted once."""
    rng = np.random.default_rng(0)
    X = rng.random((200, 4))
    y = (X[:, 0] + X[:, 1] > 1).astype(int)
    model = paper.ensemble_model("rf", 2, 0).fit(X, y)
    MiretSurrogate(model, depth=2, **ONE_PROCESS).fit(X)


def csv_paths(group: str, target: str) -> list[Path]:
    """Every CSV of ``group`` and ``target``: untagged and tagged (``--tag``)."""
    stem = f"results_engine_{group}_{target}"
    return sorted({*HERE.glob(f"{stem}.csv"), *HERE.glob(f"{stem}_*.csv")})


def run(args) -> None:
    os.sched_setaffinity(0, {args.core})
    tag = f"_{args.tag}" if args.tag else ""
    path = HERE / f"results_engine_{args.group}_{args.target}{tag}.csv"
    rows = pd.read_csv(path).to_dict("records") if args.resume and path.exists() else []
    engine = engine_commit()
    done = {  # what this CSV or, with --resume, another of the same group and target has
        (row["dataset"], row["depth"], row["seed"], row["method"], _variant(row["variant"]))
        for other in (csv_paths(args.group, args.target) if args.resume else [])
        for row in pd.read_csv(other).to_dict("records")
        if row["method"] != "MIRET" or str(row["engine"]) == engine  # MIRET: this engine's
    }
    methods = [(name, "") for name in peer_fitters(args)]
    for name in args.variant:
        if variant_kwargs(name) is None:
            print(
                f"variant {name} skipped: the installed MiretSurrogate lacks one of "
                f"{sorted(VARIANTS[name])}",
                flush=True,
            )
        else:
            methods.append(("MIRET", name))
    args.time_limit, args.gosdt_regularization = 60.0, 1e-3  # the peers' settings in paper.py
    warm_up()
    datasets = sorted(GROUPS[args.group].glob("*.csv"))
    if args.datasets:
        datasets = [csv for csv in datasets if csv.stem in args.datasets]
    for depth in args.depths:  # depth by depth: a cut run keeps whole cells
        for seed in args.seeds:
            for csv in datasets:
                todo = [m for m in methods if (csv.stem, depth, seed, *m) not in done]
                if not todo:
                    continue
                model = paper.ensemble_model(args.target, depth, seed)
                inst = paper.make_instance(pd.read_csv(csv), model, depth, seed)
                if np.unique(inst.labels_train).size < 2:  # nothing to explain, no peer fits
                    print(f"{csv.stem} D={depth} seed={seed}: skipped, the ensemble "
                          "predicts one class on every training row", flush=True)  # fmt: skip
                    continue
                found = run_instance(inst, todo, args)
                for row in found:
                    row.update(
                        group=args.group,
                        target=args.target,
                        dataset=csv.stem,
                        depth=depth,
                        seed=seed,
                        engine=engine,
                    )
                rows += found
                print(
                    f"{csv.stem} D={depth} seed={seed}: "
                    + ", ".join(
                        f"{row['method']}{' ' + row['variant'] if row['variant'] else ''} "
                        f"{row['test_fidelity']:.1f}% {row['features']}f {row['cpu_s']:.2f}s"
                        for row in found
                    ),
                    flush=True,
                )
                pd.DataFrame(rows).to_csv(path, index=False)


def _variant(value) -> str:
    """A CSV's variant cell: empty for a peer."""
    return "" if pd.isna(value) else str(value)


# ---------------------------------------------------------------------------- report


KEY = ["group", "target", "depth", "dataset", "seed"]


def load(groups=tuple(GROUPS), raw=False) -> pd.DataFrame:
    """Every row of every ``results_engine_<group>_<target>.csv`` present (``raw``: all of
    them; else a peer's once and a variant's of its newest engine, labelled for the
    tables)."""
    frames = [
        pd.read_csv(path)
        for group in groups
        for target in ("rf", "xgb")
        for path in csv_paths(group, target)
    ]
    if not frames:
        return pd.DataFrame()
    rows = pd.concat(frames, ignore_index=True)
    rows["variant"] = rows["variant"].map(_variant)
    rows["engine"] = rows["engine"].astype(str).replace(SAME_FITS)
    rows = rows[[_as_defined(row) for row in rows.to_dict("records")]]
    if raw:  # every engine's rows and every run's peers
        return rows
    before = (rows["method"] == "MIRET") & (rows["engine"].astype(str) == BEFORE)
    rows.loc[before, "variant"] += " (before)"
    # a peer fitted by two runs, or a variant on two engines: the newest engine's row
    newest = {commit: k for k, commit in enumerate(_engine_history())}
    rows["age"] = rows["engine"].astype(str).map(newest).fillna(len(newest))
    rows = rows.sort_values("age", kind="stable").drop_duplicates([*KEY, "method", "variant"])
    if (twin := default_twin()) is not None:  # the default's fits under their variant's name
        current = (rows["variant"] == twin) & (rows["engine"].astype(str) == engine_commit())
        rows = pd.concat([rows, rows[current].assign(variant="default")], ignore_index=True)
        rows = rows.drop_duplicates([*KEY, "method", "variant"])
    rows["who"] = np.where(rows["method"] == "MIRET", "MIRET " + rows["variant"], rows["method"])
    return rows


def default_twin() -> str | None:
    """The variant whose fits are the installed estimator's defaults' (None: none)."""
    defaults = MiretSurrogate().get_params(deep=False)
    for name in VARIANTS:
        kwargs = variant_kwargs(name)
        same = kwargs is not None and MiretSurrogate(**kwargs).get_params(deep=False) == defaults
        if name != "default" and same:
            return name
    return None


def _as_defined(row: dict) -> bool:
    """Whether a row is a peer's or was fitted with its variant's parameters as
    :data:`VARIANTS` defines them now (not before the variant was redefined, nor of a
    variant retired since: issue 43's choice variants, ``*_i43c.csv``, ran the engine's
    code patched for one comparison)."""
    if row["method"] != "MIRET":
        return True
    if (defined := VARIANTS.get(row["variant"])) is None:  # a variant since retired
        return False
    return all(
        defined.get(key, "absent") == value for key, value in json.loads(row["params"]).items()
    )


def _engine_history() -> list[str]:
    """Short hashes of the commits that changed the engine, newest first."""
    found = subprocess.run(
        ["git", "log", "--format=%h", "--", ":/governance/miret"],
        cwd=HERE,
        capture_output=True,
        text=True,
        check=False,
    )
    return [commit for commit in found.stdout.split() if commit not in SAME_FITS]


def variants_in(rows: pd.DataFrame) -> list[str]:
    """The MIRET variants present: :data:`VARIANTS`' order, each then its "(before)" rows."""
    present = set(rows.loc[rows["method"] == "MIRET", "variant"])
    ordered = [label for name in VARIANTS for label in (name, f"{name} (before)")]
    return [label for label in ordered if label in present]


def _wide(rows: pd.DataFrame, value: str) -> pd.DataFrame:
    """``value`` by instance (``KEY``) and method (``who``)."""
    return rows.pivot_table(index=KEY, columns="who", values=value, aggfunc="first")


def _se(values: pd.Series) -> float:
    return values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else np.nan


def _cells(rows: pd.DataFrame, variant: str) -> list[dict]:
    """Per (group, target, depth) cell, on the instances where MIRET ``variant`` and every
    peer ran: the bars' figures."""
    mine = f"MIRET {variant}"
    fid, feats, cpu = (_wide(rows, value) for value in ("test_fidelity", "features", "cpu_s"))
    miret = rows[rows["who"] == mine].set_index(KEY)
    cells = []
    if mine not in fid:
        return cells
    complete = fid[[mine, *PEERS]].dropna().index
    for cell, part in pd.DataFrame(index=complete).groupby(level=[0, 1, 2]):
        index = part.index
        at, fe, ti = fid.loc[index], feats.loc[index], cpu.loc[index]
        best = max(PEERS, key=lambda name: at[name].mean())
        diff = at[mine] - at[best]
        below = {name: int((at[name] - at["CART"] < -BELOW_CART).sum()) for name in (mine, *PEERS)}
        runs = miret.loc[index]
        idle = runs[runs["milp_ran"].astype(bool) & ~runs["milp_improved"].astype(bool)]
        ran = runs[runs["milp_ran"].astype(bool)]
        feature_bar = (
            fe["CART"].mean() if cell[2] >= 3 else min(fe["GOSDT"].mean(), fe["STreeD"].mean())
        )
        cells.append(
            {
                "cell": cell,
                "n": len(index),
                "fid": {name: at[name].mean() for name in (*PEERS, mine)},
                "feat": {name: fe[name].mean() for name in (*PEERS, mine)},
                "best": best,
                "diff": diff,
                "below": below,
                "feature_bar": feature_bar,
                "miret_cpu": ti[mine],
                "gosdt_cpu": ti["GOSDT"],
                "improved": int(ran["milp_improved"].astype(bool).sum()),
                "ran": len(ran),
                "idle_share": idle["milp_share"],
                "proven": (int(ran["nodes_optimal"].sum()), int(ran["nodes_decided"].sum())),
            }
        )
    return cells


def _bars(rows: pd.DataFrame, variant: str) -> list[str]:
    """The bars' table of MIRET ``variant``, one line per cell and the pooled line."""
    cells = _cells(rows, variant)
    if not cells:
        return []
    mine = f"MIRET {variant}"
    lines = [
        (
            "| group | target | D | instances | CART | GOSDT | STreeD | MIRET | MIRET - best "
            "peer ± SE | (a) | below CART by > 3: MIRET / GOSDT / STreeD | (b) | features "
            "MIRET (bar) | (c) | MILP improved | idle MILP share | (e) | CPU s MIRET / "
            "GOSDT+guess | ratio |"
        ),
        "|" + "---|" * 19,
    ]
    for c in cells:
        group, target, depth = c["cell"]
        diff, below, share = c["diff"], c["below"], c["idle_share"]
        ratio = c["miret_cpu"].mean() / c["gosdt_cpu"].mean()
        lines.append(
            f"| {group} | {target.upper()} | {depth} | {c['n']} | "
            + " | ".join(
                f"{c['fid'][name]:.2f} ({c['feat'][name]:.2f}f)" for name in (*PEERS, mine)
            )
            + f" | {diff.mean():+.2f} ± {_se(diff):.2f} vs {c['best']} | "
            f"{'ok' if diff.mean() >= -_se(diff) else 'NOT'} | "
            f"{below[mine]} / {below['GOSDT']} / {below['STreeD']} | "
            f"{'ok' if below[mine] <= min(below['GOSDT'], below['STreeD']) else 'NOT'} | "
            f"{c['feat'][mine]:.2f} ({c['feature_bar']:.2f}) | "
            f"{'ok' if c['feat'][mine] <= c['feature_bar'] + 1e-9 else 'NOT'} | "
            f"{c['improved']}/{c['ran']} | "
            + (f"{share.mean():.1%} of {len(share)}" if len(share) else "-")
            + f" | {'ok' if not len(share) or share.mean() <= MILP_BAR else 'NOT'} | "
            f"{c['miret_cpu'].mean():.2f} / {c['gosdt_cpu'].mean():.2f} | {ratio:.1f} |"
        )
    diff = pd.concat([c["diff"] for c in cells])
    below = {name: sum(c["below"][name] for c in cells) for name in (mine, "GOSDT", "STreeD")}
    share = pd.concat([c["idle_share"] for c in cells])
    cpu = pd.concat([c["miret_cpu"] for c in cells])
    gosdt = pd.concat([c["gosdt_cpu"] for c in cells])
    oks = sum(c["diff"].mean() >= -_se(c["diff"]) for c in cells)
    features = sum(c["feat"][mine] <= c["feature_bar"] + 1e-9 for c in cells)
    improved, ran = sum(c["improved"] for c in cells), sum(c["ran"] for c in cells)
    lines.append(
        f"| all | | | {len(diff)} | | | | | {diff.mean():+.2f} ± {_se(diff):.2f} | "
        f"{oks}/{len(cells)} cells | {below[mine]} / {below['GOSDT']} / {below['STreeD']} | "
        f"{'ok' if below[mine] <= min(below['GOSDT'], below['STreeD']) else 'NOT'} | | "
        f"{features}/{len(cells)} cells | {improved}/{ran} | "
        + (f"{share.mean():.1%} of {len(share)}" if len(share) else "-")
        + f" | {'ok' if not len(share) or share.mean() <= MILP_BAR else 'NOT'} | "
        f"{cpu.mean():.2f} / {gosdt.mean():.2f} | {cpu.mean() / gosdt.mean():.1f} "
        f"(median {(cpu / gosdt).median():.1f}) |"
    )
    proven = [sum(c["proven"][i] for c in cells) for i in (0, 1)]
    return [
        *lines,
        "",
        (
            f"Pooled over every instance: MIRET {variant} - best peer {diff.mean():+.2f} ± "
            f"{_se(diff):.2f} points ({'ahead' if diff.mean() > 0 else 'not ahead'}); fit "
            f"{cpu.mean() / gosdt.mean():.1f} times GOSDT+guess (bar {TIME_BAR:g}: "
            f"{'ok' if cpu.mean() / gosdt.mean() <= TIME_BAR else 'NOT'}); where the MILP "
            f"phase ran ({ran} fits) it improved the warm start in {improved}, and "
            f"{proven[0]} of the {proven[1]} splits it decided are proven the best at their "
            "node given the rest of the tree."
        ),
    ]


def _ablation(rows: pd.DataFrame, reference: str, groups: tuple[str, ...], pairs=None) -> list[str]:
    """Each variant against ``reference`` on the instances both ran (within ``groups``);
    ``pairs``: ``(variant, reference)`` pairs instead."""
    rows = rows[rows["group"].isin(groups)]
    fid, feats, cpu = (_wide(rows, value) for value in ("test_fidelity", "features", "cpu_s"))
    lines = [
        (
            f"| variant | instances | cells | test fid - {reference} ± SE | features - "
            f"{reference} | CPU s - {reference} | CPU s (mean) | ratio to GOSDT+guess |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    if pairs is None:  # every variant but the reference's own fits under another name
        same = default_twin() if reference == "default" else None
        pairs = [
            (name, reference)
            for name in variants_in(rows)
            if "(before)" not in name and name != same
        ]
    for name, against in pairs:
        mine, base = f"MIRET {name}", f"MIRET {against}"
        if name == against or mine not in fid or base not in fid:
            continue
        both = fid[[mine, base, "GOSDT"]].dropna().index
        if not len(both):
            continue
        d_fid = fid.loc[both, mine] - fid.loc[both, base]
        d_feat = feats.loc[both, mine] - feats.loc[both, base]
        d_cpu = cpu.loc[both, mine] - cpu.loc[both, base]
        cells = len({index[:3] for index in both})
        lines.append(
            f"| {name} | {len(both)} | {cells} | {d_fid.mean():+.2f} ± {_se(d_fid):.2f} | "
            f"{d_feat.mean():+.2f} | {d_cpu.mean():+.2f} "
            f"({d_cpu.mean() / cpu.loc[both, base].mean():+.0%}) | "
            f"{cpu.loc[both, mine].mean():.2f} | "
            f"{cpu.loc[both, mine].mean() / cpu.loc[both, 'GOSDT'].mean():.1f} |"
        )
    return lines if len(lines) > 2 else []


SAME_TREE = ("test_fidelity", "train_fidelity", "features", "r_objective", "alpha_", "m_")


def _labelled_cells(frame: pd.DataFrame):
    """``(label, rows)`` of each (group, target, depth) cell of ``frame`` (indexed by
    :data:`KEY`), then of each group pooled; ``label`` fills the first three columns."""
    for levels, pooled in ((["group", "target", "depth"], False), (["group"], True)):
        for key, part in frame.groupby(level=levels):
            key = key if isinstance(key, tuple) else (key,)
            label = f"{key[0]} | all | |" if pooled else f"{key[0]} | {key[1].upper()} | {key[2]} |"
            yield label, part


def _default_change(raw: pd.DataFrame) -> list[str]:
    """The default's fits on the engine now against the default's on
    :data:`PREVIOUS_DEFAULT` (``raw``: :func:`load`'s raw rows), per (group, target, depth)
    and pooled per group, on the instances both ran: how many returned the same figures
    (:data:`SAME_TREE` and candidate), the paired test fidelity difference ± SE and the
    features of each."""
    raw = raw.assign(engine=raw["engine"].astype(str))
    default = raw[(raw["method"] == "MIRET") & (raw["variant"] == "default")]
    now = default[default["engine"] == engine_commit()].drop_duplicates(KEY).set_index(KEY)
    was = default[default["engine"] == PREVIOUS_DEFAULT].drop_duplicates(KEY).set_index(KEY)
    both = now.index.intersection(was.index)
    if not len(both) or engine_commit() == PREVIOUS_DEFAULT:
        return []
    a, b = now.loc[both], was.loc[both]
    frame = pd.DataFrame(
        {
            "same": (a["r_chosen"] == b["r_chosen"]).to_numpy()
            & np.all([np.isclose(a[c], b[c], rtol=0, atol=1e-12) for c in SAME_TREE], axis=0),
            "diff": a["test_fidelity"] - b["test_fidelity"],
            "f_now": a["features"],
            "f_was": b["features"],
        },
        index=both,
    )
    lines = [
        (
            "| group | target | D | instances | same figures | test fid now - before ± SE | "
            "features before / now |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for label, part in _labelled_cells(frame):
        lines.append(
            f"| {label} {len(part)} | {int(part['same'].sum())} | "
            f"{part['diff'].mean():+.2f} ± {_se(part['diff']):.2f} | "
            f"{part['f_was'].mean():.2f} / {part['f_now'].mean():.2f} |"
        )
    return lines


def _speed(raw: pd.DataFrame, before: str) -> list[str]:
    """The default's fits on the engine now against the same parameters' fits (variant
    ``before``, the default's twin) on the newest older engine that ran them, per cell and
    per group, on the instances both ran: how many gave the same figures
    (:data:`SAME_TREE` and the returned candidate: the same tree), each engine's mean CPU
    seconds, and each one's ratio to GOSDT+guess's mean CPU seconds: of the run now, and
    the newest before it (the peers of the report before, measured under that load);
    ``raw``: :func:`load`'s raw rows."""
    raw = raw.assign(engine=raw["engine"].astype(str))
    now = engine_commit()
    age = {commit: k for k, commit in enumerate(_engine_history())}
    raw = raw.assign(age=raw["engine"].map(age).fillna(len(age))).sort_values("age", kind="stable")
    old = raw["engine"] != now
    mine = raw[(raw["variant"] == "default") & ~old].drop_duplicates(KEY).set_index(KEY)
    twin = raw[(raw["variant"] == before) & old].drop_duplicates(KEY).set_index(KEY)
    gosdt = raw[raw["method"] == "GOSDT"]
    g_now = gosdt[~old[gosdt.index]].drop_duplicates(KEY).set_index(KEY)["cpu_s"]
    g_old = gosdt[old[gosdt.index]].drop_duplicates(KEY).set_index(KEY)["cpu_s"]
    both = mine.index.intersection(twin.index).intersection(g_now.index).intersection(g_old.index)
    if not len(both):
        return []
    a, b = mine.loc[both], twin.loc[both]
    same = (a["r_chosen"] == b["r_chosen"]).to_numpy() & np.all(
        [np.isclose(a[column], b[column], rtol=0, atol=1e-12) for column in SAME_TREE], axis=0
    )
    frame = pd.DataFrame(
        {
            "same": same,
            "before": b["cpu_s"],
            "after": a["cpu_s"],
            "g_before": g_old.loc[both],
            "g_after": g_now.loc[both],
        },
        index=both,
    )
    lines = [
        (
            f"| group | target | D | instances | same figures | CPU s {before} (before) / "
            "default (now) | GOSDT+guess CPU s, before / now | ratio before / now |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, part in _labelled_cells(frame):
        lines.append(
            f"| {label} {len(part)} | {int(part['same'].sum())} | "
            f"{part['before'].mean():.2f} / {part['after'].mean():.2f} | "
            f"{part['g_before'].mean():.2f} / {part['g_after'].mean():.2f} | "
            f"{part['before'].mean() / part['g_before'].mean():.1f} / "
            f"{part['after'].mean() / part['g_after'].mean():.1f} |"
        )
    return lines


def _phases(rows: pd.DataFrame) -> list[str]:
    """Mean phase times of each variant's fits (the report's wall seconds) beside CPU."""
    miret = rows[rows["method"] == "MIRET"]
    lines = [
        (
            "| group | variant | fits | CPU s | wall s | heuristic s | node MILP s | whole "
            "MILP s | MILP phase CPU s | chosen: miret / univariate / cart | returned tree's "
            "source |"
        ),
        "|" + "---|" * 11,
    ]
    for (group, variant), part in miret.groupby(["group", "variant"], sort=False):
        chosen = part["r_chosen"].value_counts()
        sources = part["r_incumbent_source"].value_counts().to_dict()
        whole = part["r_solve_time"].where(part["r_global_milp"].astype(bool), 0.0)
        lines.append(
            f"| {group} | {variant} | {len(part)} | {part['cpu_s'].mean():.2f} | "
            f"{part['wall_s'].mean():.2f} | {part['r_heuristic_time'].mean():.2f} | "
            f"{part['r_node_time'].mean():.2f} | {whole.mean():.2f} | "
            f"{part['milp_cpu_s'].mean():.2f} | "
            f"{chosen.get('miret', 0)} / {chosen.get('univariate', 0)} / "
            f"{chosen.get('cart', 0)} | "
            + ", ".join(f"{key} {value}" for key, value in sorted(sources.items()))
            + " |"
        )
    return lines


def report() -> None:
    rows = load()
    if rows.empty:
        raise SystemExit("no results_engine_*.csv to report")
    decided = ("examples", "unseen")
    intro = __doc__.split("\n\n")[3].replace("\n", " ")
    lines = [
        "# Issue 43: the engine benchmark",
        "",
        intro,
        "",
        "Commands (one process per group and target; each on its own core):",
        "",
        "    nice -n 10 .venv/bin/python examples/benchmarks/engine_bench.py --group GROUP \\",
        "        --target TARGET --seeds 0 1 2 3 4 --depths 2 3 4 --variant NAME... --resume",
        "    .venv/bin/python examples/benchmarks/engine_bench.py --report",
        "",
        "## Variants run",
        "",
        (
            "| variant | parameters changed from the estimator's defaults | instances run "
            "(group, target) | engine commits |"
        ),
        "|---|---|---|---|",
    ]
    miret = rows[rows["method"] == "MIRET"]
    for name in variants_in(rows):
        kwargs = VARIANTS[name.removesuffix(" (before)")]
        part = miret[miret["variant"] == name]
        if len(part):
            counts = part.groupby(["group", "target"]).size()
            lines.append(
                f"| {name} | {json.dumps(kwargs) if kwargs else '(none)'} | "
                + ", ".join(f"{g} {t.upper()} {n}" for (g, t), n in counts.items())
                + f" | {', '.join(sorted(part['engine'].astype(str).unique()))} |"
            )
    explained = (
        "Per (group, target, depth) cell, over datasets x seeds where every peer and the "
        "variant ran: mean test fidelity (mean features); MIRET - best peer is the paired "
        "difference to the peer with the highest cell mean, with its standard error; (a) "
        "ok when >= -1 SE. (b): instances more than 3 points below CART, MIRET against "
        "GOSDT and STreeD, ok when MIRET's count <= the fewer. (c): MIRET's mean features "
        "<= the bar in brackets (D >= 3: CART's mean; D = 2: the fewer of GOSDT's and "
        "STreeD's). MILP improved: fits whose node MILPs lowered the warm start's objective, "
        "of those where the MILP phase ran; idle MILP share: among the fits where it ran and "
        "improved nothing, the MILP phase's mean share of the fit's CPU seconds; (e) ok when "
        "<= 15%. CPU s: mean CPU seconds of the fit, MIRET against GOSDT+guess; ratio: of "
        "those means (bar 5)."
    )
    lines += ["", "## The bars", "", explained]
    for variant in variants_in(rows):
        untouched = (("holdout", ("holdout",)), ("holdout2", ("holdout2",)))
        for title, groups in (("examples and unseen", decided), *untouched):
            found = _bars(rows[rows["group"].isin(groups)], variant)
            if found:
                lines += ["", f"### MIRET {variant}, {title}", "", *found]
    references = [name for name in REFERENCES if (miret["variant"] == name).any()]
    for reference in references:
        for title, groups in (
            ("examples and unseen", decided),
            ("examples", ("examples",)),
            ("unseen", ("unseen",)),
        ):
            found = _ablation(rows, reference, groups)
            if found:
                lines += [
                    "",
                    f"## Ablation against {reference}: {title}",
                    "",
                    (
                        f"Each variant against {reference} on the instances both ran: mean "
                        "paired difference of test fidelity with its standard error, of "
                        "features and of CPU seconds (relative to the reference's mean); the "
                        "variant's mean CPU seconds and their ratio to GOSDT+guess's on the "
                        "same instances." + (REFERENCES[reference] and " " + REFERENCES[reference])
                    ),
                    "",
                    *found,
                ]
    before = [
        (name.removesuffix(" (before)"), name) for name in variants_in(rows) if "(before)" in name
    ]
    found = _ablation(rows, "(before)", decided, pairs=before)
    if found:
        lines += [
            "",
            "## Before and after: each variant now against itself on the engine before issue 43",
            "",
            (
                f"The same variant on the engine of {BEFORE} (before) and now, on the "
                "instances both ran: a test fidelity or features difference means the tree "
                "changed; the CPU difference is the engine's speed-up."
            ),
            "",
            *found,
        ]
    found = _default_change(load(raw=True))
    if found:
        lines += [
            "",
            f"## The default now against the default of {PREVIOUS_DEFAULT} (alpha grid with 0.8)",
            "",
            (
                "The same instances fitted by the default on both engines (the groups "
                "seen when the grid changed, and holdout2 only if both ran it); same "
                "figures as below."
            ),
            "",
            *found,
        ]
    twin = default_twin()
    found = _speed(load(raw=True), twin) if twin else []
    if found:
        lines += [
            "",
            f"## Speed at identical trees: default now against {twin} on the engine before",
            "",
            (
                f"{twin} is the estimator's defaults spelled out: its fits ran on the newest "
                "engine before the current one that ran them, the default's on the current "
                "engine with CART, GOSDT and STreeD refitted side by side, on the same "
                "instances; the ratio before is against the GOSDT+guess rows of the report "
                "before (its runs, their load), the ratio now against the run now's. "
                "Same figures: fits whose test and train fidelity, features, objective, "
                "alpha, m and returned candidate are the same (the tree digests are compared "
                "by ``engine_identity.py``)."
            ),
            "",
            *found,
        ]
    lines += [
        "",
        "## Where a fit's time goes",
        "",
        (
            "Mean CPU and wall seconds of each variant's fits, and the report's phase "
            "times (wall seconds: heuristic, node MILPs, the whole MILP where it ran); "
            "which candidate was returned and where the MIRET tree came from."
        ),
        "",
        *_phases(rows),
    ]
    (HERE / "results_engine.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {HERE / 'results_engine.md'}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", choices=tuple(GROUPS), default="examples")
    parser.add_argument("--target", choices=("rf", "xgb"), default="rf")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--depths", nargs="+", type=int, choices=(2, 3, 4), default=[2, 3, 4])
    parser.add_argument(
        "--variant",
        nargs="*",
        choices=tuple(VARIANTS),
        default=["default"],
        metavar="NAME",
        help="MIRET variants to fit (default: default); none: the peers only",
    )
    parser.add_argument("--datasets", nargs="+", metavar="NAME", help="default: the group's")
    parser.add_argument("--tao", action="store_true", help="also imodels' TAO")
    parser.add_argument("--core", type=int, default=0, help="the one CPU core to run on")
    parser.add_argument(
        "--tag",
        default="",
        help="write results_engine_<group>_<target>_<tag>.csv: runs of the same group and "
        "target in parallel each write their own (the report reads them all)",
    )
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--report", action="store_true", help="only write results_engine.md")
    args = parser.parse_args(argv)
    if args.report:
        report()
        return
    with threadpool_limits(limits=1):
        run(args)


if __name__ == "__main__":
    main()
