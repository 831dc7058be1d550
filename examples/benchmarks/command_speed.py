"""How long everyday ``govern`` commands take on the demo's store, whole process each time.

Builds the store ``make demo`` builds (``examples/demo.py``, run in a child process with
its paths moved into ``--folder``: a temporary folder unless one is given; a folder that
already holds ``mlflow.db`` is reused as it is), then runs each command in a fresh process
from that folder and prints a Markdown table: median wall seconds and median CPU seconds
(user + system of the child, from ``resource.getrusage(RUSAGE_CHILDREN)`` deltas; on a
shared machine CPU seconds are the comparable figure), with the exit code.

The commands are those the demo's closing lines print, on ``models:/wisconsin-rf/1``
(the champion) with ``demo-output/policies/lenient.toml``: ``--help``, ``show``,
``validate`` (the 426 training rows), ``gate`` (unsigned: a what-if record),
``explain-row`` (three rows), and ``explain`` without ``--force`` (it reuses the demo's
result). The forced explain solves again, so it runs on version 2, the demo's retrained
forest of the same shape (100 depth-3 trees, the same 426 rows) that no alias holds: a
forced explain of the promoted version 1 supersedes its promotions. ``python -c "import
mlflow"`` and the imports every command that reads the store needs are the floors.

With ``--warm`` the commands are handed to a ``govern serve`` started for the run
(``GOVERN_SERVER``): wall seconds are then the figure, as each command runs in a process
forked from the server, whose CPU this script does not see (the CPU column is the
console script's own).

Run: ``.venv/bin/python examples/benchmarks/command_speed.py [--folder DIR] [--repeat 5]
[--forced-repeat 3] [--no-floors] [--warm]``. Results: ``results_command_speed.md``.
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

EXAMPLES = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
GOVERN = str(Path(PYTHON).with_name("govern"))
POLICY = ["--policy", "demo-output/policies/lenient.toml"]
TRAIN = ["--data", "demo-output/train.csv", "--target", "target"]
EXPLAIN = ["explain", *TRAIN, "--class-names", "malignant,benign"]
KEY = ["--signing-key", "demo-output/keys/demo.pem"]
V1 = ["--model-uri", "models:/wisconsin-rf/1"]
STORE = "import mlflow, mlflow.store.tracking.sqlalchemy_store, model_signing"
SKLEARN = "import sklearn.ensemble, sklearn.pipeline, sklearn.preprocessing, skops.io"
FLOORS = {
    'python -c "import mlflow"': "import mlflow",
    "floor: mlflow, its SQL store, model_signing": STORE,
    "floor + scikit-learn + skops": f"{STORE}; {SKLEARN}",
    "floor + scikit-learn + skops + GE": f"{STORE}; {SKLEARN}; import great_expectations",
}
"""What a command that reads the SQLite store pays before doing anything: the imports of
``show`` and ``gate``; ``explain-row`` and ``explain`` also read a scikit-learn model
(skops), ``validate`` also runs Great Expectations."""
CASES = {
    **{name: [PYTHON, "-c", code] for name, code in FLOORS.items()},
    "govern --help": [GOVERN, "--help"],
    "show": [GOVERN, "show", *V1, *POLICY],
    "validate (426 rows)": [GOVERN, "validate", *V1, *TRAIN, *POLICY],
    "gate": [GOVERN, "gate", *V1, *POLICY],
    "explain-row (3 rows)": [
        GOVERN,
        "explain-row",
        "--model-uri",
        "models:/wisconsin-rf@champion",
        "--data",
        "demo-output/rows.csv",
        *POLICY,
    ],
    "explain, reusing": [GOVERN, *EXPLAIN, *V1, *KEY],
}
V2 = ["--model-uri", "models:/wisconsin-rf/2"]
FORCED = ("explain --force (version 2)", [GOVERN, *EXPLAIN, *V2, *KEY, "--force"])

BUILD = """
import sys
from pathlib import Path
sys.path.insert(0, {examples!r})
import demo
root = Path({folder!r})
demo.ROOT, demo.OUTPUT = root, root / "demo-output"
demo.TRACKING_URI = f"sqlite:///{{root / 'mlflow.db'}}"
demo.KEY = demo.OUTPUT / "keys" / "demo"
demo.TRAIN, demo.ROWS = demo.OUTPUT / "train.csv", demo.OUTPUT / "rows.csv"
demo.main([])
"""


def build(folder: Path, env: dict) -> None:
    """The demo's store in ``folder`` (``examples/demo.py`` with its paths moved there)."""
    (folder / "examples").mkdir(parents=True, exist_ok=True)
    link = folder / "examples" / "policies"
    if not link.exists():
        link.symlink_to(EXAMPLES / "policies")
    code = BUILD.format(examples=str(EXAMPLES), folder=str(folder))
    subprocess.run([PYTHON, "-c", code], cwd=folder, env=env, check=True, capture_output=True)


def run_once(command: list[str], folder: Path, env: dict) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and exit code of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - begin
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr}")
    return wall, cpu, done.returncode


def measure(name: str, command: list[str], repeat: int, folder: Path, env: dict) -> str:
    """One Markdown table row: median wall and CPU seconds of ``repeat`` runs."""
    runs = [run_once(command, folder, env) for _ in range(repeat)]
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    codes = ",".join(sorted({str(r[2]) for r in runs}))
    return f"| {name} | {repeat} | {wall:.2f} | {cpu:.2f} | {codes} |"


@contextlib.contextmanager
def warm_process(folder: Path, env: dict):
    """A ``govern serve`` for the run; yields the environment that hands commands to it."""
    socket_folder = folder / "warm"
    socket_folder.mkdir(mode=0o700, exist_ok=True)
    path = socket_folder / "govern.sock"
    server = subprocess.Popen(
        [GOVERN, "serve", "--socket", str(path)], cwd=folder, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not path.is_socket():
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("govern serve did not start")
            time.sleep(0.1)
        yield {**env, "GOVERN_SERVER": str(path)}
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, help="the demo's store (built when missing)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per command (default 5)")
    parser.add_argument(
        "--forced-repeat", type=int, default=3, help="forced explain runs (default 3)"
    )
    parser.add_argument(
        "--no-floors", action="store_true", help="time the commands only, not the floors"
    )
    parser.add_argument(
        "--warm", action="store_true", help="hand the commands to a govern serve (wall s)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="command-speed-") as scratch:
        folder = (args.folder or Path(scratch)).resolve()
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": uri,
            "MLFLOW_REGISTRY_URI": uri,
            "MLFLOW_DISABLE_TELEMETRY": "true",
        }
        for name in ("GOVERN_POLICY", "GOVERN_SIGNING_KEY", "GOVERN_POLICY_TRUST"):
            env.pop(name, None)
        if not (folder / "mlflow.db").is_file():
            began = time.perf_counter()
            build(folder, env)
            print(f"built the demo's store in {folder} ({time.perf_counter() - began:.0f} s)")
        with contextlib.ExitStack() as stack:
            if args.warm:
                env = stack.enter_context(warm_process(folder, env))
            _table(args, folder, env)


def _table(args, folder: Path, env: dict) -> None:
    """Print the table of every case (floors unless ``--no-floors``) and the forced one."""
    run_once([GOVERN, "--version"], folder, env)  # warm the file cache
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}\n")
    print("| command | runs | median wall s | median CPU s | exit |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, command in CASES.items():
        if args.no_floors and name in FLOORS:
            continue
        print(measure(name, command, args.repeat, folder, env), flush=True)
    print(measure(*FORCED, args.forced_repeat, folder, env), flush=True)
    print(f"\nload average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
