"""A feasible starting tree for the MIRET MILP, and a checker of MILP feasibility.

:func:`warm_start` builds greedy univariate trees top-down (exact split at the last
level, Gini shortlist with greedy look-ahead above; one tree per shortlisted root split),
then improves the best few by tree alternating optimization: every branch node in turn,
deepest level first, refits its hyperplane on the samples that reach it while the rest
of the tree stays fixed. A node's candidates are univariate cuts, the current direction,
directions from an L1 logistic regression with per-feature penalties ``alpha / f_{d,j}``
(columns rescaled by ``f``) and their sparsifications, and a fresh greedy subtree; each
direction's threshold is re-optimized exactly for the MIRET objective, with the epsilon
gap and the proximity components as hard constraints. A move is kept only when the
objective strictly decreases, so the result is never worse than the greedy tree. Random
subtree restarts ("kicks") followed by local search use the rest of the budget.

Every tree produced satisfies the MILP constraints (paper, "The basic MILP model" and
"Improving the basic MIRET formulation"), which :func:`check_feasible` verifies.
"""

from __future__ import annotations

import hashlib
import time
import warnings

import numpy as np
from sklearn.linear_model import LogisticRegression

from governance.miret.tree import SurrogateTree, hyperplane_values, node_level

_GAP_SLACK = 1e-4  # a cut needs a gap of at least epsilon * (1 + slack) between sides
_LOOKAHEAD = 8  # Gini-shortlisted splits evaluated with a greedy completion
_REALIZE_TRIES = 12  # cheapest cuts tried when turning a cut into a feasible hyperplane
_LOGISTIC_C = (0.05, 0.5, 5.0, 50.0)
_STARTS = 4  # greedy starting trees improved by local search
_GREEDY_SHARE = 0.4  # share of the time budget after which greedy trees stop looking ahead
_KICKS = 20  # random restarts of a subtree from the best tree, each followed by local search
_IMPROVEMENT = 1e-9


def _digest(*arrays) -> bytes:
    """Content key of arrays (for memoizing work on unchanged inputs)."""
    h = hashlib.blake2b(digest_size=16)
    for array in arrays:
        array = np.ascontiguousarray(array)
        h.update(str(array.shape).encode())
        h.update(array.tobytes())
    return h.digest()


def _subtree_ranges(node: int, levels_below: int):
    """Breadth-first id ranges of the branch nodes of the subtree rooted at ``node``."""
    return [(2**k * node + 2**k - 1, 2**k) for k in range(levels_below)]


def _broken(groups: np.ndarray, leaf: np.ndarray, gap: np.ndarray) -> np.ndarray:
    """Per sample: does its component end in several leaves or cross a gap?"""
    n_groups = int(groups.max()) + 1 if groups.size else 0
    low = np.full(n_groups, np.iinfo(np.int64).max)
    high = np.full(n_groups, -1)
    np.minimum.at(low, groups, leaf)
    np.maximum.at(high, groups, leaf)
    bad = low != high
    if gap.any():
        bad[np.unique(groups[gap])] = True
    return bad[groups]


def _splits_components(rank: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """(m+1, k) bool: cut ``c`` (left = first ``c`` in sorted order) separates a component."""
    m, k = rank.shape
    counts = np.bincount(groups)
    multi = counts[groups] > 1
    split = np.zeros((m + 1, k), dtype=bool)
    if not multi.any():
        return split
    sub_groups = groups[multi]
    order = np.argsort(sub_groups, kind="stable")
    sub_rank = rank[multi][order]
    sub_groups = sub_groups[order]
    starts = np.flatnonzero(np.r_[True, sub_groups[1:] != sub_groups[:-1]])
    low = np.minimum.reduceat(sub_rank, starts, axis=0)
    high = np.maximum.reduceat(sub_rank, starts, axis=0)
    delta = np.zeros((m + 2, k), dtype=np.int64)
    columns = np.broadcast_to(np.arange(k), low.shape)
    np.add.at(delta, (low + 1, columns), 1)
    np.add.at(delta, (high + 1, columns), -1)
    return np.cumsum(delta, axis=0)[: m + 1] > 0


class _Search:
    """Working state: problem arrays, current tree and hyperplane values of all samples."""

    def __init__(self, problem, rng):
        self.X = np.ascontiguousarray(np.asarray(problem.X, dtype=np.float64))
        self.y = np.asarray(problem.y, dtype=np.int64)
        self.w = np.asarray(problem.weight, dtype=np.float64)
        self.comp = np.asarray(problem.component, dtype=np.int64)
        self.allowed = np.asarray(problem.allowed, dtype=bool)
        self.penalty = np.asarray(problem.penalty, dtype=np.float64)
        self.depth = int(problem.depth)
        self.eps = float(problem.epsilon)
        self.min_gap = self.eps * (1 + _GAP_SLACK)
        self.n, self.p = self.X.shape
        self.n_branch = 2**self.depth - 1
        self.level = node_level(np.arange(self.n_branch))
        miret = problem.formulation == "miret"
        self.bmin = np.array(
            [0.0 if miret and d < self.depth - 1 else -1.0 for d in range(self.depth)]
        )
        self.need_split = miret
        self.big = float(self.w.sum() + self.penalty.sum() + 1.0)
        self.rng = rng
        self.seed = int(rng.integers(2**31 - 1))
        self.memo = {}  # memoized logistic fits, greedy subtrees and settled nodes
        self.lookahead_until = np.inf  # perf_counter time after which greedy stops looking ahead
        self.coef = np.zeros((self.n_branch, self.p))
        self.intercept = np.zeros(self.n_branch)
        self.V = np.zeros((self.n, self.n_branch))

    # ------------------------------------------------------------------ tree state
    def set_tree(self, coef, intercept):
        self.coef = np.array(coef, dtype=np.float64)
        self.intercept = np.array(intercept, dtype=np.float64)
        for t in range(self.n_branch):
            self.V[:, t] = hyperplane_values(self.X, self.coef[t], self.intercept[t])

    def route(self, idx, start):
        """Leaf and gap flag of samples ``idx`` routed from node ``start`` downwards."""
        node = np.full(idx.size, start, dtype=np.int64)
        gap = np.zeros(idx.size, dtype=bool)
        for _ in range(int(node_level(start)), self.depth):
            value = self.V[idx, node]
            gap |= (value > 0) & (value < self.eps)
            node = 2 * node + 1 + (value > 0)
        return node, gap

    def reaching(self):
        """Samples reaching each branch node (list of index arrays)."""
        node = np.zeros(self.n, dtype=np.int64)
        rows = np.arange(self.n)
        out = [None] * self.n_branch
        for _ in range(self.depth):
            order = np.argsort(node, kind="stable")
            sorted_nodes = node[order]
            bounds = np.searchsorted(sorted_nodes, np.unique(sorted_nodes), side="left")
            for start, stop in zip(bounds, np.r_[bounds[1:], order.size], strict=True):
                out[int(sorted_nodes[start])] = order[start:stop]
            node = 2 * node + 1 + (self.V[rows, node] > 0)
        return [np.zeros(0, dtype=np.int64) if o is None else o for o in out]

    def loss(self, leaf, idx):
        sign = np.where(leaf % 2 == 1, -1, 1)
        return self.w[idx] * (sign != self.y[idx])

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
        return not gap.any() and not _broken(self.comp, leaf, gap).any()

    def swap_children(self, t):
        below = self.depth - 1 - int(self.level[t])
        for (left, size), (right, _) in zip(
            _subtree_ranges(2 * t + 1, below), _subtree_ranges(2 * t + 2, below), strict=True
        ):
            a, b = slice(left, left + size), slice(right, right + size)
            for array in (self.coef, self.intercept):
                array[a], array[b] = array[b].copy(), array[a].copy()
            self.V[:, a], self.V[:, b] = self.V[:, b].copy(), self.V[:, a].copy()

    # ------------------------------------------------------------------ cuts
    def realize(self, w, s_left, s_right, level, idx, left_mask):
        """Hyperplane ``(a, b)`` sending ``w.x <= s_left`` left and ``w.x >= s_right``
        right within the MILP bounds and the epsilon gap, or None."""
        eps, bmin = self.eps, self.bmin[level]
        scale = 1.0
        if s_right < 0:
            scale = min(scale, (1 - eps) / -s_right)
        if s_left > 0:
            if bmin >= 0:
                return None
            scale = min(scale, 1.0 / s_left)
        if scale * (s_right - s_left) < self.min_gap:
            return None
        low = max(eps - scale * s_right, bmin)
        high = min(-scale * s_left, 1.0)
        if low > high:
            return None
        a, b = scale * w, 0.5 * (low + high)
        value = hyperplane_values(self.X[idx], a, b)
        if np.any(value[left_mask] > 0) or np.any(value[~left_mask] < eps):
            return None
        return a, b

    def scan(self, S, L, R, groups):
        """Cost of every cut of every projection column of ``S`` for both orientations.

        Returns ``(cost, sorted_S, order)`` with ``cost`` of shape (2, m+1, k):
        orientation 0 sends the low side to the left child, 1 to the right child;
        invalid cuts (epsilon gap, components, empty side) cost ``inf``.
        """
        m, k = S.shape
        order = np.argsort(S, axis=0, kind="stable")
        sorted_S = np.take_along_axis(S, order, axis=0)
        cum_left = np.zeros((m + 1, k))
        cum_right = np.zeros((m + 1, k))
        cum_left[1:] = np.cumsum(L[order], axis=0)
        cum_right[1:] = np.cumsum(R[order], axis=0)
        cost = np.stack(
            [cum_left + (cum_right[-1] - cum_right), cum_right + (cum_left[-1] - cum_left)]
        )
        valid = np.zeros((m + 1, k), dtype=bool)
        valid[1:m] = np.diff(sorted_S, axis=0) >= self.min_gap
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(m)[:, None], axis=0)
        valid &= ~_splits_components(rank, groups)
        cost[:, ~valid] = np.inf
        return cost, sorted_S, order

    def best_cut(self, W, extra, idx, L, R, groups, level, swappable):
        """Cheapest realizable cut over directions ``W`` (rows, max |w| = 1).

        ``extra`` is the penalty of each direction. Returns ``(cost, a, b, swap)`` or None;
        ``swap`` means the hyperplane sends the low side left only after the two child
        subtrees are exchanged.
        """
        if W.shape[0] == 0 or idx.size < 2:
            return None
        S = self.X[idx] @ W.T
        cost, sorted_S, order = self.scan(S, L, R, groups)
        total = cost + extra[None, None, :]
        flat = np.argsort(total, axis=None, kind="stable")[:_REALIZE_TRIES]
        for index in flat:
            value = total.flat[index]
            if not np.isfinite(value):
                break
            side, cut, col = np.unravel_index(index, total.shape)
            low_side = np.zeros(idx.size, dtype=bool)
            low_side[order[:cut, col]] = True
            lo, hi = sorted_S[cut - 1, col], sorted_S[cut, col]
            w = W[col]
            # orientation 0: low side to the (current) left child; 1: to the right child
            options = [(w, lo, hi, low_side, False), (-w, -hi, -lo, ~low_side, True)]
            if side == 1:
                options = [(-w, -hi, -lo, ~low_side, False), (w, lo, hi, low_side, True)]
            for direction, s_left, s_right, left_mask, swap in options:
                if swap and not swappable:
                    continue
                found = self.realize(direction, s_left, s_right, level, idx, left_mask)
                if found is not None:
                    return float(value), found[0], found[1], swap
        return None

    def univariate(self, level):
        """Unit directions of the features allowed at ``level`` and their penalties."""
        columns = np.flatnonzero(self.allowed[level])
        W = np.zeros((columns.size, self.p))
        W[np.arange(columns.size), columns] = 1.0
        return W, self.penalty[level, columns]

    # ------------------------------------------------------------------ greedy
    def grow(self, t, idx, lookahead, out):
        """Greedy subtree at ``t`` for samples ``idx``; writes ``out[node] = (a, b)``."""
        if idx.size == 0:
            return 0.0
        if lookahead and time.perf_counter() < self.lookahead_until:
            key = ("greedy", t, _digest(idx))
            if key not in self.memo:
                sub = {}
                self.memo[key] = (self._grow(t, idx, True, sub), sub)
            cost, sub = self.memo[key]
            out.update(sub)
            return cost
        return self._grow(t, idx, False, out)

    def _grow(self, t, idx, lookahead, out):
        level = int(self.level[t])
        y, w = self.y[idx], self.w[idx]
        groups = np.unique(self.comp[idx], return_inverse=True)[1]
        if level == self.depth - 1:
            L, R = w * (y != -1), w * (y != 1)
            best = (float(L.sum()), np.zeros(self.p), 0.0)
            if R.sum() < L.sum():
                best = (float(R.sum()), np.zeros(self.p), 1.0)
            W, extra = self.univariate(level)
            found = self.best_cut(W, extra, idx, L, R, groups, level, swappable=False)
            if found is not None and found[0] < best[0] - _IMPROVEMENT:
                best = found[:3]
            out[t] = (best[1], best[2])
            return best[0]
        candidates = self.gini_shortlist(idx, groups, level, _LOOKAHEAD if lookahead else 1)
        candidates.insert(min(1, len(candidates)), (np.zeros(self.p), 0.0, 0.0))
        best = None
        for k, (a, b, penalty) in enumerate(candidates):
            if k >= 2 and time.perf_counter() >= self.lookahead_until:
                break
            left = hyperplane_values(self.X[idx], a, b) <= 0
            sub = {}
            cost = penalty + self.grow(2 * t + 1, idx[left], False, sub)
            cost += self.grow(2 * t + 2, idx[~left], False, sub)
            if best is None or cost < best[0] - _IMPROVEMENT:
                best = (cost, a, b, left, sub)
        cost, a, b, left, sub = best
        if lookahead:
            deeper = {}
            deep_cost = self.node_penalty(t, a) + self.grow(2 * t + 1, idx[left], True, deeper)
            deep_cost += self.grow(2 * t + 2, idx[~left], True, deeper)
            if deep_cost < cost - _IMPROVEMENT:
                cost, sub = deep_cost, deeper
        out.update(sub)
        out[t] = (a, b)
        return cost

    def gini_shortlist(self, idx, groups, level, size):
        """Univariate splits with the lowest weighted Gini impurity, one per feature."""
        columns = np.flatnonzero(self.allowed[level])
        if columns.size == 0 or idx.size < 2:
            return []
        W, extra = self.univariate(level)
        positive = self.w[idx] * (self.y[idx] == 1)
        negative = self.w[idx] * (self.y[idx] != 1)
        # scan's orientation-0 cost with (L, R) = (positive, 0) is the left positive mass
        cost_pos, sorted_S, order = self.scan(
            self.X[idx][:, columns], positive, np.zeros_like(positive), groups
        )
        left_pos = cost_pos[0]
        valid = np.isfinite(left_pos)
        cum_neg = np.zeros_like(left_pos)
        cum_neg[1:] = np.cumsum(negative[order], axis=0)
        left_pos = np.where(valid, left_pos, 0.0)
        left_neg = cum_neg
        right_pos, right_neg = positive.sum() - left_pos, negative.sum() - left_neg
        with np.errstate(invalid="ignore", divide="ignore"):
            gini = np.nan_to_num(left_pos * left_neg / (left_pos + left_neg)) + np.nan_to_num(
                right_pos * right_neg / (right_pos + right_neg)
            )
        gini[~valid] = np.inf
        best_cut = np.argmin(gini, axis=0)
        best_value = gini[best_cut, np.arange(columns.size)]
        shortlist = []
        for col in np.argsort(best_value, kind="stable"):
            if len(shortlist) == size or not np.isfinite(best_value[col]):
                break
            cut = best_cut[col]
            low_side = np.zeros(idx.size, dtype=bool)
            low_side[order[:cut, col]] = True
            lo, hi = sorted_S[cut - 1, col], sorted_S[cut, col]
            found = self.realize(W[col], lo, hi, level, idx, low_side)
            if found is None:
                found = self.realize(-W[col], -hi, -lo, level, idx, ~low_side)
            if found is not None:
                shortlist.append((found[0], found[1], float(extra[col])))
        return shortlist

    # ------------------------------------------------------------------ local search
    def child_costs(self, t, idx):
        """Loss of each sample of ``idx`` if sent left / right at ``t`` (inf-like when the
        fixed subtree there would break a component or put it in an epsilon gap)."""
        groups = np.unique(self.comp[idx], return_inverse=True)[1]
        costs = []
        for child in (2 * t + 1, 2 * t + 2):
            if int(self.level[t]) == self.depth - 1:
                leaf, gap = np.full(idx.size, child), np.zeros(idx.size, dtype=bool)
            else:
                leaf, gap = self.route(idx, child)
            cost = self.loss(leaf, idx)
            costs.append(cost + self.big * _broken(groups, leaf, gap))
        return costs[0], costs[1], groups

    def logistic_directions(self, level, rows, target, weight):
        """Directions of L1 logistic fits with per-feature penalties ``alpha / f_{d,j}``
        (columns rescaled by ``f``), one per regularization strength."""
        key = ("logistic", level, _digest(rows, target, weight))
        if key in self.memo:
            return self.memo[key]
        columns = np.flatnonzero(self.allowed[level])
        penalty = self.penalty[level, columns]
        scale = np.where(penalty > 0, 1.0 / np.where(penalty > 0, penalty, 1.0), 1.0)
        scale = scale / scale.max()
        Z = self.X[rows][:, columns] * scale
        found = []
        for C in _LOGISTIC_C:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = LogisticRegression(
                    l1_ratio=1.0, solver="liblinear", C=C, max_iter=500, random_state=self.seed
                ).fit(Z, target, sample_weight=weight)
            a = np.zeros(self.p)
            a[columns] = model.coef_[0] * scale
            if np.any(a != 0):
                found.append(a)
        self.memo[key] = found
        return found

    def directions(self, t, idx, L, R):
        """Oblique candidate directions at ``t``: current and L1-logistic ones, with their
        sparsification paths."""
        level = int(self.level[t])
        columns = np.flatnonzero(self.allowed[level])
        bases = []
        if np.any(self.coef[t] != 0):
            bases.append(self.coef[t].copy())
        care = L != R
        target = R[care] < L[care]
        if columns.size and care.sum() >= 2 and 0 < target.sum() < target.size:
            cap = 2.0 * float(self.w.max())
            weight = np.minimum(np.abs(L - R)[care], cap)
            bases += self.logistic_directions(level, idx[care], target, weight)
        spread = np.ptp(self.X[idx], axis=0) if idx.size else np.zeros(self.p)
        rows, seen = [], set()
        for base in bases:
            importance = np.abs(base) * spread
            keep = np.flatnonzero(base != 0)
            keep = keep[np.argsort(importance[keep], kind="stable")[::-1]]
            for size in range(keep.size, 0, -1):
                direction = np.zeros(self.p)
                direction[keep[:size]] = base[keep[:size]]
                direction /= np.abs(direction).max()
                key = direction.tobytes()
                if key not in seen:
                    seen.add(key)
                    rows.append(direction)
        W = np.array(rows).reshape(len(rows), self.p)
        return W, (W != 0) @ self.penalty[level]

    def improve_node(self, t, idx):
        """Refit node ``t`` on the samples reaching it; True when the objective dropped."""
        level = int(self.level[t])
        if idx.size == 0:
            if np.any(self.coef[t] != 0):
                return self.commit(t, np.zeros(self.p), 0.0, False)
            return False
        L, R, groups = self.child_costs(t, idx)
        key = ("settled", t, _digest(idx, L, R, self.coef[t], self.intercept[t]))
        if key in self.memo:
            return False
        current = float(np.where(self.V[idx, t] > 0, R, L).sum()) + self.node_penalty(t)
        best = (float(L.sum()), np.zeros(self.p), 0.0, False)
        if R.sum() < L.sum():
            best = (float(R.sum()), np.zeros(self.p), 1.0, False)
        swappable = level < self.depth - 1
        W_uni, extra_uni = self.univariate(level)
        W_obl, extra_obl = self.directions(t, idx, L, R)
        for W, extra in ((W_uni, extra_uni), (W_obl, extra_obl)):
            found = self.best_cut(W, extra, idx, L, R, groups, level, swappable)
            if found is not None and found[0] < best[0] - _IMPROVEMENT:
                best = found
        if best[0] < current - _IMPROVEMENT and self.commit(t, best[1], best[2], best[3]):
            return True
        self.memo[key] = True
        return False

    def commit(self, t, a, b, swap):
        """Apply a node change if it keeps the tree feasible and lowers the objective."""
        saved = (self.coef.copy(), self.intercept.copy(), self.V.copy())
        before = self.objective()
        if swap:
            self.swap_children(t)
        self.coef[t], self.intercept[t] = a, b
        self.V[:, t] = hyperplane_values(self.X, a, b)
        if self.feasible() and self.objective() < before - _IMPROVEMENT:
            return True
        self.coef, self.intercept, self.V = saved
        return False

    def regrow(self, t, idx):
        """Replace the subtree at ``t`` by a fresh greedy one on the samples reaching it."""
        if idx.size == 0 or int(self.level[t]) == self.depth - 1:
            return False
        out = {}
        self.grow(t, idx, True, out)
        saved = (self.coef.copy(), self.intercept.copy(), self.V.copy())
        before = self.objective()
        below = self.depth - int(self.level[t])
        for start, size in _subtree_ranges(t, below):
            for node in range(start, start + size):
                a, b = out.get(node, (np.zeros(self.p), 0.0))
                self.coef[node], self.intercept[node] = a, b
                self.V[:, node] = hyperplane_values(self.X, a, b)
        if self.feasible() and self.objective() < before - _IMPROVEMENT:
            return True
        self.coef, self.intercept, self.V = saved
        return False

    def kick(self, t):
        """Replace the subtree at ``t`` by a greedy one under a random shortlisted split."""
        idx = self.reaching()[t]
        level = int(self.level[t])
        groups = np.unique(self.comp[idx], return_inverse=True)[1]
        shortlist = self.gini_shortlist(idx, groups, level, _LOOKAHEAD)
        if not shortlist:
            return False
        a, b, _ = shortlist[int(self.rng.integers(len(shortlist)))]
        left = hyperplane_values(self.X[idx], a, b) <= 0
        out = {t: (a, b)}
        self.grow(2 * t + 1, idx[left], True, out)
        self.grow(2 * t + 2, idx[~left], True, out)
        for start, size in _subtree_ranges(t, self.depth - level):
            for node in range(start, start + size):
                a, b = out.get(node, (np.zeros(self.p), 0.0))
                self.coef[node], self.intercept[node] = a, b
                self.V[:, node] = hyperplane_values(self.X, a, b)
        self.ensure_split()
        return True

    def ensure_split(self):
        """Give the tree one nonzero coefficient (the MIRET constraint sum s >= 1) with a
        dummy split that keeps every sample on its current side."""
        if not self.need_split or np.any(self.coef != 0):
            return
        if not self.allowed.any():
            raise ValueError(
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
                    self.V[:, t] = hyperplane_values(self.X, a, b)
                    return
        raise ValueError("could not place the dummy split the MIRET formulation requires")


def _starting_trees(search):
    """Greedy trees, best first: one per shortlisted root split (look-ahead below).

    Returns a list of ``(objective, coef, intercept)``; every tree is feasible.
    """
    idx = np.arange(search.n)
    roots = [None]
    if search.depth > 1:
        groups = np.unique(search.comp, return_inverse=True)[1]
        roots += search.gini_shortlist(idx, groups, 0, _LOOKAHEAD)
    starts = []
    for root in roots:
        if starts and time.perf_counter() >= search.lookahead_until:
            break
        out = {}
        if root is None:
            search.grow(0, idx, True, out)
        else:
            a, b, _ = root
            left = hyperplane_values(search.X, a, b) <= 0
            search.grow(1, idx[left], True, out)
            search.grow(2, idx[~left], True, out)
            out[0] = (a, b)
        coef = np.zeros((search.n_branch, search.p))
        intercept = np.zeros(search.n_branch)
        for node, (a, b) in out.items():
            coef[node], intercept[node] = a, b
        search.set_tree(coef, intercept)
        search.ensure_split()
        starts.append((search.objective(), search.coef.copy(), search.intercept.copy()))
    order = sorted(range(len(starts)), key=lambda k: (starts[k][0], k))
    return [starts[k] for k in order]


def _local_search(search, deadline):
    """Tree alternating optimization until no node improves; (passes, improvements)."""
    passes = improvements = 0
    while time.perf_counter() < deadline:
        passes += 1
        improved = False
        for level in range(search.depth - 1, -1, -1):
            nodes = np.arange(2**level - 1, 2 ** (level + 1) - 1)
            for t in search.rng.permutation(nodes):
                if time.perf_counter() >= deadline:
                    break
                t = int(t)
                if search.improve_node(t, search.reaching()[t]):
                    improved, improvements = True, improvements + 1
                if search.regrow(t, search.reaching()[t]):
                    improved, improvements = True, improvements + 1
        search.ensure_split()
        if not improved:
            break
    return passes, improvements


def warm_start(problem, random_state=0, time_budget=5.0):
    """A MILP-feasible surrogate tree: greedy tree, then local search on the objective.

    Parameters
    ----------
    problem : governance.miret.problem.MiretProblem
    random_state : int
        Seed of the node visiting order and of the logistic fits; results are
        deterministic for a fixed seed (and a budget that is not hit).
    time_budget : float
        Seconds for the whole heuristic. Greedy look-ahead stops after 40% of it, local
        search and restarts at the budget (a node step in progress finishes first; the
        first greedy tree is always built).

    Returns
    -------
    tree : SurrogateTree
        Feasible for the MILP of ``problem`` (:func:`check_feasible` returns no problem).
    info : dict
        ``greedy_objective``, ``objective``, ``passes`` (local-search passes),
        ``improvements`` (accepted moves), ``time_greedy``, ``time`` (seconds),
        ``fidelity`` (share of samples where the tree matches ``y``), ``n_feature_uses``.
    """
    start = time.perf_counter()
    deadline = start + float(time_budget)
    search = _Search(problem, np.random.default_rng(random_state))
    search.lookahead_until = start + _GREEDY_SHARE * float(time_budget)
    starts = _starting_trees(search)
    greedy_objective = starts[0][0]
    time_greedy = time.perf_counter() - start

    best = None
    passes = improvements = 0
    for _, coef, intercept in starts[:_STARTS]:
        if best is not None and time.perf_counter() >= deadline:
            break
        search.set_tree(coef, intercept)
        done = _local_search(search, deadline)
        passes, improvements = passes + done[0], improvements + done[1]
        objective = search.objective()
        if best is None or objective < best[0] - _IMPROVEMENT:
            best = (objective, search.coef.copy(), search.intercept.copy())
    upper = np.arange(2 ** (search.depth - 1) - 1)
    for _ in range(_KICKS if upper.size else 0):
        if time.perf_counter() >= deadline:
            break
        search.set_tree(best[1], best[2])
        if not search.kick(int(search.rng.choice(upper))):
            continue
        done = _local_search(search, deadline)
        passes, improvements = passes + done[0], improvements + done[1]
        objective = search.objective()
        if objective < best[0] - _IMPROVEMENT and search.feasible():
            best = (objective, search.coef.copy(), search.intercept.copy())
    search.set_tree(best[1], best[2])

    tree = SurrogateTree(
        search.coef, search.intercept, search.depth, problem.feature_names, problem.classes
    )
    issues = check_feasible(tree, problem)
    if issues:  # a bug, not a property of the data: every move is checked
        raise RuntimeError("warm start produced an infeasible tree: " + "; ".join(issues))
    leaves = tree.apply(problem.X)
    info = {
        "greedy_objective": greedy_objective,
        "objective": tree.objective(problem),
        "passes": passes,
        "improvements": improvements,
        "time_greedy": time_greedy,
        "time": time.perf_counter() - start,
        "fidelity": float(np.mean(tree.leaf_sign(leaves) == np.asarray(problem.y))),
        "n_feature_uses": tree.n_feature_uses(),
    }
    return tree, info


def check_feasible(tree, problem, epsilon=None, tolerance=1e-9) -> list:
    """Constraint violations of ``tree`` as a solution of the MILP of ``problem``.

    Checks the bounds ``|a| <= 1`` and ``|b| <= 1``, ``b_t >= 0`` above the last level
    and at least one nonzero coefficient (formulation ``"miret"``), the frequency
    constraints (zero coefficients outside ``J_gamma(d)``), the epsilon gap (no sample
    reaching a node has ``0 < a.x + b < epsilon``) and the proximity constraints (one
    leaf per component).

    Parameters
    ----------
    tree : SurrogateTree
    problem : MiretProblem
    epsilon : float, optional
        Gap to check; defaults to ``problem.epsilon``.
    tolerance : float
        Slack on the bounds.

    Returns
    -------
    list of str
        One message per violated constraint family; empty when the tree is feasible.
    """
    if tree.depth != problem.depth or tree.n_features != problem.X.shape[1]:
        return [
            (
                f"tree has depth {tree.depth} and {tree.n_features} features, the problem "
                f"depth {problem.depth} and {problem.X.shape[1]} features"
            )
        ]
    eps = problem.epsilon if epsilon is None else float(epsilon)
    coef, intercept = tree.coef, tree.intercept
    levels = node_level(np.arange(tree.n_branch_nodes))
    issues = []
    if np.any(np.abs(coef) > 1 + tolerance):
        issues.append(
            f"coefficients outside [-1, 1] at nodes "
            f"{np.flatnonzero((np.abs(coef) > 1 + tolerance).any(axis=1)).tolist()}"
        )
    if np.any(np.abs(intercept) > 1 + tolerance):
        issues.append(
            f"intercepts outside [-1, 1] at nodes "
            f"{np.flatnonzero(np.abs(intercept) > 1 + tolerance).tolist()}"
        )
    if problem.formulation == "miret":
        upper = np.flatnonzero((levels < tree.depth - 1) & (intercept < -tolerance))
        if upper.size:
            issues.append(
                f"negative intercept above the last level at nodes {upper.tolist()} "
                "(symmetry breaking b_t >= 0)"
            )
        if not np.any(coef != 0):
            issues.append("no nonzero coefficient (the MIRET formulation needs one split)")
    forbidden = (coef != 0) & ~np.asarray(problem.allowed)[levels]
    if forbidden.any():
        nodes, features = np.nonzero(forbidden)
        issues.append(
            f"features outside J_gamma(level) used at (node, feature) "
            f"{list(zip(nodes.tolist(), features.tolist(), strict=True))[:10]}"
        )
    nodes, values = tree._walk(problem.X)
    in_gap = (values > 0) & (values < eps)
    if in_gap.any():
        rows, cols = np.nonzero(in_gap)
        issues.append(
            f"{rows.size} (sample, node) pairs in the open gap (0, {eps:g}), e.g. "
            f"samples {rows[:5].tolist()} at nodes {nodes[rows[:5], cols[:5]].tolist()}"
        )
    leaves = 2 * nodes[:, -1] + 1 + (values[:, -1] > 0)
    component = np.asarray(problem.component, dtype=np.int64)
    split = np.unique(component[_broken(component, leaves, np.zeros_like(leaves, dtype=bool))])
    if split.size:
        issues.append(
            f"{split.size} proximity components split across leaves (ids {split[:10].tolist()})"
        )
    return issues
