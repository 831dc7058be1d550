"""A stratified, proximity-preserving sample of at most ``max_rows`` rows.

Rows are grouped by their leaf signature: rows that reach the same leaf in every tree
have proximity 1 to each other (they are certain to be in one proximity component for
any threshold), and they share the ensemble's label. Groups are drawn whole, in a random
order per label, until the label's share of ``max_rows`` (proportional to its share of
the rows, at least one row) is filled; only the last group drawn for a label may be cut
to fit. So the sample keeps the class balance of the data and never separates rows the
ensemble cannot tell apart. Everything is computed in chunks of rows: memory is
``O(n)`` plus one chunk of leaf indices, time ``O(n * trees)``.
"""

from __future__ import annotations

import numpy as np

CHUNK_ROWS = 50_000


def labels_and_signatures(ensemble, X, seed=0):
    """Ensemble labels and a 64-bit leaf signature of every row, computed in chunks."""
    n = X.shape[0]
    labels = np.empty(
        n, dtype=object if ensemble.classes.dtype == object else ensemble.classes.dtype
    )
    signature = np.empty(n, dtype=np.uint64)
    multiplier = np.random.default_rng(seed).integers(
        1, 2**63, size=ensemble.n_trees, dtype=np.uint64
    )
    for start in range(0, n, CHUNK_ROWS):
        block = X[start : start + CHUNK_ROWS]
        labels[start : start + block.shape[0]] = ensemble.predict(block)
        leaves = ensemble.apply(block).astype(np.uint64)
        with np.errstate(over="ignore"):
            signature[start : start + block.shape[0]] = (leaves * multiplier).sum(axis=1)
    return labels, signature


def sample_rows(ensemble, X, max_rows, random_state=0) -> np.ndarray:
    """Sorted row indices of the sample (all rows when there are at most ``max_rows``)."""
    n = X.shape[0]
    if max_rows is None or n <= max_rows:
        return np.arange(n)
    rng = np.random.default_rng(random_state)
    labels, signature = labels_and_signatures(ensemble, X, seed=int(random_state))
    chosen, left = [], int(max_rows)
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        quota = min(left, max(1, round(max_rows * rows.size / n)))
        left -= quota
        _, group = np.unique(signature[rows], return_inverse=True)
        order = rng.permutation(int(group.max()) + 1)
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        # rows of the groups in drawing order (random within a group), first `quota` kept
        by_rank = np.lexsort((rng.random(rows.size), rank[group]))
        chosen.append(rows[by_rank[:quota]])
    return np.sort(np.concatenate(chosen))
