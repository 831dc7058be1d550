"""Contribution weights ``w^e`` of the trees of a boosted ensemble, from data."""

from __future__ import annotations

import numpy as np
from scipy.special import expit, softmax

from miret_governance.governance.ensembles.arrays import PREDICT_CHUNK_ROWS, feature_matrix


def boosting_tree_weights(ensemble, X) -> np.ndarray:
    """Contribution weights of boosted trees over data ``X`` (after Tan et al. 2020).

    Tree ``e`` moves every sample's margin from ``F_{e-1}(x)`` to ``F_e(x)``; its weight
    is the variance over ``X`` of the change in predicted positive-class probability
    ``sigmoid(F_e(x)) - sigmoid(F_{e-1}(x))``, normalized so that the weights sum to 1.
    Trees that move no probability get weight 0 (if all do, weights are uniform).

    With ``k > 2`` classes, tree ``e`` adds to the margin of its class ``c``
    (``ensemble.tree_class``), trees taken in the library's order (iteration by
    iteration, class by class); its weight is the variance over ``X`` of the change it
    makes to the predicted probability of its own class ``c``,
    ``softmax(F_e(x))_c - softmax(F_{e-1}(x))_c``. For two classes this is the rule
    above, so the weight of a tree always measures how much it moves the probability of
    the class it was grown for.

    For averaging ensembles the weights are uniform (``1/|E|``).

    Parameters
    ----------
    ensemble : governance.ensemble.Ensemble
    X : array-like of shape (n, p)
        Rows in the ensemble's input units.
    """
    if ensemble.aggregation == "average":
        return np.full(ensemble.n_trees, 1.0 / ensemble.n_trees)
    X = feature_matrix(X, ensemble.feature_names, finite=False, min_rows=0)
    # variance of each tree's probability step, from sums over chunks of rows
    total_step = np.zeros(ensemble.n_trees)
    total_square = np.zeros(ensemble.n_trees)
    for start in range(0, X.shape[0], PREDICT_CHUNK_ROWS):
        leaf_value = ensemble.leaf_values(X[start : start + PREDICT_CHUNK_ROWS])
        step = _steps(ensemble, leaf_value)
        total_step += step.sum(axis=0)
        total_square += np.square(step).sum(axis=0)
    mean = total_step / X.shape[0]
    variance = np.maximum(total_square / X.shape[0] - mean**2, 0.0)
    total = variance.sum()
    if total <= 0:
        return np.full(ensemble.n_trees, 1.0 / ensemble.n_trees)
    return variance / total


def _steps(ensemble, leaf_value) -> np.ndarray:
    """Each tree's change of its own class's probability, shape (n, n_trees)."""
    if ensemble.n_classes == 2:
        margins = ensemble.base_margin + np.cumsum(leaf_value, axis=1)
        margins = np.column_stack([np.full(leaf_value.shape[0], ensemble.base_margin), margins])
        return np.diff(expit(margins), axis=1)
    margin = np.tile(ensemble.base_margin, (leaf_value.shape[0], 1))
    before = softmax(margin, axis=1)
    step = np.empty(leaf_value.shape)
    for e, c in enumerate(ensemble.tree_class):
        margin[:, c] += leaf_value[:, e]
        after = softmax(margin, axis=1)
        step[:, e] = after[:, c] - before[:, c]
        before = after
    return step
