"""Tree ensembles of k > 2 classes read exactly: every library's own predict on every
row, its probabilities within 1e-6 (missing values included), through a Pipeline with
a MinMaxScaler and through the model files; what is not read is refused by name."""

import lightgbm
import numpy as np
import pandas as pd
import pytest
import xgboost
from sklearn.datasets import load_wine, make_classification
from sklearn.ensemble import (
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.ensembles.readers.lightgbm_text import LightGBMText
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.ensembles.readers.xgboost_files import checked_model_json
from miret_governance.governance.ensembles.trees import UnsupportedModelError

NAN_FAMILIES = ("random_forest", "hist", "xgb_softprob", "xgb_softmax", "lightgbm")


def _models():
    return {
        "random_forest": RandomForestClassifier(n_estimators=15, max_depth=4, random_state=0),
        "extra_trees": ExtraTreesClassifier(n_estimators=15, max_depth=5, random_state=0),
        "gradient_boosting": GradientBoostingClassifier(
            n_estimators=15, max_depth=3, random_state=0
        ),
        "hist": HistGradientBoostingClassifier(max_iter=15, max_depth=3, random_state=0),
        "xgb_softprob": xgboost.XGBClassifier(n_estimators=15, max_depth=3, random_state=0),
        "xgb_softmax": xgboost.XGBClassifier(
            n_estimators=15, max_depth=3, objective="multi:softmax", random_state=0
        ),
        "lightgbm": lightgbm.LGBMClassifier(n_estimators=15, num_leaves=7, verbose=-1),
    }


@pytest.fixture(scope="module")
def datasets():
    """Wine (178 x 13, k = 3) and a 400 x 8 synthetic set of k = 4 classes, each with a
    copy where 10% of the values are missing (seed 0)."""
    wine = load_wine(as_frame=True)
    X3 = wine.data.rename(columns=lambda c: c.replace("/", "_"))
    X4, y4 = make_classification(
        400, 8, n_informative=6, n_classes=4, n_clusters_per_class=1, random_state=0
    )
    X4 = pd.DataFrame(X4, columns=[f"f{j}" for j in range(8)])
    out = {}
    for k, (X, y) in {3: (X3, wine.target.to_numpy()), 4: (X4, y4)}.items():
        mask = np.random.default_rng(0).random(X.shape) < 0.1
        out[k] = (X, y, X.mask(mask))
    return out


def _labels(family, y):
    """String labels where the library takes them (XGBoost needs 0..k-1)."""
    return y if family.startswith("xgb") else np.array(["barolo", "grignolino", "barbera", "z"])[y]


def _agrees(ensemble, model, X_view, X_model):
    np.testing.assert_allclose(
        ensemble.predict_proba(X_view), model.predict_proba(X_model), rtol=0, atol=1e-6
    )
    np.testing.assert_array_equal(ensemble.predict(X_view), model.predict(X_model))


@pytest.mark.filterwarnings("ignore:X has feature names, but DecisionTreeRegressor")
@pytest.mark.parametrize("k", [3, 4])
@pytest.mark.parametrize("family", list(_models()))
def test_k_class_models_agree_with_the_library(family, k, datasets):
    X, y, X_missing = datasets[k]
    model = _models()[family]
    y = _labels(family, y)
    model.fit(X_missing if family in NAN_FAMILIES else X, y)
    ensemble = read_ensemble(model)
    assert ensemble.n_classes == k
    np.testing.assert_array_equal(ensemble.classes, model.classes_)
    _agrees(ensemble, model, X, X)
    if family in NAN_FAMILIES:
        assert X_missing.isna().any(axis=1).mean() > 0.5
        _agrees(ensemble, model, X_missing, X_missing)
    if ensemble.aggregation == "margin":  # one tree per class per iteration
        iterations = ensemble.n_trees // k
        np.testing.assert_array_equal(ensemble.tree_class, np.tile(np.arange(k), iterations))
        assert ensemble.base_margin.shape == (k,)
        assert [ensemble.for_class(c).n_trees for c in range(k)] == [iterations] * k
    else:
        assert ensemble.trees[0].value.shape == (ensemble.trees[0].n_nodes, k)
        assert ensemble.for_class(0) is None
        np.testing.assert_array_equal(ensemble.tree_class, np.zeros(15))


@pytest.mark.filterwarnings("ignore:X has feature names, but DecisionTreeRegressor")
@pytest.mark.parametrize(
    "family", ["random_forest", "gradient_boosting", "xgb_softprob", "lightgbm"]
)
def test_k_class_leaves_are_the_librarys(family, datasets):
    """The leaf each row reaches in each tree, in the library's tree order (iteration by
    iteration, class by class)."""
    X, y, _ = datasets[3]
    model = _models()[family].fit(X, y)
    leaves = read_ensemble(model).apply(X)
    if family == "xgb_softprob":
        expected = model.get_booster().predict(xgboost.DMatrix(X), pred_leaf=True)
    elif family == "lightgbm":
        expected = model.booster_.predict(X, pred_leaf=True)
        internal = np.array([(tree.n_nodes - 1) // 2 for tree in read_ensemble(model).trees])
        leaves = leaves - internal
    else:
        expected = model.apply(X).reshape(len(X), -1)
    assert leaves.shape == expected.shape == (len(X), {"random_forest": 15}.get(family, 3 * 15))
    np.testing.assert_array_equal(leaves, expected.astype(int))


@pytest.mark.filterwarnings("ignore:X has feature names, but DecisionTreeRegressor")
@pytest.mark.parametrize("family", list(_models()))
def test_k_class_pipeline_with_min_max_scaler(family, datasets):
    X, y, X_missing = datasets[3]
    fit_on = X_missing if family in NAN_FAMILIES else X
    pipeline = make_pipeline(MinMaxScaler(), _models()[family]).fit(fit_on, _labels(family, y))
    ensemble = read_ensemble(pipeline)
    assert ensemble.scaler is pipeline[0] and ensemble.feature_names == tuple(X.columns)
    for data in (X, X_missing) if family in NAN_FAMILIES else (X,):
        _agrees(ensemble, pipeline, ensemble.transform(data), data)


def test_lightgbm_k_class_text_model_file(datasets, tmp_path):
    """The text model file (what a registered ``model.lgb`` holds) read without
    LightGBM: a Booster's (n, k) probabilities, classes 0..k-1 unless given."""
    X, y, X_missing = datasets[4]
    model = lightgbm.LGBMClassifier(n_estimators=20, verbose=-1).fit(X_missing, y)
    model.booster_.save_model(tmp_path / "model.lgb")
    text = (tmp_path / "model.lgb").read_text()
    ensemble = read_ensemble(LightGBMText(text, feature_names=list(X.columns)))
    np.testing.assert_array_equal(ensemble.classes, [0, 1, 2, 3])
    for data in (X, X_missing):
        expected = model.booster_.predict(data)
        assert expected.shape == (len(X), 4)
        np.testing.assert_allclose(ensemble.predict_proba(data), expected, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(ensemble.predict(data), expected.argmax(axis=1))
    named = read_ensemble(LightGBMText(text, classes=["a", "b", "c", "d"]))
    np.testing.assert_array_equal(named.predict(X), np.array(list("abcd"))[model.predict(X)])


@pytest.mark.parametrize("objective", ["multi:softprob", "multi:softmax"])
@pytest.mark.parametrize("suffix", ["json", "ubj"])
def test_xgboost_k_class_model_file(objective, suffix, datasets, tmp_path):
    """An XGBoost model file, checked and re-encoded as JSON (what explain loads), read
    as an XGBClassifier and as a Booster, with its base scores as margins."""
    X, y, X_missing = datasets[3]
    model = xgboost.XGBClassifier(
        n_estimators=10, max_depth=3, objective=objective, base_score=[0.2, 0.5, 0.3]
    ).fit(X_missing, y)
    model.save_model(tmp_path / f"model.{suffix}")
    checked = checked_model_json((tmp_path / f"model.{suffix}").read_bytes())
    (tmp_path / "checked.json").write_bytes(checked)
    loaded = xgboost.XGBClassifier()
    loaded.load_model(tmp_path / "checked.json")
    booster = xgboost.Booster(model_file=str(tmp_path / "checked.json"))
    for view in (read_ensemble(loaded), read_ensemble(booster)):
        np.testing.assert_array_equal(view.base_margin, [0.2, 0.5, 0.3])
        for data in (X, X_missing):
            _agrees(view, model, data.to_numpy(), data)


@pytest.mark.parametrize("family", ["hist", "gradient_boosting", "gradient_boosting_zero"])
def test_k_class_initial_margins_are_the_centred_log_prior(family, datasets):
    """Wine's classes have 59, 71 and 48 of 178 rows: scikit-learn starts each class's
    margin at ``log p_c - mean_c log p_c`` (0 with ``init='zero'``)."""
    X, y, _ = datasets[3]
    model = {
        "hist": HistGradientBoostingClassifier(max_iter=5, random_state=0),
        "gradient_boosting": GradientBoostingClassifier(n_estimators=4, random_state=0),
        "gradient_boosting_zero": GradientBoostingClassifier(n_estimators=4, init="zero"),
    }[family]
    log_prior = np.log(np.array([59, 71, 48]) / 178)
    expected = np.zeros(3) if family.endswith("zero") else log_prior - log_prior.mean()
    ensemble = read_ensemble(model.fit(X, y))
    np.testing.assert_allclose(ensemble.base_margin, expected, rtol=0, atol=1e-12)
    _agrees(ensemble, model, X, X)


def _refused_models(X, y):
    three = y % 3
    two = y % 2
    dtrain = xgboost.DMatrix(X, label=two)
    return {
        "multi-output": RandomForestClassifier(n_estimators=2).fit(X, np.column_stack([y, two])),
        "'multiclassova num_class:3": lightgbm.LGBMClassifier(
            n_estimators=2, objective="multiclassova", verbose=-1
        ).fit(X, three),
        "with 2 classes (two softmax margins)": xgboost.train(
            {"objective": "multi:softprob", "num_class": 2}, dtrain, 2
        ),
        "vector leaves (multi_strategy='multi_output_tree')": xgboost.XGBClassifier(
            n_estimators=2, multi_strategy="multi_output_tree", tree_method="hist"
        ).fit(X, three),
        "num_target=2 (multi-output)": xgboost.XGBClassifier(n_estimators=2).fit(
            X, np.column_stack([two, 1 - two])
        ),
    }


def test_k_class_models_not_read_are_refused_by_name(datasets):
    X, y, _ = datasets[4]
    for reason, model in _refused_models(X, y).items():
        with pytest.raises(UnsupportedModelError) as raised:
            read_ensemble(model)
        message = str(raised.value)
        assert reason in message, (reason, message)
        assert message.startswith("Unsupported model "), message
        assert "Supported models (fitted, one output, k >= 2 classes)" in message
        assert "'multi:softprob' or 'multi:softmax'" in message
        assert "objective='binary' or 'multiclass'" in message


def test_lightgbm_text_with_two_softmax_margins_is_refused(datasets):
    X, y, _ = datasets[3]
    model = lightgbm.LGBMClassifier(
        n_estimators=2, objective="multiclass", num_class=2, verbose=-1
    ).fit(X, y % 2)
    with pytest.raises(UnsupportedModelError, match="objective=multiclass with 2 classes"):
        read_ensemble(LightGBMText(model.booster_.model_to_string()))


@pytest.mark.parametrize("family", ["random_forest", "hist"])
def test_k_class_probabilities_do_not_depend_on_the_chunk_size(family, datasets, monkeypatch):
    """Rows routed 7 at a time give the same numbers as all 178 at once."""
    from miret_governance.governance.ensembles import ensemble as ensemble_module

    X, y, _ = datasets[3]
    ensemble = read_ensemble(_models()[family].fit(X, y))
    whole = ensemble.predict_proba(X)
    monkeypatch.setattr(ensemble_module, "PREDICT_CHUNK_ROWS", 7)
    np.testing.assert_array_equal(ensemble.predict_proba(X), whole)


@pytest.mark.parametrize("family", ["random_forest", "hist", "xgb_softprob", "lightgbm"])
def test_k_class_pipeline_with_a_column_transformer(family):
    """One-hot and ordinal categories before a 3-class model: the view on the encoded
    columns, and its encoded-space view, predict as the pipeline does."""
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

    from miret_governance.governance.ensembles.encoding import encoded_view

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "purpose": rng.choice(["car", "education", "furniture"], 300),
            "housing": rng.choice(["own", "rent", "free"], 300),
            "income": rng.normal(40000, 9000, 300),
        }
    )
    label = (frame["income"] > 36000).astype(int) + (frame["purpose"] == "car").astype(int)
    prep = ColumnTransformer(
        [
            ("cat", OneHotEncoder(handle_unknown="ignore"), ["purpose"]),
            ("ord", OrdinalEncoder(), ["housing"]),
            ("num", MinMaxScaler(), ["income"]),
        ]
    )
    pipeline = Pipeline([("prep", prep), ("model", _models()[family])]).fit(frame, label)
    ensemble = read_ensemble(pipeline)
    assert ensemble.n_classes == 3
    _agrees(ensemble, pipeline, ensemble.transform(frame), frame)
    view = encoded_view(ensemble)
    encoded = view.encoding.encode(prep, frame)
    np.testing.assert_array_equal(view.predict(encoded), pipeline.predict(frame))
