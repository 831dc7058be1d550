"""Does the default fit end on its work budget or on the wall-clock cap, quiet or loaded?

Fits ``MiretSurrogate`` with its defaults (HiGHS, ``time_limit`` 60 s) on the example
datasets with the paper's protocol of ``paper.py`` (stratified 80/20 split, seed 0, 100
trees of depth D, RF and XGB) and records for each fit the phase times, the work used,
how it stopped, whether the time cap was hit, a digest of the tree and the machine's
1-minute load average after the fit. ``--load N`` starts N CPU-bound busy processes
beside the fits. Each run writes
``results_cap_hits_load<N>.csv``; then ``results_cap_hits.md`` is rewritten from every
such file present (cap hits per run, and whether each tree is identical across runs)::

    .venv/bin/python examples/benchmarks/cap_hits.py
    .venv/bin/python examples/benchmarks/cap_hits.py --load 2
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
from paper import DATA, ensemble_model, make_instance

from miret_governance.governance.miret import MiretSurrogate

HERE = Path(__file__).resolve().parent
REPORT = HERE / "results_cap_hits.md"


def _busy() -> None:
    while True:
        pass


def tree_digest(surrogate: MiretSurrogate) -> str:
    """First 12 hex digits of the sha256 of the tree's coefficients and intercepts."""
    tree = surrogate.tree_
    data = (
        np.ascontiguousarray(tree.coef).tobytes() + np.ascontiguousarray(tree.intercept).tobytes()
    )
    return hashlib.sha256(data).hexdigest()[:12]


def fit_row(path: Path, target: str, depth: int, time_limit: float) -> dict:
    """One default fit and what it did."""
    instance = make_instance(pd.read_csv(path), ensemble_model(target, depth, 0), depth, seed=0)
    surrogate = MiretSurrogate(instance.model, depth=depth, solver="highs", time_limit=time_limit)
    surrogate.fit(instance.X_train)
    r = surrogate.solve_report_
    return {
        "dataset": path.stem,
        "target": target,
        "D": depth,
        "build_s": round(r.build_time, 2),
        "heuristic_s": round(r.heuristic_time, 2),
        "solve_s": round(r.solve_time, 2),
        "fit_s": round(r.wall_time, 2),
        "heuristic_work": r.warm_start_work,
        "solver_work": round(r.solver_work, 3),
        "stop": r.stop_reason,
        "cap_hit": bool(r.time_limit_hit),
        "objective": round(r.objective, 6),
        "tree": tree_digest(surrogate),
        "load_avg": round(os.getloadavg()[0], 1),
    }


def write_report(time_limit: float) -> None:
    """``results_cap_hits.md`` from every ``results_cap_hits_load<N>.csv`` present."""
    runs = {
        int(p.stem.rsplit("load", 1)[1]): pd.read_csv(p)
        for p in sorted(HERE.glob("results_cap_hits_load*.csv"))
    }
    keys = ["dataset", "target", "D"]
    lines = [
        "# Default fits: work budget or wall-clock cap?",
        "",
        "Written by `examples/benchmarks/cap_hits.py`: `MiretSurrogate` defaults (HiGHS,",
        f"one thread, `time_limit` {time_limit:g} s) on the 7 example datasets, the paper's",
        "protocol (stratified 80/20 split, seed 0, 100 trees of depth D), RF and XGB targets;",
        f"{os.cpu_count()} cores shared with other jobs. `load N`: N CPU-bound busy processes",
        "ran beside the fits; load average: the median 1-minute load average after a fit.",
        "Phase times in seconds: build (labels, sample, problem, CART, MILP), heuristic,",
        "solve, whole fit (with the CART guarantee).",
        "",
        "| run | fits | cap hits | stop reasons | fit s (median / max) | load average |",
        "|---|---|---|---|---|---|",
    ]
    for load, table in runs.items():
        stops = ", ".join(f"{k} {v}" for k, v in table["stop"].value_counts().items())
        lines.append(
            f"| load {load} | {len(table)} | {int(table['cap_hit'].sum())} | {stops} | "
            f"{table['fit_s'].median():.1f} / {table['fit_s'].max():.1f} | "
            f"{table['load_avg'].median():.1f} |"
        )
    if len(runs) > 1:
        merged = None
        for load, table in runs.items():
            part = table[[*keys, "tree"]].rename(columns={"tree": f"tree{load}"})
            merged = part if merged is None else merged.merge(part, on=keys)
        columns = [c for c in merged.columns if c.startswith("tree")]
        same = int((merged[columns].nunique(axis=1) == 1).sum())
        lines += ["", f"**{same} of {len(merged)} trees identical across the runs.**"]
    for load, table in runs.items():
        lines += ["", f"## load {load}", ""]
        lines += ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
        lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table.to_numpy()]
    REPORT.write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the fits")
    parser.add_argument("--targets", nargs="+", default=["rf", "xgb"], choices=["rf", "xgb"])
    parser.add_argument("--depths", nargs="+", type=int, default=[2, 3, 4])
    parser.add_argument("--datasets", nargs="+", default=None, help="default: all examples")
    parser.add_argument("--time-limit", type=float, default=MiretSurrogate().time_limit)
    args = parser.parse_args(argv)
    paths = sorted(DATA.glob("*.csv"))
    if args.datasets:
        paths = [p for p in paths if p.stem in set(args.datasets)]
    context = multiprocessing.get_context("spawn")
    burners = [context.Process(target=_busy, daemon=True) for _ in range(args.load)]
    for burner in burners:
        burner.start()
    rows = []
    try:
        for target in args.targets:
            for path in paths:
                for depth in args.depths:
                    begin = time.perf_counter()
                    rows.append(fit_row(path, target, depth, args.time_limit))
                    print(rows[-1], f"({time.perf_counter() - begin:.1f} s)", flush=True)
    finally:
        for burner in burners:
            burner.terminate()
            burner.join()
    pd.DataFrame(rows).to_csv(HERE / f"results_cap_hits_load{args.load}.csv", index=False)
    write_report(args.time_limit)
    print(f"wrote {REPORT}")


if __name__ == "__main__":
    main()
