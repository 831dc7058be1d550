"""``govern clear`` through the command line: what it refuses (exit 2, nothing recorded),
and that a clearance an insider signs with their own key clears nothing under the
organisation's policy."""

import tempfile
from pathlib import Path

import pytest
from gate_store import explained
from mlflow import MlflowClient
from signing_keys import key_pair, keys_toml
from typer.testing import CliRunner

from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.trail import decisions
from miret_governance.flavors.trail.audit import audit_model
from miret_governance.flavors.trail.decisions import BlockedError
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.signers import SigningKey

pytest_plugins = ["mlflow_store"]
URI = "models:/credit-rf/1"


def govern(*args):
    from miret_governance.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args])


def said(result) -> str:
    return " ".join(result.output.split())


@pytest.fixture
def policy(tmp_path):
    """The organisation's policy: the CI key explains and decides, alice approves."""
    path = tmp_path / "policy.toml"
    path.write_text(
        'name = "trail"\n[gates]\nmin_fidelity = 0.9\n' + keys_toml(approvers=("alice",))
    )
    return load_policy(path)


@pytest.fixture
def blocked(store, tmp_path, policy):
    """credit-rf v1 gated (PASS), then its gate record overwritten with ``{}`` by an
    insider through the client: every decision on v1 is refused. The gate run's id."""
    client = MlflowClient()
    assert explained(store, tmp_path) == URI
    run = gate_model_version(URI, policy).run_id
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    (folder / decisions.RECORD_FILE).write_text("{}")
    client.log_artifacts(run, str(folder), decisions.RECORD_FOLDER)
    with pytest.raises(BlockedError, match=f"run {run} was replaced after it was written"):
        gate_model_version(URI, policy)
    return run


def clearances() -> list:
    client = MlflowClient()
    experiment = client.get_experiment_by_name(decisions.CLEARANCE_EXPERIMENT)
    return [] if experiment is None else client.search_runs([experiment.experiment_id])


def test_clear_needs_a_reason(blocked):
    result = govern("clear", "--model-uri", URI, "--policy", "policy.toml")
    assert result.exit_code == 2 and "Missing option '--reason'" in said(result)
    result = govern("clear", "--model-uri", URI, "--reason", "  ", "--policy", "policy.toml")
    assert result.exit_code == 2
    needs = "error: a clearance needs a --reason saying why the records may be set aside"
    assert needs in said(result)
    assert clearances() == []


def test_clear_refuses_when_nothing_blocks(store, tmp_path, policy):
    explained(store, tmp_path)
    gate_model_version(URI, policy)
    result = govern("clear", "--model-uri", URI, "--reason", "why", "--policy", "policy.toml")
    assert result.exit_code == 2, result.output
    assert f"error: no record blocks decisions on {URI}; nothing was recorded" in said(result)
    assert clearances() == []


def test_clear_needs_a_key_the_policy_trusts_for_decide(blocked, policy, monkeypatch):
    alice = key_pair("alice")[0]
    result = govern(
        "clear", "--model-uri", URI, "--reason", "why", "--policy", "policy.toml",
        "--signing-key", alice,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert (
        "error: the clearance is signed by key 'alice', which the policy trusts to sign "
        "approve, not decide" in said(result)
    )
    mallory = SigningKey.load(key_pair("mallory")[0])
    result = govern(
        "clear", "--model-uri", URI, "--reason", "why", "--policy", "policy.toml",
        "--signing-key", key_pair("mallory")[0],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert (
        f"error: the clearance is signed by key {mallory.fingerprint[:16]}..., which the "
        "policy does not trust for decide (trusted for decide: test-ci)" in said(result)
    )
    monkeypatch.delenv("GOVERN_SIGNING_KEY")
    result = govern("clear", "--model-uri", URI, "--reason", "why", "--policy", "policy.toml")
    assert result.exit_code == 2, result.output
    assert (
        "error: clear records a signed decision and needs a signing key trusted for decide"
        in said(result)
    )
    assert clearances() == []
    with pytest.raises(BlockedError):
        gate_model_version(URI, policy)


def test_an_insiders_own_clearance_clears_nothing(blocked, policy, tmp_path):
    """The insider writes a policy trusting their own key for decide and clears with it:
    the clearance is recorded (under their policy) but, signed by a key the
    organisation's policy does not trust, it clears nothing and does not block."""
    (tmp_path / "insider.toml").write_text(
        '[gates]\nmin_fidelity = 0.1\n[keys.mallory]\npublic_key = "'
        f'{key_pair("mallory")[1]}"\nmay_sign = ["explain", "decide"]\n'
    )
    result = govern(
        "clear", "--model-uri", URI, "--reason", "nothing to see", "--policy", "insider.toml",
        "--signing-key", key_pair("mallory")[0],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"cleared run {blocked}: " in said(result)
    (clearance,) = clearances()
    decision = decisions.read_record(MlflowClient(), clearance, policy.keys)
    assert not decision.valid and not decision.blocking
    with pytest.raises(BlockedError, match=f"run {blocked} was replaced after it was written"):
        gate_model_version(URI, policy)
    result = govern("gate", "--model-uri", URI, "--policy", "policy.toml")
    assert result.exit_code == 2 and f"run {blocked} was replaced" in said(result)
    report = audit_model("credit-rf", policy)
    assert report.cleared == []
    assert [(f.kind, f.run_id) for f in report.findings] == [("decision_record", blocked)]
