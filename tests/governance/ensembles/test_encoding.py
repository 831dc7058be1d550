"""Pipelines with a ColumnTransformer: the ensemble view on the encoded columns agrees with
the pipeline, and every encoded column maps back to its original column and category;
original columns and categories on every surface, on hand-built trees: the recorded
encoding (``provenance.encoding``) of a one-hot pipeline and of a model's native
categorical columns, a row's path and ``disagreements.csv`` with its categories, the
card's paths, and the feature counts (a one-hot group counts once)."""

import json

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
    Encoding,
    EncodingError,
    encoded_view,
    encoding_of,
    original_features,
    recorded_encoding,
)
from miret_governance.governance.ensembles.native_categories import NativeCategories
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.ensembles.trees import UnsupportedModelError
from miret_governance.governance.measures import vite
from miret_governance.governance.measures.metrics import surrogate_metrics
from miret_governance.governance.miret.tree.conditions import negation, split_table
from miret_governance.governance.miret.tree.display import display_from_counts, rules_text
from miret_governance.governance.miret.tree.paths import applicants, row_paths
from miret_governance.governance.miret.tree.tree import SurrogateTree
from miret_governance.governance.report.html import ReportContext, render_model_card

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


ROWS = pd.DataFrame.from_records(
    [("obese", "no", 31.0, 30.0), ("normal", "yes", 22.0, 50.0), ("severe", "no", 41.0, 40.0)]
    + [("obese", "yes", 33.0, 60.0), ("normal", "no", 24.0, 20.0), ("severe", "yes", 45.0, 70.0)],
    columns=["bmi_band", "smoker", "bmi", "age"],
)
LABEL = np.array([1, 0, 1, 1, 0, 1])


def one_hot_pipeline():
    """bmi_band one-hot, smoker ordinal, bmi scaled, age dropped (remainder)."""
    prep = ColumnTransformer(
        [
            ("onehot", OneHotEncoder(handle_unknown="ignore"), ["bmi_band"]),
            ("ord", OrdinalEncoder(), ["smoker"]),
            ("scaled", MinMaxScaler(), ["bmi"]),
        ]
    )
    forest = RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0)
    return Pipeline([("prep", prep), ("model", forest)]).fit(ROWS, LABEL)


NATIVE = NativeCategories(
    ("bmi_band", "bmi"),
    {"bmi_band": ("normal", "obese", "severe")},
    np.array(["bmi_band", "bmi"], dtype=object),
    "LightGBM",
)


def test_the_recorded_encoding_names_every_original_column_and_reads_back():
    encoding = encoding_of(one_hot_pipeline()[:-1])
    recorded = [c.to_json() for c in encoding.described()]
    assert recorded == [
        {
            "column": "bmi_band",
            "kind": "onehot",
            "encoded": ["onehot__bmi_band_normal", "onehot__bmi_band_obese", "onehot__bmi_band_severe"],
            "categories": ["normal", "obese", "severe"],
        },
        {"column": "smoker", "kind": "ordinal", "encoded": ["ord__smoker"], "categories": ["no", "yes"]},
        {
            "column": "bmi",
            "kind": "numeric",
            "encoded": ["scaled__bmi"],
            "categories": [],
            "min": -22.0 / 23.0,
            "scale": 1.0 / 23.0,
        },
    ]  # fmt: skip
    again = recorded_encoding({"encoding": json.loads(json.dumps(recorded))})
    assert again.described() == encoding.described()
    assert again.condition("scaled__bmi", 0.5) == encoding.condition("scaled__bmi", 0.5)
    assert again.condition("onehot__bmi_band_obese", 0.5) == "bmi_band not in {obese}"
    assert recorded_encoding({}) is None
    names = ["scaled__bmi", "onehot__bmi_band_obese", "onehot__bmi_band_severe"]
    assert original_features(recorded, names) == ("bmi", "bmi_band")
    assert encoding.original_count([0, 2, 4]) == 2
    native = [c.to_json() for c in NATIVE.encoding.described()]
    assert native == [
        {
            "column": "bmi_band",
            "kind": "native_categorical",
            "encoded": ["bmi_band_normal", "bmi_band_obese", "bmi_band_severe"],
            "categories": ["normal", "obese", "severe"],
        },
        {"column": "bmi", "kind": "numeric", "encoded": ["bmi"], "categories": []},
    ]
    assert Encoding.from_described(native).native and not again.native


def hand_tree(encoding, also=None):
    """Node 0: bmi_band in {obese} (the obese indicator > 0.5: yes on the right);
    node 1 (left): bmi <= 30 (plus 0.5 times the encoded column ``also``); node 2
    (right): no split."""
    names = encoding.names
    coef = np.zeros((3, len(names)))
    coef[0, names.index(next(n for n in names if n.endswith("bmi_band_obese")))] = 1.0
    coef[1, names.index(next(n for n in names if n.endswith("bmi")))] = 1.0
    if also is not None:
        coef[1, names.index(also)] = 0.5
    bmi = next(c for c in encoding.columns if c.column == "bmi")
    return SurrogateTree(coef, [-0.5, -(30 * bmi.scale_ + bmi.min_), 0.0], 2, names, (0, 1))


def test_paths_and_disagreements_show_original_columns_and_categories():
    pipeline = one_hot_pipeline()
    encoding = encoding_of(pipeline[:-1])
    encoded = encoding.encode(pipeline[:-1], ROWS)
    native = pd.DataFrame(NATIVE.transform(ROWS), columns=list(NATIVE.encoding.names))
    for rows, enc, first in (
        (encoded, encoding, {"bmi_band": "normal", "smoker": "yes", "bmi": 22.0}),
        (native, NATIVE.encoding, {"bmi_band": "normal", "bmi": 22.0}),
    ):
        (obese, normal, *_) = row_paths(hand_tree(enc), rows, LABEL, encoding=enc)
        assert [s.text for s in obese.steps] == ["bmi_band in {obese} (row: obese)"]
        assert [s.text for s in normal.steps] == [
            "bmi_band not in {obese} (row: normal)",
            "bmi <= 30 (row: 22)",
        ]
        assert [s["category"] for s in normal.to_dict()["steps"]] == ["normal", None]
        assert normal.values == first
    # a row without a category (the native model's missing value: no indicator set)
    blank = NATIVE.transform(ROWS.assign(bmi_band=None))
    rows = pd.DataFrame(blank, columns=list(NATIVE.encoding.names))
    paths = row_paths(hand_tree(NATIVE.encoding), rows, LABEL, encoding=NATIVE.encoding)
    (step, _) = paths[1].steps
    assert step.text == "bmi_band not in {obese} (row: missing, by the rule for missing values)"
    assert step.category is None and np.isnan(step.value)
    found = applicants(hand_tree(encoding), encoded, 1 - LABEL, encoding=encoding)
    table = found.disagreement_table()
    assert list(table.columns)[5:] == ["bmi_band", "smoker", "bmi"]  # after row ... path
    assert table.path[1] == "bmi_band not in {obese} (row: severe) → bmi > 30 (row: 41)"
    shown = ROWS.loc[table.row]
    assert table.bmi_band.tolist() == shown.bmi_band.tolist()
    assert table.smoker.tolist() == shown.smoker.tolist()
    np.testing.assert_allclose(table.bmi, shown.bmi)
    card = render_model_card(
        ReportContext(
            title="models:/bmi/1", depth=2, rules="", metrics={}, parameters={},
            provenance={}, validation={"status": "passed"}, applicants=found,
            applicants_source="test.csv",
        )
    )  # fmt: skip
    assert (
        "- **Row 2**: bmi\\_band not in {obese} (row: severe) → bmi &gt; 30 (row: 41); ensemble "
        "**0**, surrogate **1**"
    ) in card


def test_feature_counts_count_original_columns():
    pipeline = one_hot_pipeline()
    view = encoded_view(read_ensemble(pipeline))
    X = view.encoding.encode(pipeline[:-1], ROWS).to_numpy()
    tree = hand_tree(view.encoding, also="onehot__bmi_band_severe")
    metrics = surrogate_metrics(view, tree, X)
    assert (metrics["n_features_used"], metrics["n_encoded_features_used"]) == (2, 3)
    assert metrics["n_columns_used"] == 2
    plain = surrogate_metrics(read_ensemble(pipeline[-1]), tree, X)
    assert plain["n_features_used"] == 3 and "n_encoded_features_used" not in plain
    (split, *_) = split_table(tree, encoding=view.encoding)
    assert split["condition"] == "bmi_band not in {obese}"
