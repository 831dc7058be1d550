"""What every solver backend shares: the options it receives, the work-counted stop
rules (:class:`StallRule`) and the honest :class:`SolveResult`.

A result's status is ``"optimal"`` only when the solver proved the gap closed
(``<= 1e-9``); ``"gap_limit"`` when it stopped at the requested relative gap;
``"stalled"`` when neither the incumbent nor the bound moved by more than
``STALL_TOLERANCE`` (relative) during ``stall_work`` units of solver work;
``"work_limit"`` when the work budget ran out; ``"time_limit"`` /
``"time_limit_no_incumbent"`` when the safety cap in seconds ran out with / without a
feasible solution; ``"infeasible"``; ``"interrupted"``; ``"error"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from miret_governance.governance.errors import GovernanceError

if TYPE_CHECKING:  # importing this module stays cheap: `govern --help` reads the default
    import numpy as np

DEFAULT_TIME_LIMIT = 60.0
"""Seconds of the whole fit's safety cap: the one definition that ``MiretSurrogate``,
``solve``, :class:`SolverOptions` and the ``govern`` help read."""
GLOBAL_MILP_BINARIES = 400
"""Largest whole MILP (binaries) HiGHS is given after the node MILPs
(:mod:`governance.miret.fit.engine`): it proves optimality up to about this size
(0.1-0.3 s); beyond, it stalls at the root (gaps of 70-95% on 2,000-row samples) and
bettered the warm start in none of the 42 example-dataset fits. Here, so that
:mod:`governance.trust.attainable` reads it without importing the fit."""
PROVED_GAP = 1e-9
PROGRESS_INTERVAL = 1.0
STALL_TOLERANCE = 1e-4  # relative move of incumbent or bound that restarts the stall window


@dataclass(frozen=True)
class SolverOptions:
    """The options every backend receives (one place for their meaning).

    ``time_limit`` seconds of solver time (the safety cap); ``mip_gap`` relative gap at
    which to stop; ``threads`` solver threads (1 keeps the solve deterministic);
    ``random_state`` solver seed; ``stall_work`` units of work without progress after
    which the solve stops and ``work_limit`` units of work in all (None: never).
    """

    time_limit: float = DEFAULT_TIME_LIMIT
    mip_gap: float = 1e-4
    threads: int = 1
    random_state: int = 0
    stall_work: float | None = None
    work_limit: float | None = None


class SolverUnavailable(GovernanceError, RuntimeError):
    """A backend cannot solve here (not installed, no license, model too large); the
    solve falls back to its table entry's ``fallback`` backend.

    Exit code 2. Also a RuntimeError, for callers that catch a solver that cannot run
    as one.
    """


class StallRule:
    """Progress reports and the work-counted stop rules of one solve, fed by callbacks.

    ``update`` returns True when the solve should stop: neither the incumbent nor the
    bound moved by more than ``STALL_TOLERANCE`` times the incumbent's magnitude during
    the last ``stall_work`` units of work (``stalled``), or ``work_limit`` units were
    spent (``work_limit_hit``). Seconds only pace the progress reports.
    """

    def __init__(self, stall_work, work_limit, progress):
        self.stall_work = math.inf if stall_work is None else float(stall_work)
        self.work_limit = math.inf if work_limit is None else float(work_limit)
        self.progress = progress
        self.last_report = -math.inf
        self.last_move = 0.0
        self.work = 0.0
        self.incumbent = math.inf
        self.bound = -math.inf
        self.stalled = False
        self.work_limit_hit = False

    def report(self, now, incumbent, bound, improving=False):
        """Progress at most every ``PROGRESS_INTERVAL`` seconds and at each new incumbent."""
        if self.progress is not None and (improving or now - self.last_report >= PROGRESS_INTERVAL):
            self.last_report = now
            self.progress(now, incumbent, bound, relative_gap(incumbent, bound))

    def update(self, work, incumbent, bound) -> bool:
        """Record the state after ``work`` units; True when the solve should stop."""
        self.work = work
        step = STALL_TOLERANCE * max(abs(incumbent) if math.isfinite(incumbent) else 1.0, 1e-9)
        if incumbent < self.incumbent - step or bound > self.bound + step:
            self.incumbent, self.bound, self.last_move = incumbent, bound, work
        elif work - self.last_move >= self.stall_work:
            self.stalled = True
        self.work_limit_hit = self.work_limit_hit or work >= self.work_limit
        return self.stalled or self.work_limit_hit

    @property
    def outcome(self) -> str:
        """The stop reason of an interrupted solve."""
        if self.stalled:
            return "stalled"
        return "work_limit" if self.work_limit_hit else "interrupted"


@dataclass
class SolveResult:
    """Outcome of one MILP solve.

    ``x`` is the best solution found (``None`` without incumbent); ``objective`` and
    ``bound`` include the model's objective constant; ``gap`` is relative
    ``(objective - bound) / |objective|`` (``inf`` without incumbent).
    """

    solver: str
    solver_version: str
    status: str
    x: np.ndarray | None
    objective: float
    bound: float
    gap: float
    nodes: int
    wall_time: float
    work: float


def relative_gap(objective, bound) -> float:
    """``(objective - bound) / |objective|`` in ``[0, 1]`` (MIRET objectives are >= 0, so a
    negative bound is replaced by 0); ``inf`` unless both are finite."""
    if not (math.isfinite(objective) and math.isfinite(bound)):
        return math.inf
    return min(1.0, max(0.0, objective - max(bound, 0.0)) / max(abs(objective), 1e-10))


def finished_result(solver, version, outcome, x, objective, bound, nodes, wall, work, progress):
    """The :class:`SolveResult` of a finished solve; reports the final progress.

    ``outcome`` is the backend's stop reason: ``"optimal"`` (proved within its gap),
    ``"time_limit"``, ``"stalled"``, ``"work_limit"``, ``"infeasible"``,
    ``"interrupted"`` or ``"error"``.
    """
    gap = relative_gap(objective, bound)
    if outcome == "optimal":
        status = "optimal" if gap <= PROVED_GAP else "gap_limit"
    elif outcome == "time_limit":
        status = "time_limit" if x is not None else "time_limit_no_incumbent"
    else:
        status = outcome
    if progress is not None:
        progress(wall, objective, bound, gap)
    return SolveResult(
        solver=solver,
        solver_version=version,
        status=status,
        x=x,
        objective=objective,
        bound=bound,
        gap=gap,
        nodes=nodes,
        wall_time=wall,
        work=float(work),
    )
