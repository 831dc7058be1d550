"""The HiGHS backend of the solver table (:mod:`governance.miret.solvers.table`, which
also chooses between it and Gurobi, :mod:`governance.miret.solvers.gurobi`). Both receive
the same sparse model and return a :class:`~governance.miret.solvers.solve_result.SolveResult`
with an honest status (the statuses: :mod:`governance.miret.solvers.solve_result`).

Work, not seconds, decides every stop but the safety cap, so one model, start and seed
give one result under any load. A unit is about one second of one core: HiGHS tells its
callbacks no effort (no LP iterations), so each limit check (MIP interrupt callback: one
per root separation round or node, deterministic on one thread) counts
:func:`highs_check_work` units. Fitted on 45 HiGHS 1.16 solves (paper instances, samples
of ``large_data.py``) whose checks took 0.9 to 452 ms, a unit took 0.16 to 1.2 s (as a
flat 50 checks, 0.05 to 23 s); the root LP runs uninterrupted between two checks. A
Gurobi work unit is a unit.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time

import numpy as np

from miret_governance.governance.miret.solvers.solve_result import (
    SolveResult,
    SolverOptions,
    StallRule,
    finished_result,
)

HIGHS_CHECK_SCALE = 5e6  # (n_rows + n_vars) * nnz ** 0.25 of a model whose check costs a unit


def highs_check_work(model) -> float:
    """Units one HiGHS limit check counts: ``(n_rows + n_vars) * nnz ** 0.25 / 5e6``."""
    return (model.n_rows + model.n_vars) * max(model.nnz, 1) ** 0.25 / HIGHS_CHECK_SCALE


# ---------------------------------------------------------------------- HiGHS
_BANNER = threading.Lock()
_banner_shown = False


def new_highs():
    """A silent ``highspy.Highs``.

    HiGHS prints its banner from C++ to the process's standard output (file descriptor
    1) when the first instance of a process is built, before any option can silence
    it; it would land in a command's output (``--json`` included). The first
    construction runs with descriptor 1 pointed at the null device (a few
    milliseconds; another thread's output in that window is lost).
    """
    import highspy

    global _banner_shown
    with _BANNER:
        if _banner_shown:
            highs = highspy.Highs()
        else:
            sys.stdout.flush()
            with open(os.devnull, "w") as null, contextlib.ExitStack() as restore:
                saved = os.dup(1)
                restore.callback(os.close, saved)
                os.dup2(null.fileno(), 1)
                restore.callback(os.dup2, saved, 1)
                highs = highspy.Highs()
            _banner_shown = True
    highs.setOptionValue("output_flag", False)
    return highs


def solve_highs(model, options: SolverOptions, start=None, progress=None) -> SolveResult:
    """Solve with HiGHS (``highspy``); see :func:`governance.miret.solvers.table.solve`."""
    import highspy

    begin = time.perf_counter()
    h = new_highs()
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
    per_check = highs_check_work(model)
    checks = 0

    def state(event):
        """Seconds, incumbent and bound (``-inf`` until HiGHS has one) of a callback."""
        out = event.data_out
        bound = out.mip_dual_bound if abs(out.mip_dual_bound) < highspy.kHighsInf else -math.inf
        return out.running_time, out.mip_primal_bound, bound

    def check(event):  # called at fixed points of the search: counts per_check units
        nonlocal checks
        checks += 1
        now, incumbent, bound = state(event)
        rule.report(now, incumbent, bound)
        if rule.update(checks * per_check, incumbent, bound):
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
    return finished_result(
        "highs", version, outcome, x, objective, bound, nodes, wall, rule.work, progress
    )
