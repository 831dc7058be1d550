"""A feasible starting tree for the MIRET MILP (the warm start).

:func:`warm_start` builds greedy univariate trees top-down (exact split at the last
level, Gini shortlist with greedy look-ahead above; one tree per shortlisted root split)
and takes the given seed trees (the CART baselines of :mod:`governance.miret.cart`),
then improves the best few by tree alternating optimization
(:mod:`governance.miret.local_search`). A move is kept only when the objective strictly
decreases, so the result is never worse than any starting tree. The search ends when
no node improves or the budget is spent. Random subtree restarts of the best tree, each
followed by local search, used to spend the rest of the budget: on the example datasets
(RF and XGBoost targets, depths 2 to 4, HiGHS) they bettered 16 of 504 fold fits and 4
of 42 final fits and changed one test fidelity (+1.7 points without them) for 1-41% of
the fit time, so there are none.

The budget is counted in work, not seconds: scanned sample-direction pairs plus
``cuts.SCAN_WORK`` per scan and ``local_search.LOGISTIC_WORK`` per row, column and
iteration of a logistic fit (deterministic counts), so a fixed seed gives the same tree on
any machine and under any load; a wall-clock deadline is only a safety cap, and
``info["time_limit_hit"]`` says whether it cut the search short. ``PAIRS_PER_UNIT`` of
this work make the solver's unit (about one second of one core): calibrated on the 42
paper instances (RF and XGB, depth 2 to 4, budgets of 2 and 20 million), where a unit
took 0.2 to 1.2 s of one quiet core (counting pairs alone, which left the logistic fits
and the per-scan overhead out, it had taken 0.3 to 3.1 s).
Every tree produced satisfies the MILP constraints, which
:func:`governance.miret.feasibility.check_feasible` verifies.

Leaf classes: two classes keep the paper's fixed alternating classes. With more than
two, every tree carries its own leaf classes: a seed's are the weighted majority of the
labels in its leaves, the greedy trees start from the best seed's (or from
:func:`governance.miret.search_state.cycled_classes` without a seed) and are relabelled
to their majority; local search keeps them fixed during a move and relabels after it.
"""

from __future__ import annotations

import time

import numpy as np

from miret_governance.governance.errors import InternalError
from miret_governance.governance.miret.heuristics.greedy import LOOKAHEAD
from miret_governance.governance.miret.heuristics.local_search import TreeSearch, local_search
from miret_governance.governance.miret.heuristics.search_state import IMPROVEMENT
from miret_governance.governance.miret.milp.feasibility import check_feasible
from miret_governance.governance.miret.tree.tree import SurrogateTree

STARTS = 4  # greedy starting trees improved by local search (seed trees come on top)
GREEDY_SHARE = 0.4  # share of the work budget after which greedy trees stop looking ahead
PAIRS_PER_UNIT = 2_500_000  # scanned pairs per unit of work (about one second of one core)
DEFAULT_UNITS = 3.0  # default budget in units: the heuristic's of a fit with a 60 s limit


def greedy_trees(search):
    """Greedy trees, best first: one per shortlisted root split (look-ahead below).

    Returns a list of ``(objective, coef, intercept, leaf_class)``; every tree is feasible.
    """
    idx = np.arange(search.n)
    roots = [None]
    if search.depth > 1:
        roots += search.gini_shortlist(idx, 0, LOOKAHEAD)
    starts = []
    for root in roots:
        if starts and search.work >= search.lookahead_work:
            break
        out = {}
        if root is None:
            search.grow(0, idx, True, out)
        else:
            a, b, _ = root
            left = search.split_values(a, b) <= 0
            search.grow(1, idx[left], True, out)
            search.grow(2, idx[~left], True, out)
            out[0] = (a, b)
        search.set_tree(*search.tree_arrays(out))
        search.ensure_split()
        search.relabel()
        starts.append(snapshot(search))
    order = sorted(range(len(starts)), key=lambda k: (starts[k][0], k))
    return [starts[k] for k in order]


def snapshot(search):
    """The current tree as ``(objective, coef, intercept, leaf_class)``."""
    return (
        search.objective(),
        search.coef.copy(),
        search.intercept.copy(),
        search.leaf_class.copy(),
    )


def seed_trees(search, seeds):
    """The feasible ones of the given trees as ``(objective, coef, intercept, leaf_class)``,
    each relabelled to its weighted majority (more than two classes)."""
    out = []
    for tree in seeds:
        search.set_tree(tree.coef, tree.intercept, tree.leaf_class)
        if search.feasible():
            search.relabel()
            out.append(snapshot(search))
    return out


def improve(search, start, best):
    """Local search from ``start``; the better of its result and ``best``."""
    search.set_tree(start[1], start[2], start[3])
    done = local_search(search)
    objective = search.objective()
    if best is None or (objective < best[0] - IMPROVEMENT and search.feasible()):
        best = snapshot(search)
    return best, done


def warm_start(problem, random_state=0, work_budget=None, time_limit=np.inf, seeds=()):
    """A MILP-feasible surrogate tree: greedy and seed trees, then local search.

    Parameters
    ----------
    problem : governance.miret.problem.MiretProblem
    random_state : int
        Seed of the node visiting order and of the logistic fits.
    work_budget : float, optional
        Work (scanned sample-direction pairs) for the whole heuristic; default
        ``DEFAULT_UNITS * PAIRS_PER_UNIT``. Greedy look-ahead stops after 40% of it. The
        first greedy tree is always built and a node step in progress finishes first.
    time_limit : float
        Wall-clock safety cap in seconds (the result then depends on the machine).
    seeds : sequence of SurrogateTree
        Starting trees (infeasible ones are skipped); the result's objective is never
        above the best feasible seed's.

    Returns
    -------
    tree : SurrogateTree
        Feasible for the MILP of ``problem``.
    info : dict
        ``greedy_objective``, ``seed_objective`` (inf without feasible seed),
        ``objective``, ``passes``, ``improvements``, ``work``, ``time_limit_hit``,
        ``time`` (seconds), ``fidelity`` (share of samples where the tree matches ``y``),
        ``n_feature_uses``.
    """
    start = time.perf_counter()
    if work_budget is None:
        work_budget = DEFAULT_UNITS * PAIRS_PER_UNIT
    search = TreeSearch(
        problem, np.random.default_rng(random_state), work_budget, start + float(time_limit)
    )
    search.lookahead_work = GREEDY_SHARE * float(work_budget)
    seeded = seed_trees(search, seeds)
    if seeded and problem.leaf_class is None and problem.n_classes > 2:
        search.leaf_class = min(seeded, key=lambda item: item[0])[3].copy()
    greedy = greedy_trees(search)
    starts = sorted(seeded + greedy[:STARTS], key=lambda item: item[0])
    best = None
    passes = improvements = 0
    for item in starts:
        if best is not None and search.exhausted():
            break
        best, done = improve(search, item, best)
        passes, improvements = passes + done[0], improvements + done[1]
    if seeded and min(s[0] for s in seeded) < best[0] - IMPROVEMENT:
        best = min(seeded, key=lambda item: item[0])  # a seed skipped by the safety cap
    search.set_tree(best[1], best[2], best[3])

    tree = SurrogateTree(
        search.coef,
        search.intercept,
        search.depth,
        problem.feature_names,
        problem.classes,
        leaf_class=search.leaf_class,
    )
    issues = check_feasible(tree, problem)
    if issues:  # a bug, not a property of the data: every move is checked
        raise InternalError("warm start produced an infeasible tree: " + "; ".join(issues))
    info = {
        "greedy_objective": greedy[0][0],
        "seed_objective": min((s[0] for s in seeded), default=np.inf),
        "objective": tree.objective(problem),
        "passes": passes,
        "improvements": improvements,
        "work": int(search.work),
        "time_limit_hit": bool(search.time_limit_hit),
        "time": time.perf_counter() - start,
        "fidelity": float(np.mean(tree.leaf_class_of(tree.apply(problem.X)) == problem.y)),
        "n_feature_uses": tree.n_feature_uses(),
    }
    return tree, info
