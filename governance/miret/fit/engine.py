"""One MIRET fit on a problem: seed trees, warm start, MILP solve, the three candidates.

Steps (each a function): :func:`seed_trees` fits the depth-D CART on the labels (all
features, and only the features allowed at some level) and the optimal univariate tree
on guessed thresholds (:mod:`governance.miret.univariate`), and converts them into
MIRET-feasible seed trees; :func:`heuristic_tree` runs the warm-start heuristic seeded
with them; the best tree then goes to the solver with its work-counted stall rule and
budget; :func:`fit_problem` keeps the tree with the lowest objective, writes the report
and returns it with the two univariate candidates written exactly
(:func:`governance.miret.cart.exact_tree`), among which
:mod:`governance.miret.selection` chooses on held-out rows.

With more than two classes the MILP (:mod:`governance.miret.formulation`) is built with
the leaf classes of the best starting tree fixed (the heuristic's and node MILPs'
result, already relabelled to the weighted majority of its leaves), and the solver's
tree is relabelled the same way (:func:`relabelled`).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

from miret_governance.governance.miret.fit.solve_report import SolveReport
from miret_governance.governance.miret.heuristics.cart import (
    cart_arrays,
    cart_predict,
    exact_tree,
    fit_cart,
    seed_tree,
)
from miret_governance.governance.miret.heuristics.heuristic import PAIRS_PER_UNIT, warm_start
from miret_governance.governance.miret.heuristics.local_search import TreeSearch
from miret_governance.governance.miret.heuristics.univariate import guessed_thresholds, optimal_tree
from miret_governance.governance.miret.milp import formulation as milp
from miret_governance.governance.miret.milp.node_milp import IMPROVEMENT, reoptimize
from miret_governance.governance.miret.problem.layout import majority_classes
from miret_governance.governance.miret.solvers.solve_result import (
    GLOBAL_MILP_BINARIES,
    relative_gap,
)
from miret_governance.governance.miret.solvers.table import solve, whole_milp_backend
from miret_governance.governance.miret.tree.tree import SurrogateTree

HEURISTIC_CAP = 0.5  # share of the time limit after which the heuristic is cut (safety cap)
HEURISTIC_WORK_SHARE = 0.05  # the heuristic's work budget: this share of the limit, in units
STALL_UNITS, STALL_SHARE = 0.5, 0.05  # default stall window: min(0.5, 0.05 * limit) work units
SOLVER_WORK_SHARE = 0.1  # the solver's work budget: this share of the limit, in work units
STOP_REASON = {
    "optimal": "optimal",
    "gap_limit": "gap_limit",
    "stalled": "stalled",
    "work_limit": "work_limit",
    "time_limit": "time_limit",
    "time_limit_no_incumbent": "time_limit",
}


def work_budgets(time_limit: float) -> tuple[float, float]:
    """Default solver stall window and work budget (units of work) of a fit whose time
    limit is ``time_limit`` seconds.

    A unit is about a second of one core (:mod:`governance.miret.solvers`), so with
    the heuristic's ``0.05 * time_limit`` a default fit ends on work after about
    ``0.15 * time_limit`` seconds of one quiet core (2 to 4 s of the 60 s default on the
    example data, 11 to 16 s on 2,000-row samples), far from the cap even when loaded.
    """
    return min(STALL_UNITS, STALL_SHARE * time_limit), SOLVER_WORK_SHARE * time_limit


def milp_budget(share, fit_work) -> float:
    """The MILP phase's work budget (units): ``share`` of ``fit_work``, the units the
    fit counted before it; ``inf`` when ``share`` is None (no cap but each solve's own)."""
    return math.inf if share is None else float(share) * fit_work


def heuristic_budget(time_limit: float) -> float:
    """The warm start's work budget (scanned pairs, :mod:`governance.miret.heuristic`) of
    a fit whose time limit is ``time_limit`` seconds: ``HEURISTIC_WORK_SHARE`` of it in
    units of work."""
    return HEURISTIC_WORK_SHARE * time_limit * PAIRS_PER_UNIT


def centered(tree: SurrogateTree, epsilon: float) -> SurrogateTree:
    """The tree with ``b_t -= epsilon / 2``: a MILP-feasible tree keeps its assignment
    (``<= 0`` stays ``<= -eps/2``, ``>= eps`` becomes ``>= eps/2``) with margin eps/2."""
    return SurrogateTree(
        tree.coef,
        tree.intercept - epsilon / 2,
        tree.depth,
        tree.feature_names,
        tree.classes,
        tree.missing_left,
        tree.leaf_class,
    )


def relabelled(tree: SurrogateTree, problem) -> SurrogateTree:
    """The tree with its leaves relabelled to the weighted majority of the problem's
    labels (more than two classes; a two-class tree keeps the paper's classes)."""
    if problem.n_classes == 2:
        return tree
    leaf = tree.apply(problem.X) - problem.n_branch
    return tree.with_leaf_class(majority_classes(leaf, problem.y, problem.weight, tree.leaf_class))


def constant_tree(problem, c) -> SurrogateTree:
    """Every sample to one leaf of class index ``c``, no feature used: two classes the
    leftmost (class 0) or rightmost (class 1) leaf, else the leftmost, every leaf ``c``."""
    two = problem.n_classes == 2
    sign = (1.0 if c == 1 else -1.0) if two else -1.0
    return SurrogateTree(
        np.zeros((problem.n_branch, problem.n_features)),
        np.full(problem.n_branch, sign * problem.epsilon / 2),
        problem.depth,
        problem.feature_names,
        problem.classes,
        leaf_class=None if two else np.full(2**problem.depth, c, dtype=np.int64),
    )


def candidate_arrays(X, labels, depth, classes, random_state, thresholds=None, univariate=True):
    """``(cart, univariate)``: the CART tree and the optimal univariate tree on guessed
    thresholds (plain arrays) of depth ``depth`` on normalized ``X`` with ``labels``
    (values of ``classes``); ``thresholds``: ``guessed_thresholds(X, labels,
    random_state)`` when already known (they do not depend on the depth);
    ``univariate=False``: no thresholds guessed, ``univariate`` is None."""
    cart, columns = fit_cart(X, labels, depth, random_state=random_state)
    if not univariate:
        return cart_arrays(cart, columns), None
    if thresholds is None:
        thresholds = guessed_thresholds(X, labels, random_state)
    univariate = optimal_tree(X, labels, depth, *thresholds, classes)
    return cart_arrays(cart, columns), univariate


def univariate_trees(problem, random_state, thresholds=None, univariate=True):
    """:func:`candidate_arrays` on the problem's sample: they do not depend on alpha."""
    labels = problem.classes[problem.y]
    return candidate_arrays(
        problem.X, labels, problem.depth, problem.classes, random_state, thresholds, univariate
    )


def seed_trees(problem, random_state, trees=None, univariate_seed=True):
    """``(cart, univariate, seeds)``: the CART baseline and the optimal univariate tree
    (plain arrays, ``trees`` when given, else :func:`univariate_trees`; the univariate
    tree None when it was not fitted) and the feasible seed trees of both CART fits and
    of that tree (only with ``univariate_seed``)."""
    labels = problem.classes[problem.y]
    baseline, univariate = trees or univariate_trees(problem, random_state)
    search = TreeSearch(problem, np.random.default_rng(random_state), work_budget=math.inf)
    seeds = [seed_tree(search, baseline, problem)]
    if univariate_seed and univariate is not None:
        seeds.append(seed_tree(search, univariate, problem))
    allowed = np.flatnonzero(problem.allowed.any(axis=0))
    if allowed.size and allowed.size < problem.n_features:
        restricted, columns = fit_cart(problem.X, labels, problem.depth, allowed, random_state)
        seeds.append(seed_tree(search, cart_arrays(restricted, columns), problem))
    return baseline, univariate, seeds


def heuristic_tree(problem, seeds, random_state, work_budget, time_cap):
    """Warm-start tree and info (the best seed when the heuristic fails)."""
    try:
        return warm_start(problem, random_state, work_budget, time_limit=time_cap, seeds=seeds)
    except RuntimeError as exc:
        warnings.warn(f"no warm start: {exc}", RuntimeWarning, stacklevel=3)
        best = min(seeds, key=lambda tree: tree.objective(problem))
        return best, {"objective": best.objective(problem), "work": 0, "time_limit_hit": False}


def fit_problem(
    problem,
    params,
    begin,
    progress=None,
    milp_phase=True,
    trees=None,
    heuristic_share=1.0,
    skipped="not_started",
    prior_work=0.0,
):
    """Fit the tree of ``problem``; returns ``(tree, report, baseline, candidates)``.

    ``candidates`` maps each name of :data:`governance.miret.selection.CANDIDATES` to
    its tree: ``tree`` itself, and (``params["fallbacks"]``) the optimal univariate and
    CART trees written exactly. ``params`` is the estimator's parameter dict; ``begin``
    the fit's start time; ``milp_phase=False`` stops after the warm start (the held-out
    folds' fits); ``trees``: :func:`univariate_trees` of the problem, when already known
    (another alpha on the same rows); ``heuristic_share`` scales the heuristic's work
    budget; ``skipped``: the report's ``stop_reason`` without the MILP phase;
    ``prior_work``: units of work the fit counted before this problem (the folds'
    heuristics), of which ``params["milp_share"]`` is the MILP phase's budget with this
    heuristic's (:func:`milp_budget`).
    """
    baseline, univariate, seeds = seed_trees(
        problem, params["random_state"], trees, params["univariate_seed"]
    )
    labels = problem.classes[problem.y]
    cart_fidelity = float(np.mean(cart_predict(baseline, problem.X) == labels))
    cart_features = len({j for j in baseline["feature"] if j >= 0})
    seed_objective = min(tree.objective(problem) for tree in seeds)
    fixed = problem.n_classes == 2  # the MILP's leaf classes are known before the search
    model = milp.build_model(problem, reductions=params["reductions"]) if fixed else None
    build_time = time.perf_counter() - begin
    limit = float(params["time_limit"])

    t0 = time.perf_counter()
    candidates = [("seed", min(seeds, key=lambda tree: tree.objective(problem)))]
    info = {"objective": math.nan, "work": 0, "time_limit_hit": False}
    start = None
    if params["warm_start"]:
        pairs, cap = heuristic_share * heuristic_budget(limit), HEURISTIC_CAP * limit
        tree, info = heuristic_tree(problem, seeds, params["random_state"], pairs, cap)
        candidates.insert(0, ("heuristic", tree))
    best_start = min(candidates, key=lambda item: item[1].objective(problem))[1]
    heuristic_time = time.perf_counter() - t0
    node_statuses, node_before, t1 = {}, best_start.objective(problem), time.perf_counter()
    fit_work = prior_work + info["work"] / PAIRS_PER_UNIT
    milp_work, allowance = 0.0, milp_budget(params["milp_share"], fit_work)
    if milp_phase and allowance <= 0:
        milp_phase, skipped = False, "no_milp_budget"
    if milp_phase:  # each node's hyperplane solved exactly with the rest of the tree fixed
        tree, node_statuses, milp_work = reoptimize(
            problem, best_start, params, progress=progress, budget=allowance
        )
        if tree.objective(problem) < node_before - IMPROVEMENT:
            candidates.append(("node_milp", tree))
            best_start = tree
    node_time = time.perf_counter() - t1
    if not fixed:  # the MILP's leaf classes c_l: the best starting tree's
        problem = problem.with_leaf_class(best_start.leaf_class)
        t2 = time.perf_counter()
        model = milp.build_model(problem, reductions=params["reductions"])
        build_time += time.perf_counter() - t2
    x0 = milp.encode(best_start.coef, best_start.intercept, best_start.apply(problem.X), model)
    if model.is_feasible(x0):
        start = x0

    default_stall, default_budget = work_budgets(limit)
    stall, budget = params["stall_work"], params["work_limit"]
    stall = default_stall if stall is None else float(stall)
    budget = default_budget if budget is None else float(budget)
    budget = min(budget, allowance - milp_work)
    remaining = limit - (time.perf_counter() - begin)
    result, whole_start = None, best_start.objective(problem)
    solver, unsolved = whole_milp_backend(model, params["solver"], GLOBAL_MILP_BINARIES)
    unsolved = unsolved if budget > 0 else "no_budget"
    if remaining > 0 and milp_phase and not unsolved:
        result = solve(
            model,
            solver=solver,
            time_limit=remaining,
            mip_gap=params["mip_gap"],
            threads=params["threads"],
            random_state=params["random_state"],
            stall_work=stall,
            work_limit=budget,
            start=start,
            progress=progress,
        )
        if result.x is not None:
            coef, intercept, _ = model.decode(result.x)
            solved = SurrogateTree(
                coef,
                intercept,
                problem.depth,
                problem.feature_names,
                problem.classes,
                leaf_class=problem.leaf_classes,
            )
            candidates.append(("solver", relabelled(solved, problem)))
    # MILP-feasible trees are centered in the epsilon gap; ties prefer heuristic, seed,
    # then the node MILPs' tree
    scored = []
    for k, (source, tree) in enumerate(candidates):
        if source != "solver":
            x = milp.encode(tree.coef, tree.intercept, tree.apply(problem.X), model)
            tree = centered(tree, problem.epsilon) if model.is_feasible(x) else tree
        else:
            tree = centered(tree, problem.epsilon)
        scored.append((tree.objective(problem), k, source, tree))
    objective, _, source, tree = min(scored, key=lambda item: item[:2])
    exact = {}
    if params["fallbacks"]:
        exact = {
            "univariate": exact_tree(univariate, problem),
            "cart": exact_tree(baseline, problem),
        }

    bound = result.bound if result is not None else -math.inf
    gap = relative_gap(objective, bound)
    hit = bool(info["time_limit_hit"]) or (result is not None and result.status.startswith("time"))
    hit = hit or any(status.startswith("time") for status in node_statuses.values())
    report = SolveReport(
        solver=result.solver if result is not None else "none",
        solver_version=result.solver_version if result is not None else "",
        status=result.status if result is not None else "not_run",
        stop_reason=_stop_reason(result) if milp_phase else skipped,
        objective=float(objective),
        bound=float(bound),
        gap=float(gap) if math.isfinite(gap) else 1.0,
        wall_time=time.perf_counter() - begin,
        time_limit_hit=hit or (result is None and milp_phase and remaining <= 0),
        nodes=result.nodes if result is not None else 0,
        n_variables=model.n_vars,
        n_binaries=model.n_binaries,
        n_constraints=model.n_rows,
        n_nonzeros=model.nnz,
        warm_start_objective=float(info["objective"]),
        warm_start_feasible=start is not None,
        warm_start_work=int(info["work"]),
        cart_seed_objective=float(seed_objective),
        incumbent_source=source,
        time_limit=limit,
        stall_work=stall,
        solver_work=result.work if result is not None else 0.0,
        solver_objective=result.objective if result is not None else math.inf,
        build_time=build_time,
        heuristic_time=heuristic_time,
        solve_time=result.wall_time if result is not None else 0.0,
        node_statuses={str(t): status for t, status in node_statuses.items()},
        node_objective_before=float(node_before),
        node_time=node_time,
        global_milp=result is not None,
        milp_work=milp_work + (result.work if result is not None else 0.0),
        fit_work=fit_work,
        whole_milp_start=float(whole_start),
        whole_milp_skipped=unsolved if milp_phase else "",
        formulation=problem.formulation,
        reductions=bool(params["reductions"]),
        mip_gap=float(params["mip_gap"]),
        baseline_cart_train_fidelity=cart_fidelity,
        baseline_cart_n_features=cart_features,
        allowed_features=problem.allowed_features,
    )
    return tree, report, baseline, {"miret": tree, **exact}


def _stop_reason(result) -> str:
    if result is not None:
        return STOP_REASON.get(result.status, result.status)
    return "node_milps"


def fit_trivial(problem, params, begin):
    """The constant tree of an ensemble that predicts one class (objective 0, no solver);
    returns ``(tree, report, baseline, candidates)``, every candidate that tree."""
    tree = constant_tree(problem, int(problem.y[0]))
    label = problem.classes[problem.y[0]]
    baseline = {
        "feature": [-1],
        "threshold": [-2.0],
        "left": [-1],
        "right": [-1],
        "label": [label.item() if hasattr(label, "item") else label],
    }
    elapsed = time.perf_counter() - begin
    report = SolveReport(
        solver="none",
        solver_version="",
        status="trivial",
        stop_reason="trivial",
        objective=tree.objective(problem),
        bound=0.0,
        gap=0.0,
        wall_time=elapsed,
        time_limit_hit=False,
        nodes=0,
        n_variables=0,
        n_binaries=0,
        n_constraints=0,
        n_nonzeros=0,
        warm_start_objective=math.nan,
        warm_start_feasible=False,
        warm_start_work=0,
        cart_seed_objective=math.nan,
        incumbent_source="heuristic",
        time_limit=float(params["time_limit"]),
        stall_work=math.nan,
        solver_work=0.0,
        solver_objective=math.nan,
        build_time=elapsed,
        heuristic_time=0.0,
        solve_time=0.0,
        formulation=problem.formulation,
        reductions=bool(params["reductions"]),
        mip_gap=float(params["mip_gap"]),
        baseline_cart_train_fidelity=1.0,
        baseline_cart_n_features=0,
        allowed_features=problem.allowed_features,
    )
    return tree, report, baseline, {"miret": tree, "univariate": tree, "cart": tree}
