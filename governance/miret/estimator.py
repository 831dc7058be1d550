"""``MiretSurrogate``: the MIRET surrogate tree of a tree ensemble as an sklearn estimator."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass, fields

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from governance.ensemble import Ensemble, read_ensemble
from governance.miret import formulation as milp
from governance.miret.heuristic import warm_start
from governance.miret.problem import build_problem
from governance.miret.solvers import SOLVERS, relative_gap, solve
from governance.miret.tree import SurrogateTree

FORMAT = "miret-surrogate"
FORMAT_VERSION = 1
# Share of the time limit the warm-start heuristic may use.
HEURISTIC_SHARE = 0.2


@dataclass
class SolveReport:
    """What a fit did and how good its tree is.

    ``objective`` is the MIRET objective of the returned tree evaluated on the data;
    ``solver_objective`` the solver's incumbent value; ``bound`` the solver's dual bound
    and ``gap`` the relative gap of ``objective`` to ``bound``. ``status`` is the
    solver's (see :mod:`governance.miret.solvers`), ``"trivial"`` when the ensemble
    predicts one class (the constant tree has objective 0, the global minimum; no solver
    runs), or ``"not_started"`` when the heuristic used the whole time limit.
    ``incumbent_source`` says whether the tree comes from the solver or the heuristic
    (the constant tree of a ``"trivial"`` fit counts as heuristic).
    """

    solver: str
    solver_version: str
    status: str
    objective: float
    bound: float
    gap: float
    wall_time: float
    nodes: int
    n_variables: int
    n_binaries: int
    n_constraints: int
    n_nonzeros: int
    warm_start_objective: float
    warm_start_feasible: bool
    incumbent_source: str
    time_limit: float
    solver_objective: float
    build_time: float
    heuristic_time: float
    solve_time: float
    formulation: str
    reductions: bool
    mip_gap: float

    def to_dict(self) -> dict:
        """Plain JSON values; non-finite floats become None."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = None
        return out

    @classmethod
    def from_dict(cls, data: dict) -> SolveReport:
        values = {}
        for f in fields(cls):
            value = data[f.name]
            values[f.name] = math.nan if value is None and f.type == "float" else value
        return cls(**values)


def _centered(tree: SurrogateTree, epsilon: float, problem) -> SurrogateTree:
    """The tree with ``b_t -= epsilon / 2``: a MILP-feasible tree keeps its assignment
    (``<= 0`` stays ``<= -eps/2``, ``>= eps`` becomes ``>= eps/2``) with margin eps/2."""
    return SurrogateTree(
        np.asarray(tree.coef, dtype=np.float64),
        np.asarray(tree.intercept, dtype=np.float64) - epsilon / 2,
        problem.depth,
        problem.feature_names,
        problem.classes,
    )


def _constant_tree(problem, sign) -> SurrogateTree:
    """All samples to the leftmost (sign -1) or rightmost (+1) leaf, no feature used."""
    n_branch = problem.n_branch
    side = float(sign)
    return SurrogateTree(
        np.zeros((n_branch, problem.n_features)),
        np.full(n_branch, side * problem.epsilon / 2),
        problem.depth,
        problem.feature_names,
        problem.classes,
    )


def _majority_tree(problem) -> SurrogateTree:
    """The constant tree of the class with the larger total weight ``p^i``."""
    positive = problem.weight[problem.y == 1].sum()
    return _constant_tree(problem, 1 if positive >= problem.weight.sum() / 2 else -1)


class MiretSurrogate(BaseEstimator):
    """Optimal oblique surrogate tree of a tree ensemble (MIRET, solved as a MILP).

    Parameters
    ----------
    depth : int, optional
        Surrogate depth ``D``; default the ensemble's depth (no deeper than it).
    alpha : float
        Weight of the frequency-weighted sparsity penalty.
    gamma_percentile : float
        ``h``: a level may use the features whose level frequency exceeds the h-th
        percentile of the level's positive frequencies (0: every used feature).
    proximity_threshold : float
        Samples whose ensemble proximity is at least this share a leaf (above 1: none).
    epsilon : float
        Gap modelling the strict inequality of right branches.
    formulation : {"miret", "basic"}
        Improved MIRET or b-MIRET.
    solver : {"auto", "highs", "gurobi"}
    time_limit : float
        Seconds for the whole fit (problem, warm start and solver).
    mip_gap : float
        Relative MIP gap at which the solver stops.
    threads : int, optional
    random_state : int
        Seed of the heuristic and the solver.
    warm_start : bool
        Run the heuristic and give its tree to the solver.
    reductions : bool
        Exact model reductions (see :mod:`governance.miret.formulation`).

    Attributes
    ----------
    tree_ : SurrogateTree
    solve_report_ : SolveReport
    selected_features_ : ndarray of int
        Sorted indices of the features the tree uses.
    problem_ : dict
        Sizes of the instance.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
    classes_ : ndarray
    """

    def __init__(
        self,
        depth=None,
        alpha=0.5,
        gamma_percentile=100 / 3,
        proximity_threshold=0.9,
        epsilon=1e-3,
        formulation="miret",
        solver="auto",
        time_limit=60,
        mip_gap=1e-4,
        threads=None,
        random_state=0,
        warm_start=True,
        reductions=True,
    ):
        self.depth = depth
        self.alpha = alpha
        self.gamma_percentile = gamma_percentile
        self.proximity_threshold = proximity_threshold
        self.epsilon = epsilon
        self.formulation = formulation
        self.solver = solver
        self.time_limit = time_limit
        self.mip_gap = mip_gap
        self.threads = threads
        self.random_state = random_state
        self.warm_start = warm_start
        self.reductions = reductions

    # ------------------------------------------------------------------ fitting
    def fit(self, X, ensemble, progress=None):
        """Fit the surrogate of ``ensemble`` on normalized samples ``X``.

        Parameters
        ----------
        X : array-like of shape (n, p)
            Samples in the ensemble's normalized input units (in ``[0, 1]``).
        ensemble : Ensemble or fitted tree-ensemble model
            Anything :func:`governance.ensemble.read_ensemble` reads.
        progress : callable, optional
            ``progress(elapsed, incumbent, bound, gap)`` while the solver runs.

        Returns
        -------
        self
        """
        begin = time.perf_counter()
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if not self.time_limit > 0:
            raise ValueError(f"time_limit must be positive seconds, got {self.time_limit}")
        if not isinstance(ensemble, Ensemble):
            ensemble = read_ensemble(ensemble)
        problem = build_problem(
            X,
            ensemble,
            depth=self.depth,
            alpha=self.alpha,
            gamma_percentile=self.gamma_percentile,
            proximity_threshold=self.proximity_threshold,
            epsilon=self.epsilon,
            formulation=self.formulation,
        )
        self.n_features_in_ = problem.n_features
        self.feature_names_in_ = np.asarray(problem.feature_names, dtype=object)
        self.classes_ = np.asarray(ensemble.classes)
        self.problem_ = problem.summary()
        if np.all(problem.y == problem.y[0]):
            self._fit_trivial(problem, begin)
        else:
            self._fit_milp(problem, begin, progress)
        self.selected_features_ = np.asarray(self.tree_.used_features(), dtype=np.int64)
        return self

    def _fit_trivial(self, problem, begin):
        self.tree_ = _constant_tree(problem, problem.y[0])
        objective = problem.objective(self.tree_.coef, self.tree_.apply(problem.X))
        elapsed = time.perf_counter() - begin
        self.solve_report_ = SolveReport(
            solver="none",
            solver_version="",
            status="trivial",
            objective=objective,
            bound=0.0,
            gap=0.0,
            wall_time=elapsed,
            nodes=0,
            n_variables=0,
            n_binaries=0,
            n_constraints=0,
            n_nonzeros=0,
            warm_start_objective=math.nan,
            warm_start_feasible=False,
            incumbent_source="heuristic",
            time_limit=float(self.time_limit),
            solver_objective=math.nan,
            build_time=elapsed,
            heuristic_time=0.0,
            solve_time=0.0,
            formulation=problem.formulation,
            reductions=bool(self.reductions),
            mip_gap=float(self.mip_gap),
        )

    def _heuristic(self, problem, model, budget):
        """Warm-start tree and its MILP solution vector (None when not MILP-feasible)."""
        try:
            tree, _ = warm_start(problem, random_state=self.random_state, time_budget=budget)
        except RuntimeError as exc:
            warnings.warn(f"no warm start: {exc}", RuntimeWarning, stacklevel=4)
            return _majority_tree(problem), None
        x0 = milp.encode(tree.coef, tree.intercept, tree.apply(problem.X), model)
        if model.is_feasible(x0):
            return tree, x0
        warnings.warn(
            "the warm-start tree violates the MILP (largest violation "
            f"{model.violation(x0):.3g}); the solver starts without it",
            RuntimeWarning,
            stacklevel=4,
        )
        return tree, None

    def _fit_milp(self, problem, begin, progress):
        model = milp.build_model(problem, reductions=self.reductions)
        build_time = time.perf_counter() - begin

        heuristic_tree = start = None
        warm_feasible = False
        heuristic_time = 0.0
        if self.warm_start:
            t0 = time.perf_counter()
            heuristic_tree, start = self._heuristic(
                problem, model, HEURISTIC_SHARE * self.time_limit
            )
            heuristic_time = time.perf_counter() - t0
            warm_feasible = start is not None

        remaining = self.time_limit - (time.perf_counter() - begin)
        result = None
        if remaining > 0:
            result = solve(
                model,
                solver=self.solver,
                time_limit=remaining,
                mip_gap=self.mip_gap,
                threads=self.threads,
                random_state=self.random_state,
                start=start,
                progress=progress,
            )
        if heuristic_tree is None and (result is None or result.x is None):
            # no incumbent at all: fall back to the heuristic within a small budget
            heuristic_tree, x0 = self._heuristic(problem, model, max(1.0, 0.1 * self.time_limit))
            warm_feasible = x0 is not None
        # candidates in order of preference on equal objective: heuristic, then solver
        candidates = []
        warm_objective = math.nan
        if heuristic_tree is not None:
            # a MILP-feasible tree keeps its assignment when centered; otherwise keep it
            tree = heuristic_tree
            if warm_feasible:
                tree = _centered(heuristic_tree, problem.epsilon, problem)
            warm_objective = problem.objective(tree.coef, tree.apply(problem.X))
            candidates.append(("heuristic", tree))
        if result is not None and result.x is not None:
            coef, intercept, _ = model.decode(result.x)
            solved = SurrogateTree(
                coef, intercept, problem.depth, problem.feature_names, problem.classes
            )
            candidates.append(("solver", _centered(solved, problem.epsilon, problem)))
        scored = [
            (problem.objective(tree.coef, tree.apply(problem.X)), k, source, tree)
            for k, (source, tree) in enumerate(candidates)
        ]
        objective, _, source, self.tree_ = min(scored, key=lambda item: item[:2])

        bound = result.bound if result is not None else -math.inf
        self.solve_report_ = SolveReport(
            solver=result.solver if result is not None else "none",
            solver_version=result.solver_version if result is not None else "",
            status=result.status if result is not None else "not_started",
            objective=float(objective),
            bound=float(bound),
            gap=relative_gap(objective, bound),
            wall_time=time.perf_counter() - begin,
            nodes=result.nodes if result is not None else 0,
            n_variables=model.n_vars,
            n_binaries=model.n_binaries,
            n_constraints=model.n_rows,
            n_nonzeros=model.nnz,
            warm_start_objective=float(warm_objective),
            warm_start_feasible=bool(warm_feasible),
            incumbent_source=source,
            time_limit=float(self.time_limit),
            solver_objective=result.objective if result is not None else math.inf,
            build_time=build_time,
            heuristic_time=heuristic_time,
            solve_time=result.wall_time if result is not None else 0.0,
            formulation=problem.formulation,
            reductions=bool(self.reductions),
            mip_gap=float(self.mip_gap),
        )

    # ------------------------------------------------------------------ prediction
    def _check_X(self, X) -> np.ndarray:
        check_is_fitted(self, "tree_")
        names = [str(n) for n in self.feature_names_in_]
        columns = getattr(X, "columns", None)
        if columns is not None and set(names) <= {str(c) for c in columns}:
            X = X[names]
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X must be a 2-D array with {self.n_features_in_} columns, got shape {X.shape}"
            )
        if not np.all(np.isfinite(X)):
            raise ValueError("X has NaN or infinite values; impute or drop them first")
        return X

    def predict(self, X) -> np.ndarray:
        """Labels (the ensemble's classes) of normalized samples."""
        X = self._check_X(X)
        return self.tree_.predict(X)

    def apply(self, X) -> np.ndarray:
        """Leaf position (``2^D - 1 .. 2^{D+1} - 2``) of each normalized sample."""
        X = self._check_X(X)
        return self.tree_.apply(X)

    def decision_path(self, x) -> list:
        """``(node, value, side)`` along the path of one normalized sample."""
        x = self._check_X(np.asarray(x, dtype=np.float64).reshape(1, -1))[0]
        return self.tree_.decision_path(x)

    def rules(self, feature_names=None, scaler=None) -> str:
        """One line per branch node (raw units when a fitted MinMaxScaler is given)."""
        check_is_fitted(self, "tree_")
        return self.tree_.rules(feature_names=feature_names, scaler=scaler)

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        """Plain JSON: parameters, tree, solve report and fitted attributes."""
        check_is_fitted(self, "tree_")
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "params": self.get_params(),
            "tree": self.tree_.to_dict(),
            "solve_report": self.solve_report_.to_dict(),
            "problem": self.problem_,
            "selected_features": self.selected_features_.tolist(),
            "feature_names_in": [str(n) for n in self.feature_names_in_],
            "classes": self.classes_.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> MiretSurrogate:
        """Restore a fitted estimator written by :meth:`to_dict` (no refit)."""
        if data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} document (format={data.get('format')!r})")
        estimator = cls(**data["params"])
        estimator.tree_ = SurrogateTree.from_dict(data["tree"])
        estimator.solve_report_ = SolveReport.from_dict(data["solve_report"])
        estimator.problem_ = dict(data["problem"])
        estimator.selected_features_ = np.asarray(data["selected_features"], dtype=np.int64)
        estimator.feature_names_in_ = np.asarray(data["feature_names_in"], dtype=object)
        estimator.n_features_in_ = len(estimator.feature_names_in_)
        estimator.classes_ = np.asarray(data["classes"])
        return estimator
