"""HistGradientBoosting and LightGBM read exactly; their refusals name what is missing;
a corrupted LightGBM text model is refused, never misread or crashed on."""

import re

import lightgbm
import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier

from miret_governance.governance.ensembles.readers.lightgbm_text import LightGBMText
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.ensembles.trees import MalformedModelError, UnsupportedModelError


@pytest.fixture(scope="module")
def cancer(breast_cancer):
    """Breast cancer with LightGBM-safe column names (no spaces)."""
    X, y = breast_cancer
    return X.rename(columns=lambda c: c.replace(" ", "_")), y


@pytest.mark.parametrize("depth", [2, 3, None])
def test_hist_gradient_boosting_margins_are_exact(depth, breast_cancer):
    X, y = breast_cancer
    model = HistGradientBoostingClassifier(max_iter=30, max_depth=depth, random_state=0)
    model.fit(X, y)
    ensemble = read_ensemble(model)
    margin = ensemble.base_margin + ensemble.leaf_values(X).sum(axis=1)
    np.testing.assert_allclose(margin, model.decision_function(X), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(ensemble.predict(X), model.predict(X))
    assert ensemble.n_trees == model.n_iter_ == 30
    assert ensemble.input_precision == "float64"
    assert ensemble.feature_names == tuple(X.columns)


def test_hist_gradient_boosting_compares_in_float64(breast_cancer):
    """Row 133 has 'worst concave points' = 0.07135, exactly a split threshold: float64
    sends it left as scikit-learn does; rounding it to float32 (as scikit-learn's
    DecisionTree does) would send it right and change 5 of 30 leaves."""
    X, y = breast_cancer
    model = HistGradientBoostingClassifier(max_iter=30, max_depth=2, random_state=0).fit(X, y)
    ensemble = read_ensemble(model)
    row = X.iloc[[133]]
    assert float(np.float32(row.iloc[0, 6])) != row.iloc[0, 6]
    margin = ensemble.base_margin + ensemble.leaf_values(row).sum()
    assert margin == pytest.approx(model.decision_function(row)[0], abs=1e-12)


@pytest.mark.parametrize(
    "params",
    [
        {"n_estimators": 30, "max_depth": 3, "num_leaves": 7},
        {"n_estimators": 40},
        {"n_estimators": 20, "sigmoid": 2.0},
    ],
)
def test_lightgbm_classifier_and_booster_are_exact(params, cancer):
    X, y = cancer
    model = lightgbm.LGBMClassifier(verbose=-1, random_state=0, **params).fit(X, y)
    ensemble = read_ensemble(model)
    np.testing.assert_allclose(ensemble.predict_proba(X), model.predict_proba(X), atol=1e-12)
    np.testing.assert_array_equal(ensemble.predict(X), model.predict(X))
    # the leaf LightGBM reaches is node (num_leaves - 1 + leaf) of the ensemble view
    internal = np.array([(tree.n_nodes - 1) // 2 for tree in ensemble.trees])
    leaves = model.booster_.predict(X, pred_leaf=True)
    np.testing.assert_array_equal(ensemble.apply(X) - internal, leaves)
    booster = read_ensemble(LightGBMText(model.booster_.model_to_string()))
    np.testing.assert_allclose(
        booster.predict_proba(X)[:, 1], model.booster_.predict(X), atol=1e-12
    )
    assert booster.feature_names == tuple(X.columns)


def test_lightgbm_names_with_spaces_come_from_the_signature(breast_cancer):
    X, y = breast_cancer
    booster = lightgbm.LGBMClassifier(n_estimators=3, verbose=-1).fit(X, y).booster_
    text = booster.model_to_string()
    assert "mean_radius" in text
    given = LightGBMText(text, feature_names=list(X.columns))
    assert read_ensemble(given).feature_names == tuple(X.columns)
    other = LightGBMText(text, feature_names=[f"f{j}" for j in range(30)])
    assert read_ensemble(other).feature_names[0] == "mean_radius"


def test_lightgbm_models_not_read_are_refused_with_the_reason(cancer):
    X, y = cancer
    three = np.arange(len(y)) % 3
    cases = {
        "'multiclassova num_class:3": (
            lightgbm.LGBMClassifier(n_estimators=2, objective="multiclassova"),
            X,
            three,
        ),
        "treats zero as missing": (
            lightgbm.LGBMClassifier(n_estimators=2, zero_as_missing=True),
            X,
            y,
        ),
        "averages its trees": (
            lightgbm.LGBMClassifier(
                n_estimators=2, boosting_type="rf", bagging_freq=1, bagging_fraction=0.5
            ),
            X,
            y,
        ),
        "linear tree": (lightgbm.LGBMClassifier(n_estimators=2, linear_tree=True), X, y),
    }
    for reason, (model, data, labels) in cases.items():
        model.set_params(verbose=-1).fit(data, labels)
        with pytest.raises(UnsupportedModelError, match=reason) as raised:
            read_ensemble(model)
        assert "LGBMClassifier, lightgbm.Booster" in str(raised.value), reason


def test_corrupted_lightgbm_text_is_refused_or_read(cancer):
    """300 corruptions of one model's text (a number changed, a line dropped or
    duplicated, a token swapped, the text cut): each is refused as malformed or
    unsupported, or read into a checked ensemble; nothing else is raised."""
    X, y = cancer
    text = lightgbm.LGBMClassifier(n_estimators=4, num_leaves=5, verbose=-1).fit(X, y)
    text = text.booster_.model_to_string()
    rng = np.random.default_rng(0)
    lines = text.splitlines()
    outcomes = {"refused": 0, "read": 0}
    for _ in range(300):
        corrupted = list(lines)
        kind = rng.integers(5)
        i = int(rng.integers(len(corrupted)))
        if kind == 0:
            corrupted[i] = re.sub(r"-?\d+", lambda m: str(int(rng.integers(-9, 99))), corrupted[i])
        elif kind == 1:
            del corrupted[i]
        elif kind == 2:
            corrupted.insert(i, corrupted[i])
        elif kind == 3:
            corrupted[i] = corrupted[i].replace("=", "= 1e999 ", 1)
        else:
            corrupted = "\n".join(lines)[: int(rng.integers(len(text)))].splitlines()
        try:
            ensemble = read_ensemble(LightGBMText("\n".join(corrupted)))
        except (MalformedModelError, UnsupportedModelError):
            outcomes["refused"] += 1
        else:
            assert np.isfinite(ensemble.predict_proba(X)).all()
            outcomes["read"] += 1
    assert outcomes["refused"] > 50 and outcomes["read"] > 50, outcomes


def test_crafted_lightgbm_children_and_features_are_refused(cancer):
    X, y = cancer
    text = lightgbm.LGBMClassifier(n_estimators=1, num_leaves=4, verbose=-1).fit(X, y)
    text = text.booster_.model_to_string()
    crafted = {
        "child outside": re.sub(r"left_child=\S+", "left_child=1099511627776", text, count=1),
        "feature 99": re.sub(r"split_feature=\S+", "split_feature=99", text, count=1),
        "not finite": re.sub(r"leaf_value=\S+", "leaf_value=nan", text, count=1),
    }
    for bad in crafted.values():
        with pytest.raises(MalformedModelError, match="the model file is malformed"):
            read_ensemble(LightGBMText(bad))


@pytest.fixture(scope="module")
def with_missing(cancer):
    """``cancer`` with 15% of its values missing, at random (seed 0)."""
    X, y = cancer
    mask = np.random.default_rng(0).random(X.shape) < 0.15
    return X.mask(mask), y


@pytest.mark.parametrize("train_missing", [False, True])
@pytest.mark.parametrize("family", ["random_forest", "hist", "xgboost", "lightgbm"])
def test_missing_values_follow_each_libraries_direction(
    family, train_missing, cancer, with_missing
):
    """Rows with missing values are routed as the library routes them, whether the
    model saw missing values in training (learned directions) or not (defaults)."""
    import xgboost
    from sklearn.ensemble import RandomForestClassifier

    models = {
        "random_forest": RandomForestClassifier(n_estimators=20, max_depth=4, random_state=0),
        "hist": HistGradientBoostingClassifier(max_iter=20, random_state=0),
        "xgboost": xgboost.XGBClassifier(n_estimators=20, max_depth=3),
        "lightgbm": lightgbm.LGBMClassifier(n_estimators=20, verbose=-1),
    }
    X, y = with_missing if train_missing else cancer
    model = models[family].fit(X, y)
    ensemble = read_ensemble(model)
    X_missing = with_missing[0]
    assert X_missing.isna().any(axis=1).mean() > 0.99
    np.testing.assert_array_equal(ensemble.predict(X_missing), model.predict(X_missing))
    atol = 1e-6 if family == "xgboost" else 1e-12  # XGBoost sums margins in float32
    np.testing.assert_allclose(
        ensemble.predict_proba(X_missing), model.predict_proba(X_missing), atol=atol
    )


def test_threshold_ranges_skip_the_infinite_thresholds_of_missing_value_splits(with_missing):
    from sklearn.ensemble import RandomForestClassifier

    from miret_governance.governance.measures.vite import threshold_ranges

    X, y = with_missing
    forest = RandomForestClassifier(n_estimators=20, max_depth=4, random_state=0).fit(X, y)
    thresholds = np.concatenate([t.threshold[t.is_split] for t in read_ensemble(forest).trees])
    assert np.isinf(thresholds).any()
    ranges = threshold_ranges(read_ensemble(forest), depth=4)
    assert np.isfinite(ranges[["low", "high"]].to_numpy()[~ranges["low"].isna()]).all()
