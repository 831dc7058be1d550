"""The software a surrogate tree was fitted with: Python, the packages that decide the
tree, and the platform.

:func:`environment` is recorded in the surrogate's evidence (``provenance.environment``)
and compared by ``govern reproduce``: a re-run on other versions may find another tree.
Versions are read from the installed distributions' metadata; nothing is imported.
"""

from __future__ import annotations

import platform
from importlib import metadata

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


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (None when it is not installed)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment(gurobi: bool = False) -> dict:
    """Python, package and platform versions of this process.

    Parameters
    ----------
    gurobi : bool
        Also record ``gurobipy`` (the fit was solved by Gurobi).

    Returns
    -------
    dict
        ``python``, one key per :data:`PACKAGES` name (and ``gurobipy``), ``platform``
        (``platform.platform()``) and ``machine``; a package that is not installed is
        None.

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
