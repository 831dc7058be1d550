"""One explain request: what the caller asked for, with every default filled in.

:class:`ExplainRequest` is built once by :func:`flavors.explain.explain_model_version`
and handed, frozen, to every stage of :mod:`flavors.stages`. The hyperparameter defaults
come from one place, the estimator: :func:`estimator_defaults`; :func:`check_parameters`,
:func:`check_search` and :func:`check_class_names` refuse bad values before any work.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np
from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.registry import URI_PREFIX

HYPERPARAMETERS = (
    "depth",
    "alpha",
    "gamma_percentile",
    "proximity_threshold",
    "epsilon",
    "formulation",
    "max_rows",
)
"""The MIRET hyperparameters an explain run records (with the solver, time limit, seed)."""


def estimator_defaults() -> dict:
    """``MiretSurrogate().get_params()``: the one source of hyperparameter defaults."""
    from miret_governance.governance.miret import MiretSurrogate

    return MiretSurrogate().get_params()


def search_defaults() -> dict:
    """``MiretSearchCV``'s defaults (cv, tolerance, search time limit, backend, ...)."""
    from miret_governance.governance.miret import MiretSearchCV

    return {k: v for k, v in MiretSearchCV(None).get_params().items() if k != "estimator"}


MAX_DEPTH = 8
"""Deepest surrogate explain fits (2^8 leaves is beyond what a reviewer can read)."""


def check_parameters(given: dict, test_size: float | None) -> dict:
    """The estimator's parameters with ``given`` (None: the default), validated by the
    estimator's own constraints before any work starts.

    Raises
    ------
    ExplainError
        A value out of range (NaN, negative time limit, depth 0 or above
        :data:`MAX_DEPTH`, ``max_rows`` below 2, ...), naming the parameter.
    """
    from miret_governance.governance.miret import MiretSurrogate
    from sklearn.utils._param_validation import InvalidParameterError

    chosen = {**estimator_defaults(), **{k: v for k, v in given.items() if v is not None}}
    try:
        MiretSurrogate(**{k: v for k, v in chosen.items() if k != "ensemble"})._validate_params()
    except InvalidParameterError as exc:
        raise ExplainError(f"{exc}; nothing was started") from None
    if chosen["depth"] is not None and chosen["depth"] > MAX_DEPTH:
        raise ExplainError(f"depth must be at most {MAX_DEPTH}, got {chosen['depth']}")
    if test_size is not None and not 0 < test_size < 1:
        raise ExplainError(f"test_size must be in (0, 1), got {test_size}")
    return chosen


@dataclass(frozen=True)
class SearchSettings:
    """How ``--search`` chooses alpha, h and m (:class:`governance.miret.MiretSearchCV`).

    Attributes
    ----------
    param_grid : dict, optional
        Parameter name -> candidate values; None: the paper's grid.
    cv, tolerance, search_time_limit, n_jobs, backend, ray_address
        ``MiretSearchCV``'s options (``None`` takes :func:`search_defaults`'s value for
        ``cv``, ``tolerance`` and ``search_time_limit``).
    """

    param_grid: dict | None = None
    cv: int | None = None
    tolerance: float | None = None
    search_time_limit: float | None = None
    n_jobs: int | None = None
    backend: str = "loky"
    ray_address: str | None = field(default=None, compare=False)

    def grid(self) -> dict:
        """The grid searched: ``param_grid`` or the paper's."""
        from miret_governance.governance.miret.search import PAPER_GRID

        return dict(PAPER_GRID if self.param_grid is None else self.param_grid)

    def options(self) -> dict:
        """Keyword arguments of ``MiretSearchCV`` (the estimator apart)."""
        defaults = search_defaults()
        given = {
            "param_grid": self.param_grid,
            "cv": self.cv,
            "tolerance": self.tolerance,
            "search_time_limit": self.search_time_limit,
        }
        chosen = {k: defaults[k] if v is None else v for k, v in given.items()}
        return {
            **chosen,
            "n_jobs": self.n_jobs,
            "backend": self.backend,
            "ray_address": self.ray_address,
        }

    def identity(self) -> dict:
        """What changes the chosen tree (not where or how parallel it runs)."""
        options = self.options()
        return {k: options[k] for k in ("param_grid", "cv", "tolerance", "search_time_limit")}

    def params(self) -> dict:
        """Run parameters ``search.*``."""
        options = self.options()
        return {
            "search.grid": json.dumps(self.grid(), sort_keys=True),
            "search.cv": options["cv"],
            "search.tolerance": options["tolerance"],
            "search.time_limit": options["search_time_limit"],
            "search.n_jobs": options["n_jobs"] if options["n_jobs"] is not None else "",
            "search.backend": options["backend"],
        }


@dataclass(frozen=True)
class ExplainRequest:
    """Everything one explain run is asked to do, resolved and checked.

    Attributes
    ----------
    model_uri : str
        The URI as the caller gave it (an alias is allowed).
    ensemble_name, ensemble_version : str
        The registry version it resolved to.
    ensemble_source : str
        The ensemble's model class, as :class:`governance.ensemble.Ensemble` reads it.
    ensemble_model_id : str
        The ensemble's LoggedModel id ("" when the registry has none).
    data, test_data : str
        Absolute paths of the data files (``test_data`` "" for a holdout split).
    data_digest, test_data_digest : str
        MLflow dataset digests ("" when there is no test file).
    target : str
        Label column ("": the ensemble's own labels stand in).
    test_size : float or None
        Holdout share (None when a test file is given).
    registered_name : str
        Registered model of the surrogate.
    depth, alpha, gamma_percentile, proximity_threshold, epsilon, formulation, max_rows,
    solver, time_limit, seed
        MIRET hyperparameters; ``time_limit`` is the budget of the whole fit and
        ``max_rows`` the largest sample the MILP works on.
    allow_invalid : bool
    class_names : tuple of two str, optional
        Names of the ensemble's two classes for the reviewer's tree (display only).
    search : SearchSettings, optional
        Choose alpha, h and m by cross-validation (the request's values are the
        starting point the grid overrides).
    trust_pickle : str
        "" unless a pickled ensemble was loaded on the caller's explicit trust; then
        who trusted it and when (``"<user> at <UTC time>"``).
    """

    model_uri: str
    ensemble_name: str
    ensemble_version: str
    ensemble_source: str
    ensemble_model_id: str
    data: str
    data_digest: str
    test_data: str
    test_data_digest: str
    target: str
    test_size: float | None
    registered_name: str
    depth: int
    alpha: float
    gamma_percentile: float
    proximity_threshold: float
    epsilon: float
    formulation: str
    max_rows: int
    solver: str
    time_limit: float
    seed: int
    allow_invalid: bool
    class_names: tuple | None = None
    trust_pickle: str = ""
    search: SearchSettings | None = None

    @property
    def ensemble_uri(self) -> str:
        """``models:/<name>/<version>`` of the ensemble version."""
        return f"{URI_PREFIX}{self.ensemble_name}/{self.ensemble_version}"

    def hyperparameters(self) -> dict:
        """The MIRET hyperparameters by name (:data:`HYPERPARAMETERS`)."""
        return {name: getattr(self, name) for name in HYPERPARAMETERS}

    def estimator_params(self) -> dict:
        """Keyword arguments of ``MiretSurrogate`` for this request."""
        return {
            **self.hyperparameters(),
            "solver": self.solver,
            "time_limit": self.time_limit,
            "random_state": self.seed,
        }

    @property
    def digest(self) -> str:
        """What makes two requests the same explanation (ensemble, data, parameters)."""
        identity = {
            "ensemble_uri": self.ensemble_uri,
            "data_digest": self.data_digest,
            "test_data_digest": self.test_data_digest or None,
            "target": self.target,
            "test_size": self.test_size,
            "solver": self.solver,
            "time_limit": self.time_limit,
            "seed": self.seed,
            "allow_invalid": self.allow_invalid,
            **self.hyperparameters(),
        }
        if self.search is not None:
            identity["search"] = self.search.identity()
        text = json.dumps(identity, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def params(self) -> dict:
        """The run parameters that make the explanation reproducible (with a search,
        the searched hyperparameters are left for the search to log once chosen)."""
        searched = set(self.search.grid()) if self.search is not None else set()
        hyperparameters = {k: v for k, v in self.hyperparameters().items() if k not in searched}
        return {
            "ensemble_uri": self.ensemble_uri,
            "ensemble_model_id": self.ensemble_model_id,
            "ensemble_source": self.ensemble_source,
            "requested_model_uri": self.model_uri,
            "data": self.data,
            "data_digest": self.data_digest,
            "test_data": self.test_data,
            "test_data_digest": self.test_data_digest,
            "target": self.target,
            "test_size": self.test_size if self.test_size is not None else "",
            "solver": self.solver,
            "time_limit": self.time_limit,
            "seed": self.seed,
            "registered_name": self.registered_name,
            "class_names": ",".join(self.class_names or ()),
            "explain_digest": self.digest,
            **hyperparameters,
            **(self.search.params() if self.search is not None else {}),
        }


def check_search(search: SearchSettings) -> None:
    """Refuse search settings ``MiretSearchCV`` would fail on, before any work."""
    options = search.options()
    problems = []
    if options["backend"] not in ("loky", "ray"):
        problems.append(f"backend must be loky or ray, got {options['backend']!r}")
    if not (isinstance(options["cv"], int) and options["cv"] >= 2):
        problems.append(f"cv must be an integer >= 2, got {options['cv']!r}")
    if not 0 <= float(options["tolerance"]) <= 1:
        problems.append(f"tolerance must be in [0, 1], got {options['tolerance']}")
    if not float(options["search_time_limit"]) > 0:
        problems.append(
            f"search time limit must be positive seconds, got {options['search_time_limit']}"
        )
    grid = options["param_grid"]
    if grid is not None and (
        not isinstance(grid, dict) or not grid or not all(list(v) for v in grid.values())
    ):
        problems.append(f"the search grid must map parameter names to values, got {grid!r}")
    if problems:
        raise ExplainError("bad search settings: " + "; ".join(problems))


def check_class_names(class_names, ensemble) -> tuple | None:
    """``class_names`` as a tuple of strings (None stays None).

    Raises
    ------
    ExplainError
        Not one distinct name per class of ``ensemble``.
    """
    if class_names is None:
        return None
    names = tuple(str(name) for name in class_names)
    if len(names) != len(ensemble.classes) or len(set(names)) != len(names):
        raise ExplainError(
            f"class names {list(names)} must be {len(ensemble.classes)} distinct names, one "
            f"per class of the ensemble {np.asarray(ensemble.classes).tolist()} in that order"
        )
    return names
