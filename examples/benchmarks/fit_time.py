"""Wall and CPU time of one default ``MiretSurrogate`` fit at issue 19's size target.

A 100-tree depth-3 RandomForest on ``make_classification`` (2,000 rows, 30 features, 10
informative, seed 0), explained at depth 3 with the estimator's defaults (alpha chosen
on held-out folds, the solver phase on counted work). The target is under 10 s wall on a
quiet 2-core machine. Prints each fit's wall and CPU seconds, the tree digest (the
same on every run and machine: budgets are counted work) and what the fit chose, and
the load average.

Run: ``.venv/bin/python examples/benchmarks/fit_time.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import os
import time

from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

from miret_governance.governance.miret.fit.estimator import MiretSurrogate


def main(repeat: int) -> None:
    X, y = make_classification(n_samples=2000, n_features=30, n_informative=10, random_state=0)
    forest = RandomForestClassifier(n_estimators=100, max_depth=3, random_state=0).fit(X, y)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for _ in range(repeat):
        surrogate = MiretSurrogate(forest, depth=3)
        wall, cpu = time.perf_counter(), time.process_time()
        surrogate.fit(X)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        report = surrogate.solve_report_
        print(
            f"fit {wall:.2f} s wall, {cpu:.2f} s CPU; tree {surrogate.tree_digest()[:16]}, "
            f"chosen {report.chosen}, alpha {surrogate.alpha_}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    main(parser.parse_args().repeat)
