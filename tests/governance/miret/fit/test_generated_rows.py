"""Generated rows (``MiretSurrogate(generated_rows=...)``): the documented rule, and
every figure a fit or an explanation records stays on real rows."""

from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier

from miret_governance.flavors.explain import stages
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.miret import MiretSurrogate
from miret_governance.governance.miret.problem.augment import (
    generated_count,
    generated_rows,
    split_thresholds,
)

FIT_ROWS = 120


def test_count_is_a_share_of_the_sample_within_max_rows():
    assert generated_count(1.0, 30, None) == 30
    assert generated_count(0.5, 31, None) == 16
    assert generated_count(1.0, 30, 40) == 10  # the sample stays within max_rows
    assert generated_count(0.5, 2000, 2000) == 0
    assert generated_count(0.0, 30, None) == 0


@pytest.mark.parametrize("scheme", ["threshold", "leaf"])
def test_rows_are_reproducible_observed_values_of_movable_features(small_forest, scheme):
    X, forest = small_forest
    ensemble = read_ensemble(forest)
    rows = generated_rows(ensemble, X, 1.0, random_state=3, scheme=scheme)
    assert rows.shape == X.shape
    assert np.array_equal(rows, generated_rows(ensemble, X, 1.0, random_state=3, scheme=scheme))
    assert not np.array_equal(rows, generated_rows(ensemble, X, 1.0, random_state=4, scheme=scheme))
    for j in range(X.shape[1]):  # every value is one the data holds
        assert np.isin(rows[:, j], X[:, j]).all()
    if scheme == "threshold":  # a real row with one or two features across a threshold
        thresholds = [split_thresholds(ensemble, j) for j in range(X.shape[1])]
        for row in rows:
            assert any(_crossed(row, real, thresholds) for real in X)


def test_only_a_feature_the_ensemble_splits_on_moves():
    X = np.random.default_rng(0).random((30, 3))
    stumps = RandomForestClassifier(3, max_depth=1, max_features=None, random_state=0)
    ensemble = read_ensemble(stumps.fit(X, X[:, 2] > 0.5))
    thresholds = [split_thresholds(ensemble, j) for j in range(3)]
    assert [t.size for t in thresholds[:2]] == [0, 0]  # the stumps split on feature 2 alone
    for row in generated_rows(ensemble, X, 1.0, random_state=0):
        (source,) = np.flatnonzero((X[:, :2] == row[:2]).all(axis=1))
        assert _crossed(row, X[source], thresholds)


def _crossed(row, real, thresholds) -> bool:
    """Does ``row`` differ from ``real`` in one or two features, each moved across a
    threshold of that feature?"""
    moved = np.flatnonzero(row != real)
    return 1 <= moved.size <= 2 and all(
        ((thresholds[j] >= min(row[j], real[j])) & (thresholds[j] < max(row[j], real[j]))).any()
        for j in moved
    )


def test_fit_and_explain_figures_are_on_real_rows(scaled_forest, breast_cancer):
    X, y = breast_cancer
    train, test = X.iloc[:FIT_ROWS], X.iloc[FIT_ROWS : 2 * FIT_ROWS]
    options = {"depth": 2, "alpha": 0.5, "proximity_threshold": 0.9, "solver": "highs"}
    plain = MiretSurrogate(scaled_forest, **options).fit(train)
    grown = MiretSurrogate(scaled_forest, generated_rows=1.0, **options).fit(train)
    assert (plain.n_rows_generated_, grown.n_rows_generated_) == (0, FIT_ROWS)
    assert grown.n_rows_used_ == FIT_ROWS and grown.leaf_counts_.sum() == FIT_ROWS
    report = grown.solve_report_
    labels = scaled_forest.predict(train)
    assert report.train_fidelity == grown.score(train, labels)
    assert report.baseline_cart_train_fidelity == grown.baseline_fidelity(train, labels)
    # the held-out folds never see a generated row: the same figures as without them
    assert report.cv_fidelity == plain.solve_report_.cv_fidelity
    ensemble = read_ensemble(scaled_forest)
    data = SimpleNamespace(y_train=y.iloc[:FIT_ROWS], y_test=y.iloc[FIT_ROWS : 2 * FIT_ROWS])
    data.test = test
    metrics = stages.evaluate(
        ensemble, grown, ensemble.transform(train), ensemble.transform(test), data
    )
    assert metrics["train_fidelity"] == report.train_fidelity
    assert metrics["test_fidelity"] == grown.score(test)
    assert metrics["n_test_rows"] == FIT_ROWS
    assert metrics["cv_fidelity"] == report.cv_fidelity[report.chosen]
    assert metrics["baseline_cart_test_fidelity"] == grown.baseline_fidelity(test)
