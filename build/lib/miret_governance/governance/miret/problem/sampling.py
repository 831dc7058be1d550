"""A stratified, proximity-preserving sample of at most ``max_rows`` rows.

Rows are stratified by the ensemble's label and a coarse leaf signature: the leaves
the row reaches in the first ``SIGNATURE_TREES`` trees of the ensemble. Rows of one
stratum agree on the label and on those trees, i.e. they lie in one cell of the
partition those trees make of the input space. Each stratum gets a share of
``max_rows`` proportional to its size (largest remainders, ties to the lower stratum
id), and its rows are drawn individually at random (seeded). So the sample keeps the
class balance and covers the ensemble's partition proportionally: the proximity of two
sampled rows is the proximity of two rows of the data, and close rows stay represented
where they are frequent. Drawing individual rows (not whole groups of rows with one
leaf signature) keeps large groups from filling the sample and chaining the proximity
components. Time ``O(n * trees)``, memory ``O(n)`` plus one chunk of leaf indices.
"""

from __future__ import annotations

import numpy as np

from miret_governance.governance.miret.problem.problem import class_index

CHUNK_ROWS = 50_000
SIGNATURE_TREES = 3


def strata(ensemble, X, labels) -> np.ndarray:
    """Stratum id of every row: its ensemble label ``labels`` x its leaves in the first
    trees (routed in chunks)."""
    n = X.shape[0]
    keys = np.empty((n, SIGNATURE_TREES + 1), dtype=np.int64)
    keys[:, 0] = class_index(labels, ensemble.classes)  # classes need not be sorted
    for start in range(0, n, CHUNK_ROWS):
        block = X[start : start + CHUNK_ROWS]
        rows = slice(start, start + block.shape[0])
        keys[rows, 1:] = ensemble.apply(block, first_trees=SIGNATURE_TREES)
    return np.unique(keys, axis=0, return_inverse=True)[1].ravel()


def quotas(sizes: np.ndarray, total: int) -> np.ndarray:
    """Integer shares of ``total`` proportional to ``sizes`` (largest remainders)."""
    exact = sizes * (total / sizes.sum())
    out = np.floor(exact).astype(np.int64)
    order = np.lexsort((np.arange(sizes.size), -(exact - out)))
    out[order[: total - int(out.sum())]] += 1
    return out


def sample_rows(ensemble, X, labels, max_rows, random_state=0) -> np.ndarray:
    """Sorted row indices of the sample (all rows when there are at most ``max_rows``);
    ``labels`` are the ensemble's predictions on ``X``."""
    return samples(ensemble, X, labels, (max_rows,), random_state)[0]


def samples(ensemble, X, labels, sizes, random_state=0) -> list[np.ndarray]:
    """:func:`sample_rows` of each size of ``sizes`` (None: every row), the strata
    computed once: each sample is the one ``sample_rows`` draws for its size."""
    n = X.shape[0]
    stratum = None
    found = []
    for size in sizes:
        if size is None or n <= size:
            found.append(np.arange(n))
            continue
        if stratum is None:
            stratum = strata(ensemble, X, labels)
        found.append(_draw(stratum, int(size), random_state))
    return found


def _draw(stratum: np.ndarray, size: int, random_state) -> np.ndarray:
    """Sorted indices of ``size`` rows: each stratum's quota of its rows, at random."""
    n = stratum.size
    rng = np.random.default_rng(random_state)
    share = quotas(np.bincount(stratum), size)
    # a random rank within each stratum; a row is kept when its rank is below the quota
    order = np.lexsort((rng.random(n), stratum))
    first = np.searchsorted(stratum[order], np.arange(share.size))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - np.repeat(first, np.bincount(stratum))
    return np.flatnonzero(rank < share[stratum])
