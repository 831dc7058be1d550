"""Ensemble labels through the exact view and through the library's own predict: wall
time and peak memory at 100,000 and 1,000,000 rows x 30 features.

The models are those of ``large_data.py`` (a MinMaxScaler and a random forest of 100
trees of depth 3, trained on 20,000 rows) and an XGBoost classifier of 100 trees of depth
3; each measurement runs in a fresh subprocess, which loads the rows, fits the model (the
same seeds each time), then times ``Ensemble.predict`` (exact: ``read_ensemble(model)``; native:
``read_ensemble(model, native=True)``, checked on 1,024 rows) and reports its peak
resident memory above what it held before predicting (Linux: ``VmHWM`` after resetting it
through ``/proc/self/clear_refs``).

Run from the repository root: ``.venv/bin/python examples/benchmarks/native_labels.py``
(``--rows 100000`` for one size).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from large_data import TRAIN_ROWS, synthetic_classification


def _status_kib(field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (its peak) of this process, in KiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def model_of(family: str):
    import xgboost
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler

    if family == "rf":
        return make_pipeline(
            MinMaxScaler(), RandomForestClassifier(100, max_depth=3, random_state=0)
        )
    return xgboost.XGBClassifier(n_estimators=100, max_depth=3, random_state=0)


def measure(folder: Path, family: str, mode: str) -> None:
    """In the subprocess: time the labels of the saved rows, print JSON."""
    from miret_governance.governance.ensembles.readers.reading import read_ensemble

    X, y = np.load(folder / "X.npy"), np.load(folder / "y.npy")
    model = model_of(family).fit(X[:TRAIN_ROWS], y[:TRAIN_ROWS])
    ensemble = read_ensemble(model, native=mode == "native")
    rows = ensemble.transform(X)
    with open("/proc/self/clear_refs", "w") as f:  # Linux: the peak restarts from now
        f.write("5")
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    labels = ensemble.predict(rows)
    seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM")
    np.save(folder / f"{family}-{mode}.npy", labels)
    print(json.dumps({"seconds": seconds, "peak_mib": max(peak - before, 0) / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        measure(Path(args.child[0]), args.child[1], args.child[2])
        return
    print("| model | rows | exact s | native s | exact peak MiB | native peak MiB | same |")
    print("|---|---|---|---|---|---|---|")
    for rows in args.rows:
        X, y = synthetic_classification(rows)
        with tempfile.TemporaryDirectory() as folder:
            folder = Path(folder)
            np.save(folder / "X.npy", X)
            np.save(folder / "y.npy", y)
            del X, y
            for family in ("rf", "xgboost"):
                result = {}
                for mode in ("exact", "native"):
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", str(folder), family, mode],
                        check=True,
                        capture_output=True,
                        text=True,
                    )
                    result[mode] = json.loads(out.stdout.strip().splitlines()[-1])
                same = np.array_equal(
                    np.load(folder / f"{family}-exact.npy"),
                    np.load(folder / f"{family}-native.npy"),
                )
                print(
                    f"| {family} | {rows:,} | {result['exact']['seconds']:.2f} | "
                    f"{result['native']['seconds']:.2f} | {result['exact']['peak_mib']:.0f} | "
                    f"{result['native']['peak_mib']:.0f} | {same} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
