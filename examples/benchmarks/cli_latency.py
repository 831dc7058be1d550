"""How fast ``govern`` answers when it has nothing heavy to do: ``--help``,
``--version``, and a missing file on ``explain``, ``validate`` and ``gate``.

Each case runs ``--repeat`` times in a fresh process (the installed ``govern`` script
next to this interpreter); the median, minimum and maximum wall times are printed with
the machine's load average, since a loaded machine stretches every number. No store is
created: the missing file is refused before MLflow is imported.

Run: ``.venv/bin/python examples/benchmarks/cli_latency.py [--repeat 7]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOVERN = str(Path(sys.executable).with_name("govern"))
MODEL = ["--model-uri", "models:/wisconsin-rf/1"]
CASES = {
    "govern --help": (["--help"], 0),
    "govern --version": (["--version"], 0),
    "explain, missing --data": (["explain", *MODEL, "--data", "missing.csv"], 2),
    "validate, missing --data": (["validate", *MODEL, "--data", "missing.csv"], 2),
    "gate, missing --policy": (["gate", *MODEL, "--policy", "missing.toml"], 2),
}


def timed(args: list[str], expected: int, folder: str) -> float:
    """Seconds of one ``govern *args`` run (checking its exit code)."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    begin = time.perf_counter()
    done = subprocess.run(
        [GOVERN, *args], cwd=folder, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - begin
    if done.returncode != expected:
        raise SystemExit(f"govern {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs per case (default 7)")
    repeat = parser.parse_args().repeat
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"{'case':<28}{'median s':>10}{'min s':>8}{'max s':>8}")
    with tempfile.TemporaryDirectory(prefix="cli-latency-") as folder:
        timed(["--version"], 0, folder)  # warm the file cache once
        for name, (args, expected) in CASES.items():
            seconds = [timed(args, expected, folder) for _ in range(repeat)]
            print(
                f"{name:<28}{statistics.median(seconds):>10.2f}{min(seconds):>8.2f}"
                f"{max(seconds):>8.2f}"
            )
    print(f"load average after:  {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
