"""The ensemble view's labels and probabilities from the library's own predict equal the
exact routing's on every row, for every family, two and three classes, with missing
values; a library that disagrees is caught and the exact view used with a warning."""

import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import xgboost
from sklearn.datasets import make_classification
from sklearn.ensemble import (
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.ensembles.native_predict import (
    CHECK_ROWS,
    LibraryProba,
    NativePredictionWarning,
    check_rows,
)
from miret_governance.governance.ensembles.readers.reading import read_ensemble

FAMILIES = {
    "random_forest": lambda: RandomForestClassifier(n_estimators=40, max_depth=5, random_state=0),
    "extra_trees": lambda: ExtraTreesClassifier(n_estimators=40, max_depth=5, random_state=0),
    "gradient_boosting": lambda: GradientBoostingClassifier(n_estimators=20, random_state=0),
    "hist_gradient_boosting": lambda: HistGradientBoostingClassifier(max_iter=30, random_state=0),
    "xgboost": lambda: xgboost.XGBClassifier(n_estimators=30, max_depth=3, random_state=0),
    "xgboost_softmax": lambda: xgboost.XGBClassifier(
        n_estimators=30, max_depth=3, objective="multi:softmax", random_state=0
    ),
}


def task(k: int, missing: bool) -> tuple:
    """3,000 rows x 8 features of ``k`` classes; every 7th row misses feature 2."""
    X, y = make_classification(
        n_samples=3000, n_features=8, n_informative=5, n_classes=k, random_state=k
    )
    if missing:
        X[::7, 2] = np.nan
    return pd.DataFrame(X, columns=[f"f{j}" for j in range(8)]), y


def exact_labels(ensemble, X) -> np.ndarray:
    return ensemble.classes[ensemble.exact_proba(X).argmax(axis=1)]


CASES = [(f, k) for f in sorted(FAMILIES) for k in (2, 3) if (f, k) != ("xgboost_softmax", 2)]


@pytest.mark.parametrize(("family", "k"), CASES)
def test_library_labels_equal_the_exact_views_on_every_row(family, k):
    missing = family != "gradient_boosting"  # it refuses NaN: tested below
    X, y = task(k, missing)
    model = FAMILIES[family]().fit(X, y)
    ensemble = read_ensemble(model, native=True)
    assert ensemble.native_proba is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no disagreement, no feature-name warning
        proba = ensemble.predict_proba(X)
        labels = ensemble.predict(X)
    assert "_native_refused" not in ensemble.__dict__
    np.testing.assert_array_equal(labels, exact_labels(ensemble, X))  # 100% of rows
    np.testing.assert_allclose(proba, ensemble.exact_proba(X), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(labels, model.predict(X))
    if not family.startswith("xgboost"):  # the library's own numbers, unchanged
        np.testing.assert_array_equal(proba, model.predict_proba(X))


def test_a_pipeline_predicts_with_its_last_step_on_scaled_rows():
    X, y = task(2, missing=True)
    pipeline = make_pipeline(MinMaxScaler(), RandomForestClassifier(30, random_state=0)).fit(X, y)
    ensemble = read_ensemble(pipeline, native=True)
    scaled = ensemble.transform(X)
    np.testing.assert_array_equal(ensemble.predict_proba(scaled), pipeline.predict_proba(X))
    np.testing.assert_array_equal(ensemble.predict(scaled), exact_labels(ensemble, scaled))


def test_gradient_boosting_routes_missing_values_the_exact_way_silently():
    X, y = task(2, missing=False)
    model = GradientBoostingClassifier(n_estimators=10, random_state=0).fit(X, y)
    ensemble = read_ensemble(model, native=True)
    X.iloc[::5, 1] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        proba = ensemble.predict_proba(X)
    np.testing.assert_array_equal(proba, ensemble.exact_proba(X))
    assert "_native_refused" not in ensemble.__dict__


class Disagreeing:
    """A hand-made classifier whose predict_proba disagrees with its trees on the rows
    whose first feature exceeds ``above`` (class columns swapped there)."""

    def __init__(self, model, above):
        self.model, self.above = model, above

    def predict_proba(self, X):
        proba = self.model.predict_proba(X)
        swap = np.asarray(X)[:, 0] > self.above
        proba[swap] = proba[swap, ::-1]
        return proba


class Failing:
    def predict_proba(self, X):
        raise RuntimeError("no predictor")


@pytest.fixture(scope="module")
def forest():
    X, y = task(2, missing=False)
    return X.to_numpy(), read_ensemble(RandomForestClassifier(30, random_state=0).fit(X, y))


@pytest.mark.parametrize("share", [1.0, 0.05])
def test_a_disagreeing_library_is_caught_and_the_exact_view_used(forest, share):
    """A library wrong on every row, or on 5% of rows (150 of 3,000; about 50 of them
    among the 1,024 checked)."""
    X, exact = forest
    above = np.quantile(X[:, 0], 1 - share) if share < 1 else -np.inf
    model = RandomForestClassifier(30, random_state=0).fit(*task(2, missing=False))
    names = tuple(model.feature_names_in_)
    wrong = LibraryProba(Disagreeing(model, above), "sklearn", names)
    ensemble = replace(exact, native_proba=wrong)
    with pytest.warns(NativePredictionWarning, match="probabilities differ by up to"):
        labels = ensemble.predict(X)
    np.testing.assert_array_equal(labels, exact.predict(X))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused once: the exact view from now on
        np.testing.assert_array_equal(ensemble.predict_proba(X), exact.predict_proba(X))


def test_a_failing_library_is_named_and_the_exact_view_used(forest):
    X, exact = forest
    ensemble = replace(exact, native_proba=LibraryProba(Failing(), "sklearn"))
    with pytest.warns(NativePredictionWarning, match="RuntimeError: no predictor"):
        np.testing.assert_array_equal(ensemble.predict(X), exact.predict(X))


def test_the_sample_checked_is_all_rows_then_evenly_spaced():
    np.testing.assert_array_equal(check_rows(5), np.arange(5))
    np.testing.assert_array_equal(check_rows(CHECK_ROWS), np.arange(CHECK_ROWS))
    rows = check_rows(100_000)
    assert rows.size == CHECK_ROWS and rows[0] == 0 and rows[-1] == 99_999
    assert np.all(np.diff(rows) >= 97) and np.all(np.diff(rows) <= 98)


def test_only_an_explicit_caller_gets_the_library_and_only_where_it_is_exact():
    X, y = task(3, missing=False)
    model = xgboost.XGBClassifier(n_estimators=12, max_depth=2).fit(X, y)
    assert read_ensemble(model).native_proba is None  # the default: exact routing
    ensemble = read_ensemble(model, native=True)
    assert ensemble.weighted_by_data(X).native_proba is ensemble.native_proba
    assert ensemble.for_class(1).native_proba is None  # one class's trees only
    frame = X.assign(f0=pd.Categorical(np.where(X["f0"] > 0, "a", "b")))
    native = HistGradientBoostingClassifier(max_iter=5, categorical_features="from_dtype")
    assert read_ensemble(native.fit(frame, y), native=True).native_proba is None
