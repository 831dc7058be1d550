"""The report's "Try an applicant" panel: its own script, run in V8 (mini-racer) on the JSON
the report embeds, gives explain-row's path words, surrogate class and ensemble answer."""

import json

import numpy as np
import pandas as pd
import pytest
from applicant_panel import panel
from categorical_data import credit_frame
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (
    ExtraTreesClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler, OneHotEncoder

from miret_governance.governance.ensembles.encoding import encoded_view, encoding_of
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.miret.tree.paths import encoded_rows, feature_rows, row_paths
from miret_governance.governance.miret.tree.tree import SurrogateTree
from miret_governance.governance.report.applicant_model import (
    EMBED_MAX_NODES,
    applicant_model,
)
from miret_governance.governance.report.html import ReportContext, render_report


class Surrogate:
    """A fitted surrogate as the report reads one: its tree and input scaler."""

    def __init__(self, tree, scaler):
        self.tree_, self.input_scaler_ = tree, scaler


def page(surrogate, ensemble, class_names=None) -> str:
    context = ReportContext(
        title="models:/m/1",
        depth=surrogate.tree_.depth,
        rules="",
        metrics={},
        parameters={},
        provenance={},
        validation={"status": "passed"},
        applicant=applicant_model(surrogate, ensemble, class_names),
    )
    return render_report(context)


def check(follow, frame, paths, proba, names):
    """Each row: the script's steps, leaf and answers equal explain-row's."""
    for (_, values), path, p in zip(frame.iterrows(), paths, proba, strict=True):
        got = follow(values.to_dict())
        assert [s["text"] for s in got["steps"]] == [s.text for s in path.steps]
        assert [s["line"] for s in got["steps"]] == [
            f"node {s.node}: {s.condition}? {s.answer} (row: "
            + (
                "missing, by the rule for missing values)"
                if np.isnan(s.value)
                else s.text.rsplit("(row: ", 1)[1]
            )
            for s in path.steps
        ]
        assert (got["leaf"], got["surrogate"]) == (path.leaf, path.surrogate)
        assert (got["ensemble"], got["agrees"]) == (path.ensemble, path.agrees)
        assert got["proba"] == pytest.approx(p.tolist(), abs=1e-12)
        assert names[int(np.argmax(p))] == path.ensemble


def test_boosted_numeric_rows_with_missing_values():
    rng = np.random.default_rng(3)
    X = pd.DataFrame(rng.normal(50, 20, (300, 4)), columns=["income", "age", "debt", "score"])
    y = ((X.income - X.debt > 5) ^ (X.score > 65)).astype(int)
    X[X > 80] = np.nan  # missing values the boosting learned directions for
    model = HistGradientBoostingClassifier(max_iter=12, max_depth=3, random_state=0).fit(X, y)
    ensemble = read_ensemble(model)
    scaler = MinMaxScaler().fit(X)
    tree = SurrogateTree(  # a univariate root, an oblique split, a "yes is right" split
        coef=[[1.0, 0, 0, 0], [0, 0.6, -0.4, 0], [0, 0, 0, -1.0]],
        intercept=[-0.5, 0.05, 0.45],
        depth=2,
        feature_names=list(X.columns),
        classes=[0, 1],
        missing_left=np.array([True, False, True]),
        leaf_class=[0, 1, 1, 0],
    )
    rows = pd.concat([X.iloc[:6], X[X.isna().any(axis=1)].iloc[:4]])
    names = ("refused", "granted")
    labels = ensemble.predict(ensemble.transform(feature_rows(rows, tree.feature_names)))
    paths = row_paths(tree, rows, labels, scaler=scaler, class_names=names)
    follow = panel(page(Surrogate(tree, scaler), ensemble, names))
    check(follow, rows, paths, ensemble.predict_proba(rows.to_numpy()), names)
    assert any("missing, by the rule" in s.text for p in paths for s in p.steps)
    assert {p.agrees for p in paths} == {True, False}
    wrong = follow({"income": "12k", "age": 1, "debt": 1, "score": 1})
    assert wrong == {"error": 'income must be a number in raw units, not "12k"'}


def test_one_hot_pipeline_in_original_columns():
    frame, label = credit_frame(n=300, seed=4)
    label = label + (frame.duration > 40).to_numpy()  # three classes
    prep = ColumnTransformer(
        [
            ("onehot", OneHotEncoder(), ["purpose", "housing"]),
            ("scaled", MinMaxScaler(), ["income", "age"]),
        ],
        remainder="passthrough",
    )
    model = Pipeline(
        [("prep", prep), ("model", RandomForestClassifier(n_estimators=4, max_depth=4))]
    ).fit(frame, label)
    ensemble = read_ensemble(model)
    encoding = encoding_of(ensemble.preprocessor)
    encoded = encoded_rows(frame, encoding, ensemble.preprocessor)
    scaler = MinMaxScaler().fit(encoded)
    names = list(encoding.names)
    coef = np.zeros((3, len(names)))
    coef[0, names.index("onehot__purpose_car")] = 1.0
    coef[1, names.index("scaled__income")] = 1.0
    coef[2, [names.index("scaled__age"), names.index("remainder__duration")]] = [0.5, 0.5]
    tree = SurrogateTree(
        coef, [-0.5, -0.4, -0.5], 2, names, [0, 1, 2], np.array([True] * 3), [0, 1, 2, 1]
    )
    rows = frame.iloc[:8]
    x = encoded_rows(rows, encoding, ensemble.preprocessor)
    labels = ensemble.predict(x)
    paths = row_paths(tree, x, labels, scaler=scaler, encoding=encoding)
    view = encoded_view(ensemble)  # what the report is written from
    follow = panel(page(Surrogate(tree, scaler), view))
    check(follow, rows, paths, ensemble.predict_proba(x), ("0", "1", "2"))
    assert any(" in {car}" in s.holds or "not in {car}" in s.holds for s in paths[0].steps)
    first = rows.iloc[0]
    header = ",".join(f'"{name}"' for name in rows.columns)  # CSV, quoted and not
    assert follow(f"{header}\r\n{','.join(map(str, first))}\n") == follow(first.to_dict())
    assert follow(first.to_json()) == follow(first.to_dict())  # a JSON object
    assert follow("a,b\n1,2\n3,4") == {
        "error": "paste a JSON object, or CSV: a header line and one row"
    }
    unseen = follow({**rows.iloc[0].to_dict(), "purpose": "boat"})
    assert unseen["error"].startswith('purpose: "boat" was not seen in training (seen: ')


def test_a_large_ensemble_is_not_embedded_and_the_page_says_why():
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(3000, 2)), columns=["a", "b"])
    y = rng.integers(0, 2, 3000)  # noise: fully grown trees of about 4,700 nodes
    model = ExtraTreesClassifier(n_estimators=5, random_state=0).fit(X, y)
    ensemble = read_ensemble(model)
    assert sum(t.n_nodes for t in ensemble.trees) > EMBED_MAX_NODES
    tree = SurrogateTree([[1.0, 0.0]], [-0.5], 1, ["a", "b"], [0, 1])
    html = page(Surrogate(tree, MinMaxScaler().fit(X)), ensemble)
    got = panel(html)({"a": 0.1, "b": 2})
    assert (got["ensemble"], got["agrees"]) == (None, None) and len(got["steps"]) == 1
    assert f"more than the {EMBED_MAX_NODES:,} a report embeds" in html


def test_native_categories_of_a_three_class_boosting():
    frame, label = credit_frame(n=300, seed=5)
    label = label + (frame.age > 50).to_numpy()  # three classes: softmax of three margins
    frame = frame.astype({"purpose": "category", "housing": "category"})
    model = HistGradientBoostingClassifier(
        categorical_features="from_dtype", max_iter=8, max_depth=3, random_state=0
    ).fit(frame, label)
    ensemble = read_ensemble(model)
    encoding = encoding_of(ensemble.preprocessor)
    rows = frame.iloc[:6].astype(object)
    rows.iloc[2, rows.columns.get_loc("housing")] = np.nan  # a missing category
    x = encoded_rows(rows, encoding, ensemble.preprocessor)
    names = list(encoding.names)
    coef = np.zeros((3, len(names)))
    coef[0, names.index("housing_own")] = -1.0  # yes: housing in {own}
    coef[1, names.index("income")] = 1.0
    coef[2, [names.index("age"), names.index("duration")]] = [1.0, -1.0]
    tree = SurrogateTree(
        coef, [0.5, -0.5, 0.0], 2, names, [0, 1, 2], np.array([False, True, True]), [2, 0, 1, 0]
    )
    scaler = MinMaxScaler().fit(encoded_rows(frame, encoding, ensemble.preprocessor))
    paths = row_paths(tree, x, ensemble.predict(x), scaler=scaler, encoding=encoding)
    follow = panel(page(Surrogate(tree, scaler), encoded_view(ensemble)))
    check(follow, rows, paths, ensemble.predict_proba(x), ("0", "1", "2"))
    assert ensemble.category_groups and paths[2].steps[0].holds == "housing not in {own}"


def test_numbers_are_written_as_format_number_writes_them():
    from importlib.resources import files

    from py_mini_racer import MiniRacer

    from miret_governance.governance.miret.tree.conditions import format_number

    engine = MiniRacer()
    templates = files("miret_governance.governance.report") / "templates"
    engine.eval((templates / "applicant.js").read_text(encoding="utf-8"))
    rng = np.random.default_rng(1)
    values = (rng.normal(size=600) * 10.0 ** rng.integers(-9, 9, 600)).tolist()
    values += np.round(rng.normal(size=300) * 100, 3).tolist()  # exact ties such as 12.125
    values += [12.125, 9999.5, 12344.5, 99999.5, 1e6, -0.0, 1e-5, 9.9995, 0.00012345]
    written = engine.eval(
        f"JSON.stringify({json.dumps(values)}.map(x => ApplicantPanel.formatNumber(x)))"
    )
    assert json.loads(written) == [format_number(v) for v in values]
