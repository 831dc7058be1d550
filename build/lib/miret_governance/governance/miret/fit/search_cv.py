"""``MiretSearchCV``: the paper's hyperparameter selection as a thin GridSearchCV layer.

k-fold cross-validation (default 4) of :class:`MiretSurrogate` over the paper's grid
(section "Hyperparameters setting"), each candidate fitted with a short
``search_time_limit``, scored on validation fidelity and on the number of features the
tree uses. The choice (:data:`SELECTION_RULE`) is made from ``cv_results_`` and the
chosen parameters are refitted on all the data with the estimator's own time limit.
Parallel through joblib; ``backend="ray"`` runs the candidates on a Ray cluster through
Ray's joblib backend (``ray_address``, else a Ray already initialized, else a local Ray;
``RAY_ADDRESS`` is read at the edge: ``govern explain --ray-address``).
"""

from __future__ import annotations

import joblib
import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.model_selection import GridSearchCV

from miret_governance.governance.errors import InvalidInputError, MissingDependencyError
from miret_governance.governance.miret.fit.engine import work_budgets

PAPER_GRID = {
    "alpha": [0.2, 0.4, 0.5, 0.6, 0.8],
    "gamma_percentile": [0, 50, 100 / 3, 25],
    "proximity_threshold": [0.85, 0.9, 1.0],
}
CANDIDATE_CAP = 5.0  # a candidate's safety cap, in multiples of search_time_limit
SELECTION_RULE = (
    "fewest features among the candidates whose mean validation fidelity is within "
    "tolerance of the best mean validation fidelity; ties to the higher mean validation "
    "fidelity, then to the first candidate in grid order"
)


def fidelity_scorer(estimator, X, y=None) -> float:
    """Validation fidelity: agreement of the surrogate with the ensemble's labels."""
    return estimator.score(X, y)


def n_features_scorer(estimator, X, y=None) -> float:
    """Number of distinct features the fitted tree uses (lower is sparser)."""
    return float(len(estimator.selected_features_))


def time_limit_scorer(estimator, X, y=None) -> float:
    """1 when the time limit cut the fit short (then a re-run may differ), else 0."""
    return float(estimator.solve_report_.time_limit_hit)


def select_candidate(cv_results, tolerance) -> int:
    """Index of the candidate chosen by :data:`SELECTION_RULE`."""
    fidelity = np.asarray(cv_results["mean_test_fidelity"], dtype=np.float64)
    features = np.asarray(cv_results["mean_test_n_features"], dtype=np.float64)
    near = np.flatnonzero(fidelity >= np.nanmax(fidelity) - tolerance)
    order = np.lexsort((near, -fidelity[near], features[near]))
    return int(near[order[0]])


class MiretSearchCV(BaseEstimator):
    """Cross-validated choice of MIRET hyperparameters (paper's grid and rule).

    Parameters
    ----------
    estimator : MiretSurrogate
        Carries the ensemble and every fixed parameter (depth, solver, time limit...).
    param_grid : dict, optional
        Default :data:`PAPER_GRID`.
    cv : int or cross-validation generator
        Default 4 folds.
    tolerance : float
        Fidelity tolerance of :data:`SELECTION_RULE`.
    search_time_limit : float
        Each candidate fit gets the solver's work budgets of a fit with this time limit
        (units of work, about seconds; :func:`governance.miret.engine.work_budgets`) and
        a safety cap of ``CANDIDATE_CAP`` times it in seconds (whose share is the
        heuristic's budget, :func:`governance.miret.engine.heuristic_budget`), so that
        load does not change the candidates' trees (``reproducible_``).
    n_jobs : int, optional
        Parallel candidate fits (joblib).
    backend : {"loky", "ray"}
    ray_address : str, optional
        Ray cluster address (default: a Ray this process already initialized, else a
        local Ray; this library reads no ``RAY_ADDRESS``: pass it).

    Attributes
    ----------
    cv_results_ : dict
        GridSearchCV's results with ``mean_test_fidelity``, ``mean_test_n_features`` and
        ``mean_test_time_limit_hit`` (share of the candidate's folds whose fit the time
        limit cut short).
    reproducible_ : bool
        No candidate fit hit the time limit: every stop was counted in work, so the same
        data and parameters choose the same candidate under any load.
    best_index_ : int
    best_params_ : dict
    best_estimator_ : MiretSurrogate
        Refitted on all data with the estimator's own time limit.
    selection_rule_ : str
    """

    def __init__(
        self,
        estimator,
        *,
        param_grid=None,
        cv=4,
        tolerance=0.01,
        search_time_limit=5.0,
        n_jobs=None,
        backend="loky",
        ray_address=None,
    ):
        self.estimator = estimator
        self.param_grid = param_grid
        self.cv = cv
        self.tolerance = tolerance
        self.search_time_limit = search_time_limit
        self.n_jobs = n_jobs
        self.backend = backend
        self.ray_address = ray_address

    def _search(self):
        stall, budget = work_budgets(float(self.search_time_limit))
        short = clone(self.estimator).set_params(
            time_limit=CANDIDATE_CAP * float(self.search_time_limit),
            stall_work=stall,
            work_limit=budget,
        )
        return GridSearchCV(
            short,
            PAPER_GRID if self.param_grid is None else self.param_grid,
            scoring={
                "fidelity": fidelity_scorer,
                "n_features": n_features_scorer,
                "time_limit_hit": time_limit_scorer,
            },
            refit=False,
            cv=self.cv,
            n_jobs=self.n_jobs,
            error_score="raise",
        )

    def _run(self, search, X, y):
        if self.backend == "loky":
            return search.fit(X, y)
        if self.backend != "ray":
            raise InvalidInputError(f"backend must be 'loky' or 'ray', got {self.backend!r}")
        try:
            import ray
            from ray.util.joblib import register_ray
        except ImportError as exc:
            raise MissingDependencyError(
                "backend='ray' needs Ray: pip install 'miret-governance[ray]'"
            ) from exc
        if not ray.is_initialized():
            # "local" starts a Ray of this process even when a stale cluster file is around
            ray.init(address=self.ray_address or "local")
        register_ray()
        with joblib.parallel_backend("ray", n_jobs=self.n_jobs or -1):
            return search.fit(X, y)

    def fit(self, X, y=None, *, progress=None):
        """Cross-validate the grid on ``X``, choose by the rule, refit on all of ``X``
        (``progress`` is passed to the refit's :meth:`MiretSurrogate.fit`)."""
        search = self._run(self._search(), X, y)
        self.cv_results_ = search.cv_results_
        self.best_index_ = select_candidate(self.cv_results_, self.tolerance)
        self.reproducible_ = not np.any(self.cv_results_["mean_test_time_limit_hit"] > 0)
        self.best_params_ = dict(self.cv_results_["params"][self.best_index_])
        self.selection_rule_ = SELECTION_RULE.replace("tolerance", f"{self.tolerance:g}", 1)
        best = clone(self.estimator).set_params(**self.best_params_)
        self.best_estimator_ = best.fit(X, y, progress=progress)
        return self

    def predict(self, X):
        return self.best_estimator_.predict(X)

    def score(self, X, y=None):
        return self.best_estimator_.score(X, y)
