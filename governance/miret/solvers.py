"""Solver backends (HiGHS, Gurobi) for a :class:`~governance.miret.formulation.MilpModel`.

Both receive the same sparse model and return a :class:`SolveResult` with an honest
status: ``"optimal"`` only when the solver proved the gap closed (``<= 1e-9``);
``"gap_limit"`` when it stopped at the requested relative gap; ``"time_limit"`` /
``"time_limit_no_incumbent"`` when the time ran out with / without a feasible solution;
``"stalled"`` when neither the incumbent nor the bound moved by more than
``STALL_TOLERANCE`` (relative) for ``stall_time`` seconds (:class:`StallRule`, checked in
the solver's callback); ``"infeasible"``; ``"interrupted"``; ``"error"``.

``solver="auto"`` uses Gurobi when gurobipy is importable, a license starts, and either
the license is not size-limited or the model fits the size limit; otherwise HiGHS. A
size-limit error from Gurobi (code 10010) falls back to HiGHS with a warning.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from dataclasses import dataclass

import numpy as np

SOLVERS = ("auto", "highs", "gurobi")
GUROBI_SIZE_LIMIT = 2000
GUROBI_SIZE_LIMIT_ERROR = 10010
PROVED_GAP = 1e-9
PROGRESS_INTERVAL = 1.0
STALL_TOLERANCE = 1e-4  # relative move of incumbent or bound that resets the stall clock


@dataclass(frozen=True)
class SolverOptions:
    """The options every backend receives (one place for their meaning).

    ``time_limit`` seconds of solver time; ``mip_gap`` relative gap at which to stop;
    ``threads`` (solver default when None); ``random_state`` solver seed; ``stall_time``
    seconds without progress after which the solve stops (None: never).
    """

    time_limit: float = 60.0
    mip_gap: float = 1e-4
    threads: int | None = None
    random_state: int = 0
    stall_time: float | None = None


class StallRule:
    """Progress reports and the stall rule of one solve, fed by the solver's callback.

    ``update`` returns True when the solve should stop: neither the incumbent nor the
    bound moved by more than ``STALL_TOLERANCE`` times the incumbent's magnitude during
    the last ``stall_time`` seconds.
    """

    def __init__(self, stall_time, progress):
        self.stall_time = math.inf if stall_time is None else float(stall_time)
        self.progress = progress
        self.last_report = -math.inf
        self.last_move = 0.0
        self.incumbent = math.inf
        self.bound = -math.inf
        self.stalled = False

    def expired(self, now) -> bool:
        """Whether ``stall_time`` passed since the last move (no new values)."""
        self.stalled = self.stalled or now - self.last_move >= self.stall_time
        return self.stalled

    def update(self, now, incumbent, bound, improving=False) -> bool:
        if self.progress is not None and (improving or now - self.last_report >= PROGRESS_INTERVAL):
            self.last_report = now
            self.progress(now, incumbent, bound, relative_gap(incumbent, bound))
        step = STALL_TOLERANCE * max(abs(incumbent) if math.isfinite(incumbent) else 1.0, 1e-9)
        if incumbent < self.incumbent - step or bound > self.bound + step:
            self.incumbent, self.bound, self.last_move = incumbent, bound, now
        elif now - self.last_move >= self.stall_time:
            self.stalled = True
        return self.stalled


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


def relative_gap(objective, bound) -> float:
    """``(objective - bound) / |objective|`` in ``[0, 1]`` (MIRET objectives are >= 0, so a
    negative bound is replaced by 0); ``inf`` unless both are finite."""
    if not (math.isfinite(objective) and math.isfinite(bound)):
        return math.inf
    return min(1.0, max(0.0, objective - max(bound, 0.0)) / max(abs(objective), 1e-10))


def _result(solver, version, outcome, x, objective, bound, nodes, wall, progress) -> SolveResult:
    """The :class:`SolveResult` of a finished solve; reports the final progress.

    ``outcome`` is the backend's stop reason: ``"optimal"`` (proved within its gap),
    ``"time_limit"``, ``"infeasible"``, ``"interrupted"`` or ``"error"``.
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
    )


# ---------------------------------------------------------------------- HiGHS
def solve_highs(model, options: SolverOptions, start=None, progress=None) -> SolveResult:
    """Solve with HiGHS (``highspy``); see :func:`solve` for the parameters."""
    import highspy

    begin = time.perf_counter()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(max(options.time_limit, 0.0)))
    h.setOptionValue("mip_rel_gap", float(options.mip_gap))
    h.setOptionValue("random_seed", int(options.random_state))
    if options.threads is not None:
        h.setOptionValue("threads", int(options.threads))
    lp = highspy.HighsLp()
    lp.num_col_ = model.n_vars
    lp.num_row_ = model.n_rows
    lp.col_cost_ = model.c
    lp.col_lower_ = model.col_lower
    lp.col_upper_ = model.col_upper
    lp.row_lower_ = np.where(np.isinf(model.row_lower), -highspy.kHighsInf, model.row_lower)
    lp.row_upper_ = np.where(np.isinf(model.row_upper), highspy.kHighsInf, model.row_upper)
    lp.offset_ = model.objective_constant
    csc = model.A.tocsc()
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = csc.indptr
    lp.a_matrix_.index_ = csc.indices
    lp.a_matrix_.value_ = csc.data
    lp.integrality_ = [
        highspy.HighsVarType.kInteger if v else highspy.HighsVarType.kContinuous
        for v in model.integrality
    ]
    h.passModel(lp)
    if start is not None:
        solution = highspy.HighsSolution()
        solution.col_value = list(np.asarray(start, dtype=np.float64))
        solution.value_valid = True
        h.setSolution(solution)
    rule = StallRule(options.stall_time, progress)

    def report(event, improving=False):
        out = event.data_out
        bound = out.mip_dual_bound if abs(out.mip_dual_bound) < highspy.kHighsInf else -math.inf
        incumbent = out.mip_primal_bound
        if rule.update(out.running_time, incumbent, bound, improving) and not improving:
            event.interrupt()

    def lp_check(event):  # long root LPs: the MIP callback is not reached meanwhile
        if rule.expired(event.data_out.running_time):
            event.interrupt()

    h.cbMipImprovingSolution.subscribe(lambda e: report(e, improving=True))
    h.cbMipInterrupt.subscribe(report)
    h.cbSimplexInterrupt.subscribe(lp_check)
    h.run()
    wall = time.perf_counter() - begin
    info = h.getInfo()
    model_status = h.getModelStatus()
    has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
    x = np.asarray(h.getSolution().col_value, dtype=np.float64) if has_solution else None
    objective = float(info.objective_function_value) if has_solution else math.inf
    bound = float(info.mip_dual_bound)
    if not math.isfinite(bound) or abs(bound) >= highspy.kHighsInf:
        bound = -math.inf
    S = highspy.HighsModelStatus
    if model_status == S.kInfeasible:
        outcome = "infeasible"
    elif model_status == S.kOptimal:
        outcome = "optimal"
    elif model_status == S.kTimeLimit:
        outcome = "time_limit"
    elif model_status in (S.kInterrupt, S.kSolutionLimit, S.kIterationLimit):
        outcome = "interrupted"
    else:
        outcome = "error"
    if outcome == "interrupted" and rule.stalled:
        outcome = "stalled"
    nodes = int(info.mip_node_count)
    return _result("highs", h.version(), outcome, x, objective, bound, nodes, wall, progress)


# ---------------------------------------------------------------------- Gurobi
class GurobiUnavailable(RuntimeError):
    """Gurobi cannot be used here (not installed, no license, or model too large)."""


def _gurobi_env():
    import gurobipy as gp

    env = gp.Env(empty=True)
    env.setParam("OutputFlag", 0)
    env.start()
    return env


@functools.lru_cache(maxsize=1)
def gurobi_license() -> str:
    """``"full"``, ``"size-limited"`` or ``"unavailable"`` (probed once per process)."""
    try:
        import gurobipy as gp

        env = _gurobi_env()
    except Exception:  # noqa: BLE001 - any import/license failure means no Gurobi
        return "unavailable"
    try:
        with gp.Model(env=env) as m:
            m.addMVar(GUROBI_SIZE_LIMIT + 1)
            m.optimize()
        return "full"
    except gp.GurobiError as exc:
        if exc.errno == GUROBI_SIZE_LIMIT_ERROR:
            return "size-limited"
        return "unavailable"
    finally:
        env.dispose()


def gurobi_fits(model) -> bool:
    """Whether the installed Gurobi license can solve ``model``."""
    license_kind = gurobi_license()
    if license_kind == "full":
        return True
    return (
        license_kind == "size-limited"
        and model.n_vars <= GUROBI_SIZE_LIMIT
        and model.n_rows <= GUROBI_SIZE_LIMIT
    )


def solve_gurobi(model, options: SolverOptions, start=None, progress=None) -> SolveResult:
    """Solve with Gurobi's matrix API; raises :class:`GurobiUnavailable` when it cannot."""
    begin = time.perf_counter()
    try:
        import gurobipy as gp
        from gurobipy import GRB

        env = _gurobi_env()
    except Exception as exc:
        raise GurobiUnavailable(f"Gurobi is not usable here: {exc}") from exc
    try:
        with gp.Model(env=env) as m:
            m.Params.TimeLimit = float(max(options.time_limit, 0.0))
            m.Params.MIPGap = float(options.mip_gap)
            m.Params.Seed = int(options.random_state)
            if options.threads is not None:
                m.Params.Threads = int(options.threads)
            vtype = np.where(model.integrality == 1, GRB.BINARY, GRB.CONTINUOUS)
            lb = model.col_lower.copy()
            ub = model.col_upper.copy()
            x = m.addMVar(model.n_vars, lb=lb, ub=ub, vtype=vtype)
            m.setObjective(model.c @ x + model.objective_constant, GRB.MINIMIZE)
            lo, up = model.row_lower, model.row_upper
            for mask, sense, rhs in (
                (lo == up, GRB.EQUAL, lo),
                (np.isfinite(up) & (lo != up), GRB.LESS_EQUAL, up),
                (np.isfinite(lo) & (lo != up), GRB.GREATER_EQUAL, lo),
            ):
                if mask.any():
                    m.addMConstr(model.A[mask], x, sense, rhs[mask])
            if start is not None:
                x.Start = np.asarray(start, dtype=np.float64)
            rule = StallRule(options.stall_time, progress)

            def callback(cb_model, where):
                if where not in (GRB.Callback.MIP, GRB.Callback.MIPSOL):
                    return
                now = cb_model.cbGet(GRB.Callback.RUNTIME)
                if where == GRB.Callback.MIP:
                    best = cb_model.cbGet(GRB.Callback.MIP_OBJBST)
                    bound = cb_model.cbGet(GRB.Callback.MIP_OBJBND)
                else:
                    best = cb_model.cbGet(GRB.Callback.MIPSOL_OBJBST)
                    bound = cb_model.cbGet(GRB.Callback.MIPSOL_OBJBND)
                    best = min(best, cb_model.cbGet(GRB.Callback.MIPSOL_OBJ))
                best = best if best < GRB.INFINITY else math.inf
                if rule.update(now, best, bound, where == GRB.Callback.MIPSOL):
                    cb_model.terminate()

            m.optimize(callback)
            wall = time.perf_counter() - begin
            has_solution = m.SolCount > 0
            objective = float(m.ObjVal) if has_solution else math.inf
            bound = float(m.ObjBound) if m.Status != GRB.INFEASIBLE else math.inf
            if m.Status == GRB.INFEASIBLE:
                outcome = "infeasible"
            elif m.Status == GRB.OPTIMAL:
                outcome = "optimal"
            elif m.Status == GRB.TIME_LIMIT:
                outcome = "time_limit"
            elif m.Status == GRB.INTERRUPTED and rule.stalled:
                outcome = "stalled"
            elif m.Status in (GRB.INTERRUPTED, GRB.NODE_LIMIT, GRB.SOLUTION_LIMIT):
                outcome = "interrupted"
            else:
                outcome = "error"
            solution = np.asarray(x.X, dtype=np.float64) if has_solution else None
            nodes = int(m.NodeCount)
    except gp.GurobiError as exc:
        if exc.errno == GUROBI_SIZE_LIMIT_ERROR:
            raise GurobiUnavailable(
                f"the model ({model.n_vars} variables, {model.n_rows} constraints) is too "
                "large for the size-limited Gurobi license"
            ) from exc
        raise
    finally:
        env.dispose()
    version = ".".join(str(v) for v in gp.gurobi.version())
    return _result("gurobi", version, outcome, solution, objective, bound, nodes, wall, progress)


# ---------------------------------------------------------------------- dispatch
def solve(
    model,
    solver="auto",
    time_limit=60.0,
    mip_gap=1e-4,
    threads=None,
    random_state=0,
    stall_time=None,
    start=None,
    progress=None,
) -> SolveResult:
    """Solve a MilpModel.

    Parameters
    ----------
    model : MilpModel
    solver : {"auto", "highs", "gurobi"}
    time_limit : float
        Seconds of solver time.
    mip_gap : float
        Relative gap at which to stop.
    threads : int, optional
        Solver threads (solver default when None).
    random_state : int
        Solver seed.
    stall_time : float, optional
        Stop (status ``"stalled"``) after this many seconds without progress.
    start : ndarray, optional
        A feasible solution vector (warm start).
    progress : callable, optional
        Called as ``progress(elapsed, incumbent, bound, gap)`` at most once a second
        while solving, at each improving solution, and once at the end.

    Returns
    -------
    SolveResult
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    options = SolverOptions(time_limit, mip_gap, threads, random_state, stall_time)
    if solver == "highs" or (solver == "auto" and not gurobi_fits(model)):
        return solve_highs(model, options, start, progress)
    try:
        return solve_gurobi(model, options, start, progress)
    except GurobiUnavailable as exc:
        warnings.warn(f"{exc}; solving with HiGHS instead", RuntimeWarning, stacklevel=2)
        return solve_highs(model, options, start, progress)
