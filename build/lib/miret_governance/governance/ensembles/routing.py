"""Exact routing of rows through all the trees of an ensemble at once.

:func:`padded_nodes` pads every tree's node arrays into ``(n_trees, max_nodes)``
matrices (a leaf points to itself, so routing for ``D`` steps is a no-op once there);
:func:`route` walks every row down every tree in ``D`` vectorized steps, with the
library's threshold convention (``x <= threshold`` or, for XGBoost, ``x < threshold``
against a float32 threshold), each node's missing-value direction and native
categorical splits (:mod:`governance.categories`). :class:`governance.ensemble.Ensemble`
routes its rows through these, after putting them in its own units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from miret_governance.governance.ensembles.categories import categorical_left, category_table
from miret_governance.governance.ensembles.trees import LEFT_IF_LESS, LEFT_IF_LESS_EQUAL


@dataclass(frozen=True)
class PaddedNodes:
    """Node arrays of all trees, one row per tree, padded to the largest tree.

    Attributes
    ----------
    feature, threshold, left, right, position, missing_left : ndarray of shape (n_trees, width)
        As in :class:`governance.trees.Tree`; a leaf's children are itself, padding is a
        leaf of feature ``-1``.
    value : ndarray of shape (n_trees, width) or (n_trees, width, k)
    categories : governance.categories.CategoryTable or None
    """

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    position: np.ndarray
    missing_left: np.ndarray
    categories: object


def padded_nodes(trees, left_if: str) -> PaddedNodes:
    """The node arrays of ``trees`` padded into matrices (thresholds rounded to float32
    when the library compares ``x < threshold`` in single precision, as XGBoost does)."""
    n_trees, width = len(trees), max(tree.n_nodes for tree in trees)
    feature = np.full((n_trees, width), -1, dtype=np.int64)
    threshold = np.zeros((n_trees, width))
    left = np.zeros((n_trees, width), dtype=np.int64)
    right = np.zeros((n_trees, width), dtype=np.int64)
    value = np.zeros((n_trees, width) + trees[0].value.shape[1:])
    position = np.zeros((n_trees, width), dtype=np.int64)
    missing_left = np.zeros((n_trees, width), dtype=bool)
    for e, tree in enumerate(trees):
        n = tree.n_nodes
        split = tree.is_split
        feature[e, :n] = tree.feature
        threshold[e, :n] = np.where(split, tree.threshold, 0.0)
        # A leaf points to itself, so routing for D steps is a no-op once there.
        left[e, :n] = np.where(split, tree.left, np.arange(n))
        right[e, :n] = np.where(split, tree.right, np.arange(n))
        value[e, :n] = tree.value
        position[e, :n] = tree.position
        missing_left[e, :n] = tree.missing_left
    if left_if == LEFT_IF_LESS:  # XGBoost compares float32 to float32
        threshold = threshold.astype(np.float32).astype(np.float64)
    categories = category_table(trees, width)
    return PaddedNodes(feature, threshold, left, right, value, position, missing_left, categories)


def route(nodes: PaddedNodes, X, left_if: str, depth: int, first_trees=None) -> np.ndarray:
    """Leaf node id (tree-local) reached by each row of ``X`` (the trees' units, native
    categories as codes) in each tree, or in the first ``first_trees``; shape
    (n_samples, n_trees)."""
    kept = slice(0, first_trees)
    feature, threshold = nodes.feature[kept], nodes.threshold[kept]
    left, right, missing_left = nodes.left[kept], nodes.right[kept], nodes.missing_left[kept]
    categories = nodes.categories
    has_missing = bool(np.isnan(X).any())
    tree_index = np.arange(feature.shape[0])[None, :]
    node = np.zeros((X.shape[0], feature.shape[0]), dtype=np.int64)
    rows = np.arange(X.shape[0])[:, None]
    for _ in range(depth):
        f = feature[tree_index, node]
        x = X[rows, np.maximum(f, 0)]
        thr = threshold[tree_index, node]
        go_left = x <= thr if left_if == LEFT_IF_LESS_EQUAL else x < thr
        if has_missing:  # a NaN follows its node's missing-value direction
            go_left = np.where(np.isnan(x), missing_left[tree_index, node], go_left)
        if categories is not None:
            at = categories.row[kept][tree_index, node]
            go_left = categorical_left(categories, at, x, go_left)
        node = np.where(go_left, left[tree_index, node], right[tree_index, node])
    return node
