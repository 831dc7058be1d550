"""read_ensemble reproduces each supported library's routing and probabilities."""

import numpy as np
import pytest
import xgboost
from sklearn.datasets import load_iris
from sklearn.ensemble import (
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LogisticRegression

from miret_governance.governance.readers import read_ensemble
from miret_governance.governance.trees import UnsupportedModelError


def _sklearn_models():
    return {
        "random_forest": RandomForestClassifier(n_estimators=15, max_depth=4, random_state=0),
        "extra_trees": ExtraTreesClassifier(n_estimators=15, max_depth=4, random_state=0),
        "gradient_boosting": GradientBoostingClassifier(
            n_estimators=15, max_depth=3, random_state=0
        ),
        "xgb_classifier": xgboost.XGBClassifier(n_estimators=15, max_depth=3, random_state=0),
    }


# GradientBoostingClassifier.apply on a DataFrame warns from inside scikit-learn.
@pytest.mark.filterwarnings("ignore:X has feature names, but DecisionTreeRegressor")
@pytest.mark.parametrize("kind", list(_sklearn_models()))
def test_estimator_routing_and_probabilities(kind, breast_cancer):
    X, y = breast_cancer
    model = _sklearn_models()[kind].fit(X, y)
    ensemble = read_ensemble(model)
    expected_leaves = model.apply(X)
    if expected_leaves.ndim == 3:  # GradientBoosting: (n, n_estimators, 1)
        expected_leaves = expected_leaves[:, :, 0]
    np.testing.assert_array_equal(ensemble.apply(X.to_numpy()), expected_leaves)
    np.testing.assert_allclose(
        ensemble.predict_proba(X.to_numpy()), model.predict_proba(X), atol=1e-6
    )
    np.testing.assert_array_equal(ensemble.predict(X.to_numpy()), model.predict(X))
    assert ensemble.n_trees == 15
    assert ensemble.feature_names == tuple(X.columns)
    assert ensemble.scaler is None and ensemble.preprocessor is None


def test_raw_booster(breast_cancer):
    X, y = breast_cancer
    dtrain = xgboost.DMatrix(X, label=y)
    booster = xgboost.train(
        {"objective": "binary:logistic", "max_depth": 3, "seed": 0}, dtrain, num_boost_round=12
    )
    ensemble = read_ensemble(booster)
    data = xgboost.DMatrix(X)
    np.testing.assert_array_equal(
        ensemble.apply(X.to_numpy()), booster.predict(data, pred_leaf=True).astype(int)
    )
    positive = booster.predict(data)
    np.testing.assert_allclose(ensemble.predict_proba(X.to_numpy())[:, 1], positive, atol=1e-6)
    np.testing.assert_array_equal(ensemble.predict(X.to_numpy()), (positive > 0.5).astype(int))
    assert ensemble.n_trees == 12
    assert ensemble.feature_names == tuple(X.columns)


def test_pipeline_with_scaler(breast_cancer, scaled_forest):
    X, _ = breast_cancer
    pipeline = scaled_forest
    ensemble = read_ensemble(pipeline)
    assert ensemble.scaler is pipeline[0]
    X_norm = ensemble.transform(X)
    np.testing.assert_allclose(X_norm, pipeline[0].transform(X))
    np.testing.assert_array_equal(ensemble.apply(X_norm), pipeline[-1].apply(X_norm))
    np.testing.assert_allclose(ensemble.predict_proba(X_norm), pipeline.predict_proba(X), atol=1e-6)
    np.testing.assert_array_equal(ensemble.predict(X_norm), pipeline.predict(X))
    assert ensemble.feature_names == tuple(X.columns)


def _unsupported_models(X, y):
    iris_X, iris_y = load_iris(return_X_y=True)
    regression_booster = xgboost.train(
        {"objective": "reg:squarederror", "max_depth": 2}, xgboost.DMatrix(X, label=y), 2
    )
    return {
        "RandomForestRegressor": RandomForestRegressor(n_estimators=3, max_depth=2).fit(X, y),
        "RandomForestClassifier (multiclass)": RandomForestClassifier(
            n_estimators=3, max_depth=2
        ).fit(iris_X, iris_y),
        "LogisticRegression": LogisticRegression(max_iter=50).fit(X / X.max(), y),
        "RandomForestClassifier (unfitted)": RandomForestClassifier(),
        "XGBClassifier (unfitted)": xgboost.XGBClassifier(),
        "Booster": regression_booster,
    }


def test_unsupported_models_are_refused_with_a_clear_message(breast_cancer):
    X, y = breast_cancer
    reasons = {
        "RandomForestRegressor": "not a supported tree ensemble classifier",
        "RandomForestClassifier (multiclass)": "3 classes",
        "LogisticRegression": "not a supported tree ensemble classifier",
        "RandomForestClassifier (unfitted)": "not fitted",
        "XGBClassifier (unfitted)": "not fitted",
        "Booster": "reg:squarederror",
    }
    for label, model in _unsupported_models(X, y).items():
        with pytest.raises(UnsupportedModelError) as raised:
            read_ensemble(model)
        message = str(raised.value)
        assert type(model).__qualname__ in message, label
        assert reasons[label] in message, label
        for supported in (
            "RandomForestClassifier",
            "ExtraTreesClassifier",
            "GradientBoostingClassifier",
            "XGBClassifier",
            "binary:logistic",
        ):
            assert supported in message, (label, supported)
        assert isinstance(raised.value, TypeError)
