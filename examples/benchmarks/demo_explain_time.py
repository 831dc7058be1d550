"""Wall time of the demo's ``govern explain``, end to end, in a fresh process each time.

Sets up what ``examples/demo.py`` does before it explains (the Wisconsin data split,
MinMaxScaler + 100-tree depth-3 random forest, logged with skops and registered as
``wisconsin-rf``) in a temporary SQLite store, then times ``govern explain --model-uri
models:/wisconsin-rf/1 --data train.csv --target target --class-names malignant,benign
--force`` ``--repeat`` times (``--force``: each run solves again instead of reusing the
first surrogate). Prints each run's wall time and CPU time (user + system of the
process and its children, which load stretches far less), the medians, and the load
average around the runs (the target is under 12 s wall on a quiet 2-core machine).

Run: ``.venv/bin/python examples/benchmarks/demo_explain_time.py [--repeat 5]``; pass
``--profile`` to also write ``python -X importtime`` of one run to ``importtime.txt`` in
the working folder.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOVERN = str(Path(sys.executable).with_name("govern"))
EXPLAIN = [
    "explain",
    "--model-uri",
    "models:/wisconsin-rf/1",
    "--data",
    "train.csv",
    "--target",
    "target",
    "--class-names",
    "malignant,benign",
    "--force",
]


def set_up(folder: Path) -> dict:
    """The demo's registered forest and training file in ``folder``; the environment
    that points MLflow at its store."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import demo
    import mlflow

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    mlflow.set_experiment(demo.EXPERIMENT)
    state = demo.train_and_register(demo.load_data(demo.DemoState()))
    state.X_train.assign(target=state.y_train).to_csv(folder / "train.csv", index=False)
    return {
        **os.environ,
        "MLFLOW_TRACKING_URI": uri,
        "MLFLOW_REGISTRY_URI": uri,
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }


def explain_once(folder: Path, env: dict, prefix=()) -> tuple[float, float]:
    """Wall and CPU seconds of one ``govern explain`` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    done = subprocess.run(
        [*prefix, *EXPLAIN] if prefix else [GOVERN, *EXPLAIN],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - begin
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode != 0:
        raise SystemExit(f"govern explain exited {done.returncode}:\n{done.stderr}")
    if prefix:
        Path("importtime.txt").write_text(done.stderr)
    return seconds, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs (default 5)")
    parser.add_argument("--profile", action="store_true", help="write importtime.txt")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="demo-explain-") as tmp:
        folder = Path(tmp)
        with contextlib.chdir(folder):  # the store's artifacts (./mlruns) land beside it
            env = set_up(folder)
        print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        runs, cpus = [], []
        for n in range(options.repeat):
            seconds, cpu = explain_once(folder, env)
            runs.append(seconds)
            cpus.append(cpu)
            print(f"run {n + 1}: {seconds:.1f} s wall, {cpu:.1f} s CPU", flush=True)
        print(
            f"median {statistics.median(runs):.1f} s wall (min {min(runs):.1f}, max "
            f"{max(runs):.1f}), {statistics.median(cpus):.1f} s CPU"
        )
        print(f"load average after:  {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        if options.profile:
            script = "from miret_governance.cli.app import main; main()"
            prefix = (sys.executable, "-X", "importtime", "-c", script)
            seconds, _ = explain_once(folder, env, prefix)
            print(f"profiled run: {seconds:.1f} s -> importtime.txt")


if __name__ == "__main__":
    main()
