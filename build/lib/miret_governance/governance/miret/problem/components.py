"""Proximity components of a MIRET sample, bounded in size (see
:mod:`governance.miret.problem`, whose module docstring gives the reason for the bound)."""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.sparse import csgraph

MIN_COMPONENT_CAP = 32


def component_cap(n_samples: int, depth: int) -> int:
    """Largest proximity component of a sample of ``n_samples`` rows at depth ``depth``.

    ``max(MIN_COMPONENT_CAP, n / 2^(D+1))``: half the mean number of rows per leaf of a
    depth-``D`` tree, so even if every component were that large a tree could still
    balance them over its ``2^D`` leaves; never below ``MIN_COMPONENT_CAP``, so the
    paper's small instances keep their exact components.
    """
    return max(MIN_COMPONENT_CAP, n_samples // 2 ** (depth + 1))


def bounded_components(n_samples: int, pairs, cap: int):
    """Components of the proximity pairs, none larger than ``cap`` samples.

    Union-find over the pairs in decreasing proximity (ties by ``(i, k)``, so the result
    is deterministic); a union that would exceed ``cap`` samples is refused. Components
    only grow, so a refused pair never ends up inside one component later. A connected
    component of at most ``cap`` samples never refuses a union, so it is kept whole
    (scipy's ``connected_components``) and only the pairs of larger ones go through the
    union-find loop, with the same result.

    Parameters
    ----------
    n_samples : int
    pairs : scipy.sparse matrix of shape (n, n)
        ``U_TE(m)`` with the proximities as data (:func:`governance.vite.proximity_pairs`).
    cap : int

    Returns
    -------
    component : ndarray of shape (n,), int
        Ids ``0..C-1`` in order of first sample.
    dropped : int
        Pairs whose samples are in different components.
    """
    pairs = sparse.coo_matrix(pairs, shape=(n_samples, n_samples))
    rows, cols = pairs.row.astype(np.int64), pairs.col.astype(np.int64)
    _, connected = csgraph.connected_components(pairs, directed=False)
    oversized = np.bincount(connected)[connected] > cap
    # small components: one id each (beyond the sample ids); others start as singletons
    root = np.where(oversized, np.arange(n_samples), n_samples + connected)
    split = oversized[rows]  # both samples of a pair are in one connected component
    order = np.lexsort((cols[split], rows[split], -pairs.data[split]))
    parent = root.tolist()
    size = [1] * n_samples
    for i, k in zip(rows[split][order].tolist(), cols[split][order].tolist()):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        if i == k or size[i] + size[k] > cap:
            continue
        if size[i] < size[k]:
            i, k = k, i
        parent[k] = i
        size[i] += size[k]
    root = np.array(parent, dtype=np.int64)
    inside = root < n_samples
    while True:  # full path compression of the union-find trees, vectorized
        up = root.copy()
        up[inside] = root[root[inside]]
        if np.array_equal(up, root):
            break
        root = up
    _, first, label = np.unique(root, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first)] = np.arange(first.size)
    component = rank[label]
    return component, int(np.sum(component[rows] != component[cols]))
