"""Keys that never leave a hardware security module (issue 41): the evidence of an
explanation, a gate, an approval and a promotion signed by keys generated inside a
SoftHSM2 token (``tests/hsm.py``), through ``govern`` as CI and reviewers run it
(``--signing-key pkcs11:...`` or ``GOVERN_SIGNING_KEY``, the PIN from
``GOVERN_PKCS11_PIN`` or the file ``GOVERN_PKCS11_PIN_FILE`` names), and verified by a
policy that pins the token's public keys. A certificate for another key is refused before
anything is written.

The explanation is the fast one of ``tests/gate_store.py`` (a hand-made surrogate saved
with the flavor), signed with the token key the environment names, as ``govern explain``
signs (``flavors.trust.default_signing_key``); every command runs in-process (typer's
runner) on a copy of the migrated SQLite store.
"""

import time

from gate_store import explain, register_ensemble
from mlflow import MlflowClient
from typer.testing import CliRunner

from miret_governance.flavors.trail.decisions import read_record
from miret_governance.flavors.trust import default_signing_key, sign_model_dir
from miret_governance.governance.trust.certificates import serial_text
from miret_governance.governance.trust.keyring import Signer, public_pem
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.signers import (
    CERTIFICATE_CHAIN_ENV,
    PKCS11_PIN_ENV,
    PKCS11_PIN_FILE_ENV,
    SIGNING_CERTIFICATE_ENV,
    SIGNING_KEY_ENV,
)

pytest_plugins = ["mlflow_store", "hsm"]


def govern(*args):
    from miret_governance.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args])


def explained_with(key, store, folder):
    """A new ensemble version with a linked surrogate whose evidence ``key`` signed (the
    fast explanation of ``tests/gate_store.py``, stating when it was signed, as explain
    does); the ensemble version."""
    ensemble = register_ensemble(store)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sign = lambda model_dir, _: sign_model_dir(model_dir, key)
    explain(store, ensemble, folder, sign=False, edit=sign, created=created)
    return ensemble


def pinned_policy(softhsm, folder):
    """A four-eyes policy pinning the token's keys as raw public keys: ``ci`` may sign
    explain and decide, ``alice`` approve; @prod needs one approval."""
    text = 'name = "hsm"\n[gates]\nmin_fidelity = 0.9\n'
    for label, purposes in (("ci", '["explain", "decide"]'), ("alice", '["approve"]')):
        public = folder / f"{label}.pub"
        public.write_bytes(public_pem(softhsm.certificate(label).certificate.public_key()))
        text += f'\n[keys.hsm-{label}]\npublic_key = "{public}"\nmay_sign = {purposes}\n'
    path = folder / "hsm.toml"
    path.write_text(text + "\n[approvals]\nprod = 1\n")
    return path


def test_evidence_gate_approval_and_promotion_signed_in_the_token(
    store, tmp_path, softhsm, monkeypatch
):
    client = MlflowClient()
    policy_path = pinned_policy(softhsm, tmp_path)
    policy = load_policy(policy_path)
    ci = policy.keys.names("explain")[0], policy.keys.keys[0].fingerprint
    monkeypatch.setenv(SIGNING_KEY_ENV, softhsm.uri("ci"))  # as a CI job sets it
    monkeypatch.setenv(PKCS11_PIN_ENV, softhsm.pin)
    token_key = default_signing_key()
    assert token_key.fingerprint == ci[1]
    ensemble = explained_with(token_key, store, tmp_path)
    uri = f"models:/{ensemble.name}/{ensemble.version}"

    monkeypatch.delenv(SIGNING_KEY_ENV)
    gate = govern(
        "gate", "--model-uri", uri, "--policy", policy_path, "--signing-key", softhsm.uri("ci"),
        "--json",
    )  # fmt: skip
    assert gate.exit_code == 0, gate.output
    runs = client.search_runs([client.get_experiment_by_name("governance-gates").experiment_id])
    decision = read_record(client, runs[0].info.run_id, policy.keys)
    assert decision.valid and decision.signer == Signer(*ci)
    assert decision.record.evidence.signer == Signer(*ci)  # the explanation's, verified

    monkeypatch.delenv(PKCS11_PIN_ENV)
    pin_file = tmp_path / "alice.pin"
    pin_file.write_text(f"{softhsm.pin}\n")
    monkeypatch.setenv(PKCS11_PIN_FILE_ENV, str(pin_file))  # a reviewer's PIN, from a file
    approval = govern(
        "approve", "--model-uri", uri, "--alias", "prod", "--decision", "approve",
        "--comment", "rules read", "--policy", policy_path,
        "--signing-key", softhsm.uri("alice"),
    )  # fmt: skip
    assert approval.exit_code == 0, approval.output

    monkeypatch.setenv(SIGNING_KEY_ENV, softhsm.uri("ci"))
    promotion = govern("promote", "--model-uri", uri, "--alias", "prod", "--policy", policy_path)
    assert promotion.exit_code == 0, promotion.output
    assert client.get_registered_model(ensemble.name).aliases == {"prod": ensemble.version}
    runs = client.search_runs(
        [client.get_experiment_by_name("governance-gates").experiment_id],
        "tags.governance.decision_signer = 'hsm-ci'",
        order_by=["attributes.start_time DESC"],
    )
    promoted = read_record(client, runs[0].info.run_id, policy.keys)
    assert promoted.valid and promoted.signer == Signer(*ci)
    assert promoted.record.decision == "promoted"
    alice = softhsm.certificate("alice").certificate.public_key()
    assert [(a["name"], a["fingerprint"]) for a in promoted.record.approvals] == [
        ("hsm-alice", policy.keys.with_fingerprint(_fingerprint(alice)).fingerprint)
    ]


def test_an_explanation_signed_in_the_token_with_its_certificate_passes_a_policy_of_the_ca(
    store, tmp_path, softhsm, monkeypatch
):
    """The issue's done-when case: the policy trusts only the CA and the identities (no
    key); the evidence and the gate decision are signed by the token key with the
    certificate the CA issued for it, the CI job's way (environment variables only); a
    reviewer approves with her token key and certificate on the command line, and the
    promotion counts her identity."""
    ca, ci, alice = softhsm.ca, softhsm.certificate("ci"), softhsm.certificate("alice")
    policy_path = tmp_path / "bank.toml"
    policy_path.write_text(
        'name = "bank"\n[gates]\nmin_fidelity = 0.9\n\n[authorities.bank]\n'
        f'certificates = ["{ca.root_path}", "{ca.intermediate_path}"]\n'
        'explain = ["spiffe://bank.example/ci/governance"]\ndecide = ["spiffe://bank.example/ci/*"]\n'
        'approve = ["*@risk.example.com"]\n\n[approvals]\nprod = 1\n'
    )
    policy = load_policy(policy_path)
    assert policy.keys.keys == ()
    monkeypatch.setenv(SIGNING_KEY_ENV, softhsm.uri("ci"))
    monkeypatch.setenv(PKCS11_PIN_ENV, softhsm.pin)
    monkeypatch.setenv(SIGNING_CERTIFICATE_ENV, str(ci.certificate_path))
    monkeypatch.setenv(CERTIFICATE_CHAIN_ENV, str(ca.intermediate_path))
    token_key = default_signing_key()
    ensemble = explained_with(token_key, store, tmp_path)
    uri = f"models:/{ensemble.name}/{ensemble.version}"

    gate = govern("gate", "--model-uri", uri, "--policy", policy_path)
    assert gate.exit_code == 0, gate.output
    client = MlflowClient()
    gates = client.get_experiment_by_name("governance-gates").experiment_id
    (run,) = client.search_runs([gates])
    decision = read_record(client, run.info.run_id, policy.keys)
    identity = "spiffe://bank.example/ci/governance"
    certified = Signer(identity, token_key.fingerprint, identity, "bank", serial_text(ci.serial))
    assert decision.valid and decision.signer == certified
    assert decision.record.evidence.signer == certified
    assert decision.record.decided_by.certificate.identity == identity

    approval = govern(
        "approve", "--model-uri", uri, "--alias", "prod", "--decision", "approve",
        "--comment", "rules read", "--policy", policy_path,
        "--signing-key", softhsm.uri("alice"), "--signing-certificate", alice.certificate_path,
        "--certificate-chain", ca.intermediate_path,
    )  # fmt: skip
    assert approval.exit_code == 0, approval.output
    promotion = govern("promote", "--model-uri", uri, "--alias", "prod", "--policy", policy_path)
    assert promotion.exit_code == 0, promotion.output
    assert client.get_registered_model(ensemble.name).aliases == {"prod": ensemble.version}
    (promoted,) = client.search_runs([gates], order_by=["start_time DESC"], max_results=1)
    record = read_record(client, promoted.info.run_id, policy.keys).record
    assert record.decision == "promoted"
    assert [a["name"] for a in record.approvals] == ["alice@risk.example.com"]


def _fingerprint(public_key) -> str:
    import hashlib

    return hashlib.sha256(public_pem(public_key)).hexdigest()


def test_a_certificate_for_another_key_is_refused_before_anything_is_written(
    store, tmp_path, softhsm, monkeypatch
):
    monkeypatch.setenv(PKCS11_PIN_ENV, softhsm.pin)
    alice = softhsm.certificate("alice")
    experiments = [e.name for e in MlflowClient().search_experiments()]
    done = govern(
        "gate", "--model-uri", "models:/credit-rf/1", "--policy", pinned_policy(softhsm, tmp_path),
        "--signing-key", softhsm.uri("ci"), "--signing-certificate", alice.certificate_path,
        "--certificate-chain", softhsm.ca.intermediate_path,
    )  # fmt: skip
    assert done.exit_code == 2, done.output
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        (
            "error: the certificate 'CN=alice@risk.example.com,O=Example Bank' of "
            f"--signing-certificate ({alice.certificate_path}) is not for the key of "
            "--signing-key (token 'govern-test', key 'ci'): give the certificate your CA "
            "issued for that key"
        )
    ]
    assert [e.name for e in MlflowClient().search_experiments()] == experiments
