"""Keys that never leave a hardware security module (issue 41): the evidence of an
explanation, a gate, an approval and a promotion signed by keys generated inside a
SoftHSM2 token (``tests/hsm.py``), through ``govern`` as CI and reviewers run it
(``--signing-key pkcs11:...`` or ``GOVERN_SIGNING_KEY``, the PIN from
``GOVERN_PKCS11_PIN`` or the file ``GOVERN_PKCS11_PIN_FILE`` names), and verified by a
policy that pins the token's public keys, or by one that trusts only the CA and the
identities. Refused before anything is written, each with exit 2 and one line: a
certificate for another key; a reviewer's certificate from another CA, for an identity
not trusted to approve, expired, or revoked before signing; a key past its window.

The explanation is the fast one of ``tests/gate_store.py`` (a hand-made surrogate saved
with the flavor), signed with the token key the environment names, as ``govern explain``
signs (``flavors.trust.default_signing_key``); every command runs in-process (typer's
runner) on a copy of the migrated SQLite store.
"""

import time
from datetime import datetime, timedelta, timezone

from gate_store import explain, register_ensemble
from mlflow import MlflowClient
from pki import TestCA
from signing_keys import key_pair
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


REFUSED = {
    "outside the CA": "issued by CN=Other Bank Signing CA,O=Example Bank, which the policy does "
    "not trust for approve",
    "wrong identity": "authority 'bank' trusts for approve only *@risk.example.com",
    "expired": ": sign it again with a current certificate",
    "revoked": "(laptop stolen): sign it again with a key the policy trusts now",
    "retired key": "by key 'retired', outside the window of key 'retired' (until ",
}
"""A fragment of each refusal's one line (the whole line names the certificate or key,
its serial or window, and the signed time)."""


def bad_signers(ca, folder) -> tuple[str, dict]:
    """Policy lines and reviewers' signing options the policy refuses to approve with: a
    certificate from another CA, one for an identity the policy does not trust to approve,
    an expired one, a revoked one, and a raw key past its window (issue 41, item 6)."""
    now = datetime.now(timezone.utc)
    other = TestCA(folder / "other-ca", "Other Bank")
    leaves = {
        "outside the CA": (other.issue("eve", "eve@risk.example.com"), other),
        "wrong identity": (ca.issue("ds", "ds@bank.example"), ca),
        "expired": (
            ca.issue(
                "old",
                "old@risk.example.com",
                not_before=now - timedelta(days=30),
                not_after=now - timedelta(days=1),
            ),
            ca,
        ),
        "revoked": (ca.issue("lost", "lost@risk.example.com"), ca),
    }
    options = {
        case: ("--signing-key", leaf.key_path, "--signing-certificate", leaf.certificate_path,
               "--certificate-chain", issuer.intermediate_path)
        for case, (leaf, issuer) in leaves.items()
    }  # fmt: skip
    retired = key_pair("retired")
    options["retired key"] = ("--signing-key", retired[0])
    stamp = lambda at: at.strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = (
        f'\n[keys.retired]\npublic_key = "{retired[1]}"\nmay_sign = ["approve"]\n'
        f"valid_until = {stamp(now - timedelta(days=1))}\n"
        f'\n[[revoked]]\nauthority = "bank"\nserial = "{serial_text(leaves["revoked"][0].serial)}"\n'
        f'revoked_at = {stamp(now - timedelta(hours=1))}\nreason = "laptop stolen"\n'
    )
    return lines, options


def test_an_explanation_signed_in_the_token_with_its_certificate_passes_a_policy_of_the_ca(
    store, tmp_path, softhsm, monkeypatch
):
    """The issue's done-when case: the policy trusts only the CA and the identities (no
    key); the evidence and the gate decision are signed by the token key with the
    certificate the CA issued for it, the CI job's way (environment variables only); a
    reviewer approves with her token key and certificate on the command line, and the
    promotion counts her identity."""
    ca, ci, alice = softhsm.ca, softhsm.certificate("ci"), softhsm.certificate("alice")
    refused_lines, refused = bad_signers(ca, tmp_path)
    policy_path = tmp_path / "bank.toml"
    policy_path.write_text(
        'name = "bank"\n[gates]\nmin_fidelity = 0.9\n\n[authorities.bank]\n'
        f'certificates = ["{ca.root_path}", "{ca.intermediate_path}"]\n'
        'explain = ["spiffe://bank.example/ci/governance"]\ndecide = ["spiffe://bank.example/ci/*"]\n'
        'approve = ["*@risk.example.com"]\n\n[approvals]\nprod = 1\n'
    )
    refusing = tmp_path / "bank-refusing.toml"  # the same, with a retired key and a revocation
    refusing.write_text(policy_path.read_text() + refused_lines)
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

    approve = ("approve", "--model-uri", uri, "--alias", "prod", "--decision", "approve",
               "--comment", "rules read", "--policy", refusing)  # fmt: skip
    with monkeypatch.context() as reviewer:  # a reviewer's own key, not the CI job's
        for name in (SIGNING_KEY_ENV, SIGNING_CERTIFICATE_ENV, CERTIFICATE_CHAIN_ENV):
            reviewer.delenv(name)
        for case, options in refused.items():  # each refused before anything is written
            done = govern(*approve, *options)
            assert (done.exit_code, done.stdout) == (2, ""), (case, done.output)
            (line,) = done.stderr.splitlines()
            assert line.startswith("error: the decision approve records "), line
            assert REFUSED[case] in line, (case, line)
    assert client.get_experiment_by_name("governance-approvals") is None
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
