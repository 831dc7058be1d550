"""A copy of this checkout for ``mlflow run`` and the README's commands.

``mlflow run`` runs its command in the project folder, where MLflow puts the artifacts
of experiments it creates (``./mlruns``) and pip builds the package: a copy keeps both
out of the working tree. The environments ``mlflow run`` builds (about a minute each) go
to one folder for the whole test session (:func:`mlflow_env_root`), shared by the
pytest-xdist workers, and a build is made by one of them at a time
(:func:`one_mlflow_run_at_a_time`): the other reuses it instead of building its own.
"""

import contextlib
import fcntl
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("governance", "flavors", "cli", "examples")
FILES = ("MLproject", "python_env.yaml", "constraints.txt", "pyproject.toml", "README.md")


def copy_project(folder: Path) -> Path:
    """Copy the package folders, ``examples/`` and the project files into ``folder``,
    with ``.venv`` linked to this checkout's. Returns ``folder``."""
    ignore = shutil.ignore_patterns("__pycache__", "demo-output", "mlflow.db", "mlruns")
    for name in FOLDERS:
        shutil.copytree(ROOT / name, folder / name, ignore=ignore)
    for name in FILES:
        shutil.copy(ROOT / name, folder / name)
    (folder / ".venv").symlink_to(ROOT / ".venv")
    return folder


def mlflow_env_root(tmp_path_factory) -> Path:
    """``MLFLOW_ENV_ROOT`` of the test session: beside the pytest-xdist workers' own
    temporary folders (one per worker), else in the session's."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "mlflow-envs"
    root.mkdir(exist_ok=True)
    return root


@contextlib.contextmanager
def one_mlflow_run_at_a_time(env_root: Path):
    """Hold an exclusive lock on ``env_root`` (the first ``mlflow run`` builds the
    environment there; the others wait for it, then reuse it). Closing the file
    releases the lock."""
    with open(env_root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
