"""Reproduce the paper's random-forest table with MIRET (HiGHS) beside CART.

One command writes ``examples/benchmarks/results_rf.md``::

    .venv/bin/python examples/benchmarks/paper_rf.py [--time-limit 60] [--datasets Wisconsin,Sonar]

For every dataset in ``examples/data`` and depth 2, 3, 4: a random forest (100 trees,
``max_features=None``) on a stratified 80/20 split (``random_state=0``), a MinMaxScaler
fitted on the training part, MIRET with the paper's hyperparameters
(``paper_hyperparameters_rf.csv``) solved by HiGHS, and a CART surrogate
(``DecisionTreeClassifier(max_depth=D)`` fitted on the forest's training predictions).
The paper's own numbers (``paper_results_rf.csv``, Gurobi with 3600 s) stand beside ours.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler
from sklearn.tree import DecisionTreeClassifier

from governance.ensemble import read_ensemble
from governance.metrics import accuracy, fidelity
from governance.miret import MiretSurrogate

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"
DEPTHS = (2, 3, 4)


def run_instance(frame: pd.DataFrame, depth: int, params: dict, time_limit: float) -> dict:
    """Forest, MIRET and CART on one dataset and depth; returns one table row."""
    X = frame.iloc[:, :-1].to_numpy(dtype=float)
    y = frame.iloc[:, -1].to_numpy().astype(int)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.2, stratify=y, random_state=0
    )
    scaler = MinMaxScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    forest = RandomForestClassifier(
        n_estimators=100, max_depth=depth, max_features=None, random_state=0
    ).fit(X_train, y_train)
    ensemble = read_ensemble(forest)
    rf_train, rf_test = forest.predict(X_train), forest.predict(X_test)

    surrogate = MiretSurrogate(
        alpha=params["alpha"],
        gamma_percentile=params["gamma_percentile"],
        proximity_threshold=params["proximity_threshold"],
        solver="highs",
        time_limit=time_limit,
    ).fit(X_train, ensemble)
    report = surrogate.solve_report_
    cart = DecisionTreeClassifier(max_depth=depth, random_state=0).fit(X_train, rf_train)
    return {
        "train_fidelity": 100 * fidelity(rf_train, surrogate.predict(X_train)),
        "test_fidelity": 100 * fidelity(rf_test, surrogate.predict(X_test)),
        "test_acc_miret": 100 * accuracy(y_test, surrogate.predict(X_test)),
        "test_acc_rf": 100 * accuracy(y_test, rf_test),
        "cart_test_fidelity": 100 * fidelity(rf_test, cart.predict(X_test)),
        "features": len(surrogate.selected_features_),
        "gap_pct": 100 * report.gap if np.isfinite(report.gap) else np.nan,
        "status": report.status,
        "source": report.incumbent_source,
        "build_s": report.build_time,
        "solve_s": report.solve_time,
        "total_s": report.wall_time,
    }


def _fmt(value, digits=1) -> str:
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}"


def write_markdown(results: pd.DataFrame, time_limit: float, path: Path) -> None:
    """Write the comparison table, per-depth means and the targets' verdicts."""
    lines = [
        "# MIRET on the paper's random-forest benchmark",
        "",
        (
            f"HiGHS, time limit {time_limit:g} s per instance (heuristic warm start "
            "included); the paper used Gurobi with 3600 s. Fidelity and accuracy in %. "
            "`paper` columns are the paper's Table values; `CART` is a depth-D "
            "DecisionTreeClassifier fitted on the forest's training predictions. "
            "Written by `examples/benchmarks/paper_rf.py`."
        ),
        "",
        (
            "| dataset | D | train fid | test fid | paper test fid | CART test fid | "
            "test acc MIRET | test acc RF | paper test acc | features | gap % | status | "
            "source | build s | solve s |"
        ),
        "|" + "---|" * 15,
    ]
    for row in results.itertuples():
        lines.append(
            "| "
            + " | ".join(
                [
                    row.dataset,
                    str(row.depth),
                    _fmt(row.train_fidelity),
                    _fmt(row.test_fidelity),
                    _fmt(row.paper_test_fidelity),
                    _fmt(row.cart_test_fidelity),
                    _fmt(row.test_acc_miret),
                    _fmt(row.test_acc_rf),
                    _fmt(row.paper_test_acc_miret),
                    str(row.features),
                    _fmt(row.gap_pct),
                    row.status,
                    row.source,
                    _fmt(row.build_s, 2),
                    _fmt(row.solve_s, 1),
                ]
            )
            + " |"
        )
    lines += [
        "",
        "## Means per depth",
        "",
        (
            "| D | instances | test fid | paper test fid | CART test fid | >= paper | "
            ">= CART | max build s |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for depth, group in results.groupby("depth"):
        ours = group["test_fidelity"].mean()
        paper = group["paper_test_fidelity"].mean()
        cart = group["cart_test_fidelity"].mean()
        lines.append(
            f"| {depth} | {len(group)} | {ours:.2f} | {paper:.2f} | {cart:.2f} | "
            f"{'yes' if ours >= paper else 'no'} | {'yes' if ours >= cart else 'no'} | "
            f"{group['build_s'].max():.2f} |"
        )
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per instance")
    parser.add_argument(
        "--datasets", default=None, help="comma-separated names (default: all in examples/data)"
    )
    parser.add_argument("--output", type=Path, default=HERE / "results_rf.md")
    args = parser.parse_args(argv)

    hyper = pd.read_csv(HERE / "paper_hyperparameters_rf.csv").set_index(["dataset", "depth"])
    paper = pd.read_csv(HERE / "paper_results_rf.csv").set_index(["dataset", "depth"])
    names = sorted(p.stem for p in DATA.glob("*.csv"))
    if args.datasets:
        wanted = [n.strip() for n in args.datasets.split(",")]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            parser.error(f"no data for {unknown} in {DATA}; available: {', '.join(names)}")
        names = wanted
    rows = []
    for name in names:
        frame = pd.read_csv(DATA / f"{name}.csv")
        for depth in DEPTHS:
            begin = time.perf_counter()
            row = run_instance(frame, depth, hyper.loc[(name, depth)].to_dict(), args.time_limit)
            row.update(
                dataset=name,
                depth=depth,
                paper_test_fidelity=paper.loc[(name, depth), "test_fidelity"],
                paper_test_acc_miret=paper.loc[(name, depth), "test_acc_miret"],
            )
            rows.append(row)
            print(
                f"{name} D={depth}: test fidelity {row['test_fidelity']:.1f} "
                f"(paper {row['paper_test_fidelity']:.1f}, CART {row['cart_test_fidelity']:.1f}) "
                f"{row['status']} in {time.perf_counter() - begin:.1f} s",
                flush=True,
            )
            write_markdown(pd.DataFrame(rows), args.time_limit, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
