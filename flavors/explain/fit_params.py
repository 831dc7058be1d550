"""The estimator's parameters of one explanation as one checked, immutable object.

:class:`FitParams` holds every ``MiretSurrogate`` parameter but the ensemble: defaults
come from the estimator (:func:`estimator_defaults`; the depth's is
:data:`~flavors.explain.defaults.ENSEMBLE_DEPTH`, an explicit depth), values are checked
by the estimator's own constraints, and :func:`check_parameters` is the one place they
are resolved, before any work; the depth is checked by :func:`check_depth` alone. The
object travels unchanged from the CLI to ``MiretSurrogate(ensemble, **params)``
(:class:`flavors.request.ExplainRequest` field ``fit``).
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral, Real
from types import MappingProxyType

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.explain.defaults import AUTO_DEPTH, ENSEMBLE_DEPTH, MAX_DEPTH

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


def _auto_as_none(depth):
    """``depth`` with the word :data:`AUTO_DEPTH` read as None (the estimator's choice)."""
    is_auto = isinstance(depth, str) and depth.strip().lower() == AUTO_DEPTH
    return None if is_auto else depth


def check_depth(depth: int | str | None, ensemble=None) -> int | None:
    """The surrogate depth, checked: None (or ``"auto"``, :data:`AUTO_DEPTH`) for a depth
    the estimator chooses on held-out folds; else at most :data:`MAX_DEPTH` and, for an
    ``ensemble``, between 1 and its depth (:data:`ENSEMBLE_DEPTH` then takes
    :func:`governance.miret.problem.problem.default_depth`).

    Raises
    ------
    ExplainError
        A depth out of range, naming the bound.
    """
    from miret_governance.governance.miret.problem.problem import default_depth

    depth = _auto_as_none(depth)
    if depth is None:
        return None
    if ensemble is not None and depth == ENSEMBLE_DEPTH:
        depth = default_depth(ensemble)
    if depth > MAX_DEPTH:
        raise ExplainError(f"depth must be at most {MAX_DEPTH}, got {depth}")
    if ensemble is not None and not 1 <= depth <= ensemble.max_depth:
        raise ExplainError(
            f"depth must be between 1 and the ensemble's depth {ensemble.max_depth}, got {depth}"
        )
    return depth


def _plain(name: str, value):
    """``value`` as the plain Python type of parameter ``name``'s constraint (an int
    time limit becomes a float, a numpy integer an int), so equal requests digest alike."""
    from sklearn.utils._param_validation import Interval

    from miret_governance.governance.miret import MiretSurrogate

    if value is None or isinstance(value, str):
        return value
    if name == "alpha_grid":  # a list, as JSON records it
        from miret_governance.governance.miret.fit.grid import checked_alpha_grid

        return list(checked_alpha_grid(value))
    kinds = {c.type for c in MiretSurrogate._parameter_constraints[name] if isinstance(c, Interval)}
    if Integral in kinds:
        return int(value)
    if Real in kinds:
        return float(value)
    return bool(value)


class FitParams(Mapping):
    """The estimator's parameters of one explanation, resolved and checked once.

    Every ``MiretSurrogate`` parameter but the ensemble: the ``given`` ones, the others
    from ``MiretSurrogate().get_params()``, checked by the estimator's own constraints
    (and :func:`check_depth`) when built. Immutable; ``MiretSurrogate(ensemble,
    **params)`` and the search take it as it is. Values read as items or attributes
    (``params["time_limit"]``, ``params.time_limit``).

    Parameters
    ----------
    **given
        ``MiretSurrogate`` parameters; ``depth`` defaults to :data:`ENSEMBLE_DEPTH`
        (0: the ensemble's depth, at most 4, resolved by :meth:`for_ensemble`), the one
        default that is not the estimator's. ``depth=None`` (or ``"auto"``) is the
        estimator's own: a depth chosen on held-out folds, recorded as ``depth`` =
        ``auto`` and ``depth_chosen`` = the depth fitted (``govern explain --depth auto``).

    Raises
    ------
    ExplainError
        An unknown parameter, or a value out of range (NaN, negative time limit, negative
        depth or above :data:`MAX_DEPTH`, ``max_rows`` below 2, ...), naming it.

    Examples
    --------
    >>> params = FitParams(time_limit=5, depth=2)
    >>> params.time_limit, params["depth"], params.solver
    (5.0, 2, 'auto')
    >>> FitParams(depth="auto").depth is None
    True
    """

    __slots__ = ("_values",)

    def __init__(self, **given):
        from sklearn.utils._param_validation import InvalidParameterError

        from miret_governance.governance.miret import MiretSurrogate

        defaults = estimator_defaults()
        del defaults["ensemble"]
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            raise ExplainError(
                f"unknown estimator parameters {unknown}; MiretSurrogate takes {sorted(defaults)}"
            )
        values = {**defaults, "depth": ENSEMBLE_DEPTH, **given}
        values["depth"] = _auto_as_none(values["depth"])
        estimator_depth = None if values["depth"] == ENSEMBLE_DEPTH else values["depth"]
        try:
            MiretSurrogate(**{**values, "depth": estimator_depth})._validate_params()
        except InvalidParameterError as exc:
            raise ExplainError(f"{exc}; nothing was started") from None
        check_depth(values["depth"])
        plain = {name: _plain(name, value) for name, value in values.items()}
        object.__setattr__(self, "_values", MappingProxyType(plain))

    def __getitem__(self, name: str):
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in self._values:
            raise AttributeError(f"FitParams has no parameter {name!r}")
        return self._values[name]

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError("FitParams is immutable: use replace(**changes)")

    def __repr__(self) -> str:
        return f"FitParams({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"

    @classmethod
    def recorded(cls, values: Mapping) -> FitParams:
        """The parameters of a recorded request: one recorded before a parameter existed
        takes that parameter's legacy value (``LEGACY_PARAMS``, how it fitted then), not
        today's default."""
        from miret_governance.governance.miret.fit.estimator import LEGACY_PARAMS

        return cls(**{**LEGACY_PARAMS, **values})

    def identity(self) -> dict:
        """The values that make two requests the same fit: every parameter but those at
        their legacy value (``LEGACY_PARAMS``), so a request digests as it did before
        those parameters existed."""
        from miret_governance.governance.miret.fit.estimator import LEGACY_PARAMS

        return {
            name: value
            for name, value in self._values.items()
            if name not in LEGACY_PARAMS or value != LEGACY_PARAMS[name]
        }

    def replace(self, **changes) -> FitParams:
        """A new, checked FitParams with ``changes``."""
        return FitParams(**{**self._values, **changes})

    def for_ensemble(self, ensemble) -> FitParams:
        """These parameters with the depth resolved and checked for ``ensemble``
        (:func:`check_depth`)."""
        return self.replace(depth=check_depth(self.depth, ensemble))


def check_parameters(given: dict | FitParams, test_size: float | None) -> FitParams:
    """The estimator's parameters, checked before any work starts: the one place their
    defaults are resolved.

    Parameters
    ----------
    given : dict or FitParams
        Parameters by name (None: the default), or the checked object itself.
    test_size : float or None
        The holdout share, checked too (None: a test file is given).

    Raises
    ------
    ExplainError
        A bad parameter (:class:`FitParams`), or ``test_size`` outside (0, 1).
    """
    params = (
        given
        if isinstance(given, FitParams)
        else FitParams(**{k: v for k, v in given.items() if v is not None})
    )
    if test_size is not None and not 0 < test_size < 1:
        raise ExplainError(f"test_size must be in (0, 1), got {test_size}")
    return params
