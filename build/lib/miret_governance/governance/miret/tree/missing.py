"""The surrogate's rule for missing values, learned once the tree is fitted.

A row's value ``a_t . x + b_t`` at branch node ``t`` is *undefined* when a feature with a
nonzero coefficient at ``t`` is missing (NaN); such a row goes left exactly when
``missing_left[t]`` (:class:`governance.miret.tree.SurrogateTree`). The MILP is solved on
complete rows only; :func:`missing_directions` then sets ``missing_left`` node by node,
root first, from the fit rows (NaN included) routed through the directions already set:

1. **Rows with an undefined value reach t.** They go to the side where the surrogate's
   answers agree best with the ensemble's labels of these rows. A side's answers are
   the shares ``q_c`` of each class ``c`` the surrogate gives there: the leaf's class
   (share 1) when the side is a leaf, else the shares among the complete fit rows (no
   NaN in a feature the tree uses) that take it (``1/k`` each without any). With ``m_c``
   of the undefined rows labelled ``c`` by the ensemble, the expected agreement of a
   side is ``sum_c m_c q_c``; they go to the side where it is larger (compared exactly,
   in integer counts). At the last level this sends them to the leaf whose class most of
   them have. With two classes (``k`` of ``m`` rows labelled ``classes[1]``, ``q`` the
   share of ``classes[1]``) the agreement is ``k q + (m - k)(1 - q)``: left when
   ``(q_left - q_right)(2k - m) > 0``.
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

A tree written before missing values were supported (format version 1) has no
``missing_left``; :func:`check_missing_rule` refuses rows with a missing value for it, by
name, before they reach it.
"""

from __future__ import annotations

import numpy as np

from miret_governance.governance.ensembles.arrays import scaled
from miret_governance.governance.errors import GovernanceError
from miret_governance.governance.miret.problem.layout import hyperplane_values, leaves_below


class NoMissingRuleError(GovernanceError, ValueError):
    """Rows with a missing value given to a surrogate that has no rule for one (format
    version 1). Exit code 2."""


def check_missing_rule(tree, X, what: str, rows=None) -> None:
    """Refuse ``X`` when it has a missing value (NaN) and ``tree`` has no rule for one.

    Parameters
    ----------
    tree : governance.miret.tree.SurrogateTree
    X : array-like of shape (n, p)
        The rows as the tree (or its estimator) takes them.
    what : str
        How the message names the surrogate, e.g. ``models:/credit-rf-surrogate/1``.
    rows : sequence, optional
        Labels of the rows of ``X`` (default: their positions).

    Raises
    ------
    NoMissingRuleError
        Naming the surrogate, how many rows have a missing value, the first few, and the
        fixes.
    """
    missing = np.isnan(np.asarray(X, dtype=np.float64)).any(axis=1)
    if tree.missing_left is not None or not missing.any():
        return
    labels = np.arange(missing.size) if rows is None else np.asarray(list(rows), dtype=object)
    shown = ", ".join(str(r) for r in labels[missing][:5].tolist())
    raise NoMissingRuleError(
        f"{int(missing.sum())} rows have missing values (NaN; rows {shown}"
        f"{' ...' if missing.sum() > 5 else ''}), but {what} was written before missing "
        "values were supported (surrogate format version 1) and has no rule for them: "
        "impute them, or explain the ensemble again (govern explain --force) to learn one"
    )


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
    k = tree.classes.size
    labelled = np.argmax(np.asarray(labels)[:, None] == tree.classes[None, :], axis=1)
    coef, intercept = np.asarray(tree.coef), np.asarray(tree.intercept)
    complete = ~missing[:, tree.used_features()].any(axis=1)
    n_branch = tree.n_branch_nodes
    # answers[node]: how many complete rows below ``node`` the tree answers with each
    # class (a leaf: its class once; no row: every class once, i.e. shares 1/k)
    answers = np.ones((n_branch + tree.n_leaves, k), dtype=np.int64)
    answers[n_branch:] = np.eye(k, dtype=np.int64)[tree.leaf_class]
    per_leaf = np.bincount(tree.apply(filled[complete]) - n_branch, minlength=tree.n_leaves)
    for t in range(n_branch):
        below = list(leaves_below(t, n_branch))
        counts = np.bincount(tree.leaf_class[below], weights=per_leaf[below], minlength=k)
        if counts.sum():
            answers[t] = counts.astype(np.int64)
    missing_left = np.ones(tree.n_branch_nodes, dtype=bool)
    node = np.zeros(X.shape[0], dtype=np.int64)
    for level in range(tree.depth):
        right = np.zeros(X.shape[0], dtype=bool)
        for t in range(2**level - 1, 2 ** (level + 1) - 1):
            rows = np.flatnonzero(node == t)
            undefined = missing[rows][:, coef[t] != 0].any(axis=1)
            value = hyperplane_values(filled[rows], coef[t], intercept[t])
            missing_left[t] = _side(
                answers[2 * t + 1],
                answers[2 * t + 2],
                np.bincount(labelled[rows][undefined], minlength=k),
                value[~undefined] > 0,
                float(coef[t] @ ensemble_sides),
            )
            right[rows] = np.where(undefined, not missing_left[t], value > 0)
        node = 2 * node + 1 + right
    return missing_left


def _side(answers_left, answers_right, undefined_counts, defined_right, push) -> bool:
    """True (left) or False (right) for one node, by the three steps of the module.

    ``answers_*``: the class counts of each side's answers; ``undefined_counts``: the
    class counts of the rows with an undefined value."""
    # agreement_left / agreement_right = (m . a_left / |a_left|) / (m . a_right / |a_right|)
    lean = int(undefined_counts @ answers_left) * int(answers_right.sum()) - int(
        undefined_counts @ answers_right
    ) * int(answers_left.sum())
    if undefined_counts.sum() and lean != 0:
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
