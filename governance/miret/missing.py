"""The surrogate's rule for missing values, learned once the tree is fitted.

A row's value ``a_t . x + b_t`` at branch node ``t`` is *undefined* when a feature with a
nonzero coefficient at ``t`` is missing (NaN); such a row goes left exactly when
``missing_left[t]`` (:class:`governance.miret.tree.SurrogateTree`). The MILP is solved on
complete rows only; :func:`missing_directions` then sets ``missing_left`` node by node,
root first, from the fit rows (NaN included) routed through the directions already set:

1. **Rows with an undefined value reach t.** They go to the side where the surrogate's
   answers agree best with the ensemble's labels of these rows. A side's answers are
   ``q``, the share of ``classes[1]`` the surrogate gives there: the leaf's class (0 or
   1) when the side is a leaf, else the share among the complete fit rows (no NaN in a
   feature the tree uses) that take it (0.5 without any). With ``k`` of the ``m``
   undefined rows labelled ``classes[1]`` by the ensemble, the expected agreement of a
   side is ``k q + (m - k)(1 - q)``: they go left when ``(q_left - q_right)(2k - m) > 0``,
   right when it is ``< 0``. At the last level this sends them to the leaf of the class
   most of them have.
2. **Otherwise (no such row, or a tie): the ensemble's own directions.** A feature
   ``j`` acts as a large value when most of the ensemble's splits on ``j`` send a
   missing value right (``d_j = +1``), as a small one when most send it left
   (``d_j = -1``; ``0`` on a tie or without a split on ``j``). The node's push
   ``sum_j a_{t,j} d_j`` over its features decides: left when negative, right when
   positive; a univariate node thus sends a missing value the way the ensemble's trees
   mostly do.
3. **Otherwise (no push):** the side taken by more of the fit rows reaching ``t``
   (scikit-learn's HistGradientBoosting rule for a split that saw no missing value),
   left on a tie or when no row reaches ``t``.
"""

from __future__ import annotations

import numpy as np

from miret_governance.governance.arrays import scaled
from miret_governance.governance.miret.layout import hyperplane_values, leaf_sign


def ensemble_missing_sides(ensemble) -> np.ndarray:
    """``d_j`` of every feature: +1 when most of the ensemble's splits on ``j`` send a
    missing value right, -1 when most send it left, 0 on a tie or without a split."""
    votes = np.zeros(ensemble.n_features, dtype=np.int64)
    for tree in ensemble.trees:
        split = tree.is_split
        np.add.at(votes, tree.feature[split], np.where(tree.missing_left[split], -1, 1))
    return np.sign(votes)


def missing_directions(tree, X, labels, ensemble_sides) -> np.ndarray:
    """``missing_left`` of every branch node of ``tree`` by the module's rule.

    Parameters
    ----------
    tree : governance.miret.tree.SurrogateTree
    X : ndarray of shape (n, p)
        The fit rows in the tree's normalized space, NaN where a value is missing.
    labels : ndarray of shape (n,)
        The ensemble's labels of the rows (in ``tree.classes``).
    ensemble_sides : ndarray of shape (p,)
        :func:`ensemble_missing_sides` of the ensemble.

    Returns
    -------
    ndarray of bool of shape (2**D - 1,)
    """
    X = np.asarray(X, dtype=np.float64)
    missing = np.isnan(X)
    filled = np.ascontiguousarray(np.where(missing, 0.0, X))
    labelled = np.asarray(labels) == tree.classes[1]
    coef, intercept = np.asarray(tree.coef), np.asarray(tree.intercept)
    complete = ~missing[:, tree.used_features()].any(axis=1)
    answers = np.full(tree.n_branch_nodes + tree.n_leaves, 0.5)
    answers[tree.n_branch_nodes :] = leaf_sign(np.arange(tree.n_branch_nodes, answers.size)) > 0
    per_leaf = np.bincount(tree.apply(filled[complete]), minlength=answers.size)
    for t in range(tree.n_branch_nodes):  # share of classes[1] the tree answers below t
        below = _leaves_below(t, tree.n_branch_nodes)
        counts = per_leaf[below.start : below.stop]
        if counts.sum():
            answers[t] = float(counts[leaf_sign(below) > 0].sum() / counts.sum())
    missing_left = np.ones(tree.n_branch_nodes, dtype=bool)
    node = np.zeros(X.shape[0], dtype=np.int64)
    for level in range(tree.depth):
        right = np.zeros(X.shape[0], dtype=bool)
        for t in range(2**level - 1, 2 ** (level + 1) - 1):
            rows = np.flatnonzero(node == t)
            undefined = missing[rows][:, coef[t] != 0].any(axis=1)
            value = hyperplane_values(filled[rows], coef[t], intercept[t])
            missing_left[t] = _side(
                answers[2 * t + 1] - answers[2 * t + 2],
                labelled[rows][undefined],
                value[~undefined] > 0,
                float(coef[t] @ ensemble_sides),
            )
            right[rows] = np.where(undefined, not missing_left[t], value > 0)
        node = 2 * node + 1 + right
    return missing_left


def _leaves_below(t: int, n_branch: int) -> range:
    """Breadth-first positions of the leaves under node ``t`` of a complete tree."""
    first = last = t
    while first < n_branch:
        first, last = 2 * first + 1, 2 * last + 2
    return range(first, last + 1)


def _side(answer_gap, undefined_labelled, defined_right, push) -> bool:
    """True (left) or False (right) for one node, by the three steps of the module."""
    m, k = undefined_labelled.size, int(undefined_labelled.sum())
    lean = answer_gap * (2 * k - m)
    if m and lean != 0:
        return bool(lean > 0)
    if push != 0:
        return bool(push < 0)
    return bool(defined_right.sum() <= (~defined_right).sum())


def with_missing_rule(tree, tree_inputs, labels, scaler, ensemble):
    """``tree`` with the ``missing_left`` :func:`missing_directions` learns from the fit.

    Parameters
    ----------
    tree : governance.miret.tree.SurrogateTree
    tree_inputs : ndarray of shape (n, p)
        Every fit row as the ensemble's trees take it, NaN where a value is missing.
    labels : ndarray of shape (n,)
        The ensemble's labels of those rows.
    scaler : fitted MinMaxScaler or None
        Maps ``tree_inputs`` into the tree's normalized space (None: they already are);
        values are clipped to ``[0, 1]`` as in the fit.
    ensemble : governance.ensemble.Ensemble
    """
    unit = tree_inputs if scaler is None else scaled(scaler, tree_inputs)
    unit = np.clip(unit, 0.0, 1.0)
    directions = missing_directions(tree, unit, labels, ensemble_missing_sides(ensemble))
    return tree.with_missing_left(directions)
