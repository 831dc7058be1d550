"""A policy signed by the model-risk function's key and verified with a deployment's
policy trust file: the signer, and what is refused (unsigned under the requirement,
changed after signing, signed by a key the trust file does not trust)."""

import dataclasses
import json
import re
import shutil

import pytest
from pki import TestCA, certified_key
from signing_keys import key_pair, keys_toml

from miret_governance.governance.trust.keyring import SignatureError, Signer
from miret_governance.governance.trust.policy import PolicyError, load_policy, parse_policy
from miret_governance.governance.trust.policy_signature import (
    checked_policy,
    load_policy_trust,
    requirement,
    sign_policy,
)
from miret_governance.governance.trust.records import GateRecord, PolicyRef, parse_record
from miret_governance.governance.trust.signers import SigningKey


@pytest.fixture
def signed(tmp_path):
    """(policy path, trust path): a policy trusting the CI key, signed by ``risk``, and
    the trust file trusting ``risk`` for policy."""
    policy = tmp_path / "strict.toml"
    policy.write_text('name = "strict"\n[gates]\nmin_fidelity = 0.9\n' + keys_toml())
    trust = tmp_path / "trust.toml"
    trust.write_text(f'[keys.risk]\npublic_key = "{key_pair("risk")[1]}"\nmay_sign = ["policy"]\n')
    sign_policy(load_policy(policy), SigningKey.load(key_pair("risk")[0]))
    return policy, trust


def test_a_signed_policy_names_its_signer_and_keeps_its_digest(signed):
    policy, trust = signed
    risk = SigningKey.load(key_pair("risk")[0])
    for required in (False, True):
        checked = checked_policy(policy, trust, required=required)
        assert checked.signer == Signer("risk", risk.fingerprint)
        assert checked.digest == load_policy(policy).digest
    assert checked_policy(policy).signer is None  # no trust file: loaded as it is
    with pytest.raises(SignatureError, match="exists already; signatures are not replaced"):
        sign_policy(load_policy(policy), risk)


def test_a_changed_policy_is_refused(signed, tmp_path):
    policy, trust = signed
    policy.write_text(policy.read_text().replace("0.9", "0.5"))
    changed = (
        f"policy {policy} does not match its signature by key 'risk' (edited: the file): it "
        "was altered after it was signed; use the policy as it was signed, or have it "
        f"reviewed and signed again by a signer {trust} trusts (govern policy sign)"
    )
    with pytest.raises(SignatureError, match=f"^{re.escape(changed)}$"):
        checked_policy(policy, trust)  # verified whenever it is signed and trust is given
    # a key file swapped under the same path: the text is unchanged, the trust is not
    policy.write_text(policy.read_text().replace("0.5", "0.9"))
    assert checked_policy(policy, trust).signer.name == "risk"
    ci_public = key_pair("test-ci")[1]
    kept = tmp_path / "ci.pub"
    shutil.copy(ci_public, kept)
    try:
        shutil.copy(key_pair("mallory")[1], ci_public)
        with pytest.raises(SignatureError, match="was altered after it was signed"):
            checked_policy(policy, trust)
    finally:
        shutil.copy(kept, ci_public)


def test_unsigned_and_untrusted_policies(signed, tmp_path):
    policy, trust = signed
    (tmp_path / "strict.toml.sig").unlink()
    assert checked_policy(policy, trust).signer is None  # not required: as today
    with pytest.raises(
        SignatureError, match=rf"^policy {policy} is unsigned \(no strict.toml.sig\)"
    ):
        checked_policy(policy, trust, required=True)
    with pytest.raises(PolicyError, match="a signed policy is required .* give --policy-trust"):
        checked_policy(policy, None, required=True)
    mallory = SigningKey.load(key_pair("mallory")[0])
    sign_policy(load_policy(policy), mallory)
    with pytest.raises(
        SignatureError,
        match=rf"is signed by key {mallory.fingerprint[:16]}\.\.\., which the policy trust "
        rf"file {trust} does not trust \(trusted for policy: risk\)",
    ):
        checked_policy(policy, trust)


def test_a_policy_cannot_trust_policy_signers_and_the_setting_is_yes_or_no(tmp_path):
    keys = {"risk": {"public_key": str(key_pair("risk")[1]), "may_sign": ["policy"]}}
    with pytest.raises(
        PolicyError, match=r"\[keys.risk\]: a policy cannot trust a key to sign policies"
    ):
        parse_policy({"gates": {}, "keys": keys})
    trust = tmp_path / "trust.toml"
    trust.write_text(
        f'[keys.ci]\npublic_key = "{key_pair("test-ci")[1]}"\nmay_sign = ["decide", "policy"]\n'
    )
    refused = r"\[keys.ci\]: may_sign = \['decide', 'policy'\]; use a non-empty list of policy$"
    with pytest.raises(PolicyError, match=refused):
        load_policy_trust(trust)
    settings = ("1", "TRUE", " yes", "0", "", None)
    assert [requirement(v) for v in settings] == [True, True, True, False, False, False]
    with pytest.raises(PolicyError, match="GOVERN_REQUIRE_SIGNED_POLICY = 'ja' is not a yes or no"):
        requirement("ja")


def test_the_policy_signer_is_recorded_only_when_set():
    raw = (
        b'{"decided_by": {"key_fingerprint": null, "key_name": null, "mlflow_user": "u"}, '
        b'"ensemble": {"model_id": "", "uri": "models:/m/1"}, "evidence": {"digest": "d", '
        b'"signer": null}, "kind": "gate", "policy": {"digest": "p", "label": "x vp", '
        b'"signer": {"fingerprint": "f", "name": "risk"}}, "result": "PASS", "surrogate": '
        b'{"model_id": "", "uri": "models:/m-surrogate/1"}, "time": "2026-01-01T00:00:00+00:00"}'
    )
    record = GateRecord.from_json(raw)
    assert record.policy == PolicyRef("x vp", "p", Signer("risk", "f"))
    assert parse_record(record.to_json()) == record
    unsigned = dataclasses.replace(record, policy=PolicyRef("x vp", "p"))
    assert json.loads(unsigned.to_json())["policy"] == {"digest": "p", "label": "x vp"}


def test_a_policy_signed_with_a_certificate_of_the_organisations_ca(signed, tmp_path):
    """The trust file trusts the CA for identities of the risk function: a leaf for
    risk@ signs, one for a data scientist of the same CA is refused."""
    policy, _ = signed
    ca = TestCA(tmp_path / "ca")
    trust = tmp_path / "ca-trust.toml"
    trust.write_text(
        f'[authorities.bank]\ncertificates = ["{ca.root_path}", "{ca.intermediate_path}"]\n'
        'policy = ["*@risk.example.com"]\n'
    )
    risk = certified_key(ca.issue("risk", "head@risk.example.com"), ca)
    sign_policy(load_policy(policy), risk, overwrite=True)
    signer = checked_policy(policy, trust, required=True).signer
    assert (signer.name, signer.fingerprint) == ("head@risk.example.com", risk.fingerprint)
    sign_policy(load_policy(policy), certified_key(ca.issue("ds", "ds@bank.example"), ca), True)
    with pytest.raises(SignatureError, match="ds@bank.example"):
        checked_policy(policy, trust, required=True)
