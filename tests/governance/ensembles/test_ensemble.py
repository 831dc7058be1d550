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

from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.ensembles.trees import UnsupportedModelError


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
        "RandomForestClassifier (multi-output)": RandomForestClassifier(
            n_estimators=3, max_depth=2
        ).fit(iris_X, np.column_stack([iris_y, iris_y == 0])),
        "LogisticRegression": LogisticRegression(max_iter=50).fit(X / X.max(), y),
        "RandomForestClassifier (unfitted)": RandomForestClassifier(),
        "XGBClassifier (unfitted)": xgboost.XGBClassifier(),
        "Booster": regression_booster,
    }


def test_unsupported_models_are_refused_with_a_clear_message(breast_cancer):
    X, y = breast_cancer
    reasons = {
        "RandomForestRegressor": "not a supported tree ensemble classifier",
        "RandomForestClassifier (multi-output)": "2 outputs (multi-output)",
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


def _stump(feature, left_value, right_value, threshold=0.5):
    """A depth-1 tree: ``x[feature] <= threshold`` goes to the leaf of ``left_value``."""
    return {
        "feature": [feature, -1, -1],
        "threshold": [threshold, np.nan, np.nan],
        "left": [1, -1, -1],
        "right": [2, -1, -1],
        "value": [left_value, left_value, right_value],
    }


ROWS = np.array([[0.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])


def test_k_class_forest_averages_class_fractions():
    """Two stumps over three classes: the mean of the reached leaves' fractions; row 3
    ties classes a and c at 0.5 and goes to the first, a."""
    forest = Ensemble.from_arrays(
        [_stump(0, [1, 0, 0], [0, 0.5, 0.5]), _stump(1, [0.5, 0.5, 0], [0, 0, 1])],
        n_features=2,
        classes=("a", "b", "c"),
    )
    expected = [[0.75, 0.25, 0], [0, 0.25, 0.75], [0.5, 0, 0.5], [0.25, 0.5, 0.25]]
    np.testing.assert_array_equal(forest.predict_proba(ROWS), expected)
    np.testing.assert_array_equal(forest.predict(ROWS), ["a", "c", "a", "b"])
    assert forest.n_classes == 3 and forest.for_class(0) is None
    np.testing.assert_array_equal(forest.tree_class, [0, 0])
    assert forest.weighted_by_data(ROWS) is forest


def _softmax_stumps():
    """Class 0 adds 0, class 1 adds ln 2 where x0 <= 0.5, class 2 ln 5 there and ln 3
    elsewhere: probabilities (1, 2, 5) / 8 for x0 = 0 and (1, 1, 3) / 5 for x0 = 1."""
    return Ensemble.from_arrays(
        [_stump(0, 0.0, 0.0), _stump(0, np.log(2), 0.0), _stump(0, np.log(5), np.log(3))],
        n_features=2,
        aggregation="margin",
        base_margin=[0.0, 0.0, 0.0],
        classes=(10, 20, 30),
        tree_class=[0, 1, 2],
    )


def test_k_class_margins_are_softmaxed():
    ensemble = _softmax_stumps()
    expected = np.array([[1, 2, 5], [5, 5, 15], [1, 2, 5], [5, 5, 15]]) / [[8], [25], [8], [25]]
    np.testing.assert_allclose(ensemble.predict_proba(ROWS), expected, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(ensemble.predict(ROWS), [30, 30, 30, 30])
    assert ensemble.base_margin.shape == (3,) and not ensemble.base_margin.flags.writeable
    only_two = ensemble.for_class(2)
    assert only_two.n_trees == 1 and only_two.trees[0] is ensemble.trees[2]
    np.testing.assert_array_equal(only_two.tree_class, [2])
    with pytest.raises(ValueError, match="class index 3 is not in 0..2"):
        ensemble.for_class(3)


def test_k_class_tree_weights_measure_each_trees_own_class_step():
    """Tree 0 moves nothing; tree 1 moves p_1 from 1/3 to 1/2 on x0 = 0 only (variance
    (1/12)^2 = 400/57600); tree 2 moves p_2 by 3/8 and 4/15 (variance (13/240)^2 =
    169/57600): weights 0, 400/569 and 169/569, kept by the class views."""
    weighted = _softmax_stumps().weighted_by_data(ROWS[:2])
    np.testing.assert_allclose(weighted.tree_weights, [0, 400 / 569, 169 / 569], atol=1e-15)
    np.testing.assert_array_equal(weighted.tree_class, [0, 1, 2])
    assert weighted.for_class(1).tree_weights.tolist() == [weighted.tree_weights[1]]
    assert weighted.for_class(0).tree_weights.tolist() == [1.0]  # its only weight was 0


def test_binary_ensembles_keep_one_margin_and_no_class_views():
    ensemble = Ensemble.from_arrays(
        [_stump(0, -1.0, 1.0)], n_features=2, aggregation="margin", base_margin=0.5
    )
    assert ensemble.n_classes == 2 and ensemble.for_class(1) is None
    assert isinstance(ensemble.base_margin, float)
    np.testing.assert_array_equal(ensemble.tree_class, [0])
    np.testing.assert_array_equal(ensemble.predict(ROWS), [0, 1, 0, 1])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tree_class": None}, "a margin ensemble of 3 classes needs tree_class"),
        ({"tree_class": [0, 1, 3]}, "this ensemble's trees build class indices 0..2"),
        ({"base_margin": [0.0, 1.0]}, "base_margin has shape \\(2,\\); give one per class"),
        ({"classes": (1, 1, 2)}, "classes must be k >= 2 distinct labels"),
        ({"classes": (1,)}, "classes must be k >= 2 distinct labels"),
        ({"aggregation": "average"}, "tree 0 stores node values of shape \\(3,\\)"),
    ],
)
def test_k_class_views_refuse_inconsistent_arrays(changes, message):
    arguments = {
        "trees": [_stump(0, 0.0, 0.0), _stump(0, 1.0, 0.0), _stump(0, 2.0, 1.0)],
        "n_features": 2,
        "aggregation": "margin",
        "base_margin": [0.0, 0.0, 0.0],
        "classes": (0, 1, 2),
        "tree_class": [0, 1, 2],
    } | changes
    if changes.get("aggregation") == "average":
        arguments.update(base_margin=0.0, tree_class=None)
    with pytest.raises(ValueError, match=message):
        Ensemble.from_arrays(**arguments)
