"""Can the node-MILP phase give its time back? HiGHS's root heuristics on and off.

    .venv/bin/python examples/benchmarks/node_milp_options.py --target xgb --depth 3

Issue 19 asks the MILP phase to improve the heuristic's tree on half the fits or to give
its time back. Most node time goes to node MILPs that stall at HiGHS's root (the root LP
and HiGHS's root heuristics run between two of the work checks that end a stalled solve,
``governance.miret.solvers``). On each example dataset (``surrogates.py``'s protocol) this
fits the default ``MiretSurrogate(pipeline, depth=D, solver="highs")`` once per variant
of :data:`VARIANTS` (extra HiGHS options for every solve of the fit, the node MILPs
included) and logs every node solve: binaries, status, seconds and whether it lowered
the objective of the split it started from. Writes ``results_node_milp_options.md``. Run
it on a quiet machine.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import paper

from miret_governance.governance.miret import MiretSurrogate
from miret_governance.governance.miret.milp import node_milp
from miret_governance.governance.miret.solvers import highs as solvers

HERE = Path(__file__).resolve().parent
ROOT_HEURISTICS_OFF = {
    "mip_heuristic_run_feasibility_jump": False,
    "mip_heuristic_run_root_reduced_cost": False,
}
VARIANTS = {
    "today": {},
    "root heuristics off": ROOT_HEURISTICS_OFF,
    "root heuristics off, effort 0, no restart, no symmetry": {
        **ROOT_HEURISTICS_OFF,
        "mip_heuristic_effort": 0.0,
        "mip_allow_restart": False,
        "mip_detect_symmetry": False,
    },
}
"""Extra HiGHS options of each variant (``highspy`` option names)."""


def _instrumented(options: dict, solves: list):
    """Patch the HiGHS constructor with ``options`` and log each node solve into
    ``solves``; returns a function that undoes both."""
    plain_highs, plain_solve = solvers.new_highs, node_milp.solve

    def new_highs():
        highs = plain_highs()
        for name, value in options.items():
            highs.setOptionValue(name, value)
        return highs

    def solve(model, **kwargs):
        start = time.perf_counter()
        result = plain_solve(model, **kwargs)
        before = float(model.c @ model.start + model.objective_constant)
        solves.append(
            {
                "binaries": int(model.n_binaries),
                "seconds": time.perf_counter() - start,
                "stalled": result.status != "optimal",
                "improved": result.x is not None and result.objective < before - 1e-9,
            }
        )
        return result

    solvers.new_highs, node_milp.solve = new_highs, solve

    def undo():
        solvers.new_highs, node_milp.solve = plain_highs, plain_solve

    return undo


def run(args) -> list[dict]:
    rows = []
    for variant, options in VARIANTS.items():
        for csv in sorted(paper.DATA.glob("*.csv")):
            model = paper.ensemble_model(args.target, args.depth, 0)
            inst = paper.make_instance(pd.read_csv(csv), model, args.depth, 0)
            solves = []
            undo = _instrumented(options, solves)
            try:
                start = time.perf_counter()
                surrogate = MiretSurrogate(inst.model, depth=args.depth, solver="highs")
                surrogate.fit(inst.X_train)
                fit_s = time.perf_counter() - start
            finally:
                undo()
            agree = surrogate.predict(inst.X_test) == inst.model.predict(inst.X_test)
            rows.append(
                {
                    "variant": variant,
                    "dataset": csv.stem,
                    "fit_s": fit_s,
                    "node_s": sum(s["seconds"] for s in solves),
                    "stalled_s": sum(s["seconds"] for s in solves if s["stalled"]),
                    "solves": len(solves),
                    "stalled": sum(s["stalled"] for s in solves),
                    "improving": sum(s["improved"] for s in solves),
                    "improving_stalled": sum(s["improved"] and s["stalled"] for s in solves),
                    "test_fidelity": 100 * float(np.mean(agree)),
                }
            )
            print(f"{variant}: {csv.stem} {rows[-1]['node_s']:.2f} s", flush=True)
    return rows


def report(rows: list[dict], args) -> str:
    frame = pd.DataFrame(rows)
    title = (
        f"# Node MILPs with HiGHS's root heuristics on and off ({args.target.upper()}, "
        f"D={args.depth}, the seven example datasets)"
    )
    about = (
        "Written by ``node_milp_options.py`` (its docstring says what it measures). "
        "Seconds are sums over the seven default fits on one quiet 2-core machine; an "
        "improving solve lowered the objective of the split it started from."
    )
    header = (
        "| variant | fit s | node s | stalled solves, s | improving solves (in stalled) "
        "| mean test fidelity |"
    )
    lines = [title, "", about, "", header, "|---|---|---|---|---|---|"]
    for variant in VARIANTS:
        at = frame[frame["variant"] == variant]
        lines.append(
            f"| {variant} | {at['fit_s'].sum():.2f} | {at['node_s'].sum():.2f} | "
            f"{at['stalled'].sum()}, {at['stalled_s'].sum():.2f} | {at['improving'].sum()} "
            f"({at['improving_stalled'].sum()}) | {at['test_fidelity'].mean():.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=("rf", "xgb"), default="xgb")
    parser.add_argument("--depth", type=int, default=3)
    args = parser.parse_args(argv)
    text = report(run(args), args)
    (HERE / "results_node_milp_options.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
