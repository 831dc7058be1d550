"""A copy of this checkout for ``mlflow run`` and the README's commands.

``mlflow run`` runs its command in the project folder, where MLflow puts the artifacts
of experiments it creates (``./mlruns``) and pip builds the package: a copy keeps both
out of the working tree.
"""

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
