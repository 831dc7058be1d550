"""The Gurobi backend (``gurobipy``'s matrix API), used when a license fits the model.

``gurobi_license`` probes once per process whether the license is full, size-limited
(models up to :data:`GUROBI_SIZE_LIMIT` variables and constraints) or unavailable. A
Gurobi work unit counts as one unit of :class:`~governance.miret.solve_result.StallRule`.
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np

from miret_governance.governance.miret.solvers.solve_result import (
    SolveResult,
    SolverOptions,
    SolverUnavailable,
    StallRule,
    finished_result,
)

GUROBI_SIZE_LIMIT = 2000
GUROBI_SIZE_LIMIT_ERROR = 10010


class GurobiUnavailable(SolverUnavailable):
    """Gurobi cannot be used here (not installed, no license, or model too large).

    Exit code 2. Also a RuntimeError, as before, for callers that catch a solver that
    cannot run as one.
    """


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


def gurobi_refuses(model) -> bool:
    """Whether Gurobi is installed with a size-limited license that ``model`` exceeds
    (checked on its size, before any Gurobi model is built)."""
    return gurobi_license() == "size-limited" and not gurobi_fits(model)


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
            stopped = []  # our callback's terminate(); any other interrupt is the user's
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
                    stopped.append(True)
                    cb_model.terminate()

            m.optimize(callback)
            if m.Status == GRB.INTERRUPTED and not stopped:
                # Gurobi catches SIGINT while it optimizes (Ctrl-C, or a signal sent to
                # the process) and stops with this status: the caller's interrupt
                raise KeyboardInterrupt("interrupted while Gurobi was solving")
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
    return finished_result(
        "gurobi", version, outcome, solution, objective, bound, nodes, wall, work, progress
    )
