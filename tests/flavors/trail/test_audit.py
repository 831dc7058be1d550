"""`govern audit`'s findings: an alias set by hand, decisions on superseded evidence,
tampered evidence, and decision records that are unsigned or altered."""

import json
from pathlib import Path

import pytest
from gate_store import GOOD, explain, explained, register_ensemble
from mlflow import MlflowClient
from signing_keys import four_eyes_toml, keys_toml

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.store.registry import link_surrogate
from miret_governance.flavors.trail.audit import audit_model
from miret_governance.flavors.trail.decisions import BlockedError
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.governance.trust.policy import load_policy

pytest_plugins = ["mlflow_store"]


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "audited.toml"
    path.write_text('name = "audited"\n[gates]\nmin_fidelity = 0.9\n' + keys_toml())
    return load_policy(path)


def findings(report):
    return [(f.kind, f.version, f.alias) for f in report.findings]


def test_clean_trail(store, tmp_path, policy):
    uri = explained(store, tmp_path)
    promote_model_version(uri, "champion", policy)
    gate_model_version(uri, policy)
    report = audit_model("credit-rf", policy)
    assert report.clean and findings(report) == []
    assert (report.versions, report.decisions) == (1, 2)


def test_alias_set_by_hand_is_found(store, tmp_path, policy):
    client = MlflowClient()
    explained(store, tmp_path)
    uri = explained(store, tmp_path)
    promote_model_version("models:/credit-rf/1", "champion", policy)
    client.set_registered_model_alias("credit-rf", "prod", "2")
    report = audit_model("credit-rf", policy)
    assert findings(report) == [("alias", uri, "prod")]
    assert report.findings[0].message.startswith(
        f"@prod is on {uri} without a valid signed promotion decision for it"
    )
    client.set_registered_model_alias("credit-rf", "champion", "2")  # moved by hand
    assert findings(audit_model("credit-rf", policy)) == [
        ("alias", uri, "champion"),
        ("alias", uri, "prod"),
    ]


def test_decisions_on_superseded_evidence_are_found(store, tmp_path, policy):
    client = MlflowClient()
    ensemble = register_ensemble(store)
    explain(store, ensemble, tmp_path)
    promoted = promote_model_version("models:/credit-rf/1", "champion", policy)
    newer = explain(store, ensemble, tmp_path, metrics=dict(GOOD, test_fidelity=0.96), link=False)
    link_surrogate(client, client.get_model_version("credit-rf", "1"), newer)
    report = audit_model("credit-rf", policy)
    assert findings(report) == [
        ("superseded", "models:/credit-rf/1", None),
        ("superseded", "models:/credit-rf/1", "champion"),
        ("alias", "models:/credit-rf/1", "champion"),
    ]
    assert report.findings[1].run_id == promoted.gate.run_id
    assert "decided on the evidence of models:/credit-rf-surrogate/1" in (
        report.findings[1].message
    )
    again = promote_model_version("models:/credit-rf/1", "champion", policy)
    assert again.promoted
    assert audit_model("credit-rf", policy).clean


def test_unsigned_evidence_and_altered_records_are_found(store, tmp_path, policy, monkeypatch):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    outcome = promote_model_version(uri, "champion", policy)
    with monkeypatch.context() as unsigned_job:
        unsigned_job.delenv("GOVERN_SIGNING_KEY")
        what_if = gate_model_version(uri, policy)  # unsigned, now the last gate status
        unsigned = explained(store, tmp_path, sign=False)
    artifacts = client.get_run(outcome.gate.run_id).info.artifact_uri.removeprefix("file://")
    record = Path(artifacts, "decision", "record.json")
    data = json.loads(record.read_text())
    data["alias"] = "prod"
    record.write_text(json.dumps(data))
    report = audit_model("credit-rf", policy)
    assert findings(report) == [
        ("decision_record", uri, None),
        ("decision_record", uri, None),
        ("alias", uri, "champion"),
        ("evidence", unsigned, None),
    ]
    altered, not_signed = report.findings[:2]
    assert altered.run_id == outcome.gate.run_id
    assert altered.message == (
        f"the decision record of run {altered.run_id} was replaced after it was written (its "
        "record is not the one its run's parameters governance.record.sha256 and "
        "governance.record.signature_sha256 bound)"
    )
    assert not_signed.run_id == what_if.run_id and "is unsigned" in not_signed.message
    assert "the evidence of models:/credit-rf-surrogate/2 is unsigned" in report.findings[3].message


def test_an_alias_moved_back_by_hand_is_found(store, tmp_path, policy):
    """QA: CI promoted v1, then v2, to @champion; an insider set it back on v1, whose
    old promotion record still counted."""
    client = MlflowClient()
    first, second = explained(store, tmp_path), explained(store, tmp_path)
    assert promote_model_version(first, "champion", policy).promoted
    latest = promote_model_version(second, "champion", policy)
    assert latest.promoted and audit_model("credit-rf", policy).clean
    client.set_registered_model_alias("credit-rf", "champion", "1")
    report = audit_model("credit-rf", policy)
    assert findings(report) == [("alias", first, "champion")]
    assert report.findings[0].run_id == latest.gate.run_id
    assert report.findings[0].message.startswith(
        "@champion is on version 1, but the latest signed promotion to it (run "
    )
    assert f"moved it to {second}: it was moved back by hand" in report.findings[0].message
    assert promote_model_version(first, "champion", policy).promoted  # rolled back properly
    assert audit_model("credit-rf", policy).clean


def test_a_promotion_short_of_the_audited_policys_approvals_is_found(store, tmp_path, policy):
    """QA: with a reviewer's rejection standing, CI promoted @prod under a policy without
    approvals; the audit under the four-eyes policy said clean."""
    from signing_keys import key_pair

    from miret_governance.flavors.trail.promotion import approve_model_version
    from miret_governance.governance.trust.signers import SigningKey

    uri = explained(store, tmp_path)
    four_eyes = tmp_path / "four-eyes.toml"
    four_eyes.write_text(four_eyes_toml())
    strict = load_policy(four_eyes)
    reviewer = SigningKey.load(key_pair("alice")[0])
    approve_model_version(uri, "prod", "reject", "not yet", strict, signing_key=reviewer)
    assert promote_model_version(uri, "prod", policy).promoted  # the lax policy
    report = audit_model("credit-rf", strict)
    assert findings(report) == [("alias", uri, "prod"), ("policy", uri, "prod")]
    assert report.findings[0].message == (
        f"@prod is on {uri}, but the audited policy's approvals are not met on its current "
        "evidence: @prod was rejected by alice (not yet)"
    )
    assert report.findings[1].message == (
        f"@prod was promoted to {uri} under policy '{policy.label}', not under the audited "
        f"policy '{strict.label}' (the digests differ); promote it again under the "
        "organisation's policy"
    )


def test_a_record_on_a_retagged_run_is_found(store, tmp_path, policy):
    """QA (stop 35): re-tagging a rejection's run with another alias or version hid it
    from promote, and re-tagging a promotion run hid it from the audit's search for the
    latest promotion; the audit, which searched by those tags too, said clean."""
    from signing_keys import key_pair

    from miret_governance.flavors.trail.promotion import approve_model_version
    from miret_governance.governance.trust.signers import SigningKey

    client = MlflowClient()
    uri = explained(store, tmp_path)
    four_eyes = tmp_path / "four-eyes.toml"
    four_eyes.write_text(four_eyes_toml(prod_approvals=None))
    strict = load_policy(four_eyes)
    reviewer = SigningKey.load(key_pair("alice")[0])
    rejection = approve_model_version(uri, "prod", "reject", "no", strict, signing_key=reviewer)
    assert audit_model("credit-rf", strict).clean
    run = rejection.run_id
    client.set_tag(run, "governance.alias", "staging")
    report = audit_model("credit-rf", strict)
    assert findings(report) == [("decision_record", uri, "prod")]
    assert report.findings[0].message == (
        f"the decision record of run {run} disagrees with its run's tags: the record says "
        "governance.alias = 'prod', but the run is tagged 'staging'; the run was re-tagged, "
        "which hides it from searches by that tag: restore the tag"
    )
    with pytest.raises(BlockedError, match=f"run {run} disagrees with its run's tags"):
        promote_model_version(uri, "prod", strict)  # fail closed
    client.set_tag(run, "governance.alias", "prod")
    client.set_tag(run, "governance.ensemble_uri", "models:/other-rf/1")
    report = audit_model("credit-rf", strict)
    assert findings(report) == [("decision_record", uri, "prod")]
    assert "governance.ensemble_uri = 'models:/credit-rf/1', but the run is tagged " in (
        report.findings[0].message
    )
    client.set_tag(run, "governance.ensemble_uri", uri)
    promotion = promote_model_version(uri, "champion", strict)
    assert promotion.promoted and audit_model("credit-rf", strict).clean
    client.set_tag(promotion.gate.run_id, "governance.promotion.champion", "refused")
    report = audit_model("credit-rf", strict)
    assert findings(report) == [
        ("decision_record", uri, "champion"),
        ("alias", uri, "champion"),  # its only promotion no longer counts
    ]
    assert "says governance.promotion.champion = 'promoted', but the run is tagged 'refused'" in (
        report.findings[0].message
    )


def test_unknown_model(store, policy):
    with pytest.raises(GovernanceError, match="no registered model 'nope' with versions"):
        audit_model("nope", policy)
