"""VITE quantities of a tree ensemble: feature frequencies, threshold ranges, proximity.

Definitions follow the paper (section "VITE" and "Incorporating TE-driven information").
Every weighted quantity uses the tree weights ``w^e`` of the :class:`Ensemble` and is
invariant to their scale: sums of weights replace tree counts in the denominators, so
with ``w^e = 1`` each quantity is exactly the paper's.

- Level frequency ``f_{j,d}``: weighted uses of feature ``j`` at level ``d`` over either
  the weighted number of splitting nodes at that level (``"splits"``, the VITE heatmap;
  each level sums to 1) or ``(sum_e w^e) 2^d`` (``"nodes"``, eq. ``miret_frequency``).
- Node frequency ``f^node_{t,j}``: the same per breadth-first branch position ``t``.
- Threshold ranges ``[l_j, u_j]``: smallest and largest threshold on feature ``j`` at
  position ``t`` over the trees that split there on ``j``. A native categorical split
  (LightGBM, HistGradientBoosting) is a use of its column like any split, but has no
  threshold: it bounds no range, and :func:`category_splits` lists the categories it
  sends left. In a one-hot view (:mod:`governance.native_categories`) such a split is
  counted on its column's first indicator column; the ``*_by_column`` tables give the
  original column's true share.
- Proximity ``m_ik = sum_e 1(i,k,e) / |E|``: share of trees in which samples ``i`` and
  ``k`` end in the same leaf, as the paper words it ("the number of trees in which the
  two samples end up in the same leaf"; its eq. ``proximity`` with weights summing to 1
  reduces to this too). It is not weighted: Tan et al.'s boosting weights put 70% of
  the weight on the first 5 of 100 XGBoost trees (Heart, depth 3), so a weighted
  ``m_ik >= 0.85`` only asks for the same leaves in the first dozen trees, and forcing
  such pairs into one leaf cost the surrogate up to 7 points of test fidelity (Heart
  in ``examples/benchmarks/paper.py --target xgb``).
- Class probability ``p^i = max_c p^i_c`` of the ensemble's prediction, over its ``k``
  classes.

Ensembles of ``k > 2`` classes: every quantity counts the splits (or shares the leaves) of
all trees, whichever class they serve. A boosted ensemble grows one tree per class per
iteration; :meth:`Ensemble.for_class` is the view of one class's trees, on which every
function here gives that class's VITE.

Frequencies and threshold ranges describe the first ``depth`` levels (argument
``depth``, default all levels of the ensemble); an ensemble of any depth (``max_depth=None``)
is summarized on the levels a depth-``D`` surrogate uses. Proximity always uses the full
trees (the leaves samples really reach).

Inputs ``X`` are in the ensemble's own units (after preprocessing, see
:meth:`Ensemble.transform`), as for :meth:`Ensemble.apply`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import sparse

from miret_governance.governance.ensembles.encoding import aggregate, encoding_of
from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.errors import InvalidInputError

DENOMINATORS = ("splits", "nodes")
MAX_NODE_DEPTH = 16
"""Deepest ensemble for which per-position quantities are tabulated (2^D - 1 rows)."""

_BLOCK_BYTES = 64 * 2**20
_DENSE_INCIDENCE_BYTES = 256 * 2**20


def _levels(ensemble: Ensemble, depth) -> int:
    """Number of levels summarized: ``depth`` or, when None, all of the ensemble's."""
    if depth is None:
        return ensemble.max_depth
    depth = int(depth)
    if depth < 1:
        raise InvalidInputError(f"depth must be at least 1, got {depth}")
    return depth


def _split_nodes(ensemble: Ensemble, depth: int):
    """Feature, level, position, threshold, tree weight and tree index of every split
    on the first ``depth`` levels."""
    parts = []
    for e, tree in enumerate(ensemble.trees):
        split = tree.is_split & (tree.depth < depth)
        parts.append(
            (
                tree.feature[split],
                tree.depth[split],
                tree.position[split],
                tree.threshold[split],
                np.full(int(split.sum()), ensemble.tree_weights[e]),
                np.full(int(split.sum()), e),
            )
        )
    return tuple(np.concatenate(column) for column in zip(*parts))


def _safe_divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    out = np.zeros_like(numerator, dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def level_frequency(
    ensemble: Ensemble, denominator: str = "splits", depth: int | None = None
) -> pd.DataFrame:
    """Level frequency ``f_{j,d}`` of every feature at every level ``d = 0..D-1``.

    Parameters
    ----------
    ensemble : Ensemble
    denominator : {"splits", "nodes"}
        ``"splits"``: weighted number of nodes that split at level ``d`` (paper's
        Definition "Level Frequency", the VITE heatmap; each level sums to 1).
        ``"nodes"``: ``(sum_e w^e) 2^d``, every node of a complete tree (eq.
        ``miret_frequency``, used by MIRET).
    depth : int, optional
        Number of levels ``D`` (default: the ensemble's depth). Levels the ensemble
        does not reach are columns of zeros.

    Returns
    -------
    DataFrame
        Index: feature names; columns: levels ``0..D-1`` (int); values: fractions.
    """
    if denominator not in DENOMINATORS:
        raise InvalidInputError(f"denominator must be one of {DENOMINATORS}, got {denominator!r}")
    depth = _levels(ensemble, depth)
    feature, level, _, _, weight, _ = _split_nodes(ensemble, depth)
    uses = np.zeros((ensemble.n_features, depth))
    np.add.at(uses, (feature, level), weight)
    if denominator == "splits":
        total = uses.sum(axis=0)
    else:
        total = ensemble.tree_weights.sum() * 2.0 ** np.arange(depth)
    return pd.DataFrame(
        _safe_divide(uses, total[None, :]),
        index=pd.Index(ensemble.feature_names, name="feature"),
        columns=pd.Index(range(depth), name="level"),
    )


def level_frequency_by_column(
    ensemble: Ensemble, denominator: str = "splits", depth: int | None = None
) -> pd.DataFrame:
    """:func:`level_frequency` per original column: the rows of a pipeline's encoded
    columns (``ensemble.encoding``) summed, a one-hot group into one row; the
    per-encoded-column table when the ensemble does not encode its inputs."""
    frequency = level_frequency(ensemble, denominator, depth)
    return frequency if ensemble.encoding is None else aggregate(frequency, ensemble.encoding)


def node_frequency_by_column(ensemble: Ensemble, depth: int | None = None) -> pd.DataFrame:
    """:func:`node_frequency` per original column (as :func:`level_frequency_by_column`)."""
    frequency = node_frequency(ensemble, depth)
    if ensemble.encoding is None:
        return frequency
    return aggregate(frequency.T, ensemble.encoding).T


def _node_levels(ensemble: Ensemble, depth) -> int:
    depth = _levels(ensemble, depth)
    if depth > MAX_NODE_DEPTH:
        raise InvalidInputError(
            f"per-node VITE quantities on {depth} levels would cover 2^{depth} - 1 branch "
            f"positions; they are tabulated up to {MAX_NODE_DEPTH} levels: pass "
            "depth=D, the surrogate's depth (the ensemble itself may be deeper)"
        )
    return depth


def node_frequency(ensemble: Ensemble, depth: int | None = None) -> pd.DataFrame:
    """Node frequency ``f^node_{t,j}`` at every branch position ``t = 0..2^D-2``.

    The denominator of a position is the weighted number of trees that split there;
    positions where no tree splits (a leaf above level ``D`` in every tree) are rows of
    zeros, as in the paper.

    Parameters
    ----------
    ensemble : Ensemble
    depth : int, optional
        Number of levels ``D`` (default: the ensemble's depth), at most
        :data:`MAX_NODE_DEPTH`.

    Returns
    -------
    DataFrame
        Index: breadth-first positions ``0..2^D-2``; columns: feature names.
    """
    depth = _node_levels(ensemble, depth)
    n_positions = 2**depth - 1
    feature, _, position, _, weight, _ = _split_nodes(ensemble, depth)
    uses = np.zeros((n_positions, ensemble.n_features))
    np.add.at(uses, (position, feature), weight)
    return pd.DataFrame(
        _safe_divide(uses, uses.sum(axis=1)[:, None]),
        index=pd.Index(range(n_positions), name="position"),
        columns=pd.Index(ensemble.feature_names, name="feature"),
    )


def threshold_ranges(ensemble: Ensemble, depth: int | None = None) -> pd.DataFrame:
    """Range ``[l_j, u_j]`` of split thresholds per branch position and feature, on the
    levels :func:`node_frequency` covers (same parameters).

    Returns
    -------
    DataFrame
        One row per (position, feature) used by at least one tree, sorted by position
        and feature index, with columns ``position``, ``feature`` (name), ``low``,
        ``high`` (ensemble input units, normalized when the ensemble has a
        MinMaxScaler; NaN where every threshold is infinite, or every split there is
        categorical), ``count`` (number of trees splitting there on that feature) and
        ``share`` (their weight over the weight of the trees splitting there: the node
        frequency :func:`node_frequency` gives, ``count`` over all counts of the
        position when every tree weighs the same). With a known ``ensemble.scaler`` also ``low_raw`` and ``high_raw``: the same
        thresholds in raw input units, ``(threshold - min_) / scale_``.
    """
    depth = _node_levels(ensemble, depth)
    feature, _, position, threshold, weight, _ = _split_nodes(ensemble, depth)
    key = position * ensemble.n_features + feature
    keys, group = np.unique(key, return_inverse=True)
    low = np.full(keys.size, np.inf)
    high = np.full(keys.size, -np.inf)
    # an infinite threshold (a split of missing values from the rest) bounds nothing
    finite = np.isfinite(threshold)
    np.minimum.at(low, group[finite], threshold[finite])
    np.maximum.at(high, group[finite], threshold[finite])
    unbounded = low > high
    low[unbounded] = np.nan
    high[unbounded] = np.nan
    used_feature = keys % ensemble.n_features
    weights = np.bincount(group, weights=weight, minlength=keys.size)
    at_position = np.bincount(position, weights=weight)[keys // ensemble.n_features]
    table = pd.DataFrame(
        {
            "position": keys // ensemble.n_features,
            "feature": np.asarray(ensemble.feature_names, dtype=object)[used_feature],
            "low": low,
            "high": high,
            "count": np.bincount(group, minlength=keys.size),
            "share": _safe_divide(weights, at_position),
        }
    )
    scaler = ensemble.scaler
    if scaler is not None:
        table["low_raw"] = (low - scaler.min_[used_feature]) / scaler.scale_[used_feature]
        table["high_raw"] = (high - scaler.min_[used_feature]) / scaler.scale_[used_feature]
    return table


def category_splits(ensemble: Ensemble, depth: int | None = None) -> pd.DataFrame:
    """The native categorical splits on the levels :func:`node_frequency` covers.

    Returns
    -------
    DataFrame
        One row per (position, column, categories sent left), sorted by position, with
        columns ``position``, ``feature`` (the original column in a one-hot view),
        ``left`` (the categories sent left, ``{car, edu}``; codes without an encoding)
        and ``count`` (trees splitting so there). Empty when no split is categorical.
    """
    rows = {}
    if not any(tree.is_categorical.any() for tree in ensemble.trees):
        depth = 0  # nothing to list, whatever the ensemble's depth
    else:
        depth = _node_levels(ensemble, depth)
    encoding = ensemble.encoding or encoding_of(ensemble.preprocessor)
    for tree in ensemble.trees:
        for node in np.flatnonzero(tree.is_categorical & (tree.depth < depth)):
            start, codes = int(tree.feature[node]), tree.category_left[node]
            name, labels = ensemble.feature_names[start], [str(c) for c in codes]
            if encoding is not None:  # a one-hot group: code c is its column start + c
                labels = [str(encoding.columns[start + c].categories[0]) for c in codes]
                name = encoding.original(name)
            key = (int(tree.position[node]), name, "{" + ", ".join(labels) + "}")
            rows[key] = rows.get(key, 0) + 1
    table = pd.DataFrame(
        [(*key, count) for key, count in sorted(rows.items())],
        columns=["position", "feature", "left", "count"],
    )
    return table.astype({"position": np.int64, "count": np.int64})


# ---------------------------------------------------------------------- proximity
def _leaf_columns(ensemble: Ensemble, X) -> np.ndarray:
    """Leaf of each sample in each tree, numbered globally over all trees' nodes."""
    leaves = ensemble.apply(X)
    offsets = np.cumsum([0] + [tree.n_nodes for tree in ensemble.trees[:-1]])
    return leaves + offsets[None, :]


def proximity(ensemble: Ensemble, X) -> np.ndarray:
    """Dense proximity matrix ``m_ik`` (for small ``n``; see :func:`proximity_pairs`).

    Parameters
    ----------
    ensemble : Ensemble
    X : array-like of shape (n, n_features)
        Samples in the ensemble's input units.

    Returns
    -------
    ndarray of shape (n, n)
        Symmetric, 1 on the diagonal.
    """
    leaves = ensemble.apply(X)
    shared = np.zeros((leaves.shape[0], leaves.shape[0]))
    for column in leaves.T:
        shared += column[:, None] == column[None, :]
    return shared / leaves.shape[1]


def proximity_pairs(ensemble: Ensemble, X, threshold: float) -> sparse.csr_matrix:
    """Pairs ``(i, k)``, ``i < k``, whose proximity is at least ``threshold``.

    This is the paper's set ``U_TE(threshold)``. It is computed by blocks of rows as a
    product of the one-hot leaf incidence matrix with itself (float32), so no dense
    ``n x n`` matrix is built; memory is the incidence matrix, one block of products and
    the pairs returned.

    Parameters
    ----------
    ensemble : Ensemble
    X : array-like of shape (n, n_features)
        Samples in the ensemble's input units.
    threshold : float
        Proximity threshold ``m`` in ``(0, 1]``.

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n, n)
        Strictly upper triangular; ``data`` holds ``m_ik`` (float64) of the kept pairs,
        the same numbers as :func:`proximity`.
    """
    threshold = float(threshold)
    if not 0.0 < threshold <= 1.0:
        raise InvalidInputError(f"threshold must be in (0, 1], got {threshold}")
    leaves = _leaf_columns(ensemble, X)
    n, n_trees = leaves.shape
    # the product counts shared trees exactly (small integers in float32)
    _, columns = np.unique(leaves, return_inverse=True)
    n_leaves = int(columns.max()) + 1 if n else 0
    incidence = sparse.csr_matrix(
        (
            np.ones(n * n_trees, dtype=np.float32),
            columns.ravel(),
            np.arange(0, n * n_trees + 1, n_trees),
        ),
        shape=(n, n_leaves),
    )
    if n * n_leaves * 4 <= _DENSE_INCIDENCE_BYTES:
        incidence = incidence.toarray()
    cut = np.float32(threshold * n_trees - 1e-6 * (n_trees + 1))
    block = max(1, _BLOCK_BYTES // (4 * max(n, 1)))
    found = []
    for start in range(0, n, block):
        product = incidence[start : start + block] @ incidence[start:].T
        if sparse.issparse(product):
            product = product.tocoo()  # keeps csr's row order
            keep = product.data >= cut
            r, c, v = product.row[keep], product.col[keep], product.data[keep]
        else:
            r, c = np.nonzero(product >= cut)
            v = product[r, c]
        upper = c > r  # columns start at ``start`` too, so c > r means k > i
        r, c, v = r[upper] + start, c[upper] + start, v[upper]
        v = v.astype(np.float64) / n_trees
        keep = v >= threshold
        found.append((r[keep].astype(np.int32), c[keep].astype(np.int32), v[keep]))
    rows, cols, values = (np.concatenate(part) for part in zip(*found)) if n else ([],) * 3
    # Rows come out in increasing order, so the CSR row pointer is a running count.
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    pairs = sparse.csr_matrix((values, cols, indptr), shape=(n, n))
    pairs.sort_indices()
    return pairs


def class_probability(ensemble: Ensemble, X) -> np.ndarray:
    """Class probability ``p^i = max_c p^i_c`` of the ensemble's prediction.

    For averaging ensembles ``p^i_c`` is the mean over trees of the class fraction in
    the sample's leaf (the paper's definition, scikit-learn's ``predict_proba``); for
    boosted ensembles it is the model's own predicted probability (sigmoid of the margin
    for two classes, softmax of the ``k`` margins otherwise).

    Returns
    -------
    ndarray of shape (n,)
        Values in ``[1/k, 1]`` for ``k`` classes.
    """
    return ensemble.predict_proba(X).max(axis=1)
