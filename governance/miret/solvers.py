"""Solver backends (HiGHS, Gurobi) for a :class:`~governance.miret.formulation.MilpModel`.

Both receive the same sparse model and return a :class:`SolveResult` with an honest
status: ``"optimal"`` only when the solver proved the gap closed (``<= 1e-9``);
``"gap_limit"`` when it stopped at the requested relative gap; ``"time_limit"`` /
``"time_limit_no_incumbent"`` when the time ran out with / without a feasible solution;
``"infeasible"``; ``"interrupted"``; ``"error"``.

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
    """``(objective - bound) / |objective|`` clipped at 0; ``inf`` unless both are finite."""
    if not (math.isfinite(objective) and math.isfinite(bound)):
        return math.inf
    return max(0.0, objective - bound) / max(abs(objective), 1e-10)


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
def solve_highs(
    model,
    time_limit=60.0,
    mip_gap=1e-4,
    threads=None,
    random_state=0,
    start=None,
    progress=None,
) -> SolveResult:
    """Solve with HiGHS (``highspy``); see :func:`solve` for the parameters."""
    import highspy

    begin = time.perf_counter()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(max(time_limit, 0.0)))
    h.setOptionValue("mip_rel_gap", float(mip_gap))
    h.setOptionValue("random_seed", int(random_state))
    if threads is not None:
        h.setOptionValue("threads", int(threads))
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
    if progress is not None:
        last = [-math.inf]

        def report(event, force=False):
            out = event.data_out
            now = out.running_time
            if force or now - last[0] >= PROGRESS_INTERVAL:
                last[0] = now
                progress(now, out.mip_primal_bound, out.mip_dual_bound, out.mip_gap)

        h.cbMipImprovingSolution.subscribe(lambda e: report(e, force=True))
        h.cbMipInterrupt.subscribe(report)
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


def solve_gurobi(
    model,
    time_limit=60.0,
    mip_gap=1e-4,
    threads=None,
    random_state=0,
    start=None,
    progress=None,
) -> SolveResult:
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
            m.Params.TimeLimit = float(max(time_limit, 0.0))
            m.Params.MIPGap = float(mip_gap)
            m.Params.Seed = int(random_state)
            if threads is not None:
                m.Params.Threads = int(threads)
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
            callback = None
            if progress is not None:
                last = [-math.inf]

                def callback(cb_model, where):
                    if where not in (GRB.Callback.MIP, GRB.Callback.MIPSOL):
                        return
                    now = cb_model.cbGet(GRB.Callback.RUNTIME)
                    if where == GRB.Callback.MIP:
                        if now - last[0] < PROGRESS_INTERVAL:
                            return
                        best = cb_model.cbGet(GRB.Callback.MIP_OBJBST)
                        bound = cb_model.cbGet(GRB.Callback.MIP_OBJBND)
                    else:
                        best = cb_model.cbGet(GRB.Callback.MIPSOL_OBJBST)
                        bound = cb_model.cbGet(GRB.Callback.MIPSOL_OBJBND)
                        best = min(best, cb_model.cbGet(GRB.Callback.MIPSOL_OBJ))
                    last[0] = now
                    progress(now, best, bound, relative_gap(best, bound))

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
    options = {
        "time_limit": time_limit,
        "mip_gap": mip_gap,
        "threads": threads,
        "random_state": random_state,
        "start": start,
        "progress": progress,
    }
    if solver == "highs" or (solver == "auto" and not gurobi_fits(model)):
        return solve_highs(model, **options)
    try:
        return solve_gurobi(model, **options)
    except GurobiUnavailable as exc:
        warnings.warn(f"{exc}; solving with HiGHS instead", RuntimeWarning, stacklevel=2)
        return solve_highs(model, **options)
