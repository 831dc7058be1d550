"""Fidelity, accuracy, proximity agreement and sparsity of a surrogate tree.

Definitions follow the paper's Results section: fidelity and accuracy are the fractions
of samples on which two labelings agree; the proximity agreement ``U`` is the fraction of
the ensemble's proximity pairs ``U_TE(m)`` that the surrogate puts in the same leaf.
"""

from __future__ import annotations

import numpy as np


def _agreement(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(
            f"expected two 1-D label arrays of equal length, got {a.shape} and {b.shape}"
        )
    if a.size == 0:
        raise ValueError("cannot score an empty set of samples")
    return float(np.mean(a == b))


def fidelity(ensemble_labels, surrogate_labels) -> float:
    """Fraction of samples where the surrogate reproduces the ensemble's label."""
    return _agreement(ensemble_labels, surrogate_labels)


def accuracy(y_true, predicted) -> float:
    """Fraction of samples whose predicted label equals the ground truth."""
    return _agreement(y_true, predicted)


def proximity_agreement(pairs, leaves) -> tuple[float, int]:
    """Share of the ensemble's proximity pairs that share a surrogate leaf.

    Parameters
    ----------
    pairs : scipy.sparse matrix of shape (n, n)
        Upper-triangular pairs ``(i, k)``, ``i < k``, with ``m_ik >= m``
        (:func:`governance.vite.proximity_pairs`).
    leaves : array of shape (n,)
        Surrogate leaf of each sample.

    Returns
    -------
    (fraction, n_pairs)
        ``fraction`` is ``nan`` when there is no pair (the paper's "-").
    """
    coo = pairs.tocoo()
    n_pairs = int(coo.nnz)
    if n_pairs == 0:
        return float("nan"), 0
    leaves = np.asarray(leaves)
    return float(np.mean(leaves[coo.row] == leaves[coo.col])), n_pairs


def feature_counts(tree) -> tuple[int, int]:
    """Distinct features used by a surrogate tree, and their multiset count (uses)."""
    used = np.asarray(tree.coef) != 0
    return int(used.any(axis=0).sum()), int(used.sum())


def effective_depth(tree, X) -> int:
    """Depth of the tree counting only splits that separate the samples of ``X``.

    A branch node is effective when the samples reaching it go to both sides; dummy
    nodes (everything to one side, as in the paper's Cleveland tree) do not count.
    """
    sides = np.asarray(tree.branch_sides(X))
    effective = ((sides == 0).any(axis=0)) & ((sides == 1).any(axis=0))
    reached_effective = (sides >= 0) & effective[None, :]
    return int(reached_effective.sum(axis=1).max(initial=0))


def surrogate_metrics(
    ensemble,
    tree,
    X_train,
    X_test=None,
    y_train=None,
    y_test=None,
    proximity_threshold: float = 0.9,
) -> dict[str, float]:
    """All metrics of a surrogate against its ensemble, keyed as the flavor logs them.

    Parameters
    ----------
    ensemble : governance.ensemble.Ensemble
    tree : governance.miret.tree.SurrogateTree
    X_train, X_test : array-like
        Normalized inputs (the ensemble's working space).
    y_train, y_test : array-like, optional
        Ground-truth labels in the ensemble's class labels.
    proximity_threshold : float
        ``m`` of the proximity pairs ``U_TE(m)``.

    Returns
    -------
    dict
        ``train_fidelity``, ``train_proximity_pairs``, ``n_features_used``,
        ``n_feature_uses``, ``effective_depth``; with test data ``test_fidelity``,
        ``test_proximity_pairs`` and (when pairs exist) ``test_proximity_agreement``;
        with labels the ``*_accuracy_surrogate`` and ``*_accuracy_ensemble`` keys.
    """
    from governance.vite import proximity_pairs

    metrics: dict[str, float] = {}
    splits = {"train": (X_train, y_train), "test": (X_test, y_test)}
    for split, (X, y) in splits.items():
        if X is None:
            continue
        X = np.asarray(X, dtype=np.float64)
        ensemble_labels = ensemble.predict(X)
        surrogate_labels = tree.predict(X)
        metrics[f"{split}_fidelity"] = fidelity(ensemble_labels, surrogate_labels)
        if y is not None:
            metrics[f"{split}_accuracy_surrogate"] = accuracy(y, surrogate_labels)
            metrics[f"{split}_accuracy_ensemble"] = accuracy(y, ensemble_labels)
        agreement, n_pairs = proximity_agreement(
            proximity_pairs(ensemble, X, proximity_threshold), tree.apply(X)
        )
        metrics[f"{split}_proximity_pairs"] = float(n_pairs)
        if split == "test" and n_pairs:
            metrics["test_proximity_agreement"] = agreement
    distinct, uses = feature_counts(tree)
    metrics["n_features_used"] = float(distinct)
    metrics["n_feature_uses"] = float(uses)
    metrics["effective_depth"] = float(effective_depth(tree, np.asarray(X_train, dtype=np.float64)))
    return metrics
