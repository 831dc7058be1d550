"""Native categorical features end to end: a LightGBM Booster trained on a DataFrame with
category columns and missing values (logged with mlflow.lightgbm: its text model file),
a HistGradientBoostingClassifier(categorical_features="from_dtype") logged with skops and
an XGBClassifier(enable_categorical=True) logged with mlflow.xgboost go through ``govern explain`` and ``govern gate`` in a temporary store; rules, VITE and
validation name the original columns and their categories."""

import json
import re
from pathlib import Path

import lightgbm
import mlflow
import numpy as np
import pandas as pd
import pytest
import xgboost
from mlflow_store import log_skops
from signing_keys import keys_toml
from sklearn.ensemble import HistGradientBoostingClassifier
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.gates.gating import validate_model_inputs
from miret_governance.flavors.store.inputs import load_explainable_ensemble

pytest_plugins = ["mlflow_store"]
CATEGORIES = {"purpose": ["business", "car", "education"], "housing": ["own", "rent"]}


def credit_rows(n=300, seed=0):
    """Rows with two category columns (purpose 10% missing) and a numeric one (5%
    missing); the label depends on purpose and income."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "purpose": rng.choice(CATEGORIES["purpose"], n),
            "housing": rng.choice(CATEGORIES["housing"], n),
            "income": rng.normal(42000, 9000, n).round(),
        }
    )
    label = (frame.purpose.isin(["car", "education"]) & (frame.income > 38000)).astype(int)
    frame.loc[rng.random(n) < 0.1, "purpose"] = None
    frame.loc[rng.random(n) < 0.05, "income"] = np.nan
    for column, categories in CATEGORIES.items():
        frame[column] = pd.Categorical(frame[column], categories=categories)
    return frame, label.to_numpy()


@pytest.fixture
def rows(store, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", store)
    monkeypatch.chdir(tmp_path)
    frame, label = credit_rows()
    frame.assign(label=label).to_csv("data.csv", index=False)
    Path("lenient.toml").write_text(
        "[gates]\nmin_fidelity = 0.8\nmax_features = 10\n" + keys_toml()
    )
    return store, frame, label


def govern(*args):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def explained_and_gated(uri: str, name: str) -> str:
    """``govern explain`` then ``govern gate --data``; the rules text."""
    result = govern(
        "explain", "--model-uri", uri, "--data", "data.csv", "--target", "label",
        "--depth", "2", "--time-limit", "10",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    gate = govern(
        "gate", "--model-uri", uri, "--policy", "lenient.toml", "--data", "data.csv",
        "--target", "label", "--json",
    )  # fmt: skip
    assert gate.exit_code == 0, gate.output
    gates = {g["name"]: g for g in json.loads(gate.stdout)["gates"]}
    assert gates["recomputed_fidelity"]["passed"]
    folder = mlflow.artifacts.download_artifacts(f"models:/{name}-surrogate/1")
    by_column = pd.read_csv(f"{folder}/vite/level_frequency_by_column.csv", index_col="feature")
    assert set(by_column.index) == {"purpose", "housing", "income"}
    assert by_column.loc["purpose"].iloc[0] > 0  # the trees split on purpose at the root
    splits = pd.read_csv(f"{folder}/vite/category_splits.csv")
    assert "purpose" in set(splits.feature) and set(splits.feature) <= {"purpose", "housing"}
    ranges = pd.read_csv(f"{folder}/vite/threshold_ranges.csv")
    assert ranges[ranges.feature.str.startswith("purpose_")][["low", "high"]].isna().all().all()
    with open(f"{folder}/report.html", encoding="utf-8") as handle:
        report = handle.read()
    assert "purpose in {" in report
    # counts and the signed evidence speak in original columns; a one-hot group is one
    provenance = json.loads(Path(folder, "evidence.json").read_text())["provenance"]
    assert [(c["column"], c["kind"]) for c in provenance["encoding"]] == [
        ("purpose", "native_categorical"),
        ("housing", "native_categorical"),
        ("income", "numeric"),
    ]
    assert provenance["encoding"][0]["categories"] == CATEGORIES["purpose"]
    used = provenance["metrics"]["n_features_used"]
    assert (
        gates["max_features"]["value"] == used <= provenance["metrics"]["n_encoded_features_used"]
    )
    shown = re.findall(
        r'purpose (?:not )?in \{[^}]*\}</code> <span class="caption">\(row: (\w+)', report
    )
    assert shown and set(shown) <= {*CATEGORIES["purpose"], "missing"}  # the row's category
    return result.output.split("missing values")[0]


def test_lightgbm_booster_with_category_columns(rows):
    store, frame, label = rows
    params = {"objective": "binary", "max_depth": 2, "num_leaves": 4, "verbose": -1}
    params |= {"min_data_per_group": 5, "cat_smooth": 1, "seed": 0, "num_threads": 1}
    booster = lightgbm.train(params, lightgbm.Dataset(frame, label), num_boost_round=25)
    with mlflow.start_run(experiment_id=store):
        mlflow.lightgbm.log_model(
            booster, name="model", registered_model_name="credit-lgbcat", pip_requirements=[]
        )
    ensemble = load_explainable_ensemble("models:/credit-lgbcat/1")
    raw = pd.read_csv("data.csv").drop(columns="label")  # category strings, as a CSV has
    np.testing.assert_allclose(
        ensemble.predict_proba(ensemble.transform(raw))[:, 1], booster.predict(frame), atol=1e-12
    )
    rules = explained_and_gated("models:/credit-lgbcat/1", "credit-lgbcat")
    assert "purpose in {" in rules or "purpose not in {" in rules
    assert "purpose_" not in rules
    page = mlflow.MlflowClient().get_model_version("credit-lgbcat", "1").description
    assert "| Features used | " in page and "purpose_" not in page
    pd.read_csv("data.csv").head(22).to_csv("rows.csv", index=False)  # row 21: no purpose
    followed = govern(
        "explain-row", "--model-uri", "models:/credit-lgbcat/1", "--data", "rows.csv",
        "--policy", "lenient.toml", "--json",
    )  # fmt: skip
    assert followed.exit_code == 0, followed.output
    steps = [(s, p["row"]) for p in json.loads(followed.stdout)["rows"] for s in p["steps"]]
    purpose = [  # a split on purpose shows the row's own category, None when it has none
        (s["category"], raw.purpose[row])
        for s, row in steps
        if len(s["terms"]) == 1 and s["terms"][0][0].startswith("[purpose = ")
    ]
    assert purpose and all(c == (None if pd.isna(v) else v) for c, v in purpose)
    assert any(c is None for c, _ in purpose)  # row 21 reads "missing"


def test_hist_gradient_boosting_from_dtype_with_skops(rows):
    store, frame, label = rows
    model = HistGradientBoostingClassifier(
        categorical_features="from_dtype", max_iter=25, max_depth=2, random_state=0
    ).fit(frame, label)
    log_skops(model, store, "credit-hgbcat")
    ensemble = load_explainable_ensemble("models:/credit-hgbcat/1")
    raw = pd.read_csv("data.csv").drop(columns="label")
    np.testing.assert_allclose(
        ensemble.predict_proba(ensemble.transform(raw)), model.predict_proba(frame), atol=1e-12
    )
    rules = explained_and_gated("models:/credit-hgbcat/1", "credit-hgbcat")
    assert "purpose in {" in rules or "purpose not in {" in rules
    unseen = raw.head(3).assign(purpose=["boat", "car", "car"])
    unseen.to_csv("new.csv", index=False)
    report = validate_model_inputs("models:/credit-hgbcat/1", "new.csv")
    assert [f.column for f in report.failures] == ["purpose"]
    assert "categories not seen in training: boat" in report.failures[0].message


def test_xgboost_classifier_with_category_columns(rows):
    store, frame, label = rows
    model = xgboost.XGBClassifier(
        n_estimators=25, max_depth=2, enable_categorical=True, tree_method="hist",
        max_cat_to_onehot=1, n_jobs=1, random_state=0,
    ).fit(frame, label)  # fmt: skip
    with mlflow.start_run(experiment_id=store):
        mlflow.xgboost.log_model(
            model, name="model", registered_model_name="credit-xgbcat", pip_requirements=[]
        )
    ensemble = load_explainable_ensemble("models:/credit-xgbcat/1")
    raw = pd.read_csv("data.csv").drop(columns="label")
    np.testing.assert_allclose(
        ensemble.predict_proba(ensemble.transform(raw)), model.predict_proba(frame), atol=1e-6
    )
    rules = explained_and_gated("models:/credit-xgbcat/1", "credit-xgbcat")
    assert "purpose in {" in rules or "purpose not in {" in rules


def test_a_partial_of_an_untrusted_function_is_refused_unrun(tmp_path):
    """functools.partial is trusted for HistGradientBoosting's check_array only: a
    partial around any other function is refused before anything is rebuilt."""
    import functools
    import os

    import skops.io
    from sklearn.preprocessing import FunctionTransformer

    from miret_governance.flavors.errors import ExplainError
    from miret_governance.flavors.store.inputs import load_skops_file

    marker = tmp_path / "ran"
    evil = FunctionTransformer(func=functools.partial(os.system, f"touch {marker}"))
    skops.io.dump(evil, tmp_path / "evil.skops")
    with pytest.raises(ExplainError, match=r"not trusted for loading: \w+\.system"):
        load_skops_file(tmp_path / "evil.skops")
    assert not marker.exists()
