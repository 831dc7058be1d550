"""``govern approve`` and ``govern audit`` through the command line: exit codes 0/1/2, the
audit's JSON schema, and approvals a policy requires before ``promote``."""

import json

import pytest
import typer
from gate_store import explained
from mlflow import MlflowClient
from signing_keys import key_pair, keys_toml
from typer.testing import CliRunner

from miret_governance.cli import audit, gates, show

pytest_plugins = ["mlflow_store"]

SCHEMA = {
    "command",
    "schema_version",
    "model_name",
    "policy",
    "policy_digest",
    "clean",
    "exit_code",
    "versions_checked",
    "decisions_checked",
    "findings",
    "cleared",
    "other_policies",
}


def app():
    app = typer.Typer()
    gates.register(app)
    audit.register(app)
    show.register(app)
    return app


def run(*args):
    return CliRunner().invoke(app(), [str(a) for a in args])


def test_audit_help_states_its_schema():
    helped = " ".join(run("audit", "--help").output.split())
    assert '--json prints {"command": "audit", "schema_version": 1, "model_name"' in helped
    assert (
        '"kind": "alias", "policy", "superseded", "evidence", "decision_record" or "chain"'
        in helped
    )


def test_audit_exit_codes_and_json(store, tmp_path):
    policy = tmp_path / "p.toml"
    policy.write_text("[gates]\nmin_fidelity = 0.9\n" + keys_toml())
    uri = explained(store, tmp_path)
    result = run("promote", "--model-uri", uri, "--alias", "champion", "--policy", policy)
    assert result.exit_code == 0, result.output

    clean = run("audit", "--model-name", "credit-rf", "--policy", policy, "--json")
    assert clean.exit_code == 0, clean.output
    document = json.loads(clean.stdout)
    assert set(document) == SCHEMA
    assert (document["clean"], document["findings"], document["exit_code"]) == (True, [], 0)
    assert (document["versions_checked"], document["decisions_checked"]) == (1, 1)

    MlflowClient().set_registered_model_alias("credit-rf", "prod", "1")
    found = run("audit", "--model-name", "credit-rf", "--policy", policy, "--json")
    assert found.exit_code == 1
    document = json.loads(found.stdout)
    assert document["exit_code"] == 1 and not document["clean"]
    assert [(f["kind"], f["version"], f["alias"], f["run_id"]) for f in document["findings"]] == [
        ("alias", uri, "prod", None)
    ]
    text = run("audit", "--model-name", "credit-rf", "--policy", policy)
    assert text.exit_code == 1
    assert f"FINDING alias {uri} @prod: @prod is on {uri} without" in text.output
    assert "audit of credit-rf under policy p v" in text.output

    missing = run("audit", "--model-name", "nope", "--policy", policy, "--json")
    assert missing.exit_code == 2 and missing.stdout == ""
    assert "no registered model 'nope'" in missing.output


def test_approvals_before_promotion(store, tmp_path):
    policy = tmp_path / "four-eyes.toml"
    policy.write_text(
        "[gates]\nmin_fidelity = 0.9\n"
        + keys_toml(approvers=("alice",))
        + "\n[approvals]\nchampion = 1\n"
    )
    uri = explained(store, tmp_path)
    refused = run("promote", "--model-uri", uri, "--alias", "champion", "--policy", policy)
    assert refused.exit_code == 1
    assert "refused: @champion stays on no version: every gate passed; @champion needs 1" in (
        " ".join(refused.output.split())
    )
    bad = run(
        "approve", "--model-uri", uri, "--alias", "champion", "--decision", "maybe",
        "--comment", "x", "--policy", policy, "--signing-key", key_pair("alice")[0],
    )  # fmt: skip
    assert bad.exit_code == 2 and "--decision 'maybe': use approve or reject" in bad.output
    approved = run(
        "approve", "--model-uri", uri, "--alias", "champion", "--decision", "approve",
        "--comment", "rules reviewed", "--policy", policy,
        "--signing-key", key_pair("alice")[0],
    )  # fmt: skip
    assert approved.exit_code == 0, approved.output
    assert f"approve of @champion for {uri} recorded, signed by key alice" in " ".join(
        approved.output.split()
    )
    shown = run("show", "--model-uri", uri, "--policy", policy, "--json")
    assert shown.exit_code == 0, shown.output
    [listed] = json.loads(shown.stdout)["approvals"]
    assert (listed["alias"], listed["decision"], listed["comment"]) == (
        "champion",
        "approve",
        "rules reviewed",
    )
    assert listed["signed_by"]["name"] == "alice" and listed["problem"] is None
    assert listed["current"] and listed["surrogate_uri"] == "models:/credit-rf-surrogate/1"
    text = " ".join(run("show", "--model-uri", uri, "--policy", policy).output.split())
    assert "approval @champion: approve by key alice, user " in text
    promoted = run("promote", "--model-uri", uri, "--alias", "champion", "--policy", policy)
    assert promoted.exit_code == 0, promoted.output
    assert MlflowClient().get_model_version_by_alias("credit-rf", "champion").version == 1
    assert run("audit", "--model-name", "credit-rf", "--policy", policy).exit_code == 0


def test_show_presents_only_what_the_signed_evidence_says(store, tmp_path):
    """QA: show printed metrics set by hand on the surrogate's logged model under the
    "signed by" line, and followed a hand-set link from another model to an honest
    surrogate, presenting it as that model's explanation."""
    from miret_governance.flavors.store.registry import model_id_of

    policy = tmp_path / "p.toml"
    policy.write_text("[gates]\nmin_fidelity = 0.9\n" + keys_toml())
    uri = explained(store, tmp_path)
    client = MlflowClient()
    surrogate = client.get_model_version("credit-rf-surrogate", "1")
    client.log_metric(surrogate.run_id, "test_fidelity", 1.0, model_id=model_id_of(surrogate))
    client.set_model_version_tag("credit-rf-surrogate", "1", "governance.validation", "failed")
    shown = json.loads(run("show", "--model-uri", uri, "--policy", policy, "--json").stdout)
    assert shown["metrics"]["test_fidelity"] == 0.95  # gate_store.GOOD, as signed
    assert shown["validation"] == "passed"
    text = " ".join(run("show", "--model-uri", uri, "--policy", policy).output.split())
    assert "(its tags, which are not signed: govern audit checks them" in text

    other = explained(store, tmp_path, name="other-rf")
    client.set_model_version_tag(
        "other-rf", "1", "governance.surrogate", "models:/credit-rf-surrogate/1"
    )
    refused = run("show", "--model-uri", other, "--policy", policy)
    assert refused.exit_code == 2
    assert "models:/credit-rf-surrogate/1 explains models:/credit-rf/1 (model id " in " ".join(
        refused.output.split()
    )
    assert f"not {other} (model id " in " ".join(refused.output.split())
    from miret_governance.flavors.errors import GateError
    from miret_governance.flavors.read.applicant import explain_rows

    with pytest.raises(GateError, match=f"according to its signed evidence, not {other}"):
        explain_rows(other, tmp_path / "unread.csv", policy)
    # QA round 2: the ensemble's files replaced after the explanation
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    (swapped / "model.skops").write_bytes(b"another forest")
    client.log_model_artifacts(model_id_of(client.get_model_version("credit-rf", "1")), swapped)
    changed = run("show", "--model-uri", uri, "--policy", policy)
    assert changed.exit_code == 2
    assert f"the model files of {uri} changed after it was explained" in " ".join(
        changed.output.split()
    )
