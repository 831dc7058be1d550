"""Pipelines with a ColumnTransformer: the ensemble view on the encoded columns agrees with
the pipeline, and every encoded column maps back to its original column and category."""

import numpy as np
import pandas as pd
import pytest
import xgboost
from categorical_data import credit_frame
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (
    GradientBoostingClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, OrdinalEncoder, StandardScaler

from miret_governance.governance.data.validation import validate_inputs
from miret_governance.governance.ensembles.encoding import (
    NUMERIC,
    ONE_HOT,
    ORDINAL,
    EncodingError,
    encoded_view,
    encoding_of,
)
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.ensembles.trees import UnsupportedModelError
from miret_governance.governance.measures import vite
from miret_governance.governance.miret.tree.conditions import negation, split_table
from miret_governance.governance.miret.tree.display import display_from_counts, rules_text
from miret_governance.governance.miret.tree.tree import SurrogateTree

HAND = pd.DataFrame(
    {
        "purpose": ["car", "education", "furniture", "car", "education", "furniture"],
        "housing": ["own", "rent", "free", "rent", "own", "free"],
        "income": [20000.0, 30000.0, 60000.0, 40000.0, 50000.0, 35000.0],
        "age": [25.0, 40.0, 33.0, 51.0, 29.0, 62.0],
    }
)
HAND_LABEL = np.array([1, 0, 0, 1, 0, 1])


def hand_pipeline(model=None):
    prep = ColumnTransformer(
        [
            ("cat", OneHotEncoder(handle_unknown="ignore"), ["purpose"]),
            ("ord", OrdinalEncoder(), ["housing"]),
            ("num", MinMaxScaler(), ["income"]),
            ("raw", "passthrough", ["age"]),
        ]
    )
    model = model or RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0)
    return Pipeline([("prep", prep), ("model", model)]).fit(HAND, HAND_LABEL)


def test_every_encoded_column_names_its_original_column_and_category():
    encoding = encoding_of(hand_pipeline()[:-1])
    assert [(c.name, c.column, c.kind, c.categories) for c in encoding.columns] == [
        ("cat__purpose_car", "purpose", ONE_HOT, ("car",)),
        ("cat__purpose_education", "purpose", ONE_HOT, ("education",)),
        ("cat__purpose_furniture", "purpose", ONE_HOT, ("furniture",)),
        ("ord__housing", "housing", ORDINAL, ("free", "own", "rent")),
        ("num__income", "income", NUMERIC, ()),
        ("raw__age", "age", NUMERIC, ()),
    ]
    income = encoding.column("num__income")  # x_scaled = x / 40000 - 0.5
    assert (income.scale_, income.min_) == (1 / 40000, -0.5)
    assert encoding.seen == {
        "purpose": ("car", "education", "furniture"),
        "housing": ("free", "own", "rent"),
    }
    assert encoding.inputs == ("purpose", "housing", "income", "age")


def test_splits_read_as_categories_and_raw_units():
    encoding = encoding_of(hand_pipeline()[:-1])
    assert encoding.condition("cat__purpose_car", 0.5) == "purpose not in {car}"
    assert encoding.condition("cat__purpose_car", 1.0, "<") == "purpose not in {car}"
    assert encoding.condition("ord__housing", 1.5) == "housing in {free, own}"
    assert encoding.condition("ord__housing", 1.0, "<") == "housing in {free}"
    assert encoding.condition("raw__age", 30.5) == "age <= 30.5"
    # a split that keeps every category on one side stays a comparison
    assert encoding.condition("ord__housing", 2.5) == "housing (code) <= 2.5"
    assert negation("purpose not in {car}") == "purpose in {car}"
    assert negation("housing in {free, own}") == "housing not in {free, own}"
    coef, intercept = encoding.raw_terms([0, 0, 0, 0, 2.0, 0], -1.0)
    assert coef[4] == 2.0 / 40000 and intercept == -1.0 + 2.0 * -0.5


def test_rules_name_original_columns_and_categories():
    encoding = encoding_of(hand_pipeline()[:-1])
    coef = np.zeros((3, 6))
    coef[0, 0] = 1.0  # purpose_car <= 0.5
    coef[1, 3] = 1.0  # housing code <= 1.5
    coef[2, 4] = 1.0  # income scaled <= 0.5, i.e. income <= 40000
    tree = SurrogateTree(coef, [-0.5, -1.5, -0.5], 2, feature_names=encoding.names, classes=(0, 1))
    counts = np.array([[3, 0], [0, 1], [2, 0], [0, 4]])
    display = display_from_counts(tree, counts, encoding=encoding)
    lines = rules_text(display).splitlines()
    assert lines[:4] == [
        "if purpose not in {car} and housing in {free, own} then 0 (30.0% of samples, purity "
        + "100.0%)",
        "if purpose not in {car} and housing not in {free, own} then 1 (10.0% of samples, "
        + "purity 100.0%)",
        "if purpose in {car} and income <= 40000 then 0 (20.0% of samples, purity 100.0%)",
        "if purpose in {car} and income > 40000 then 1 (40.0% of samples, purity 100.0%)",
    ]


def test_oblique_terms_name_the_category_indicator():
    encoding = encoding_of(hand_pipeline()[:-1])
    tree = SurrogateTree([[2.0, 0, 0, 0, 0, 0.1]], [-5.0], 1, feature_names=encoding.names)
    (split,) = split_table(tree, encoding=encoding)
    assert split["condition"] == "2·[purpose = car] + 0.1·age <= 5"


ENCODERS = {
    "one-hot": lambda: OneHotEncoder(handle_unknown="ignore"),
    "ordinal": lambda: OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1),
}
MODELS = {
    "rf": lambda: RandomForestClassifier(n_estimators=30, max_depth=5, random_state=0),
    "gb": lambda: GradientBoostingClassifier(n_estimators=30, max_depth=3, random_state=0),
    "hgb": lambda: HistGradientBoostingClassifier(max_iter=30, random_state=0),
    "xgb": lambda: xgboost.XGBClassifier(n_estimators=30, max_depth=3, random_state=0),
}


@pytest.mark.parametrize("numeric", ["passthrough", "minmax"])
@pytest.mark.parametrize("encoder", sorted(ENCODERS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_encoded_view_agrees_with_the_pipeline_on_every_row(encoder, model, numeric):
    frame, label = credit_frame()
    prep = ColumnTransformer(
        [
            ("cat", ENCODERS[encoder](), ["purpose", "housing"]),
            ("num", MinMaxScaler() if numeric == "minmax" else "passthrough", ["income", "age"]),
            ("raw", "passthrough", ["duration"]),
        ]
    )
    pipeline = Pipeline([("prep", prep), ("model", MODELS[model]())]).fit(frame, label)
    rows, _ = credit_frame(n=400, seed=1)
    rows.loc[:19, "purpose"] = "boat"  # unseen: handled as the encoder handles it
    rows.loc[10:29, "housing"] = "castle"
    ensemble = read_ensemble(pipeline)
    expected = pipeline.predict(rows)
    assert (ensemble.predict(ensemble.transform(rows)) == expected).all()
    np.testing.assert_allclose(
        ensemble.predict_proba(ensemble.transform(rows)), pipeline.predict_proba(rows), atol=1e-6
    )
    view = encoded_view(ensemble)  # the space the surrogate is fitted in
    assert view.feature_names == tuple(prep.get_feature_names_out())
    seen, _ = credit_frame(n=400, seed=1)
    assert (view.predict(view.encoding.encode(prep, seen)) == pipeline.predict(seen)).all()


def test_unseen_categories_are_named_never_mapped():
    pipeline = hand_pipeline()
    encoding = encoding_of(pipeline[:-1])
    rows = HAND.assign(purpose=["car", "boat", "car", "car", "plane", "boat"])
    assert encoding.unseen(rows) == {"purpose": ["boat", "plane"]}
    with pytest.raises(EncodingError, match=r"purpose: boat, plane \(seen in training: car"):
        encoding.encode(pipeline[:-1], rows)
    report = validate_inputs(rows.assign(label=HAND_LABEL), read_ensemble(pipeline), "label")
    assert not report.success
    (failure,) = report.failures
    assert failure.message.startswith(
        "column 'purpose' has categories not seen in training: boat, plane (3 rows, rows 1, 4, 5)"
    )
    passed = validate_inputs(HAND.assign(label=HAND_LABEL), read_ensemble(pipeline), "label")
    assert passed.success, passed.summary()


def test_vite_frequency_sums_each_one_hot_group():
    frame, label = credit_frame()
    prep = ColumnTransformer(
        [
            ("cat", OneHotEncoder(), ["purpose", "housing"]),
            ("num", "passthrough", ["income", "age", "duration"]),
        ]
    )
    model = RandomForestClassifier(n_estimators=20, max_depth=3, random_state=0)
    view = encoded_view(
        read_ensemble(Pipeline([("prep", prep), ("model", model)]).fit(frame, label))
    )
    per_encoded = vite.level_frequency(view)
    by_column = vite.level_frequency_by_column(view)
    assert list(by_column.index) == ["purpose", "housing", "income", "age", "duration"]
    purpose = [n for n in per_encoded.index if n.startswith("cat__purpose_")]
    np.testing.assert_allclose(by_column.loc["purpose"], per_encoded.loc[purpose].sum())
    np.testing.assert_allclose(by_column.loc["income"], per_encoded.loc["num__income"])
    np.testing.assert_allclose(by_column.sum(), 1.0)  # each level still sums to 1
    nodes = vite.node_frequency_by_column(view)
    assert list(nodes.columns) == list(by_column.index)
    np.testing.assert_allclose(nodes.sum(axis=1), vite.node_frequency(view).sum(axis=1))


def test_transformers_that_cannot_be_mapped_back_are_refused():
    prep = ColumnTransformer([("num", StandardScaler(), ["income", "age"])])
    model = Pipeline([("prep", prep), ("model", RandomForestClassifier(n_estimators=2))])
    with pytest.raises(UnsupportedModelError, match="StandardScaler"):
        read_ensemble(model.fit(HAND, HAND_LABEL))
    dropped = ColumnTransformer([("cat", OneHotEncoder(drop="first"), ["purpose"])])
    model = Pipeline([("prep", dropped), ("model", RandomForestClassifier(n_estimators=2))])
    with pytest.raises(UnsupportedModelError, match="drops or groups categories"):
        read_ensemble(model.fit(HAND, HAND_LABEL))
