"""What an explain run says about itself (flavors.context), in a real SQLite store: test
metrics filed under the test rows' own dataset, descriptions, names, no local folders,
and ``govern explain --search`` next to the plain explanation with the same class names."""

import json
import re
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow_store import register_rf
from signing_keys import keys_toml
from sklearn.model_selection import train_test_split
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.explain.context import (
    DESCRIPTION_TAG,
    explain_experiment,
    logged_model_name,
    portable_uri,
)
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.store.data_files import dataset
from miret_governance.flavors.store.registry import model_id_of
from miret_governance.governance.measures.metrics import fidelity_with_interval
from miret_governance.governance.report.formatting import format_number
from miret_governance.governance.trust.policy import load_policy

FEATURES = ["mean radius", "mean texture", "mean perimeter", "mean smoothness", "worst area"]
EXPERIMENT = "wisconsin-demo"
GRID = '{"alpha": [0.2, 0.8], "proximity_threshold": [0.9, 1.0]}'


@pytest.fixture(scope="module")
def case(tmp_path_factory, breast_cancer):
    """An RF registered from its own experiment, explained once with class names (the
    library call), then with ``govern explain --search`` and no ``--class-names``; a 60 s
    cap far above the about 1 s of work its budgets need, so it never decides the tree."""
    root = tmp_path_factory.mktemp("context")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    X, y = breast_cancer
    frame = X[FEATURES].iloc[:200].assign(label=y.iloc[:200].to_numpy())
    frame.to_csv(root / "data.csv", index=False)
    with pytest.MonkeyPatch.context() as mp:
        for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
            mp.setenv(name, uri)
        mp.chdir(root)
        experiment = MlflowClient().create_experiment(
            EXPERIMENT, artifact_location=str(root / "mlruns")
        )
        register_rf(frame, FEATURES, "ctx-rf", n_estimators=20, experiment_id=experiment)
        plain = explain_model_version(
            "models:/ctx-rf/1",
            root / "data.csv",
            target="label",
            class_names=["malignant", "benign"],
            time_limit=60,
            min_test_rows=1,
        )
        searched = CliRunner().invoke(
            app,
            ["explain", "--model-uri", "models:/ctx-rf/1", "--data", str(root / "data.csv")]
            + ["--target", "label", "--min-test-rows", "1", "--time-limit", "60"]
            + ["--search", "--search-grid", GRID, "--cv", "2", "--search-time-limit", "1"],
            env={"COLUMNS": "200"},
        )
        mlflow.set_tracking_uri(None)
        mlflow.set_registry_uri(None)
    return {"root": root, "uri": uri, "frame": frame, "plain": plain, "cli": searched}


@pytest.fixture
def store(case, monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
        monkeypatch.setenv(name, case["uri"])
    return case


def _runs(client):
    experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
    return client.search_runs([experiment], filter_string="tags.`mlflow.runName` LIKE 'explain%'")


def test_test_metrics_are_filed_under_the_holdouts_own_dataset(store):
    client, result = MlflowClient(), store["plain"]
    run = client.get_run(result.run_id)
    inputs = {i.tags[0].value: i.dataset for i in run.inputs.dataset_inputs}
    training, testing = inputs["training"], inputs["testing"]
    assert (training.name, testing.name) == ("data", "data-holdout")
    assert training.digest == run.data.params["data_digest"]
    assert json.loads(testing.profile)["num_rows"] == 40 == int(run.data.params["n_test"])
    # the 40 rows the stratified 20% split with seed 0 holds out, with their labels
    frame = store["frame"]
    _, test = train_test_split(
        np.arange(200), test_size=0.2, random_state=0, stratify=frame["label"]
    )
    rows = frame.iloc[np.sort(test)]
    assert testing.digest == dataset(rows, "data.csv", "label").digest
    filed = {
        m.key: (m.dataset_name, m.dataset_digest)
        for m in client.get_logged_model(result.model_id).metrics
    }
    on_test = {"test_fidelity", "test_fidelity_ci_low", "n_test_rows"}
    on_test |= {"baseline_cart_test_fidelity", "test_accuracy_surrogate"}
    for key in on_test:
        assert filed[key] == ("data-holdout", testing.digest)
    for key in ("train_fidelity", "cv_fidelity", "n_features_used", "solver.gap"):
        assert filed[key] == ("data", training.digest)


def test_runs_and_logged_models_describe_themselves(store):
    client, result = MlflowClient(), store["plain"]
    model = client.get_logged_model(result.model_id)
    assert model.name == "ctx-rf-v1-miret"
    fidelity = fidelity_with_interval(result.metrics)
    assert re.fullmatch(r"\d+\.\d% \(95% CI \d+\.\d-\d+\.\d%, n=40\)", fidelity)
    for text in (
        model.tags[DESCRIPTION_TAG],
        client.get_run(result.run_id).data.tags[DESCRIPTION_TAG],
    ):
        assert "**ctx\\-rf** version 1 (`models:/ctx-rf/1`" in text
        assert f"**Test fidelity** {fidelity} to the ensemble" in text
        assert "`data.csv` (digest `" in text and "160 rows fitted, 40 held out" in text
        assert "**classes**: malignant, benign" in text
        assert "**Hyperparameters**: depth 2, alpha 0.5" in text
    run_text = client.get_run(result.run_id).data.tags[DESCRIPTION_TAG]
    assert "logged as the model `ctx-rf-v1-miret`" in run_text
    assert "[ctx\\-rf\\-surrogate v1](#/models/ctx-rf-surrogate/versions/1)" in run_text


def test_report_shows_the_interval_and_the_cross_validated_fidelity(store):
    metrics = store["plain"].metrics
    local = Path(mlflow.artifacts.download_artifacts("models:/ctx-rf-surrogate/1", dst_path="dl"))
    html = (local / "report.html").read_text()
    assert f"fidelity on test rows {fidelity_with_interval(metrics)}; plain tree (CART) " in html
    card = (local / "model_card.md").read_text()
    assert f"**Test fidelity** to the ensemble: {fidelity_with_interval(metrics)}." in card
    # the returned tree's held-out fidelity beside CART's, never "–"
    row = (
        f"| Cross-validated fidelity (decides which tree is returned) | "
        f"{format_number(metrics['cv_fidelity'])} | "
        f"{format_number(metrics['baseline_cart_cv_fidelity'])} |"
    )
    assert row in card


def test_nothing_logged_names_a_local_folder(store):
    client, root = MlflowClient(), str(store["root"])
    runs = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])
    assert len(runs) == 1 + 1 + 1 + 4  # training, plain, search and its 4 candidates
    for run in runs:
        values = {**run.data.params, **run.data.tags}
        assert [k for k, v in values.items() if root in v] == []
        assert all(root not in i.dataset.source for i in run.inputs.dataset_inputs)
    explained = [r for r in runs if r.info.run_name.startswith("explain")]
    assert {r.data.params["data"] for r in explained} == {"data.csv"}
    ours = [r for r in runs if r.info.run_name.startswith(("explain", "candidate"))]
    assert len(ours) == 6 and all("/" not in r.data.tags["mlflow.source.name"] for r in ours)
    for version in ("1", "2"):
        model_id = model_id_of(client.get_model_version("ctx-rf-surrogate", version))
        model = client.get_logged_model(model_id)
        assert [k for k, v in {**model.params, **model.tags}.items() if root in v] == []
        local = Path(mlflow.artifacts.download_artifacts(model.model_uri, dst_path=version))
        for name in ("evidence.json", "report.html", "model_card.md", "surrogate.json"):
            assert root not in (local / name).read_text(), name
        provenance = json.loads((local / "evidence.json").read_text())["provenance"]
        assert provenance["request"]["data"] == "data.csv"


def test_search_lands_beside_the_plain_explanation_and_says_what_it_chose(store):
    cli = store["cli"]
    assert cli.exit_code == 0, cli.output
    client = MlflowClient()
    ensemble = client.get_model_version("ctx-rf", "1")
    searched = client.get_run(client.get_model_version("ctx-rf-surrogate", "2").run_id)
    plain = client.get_run(store["plain"].run_id)
    training = client.get_run(ensemble.run_id)
    assert searched.info.experiment_id == plain.info.experiment_id
    assert searched.info.experiment_id == training.info.experiment_id
    children = client.search_runs(
        [searched.info.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{searched.info.run_id}'",
    )
    assert len(children) == 4
    assert all("of the hyperparameter search" in c.data.tags[DESCRIPTION_TAG] for c in children)
    params = searched.data.params
    chosen = (
        f"alpha {format_number(float(params['alpha']))}, m (proximity_threshold) "
        f"{format_number(float(params['proximity_threshold']))}, depth 2"
    )
    assert f"hyperparameters chosen by the search: {chosen}\n" in cli.output
    assert (
        f"**Hyperparameters**: {chosen}, chosen by 2-fold cross-validation over 4"
        in (searched.data.tags[DESCRIPTION_TAG])
    )
    # the class names of the plain explanation, which the ensemble version linked
    assert params["class_names"] == "malignant,benign"
    rules = cli.output.split("Rules (raw input units)\n", 1)[1]
    assert re.search(r"then (malignant|benign) \(", rules) and " then 0 " not in rules
    surrogate = client.get_model_version("ctx-rf-surrogate", "2")
    metrics = {m.key: m.value for m in client.get_logged_model(model_id_of(surrogate)).metrics}
    # what a reviewer decides on first, the solver and search under "Technical details"
    headline, technical = cli.output.split("Technical details\n", 1)
    assert (
        f"fidelity on test rows: {fidelity_with_interval(metrics)}; plain tree (CART) "
        in (headline.split("Rules (raw input units)")[0])
    )
    assert "solver" not in headline and "how the tree was found: " in technical
    assert "hyperparameters chosen by the search" in technical


def test_gate_report_names_the_policy_file_not_its_folder(store):
    folder = store["root"] / "policies"
    folder.mkdir(exist_ok=True)
    path = folder / "strict.toml"
    path.write_text("[gates]\nmin_fidelity = 0.5\n" + keys_toml())
    outcome = gate_model_version("models:/ctx-rf/1", load_policy(path))
    run = MlflowClient().get_run(outcome.run_id)
    assert run.data.tags["governance.policy_source"] == "strict.toml"
    for name in ("gate_report.md", "gate_report.json"):
        text = Path(
            mlflow.artifacts.download_artifacts(f"runs:/{outcome.run_id}/{name}")
        ).read_text()
        assert str(store["root"]) not in text and "strict.toml" in text


def test_explain_experiment_prefers_the_callers_choice(store, monkeypatch):
    client = MlflowClient()
    version = client.get_model_version("ctx-rf", "1")
    own = client.get_run(version.run_id).info.experiment_id
    assert explain_experiment(client, version) == own
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "elsewhere")
    chosen = explain_experiment(client, version)
    assert chosen != own and client.get_experiment(chosen).name == "elsewhere"


def test_names_without_folders_or_credentials():
    assert logged_model_name("credit.rf", 3) == "credit-rf-v3-miret"
    assert portable_uri("sqlite:////home/ana/work/mlflow.db") == "local sqlite store mlflow.db"
    assert portable_uri("file:///home/ana/mlruns") == "local file store mlruns"
    assert portable_uri("/home/ana/mlruns") == "local file store mlruns"
    assert portable_uri("https://ana:secret@mlflow.bank.example:8443/x") == (
        "https://mlflow.bank.example:8443/x"
    )


def test_the_alpha_and_m_the_fit_chose_are_in_the_evidence_the_run_and_the_report(store):
    """No alpha or m given: the fit chooses them on held-out folds and says which,
    everywhere."""
    plain = store["plain"]
    local = Path(mlflow.artifacts.download_artifacts("models:/ctx-rf-surrogate/1", dst_path="g"))
    evidence = json.loads((local / "evidence.json").read_text())["provenance"]
    grid = evidence["solve"]["grid"]
    assert grid["alphas"] == [0.2, 0.5] and grid["depths"] == [plain.solve["grid"]["depth"]]
    assert grid["proximity_thresholds"] == [0.9, 1.0]
    settings = {
        (row["alpha"], row["proximity_threshold"])
        for row in grid["rows"]
        if row["candidate"] == "miret"
    }
    assert settings == {(0.2, 0.9), (0.5, 0.9), (0.5, 1.0)}
    run = MlflowClient().get_run(plain.run_id)
    for name in ("alpha", "proximity_threshold"):
        assert evidence["parameters"][name] == plain.parameters[name] == grid[name]
        assert evidence["request"]["fit"][name] is None  # what was asked
        assert run.data.params[name] == str(grid[name])
    for label, name in (("alpha", "alpha"), ("m (proximity_threshold)", "proximity_threshold")):
        chosen = f"{label} {format_number(grid[name])} (chosen on held-out folds)"
        assert chosen in run.data.tags[DESCRIPTION_TAG]
    assert "The fit chose alpha" in (local / "report.html").read_text()
