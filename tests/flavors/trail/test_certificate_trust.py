"""A decision record signed with a certificate from the policy's CA, on a real SQLite
store: read back as trusted with the certificate's identity as who decided; one signed
at a time its run was not open in the store does not count and is reported."""

from datetime import datetime, timedelta, timezone

from mlflow import MlflowClient
from pki import CertifiedKey, TestCA

from miret_governance.flavors.trail import decisions
from miret_governance.flavors.trail.decisions import (
    LINK_EXPERIMENT,
    decided_by,
    read_record,
    record_in_new_run,
)
from miret_governance.governance.trust.policy import parse_policy
from miret_governance.governance.trust.records import CertificateRef, LinkRecord, PinnedModel

pytest_plugins = ["mlflow_store"]
CI = "spiffe://bank.example/ci/governance"


def test_a_certified_record_names_its_identity_and_a_skewed_one_does_not_count(
    store, tmp_path, monkeypatch
):
    ca = TestCA(tmp_path / "ca")
    key = CertifiedKey(ca.issue("ci", CI), ca)
    # the certificate signer until SigningKey carries certificates (sign_path, H2)
    monkeypatch.setattr(decisions, "sign_path", lambda path, k, sig, ignored=(): k.sign(path, sig))
    policy = parse_policy(
        {
            "gates": {},
            "authorities": {
                "bank": {
                    "certificates": [str(ca.root_path)],
                    "explain": ["spiffe://bank.example/*"],
                }
            },
        }
    )
    client = MlflowClient()
    by = decided_by(policy.keys, key, client, "explain")
    serial = f"{key.issued.serial:#x}"
    assert (by.key_name, by.key_fingerprint) == (CI, key.fingerprint)
    assert by.certificate == CertificateRef("bank", serial, CI)

    def link(at: datetime) -> str:
        record = LinkRecord(
            ensemble=PinnedModel("models:/credit-rf/1", ""),
            surrogate=PinnedModel("models:/credit-rf-surrogate/1", ""),
            decided_by=by,
            time=at.isoformat(timespec="milliseconds"),
        )
        return record_in_new_run(client, LINK_EXPERIMENT, "LINK", {}, record, key)

    decision = read_record(client, link(datetime.now(timezone.utc)), policy.keys)
    assert decision.valid, decision.problem
    assert decision.signer.to_json() == {
        "name": CI,
        "fingerprint": key.fingerprint,
        "identity": CI,
        "authority": "bank",
        "serial": serial,
    }
    assert decision.record.decided_by == by

    signed = datetime.now(timezone.utc) - timedelta(minutes=20)
    skewed = read_record(client, link(signed), policy.keys)
    assert not skewed.valid and not skewed.blocking and skewed.misused  # the audit reports it
    assert skewed.problem.startswith(
        f"the decision record of run {skewed.run_id} is signed at "
        f"{signed.isoformat(timespec='milliseconds')}, outside the time its run was open in "
        "the store ("
    )
    assert skewed.problem.endswith(
        ", give or take 300 s): a signed time the store did not see does not count; check "
        "the signing host's clock and decide again"
    )
