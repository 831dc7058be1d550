"""Compiled loops of the cut scan (numba): the small per-cut array work of the heuristic.

A search scans thousands of cuts on a few hundred rows, where numpy's per-call overhead
took most of the time (Heart, XGBoost, depth 3: 4,552 scans, 115,000 ufunc reductions).
Each kernel gives exactly what the plain numpy computation gives: the same stable
orders, the same sequential cumulative sums and the same roundings, so the trees are
bit-for-bit those of the numpy code (``tests/governance/miret/heuristics/test_cuts.py``).

Compiled code is cached next to this module or, where that folder is read-only, in
numba's user cache folder (``~/.cache/numba``; numba reads ``NUMBA_CACHE_DIR``, which
overrides both). A fresh process then loads it (0.4 s of CPU with numba's start, and
0.26 s to import numba) instead of compiling (3.6 s); where no cache folder is writable
the kernels are compiled in each process rather than failing.
"""

from __future__ import annotations

import numpy as np
from numba import njit


def compiled(function):
    """``njit(cache=True)``, or ``njit`` where numba finds no writable cache folder (it
    raises RuntimeError then)."""
    try:
        return njit(cache=True)(function)
    except RuntimeError:
        return njit(function)


@compiled
def splits_components(order, groups):
    """(m+1, k) bool: cut ``c`` (left = first ``c`` rows of ``order``'s column, an
    argsort of the projections) separates a component (``groups``: each row's component
    number, non-negative)."""
    m, k = order.shape
    split = np.zeros((m + 1, k), dtype=np.bool_)
    if m == 0:
        return split
    size = np.zeros(groups.max() + 1, dtype=np.int64)
    for g in groups:
        size[g] += 1
    low = np.empty(size.size, dtype=np.int64)
    high = np.empty(size.size, dtype=np.int64)
    delta = np.empty(m + 2, dtype=np.int64)
    for col in range(k):
        low[:] = m
        high[:] = -1
        for i in range(m):
            g = groups[order[i, col]]
            if size[g] > 1:
                low[g] = min(low[g], i)
                high[g] = max(high[g], i)
        delta[:] = 0
        for i in range(m):
            g = groups[order[i, col]]
            if size[g] > 1 and low[g] == i:  # +1 after a component's first row, -1 at its last
                delta[i + 1] += 1
                delta[high[g] + 1] -= 1
        running = 0
        for cut in range(m + 1):
            running += delta[cut]
            split[cut, col] = running > 0
    return split


@compiled
def cut_layout(S, order, groups, min_gap):
    """``(sorted_S, valid)`` of the projection columns ``S`` ordered by ``order``: the
    sorted projections and the (m+1, k) cuts that leave a gap of ``min_gap`` and split no
    component of ``groups``."""
    m, k = S.shape
    sorted_S = np.empty((m, k))
    for i in range(m):
        for col in range(k):
            sorted_S[i, col] = S[order[i, col], col]
    split = splits_components(order, groups)
    valid = np.zeros((m + 1, k), dtype=np.bool_)
    for i in range(1, m):
        for col in range(k):
            valid[i, col] = sorted_S[i, col] - sorted_S[i - 1, col] >= min_gap and not split[i, col]
    return sorted_S, valid


@compiled
def scan_costs(order, valid, L, R, extra):
    """Cost plus ``extra`` of every cut of every column for both orientations, shape
    (2, m+1, k): orientation 0 sends the low side (the first rows of ``order``) to the
    left child (loss ``L``), 1 to the right child (loss ``R``); invalid cuts cost inf.
    The sums are numpy's ``cumsum`` along the rows (sequential), rounded as
    ``(cum_left + (total_right - cum_right)) + extra``."""
    m, k = order.shape
    cost = np.empty((2, m + 1, k))
    cum_left = np.zeros(m + 1)
    cum_right = np.zeros(m + 1)
    for col in range(k):
        for i in range(m):
            row = order[i, col]
            cum_left[i + 1] = cum_left[i] + L[row] if i else L[row]
            cum_right[i + 1] = cum_right[i] + R[row] if i else R[row]
        for cut in range(m + 1):
            if valid[cut, col]:
                cost[0, cut, col] = (cum_left[cut] + (cum_right[m] - cum_right[cut])) + extra[col]
                cost[1, cut, col] = (cum_right[cut] + (cum_left[m] - cum_left[cut])) + extra[col]
            else:
                cost[0, cut, col] = np.inf
                cost[1, cut, col] = np.inf
    return cost


@compiled
def cheapest(values, count):
    """Positions of the ``count`` smallest finite ``values``, smallest first, ties by
    position: the finite head of ``np.argsort(values, kind="stable")[:count]`` without
    sorting every value (the scan's cost arrays hold 2 (m+1) k of them)."""
    best = np.empty(count, dtype=np.int64)
    filled = 0
    for position in range(values.size):
        value = values[position]
        if not np.isfinite(value) or (filled == count and value >= values[best[filled - 1]]):
            continue
        slot = min(filled, count - 1)
        while slot > 0 and values[best[slot - 1]] > value:  # equal values stay in order
            best[slot] = best[slot - 1]
            slot -= 1
        best[slot] = position
        filled = min(filled + 1, count)
    return best[:filled]


@compiled
def route(V, idx, start, levels, eps):
    """Node reached ``levels`` levels below ``start`` and gap flag (a value in
    ``(0, eps)`` on the way) of the rows ``idx``, from their hyperplane values ``V``."""
    node = np.empty(idx.size, dtype=np.int64)
    gap = np.zeros(idx.size, dtype=np.bool_)
    for i in range(idx.size):
        t = start
        for _ in range(levels):
            value = V[idx[i], t]
            if value > 0 and value < eps:
                gap[i] = True
            t = 2 * t + 1 + (1 if value > 0 else 0)
        node[i] = t
    return node, gap


@compiled
def components_broken(groups, leaf, gap):
    """Per row: does its component end in several leaves (non-negative leaf ids) or
    cross a gap? The one check of the heuristic, the CART seeds and the feasibility
    check."""
    n_groups = groups.max() + 1 if groups.size else 0
    first = np.full(n_groups, -1, dtype=np.int64)
    bad = np.zeros(n_groups, dtype=np.bool_)
    for i in range(groups.size):
        g = groups[i]
        if first[g] < 0:
            first[g] = leaf[i]
        elif first[g] != leaf[i]:
            bad[g] = True
        if gap[i]:
            bad[g] = True
    out = np.empty(groups.size, dtype=np.bool_)
    for i in range(groups.size):
        out[i] = bad[groups[i]]
    return out


@compiled
def gini_cuts(order, valid, mass, total):
    """Half the weighted Gini impurity of both sides of every cut, (m+1, k), inf where
    not ``valid``: ``sum_{c < d} m_c m_d / sum_c m_c`` per side (0 for an empty side),
    with ``mass`` (classes, rows) each row's weight in its class and ``total`` its sums
    (numpy's). Sides are numpy's sequential ``cumsum`` along ``order`` and ``total``
    minus it, summed over classes in class order."""
    n_classes = mass.shape[0]
    m, k = order.shape
    gini = np.empty((m + 1, k))
    left = np.zeros((n_classes, m + 1))
    side = np.empty(n_classes)
    for col in range(k):
        for c in range(n_classes):
            for i in range(m):
                value = mass[c, order[i, col]]
                left[c, i + 1] = left[c, i] + value if i else value
        for cut in range(m + 1):
            if not valid[cut, col]:
                gini[cut, col] = np.inf
                continue
            impurity = 0.0
            for right in range(2):
                for c in range(n_classes):
                    side[c] = total[c] - left[c, cut] if right else left[c, cut]
                pairs = 0.0
                weight = side[0]
                for c in range(n_classes):
                    if c:
                        weight += side[c]
                    for d in range(c + 1, n_classes):
                        pairs += side[c] * side[d]
                if weight != 0.0:
                    impurity += pairs / weight
                elif pairs != 0.0:  # numpy's +-inf, which nan_to_num makes +-max (0 / 0: 0)
                    impurity += np.finfo(np.float64).max if pairs > 0 else -np.finfo(np.float64).max
            gini[cut, col] = impurity
    return gini


@compiled
def presorted_order(sorted_rows, columns, position, m):
    """(m, k) stable order of the rows with ``position >= 0`` (their rank in ``idx``) in
    each of ``columns``, read from the sample's ``sorted_rows`` of those columns."""
    order = np.empty((m, columns.size), dtype=np.int64)
    for col in range(columns.size):
        i = 0
        for row in sorted_rows[:, columns[col]]:
            if position[row] >= 0:
                order[i, col] = position[row]
                i += 1
    return order
