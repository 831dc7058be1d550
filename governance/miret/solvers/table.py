"""The one table of MILP backends: :data:`SOLVERS` maps a name to its :class:`Backend`,
:func:`backend` makes the ``"auto"`` choice, and :func:`solve` and :func:`worth_solving`
dispatch through it (no other module compares solver names).

``solver="auto"`` takes the first backend of :data:`AUTO_ORDER` whose probe says it can
solve the model here: Gurobi when gurobipy is importable, a license starts, and either
the license is not size-limited or the model fits the size limit; otherwise HiGHS. A
backend that raises :class:`~governance.miret.solvers.solve_result.SolverUnavailable`
(Gurobi's size-limit error 10010) falls back to its entry's ``fallback`` with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.miret.solvers.gurobi import (
    gurobi_fits,
    gurobi_refuses,
    solve_gurobi,
)
from miret_governance.governance.miret.solvers.highs import solve_highs
from miret_governance.governance.miret.solvers.solve_result import (
    DEFAULT_TIME_LIMIT,
    SolveResult,
    SolverOptions,
    SolverUnavailable,
)


@dataclass(frozen=True)
class Backend:
    """One MILP backend.

    ``solve(model, options, start, progress)`` returns a :class:`SolveResult`;
    ``fits(model)`` is its availability probe (can it solve ``model`` here: installed,
    licensed, within the license's size); ``stalls_beyond_binaries``: beyond a caller's
    number of binaries it stalls without bettering the warm start, so such a model is
    not worth a solve by it (HiGHS); ``fallback`` the backend that solves when this one
    raises ``SolverUnavailable``; ``package`` the distribution whose version decides
    its trees (recorded in a surrogate's environment); ``label`` its name in messages.
    """

    name: str
    label: str
    solve: Callable[..., SolveResult]
    fits: Callable[[object], bool]
    stalls_beyond_binaries: bool
    package: str
    fallback: str | None = None


AUTO = "auto"
SOLVERS: dict[str, Backend] = {
    "highs": Backend(
        name="highs",
        label="HiGHS",
        solve=solve_highs,
        fits=lambda model: True,
        stalls_beyond_binaries=True,
        package="highspy",
    ),
    "gurobi": Backend(
        name="gurobi",
        label="Gurobi",
        solve=solve_gurobi,
        fits=gurobi_fits,
        stalls_beyond_binaries=False,
        package="gurobipy",
        fallback="highs",
    ),
}
AUTO_ORDER = ("gurobi", "highs")
"""``"auto"``: the first of these whose ``fits`` probe accepts the model."""
SOLVER_CHOICES = (AUTO, *SOLVERS)
"""Every value a ``solver`` parameter accepts."""


def backend(model, solver: str) -> Backend:
    """The backend ``solver`` names, or for ``"auto"`` the first of :data:`AUTO_ORDER`
    that can solve ``model`` here."""
    if solver not in SOLVER_CHOICES:
        raise InvalidInputError(f"solver must be one of {SOLVER_CHOICES}, got {solver!r}")
    if solver != AUTO:
        return SOLVERS[solver]
    return next(SOLVERS[name] for name in AUTO_ORDER if SOLVERS[name].fits(model))


def solver_package(solver: str) -> str | None:
    """The distribution of the backend a report names (``None`` for ``"none"``: no
    MILP was solved)."""
    entry = SOLVERS.get(solver)
    return None if entry is None else entry.package


def worth_solving(model, solver: str, max_binaries: int) -> bool:
    """Whether ``model`` goes to the solver at all: always when its backend does not
    stall on size (Gurobi: ``solver="gurobi"``, or ``"auto"`` with a licence for its
    size); otherwise (HiGHS) only up to ``max_binaries`` binaries (beyond, it stalls
    without bettering the warm start, so the time is given back)."""
    chosen = backend(model, solver)
    return not chosen.stalls_beyond_binaries or model.n_binaries <= max_binaries


def whole_milp_backend(model, solver: str, max_binaries: int) -> tuple[str | None, str]:
    """``(name, "")``: the backend that solves the whole MILP ``model``; ``(None, why)``
    when none is attempted: ``"licence_size"`` (Gurobi's size-limited license is too
    small for it, and HiGHS would stall on its binaries) or ``"too_large"`` (HiGHS would
    stall, no Gurobi license for it). A backend that cannot take the model is never
    attempted: its fallback is considered instead, with no warning."""
    chosen = backend(model, solver)
    if not chosen.fits(model) and chosen.fallback is not None:
        chosen = SOLVERS[chosen.fallback]
    if chosen.stalls_beyond_binaries and model.n_binaries > max_binaries:
        return None, "licence_size" if gurobi_refuses(model) else "too_large"
    return chosen.name, ""


def solve(
    model,
    solver=AUTO,
    time_limit=DEFAULT_TIME_LIMIT,
    mip_gap=1e-4,
    threads=1,
    random_state=0,
    stall_work=None,
    work_limit=None,
    start=None,
    progress=None,
) -> SolveResult:
    """Solve a MilpModel.

    Parameters
    ----------
    model : MilpModel
    solver : {"auto", "highs", "gurobi"}
        A name of :data:`SOLVERS`, or ``"auto"`` (:func:`backend`).
    time_limit : float
        Seconds of solver time.
    mip_gap : float
        Relative gap at which to stop.
    threads : int
        Solver threads; 1 keeps the solve deterministic.
    random_state : int
        Solver seed.
    stall_work : float, optional
        Stop (status ``"stalled"``) after this many units of work without progress.
    work_limit : float, optional
        Stop (status ``"work_limit"``) after this many units of work.
    start : ndarray, optional
        A feasible solution vector (warm start).
    progress : callable, optional
        Called as ``progress(elapsed, incumbent, bound, gap)`` at most once a second
        while solving, at each improving solution, and once at the end.

    Returns
    -------
    SolveResult
    """
    chosen = backend(model, solver)
    options = SolverOptions(time_limit, mip_gap, threads, random_state, stall_work, work_limit)
    try:
        return chosen.solve(model, options, start, progress)
    except SolverUnavailable as exc:
        if chosen.fallback is None:
            raise
        fallback = SOLVERS[chosen.fallback]
        warnings.warn(f"{exc}; solving with {fallback.label} instead", RuntimeWarning, stacklevel=2)
        return fallback.solve(model, options, start, progress)
