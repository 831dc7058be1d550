"""The software a surrogate tree was fitted with: Python, the packages that decide the
tree, and the platform.

:func:`environment` is recorded in the surrogate's evidence (``provenance.environment``)
and compared by ``govern reproduce``: a re-run on other versions may find another tree.
Versions are read from the installed distributions' metadata; nothing is imported. The
product's own code changes without its version (an editable install, a patched copy), so
its source files are digested too (:data:`SOURCE_KEY`).
"""

from __future__ import annotations

import hashlib
import platform
from importlib import metadata
from pathlib import Path

PACKAGES = (
    "numpy",
    "scipy",
    "scikit-learn",
    "xgboost",
    "highspy",
    "pandas",
    "mlflow",
    "miret-governance",
)
"""Distributions whose versions decide the tree (``gurobipy`` too when Gurobi solved)."""
GUROBI = "gurobipy"
SOURCE_KEY = "miret-governance source"
"""sha256 (16 hex digits) of the product's Python files: this package and the folders
its caller adds (:func:`source_digest`)."""


def source_digest(folders) -> str:
    """sha256 of the relative path and bytes of every ``.py`` file under ``folders``, in
    sorted order; its first 16 hex digits."""
    digest = hashlib.sha256()
    for folder in map(Path, folders):
        for path in sorted(folder.rglob("*.py")):
            digest.update(f"{folder.name}/{path.relative_to(folder).as_posix()}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (None when it is not installed)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment(gurobi: bool = False, code=()) -> dict:
    """Python, package and platform versions of this process.

    Parameters
    ----------
    gurobi : bool
        Also record ``gurobipy`` (the fit was solved by Gurobi).
    code : sequence of path
        More folders of the product's code digested with this package
        (:data:`SOURCE_KEY`).

    Returns
    -------
    dict
        ``python``, one key per :data:`PACKAGES` name (and ``gurobipy``),
        :data:`SOURCE_KEY`, ``platform`` (``platform.platform()``) and ``machine``; a
        package that is not installed is None.

    Examples
    --------
    >>> env = environment()
    >>> sorted(env)[:3], env["python"] == platform.python_version()
    (['highspy', 'machine', 'miret-governance'], True)
    """
    names = (*PACKAGES, GUROBI) if gurobi else PACKAGES
    return {
        "python": platform.python_version(),
        **{name: package_version(name) for name in names},
        SOURCE_KEY: source_digest((Path(__file__).parent, *code)),
        "platform": platform.platform(),
        "machine": platform.machine(),
    }


def differences(recorded: dict, current: dict) -> dict:
    """Keys whose values differ between two :func:`environment` records.

    Returns
    -------
    dict
        Key -> ``{"recorded": ..., "current": ...}`` (None where a record lacks it), in
        sorted order.

    Examples
    --------
    >>> differences({"numpy": "2.0", "python": "3.11"}, {"numpy": "2.1", "python": "3.11"})
    {'numpy': {'recorded': '2.0', 'current': '2.1'}}
    """
    return {
        key: {"recorded": recorded.get(key), "current": current.get(key)}
        for key in sorted(set(recorded) | set(current))
        if recorded.get(key) != current.get(key)
    }
