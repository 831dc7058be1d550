"""``govern explain`` on 1,000,000 rows x 30 features: wall time and peak memory.

A synthetic binary task (``make_classification``) is written as CSV; a Pipeline of
MinMaxScaler and a random forest (100 trees, depth 3) is trained on a 20,000-row
subsample and registered in a temporary SQLite MLflow store; then ``govern explain``
runs as a subprocess on all rows: the MILP works on a ``--max-rows`` sample, fidelity
and the other metrics are streamed over every row. The subprocess's wall time and peak
resident memory (``resource.RUSAGE_CHILDREN``) are written to
``examples/benchmarks/results_large_data.md``.

Run from the repository root: ``.venv/bin/python examples/benchmarks/large_data.py``
(takes minutes; ``--rows`` for a smaller run).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow
import numpy as np
import pandas as pd
from mlflow import MlflowClient
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).with_name("results_large_data.md")
N_FEATURES = 30
TRAIN_ROWS = 20_000
MODEL_NAME = "large-rf"


def synthetic_classification(rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)``: the benchmarks' binary task of ``rows`` x 30 features (also
    ``native_labels.py``'s)."""
    return make_classification(
        n_samples=rows,
        n_features=N_FEATURES,
        n_informative=10,
        n_redundant=5,
        class_sep=0.8,
        random_state=0,
    )


def write_data(path: Path, rows: int) -> None:
    """``rows`` x 30 synthetic features (raw units, shifted and scaled) plus ``label``."""
    X, y = synthetic_classification(rows)
    X = X * np.linspace(1, 100, N_FEATURES) + np.linspace(0, 500, N_FEATURES)
    frame = pd.DataFrame(X.astype(np.float32), columns=[f"x{j:02d}" for j in range(N_FEATURES)])
    frame["label"] = y
    frame.to_csv(path, index=False, float_format="%.6g")


def register_forest(frame: pd.DataFrame) -> str:
    """Train MinMaxScaler + RF(100 trees, depth 3) on a subsample and register it.

    The subsample also holds the rows with each feature's minimum and maximum, so the
    scaler's range covers the whole file (explain validates the data against it).
    """
    features = frame.drop(columns="label")
    extremes = np.union1d(features.to_numpy().argmin(axis=0), features.to_numpy().argmax(axis=0))
    rows = np.union1d(
        np.random.default_rng(0).choice(len(frame), TRAIN_ROWS, replace=False), extremes
    )
    sample = frame.iloc[rows]
    features = sample.drop(columns="label")
    model = make_pipeline(
        MinMaxScaler(),
        RandomForestClassifier(n_estimators=100, max_depth=3, random_state=0, n_jobs=2),
    ).fit(features, sample["label"])
    with mlflow.start_run(run_name="train large-rf"):
        mlflow.sklearn.log_model(
            model,
            name="model",
            registered_model_name=MODEL_NAME,
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_SKOPS,
            skops_trusted_types=["sklearn.tree._tree.Tree"],
            pip_requirements=["scikit-learn"],
        )
    return f"models:/{MODEL_NAME}/1"


def run_explain(model_uri: str, data: Path, uri: str, time_limit: float) -> tuple[float, int, str]:
    """Run ``govern explain`` in a subprocess; wall seconds, peak RSS bytes, stdout."""
    args = [
        sys.executable,
        "-m",
        "miret_governance.cli",
        "explain",
        "--model-uri",
        model_uri,
        "--data",
        str(data),
        "--target",
        "label",
        "--time-limit",
        str(time_limit),
        "--tracking-uri",
        uri,
    ]
    start = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"govern explain failed ({done.returncode}):\n{done.stderr[-4000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    return seconds, peak, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--time-limit", type=float, default=60.0)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="large-data-") as tmp:
        tmp = Path(tmp)
        uri = f"sqlite:///{tmp / 'mlflow.db'}"
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        mlflow.set_experiment("large-data")

        start = time.perf_counter()
        data = tmp / "large.csv"
        write_data(data, options.rows)
        generated = time.perf_counter() - start
        frame = pd.read_csv(data)  # the values govern explain reads, CSV rounding included
        size_mb = data.stat().st_size / 2**20
        start = time.perf_counter()
        model_uri = register_forest(frame)
        trained = time.perf_counter() - start
        del frame
        print(
            f"{options.rows} rows ({size_mb:.0f} MB CSV) in {generated:.0f} s; forest in {trained:.0f} s"
        )

        seconds, peak, _ = run_explain(model_uri, data, uri, options.time_limit)
        client = MlflowClient()
        surrogate = client.get_model_version(f"{MODEL_NAME}-surrogate", "1")
        run = client.get_run(surrogate.run_id)
        metrics, params = run.data.metrics, run.data.params
        local = mlflow.artifacts.download_artifacts(f"models:/{MODEL_NAME}-surrogate/1")
        report = json.loads((Path(local) / "surrogate.json").read_text())["solve_report"]
    rows = [
        ("rows x features", f"{options.rows:,} x {N_FEATURES} ({size_mb:.0f} MB CSV)"),
        (
            "ensemble",
            (
                "MinMaxScaler + RandomForest, 100 trees, depth 3, trained on 20,000 rows "
                "(plus each feature's extreme rows)"
            ),
        ),
        ("training / test rows", f"{params['n_train']} / {params['n_test']}"),
        ("MILP sample (--max-rows)", params["max_rows"]),
        ("time limit of the fit (s)", params["time_limit"]),
        ("**govern explain wall time (s)**", f"{seconds:.0f}"),
        ("**peak resident memory (MB)**", f"{peak / 2**20:.0f}"),
        ("peak_memory_mb logged by the run", f"{metrics['peak_memory_mb']:.0f}"),
        ("surrogate fit (s)", f"{metrics['solver.time_s']:.1f}"),
        (
            "of which CART + MILP build / heuristic / MILP solve (s)",
            " / ".join(f"{report[k]:.1f}" for k in ("build_time", "heuristic_time", "solve_time")),
        ),
        ("stop reason (solver work units)", f"{report['stop_reason']} ({report['solver_work']:g})"),
        ("MILP binaries", f"{metrics['solver.n_binaries']:.0f}"),
        ("test fidelity (all test rows)", f"{metrics['test_fidelity']:.4f}"),
        ("train fidelity (all training rows)", f"{metrics['train_fidelity']:.4f}"),
        ("CART baseline test fidelity", f"{metrics['baseline_cart_test_fidelity']:.4f}"),
        ("features used", f"{metrics['n_features_used']:.0f}"),
    ]
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    RESULTS.write_text(
        f"# govern explain on {options.rows:,} rows\n\n"
        "Produced by `examples/benchmarks/large_data.py` on "
        f"{time.strftime('%Y-%m-%d')} ({os.cpu_count()} cores, shared machine). The peak "
        "memory is the `govern explain` subprocess's resident high-water mark.\n\n"
        f"| quantity | value |\n|---|---|\n{table}\n",
        encoding="utf-8",
    )
    print(RESULTS.read_text())


if __name__ == "__main__":
    main()
