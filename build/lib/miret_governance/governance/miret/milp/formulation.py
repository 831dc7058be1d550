"""The MIRET MILP (b-MIRET and improved MIRET) as one sparse matrix.

All variables live in one vector; index arrays (``-1`` for a variable that does not
exist) map the paper's symbols to positions in it. Every constraint block is built from
numpy index arrays and all blocks are stacked into one ``scipy.sparse`` CSR matrix with
row bounds ``row_lower <= A x <= row_upper``. Comments cite the paper's equation labels.

Objective, ``k >= 2`` classes: ``sum_i sum_l p^i [c_l != y^i] z_il + alpha sum penalty s``
with FIXED leaf classes ``c_l`` (``problem.leaf_classes``; ``y^i``, ``c_l`` class
indices), written as cost ``p^i ([c_l != y^i] - 1/2)`` on ``z_il`` plus the constant
``1/2 sum_i p^i`` (``MilpModel.objective_constant``): the same value, as ``sum_l z_il = 1``.
Two classes: the paper's ``1/2 sum_i p^i y^i (y^i - sum_l c_l z_il)`` (``y^i, c_l`` in
``{-1, +1}``, alternating ``c_l``: odd leaf ``-1`` = index 0, even ``+1`` = index 1) is,
as ``(y^i)^2 = 1``, the constant ``1/2 sum_i p^i`` plus ``-p^i y^i c_l / 2`` on ``z_il``,
i.e. ``-p^i / 2`` when ``c_l = y^i`` and ``+p^i / 2`` otherwise: the same objective
with the same coefficients. More than two classes: the leaf classes are the warm
start's, the weighted majority of the ensemble's labels in each of its leaves; after
every improvement (heuristic moves, node MILPs, this MILP's solution) the leaves are
relabelled to that majority, which is what free leaf-class variables would choose for
the final routing (a leaf's misfit is its weight minus its class's), so never worse.
Improved MIRET's symmetry breaking ``b_t >= 0`` above the last level (negate a node's
hyperplane, exchange its subtrees) maps the alternating classes onto themselves but
would exchange fixed classes of ``k > 2``, so it applies to two classes only
(:attr:`MiretProblem.symmetry_breaking`).

Exact reductions (``reductions=True``), each keeping the optimal value:

(i) Proximity components share their assignment variables. The constraints
    ``z_il = z_kl`` for ``(i, k) in U_TE(m)`` are equalities, hence transitive: in any
    feasible solution every connected component of the pair graph has one common
    assignment row. Substituting one set of ``z`` (and ``q``) per component is therefore
    a bijection between feasible sets; the objective of the shared ``z_bl`` is the sum of
    its members' costs. Routing rows stay per sample, except that two samples of one
    component with identical ``x`` give identical rows, which are kept once.
(ii) Variables ``a_tj``, ``s_tj`` with ``j`` outside ``J_gamma(level(t))`` are fixed to 0
    by (cons: freq) and (cons: freq2), so they are left out of the vector.
(iii) Per-sample big-M. With ``x >= 0``, ``|a_tj| <= 1``, ``a_tj = 0`` outside
    ``J_gamma(d)`` and ``|b_t| <= 1``: ``|a_t.x^i + b_t| <= sum_{j in J_gamma(d)} x_ij + 1
    =: M_L(i, d)``. So with ``M_L(i, d)`` (left rows) and ``M_R = M_L(i, d) + epsilon``
    (right rows) a deactivated routing row still holds for every admissible ``a, b``,
    exactly as with the paper's ``|J| + 1`` (which is the bound for ``J_gamma = J``,
    ``x = 1``); the feasible set is unchanged and the LP relaxation is tighter.

Without reductions the proximity constraints are written as ``z_il - z_kl = 0`` along a
spanning star of each component (same feasible set as all pairs, by transitivity) and
the frequency constraints as bounds ``0 <= a_tj <= 0``, ``0 <= s_tj <= 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.miret.problem.layout import subtree_leaves

FEASIBILITY_TOLERANCE = 1e-7


@dataclass(frozen=True)
class MilpModel:
    """A MILP ``min c.x + constant s.t. row_lower <= A x <= row_upper, bounds, integrality``.

    Attributes
    ----------
    c, col_lower, col_upper : ndarray (n_vars,)
    integrality : ndarray (n_vars,) of int8, 1 for binary variables
    A : scipy.sparse.csr_matrix (n_rows, n_vars)
    row_lower, row_upper : ndarray (n_rows,)
    objective_constant : float
    a_index, s_index : ndarray (2^D - 1, p) of int, -1 where the variable is dropped
    b_index : ndarray (2^D - 1,)
    z_index : ndarray (n_blocks, 2^D); block ``block[i]`` holds sample ``i``
    q_left_index, q_right_index : ndarray (n_blocks, 2^D - 1) or None (b-MIRET)
    block : ndarray (n,)
    formulation : str
    reductions : bool
    """

    c: np.ndarray
    A: sp.csr_matrix
    row_lower: np.ndarray
    row_upper: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    integrality: np.ndarray
    objective_constant: float
    a_index: np.ndarray
    b_index: np.ndarray
    s_index: np.ndarray
    z_index: np.ndarray
    q_left_index: np.ndarray | None
    q_right_index: np.ndarray | None
    block: np.ndarray
    formulation: str
    reductions: bool

    @property
    def n_vars(self) -> int:
        return int(self.c.shape[0])

    @property
    def n_rows(self) -> int:
        return int(self.A.shape[0])

    @property
    def n_binaries(self) -> int:
        return int(self.integrality.sum())

    @property
    def nnz(self) -> int:
        return int(self.A.nnz)

    def objective(self, x) -> float:
        """Objective value of a solution vector (constant included)."""
        return float(self.c @ np.asarray(x, dtype=np.float64) + self.objective_constant)

    def violation(self, x) -> float:
        """Largest violation of a row bound, column bound or integrality by ``x``."""
        x = np.asarray(x, dtype=np.float64)
        ax = self.A @ x
        worst = [
            np.max(self.row_lower - ax, initial=0.0),
            np.max(ax - self.row_upper, initial=0.0),
            np.max(self.col_lower - x, initial=0.0),
            np.max(x - self.col_upper, initial=0.0),
        ]
        binary = self.integrality == 1
        worst.append(np.max(np.abs(x[binary] - np.round(x[binary])), initial=0.0))
        return float(max(worst))

    def is_feasible(self, x, tolerance: float = FEASIBILITY_TOLERANCE) -> bool:
        return self.violation(x) <= tolerance

    def decode(self, x) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Coefficients ``a`` (2^D-1, p), intercepts ``b`` and leaf position per sample.

        Coefficients whose ``s_tj`` rounds to 0 are set to exactly 0 (they are within
        the solver's tolerance of 0 by (cons: sparsity)).
        """
        x = np.asarray(x, dtype=np.float64)
        coef = np.zeros(self.a_index.shape)
        present = self.a_index >= 0
        selected = np.round(x[self.s_index[present]]) == 1
        coef[present] = np.where(selected, np.clip(x[self.a_index[present]], -1, 1), 0.0)
        intercept = x[self.b_index].copy()
        leaf = np.argmax(x[self.z_index], axis=1)
        n_branch = self.b_index.shape[0]
        return coef, intercept, (n_branch + leaf)[self.block]


class _Rows:
    """Collects constraint blocks as COO triplets with their row bounds."""

    def __init__(self):
        self.rows, self.cols, self.vals, self.lower, self.upper = [], [], [], [], []
        self.n = 0

    def add(self, n_rows, rows, cols, vals, lower, upper):
        rows = np.asarray(rows)
        vals = np.broadcast_to(np.asarray(vals, dtype=np.float64), rows.shape).ravel()
        rows, cols = rows.ravel(), np.asarray(cols).ravel()
        self.rows.append(rows + self.n)
        self.cols.append(cols)
        self.vals.append(vals)
        self.lower.append(np.broadcast_to(np.asarray(lower, dtype=np.float64), (n_rows,)))
        self.upper.append(np.broadcast_to(np.asarray(upper, dtype=np.float64), (n_rows,)))
        self.n += n_rows

    def matrix(self, n_vars):
        coo = sp.coo_matrix(
            (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))),
            shape=(self.n, n_vars),
        )
        return coo.tocsr(), np.concatenate(self.lower), np.concatenate(self.upper)


def build_model(problem, reductions: bool = True) -> MilpModel:
    """Build the MILP of a :class:`~governance.miret.problem.MiretProblem`.

    Parameters
    ----------
    problem : MiretProblem
        ``problem.formulation`` selects b-MIRET (``"basic"``) or improved MIRET.
    reductions : bool
        Apply the exact reductions (i)-(iii) described in the module docstring.

    Raises
    ------
    ValueError
        Improved MIRET with no allowed feature at any level (``sum s >= 1`` cannot hold).
    """
    improved = problem.formulation == "miret"
    if improved and not problem.allowed.any():
        raise InvalidInputError(
            "no feature passes the frequency threshold gamma_d at any level, so the MIRET "
            "constraint 'at least one split' cannot hold; use a lower gamma_percentile "
            "(0 allows every feature the ensemble uses)"
        )
    D, n, p = problem.depth, problem.n_samples, problem.n_features
    T, L = 2**D - 1, 2**D
    level = problem.node_level
    allowed_tj = problem.allowed[level]  # (T, p)
    S_L, S_R = subtree_leaves(D)
    eps = problem.epsilon

    # ---------------------------------------------------------------- variables
    blocks = problem.component if reductions else np.arange(n)
    n_blocks = int(blocks.max()) + 1
    next_col = 0

    def new(shape):
        nonlocal next_col
        size = int(np.prod(shape))
        out = np.arange(next_col, next_col + size).reshape(shape)
        next_col += size
        return out

    if reductions:  # (ii): only the a, s that (cons: freq), (cons: freq2) leave free
        a_index = np.full((T, p), -1, dtype=np.int64)
        a_index[allowed_tj] = new(int(allowed_tj.sum()))
    else:
        a_index = new((T, p))
    b_index = new(T)
    s_index = np.full((T, p), -1, dtype=np.int64)
    present = a_index >= 0
    s_index[present] = new(int(present.sum()))
    z_index = new((n_blocks, L))
    q_left = new((n_blocks, T)) if improved else None
    q_right = new((n_blocks, T)) if improved else None
    n_vars = next_col

    col_lower = np.zeros(n_vars)
    col_upper = np.ones(n_vars)
    integrality = np.zeros(n_vars, dtype=np.int8)
    col_lower[a_index[present]] = -1.0  # -1 <= a_tj <= 1
    col_lower[b_index] = -1.0  # -1 <= b_t <= 1
    if problem.symmetry_breaking:  # b_t >= 0 for t in T_B^f (levels 0..D-2), two classes
        col_lower[b_index[level < D - 1]] = 0.0
    if not reductions:  # (cons: freq), (cons: freq2) as bounds a_tj = s_tj = 0
        fixed = ~allowed_tj
        col_lower[a_index[fixed]] = col_upper[a_index[fixed]] = 0.0
        col_upper[s_index[fixed]] = 0.0
    integrality[s_index[present]] = 1
    integrality[z_index.ravel()] = 1
    if improved:
        integrality[q_left.ravel()] = integrality[q_right.ravel()] = 1

    # ---------------------------------------------------------------- objective
    c = np.zeros(n_vars)
    # fidelity: p^i ([c_l != y^i] - 1/2) on z_il, summed over the members of a block
    misfit = problem.leaf_classes[None, :] != problem.y[:, None]  # (n, L)
    block_cost = np.zeros((n_blocks, L))
    np.add.at(block_cost, blocks, problem.weight[:, None] * (misfit - 0.5))
    c[z_index] = block_cost
    penalty = problem.penalty[level]  # alpha / f_{d,j} on s_tj, j in J_gamma(d)
    c[s_index[present]] = penalty[present]
    constant = 0.5 * float(problem.weight.sum())

    # ---------------------------------------------------------------- constraints
    rows = _Rows()
    X = problem.X
    if reductions:  # identical (block, x) give identical routing rows: keep one
        _, unit = np.unique(np.column_stack([blocks, X]), axis=0, return_index=True)
        unit = np.sort(unit)
    else:
        unit = np.arange(n)
    Xu, Bu, nu = X[unit], blocks[unit], unit.size
    if reductions:  # (iii) M_L(i, d) = sum_{j in J_gamma(d)} x_ij + 1
        big_l = Xu @ problem.allowed.T.astype(np.float64) + 1.0  # (nu, D)
        big_l = big_l[:, level]  # (nu, T)
    else:
        big_l = np.full((nu, T), p + 1.0)  # |J| + 1
    big_r = big_l + eps

    # hyperplane part a_t.x^i + b_t of routing rows (u, t), row id u * T + t
    u_idx, t_idx, j_idx = np.nonzero(present[None, :, :] & (Xu[:, None, :] != 0))
    a_rows = u_idx * T + t_idx
    a_cols = a_index[t_idx, j_idx]
    a_vals = Xu[u_idx, j_idx]
    route = np.arange(nu * T)
    b_cols = np.tile(b_index, nu)
    if improved:
        left_rows, left_cols = route, q_left[Bu].ravel()
        right_rows, right_cols = route, q_right[Bu].ravel()
        left_m, right_m = big_l.ravel(), big_r.ravel()
    else:  # sum_{l in S_L(t)} z_il replaces q_L(t)
        u2, t2, l2 = np.nonzero(np.broadcast_to(S_L[None], (nu, T, L)))
        left_rows, left_cols, left_m = u2 * T + t2, z_index[Bu[u2], l2], big_l[u2, t2]
        u2, t2, l2 = np.nonzero(np.broadcast_to(S_R[None], (nu, T, L)))
        right_rows, right_cols, right_m = u2 * T + t2, z_index[Bu[u2], l2], big_r[u2, t2]
    # (cons: routing left): a_t.x^i + b_t + M_L q_L <= M_L
    rows.add(
        nu * T,
        np.concatenate([a_rows, route, left_rows]),
        np.concatenate([a_cols, b_cols, left_cols]),
        np.concatenate([a_vals, np.ones(nu * T), left_m]),
        -np.inf,
        big_l.ravel(),
    )
    # (cons: routing right): a_t.x^i + b_t - M_R q_R >= epsilon - M_R
    rows.add(
        nu * T,
        np.concatenate([a_rows, route, right_rows]),
        np.concatenate([a_cols, b_cols, right_cols]),
        np.concatenate([a_vals, np.ones(nu * T), -right_m]),
        eps - big_r.ravel(),
        np.inf,
    )
    block_rows = np.arange(n_blocks)
    if improved:
        # (assignment at the root): q_L(0) + q_R(0) = 1
        rows.add(
            n_blocks,
            np.repeat(block_rows, 2),
            np.column_stack([q_left[:, 0], q_right[:, 0]]),
            1.0,
            1.0,
            1.0,
        )
        # (parenting): q_L(t) - q_L(2t+1) - q_R(2t+1) = 0 and q_R(t) - q_L(2t+2) - q_R(2t+2) = 0
        inner = np.flatnonzero(level < D - 1)
        if inner.size:
            k = inner.size
            r = np.arange(n_blocks * k).reshape(n_blocks, k)
            for parent, child in ((q_left, 2 * inner + 1), (q_right, 2 * inner + 2)):
                rows.add(
                    n_blocks * k,
                    np.stack([r, r, r], axis=-1),
                    np.stack([parent[:, inner], q_left[:, child], q_right[:, child]], axis=-1),
                    np.array([1.0, -1.0, -1.0]),
                    0.0,
                    0.0,
                )
        # (linking): q_L(t) - sum_{l in S_L(t)} z_il = 0, same for q_R and S_R
        for q, S in ((q_left, S_L), (q_right, S_R)):
            bb, tt, ll = np.nonzero(np.broadcast_to(S[None], (n_blocks, T, L)))
            r = np.arange(n_blocks * T)
            rows.add(
                n_blocks * T,
                np.concatenate([r, bb * T + tt]),
                np.concatenate([q.ravel(), z_index[bb, ll]]),
                np.concatenate([np.ones(r.size), -np.ones(bb.size)]),
                0.0,
                0.0,
            )
        # (cons trivial): sum_t sum_j s_tj >= 1
        s_cols = s_index[present]
        rows.add(1, np.zeros(s_cols.size, dtype=np.int64), s_cols, 1.0, 1.0, np.inf)
    else:
        # (cons: fin assignment): sum_l z_il = 1
        rows.add(n_blocks, np.repeat(block_rows, L), z_index, 1.0, 1.0, 1.0)
    if not reductions:
        # (cons: prox): z_il = z_kl along a star of each proximity component
        order = np.argsort(problem.component, kind="stable")
        comp_sorted = problem.component[order]
        first = order[np.searchsorted(comp_sorted, comp_sorted)]
        members = order[order != first]
        heads = first[order != first]
        if members.size:
            m = members.size
            r = np.arange(m * L).reshape(m, L)
            rows.add(
                m * L,
                np.stack([r, r], axis=-1),
                np.stack([z_index[heads], z_index[members]], axis=-1),
                np.array([1.0, -1.0]),
                0.0,
                0.0,
            )
    # (cons: sparsity): a_tj - s_tj <= 0 and a_tj + s_tj >= 0
    ts = np.flatnonzero(present.ravel())
    r = np.arange(ts.size)
    a_flat, s_flat = a_index.ravel()[ts], s_index.ravel()[ts]
    pair = np.column_stack([a_flat, s_flat])
    rows.add(ts.size, np.repeat(r, 2), pair, np.tile([1.0, -1.0], ts.size), -np.inf, 0.0)
    rows.add(ts.size, np.repeat(r, 2), pair, 1.0, 0.0, np.inf)

    A, row_lower, row_upper = rows.matrix(n_vars)
    return MilpModel(
        c=c,
        A=A,
        row_lower=row_lower,
        row_upper=row_upper,
        col_lower=col_lower,
        col_upper=col_upper,
        integrality=integrality,
        objective_constant=constant,
        a_index=a_index,
        b_index=b_index,
        s_index=s_index,
        z_index=z_index,
        q_left_index=q_left,
        q_right_index=q_right,
        block=blocks,
        formulation=problem.formulation,
        reductions=reductions,
    )


def encode(coef, intercept, leaves, model: MilpModel) -> np.ndarray:
    """Solution vector of a tree for ``model`` (e.g. a warm start).

    Parameters
    ----------
    coef : array (2^D - 1, p)
    intercept : array (2^D - 1,)
    leaves : array (n,)
        Leaf position of every sample under the tree's routing.

    Returns
    -------
    ndarray (n_vars,)
        ``s_tj = [a_tj != 0]``; ``z``, ``q`` from the leaves. Check it with
        :meth:`MilpModel.is_feasible` (a tree can violate the frequency, proximity or
        epsilon-gap constraints).
    """
    coef = np.asarray(coef, dtype=np.float64)
    n_branch = model.b_index.shape[0]
    x = np.zeros(model.n_vars)
    present = model.a_index >= 0
    x[model.a_index[present]] = coef[present]
    x[model.s_index[present]] = (coef[present] != 0).astype(np.float64)
    x[model.b_index] = np.asarray(intercept, dtype=np.float64)
    leaf = np.asarray(leaves) - n_branch
    n_blocks = model.z_index.shape[0]
    # a block takes its members' leaf; members that disagree leave a routing row (reduced
    # model) or a proximity row (unreduced model) violated
    block_leaf = np.zeros(n_blocks, dtype=np.int64)
    block_leaf[model.block] = leaf
    x[model.z_index[np.arange(n_blocks), block_leaf]] = 1.0
    if model.q_left_index is not None:
        depth = int(np.log2(n_branch + 1))
        S_L, S_R = subtree_leaves(depth)
        x[model.q_left_index] = S_L[:, block_leaf].T
        x[model.q_right_index] = S_R[:, block_leaf].T
    return x
