"""`govern promote`: the alias moves only when every gate passes; every outcome is tagged."""

import mlflow
import typer
from mlflow import MlflowClient
from mlflow_store import linked_versions
from typer.testing import CliRunner

from flavors.errors import GateError
from flavors.gating import promote_model_version
from governance.gates import load_policy, parse_policy

pytest_plugins = ["mlflow_store"]

PASSING = {"test_fidelity": 0.93, "n_features_used": 3.0}
FAILING = {"test_fidelity": 0.93, "n_features_used": 6.0}


def cli():
    from cli.gates import register

    app = typer.Typer()
    register(app)
    return app


def test_refusal_leaves_previous_alias(store, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    client = MlflowClient()
    v1 = linked_versions(store, PASSING)
    v2 = linked_versions(store, FAILING)
    assert (v1, v2) == ("models:/credit-rf/1", "models:/credit-rf/2")
    runner = CliRunner()

    result = runner.invoke(cli(), ["promote", "--model-uri", v1, "--alias", "champion"])
    assert result.exit_code == 0, result.output
    assert "promoted: @champion -> models:/credit-rf/1" in result.output
    assert client.get_model_version_by_alias("credit-rf", "champion").version == 1

    result = runner.invoke(cli(), ["promote", "--model-uri", v2, "--alias", "champion"])
    assert result.exit_code == 1, result.output
    assert "refused: @champion stays on version 1" in result.output
    assert "n_features_used = 6 does not meet <= 5" in result.output
    assert client.get_model_version_by_alias("credit-rf", "champion").version == 1

    tags1 = client.get_model_version("credit-rf", "1").tags
    tags2 = client.get_model_version("credit-rf", "2").tags
    assert tags1["governance.promotion.champion"] == "promoted"
    assert tags2["governance.promotion.champion"] == "refused"
    assert tags2["governance.gate.status"] == "failed"
    digest = load_policy(None).digest
    assert tags2["governance.promotion.champion.policy_digest"] == digest
    assert tags2["governance.promotion.champion.time"] == tags2["governance.gate.time"]
    gate_run = client.get_run(tags2["governance.promotion.champion.run_id"])
    assert gate_run.data.tags["governance.promotion.champion"] == "refused"
    assert gate_run.data.tags["governance.ensemble_uri"] == v2


def test_promotion_by_alias_uri_and_lenient_policy(store):
    linked_versions(store, FAILING)
    client = MlflowClient()
    client.set_registered_model_alias("credit-rf", "candidate", "1")
    lenient = parse_policy({"gates": {"max_features": 6}})
    outcome = promote_model_version("models:/credit-rf@candidate", "champion", lenient)
    assert outcome.promoted and outcome.alias_version == "1"
    assert outcome.gate.ensemble_uri == "models:/credit-rf/1"
    assert client.get_model_version_by_alias("credit-rf", "champion").version == 1


def test_refusal_without_previous_alias(store):
    linked_versions(store, FAILING)
    outcome = promote_model_version("models:/credit-rf/1", "champion", load_policy(None))
    assert not outcome.promoted and outcome.alias_version is None
    assert MlflowClient().get_registered_model("credit-rf").aliases == {}


def test_invalid_alias_records_nothing(store):
    linked_versions(store, PASSING)
    for alias in ("latest", "v3", "bad alias"):
        try:
            promote_model_version("models:/credit-rf/1", alias, load_policy(None))
        except GateError as error:
            assert f"alias {alias!r} is not valid" in str(error)
        else:
            raise AssertionError(f"{alias} accepted")
    assert "governance.gate.status" not in MlflowClient().get_model_version("credit-rf", "1").tags
    assert mlflow.search_runs(experiment_names=["governance-gates"]).empty
