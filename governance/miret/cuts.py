"""Exact cut scanning: the cheapest MILP-feasible hyperplane along candidate directions."""

from __future__ import annotations

import numpy as np

from miret_governance.governance.miret.layout import hyperplane_values
from miret_governance.governance.miret.search_state import SearchState

REALIZE_TRIES = 12  # cheapest cuts tried when turning a cut into a feasible hyperplane
SCAN_WORK = 2000  # work of one scan beyond its pairs (sorting, routing and realizing around it)
PRESORT_SHARE = 4  # univariate scans of at least 1/4 of the rows reuse the sample's sort


def splits_components(order: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """(m+1, k) bool: cut ``c`` (left = first ``c`` rows of ``order``'s column, an
    argsort of the projections) separates a component."""
    m, k = order.shape
    counts = np.bincount(groups)
    multi = counts[groups] > 1
    split = np.zeros((m + 1, k), dtype=bool)
    if not multi.any():
        return split
    rank = np.empty_like(order)
    rank[order, np.arange(k)] = np.arange(m)[:, None]
    sub_groups = groups[multi]
    order = np.argsort(sub_groups, kind="stable")
    sub_rank = rank[multi][order]
    sub_groups = sub_groups[order]
    starts = np.flatnonzero(np.r_[True, sub_groups[1:] != sub_groups[:-1]])
    low = np.minimum.reduceat(sub_rank, starts, axis=0)
    high = np.maximum.reduceat(sub_rank, starts, axis=0)
    # +1 where a component starts (after its first row), -1 where it ends
    columns = np.arange(k)
    delta = np.bincount(((low + 1) * k + columns).ravel(), minlength=(m + 2) * k)
    delta -= np.bincount(((high + 1) * k + columns).ravel(), minlength=(m + 2) * k)
    return np.cumsum(delta.reshape(m + 2, k), axis=0)[: m + 1] > 0


def cheapest(values: np.ndarray, count: int) -> np.ndarray:
    """Positions of the ``count`` smallest finite ``values``, smallest first, ties by
    position: the finite head of ``np.argsort(values, kind="stable")[:count]`` without
    sorting every value (the scan's cost arrays hold 2 (m+1) k of them)."""
    if values.size > count:
        kth = np.partition(values, count - 1)[count - 1]
        keep = np.flatnonzero(values <= kth if np.isfinite(kth) else np.isfinite(values))
    else:
        keep = np.flatnonzero(np.isfinite(values))
    return keep[np.argsort(values[keep], kind="stable")][:count]


class CutSearch(SearchState):
    """Cut scanning along directions, with the epsilon gap and components as hard limits."""

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

    def column_order(self, idx, columns):
        """``np.argsort(self.X[idx][:, columns], axis=0, kind="stable")``, or None.

        When ``idx`` is increasing and holds at least ``1 / PRESORT_SHARE`` of the rows,
        the sample's rows in sorted order (one stable sort per fit) restricted to ``idx``
        give it in ``n k`` steps instead of ``m log m k``: equal values keep the order of
        the rows, which is their order in ``idx``.
        """
        m = idx.size
        if m * PRESORT_SHARE < self.n or np.any(idx[1:] <= idx[:-1]):
            return None
        if self.sorted_rows is None:
            self.sorted_rows = np.argsort(self.X, axis=0, kind="stable")
        position = np.full(self.n, -1, dtype=np.int64)
        position[idx] = np.arange(m)
        ranked = position[self.sorted_rows[:, columns]].T
        return ranked[ranked >= 0].reshape(columns.size, m).T

    def scan(self, S, L, R, groups, order=None):
        """Cost of every cut of every projection column of ``S`` for both orientations.

        ``order``: the stable argsort of ``S``'s columns when known. Returns
        ``(cost, sorted_S, order)`` with ``cost`` of shape (2, m+1, k):
        orientation 0 sends the low side to the left child, 1 to the right child;
        invalid cuts (epsilon gap, components, empty side) cost ``inf``.
        """
        m, k = S.shape
        self.work += m * k + SCAN_WORK
        if order is None:
            order = np.argsort(S, axis=0, kind="stable")
        sorted_S = S[order, np.arange(k)]
        cum_left = np.zeros((m + 1, k))
        cum_right = np.zeros((m + 1, k))
        cum_left[1:] = np.cumsum(L[order], axis=0)
        cum_right[1:] = np.cumsum(R[order], axis=0)
        cost = np.empty((2, m + 1, k))
        np.add(cum_left, cum_right[-1] - cum_right, out=cost[0])
        np.add(cum_right, cum_left[-1] - cum_left, out=cost[1])
        valid = np.zeros((m + 1, k), dtype=bool)
        valid[1:m] = sorted_S[1:] - sorted_S[:-1] >= self.min_gap
        valid[1:m] &= ~splits_components(order, groups)[1:m]
        cost[:, ~valid] = np.inf
        return cost, sorted_S, order

    def best_cut(self, W, extra, idx, L, R, groups, level, swappable, columns=None):
        """Cheapest realizable cut over directions ``W`` (rows, max |w| = 1).

        ``extra`` is the penalty of each direction; ``columns``: the features of ``W``'s
        rows when they are :meth:`univariate`'s unit directions (the projections are
        then those columns, exactly). Returns ``(cost, a, b, swap)`` or None; ``swap``
        means the hyperplane sends the low side left only after the two child subtrees
        are exchanged.
        """
        if W.shape[0] == 0 or idx.size < 2:
            return None
        if columns is None:
            S, order = self.X[idx] @ W.T, None
        else:
            S, order = self.X[idx][:, columns], self.column_order(idx, columns)
        cost, sorted_S, order = self.scan(S, L, R, groups, order)
        total = cost + extra[None, None, :]
        for index in cheapest(total.ravel(), REALIZE_TRIES):
            value = total.flat[index]
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

    def gini_shortlist(self, idx, groups, level, size):
        """Univariate splits with the lowest weighted Gini impurity, one per feature."""
        columns = np.flatnonzero(self.allowed[level])
        if columns.size == 0 or idx.size < 2:
            return []
        W, extra = self.univariate(level)
        # weight of each class (rows) among the samples; scan gives the valid cuts
        mass = self.w[idx][None, :] * (self.y[idx][None, :] == np.arange(self.n_classes)[:, None])
        cost, sorted_S, order = self.scan(
            self.X[idx][:, columns],
            mass[0],
            np.zeros(idx.size),
            groups,
            self.column_order(idx, columns),
        )
        valid = np.isfinite(cost[0])
        left = np.zeros((self.n_classes, *cost[0].shape))
        for c in range(self.n_classes):
            left[c, 1:] = np.cumsum(mass[c][order], axis=0)
        right = mass.sum(axis=1)[:, None, None] - left
        # half the weighted Gini impurity of a side: sum_{c < c'} m_c m_c' / sum_c m_c
        gini = np.zeros(valid.shape)
        with np.errstate(invalid="ignore", divide="ignore"):
            for side in (left, right):
                pairs = np.zeros(valid.shape)
                for c in range(self.n_classes):
                    for d in range(c + 1, self.n_classes):
                        pairs += side[c] * side[d]
                gini += np.nan_to_num(pairs / side.sum(axis=0))
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
