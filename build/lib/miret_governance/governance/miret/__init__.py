"""MIRET: an optimal oblique surrogate tree of a tree ensemble, solved as a MILP.

Names are imported lazily so that the submodules (problem, formulation, solvers, tree,
heuristic) can import each other without going through this package's exports.
"""

import importlib

_EXPORTS = {
    "MiretProblem": "miret_governance.governance.miret.problem.problem",
    "build_problem": "miret_governance.governance.miret.problem.problem",
    "MiretSurrogate": "miret_governance.governance.miret.fit.estimator",
    "SolveReport": "miret_governance.governance.miret.fit.solve_report",
    "MiretSearchCV": "miret_governance.governance.miret.fit.search_cv",
}

__all__ = ["MiretProblem", "MiretSearchCV", "MiretSurrogate", "SolveReport", "build_problem"]


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'miret_governance.governance.miret' has no attribute {name!r}")
