"""Exact cut scanning: the cheapest MILP-feasible hyperplane along candidate directions."""

from __future__ import annotations

import numpy as np

from miret_governance.governance.miret.heuristics.kernels import (
    cheapest,
    cut_layout,
    gini_cuts,
    presorted_order,
    scan_costs,
)
from miret_governance.governance.miret.heuristics.search_state import SearchState, digest
from miret_governance.governance.miret.problem.layout import hyperplane_values

REALIZE_TRIES = 12  # cheapest cuts tried when turning a cut into a feasible hyperplane
SCAN_WORK = 2000  # work of one scan beyond its pairs (sorting, routing and realizing around it)
PRESORT_SHARE = 4  # univariate scans of at least 1/4 of the rows reuse the sample's sort
LAYOUT_CELLS = 1_000_000  # cells (rows x columns) of univariate layouts a search memoizes (17 MB)


class CutSearch(SearchState):
    """Cut scanning along directions, with the epsilon gap and components as hard limits."""

    def realize(self, w, s_left, s_right, level, idx, left_mask=None):
        """Hyperplane ``(a, b)`` sending ``w.x <= s_left`` left and ``w.x >= s_right``
        right within the MILP bounds and the epsilon gap, or None.

        ``left_mask`` marks the rows of ``idx`` sent left; None when ``w`` is a unit
        direction and ``s_left``, ``s_right`` are the closest values of its feature on
        either side: the hyperplane's values are then monotone in that feature (rounding
        is), so those two rows decide what every row's value would."""
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
        if left_mask is None:
            if scale * s_left + b > 0 or scale * s_right + b < eps:
                return None
            return a, b
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
        return presorted_order(self.sorted_rows, columns, position, m)

    def layout(self, S, idx, order=None):
        """``(order, sorted_S, valid)`` of the projection columns of ``S`` (the rows
        ``idx``): the stable argsort of each column (``order`` when known), the sorted
        projections and the (m+1, k) cuts that leave the epsilon gap and split no
        component."""
        S = np.ascontiguousarray(S)
        if order is None:
            order = np.argsort(S, axis=0, kind="stable")
        order = np.ascontiguousarray(order)
        sorted_S, valid = cut_layout(S, order, self.comp[idx], self.min_gap)
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

    def scan(self, L, R, extra, layout):
        """Cost plus ``extra`` (each column's) of every cut of every projection column
        of a :meth:`layout` for both orientations, shape (2, m+1, k): orientation 0 sends
        the low side to the left child, 1 to the right child; invalid cuts (epsilon gap,
        components, empty side) cost ``inf``."""
        order, _, valid = layout
        self.count_scan(*order.shape)
        return scan_costs(order, valid, L, R, extra)

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
        total = self.scan(L, R, extra, layout)
        flat = total.ravel()
        m, k = order.shape
        for index in cheapest(flat, REALIZE_TRIES).tolist():
            side, rest = divmod(index, (m + 1) * k)
            cut, col = divmod(rest, k)
            lo, hi = sorted_S[cut - 1, col], sorted_S[cut, col]
            w = W[col]
            low_side = None
            if not univariate:
                low_side = np.zeros(idx.size, dtype=bool)
                low_side[order[:cut, col]] = True
            high_side = None if low_side is None else ~low_side
            # orientation 0: low side to the (current) left child; 1: to the right child
            options = [(w, lo, hi, low_side, False), (-w, -hi, -lo, high_side, True)]
            if side == 1:
                options = [(-w, -hi, -lo, high_side, False), (w, lo, hi, low_side, True)]
            for direction, s_left, s_right, left_mask, swap in options:
                if swap and not swappable:
                    continue
                found = self.realize(direction, s_left, s_right, level, idx, left_mask)
                if found is not None:
                    return float(flat[index]), found[0], found[1], swap
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
        gini = gini_cuts(order, valid, mass, mass.sum(axis=1))
        best_cut = np.argmin(gini, axis=0)
        best_value = gini[best_cut, np.arange(columns.size)]
        shortlist = []
        for col in np.argsort(best_value, kind="stable"):
            if len(shortlist) == size or not np.isfinite(best_value[col]):
                break
            cut = best_cut[col]
            lo, hi = sorted_S[cut - 1, col], sorted_S[cut, col]
            found = self.realize(W[col], lo, hi, level, idx)
            if found is None:
                found = self.realize(-W[col], -hi, -lo, level, idx)
            if found is not None:
                shortlist.append((found[0], found[1], float(extra[col])))
        return shortlist
