"""Same data, ensemble, parameters and seed: the same MIRET tree, quiet or under load.

Fits the surrogate of each example dataset's random forest (the paper's RF protocol of
``paper.py``, default hyperparameters) twice: once on a quiet machine and once while
busy processes hold every core. Work, not seconds, stops the heuristic and the solver
(``docs/architecture.md``), so both trees must be identical unless the time limit (the
safety cap) cut a fit short, which ``solve_report_.time_limit_hit`` reports::

    .venv/bin/python examples/benchmarks/reproducibility.py --depths 2 3 4

Writes ``examples/benchmarks/results_reproducibility.md``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
from paper import DATA, ensemble_model, make_instance

from miret_governance.governance.miret import MiretSurrogate

HERE = Path(__file__).resolve().parent


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def fit(instance, time_limit: float) -> MiretSurrogate:
    surrogate = MiretSurrogate(
        instance.model, depth=instance.depth, solver="highs", time_limit=time_limit
    )
    return surrogate.fit(instance.X_train)


def same_tree(a: MiretSurrogate, b: MiretSurrogate) -> bool:
    return np.array_equal(a.tree_.coef, b.tree_.coef) and np.array_equal(
        a.tree_.intercept, b.tree_.intercept
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", nargs="+", type=int, default=[2, 3, 4])
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--output", type=Path, default=HERE / "results_reproducibility.md")
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    rows = []
    for path in sorted(DATA.glob("*.csv")):
        for depth in args.depths:
            instance = make_instance(
                pd.read_csv(path), ensemble_model("rf", depth, 0), depth, seed=0
            )
            quiet = fit(instance, args.time_limit)
            burners = [
                context.Process(target=_busy, args=(600,)) for _ in range(os.cpu_count() or 2)
            ]
            for burner in burners:
                burner.start()
            try:
                loaded = fit(instance, args.time_limit)
            finally:
                for burner in burners:
                    burner.terminate()
            q, lo = quiet.solve_report_, loaded.solve_report_
            rows.append(
                {
                    "dataset": path.stem,
                    "D": depth,
                    "same tree": "yes" if same_tree(quiet, loaded) else "NO",
                    "objective": f"{q.objective:.6g} / {lo.objective:.6g}",
                    "stop": f"{q.stop_reason} / {lo.stop_reason}",
                    "solver work": f"{q.solver_work:g} / {lo.solver_work:g}",
                    "fit s": f"{q.wall_time:.1f} / {lo.wall_time:.1f}",
                    "time limit hit": f"{q.time_limit_hit} / {lo.time_limit_hit}",
                }
            )
            print(" | ".join(str(v) for v in rows[-1].values()), flush=True)
    table = pd.DataFrame(rows)
    same = int((table["same tree"] == "yes").sum())
    lines = [
        "# Reproducibility: quiet machine / every core busy",
        "",
        (
            "Written by `examples/benchmarks/reproducibility.py`; RF targets as in "
            f"`paper.py`, MIRET defaults with HiGHS and a {args.time_limit:g} s limit; each "
            f"pair of values is quiet / loaded ({os.cpu_count()} busy processes). "
            f"**{same} of {len(table)} trees identical.**"
        ),
        "",
        "| " + " | ".join(table.columns) + " |",
        "|" + "---|" * len(table.columns),
    ]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table.to_numpy()]
    args.output.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
