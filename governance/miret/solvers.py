"""Solver backends (HiGHS, Gurobi) for a :class:`~governance.miret.formulation.MilpModel`.

Both receive the same sparse model and return a :class:`SolveResult` with an honest
status: ``"optimal"`` only when the solver proved the gap closed (``<= 1e-9``);
``"gap_limit"`` when it stopped at the requested relative gap; ``"stalled"`` when neither
the incumbent nor the bound moved by more than ``STALL_TOLERANCE`` (relative) during
``stall_work`` units of solver work (:class:`StallRule`); ``"work_limit"`` when the work
budget ran out; ``"time_limit"`` / ``"time_limit_no_incumbent"`` when the safety cap in
seconds ran out with / without a feasible solution; ``"infeasible"``; ``"interrupted"``;
``"error"``.

Work, not seconds, decides every stop but the safety cap, so one model, start and seed
give one result under any load. A unit of work is about one second of one core on a
small model: ``HIGHS_CHECKS_PER_UNIT`` of HiGHS's limit checks (its MIP interrupt
callbacks, called at fixed points of its search), or one Gurobi work unit. With one
thread (the default) HiGHS is deterministic per limit check; with more it is not.

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
STALL_TOLERANCE = 1e-4  # relative move of incumbent or bound that restarts the stall window
HIGHS_CHECKS_PER_UNIT = 50  # HiGHS limit checks per unit of work (~1 s of a small model)


@dataclass(frozen=True)
class SolverOptions:
    """The options every backend receives (one place for their meaning).

    ``time_limit`` seconds of solver time (the safety cap); ``mip_gap`` relative gap at
    which to stop; ``threads`` solver threads (1 keeps the solve deterministic);
    ``random_state`` solver seed; ``stall_work`` units of work without progress after
    which the solve stops and ``work_limit`` units of work in all (None: never).
    """

    time_limit: float = 60.0
    mip_gap: float = 1e-4
    threads: int = 1
    random_state: int = 0
    stall_work: float | None = None
    work_limit: float | None = None


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


def _result(solver, version, outcome, x, objective, bound, nodes, wall, work, progress):
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
    h.setOptionValue("threads", int(options.threads))
    # RINS and RENS solve sub-MIPs that call no callback: no work is counted, no stop or
    # interrupt reaches them for seconds (and they overran the time limit); the warm
    # start already gives the solver a good incumbent
    h.setOptionValue("mip_heuristic_run_rins", False)
    h.setOptionValue("mip_heuristic_run_rens", False)
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
    rule = StallRule(options.stall_work, options.work_limit, progress)
    checks = 0

    def state(event):
        """Seconds, incumbent and bound (``-inf`` until HiGHS has one) of a callback."""
        out = event.data_out
        bound = out.mip_dual_bound if abs(out.mip_dual_bound) < highspy.kHighsInf else -math.inf
        return out.running_time, out.mip_primal_bound, bound

    def check(event):  # called at fixed points of the search: the unit of work
        nonlocal checks
        checks += 1
        now, incumbent, bound = state(event)
        rule.report(now, incumbent, bound)
        if rule.update(checks / HIGHS_CHECKS_PER_UNIT, incumbent, bound):
            event.interrupt()

    def improving(event):
        rule.report(*state(event), improving=True)

    h.cbMipImprovingSolution.subscribe(improving)
    h.cbMipInterrupt.subscribe(check)
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
    if outcome == "interrupted":
        outcome = rule.outcome
    nodes = int(info.mip_node_count)
    version = h.version()
    return _result("highs", version, outcome, x, objective, bound, nodes, wall, rule.work, progress)


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
            m.Params.Threads = int(options.threads)
            if options.work_limit is not None:
                m.Params.WorkLimit = float(options.work_limit)
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
            rule = StallRule(options.stall_work, None, progress)  # WorkLimit caps the work
            where_values = {
                GRB.Callback.MIP: (GRB.Callback.MIP_OBJBST, GRB.Callback.MIP_OBJBND),
                GRB.Callback.MIPSOL: (GRB.Callback.MIPSOL_OBJBST, GRB.Callback.MIPSOL_OBJBND),
                GRB.Callback.MIPNODE: (GRB.Callback.MIPNODE_OBJBST, GRB.Callback.MIPNODE_OBJBND),
            }

            def callback(cb_model, where):
                if where not in where_values:
                    return
                best_code, bound_code = where_values[where]
                best, bound = cb_model.cbGet(best_code), cb_model.cbGet(bound_code)
                if where == GRB.Callback.MIPSOL:
                    best = min(best, cb_model.cbGet(GRB.Callback.MIPSOL_OBJ))
                best = best if best < GRB.INFINITY else math.inf
                now = cb_model.cbGet(GRB.Callback.RUNTIME)
                rule.report(now, best, bound, improving=where == GRB.Callback.MIPSOL)
                # MIP callbacks come on a clock; MIPNODE and MIPSOL at fixed search points
                fixed_point = where != GRB.Callback.MIP
                if fixed_point and rule.update(cb_model.cbGet(GRB.Callback.WORK), best, bound):
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
            elif m.Status == GRB.WORK_LIMIT:
                outcome = "work_limit"
            elif m.Status == GRB.INTERRUPTED:
                outcome = rule.outcome
            elif m.Status in (GRB.NODE_LIMIT, GRB.SOLUTION_LIMIT):
                outcome = "interrupted"
            else:
                outcome = "error"
            solution = np.asarray(x.X, dtype=np.float64) if has_solution else None
            nodes = int(m.NodeCount)
            work = float(m.Work)
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
    return _result(
        "gurobi", version, outcome, solution, objective, bound, nodes, wall, work, progress
    )


# ---------------------------------------------------------------------- dispatch
def solve(
    model,
    solver="auto",
    time_limit=60.0,
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
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    options = SolverOptions(time_limit, mip_gap, threads, random_state, stall_work, work_limit)
    if solver == "highs" or (solver == "auto" and not gurobi_fits(model)):
        return solve_highs(model, options, start, progress)
    try:
        return solve_gurobi(model, options, start, progress)
    except GurobiUnavailable as exc:
        warnings.warn(f"{exc}; solving with HiGHS instead", RuntimeWarning, stacklevel=2)
        return solve_highs(model, options, start, progress)
