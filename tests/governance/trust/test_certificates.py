"""Certificates from the organisation's CA, validity windows and revocation: real
model-signing bundles over a small file, issued by the test CA (tests/pki.py), checked
by ``verify_path`` at the time the signed content states."""

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from pki import TestCA, certified_key, sign_with
from signing_keys import key_pair

from miret_governance.flavors.trust import evidence_signed_at, verify_model_signature
from miret_governance.governance.trust import certificates as x509s
from miret_governance.governance.trust.keyring import SignatureError, Signer
from miret_governance.governance.trust.policy import PolicyError, load_policy, parse_policy
from miret_governance.governance.trust.signers import SigningKey, sign_path
from miret_governance.governance.trust.signing import verify_path

NOW = datetime.now(timezone.utc)
CI = "spiffe://bank.example/ci/governance"
POLICY_DIGESTS = {  # computed with the code before certificates existed (main at 038f2be)
    "drift.toml": "1390f2ee09a6d37269b474aa22feddc5cfa55fae21fe753ef8dced32277ad1ec",
    "lenient.toml": "8d1ae153969310bae64b230da56dd0833ee5abd108708a0127fc482f330b2ac0",
    "roles.toml": "0bc075799da610982a2c813c749dac110fe1177a8c6c113c10acbf98acc9397f",
    "strict.toml": "433edc70d95341f9b613c252fe825720972fe165849ec252c37db28820324213",
}


def iso(at: datetime) -> str:
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The bank's CA and another one, their leaves, a signed file and a policy writer."""
    folder = tmp_path_factory.mktemp("pki")
    bank, other = TestCA(folder / "bank"), TestCA(folder / "other", "Other Bank")
    leaves = {
        "ci": bank.issue("ci", CI),
        "alice": bank.issue("alice", "alice@risk.example.com"),
        "expired": bank.issue(
            "old-ci", CI, not_before=NOW - timedelta(days=30), not_after=NOW - timedelta(days=10)
        ),
        "outsider": other.issue("outsider", CI),
    }
    data = folder / "data.txt"
    data.write_text("evidence\n")
    signatures = {
        name: sign_with(
            certified_key(issued, other if name == "outsider" else bank),
            data,
            folder / f"{name}.sig",
        )
        for name, issued in leaves.items()
    }

    def policy(extra: str = "") -> object:
        text = (
            "[gates]\nmin_fidelity = 0.9\n[authorities.bank]\n"
            f'certificates = ["{bank.root_path}", "{bank.intermediate_path}"]\n'
            'explain = ["spiffe://bank.example/ci/*"]\napprove = ["*@risk.example.com"]\n' + extra
        )
        path = folder / "policy.toml"
        path.write_text(text)
        return load_policy(path)

    return bank, leaves, data, signatures, policy


def test_a_certificate_from_the_policy_ca_verifies_and_names_its_identity(pki):
    bank, leaves, data, signatures, policy = pki
    trusted = policy().keys
    signer = verify_path(data, signatures["ci"], trusted, "explain", "the evidence", NOW)
    ci = leaves["ci"].certificate
    assert signer == Signer(CI, x509s.key_fingerprint(ci), CI, "bank", f"{ci.serial_number:#x}")
    assert signer.to_json() == {
        "name": CI,
        "fingerprint": signer.fingerprint,
        "identity": CI,
        "authority": "bank",
        "serial": signer.serial,
    }
    alice = verify_path(data, signatures["alice"], trusted, "approve", "the approval", NOW)
    assert alice.name == "alice@risk.example.com"
    # the signing side names the same signer before anything is signed
    key = certified_key(leaves["ci"], bank)
    assert trusted.signer_for(key, "explain", "the evidence", NOW) == signer


def test_another_ca_or_another_identity_is_refused(pki):
    _, _, data, signatures, policy = pki
    trusted = policy().keys
    with pytest.raises(SignatureError) as outsider:
        verify_path(data, signatures["outsider"], trusted, "explain", "the evidence", NOW)
    assert f"the evidence is signed with certificate {CI} (serial" in str(outsider.value)
    assert "which the policy does not trust for explain" in str(outsider.value)
    assert "not from authority 'bank'" in str(outsider.value)
    with pytest.raises(SignatureError) as wrong:
        verify_path(data, signatures["alice"], trusted, "explain", "the evidence", NOW)
    assert "authority 'bank' trusts for explain only spiffe://bank.example/ci/*" in str(wrong.value)
    with pytest.raises(SignatureError, match="authorities trusted for decide: none"):
        verify_path(data, signatures["ci"], trusted, "decide", "the gate", NOW)
    bare = SigningKey.load(str(key_pair("bare")[0]))  # a raw key the policy does not name
    sign_path(data, bare, data.with_suffix(".bare.sig"))
    with pytest.raises(SignatureError) as untrusted:
        verify_path(data, data.with_suffix(".bare.sig"), trusted, "explain", "the evidence", NOW)
    assert "(trusted for explain: none; certificates of authority bank)" in str(untrusted.value)


def test_a_certificate_counts_only_inside_its_validity_at_the_signed_time(pki):
    _, leaves, data, signatures, policy = pki
    trusted = policy().keys
    expired = leaves["expired"].certificate
    with pytest.raises(SignatureError) as late:
        verify_path(data, signatures["expired"], trusted, "explain", "the evidence", NOW)
    assert str(late.value) == (
        f"the evidence was signed at {iso(NOW)} with certificate {CI} (serial "
        f"{expired.serial_number:#x}) of authority 'bank', valid from "
        f"{iso(expired.not_valid_before_utc)} until {iso(expired.not_valid_after_utc)}: sign "
        "it again with a current certificate"
    )
    # signed while it was valid: still valid now, after it expired
    signed = NOW - timedelta(days=20)
    signer = verify_path(data, signatures["expired"], trusted, "explain", "the evidence", signed)
    assert signer.serial == f"{expired.serial_number:#x}"
    with pytest.raises(SignatureError, match="states no time it was signed"):
        verify_path(data, signatures["ci"], trusted, "explain", "the evidence")


def test_a_revoked_certificate_counts_only_for_what_it_signed_before(pki):
    _, leaves, data, signatures, policy = pki
    serial = leaves["ci"].certificate.serial_number
    revoked_at = NOW - timedelta(minutes=30)
    trusted = policy(
        f'[[revoked]]\nauthority = "bank"\nserial = "{serial:#x}"\n'
        f'revoked_at = {iso(revoked_at)}\nreason = "laptop stolen"\n'
    ).keys
    before = verify_path(
        data,
        signatures["ci"],
        trusted,
        "explain",
        "the evidence",
        revoked_at - timedelta(minutes=1),
    )
    assert before.authority == "bank"
    with pytest.raises(SignatureError) as after:
        verify_path(data, signatures["ci"], trusted, "explain", "the evidence", NOW)
    assert str(after.value) == (
        f"the evidence was signed at {iso(NOW)} by certificate {CI} (serial {serial:#x}, "
        f"authority 'bank'), which was revoked at {iso(revoked_at)} (laptop stolen): sign it "
        "again with a key the policy trusts now"
    )
    with pytest.raises(SignatureError, match="revoked at"):  # and before signing anything
        trusted.signer_for(certified_key(leaves["ci"], pki[0]), "explain", "the evidence", NOW)


def test_a_key_used_after_its_window_is_refused_and_earlier_evidence_stays_valid(tmp_path):
    private, public = key_pair("rotated-ci")
    until = NOW - timedelta(days=1)
    policy = parse_policy(
        {
            "gates": {},
            "keys": {
                "ci": {"public_key": str(public), "may_sign": ["explain"], "valid_until": until}
            },
        }
    )
    data = tmp_path / "data.txt"
    data.write_text("evidence\n")
    key = SigningKey.load(private)
    sign_path(data, key, tmp_path / "data.sig")
    earlier = verify_path(
        data,
        tmp_path / "data.sig",
        policy.keys,
        "explain",
        "the evidence",
        until - timedelta(hours=1),
    )
    assert earlier == Signer("ci", key.fingerprint)
    with pytest.raises(SignatureError) as late:
        verify_path(data, tmp_path / "data.sig", policy.keys, "explain", "the evidence", NOW)
    assert str(late.value) == (
        f"the evidence was signed at {iso(NOW)} by key 'ci', outside the window of key 'ci' "
        f"(until {iso(until)}): sign it again with a key the policy trusts now"
    )
    with pytest.raises(SignatureError, match="outside the window of key 'ci'"):
        policy.keys.signer_for(key, "explain", "the decision promote records", NOW)
    assert policy.keys.to_json()["ci"]["valid_until"] == iso(until)


def test_a_raw_key_equal_to_the_leaf_verifies_a_certificate_bundle_quietly(pki, capsys):
    _, leaves, data, signatures, _ = pki
    key = SigningKey.load(leaves["ci"].key_path)
    trusted = key.trusted_for("explain", "this explain's signing key")
    signer = verify_path(data, signatures["ci"], trusted, "explain", "the evidence")
    assert signer == Signer("this explain's signing key", key.fingerprint)
    assert capsys.readouterr().out == ""


def test_existing_policies_keep_their_digest_and_a_policy_cannot_vouch_for_itself(pki):
    examples = Path(__file__).parents[3] / "examples" / "policies"
    assert {
        p.name: load_policy(p).digest for p in sorted(examples.glob("*.toml"))
    } == POLICY_DIGESTS
    bank, _, _, _, policy = pki
    certified = policy()
    assert certified.keys.to_json()["authorities"]["bank"]["certificates"] == [
        x509s.sha256(bank.root),
        x509s.sha256(bank.intermediate),
    ]
    with pytest.raises(PolicyError, match="a policy cannot trust a key to sign policies"):
        parse_policy(
            {
                "gates": {},
                "keys": {
                    "risk": {"public_key": str(key_pair("rotated-ci")[1]), "may_sign": ["policy"]}
                },
            }
        )
    with pytest.raises(PolicyError, match="a policy cannot trust a key to sign policies"):
        policy('policy = ["*@risk.example.com"]\n')


def test_evidence_is_judged_at_the_time_it_says_it_was_made(pki, tmp_path):
    bank, leaves, _, _, policy = pki
    trusted, made = policy().keys, (NOW - timedelta(days=20)).replace(microsecond=0)
    model = tmp_path / "surrogate"
    model.mkdir()
    evidence = model / "evidence.json"
    evidence.write_text(json.dumps({"provenance": {"created": iso(made)}}))
    sign_with(certified_key(leaves["expired"], bank), model, model / "model.sig")
    assert evidence_signed_at(model) == made
    assert verify_model_signature(model, trusted).identity == CI
    evidence.write_text(json.dumps({"provenance": {"created": iso(NOW)}}))  # made now
    sign_with(certified_key(leaves["expired"], bank), model, model / "model.sig")
    with pytest.raises(SignatureError, match="valid from .* until .*: sign it again"):
        verify_model_signature(model, trusted)
