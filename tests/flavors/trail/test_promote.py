"""`govern promote`: the alias moves only when every gate passes; every decision is
recorded, and a what-if gate never shows as the status of the version holding the alias."""

import os

import mlflow
import typer
from gate_store import GOOD, explained
from mlflow import MlflowClient
from signing_keys import trusting
from typer.testing import CliRunner

from miret_governance.flavors.errors import GateError
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.governance.trust.policy import load_policy, parse_policy

pytest_plugins = ["mlflow_store"]


def session_policy():
    """The policy ``govern`` reads without --policy (``GOVERN_POLICY``: the session's,
    the built-in gates trusting the CI key)."""
    return load_policy(os.environ["GOVERN_POLICY"])


FAILING = dict(GOOD, test_fidelity=0.93, n_features_used=2)


def cli():
    from miret_governance.cli.gates import register

    app = typer.Typer()
    register(app)
    return app


def test_refusal_leaves_previous_alias(store, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    client = MlflowClient()
    v1 = explained(store, tmp_path)
    v2 = explained(store, tmp_path, success=False)
    assert (v1, v2) == ("models:/credit-rf/1", "models:/credit-rf/2")
    runner = CliRunner()

    result = runner.invoke(cli(), ["promote", "--model-uri", v1, "--alias", "champion"])
    assert result.exit_code == 0, result.output
    assert "promoted: @champion -> models:/credit-rf/1" in result.output
    assert client.get_model_version_by_alias("credit-rf", "champion").version == 1

    result = runner.invoke(cli(), ["promote", "--model-uri", v2, "--alias", "champion"])
    assert result.exit_code == 1, result.output
    assert "refused: @champion stays on version 1" in result.output
    assert "no validation result recorded" not in result.output
    assert client.get_model_version_by_alias("credit-rf", "champion").version == 1

    tags1 = client.get_model_version("credit-rf", "1").tags
    tags2 = client.get_model_version("credit-rf", "2").tags
    assert tags1["governance.promotion.champion"] == "promoted"
    assert tags2["governance.promotion.champion"] == "refused"
    assert tags2["governance.last_gate"] == "FAIL"
    assert tags2["governance.promotion.champion.run"] == tags2["governance.last_gate.run"]
    gate_run = client.get_run(tags2["governance.promotion.champion.run"])
    assert gate_run.data.tags["governance.promotion.champion"] == "refused"
    assert gate_run.data.tags["governance.ensemble_uri"] == v2
    assert gate_run.data.tags["governance.policy"] == f"default v{session_policy().digest[:8]}"
    text = client.get_model_version("credit-rf", "2").description
    assert "| Promotion `@champion` | **refused** under policy default v" in text
    assert "(gate FAIL), " in text and "(alias not set here) |" in text
    assert "| Gate for" not in text  # the refusal's gate is that row, not a second verdict


def test_what_if_gate_never_shows_as_the_alias_status(store, tmp_path):
    """Lenient promotion, then a strict what-if gate: the version holding @champion keeps
    `promoted` as its champion status; the failed evaluation is only the last gate."""
    client = MlflowClient()
    uri = explained(store, tmp_path, metrics=FAILING)
    lenient = parse_policy(trusting({"name": "lenient", "gates": {"min_fidelity": 0.9}}))
    strict = parse_policy(trusting({"name": "strict", "gates": {"min_fidelity": 0.99}}))
    promoted = promote_model_version(uri, "champion", lenient)
    assert promoted.promoted
    what_if = gate_model_version(uri, strict)
    assert not what_if.evaluation.all_passed
    refused_again = promote_model_version(uri, "champion", strict)
    assert not refused_again.promoted and refused_again.alias_version == "1"

    version = client.get_model_version("credit-rf", "1")
    assert version.aliases == ["champion"]
    assert version.tags == {
        "governance.surrogate": "models:/credit-rf-surrogate/1",
        "governance.last_gate": "FAIL",
        "governance.last_gate.run": refused_again.gate.run_id,
        "governance.promotion.champion": "promoted",
        "governance.promotion.champion.run": promoted.gate.run_id,
    }
    text = version.description
    assert (
        f"| Promotion `@champion` | **promoted** under policy {lenient.label} (gate PASS), " in text
        and "(holds the alias) |" in text
    )  # the failed re-evaluation is named by its alias, never the version's verdict
    assert f"| Gate for `@champion` | **FAIL** under policy {strict.label}, " in text
    runs = mlflow.search_runs(experiment_names=["governance-gates"], order_by=["start_time"])
    assert list(runs["tags.result"]) == ["PASS", "FAIL", "FAIL"]
    assert list(runs["tags.mlflow.runName"]) == [
        f"PASS {lenient.label} · credit-rf v1",
        f"FAIL {strict.label} · credit-rf v1",
        f"FAIL {strict.label} · credit-rf v1",
    ]
    # a refused gate for another alias is that alias's row, never the champion's verdict
    promote_model_version(uri, "prod", strict)
    rows = client.get_model_version("credit-rf", "1").description.split("\n\n")[1]
    assert [row.split(" | ")[0] for row in rows.splitlines()[6:]] == [
        "| Promotion `@champion`",
        "| Promotion `@prod`",
    ]
    assert f"| Promotion `@prod` | **refused** under policy {strict.label} (gate FAIL), " in rows


def test_promotion_by_alias_uri_and_lenient_policy(store, tmp_path):
    explained(store, tmp_path, metrics=FAILING)
    client = MlflowClient()
    client.set_registered_model_alias("credit-rf", "candidate", "1")
    lenient = parse_policy(trusting({"gates": {"min_fidelity": 0.9}}))
    outcome = promote_model_version("models:/credit-rf@candidate", "champion", lenient)
    assert outcome.promoted and outcome.alias_version == "1"
    assert outcome.gate.ensemble_uri == "models:/credit-rf/1"
    assert client.get_model_version_by_alias("credit-rf", "champion").version == 1


def test_refusal_without_previous_alias(store, tmp_path):
    explained(store, tmp_path, metrics=dict(GOOD, test_fidelity=0.5))
    outcome = promote_model_version("models:/credit-rf/1", "champion", session_policy())
    assert not outcome.promoted and outcome.alias_version is None
    assert MlflowClient().get_registered_model("credit-rf").aliases == {}


def test_invalid_alias_records_nothing(store, tmp_path):
    explained(store, tmp_path)
    for alias in ("latest", "v3", "bad alias"):
        try:
            promote_model_version("models:/credit-rf/1", alias, session_policy())
        except GateError as error:
            assert f"alias {alias!r} is not valid" in str(error)
        else:
            raise AssertionError(f"{alias} accepted")
    assert "governance.last_gate" not in MlflowClient().get_model_version("credit-rf", "1").tags
    assert mlflow.search_runs(experiment_names=["governance-gates"]).empty
