"""A Pipeline(ColumnTransformer(OneHotEncoder, passthrough), forest) logged with skops in a
real store: loaded with the fixed trusted types, explained by ``govern explain`` in its
encoded space, and every artifact names the original columns and categories."""

import json
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import skops.io
from categorical_data import credit_frame
from mlflow_store import log_skops
from signing_keys import keys_toml
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.gates.gating import gate_model_version, validate_model_inputs
from miret_governance.flavors.store.inputs import SKOPS_TRUSTED_TYPES, load_explainable_ensemble
from miret_governance.flavors.store.registry import model_id_of
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.governance.miret.tree.tree import SurrogateTree
from miret_governance.governance.report.gate_markdown import gate_markdown
from miret_governance.governance.trust.policy import load_policy

pytest_plugins = ["mlflow_store"]
CATEGORICAL, NUMERIC = ["purpose", "housing"], ["income", "age", "duration"]


@pytest.fixture
def registered(store, tmp_path, monkeypatch):
    """The pipeline registered as ``credit-cat`` (skops, the product's trusted types) and
    its training rows in ``data.csv``."""
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", store)
    monkeypatch.chdir(tmp_path)
    frame, label = credit_frame()
    prep = ColumnTransformer(
        [
            ("cat", OneHotEncoder(handle_unknown="ignore"), CATEGORICAL),
            ("num", "passthrough", NUMERIC),
        ]
    )
    forest = RandomForestClassifier(n_estimators=10, max_depth=3, random_state=0)
    pipeline = Pipeline([("prep", prep), ("model", forest)]).fit(frame, label)
    log_skops(pipeline, store, "credit-cat")
    frame.assign(label=label).to_csv("data.csv", index=False)
    return pipeline, frame


def explain_cli(*args):
    return CliRunner().invoke(app, ["explain", *args], env={"COLUMNS": "200"})


def test_registered_pipeline_loads_with_the_trusted_types_and_agrees(registered):
    pipeline, frame = registered
    folder = mlflow.artifacts.download_artifacts("models:/credit-cat/1")
    untrusted = skops.io.get_untrusted_types(file=f"{folder}/model.skops")
    assert set(untrusted) <= set(SKOPS_TRUSTED_TYPES)  # encoders are skops' own defaults
    ensemble = load_explainable_ensemble("models:/credit-cat/1")
    assert ensemble.feature_names[:2] == ("cat__purpose_business", "cat__purpose_car")
    assert (ensemble.predict(ensemble.transform(frame)) == pipeline.predict(frame)).all()


def test_govern_explain_speaks_in_original_columns(registered):
    result = explain_cli(
        "--model-uri", "models:/credit-cat/1", "--data", "data.csv", "--target", "label",
        "--depth", "2", "--time-limit", "20",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    folder = mlflow.artifacts.download_artifacts("models:/credit-cat-surrogate/1")
    income_range = (registered[1].income.min(), registered[1].income.max())
    with open(f"{folder}/report.html", encoding="utf-8") as handle:
        report = handle.read()
    with open(f"{folder}/figures/surrogate_tree.svg", encoding="utf-8") as handle:
        tree_figure = handle.read()
    rules = result.output.split("missing values")[0]
    assert "purpose in {car}" in rules or "purpose not in {car}" in rules
    assert "cat__" not in rules and "num__" not in rules
    assert "cat__" not in tree_figure and "purpose" in tree_figure
    assert "purpose in {car}" in report or "purpose not in {car}" in report
    assert "VITE: level frequency of each original column" in report
    policy_path = Path("lenient.toml")
    gates = "[gates]\nmin_fidelity = 0.8\nmax_features = 10\nmax_columns = 5\n"
    policy_path.write_text(gates + keys_toml())
    policy = load_policy(policy_path)
    gated = gate_model_version("models:/credit-cat/1", policy, data="data.csv", target="label")
    assert gated.evaluation.all_passed, gate_markdown(gated.evaluation)
    # max_columns counts the original columns of the encoded features the tree uses
    results = {r.name: r for r in gated.evaluation.results}
    used = json.loads(Path(folder, "surrogate.json").read_text())
    tree = SurrogateTree.from_dict(used["tree"])
    names = [tree.feature_names[j] for j in tree.used_features()]
    originals = {
        n.split("__", 1)[1].split("_", 1)[0] if n.startswith("cat__") else n for n in names
    }
    # max_features counts original columns too: a one-hot group is one column
    assert results["max_features"].value == results["max_columns"].value == len(originals)
    assert len(originals) <= len(names)
    evidence = json.loads(Path(folder, "evidence.json").read_text())["provenance"]
    assert evidence["metrics"]["n_encoded_features_used"] == len(names)
    assert evidence["encoding"][0] == {
        "column": "purpose",
        "kind": "onehot",
        "encoded": [f"cat__purpose_{c}" for c in ("business", "car", "education", "furniture")],
        "categories": ["business", "car", "education", "furniture"],
    }
    assert [c["column"] for c in evidence["encoding"]] == CATEGORICAL + NUMERIC
    version = mlflow.MlflowClient().get_model_version("credit-cat-surrogate", "1")
    description = mlflow.get_logged_model(model_id_of(version)).tags["mlflow.note.content"]
    shown = (
        f"**Features used**: {len(originals)} of 5 input columns ({len(names)} of 10 encoded "
        "columns"
    )
    assert shown in description
    page = mlflow.MlflowClient().get_model_version("credit-cat", "1").description
    assert f"| Features used | {len(originals)}: " in page and "cat__" not in page
    disagreements = pd.read_csv(f"{folder}/disagreements.csv")
    assert list(disagreements.columns[5:]) == CATEGORICAL + NUMERIC
    assert set(disagreements.purpose) <= {"business", "car", "education", "furniture"}
    with open(f"{folder}/model_card.md", encoding="utf-8") as handle:
        card = handle.read()
    assert "cat__" not in card and "num__" not in card
    (recomputed,) = [r for r in gated.evaluation.results if r.name == "recomputed_fidelity"]
    assert recomputed.passed and recomputed.threshold == "reproduced exactly"
    assert promote_model_version("models:/credit-cat/1", "champion", policy).promoted
    # govern validate: categories against training's, numeric columns in raw units
    assert validate_model_inputs("models:/credit-cat/1", "data.csv", target="label").success
    rows = registered[1].head(3).assign(income=[1e7, 5e4, 5e4])
    rows.loc[2, "housing"] = "castle"
    rows.to_csv("new.csv", index=False)
    report = validate_model_inputs("models:/credit-cat/1", "new.csv")
    assert [f.column for f in report.failures] == ["housing", "income"]
    assert "categories not seen in training: castle" in report.failures[0].message
    assert report.results["meta"]["training_range"]["income"] == list(income_range)
    by_column = pd.read_csv(f"{folder}/vite/level_frequency_by_column.csv", index_col="feature")
    assert list(by_column.index) == CATEGORICAL + NUMERIC
    per_encoded = pd.read_csv(f"{folder}/vite/level_frequency.csv", index_col="feature")
    assert len(per_encoded) == 4 + 3 + 3  # the per-encoded-column view is kept


def test_govern_explain_names_an_unseen_category(registered):
    _, frame = registered
    frame.assign(label=pd.read_csv("data.csv")["label"], purpose="boat").to_csv(
        "boats.csv", index=False
    )
    result = explain_cli(
        "--model-uri", "models:/credit-cat/1", "--data", "boats.csv", "--target", "label",
        "--depth", "2", "--time-limit", "20",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "column 'purpose' has categories not seen in training: boat" in result.output
