"""Native categorical splits (LightGBM, HistGradientBoosting, XGBoost): routing rules on hand-made
trees, exactness against each library's own predictions (NaN, categories unseen in
training, negative and fractional codes; two and three classes), the one-hot view and
its encoding, VITE, and crafted models refused with MalformedModelError."""

import json
import re

import lightgbm
import numpy as np
import pandas as pd
import pytest
import xgboost
from sklearn.ensemble import HistGradientBoostingClassifier

from miret_governance.governance.ensembles.categories import code_matrix
from miret_governance.governance.ensembles.encoding import EncodingError, encoded_view, encoding_of
from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.ensembles.readers.lightgbm_text import LightGBMText
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.ensembles.readers.xgboost_files import checked_model_json
from miret_governance.governance.ensembles.trees import (
    MalformedModelError,
    Tree,
    UnsupportedModelError,
)
from miret_governance.governance.measures import vite

PURPOSES = ["business", "car", "education", "furniture"]
ODD_CODES = [np.nan, -1.0, -0.5, 0.0, 1.0, 2.0, 2.5, 3.0, 7.0, 1e10, -np.inf, np.inf]


def stump(known=None, missing_left=False) -> Ensemble:
    """One categorical split on x0 sending codes {1, 2} left (leaf 1, value 1) and the
    rest right (leaf 2, value 0)."""
    tree = Tree(
        feature=[0, -1, -1],
        threshold=[np.nan, np.nan, np.nan],
        left=[1, -1, -1],
        right=[2, -1, -1],
        value=[0.0, 1.0, 0.0],
        missing_left=[missing_left, False, False],
        category_left=([1, 2], None, None),
        category_known=(known, None, None),
    )
    return Ensemble.from_arrays([tree], n_features=1)


def test_lightgbm_rule_sends_everything_outside_the_set_right():
    leaves = stump().apply(np.array(ODD_CODES)[:, None])[:, 0]
    # left: 1, 2 and 2.5 (truncated to 2); NaN, negatives, unknown codes go right
    assert leaves.tolist() == [2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2]


def test_hist_rule_sends_missing_negative_and_unknown_codes_by_the_missing_direction():
    ensemble = stump(known=[0, 1, 2, 3], missing_left=True)
    leaves = ensemble.apply(np.array(ODD_CODES)[:, None])[:, 0]
    # right: only the known codes 0 and 3 outside the set
    assert leaves.tolist() == [1, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1]


def test_code_matrix_reads_a_one_hot_group_back_as_its_code():
    X = np.array([[1, 0, 0, 5.0], [0, 0, 1, 6.0], [0, 0, 0, 7.0]])
    out = code_matrix(X, ((0, 3),))
    np.testing.assert_array_equal(out[:, 0], [0.0, 2.0, np.nan])
    np.testing.assert_array_equal(out[:, 1:], X[:, 1:])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"category_left": ([1, -2], None, None)}, "whole numbers 0 to 65535"),
        ({"category_left": ([1, 1], None, None)}, "repeat a code"),
        ({"category_left": ([1.5], None, None)}, "whole numbers"),
        ({"category_left": ([1], [2], None)}, "leaf 1 carries a category set"),
        ({"category_left": ([1],)}, "every node needs one"),
        ({"category_left": ([1, 70000], None, None)}, "0 to 65535"),
        (
            {"category_left": ([1, 2], None, None), "category_known": ([0, 1], None, None)},
            "does not know",
        ),
        ({"category_known": ([0, 1], None, None)}, "splits no category set"),
    ],
)
def test_crafted_category_sets_are_malformed(kwargs, message):
    arrays = {"feature": [0, -1, -1], "threshold": [np.nan] * 3, "left": [1, -1, -1]}
    arrays |= {"right": [2, -1, -1], "value": [0.0, 1.0, 0.0]}
    with pytest.raises(MalformedModelError, match=message):
        Tree(**arrays, **kwargs)


def credit(n=400, seed=0, classes=2):
    """Rows with category columns (purpose 10% missing) and a numeric one with NaNs."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "income": rng.normal(42000, 9000, n),
            "purpose": pd.Categorical(rng.choice(PURPOSES, n), categories=PURPOSES),
            "grade": pd.Categorical(rng.choice(["A", "B", "C"], n)),
        }
    )
    label = frame.purpose.isin(["car", "education"]).to_numpy() ^ (frame.income > 42000)
    if classes == 3:
        label = label.astype(int) + (frame.grade == "C").to_numpy()
    frame.loc[rng.random(n) < 0.1, "purpose"] = np.nan
    frame.loc[rng.random(n) < 0.1, "income"] = np.nan
    return frame, np.asarray(label, dtype=int)


def with_unseen(frame, seed=1):
    """``frame`` with about 30% of purposes replaced by a category unseen in training."""
    rng = np.random.default_rng(seed)
    purpose = frame.purpose.astype(object).where(rng.random(len(frame)) < 0.7, "boat")
    return frame.assign(purpose=pd.Categorical(purpose))


def lightgbm_booster(frame, label, classes):
    params = {"num_leaves": 4, "max_depth": 2, "verbose": -1, "seed": 0, "num_threads": 1}
    params |= {"min_data_per_group": 5, "cat_smooth": 1, "max_cat_to_onehot": 2}
    params |= {"objective": "binary"} if classes == 2 else {"objective": "multiclass"}
    params |= {} if classes == 2 else {"num_class": 3}
    return lightgbm.train(params, lightgbm.Dataset(frame, label), num_boost_round=25)


def lightgbm_proba(booster, rows, classes):
    proba = booster.predict(rows)
    return np.column_stack([1 - proba, proba]) if classes == 2 else proba


@pytest.mark.parametrize("classes", [2, 3])
def test_lightgbm_on_category_columns_agrees_on_every_row(classes):
    frame, label = credit(classes=classes)
    booster = lightgbm_booster(frame, label, classes)
    ensemble = read_ensemble(booster)
    assert ensemble.feature_names[:5] == (
        "income", "purpose_business", "purpose_car", "purpose_education", "purpose_furniture"
    )  # fmt: skip
    assert sum(t.is_categorical.sum() for t in ensemble.trees) > 0
    for rows in (frame, with_unseen(frame)):
        ours = ensemble.predict_proba(ensemble.transform(rows))
        np.testing.assert_allclose(ours, lightgbm_proba(booster, rows, classes), atol=1e-12)
        # the same leaves: LightGBM's leaf k is node num_leaves - 1 + k of our tree
        leaves = booster.predict(rows, pred_leaf=True)
        nodes = ensemble.apply(ensemble.transform(rows))
        first_leaf = np.array([int(t.is_split.sum()) for t in ensemble.trees])
        np.testing.assert_array_equal(nodes, leaves + first_leaf[None, :])


@pytest.mark.parametrize("classes", [2, 3])
def test_lightgbm_on_codes_agrees_with_nan_negative_unseen_and_fractional_codes(classes):
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.normal(size=500), rng.integers(0, 6, 500), rng.integers(0, 3, 500)])
    label = ((X[:, 1] % 2 == 0) ^ (X[:, 0] > 0)).astype(int)
    label = label if classes == 2 else label + (X[:, 2] == 2)
    params = {"objective": "binary"} if classes == 2 else {"objective": "multiclass"}
    params |= {} if classes == 2 else {"num_class": 3}
    params |= {"num_leaves": 4, "verbose": -1, "min_data_per_group": 5, "cat_smooth": 1}
    params |= {"num_threads": 1}
    data = lightgbm.Dataset(X, label, categorical_feature=[1, 2])
    booster = lightgbm.train(params, data, num_boost_round=25)
    ensemble = read_ensemble(booster)
    # no pandas_categorical: the view reads the codes themselves
    assert ensemble.preprocessor is None and ensemble.category_groups == ()
    test = X.astype(float).copy()
    test[:, 1] = rng.choice(ODD_CODES, 500)
    test[:, 2] = rng.choice([0.0, 1.0, 2.0, 9.0, np.nan, -0.5], 500)
    proba = lightgbm_proba(booster, test, classes)
    np.testing.assert_allclose(ensemble.predict_proba(test), proba, atol=1e-12)


@pytest.mark.parametrize("classes", [2, 3])
def test_hist_gradient_boosting_from_dtype_agrees_on_every_row(classes):
    frame, label = credit(classes=classes)
    model = HistGradientBoostingClassifier(
        categorical_features="from_dtype", max_iter=25, max_depth=2, random_state=0
    ).fit(frame, label)
    ensemble = read_ensemble(model)
    # scikit-learn puts the categorical columns first
    assert ensemble.feature_names[-1] == "income"
    assert ensemble.category_groups == ((0, 4), (4, 3))
    for rows in (frame, with_unseen(frame)):
        ours = ensemble.predict_proba(ensemble.transform(rows))
        np.testing.assert_allclose(ours, model.predict_proba(rows), atol=1e-12)
        assert (ensemble.predict(ensemble.transform(rows)) == model.predict(rows)).all()


def test_hist_gradient_boosting_on_integer_categories_agrees_with_odd_values():
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.normal(size=500), rng.integers(0, 5, 500)]).astype(float)
    label = (X[:, 1] % 2 == 0) ^ (X[:, 0] > 0)
    model = HistGradientBoostingClassifier(
        categorical_features=[1], max_iter=20, max_depth=2, random_state=0
    ).fit(X, label)
    ensemble = read_ensemble(model)
    assert ensemble.feature_names == ("x1_0", "x1_1", "x1_2", "x1_3", "x1_4", "x0")
    test = X.copy()
    test[:, 1] = rng.choice([v for v in ODD_CODES if not np.isinf(v)], 500)  # sklearn: finite
    ours = ensemble.predict_proba(ensemble.transform(test))
    np.testing.assert_allclose(ours, model.predict_proba(test), atol=1e-12)


def test_the_encoding_speaks_in_original_columns_and_refuses_unseen_categories():
    frame, label = credit()
    ensemble = read_ensemble(lightgbm_booster(frame, label, 2))
    encoding = encoding_of(ensemble.preprocessor)
    assert encoding.seen == {"purpose": tuple(PURPOSES), "grade": ("A", "B", "C")}
    assert encoding.condition("purpose_car", 0.5) == "purpose not in {car}"
    raw = frame.astype({"purpose": object, "grade": object})  # as a CSV file holds them
    encoded = encoding.encode(ensemble.preprocessor, raw)
    view = encoded_view(ensemble)
    assert view.preprocessor is None and view.category_groups == ensemble.category_groups
    np.testing.assert_array_equal(
        view.predict(encoded), ensemble.predict(ensemble.transform(frame))
    )
    with pytest.raises(EncodingError, match="purpose: boat"):
        encoding.encode(ensemble.preprocessor, raw.assign(purpose="boat"))


def test_vite_counts_categorical_splits_and_lists_their_categories():
    frame, label = credit()
    view = encoded_view(read_ensemble(lightgbm_booster(frame, label, 2)))
    by_column = vite.level_frequency_by_column(view)
    assert list(by_column.index) == ["income", "purpose", "grade"]
    np.testing.assert_allclose(by_column.sum(axis=0), 1.0)
    splits = vite.category_splits(view)
    assert splits["count"].sum() == sum(int(t.is_categorical.sum()) for t in view.trees) > 0
    assert set(splits.feature) <= {"purpose", "grade"}
    assert all(re.fullmatch(r"\{[A-Za-z, ]+\}", left) for left in splits.left)
    ranges = vite.threshold_ranges(view)
    assert list(ranges.columns) == ["position", "feature", "low", "high", "count", "share"]
    on_groups = ranges[ranges.feature.isin(["purpose_business", "grade_A"])]
    assert on_groups[["low", "high"]].isna().all().all()  # no invented numeric range


def test_corrupted_categorical_lightgbm_text_is_refused_or_read():
    """300 corruptions of a categorical model's text: each is refused as unsupported or
    malformed, or read into a checked ensemble; nothing else is raised."""
    frame, label = credit()
    text = lightgbm_booster(frame, label, 2).model_to_string()
    lines = text.splitlines()
    rng = np.random.default_rng(0)
    outcomes = {"refused": 0, "read": 0}
    for _ in range(300):
        corrupted = list(lines)
        i = int(rng.integers(len(corrupted)))
        if rng.integers(2):
            corrupted[i] = re.sub(r"-?\d+", lambda m: str(int(rng.integers(-9, 99))), corrupted[i])
        else:
            del corrupted[i]
        try:
            ensemble = read_ensemble(LightGBMText("\n".join(corrupted)))
        except UnsupportedModelError:
            outcomes["refused"] += 1
        else:
            ensemble.predict_proba(ensemble.transform(frame))
            outcomes["read"] += 1
    assert outcomes["refused"] > 50 and outcomes["read"] > 50, outcomes


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("cat_threshold=", "cat_threshold=1 ", "cat_threshold has"),
        ("num_cat=", "num_cat=9", "categorical splits"),
        ("cat_boundaries=0", "cat_boundaries=1", "do not rise from 0"),
        ('pandas_categorical:[["business"', 'pandas_categorical:[["x"], ["business"', "lists 3"),
    ],
)
def test_crafted_categorical_fields_are_malformed(old, new, message):
    frame, label = credit()
    text = lightgbm_booster(frame, label, 2).model_to_string()
    assert old in text
    with pytest.raises(MalformedModelError, match=message):
        read_ensemble(LightGBMText(text.replace(old, new, 1)))


def xgboost_classifier(frame, label):
    return xgboost.XGBClassifier(
        n_estimators=20, max_depth=2, enable_categorical=True, tree_method="hist",
        max_cat_to_onehot=1, n_jobs=1, random_state=0,
    ).fit(frame, label)  # fmt: skip


@pytest.mark.parametrize("classes", [2, 3])
def test_xgboost_on_category_columns_agrees_on_every_row(classes, tmp_path):
    frame, label = credit(classes=classes)
    model = xgboost_classifier(frame, label)
    model.save_model(tmp_path / "model.ubj")  # how mlflow.xgboost stores it
    checked = tmp_path / "checked.json"  # what flavors.inputs.load_xgboost_file gives XGBoost
    checked.write_bytes(checked_model_json((tmp_path / "model.ubj").read_bytes()))
    loaded = xgboost.XGBClassifier()
    loaded.load_model(checked)
    for read in (model, loaded):
        ensemble = read_ensemble(read)
        assert ensemble.category_groups == ((1, 4), (5, 3))
        ours = ensemble.predict_proba(ensemble.transform(frame))
        # XGBoost sums in float32: its probabilities are exact to float32 round-off
        np.testing.assert_allclose(ours, model.predict_proba(frame), rtol=0, atol=1e-6)
        assert (ensemble.predict(ensemble.transform(frame)) == model.predict(frame)).all()


def test_xgboost_on_codes_agrees_with_nan_negative_unseen_and_fractional_codes():
    rng = np.random.default_rng(4)
    X = np.column_stack([rng.normal(size=500), rng.integers(0, 6, 500)]).astype(float)
    kinds = {"feature_types": ["q", "c"], "enable_categorical": True}
    data = xgboost.DMatrix(X, label=(X[:, 1] % 2 == 0) ^ (X[:, 0] > 0), **kinds)
    params = {"objective": "binary:logistic", "max_depth": 2, "max_cat_to_onehot": 1}
    booster = xgboost.train(params | {"nthread": 1}, data, 20)
    ensemble = read_ensemble(booster)
    assert ensemble.preprocessor is None
    test = X.copy()
    test[:, 1] = rng.choice([v for v in ODD_CODES if np.isfinite(v) or np.isnan(v)], 500)
    expected = booster.predict(xgboost.DMatrix(test, **kinds))
    np.testing.assert_allclose(ensemble.predict_proba(test)[:, 1], expected, rtol=0, atol=1e-6)
    leaves = booster.predict(xgboost.DMatrix(test, **kinds), pred_leaf=True)
    np.testing.assert_array_equal(ensemble.apply(test), leaves)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: m["trees"][0]["categories_sizes"].__setitem__(0, 99), "segment outside"),
        (lambda m: m["trees"][0]["categories"].__setitem__(0, -3), "categories is -3"),
        (lambda m: m["trees"][0]["categories_nodes"].append(0), "disagree"),
        (lambda m: m["cats"]["enc"][1]["offsets"].__setitem__(1, 999), "cats offsets"),
        (lambda m: m["cats"]["sorted_idx"].__setitem__(0, 7), "sorted_idx"),
    ],
)
def test_crafted_xgboost_categorical_files_are_malformed(change, message, tmp_path):
    frame, label = credit()
    xgboost_classifier(frame, label).save_model(tmp_path / "model.json")
    document = json.loads((tmp_path / "model.json").read_text())
    change(document["learner"]["gradient_booster"]["model"])
    with pytest.raises(MalformedModelError, match=message):
        checked_model_json(json.dumps(document).encode())
