"""Working state of the MIRET warm-start search: tree, routing, objective, feasibility.

The state holds the tree's leaf classes ``leaf_class`` (class indices, leaves left to
right). Two classes: the paper's fixed alternating classes, never changed. More than two:
the classes of the tree being improved; every move keeps them fixed, and
:meth:`SearchState.relabel` then sets each leaf to the weighted majority of its labels
(:func:`governance.miret.layout.majority_classes`), which never raises the objective.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.miret.heuristics import kernels
from miret_governance.governance.miret.problem.layout import (
    hyperplane_values,
    leaves_below,
    majority_classes,
    node_level,
)

GAP_SLACK = 1e-4  # a cut needs a gap of at least epsilon * (1 + slack) between sides
IMPROVEMENT = 1e-9


def digest(*arrays) -> bytes:
    """Content key of arrays (for memoizing work on unchanged inputs)."""
    shapes = repr([array.shape for array in arrays]).encode()
    content = b"".join([array.tobytes() for array in arrays])  # C order, as the shapes
    return hashlib.blake2b(shapes + content, digest_size=16).digest()


def subtree_ranges(node: int, levels_below: int):
    """Breadth-first id ranges of the branch nodes of the subtree rooted at ``node``."""
    return [(2**k * node + 2**k - 1, 2**k) for k in range(levels_below)]


def cycled_classes(problem) -> np.ndarray:
    """Starting leaf classes of a problem of more than two classes without given ones:
    the classes by decreasing total weight ``sum p^i``, repeated left to right (each
    class is reachable; the first move's relabelling replaces them)."""
    mass = np.bincount(problem.y, weights=problem.weight, minlength=problem.n_classes)
    order = np.argsort(-mass, kind="stable")
    return order[np.arange(2**problem.depth) % problem.n_classes].astype(np.int64)


class SearchState:
    """Working state: problem arrays, current tree and hyperplane values of all samples.

    ``work`` counts the (sample, direction) pairs scanned for cuts and the logistic fits'
    rows x columns x iterations (:data:`governance.miret.local_search.LOGISTIC_WORK`):
    the heuristic's budget is counted in this work, so a fixed seed gives the same tree
    under any load.
    ``deadline`` is only a wall-clock safety cap; ``time_limit_hit`` says it was reached.
    """

    def __init__(self, problem, rng, work_budget, deadline=np.inf):
        self.X = np.ascontiguousarray(np.asarray(problem.X, dtype=np.float64))
        self.y = np.asarray(problem.y, dtype=np.int64)
        self.w = np.asarray(problem.weight, dtype=np.float64)
        self.comp = np.asarray(problem.component, dtype=np.int64)
        self.allowed = np.asarray(problem.allowed, dtype=bool)
        self.penalty = np.asarray(problem.penalty, dtype=np.float64)
        self.depth = int(problem.depth)
        self.eps = float(problem.epsilon)
        self.min_gap = self.eps * (1 + GAP_SLACK)
        self.n, self.p = self.X.shape
        self.n_branch = 2**self.depth - 1
        self.n_classes = int(problem.n_classes)
        given = problem.leaf_class is not None or self.n_classes == 2
        self.leaf_class = np.array(
            problem.leaf_classes if given else cycled_classes(problem), dtype=np.int64
        )
        self.level = node_level(np.arange(self.n_branch))
        breaking = problem.symmetry_breaking
        self.bmin = np.array(
            [0.0 if breaking and d < self.depth - 1 else -1.0 for d in range(self.depth)]
        )
        self.need_split = problem.formulation == "miret"
        self.big = float(self.w.sum() + self.penalty.sum() + 1.0)
        self.rng = rng
        self.seed = int(rng.integers(2**31 - 1))
        self.memo = {}  # memoized logistic fits, greedy subtrees and settled nodes
        self.sorted_rows = None  # each column's rows in sorted order, once needed
        self.layout_cells = 0  # cells of the univariate layouts in the memo
        self.work = 0
        self.work_budget = float(work_budget)
        self.lookahead_work = np.inf  # work after which greedy trees stop looking ahead
        self.deadline = deadline
        self.time_limit_hit = False
        self.coef = np.zeros((self.n_branch, self.p))
        self.intercept = np.zeros(self.n_branch)
        self.V = np.zeros((self.n, self.n_branch))

    def exhausted(self) -> bool:
        """Whether the work budget is spent or the safety deadline passed."""
        if time.perf_counter() >= self.deadline:
            self.time_limit_hit = True
        return self.time_limit_hit or self.work >= self.work_budget

    def tree_arrays(self, out):
        """``(coef, intercept)`` of a tree given as ``{node: (a, b)}`` (others zero)."""
        coef = np.zeros((self.n_branch, self.p))
        intercept = np.zeros(self.n_branch)
        for node, (a, b) in out.items():
            coef[node], intercept[node] = a, b
        return coef, intercept

    def set_tree(self, coef, intercept, leaf_class=None):
        """Make ``(coef, intercept)`` the current tree, with ``leaf_class`` (kept if None)."""
        if leaf_class is not None:
            self.leaf_class = np.array(leaf_class, dtype=np.int64)
        self.coef = np.array(coef, dtype=np.float64)
        self.intercept = np.array(intercept, dtype=np.float64)
        for t in range(self.n_branch):
            self.V[:, t] = self.split_values(self.coef[t], self.intercept[t])

    def split_values(self, a, b, rows=None):
        """``hyperplane_values(self.X[rows], a, b)`` (every row when ``rows`` is None).

        A split on one feature is that column times its coefficient plus ``b``: the other
        products are zeros, which leave a sum unchanged, so each value is the same (a zero
        may change sign, which no comparison sees)."""
        nonzero = a.nonzero()[0]  # a is 1-D: np.flatnonzero's result, without its ravel
        if nonzero.size == 1:
            j = int(nonzero[0])
            column = self.X[:, j] if rows is None else self.X[rows, j]
            return column * a[j] + b
        return hyperplane_values(self.X if rows is None else self.X[rows], a, b)

    def route(self, idx, start):
        """Leaf and gap flag of samples ``idx`` routed from node ``start`` downwards."""
        levels = self.depth - (int(start) + 1).bit_length() + 1  # levels below start's
        return kernels.route(self.V, idx, int(start), levels, self.eps)

    def reaching(self):
        """Samples reaching each branch node (list of index arrays)."""
        out = [np.arange(self.n)]
        for t in range(2 ** (self.depth - 1) - 1):  # the children of every upper node
            right = self.V[out[t], t] > 0
            out += [out[t][~right], out[t][right]]
        return out

    def loss(self, leaf, idx):
        return self.w[idx] * (self.leaf_class[leaf - self.n_branch] != self.y[idx])

    def relabel(self) -> bool:
        """Leaf classes to the weighted majority of the current routing (more than two
        classes only); True when a class changed."""
        if self.n_classes == 2:
            return False
        leaf, _ = self.route(np.arange(self.n), 0)
        relabelled = majority_classes(leaf - self.n_branch, self.y, self.w, self.leaf_class)
        changed = bool(np.any(relabelled != self.leaf_class))
        self.leaf_class = relabelled
        return changed

    def node_penalty(self, t, a=None):
        a = self.coef[t] if a is None else a
        return float(self.penalty[self.level[t]][a != 0].sum())

    def objective(self):
        idx = np.arange(self.n)
        leaf, _ = self.route(idx, 0)
        used = self.coef != 0
        return float(self.loss(leaf, idx).sum() + self.penalty[self.level][used].sum())

    def feasible(self) -> bool:
        idx = np.arange(self.n)
        leaf, gap = self.route(idx, 0)
        if self.need_split and not np.any(self.coef != 0):
            return False
        return not gap.any() and not kernels.components_broken(self.comp, leaf, gap).any()

    def swap_children(self, t):
        below = self.depth - 1 - int(self.level[t])
        for (left, size), (right, _) in zip(
            subtree_ranges(2 * t + 1, below), subtree_ranges(2 * t + 2, below), strict=True
        ):
            a, b = slice(left, left + size), slice(right, right + size)
            for array in (self.coef, self.intercept):
                array[a], array[b] = array[b].copy(), array[a].copy()
            self.V[:, a], self.V[:, b] = self.V[:, b].copy(), self.V[:, a].copy()
        # the leaf classes move with their subtrees (two classes: the same pattern)
        span = leaves_below(t, self.n_branch)
        part = slice(span.start, span.stop)
        self.leaf_class[part] = np.roll(self.leaf_class[part], len(span) // 2)

    def ensure_split(self):
        """Give the tree one nonzero coefficient (the MIRET constraint sum s >= 1) with a
        dummy split that keeps every sample on its current side."""
        if not self.need_split or np.any(self.coef != 0):
            return
        if not self.allowed.any():
            raise InvalidInputError(
                "no feature is allowed at any level (every J_gamma(d) is empty), so the MIRET "
                "constraint 'at least one split' cannot hold; lower gamma_percentile"
            )
        reach = self.reaching()
        levels, features = np.nonzero(self.allowed)
        for k in np.argsort(self.penalty[levels, features], kind="stable"):
            level, j = int(levels[k]), int(features[k])
            for t in range(2**level - 1, 2 ** (level + 1) - 1):
                a = np.zeros(self.p)
                goes_right = self.intercept[t] > 0
                a[j], b = (1.0, 1.0) if goes_right else (-1.0, 0.0)
                value = hyperplane_values(self.X[reach[t]], a, b)
                if np.all(value >= self.eps) if goes_right else np.all(value <= 0):
                    self.coef[t], self.intercept[t] = a, b
                    self.V[:, t] = self.split_values(a, b)
                    return
        raise InvalidInputError("could not place the dummy split the MIRET formulation requires")
