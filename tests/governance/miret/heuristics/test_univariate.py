"""The optimal univariate tree against enumeration of every tree, and threshold guessing."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import GradientBoostingClassifier

from miret_governance.governance.miret.heuristics.cart import cart_predict
from miret_governance.governance.miret.heuristics.univariate import (
    BoostedStumps,
    guessed_thresholds,
    optimal_tree,
)


def enumerated(Z, y, rows, depth):
    """``(misfit, splits)`` of the best tree of depth <= ``depth``: every split tried."""
    positive = int(y[rows].sum())
    best = (min(positive, rows.size - positive), 0)
    if depth == 0 or best[0] == 0:
        return best
    for column in range(Z.shape[1]):
        left = Z[rows, column]
        if left.all() or not left.any():
            continue
        low = enumerated(Z, y, rows[left], depth - 1)
        high = enumerated(Z, y, rows[~left], depth - 1)
        best = min(best, (low[0] + high[0], low[1] + high[1] + 1))
    return best


def splits_of(arrays) -> int:
    return sum(1 for child in arrays["left"] if child >= 0)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_optimal_tree_matches_enumeration(seed, depth):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 4, size=(40, 3)).astype(float)
    y = (X[:, 0] + X[:, 1] * (X[:, 2] > 1) + rng.normal(0, 1, 40) > 2.5).astype(int)
    features = np.array([0, 0, 1, 1, 2, 2])
    thresholds = np.array([0.5, 2.5, 1.5, 2.5, 0.5, 1.5])
    arrays = optimal_tree(X, y, depth, features, thresholds, np.array([0, 1]))
    Z = X[:, features] <= thresholds
    expected = enumerated(Z, y.astype(bool), np.arange(40), depth)
    predicted = cart_predict(arrays, X)
    assert (arrays["misfit"], splits_of(arrays)) == expected
    assert int(np.sum(predicted != y)) == expected[0]


def test_optimal_tree_depth_four_matches_enumeration():
    rng = np.random.default_rng(7)
    X = rng.integers(0, 5, size=(60, 3)).astype(float)
    y = ((X[:, 0] > 2) ^ (X[:, 1] > 1) ^ (X[:, 2] > 3)).astype(int)
    features = np.array([0, 1, 2, 0])
    thresholds = np.array([2.5, 1.5, 3.5, 0.5])
    arrays = optimal_tree(X, y, 4, features, thresholds, np.array([0, 1]))
    expected = enumerated(X[:, features] <= thresholds, y.astype(bool), np.arange(60), 4)
    assert expected == (0, 7)  # the parity of three splits needs all seven
    assert (arrays["misfit"], splits_of(arrays)) == expected
    assert np.array_equal(cart_predict(arrays, X), y)


def test_optimal_tree_keeps_class_values_and_prefers_a_leaf():
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    labels = np.array(["no", "no", "no", "yes"])
    arrays = optimal_tree(X, labels, 2, np.array([0]), np.array([2.5]), np.array(["no", "yes"]))
    assert arrays["feature"] == [0, -1, -1]
    assert arrays["label"][1:] == ["no", "yes"] and arrays["misfit"] == 0
    pure = optimal_tree(
        X, np.array(["no"] * 4), 2, np.array([0]), np.array([2.5]), np.array(["no", "yes"])
    )
    assert pure["feature"] == [-1] and pure["label"] == ["no"]


def test_guessed_thresholds_find_the_label_boundary():
    X = np.column_stack([np.arange(100) / 100, np.zeros(100)])
    labels = (X[:, 0] > 0.625).astype(int)
    features, thresholds = guessed_thresholds(X, labels)
    assert set(features.tolist()) == {0}
    assert 0.625 in np.round(thresholds, 3)
    assert guessed_thresholds(X, np.zeros(100))[0].size == 0


def test_guessed_thresholds_are_gosdts_elimination_with_scikit_learns_checks_on():
    """The guessing skips scikit-learn's input checks; the splits are those of GOSDT's
    procedure run here with every check on: 40 stumps, then drop the least important
    split while a refitted reference scores no worse (the last one dropped comes back)."""
    from sklearn.ensemble import GradientBoostingClassifier

    rng = np.random.default_rng(0)
    X = rng.random((200, 4))
    rule = (X[:, 0] > 0.3) & (X[:, 1] < 0.7) | (X[:, 2] > 0.9)
    labels = (rule ^ (rng.random(200) < 0.05)).astype(int)  # 5% noise: 11 splits

    def reference(Z):
        return GradientBoostingClassifier(n_estimators=40, max_depth=1, random_state=0).fit(
            Z, labels
        )

    stumps = reference(X).estimators_.ravel()
    pairs = sorted({(s.tree_.feature[0], s.tree_.threshold[0]) for s in stumps})
    keep = list(range(len(pairs)))
    Z = np.column_stack([X[:, j] <= t for j, t in pairs]).astype(float)
    model = reference(Z)
    base, dropped = model.score(Z, labels), []
    while len(keep) > 1:
        weakest = int(np.argmin(model.feature_importances_))
        dropped.append(keep.pop(weakest))
        Z = np.delete(Z, weakest, axis=1)
        model = reference(Z)
        if model.score(Z, labels) < base:
            break
    expected = sorted(keep + dropped[-1:])
    assert len(dropped) == 8  # the elimination ran eight times

    features, thresholds = guessed_thresholds(X, labels)
    assert features.tolist() == [pairs[i][0] for i in expected]
    np.testing.assert_array_equal(thresholds, [pairs[i][1] for i in expected])


@pytest.mark.parametrize("n_classes", [2, 3])
def test_boosted_stumps_are_gradient_boostings_bit_for_bit(n_classes):
    """The guessing's reference is boosted with scikit-learn's private tree builder and
    loss: an upgrade that changes them must fail here, not silently in the thresholds."""
    rng = np.random.default_rng(5)
    X = rng.random((120, 4))
    X[:, 3] = np.round(X[:, 3] * 3) / 3  # ties, as on binarized columns
    labels = np.digitize(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.random(120), [0.7, 1.1])
    labels = np.minimum(labels, n_classes - 1)
    stumps = BoostedStumps(X, labels, random_state=4)
    model = GradientBoostingClassifier(n_estimators=40, max_depth=1, random_state=4)
    model.fit(X, labels)
    for tree, reference in zip(stumps.trees, model.estimators_.ravel(), strict=True):
        assert np.array_equal(tree.feature, reference.tree_.feature)
        assert np.array_equal(tree.threshold, reference.tree_.threshold)
        assert np.array_equal(tree.value, reference.tree_.value)
    assert np.array_equal(stumps.feature_importances(), model.feature_importances_)
    assert np.array_equal(stumps.raw.squeeze(), model.decision_function(X))
    assert stumps.score() == model.score(X, labels)
