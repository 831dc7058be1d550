"""Exact cut scanning: the cheapest MILP-feasible hyperplane along candidate directions."""

from __future__ import annotations

import numpy as np

from miret_governance.governance.miret.heuristics.search_state import SearchState, digest
from miret_governance.governance.miret.problem.layout import hyperplane_values

REALIZE_TRIES = 12  # cheapest cuts tried when turning a cut into a feasible hyperplane
SCAN_WORK = 2000  # work of one scan beyond its pairs (sorting, routing and realizing around it)
PRESORT_SHARE = 4  # univariate scans of at least 1/4 of the rows reuse the sample's sort
LAYOUT_CELLS = 1_000_000  # cells (rows x columns) of univariate layouts a search memoizes (17 MB)


def splits_components(order: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """(m+1, k) bool: cut ``c`` (left = first ``c`` rows of ``order``'s column, an
    argsort of the projections) separates a component (``groups``: each row's component
    number, non-negative)."""
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

    def layout(self, S, idx, order=None):
        """``(order, sorted_S, valid)`` of the projection columns of ``S`` (the rows
        ``idx``): the stable argsort of each column (``order`` when known), the sorted
        projections and the (m+1, k) cuts that leave the epsilon gap and split no
        component."""
        m, k = S.shape
        if order is None:
            order = np.argsort(S, axis=0, kind="stable")
        sorted_S = S[order, np.arange(k)]
        valid = np.zeros((m + 1, k), dtype=bool)
        valid[1:m] = sorted_S[1:] - sorted_S[:-1] >= self.min_gap
        valid[1:m] &= ~splits_components(order, self.comp[idx])[1:m]
        return order, sorted_S, valid

    def univariate_layout(self, idx, level):
        """:meth:`layout` of the features allowed at ``level`` on the rows ``idx``,
        memoized while the memo holds fewer than ``LAYOUT_CELLS`` cells: it depends on
        the rows alone, and the greedy and local searches scan the same rows many times
        with other costs."""
        key = ("layout", level, digest(idx))
        if key in self.memo:
            return self.memo[key]
        columns = np.flatnonzero(self.allowed[level])
        found = self.layout(self.X[idx][:, columns], idx, self.column_order(idx, columns))
        if self.layout_cells + found[2].size <= LAYOUT_CELLS:
            self.layout_cells += found[2].size
            self.memo[key] = found
        return found

    def count_scan(self, m, k):
        """Count the work of a scan of ``m`` rows and ``k`` directions: its pairs plus
        ``SCAN_WORK`` (also when a memo spares the scan, so the budget ends the search
        where it would without the memo)."""
        self.work += m * k + SCAN_WORK

    def scan(self, L, R, layout):
        """Cost of every cut of every projection column of a :meth:`layout` for both
        orientations, shape (2, m+1, k): orientation 0 sends the low side to the left
        child, 1 to the right child; invalid cuts (epsilon gap, components, empty side)
        cost ``inf``."""
        order, _, valid = layout
        m, k = order.shape
        self.count_scan(m, k)
        cum_left = np.zeros((m + 1, k))
        cum_right = np.zeros((m + 1, k))
        cum_left[1:] = np.cumsum(L[order], axis=0)
        cum_right[1:] = np.cumsum(R[order], axis=0)
        cost = np.empty((2, m + 1, k))
        np.add(cum_left, cum_right[-1] - cum_right, out=cost[0])
        np.add(cum_right, cum_left[-1] - cum_left, out=cost[1])
        cost[:, ~valid] = np.inf
        return cost

    def best_cut(self, W, extra, idx, L, R, level, swappable, univariate=False):
        """Cheapest realizable cut over directions ``W`` (rows, max |w| = 1).

        ``extra`` is the penalty of each direction; ``univariate``: ``W`` is
        :meth:`univariate`'s unit directions of ``level`` (the projections are then
        those columns, exactly). Returns ``(cost, a, b, swap)`` or None; ``swap``
        means the hyperplane sends the low side left only after the two child subtrees
        are exchanged.
        """
        if W.shape[0] == 0 or idx.size < 2:
            return None
        if univariate:
            layout = self.univariate_layout(idx, level)
        else:
            layout = self.layout(self.X[idx] @ W.T, idx)
        order, sorted_S, _ = layout
        cost = self.scan(L, R, layout)
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
        """Unit directions of the features allowed at ``level`` and their penalties
        (built once per level; read-only)."""
        key = ("univariate", level)
        if key not in self.memo:
            columns = np.flatnonzero(self.allowed[level])
            W = np.zeros((columns.size, self.p))
            W[np.arange(columns.size), columns] = 1.0
            self.memo[key] = W, self.penalty[level, columns]
        return self.memo[key]

    def gini_shortlist(self, idx, level, size):
        """Univariate splits with the lowest weighted Gini impurity, one per feature,
        ``(a, b, penalty)``, at most ``size``. Memoized by rows: a shorter shortlist is
        the head of a longer one."""
        columns = np.flatnonzero(self.allowed[level])
        if columns.size == 0 or idx.size < 2:
            return []
        self.count_scan(idx.size, columns.size)
        key = ("shortlist", level, digest(idx))
        found, complete = self.memo.get(key, ([], False))
        if len(found) < size and not complete:
            found = self._gini_shortlist(idx, level, columns, size)
            self.memo[key] = found, len(found) < size
        return found[:size]

    def _gini_shortlist(self, idx, level, columns, size):
        W, extra = self.univariate(level)
        # weight of each class (rows) among the samples; the layout gives the valid cuts
        mass = self.w[idx][None, :] * (self.y[idx][None, :] == np.arange(self.n_classes)[:, None])
        order, sorted_S, valid = self.univariate_layout(idx, level)
        left = np.zeros((self.n_classes, *valid.shape))
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
