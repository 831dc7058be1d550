"""One explain request: what the caller asked for, with every default filled in.

:class:`ExplainRequest` is built once by :func:`flavors.explain.explain_model_version`
and handed, frozen, to every stage of :mod:`flavors.stages`. The hyperparameter defaults
come from one place, the estimator: :func:`estimator_defaults`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from flavors.registry import URI_PREFIX

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
    from governance.miret import MiretSurrogate

    return MiretSurrogate().get_params()


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
        text = json.dumps(identity, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def params(self) -> dict:
        """The run parameters that make the explanation reproducible."""
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
            "explain_digest": self.digest,
            **self.hyperparameters(),
        }
