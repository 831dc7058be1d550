"""Exact re-optimization of one node's hyperplane with the rest of the tree fixed.

The whole MIRET MILP of a 2,000-row sample stalls at HiGHS's root with gaps of 70-95%
and never improved the warm start on the example datasets (0 of 42 fits), so its time
bought nothing. One node's problem is small: with every other node fixed, a row that
reaches node ``t`` lands in a known leaf if it goes left and in another if it goes
right, so only the side matters. :func:`node_model` writes that MILP (the paper's
constraints restricted to one node; equation labels as in
:mod:`governance.miret.formulation`):

* variables ``a_j`` in ``[-1, 1]`` for ``j`` in ``J_gamma(level(t))``, ``s_j`` binary,
  ``b`` in ``[-1, 1]`` (improved MIRET: ``b >= 0`` above the last level, and
  ``sum_j s_j >= 1`` when no other node uses a feature, eq. ``cons trivial``), and one binary ``z_g`` (1: right) per group of rows that must
  move together: a proximity component (eq. ``cons:prox``), whose side is fixed when
  the subtree on the other side would split it;
* the objective: ``sum_g (cost_right_g - cost_left_g) z_g + sum_j penalty_j s_j`` plus
  the constant ``sum_g cost_left_g``, where a side's cost is the weight ``p^i`` of the
  rows its leaf misfits (the leaf classes ``c_l`` fixed, as in
  :mod:`governance.miret.formulation`); rows equally served by both sides and free to move are left
  out, and added back (up to ``GAP_ROUNDS`` solves) when the new split puts one of
  them inside the epsilon gap ``(0, epsilon)`` that every row must stay out of.

:func:`reoptimize` visits the branch nodes top-down once, solves each node's MILP from
the current split (so a node never gets worse) within a work budget, and keeps a new
split when the whole tree's objective goes down. Each node's status says whether that
split is proven optimal given the rest of the tree: the per-node certificate. A node
whose MILP would go to HiGHS with more than :data:`NODE_MILP_BINARIES` binaries is not
solved (status ``"too_large"``,
:func:`governance.miret.solvers.table.worth_solving`): its time is given back. With
more than two classes the leaves are relabelled to their weighted majority after every
kept split (never worse), so the next node is solved with the relabelled classes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from miret_governance.governance.miret.heuristics.local_search import TreeSearch
from miret_governance.governance.miret.problem.layout import hyperplane_values
from miret_governance.governance.miret.solvers.table import solve, worth_solving
from miret_governance.governance.miret.tree.tree import SurrogateTree

NODE_WORK = 0.25  # work units per node (about a quarter second of one core)
NODE_STALL = 0.1
IMPROVEMENT = 1e-9
GAP_ROUNDS = 3  # solves of one node while rows left out land in the epsilon gap
GAP_TOLERANCE = 1e-7  # the solver's feasibility tolerance
NODE_MILP_BINARIES = 200
"""Largest node MILP (binaries) HiGHS is given. On the example datasets (RF and XGBoost
targets, depths 2 to 4: 200 node solves) the largest that lowered the objective had 156
binaries; the 8 above 200 (208 to 462) all stalled without a better split, in 3.7 of
the 17.8 s the node solves took."""


@dataclass(frozen=True)
class NodeModel:
    """One node's MILP ``min c.x + constant`` (the interface of ``solvers.solve``)."""

    c: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    integrality: np.ndarray
    A: sp.csr_matrix
    row_lower: np.ndarray
    row_upper: np.ndarray
    objective_constant: float
    columns: np.ndarray  # the features of a
    start: np.ndarray  # the current split as a solution vector

    @property
    def n_vars(self) -> int:
        return self.c.size

    @property
    def n_rows(self) -> int:
        return self.A.shape[0]

    @property
    def nnz(self) -> int:
        return self.A.nnz

    @property
    def n_binaries(self) -> int:
        return int(self.integrality.sum())

    def decode(self, x, n_features: int) -> tuple[np.ndarray, float]:
        """``(a, b)`` of a solution, ``a`` over all ``n_features`` features."""
        k = self.columns.size
        coef = np.zeros(n_features)
        coef[self.columns] = np.where(np.abs(x[:k]) > 1e-12, x[:k], 0.0)
        return coef, float(x[2 * k])


def node_model(search, t, include=None) -> NodeModel | None:
    """The MILP of node ``t`` of the tree held by ``search`` (a
    :class:`governance.miret.local_search.TreeSearch`), the other nodes fixed (None when
    no row's side matters); ``include`` (boolean over the sample) adds the groups of rows
    whose side does not matter but whose routing must keep them out of the epsilon gap."""
    rows = search.reaching()[t]
    if rows.size == 0:
        return None
    X, eps, level = search.X, search.eps, int(search.level[t])
    # each row's misfit weight on either side, through the fixed subtree there; a side is
    # closed to a proximity group (cons: prox) its subtree would split or put in a gap
    cost_left, cost_right = search.child_costs(t, rows)
    member = np.unique(search.comp[rows], return_inverse=True)[1]  # groups numbered from 0
    n_groups = int(member.max()) + 1
    closed = []
    for cost in (cost_left, cost_right):
        broken = cost >= search.big  # child_costs adds ``big`` to the rows of such groups
        cost -= search.big * broken
        closed.append(np.bincount(member, broken, n_groups) > 0)
    closed_left, closed_right = closed
    group_left = np.bincount(member, cost_left, n_groups)
    group_right = np.bincount(member, cost_right, n_groups)
    fixed = closed_left | closed_right
    matters = (group_left != group_right) | fixed
    if not matters.any():
        return None
    if include is not None:
        matters[np.unique(member[include[rows]])] = True
    keep = matters[member]
    rows, member_kept = rows[keep], member[keep]
    kept_groups = np.flatnonzero(matters)
    position = np.full(n_groups, -1)
    position[kept_groups] = np.arange(kept_groups.size)
    z_of_row = position[member_kept]
    columns = np.flatnonzero(search.allowed[level])
    k, g, m = columns.size, kept_groups.size, rows.size
    # variable layout: a (k), s (k), b, z (g)
    a_index, s_index, b_index = np.arange(k), k + np.arange(k), 2 * k
    z_index = 2 * k + 1 + np.arange(g)
    n_vars = 2 * k + 1 + g
    x_rows = X[np.ix_(rows, columns)]
    big_left = x_rows.sum(axis=1) + 1.0  # M_L(i, d) of formulation's reduction (iii)
    big_right = big_left + eps
    row_ids = np.repeat(np.arange(m), k)
    blocks, lower, upper = [], [], []
    for big, low_bound, high_bound in (
        # (cons: routing left): a.x^i + b - M_L z_g <= 0
        (big_left, np.full(m, -np.inf), np.zeros(m)),
        # (cons: routing right): a.x^i + b - M_R z_g >= epsilon - M_R
        (big_right, eps - big_right, np.full(m, np.inf)),
    ):
        block = sp.coo_matrix(
            (
                np.concatenate([x_rows.ravel(), np.ones(m), -big]),
                (
                    np.concatenate([row_ids, np.arange(m), np.arange(m)]),
                    np.concatenate([np.tile(a_index, m), np.full(m, b_index), z_index[z_of_row]]),
                ),
            ),
            shape=(m, n_vars),
        )
        blocks.append(block)
        lower.append(low_bound)
        upper.append(high_bound)
    # (cons: sparsity): a_j - s_j <= 0 and a_j + s_j >= 0
    for sign, low_bound, high_bound in ((-1.0, -np.inf, 0.0), (1.0, 0.0, np.inf)):
        block = sp.coo_matrix(
            (
                np.concatenate([np.ones(k), np.full(k, sign)]),
                (np.concatenate([np.arange(k), np.arange(k)]), np.concatenate([a_index, s_index])),
            ),
            shape=(k, n_vars),
        )
        blocks.append(block)
        lower.append(np.full(k, low_bound))
        upper.append(np.full(k, high_bound))
    others = np.delete(search.coef, t, axis=0)
    if search.need_split and not others.any():  # (cons trivial): the tree uses some feature
        blocks.append(sp.coo_matrix((np.ones(k), (np.zeros(k), s_index)), shape=(1, n_vars)))
        lower.append(np.ones(1))
        upper.append(np.full(1, np.inf))
    c = np.zeros(n_vars)
    c[s_index] = search.penalty[level, columns]
    c[z_index] = group_right[kept_groups] - group_left[kept_groups]
    # b >= 0 above the last level in improved MIRET (symmetry breaking), else b >= -1
    col_lower = np.concatenate([-np.ones(k), np.zeros(k), [search.bmin[level]], np.zeros(g)])
    col_upper = np.concatenate([np.ones(k), np.ones(k), [1.0], np.ones(g)])
    col_lower[z_index[closed_left[kept_groups]]] = 1.0  # left closed: must go right
    col_upper[z_index[closed_right[kept_groups]]] = 0.0
    integrality = np.concatenate([np.zeros(k), np.ones(k), [0], np.ones(g)]).astype(np.int8)
    a_now = search.coef[t, columns]
    current = np.concatenate(
        [a_now, (a_now != 0).astype(float), [search.intercept[t]], np.zeros(g)]
    )
    current[z_index[z_of_row]] = (search.V[rows, t] > 0).astype(float)
    return NodeModel(
        c,
        col_lower,
        col_upper,
        integrality,
        sp.vstack(blocks).tocsr(),
        np.concatenate(lower),
        np.concatenate(upper),
        float(group_left[kept_groups].sum()),
        columns,
        current,
    )


def reoptimize(problem, tree, params, work_per_node=NODE_WORK, progress=None, budget=math.inf):
    """``(tree, statuses, work)``: ``tree`` after one top-down pass re-optimizing each
    node, each node's solver status (``"optimal"``: that split is optimal given the rest
    of the tree; ``"too_large"``: too large for HiGHS, not solved; ``"no_budget"``: the
    phase's ``budget`` was spent, not solved) and the units of work the solves counted.
    Each solve gets ``work_per_node`` units, or what is left of ``budget`` when less
    (a status ``"time_limit"``: its safety cap in seconds ended it instead). A
    second pass improved no tree of 24 example fits that the first left unimproved, so
    there is one. ``progress(elapsed, objective, -inf, nan)`` follows each node (the
    tree's objective; there is no bound)."""
    begin = time.perf_counter()
    search = TreeSearch(problem, np.random.default_rng(params["random_state"]), math.inf)
    search.set_tree(tree.coef, tree.intercept, tree.leaf_class)
    objective = search.objective()
    statuses, work = {}, 0.0
    for t in range(problem.n_branch):
        include = np.zeros(problem.n_samples, dtype=bool)
        reach = search.reaching()[t]
        for _ in range(GAP_ROUNDS):
            if budget - work <= 0:
                statuses[t] = "no_budget"
                break
            model = node_model(search, t, include)
            if model is None:
                statuses[t] = "nothing_to_decide"
                break
            if not worth_solving(model, params["solver"], NODE_MILP_BINARIES):
                statuses[t] = "too_large"
                break
            result = solve(
                model,
                solver=params["solver"],
                time_limit=max(float(params["time_limit"]) * 0.05, 1.0),
                mip_gap=0.0,
                threads=params["threads"],
                random_state=params["random_state"],
                stall_work=NODE_STALL,
                work_limit=min(work_per_node, budget - work),
                start=model.start,
            )
            statuses[t], work = result.status, work + result.work
            if result.x is None:
                break
            a, b = model.decode(result.x, search.p)
            # rows left out of the model (their side did not matter) may fall in the gap
            values = hyperplane_values(search.X[reach], a, b)
            in_gap = (values > GAP_TOLERANCE) & (values < search.eps - GAP_TOLERANCE)
            if in_gap.any():
                include[reach[in_gap]] = True
                continue
            saved = (search.coef.copy(), search.intercept.copy(), search.V.copy())
            search.coef[t], search.intercept[t] = a, b
            search.V[:, t] = hyperplane_values(search.X, a, b)
            value = search.objective()
            if value < objective - IMPROVEMENT:
                search.relabel()
                objective = search.objective()
            else:
                search.coef, search.intercept, search.V = saved
            break
        if progress is not None:
            progress(time.perf_counter() - begin, objective, -math.inf, math.nan)
    improved = SurrogateTree(
        search.coef,
        search.intercept,
        tree.depth,
        tree.feature_names,
        tree.classes,
        leaf_class=search.leaf_class,
    )
    return improved, statuses, work
