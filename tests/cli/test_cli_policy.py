"""``govern policy sign | verify``, and gate and audit under a deployment that requires a
signed policy: refusals (exit 2, one line, no run created), the signer in the gate
record, and the audit's findings of decisions made under another policy."""

import json

import pytest
from gate_store import explained
from mlflow import MlflowClient
from signing_keys import key_pair, keys_toml
from typer.testing import CliRunner

from miret_governance.flavors.trail.decisions import GATE_EXPERIMENT, read_record
from miret_governance.governance.trust.keyring import SignatureError, Signer
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.signers import SigningKey

pytest_plugins = ["mlflow_store"]
URI = "models:/credit-rf/1"


def govern(*args, env=None):
    from miret_governance.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def said(result) -> str:
    return " ".join(result.output.split())


@pytest.fixture
def deployment(tmp_path):
    """policy.toml (trusting the CI key) signed by ``risk`` with govern policy sign, and
    trust.toml trusting ``risk`` for policy."""
    (tmp_path / "policy.toml").write_text(
        'name = "org"\n[gates]\nmin_fidelity = 0.9\n' + keys_toml()
    )
    (tmp_path / "trust.toml").write_text(
        f'[keys.risk]\npublic_key = "{key_pair("risk")[1]}"\nmay_sign = ["policy"]\n'
    )
    signed = govern(
        "policy", "sign", "--policy", "policy.toml", "--signing-key", key_pair("risk")[0]
    )
    assert signed.exit_code == 0, signed.output
    label = load_policy("policy.toml").label
    assert f"signed policy {label} (digest" in said(signed)
    assert said(signed).endswith("policy.toml.sig")
    return tmp_path


def gate_runs() -> list:
    experiment = MlflowClient().get_experiment_by_name(GATE_EXPERIMENT)
    return [] if experiment is None else MlflowClient().search_runs([experiment.experiment_id])


def test_sign_then_verify(deployment):
    risk = SigningKey.load(key_pair("risk")[0])
    result = govern("policy", "verify", "--policy", "policy.toml", "--policy-trust", "trust.toml")
    assert result.exit_code == 0, result.output
    label = load_policy("policy.toml").label
    assert f"policy {label} (digest" in said(result)
    assert (
        f"is signed by risk (key {risk.fingerprint[:16]}), trusted for policy by trust.toml"
        in said(result)
    )
    again = govern(
        "policy", "sign", "--policy", "policy.toml", "--signing-key", key_pair("risk")[0]
    )
    assert again.exit_code == 2 and "policy.toml.sig exists already" in said(again)


def test_gate_refuses_an_unsigned_or_changed_policy_before_writing(store, tmp_path, deployment):
    explained(store, tmp_path)
    required = {"GOVERN_REQUIRE_SIGNED_POLICY": "1", "GOVERN_POLICY_TRUST": "trust.toml"}
    (tmp_path / "other.toml").write_text("[gates]\nmin_fidelity = 0.5\n" + keys_toml())
    result = govern("gate", "--model-uri", URI, "--policy", "other.toml", env=required)
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and said(result).startswith(
        "error: policy other.toml is unsigned (no other.toml.sig) and the deployment requires "
        "a signed policy"
    )
    policy = tmp_path / "policy.toml"
    policy.write_text(policy.read_text().replace("0.9", "0.5"))
    result = govern(
        "gate", "--model-uri", URI, "--policy", "policy.toml", "--policy-trust", "trust.toml"
    )  # a signature that does not verify refuses, required or not
    assert result.exit_code == 2
    assert "error: policy policy.toml does not match its signature by key 'risk'" in said(result)
    mallory = key_pair("mallory")[0]
    govern("policy", "sign", "--policy", "policy.toml", "--signing-key", mallory, "--force")
    result = govern("gate", "--model-uri", URI, "--policy", "policy.toml", env=required)
    assert result.exit_code == 2
    assert "which the policy trust file trust.toml does not trust" in said(result)
    assert gate_runs() == []


def test_decisions_record_the_policy_signer_and_the_audit_lists_other_policies(
    store, tmp_path, deployment
):
    explained(store, tmp_path)
    trusted = ("--policy-trust", "trust.toml")
    result = govern("gate", "--model-uri", URI, "--policy", "policy.toml", *trusted, "--json")
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["run_id"]
    policy = load_policy("policy.toml")
    record = read_record(MlflowClient(), run, policy.keys).record
    risk = SigningKey.load(key_pair("risk")[0])
    assert record.policy.signer == Signer("risk", risk.fingerprint)
    assert record.policy.digest == policy.digest
    promoted = govern("promote", "--model-uri", URI, "--alias", "prod", "--policy", "policy.toml")
    assert promoted.exit_code == 0, promoted.output  # no trust file: the signer is not recorded
    tags = MlflowClient().get_model_version("credit-rf", "1").tags
    promotion = tags["governance.promotion.prod.run"]
    audit = govern("audit", "--model-name", "credit-rf", "--policy", "policy.toml", "--json")
    assert json.loads(audit.stdout)["clean"] and not json.loads(audit.stdout)["other_policies"]
    audit = govern(
        "audit", "--model-name", "credit-rf", "--policy", "policy.toml", *trusted,
        "--require-signed-policy", "--json",
    )  # fmt: skip
    report = json.loads(audit.stdout)
    assert audit.exit_code == 1 and report["findings"] == [
        {
            "kind": "policy",
            "version": URI,
            "alias": "prod",
            "run_id": promotion,
            "message": f"@prod was promoted to {URI} under policy {policy.label!r} without "
            "verifying its signature, and a signed policy is required; promote it again with "
            "--require-signed-policy and --policy-trust",
        }
    ]
    unsigned = {"kind": "promotion", "version": URI, "alias": "prod", "run_id": promotion}
    listed = {"policy": policy.label, "policy_digest": policy.digest}
    assert report["other_policies"] == [unsigned | listed | {"signer": None}]
    (tmp_path / "lax.toml").write_text('name = "lax"\n[gates]\nmin_fidelity = 0.5\n' + keys_toml())
    audit = govern("audit", "--model-name", "credit-rf", "--policy", "lax.toml")
    assert audit.exit_code == 1
    assert f"FINDING policy {URI} @prod (run {promotion}): @prod was promoted" in said(audit)
    assert (
        f"OTHER POLICY run {run} (gate, {URI}): under policy {policy.label!r} (digest "
        f"{policy.digest[:16]}, signed by risk) OTHER POLICY run {promotion} (promotion, {URI}): "
        f"under policy {policy.label!r} (digest {policy.digest[:16]}, no verified signature)"
    ) in said(audit)


def test_readers_honour_the_deployment_setting(deployment, monkeypatch):
    """What the flavor's loader, show and reproduce trust (``trusted_keys``) follows the
    same environment: a policy changed since it was signed is refused."""
    from miret_governance.flavors.trust import trusted_keys

    monkeypatch.setenv("GOVERN_POLICY_TRUST", "trust.toml")
    monkeypatch.setenv("GOVERN_REQUIRE_SIGNED_POLICY", "1")
    assert trusted_keys("policy.toml") == load_policy("policy.toml").keys
    (deployment / "unsigned.toml").write_text("[gates]\nmin_fidelity = 0.9\n" + keys_toml())
    with pytest.raises(SignatureError, match="policy unsigned.toml is unsigned"):
        trusted_keys("unsigned.toml")


def test_check_names_the_gates_an_explain_cannot_meet(tmp_path):
    (tmp_path / "strict.toml").write_text(
        "[gates]\nmax_gap = 0.01\nmin_fidelity_lower_bound = 0.95\n"
    )
    result = govern("policy", "check", "strict.toml", "--solver", "highs", "--test-rows", "50")
    label = load_policy("strict.toml").label
    assert result.exit_code == 1 and result.stderr == ""
    assert result.stdout.splitlines() == [
        (
            f"policy {label}: max_gap = 0.01 cannot be met: solver.gap is 1 unless the whole MILP "
            "runs, and HiGHS is given it only up to 400 binaries (about 100 training rows at depth "
            "1, fewer when deeper); --max-rows 2000 allows more; explain where a full Gurobi "
            "licence is installed (--solver auto or gurobi), or the risk function drops max_gap "
            "from the policy"
        ),
        (
            f"policy {label}: min_fidelity_lower_bound = 0.95 cannot be met: 50 test rows prove at "
            "most 0.9287 even when every row agrees; explain with at least 73 test rows "
            "(--test-data), or the risk function sets a lower threshold"
        ),
    ]
    small = govern(
        "policy", "check", "strict.toml", "--solver", "highs", "--depth", "2", "--max-rows", "40"
    )
    assert small.exit_code == 0, small.output
    assert small.stdout == f"policy {label}: every gate can be met with these settings\n"
    (tmp_path / "bad.toml").write_text("[gates]\nmax_gap = -1\n")
    bad = govern("policy", "check", "bad.toml")
    assert bad.exit_code == 2 and bad.stdout == ""
    assert (
        said(bad) == "error: bad.toml: max_gap = -1 is not valid; expected relative MIP gap, >= 0"
    )


def test_a_command_reading_the_policy_warns_once_and_keeps_its_exit_code(store, tmp_path):
    from miret_governance.cli.common import DEFAULTS
    from miret_governance.governance.trust.attainable import ExplainSettings, unattainable

    (tmp_path / "strict.toml").write_text("[gates]\nmax_gap = 0.01\n")
    (tmp_path / "lax.toml").write_text("[gates]\nmax_gap = 1\n")
    (line,) = unattainable(
        load_policy("strict.toml"), ExplainSettings("auto", 0, DEFAULTS["max_rows"])
    )  # the licence found here decides the words
    missing = ("show", "--model-uri", "models:/none/1")
    warned, quiet = (
        govern(*missing, "--policy", "strict.toml"),
        govern(*missing, "--policy", "lax.toml"),
    )
    assert warned.exit_code == quiet.exit_code == 2
    warning = f"warning: policy strict.toml, with explain's default settings: {line.line}"
    assert warned.stderr == warning + "\n" + quiet.stderr
