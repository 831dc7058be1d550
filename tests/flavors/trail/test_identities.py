"""Keys bound to users (``[keys.<name>] users``) on a store without users (SQLite): a
bound key signs nothing there, since nobody can vouch for who holds it, and a record a
bound key signed counts only when it names a bound user as the one the server
authenticated; an approval by the promoting user does not count (four eyes by user).
Against an authenticated server: ``tests/test_server_identities.py``."""

import pytest
from gate_store import explained
from mlflow import MlflowClient
from signing_keys import key_pair, keys_toml

from miret_governance.flavors.gates.gate_evidence import checked_evidence
from miret_governance.flavors.gates.gating import gate_model_version, linked_surrogate
from miret_governance.flavors.store.registry import ENSEMBLE_URI_TAG, resolve_model_version
from miret_governance.flavors.trail.audit import audit_model
from miret_governance.flavors.trail.decisions import (
    APPROVAL_EXPERIMENT,
    GATE_EXPERIMENT,
    DecisionError,
    approval_state,
    decision_runs,
    new_record,
    read_record,
    record_in_new_run,
)
from miret_governance.flavors.trail.promotion import approve_model_version, promote_model_version
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.records import ApprovalRecord, DecidedBy
from miret_governance.governance.trust.signers import SigningKey

pytest_plugins = ["mlflow_store"]


def policy(tmp_path, bound: str = ""):
    """Gates, the CI key, approver keys alice and bob, one approval for @champion; with
    ``bound``, alice's key bound to that user (and the CI key to ``ci``)."""
    text = "[gates]\nmin_fidelity = 0.9\n" + keys_toml(approvers=("alice", "bob"))
    if bound:
        text = text.replace(
            'may_sign = ["approve"]', f'may_sign = ["approve"]\nusers = ["{bound}"]', 1
        )
        text = text.replace('"decide"]', '"decide"]\nusers = ["ci"]', 1)
    path = tmp_path / f"policy-{bound or 'unbound'}.toml"
    path.write_text(text + "\n[approvals]\nchampion = 1\n")
    return load_policy(path)


def key(name: str) -> SigningKey:
    return SigningKey.load(key_pair(name)[0])


def approval_by(client, uri, trusted, signer: str, user: str) -> str:
    """An approval of ``uri`` signed with ``signer``'s key, naming ``user`` as the user the
    server vouched for: what a client writes (the record is the client's to write)."""
    version = resolve_model_version(client, uri)
    surrogate = linked_surrogate(client, version)
    checked = checked_evidence(client, version, surrogate, trusted.keys, current=True)
    by = DecidedBy(signer, key(signer).fingerprint, user, user)
    record = new_record(
        ApprovalRecord, version, surrogate, checked, trusted, by,
        alias="champion", decision="approve", comment="ok",
    )  # fmt: skip
    return record_in_new_run(
        client, APPROVAL_EXPERIMENT, "approval", {ENSEMBLE_URI_TAG: uri}, record, key(signer)
    )


def test_a_bound_key_signs_nothing_where_no_server_can_say_who_holds_it(store, tmp_path):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    bound = policy(tmp_path, bound="alice")
    cannot_say = "the tracking store has no users to say who you are: .*; nothing was recorded"
    with pytest.raises(
        DecisionError, match="key 'alice' may be used only by alice; .*" + cannot_say
    ):
        approve_model_version(uri, "champion", "approve", "ok", bound, signing_key=key("alice"))
    with pytest.raises(
        DecisionError, match="key 'test-ci' may be used only by ci; .*" + cannot_say
    ):
        gate_model_version(uri, bound)
    assert decision_runs(client, APPROVAL_EXPERIMENT, uri) == []
    assert decision_runs(client, GATE_EXPERIMENT, uri) == []
    # bob's key is bound to nobody: it signs wherever, as before
    assert (
        approve_model_version(
            uri, "champion", "approve", "ok", bound, signing_key=key("bob")
        ).signer
        == "bob"
    )


def test_a_record_of_a_bound_key_by_another_user_counts_for_nothing_and_is_reported(
    store, tmp_path
):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    unbound, bound = policy(tmp_path), policy(tmp_path, bound="alice")
    before = approve_model_version(  # before the binding: no server named the user
        uri, "champion", "approve", "ok", unbound, signing_key=key("alice")
    )
    forged = approval_by(client, uri, unbound, "alice", "mallory")  # another user, vouched
    assert read_record(client, forged, unbound.keys).valid
    for run_id, who in (
        (before.run_id, "no server vouched"),
        (forged, "the server said 'mallory'"),
    ):
        decision = read_record(client, run_id, bound.keys)
        assert decision.misused and not decision.blocking and decision.signer is None
        assert f"key 'alice' may be used only by alice, and {who}" in decision.problem
    version = resolve_model_version(client, uri)
    digest = checked_evidence(
        client, version, linked_surrogate(client, version), bound.keys, current=True
    ).digest
    state = approval_state(client, version, "champion", digest, bound.keys, 1)
    assert not state.approved and "has 0 (none)" in state.reason
    assert approval_state(client, version, "champion", digest, unbound.keys, 1).approved
    report = audit_model("credit-rf", bound)
    reported = {f.run_id: f for f in report.findings if f.kind == "decision_record"}
    assert set(reported) == {before.run_id, forged}


def test_an_approval_by_the_promoting_user_does_not_count(store, tmp_path):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    trusted = policy(tmp_path)
    approval_by(client, uri, trusted, "alice", "carol")
    version = resolve_model_version(client, uri)
    digest = checked_evidence(
        client, version, linked_surrogate(client, version), trusted.keys, current=True
    ).digest
    own = approval_state(client, version, "champion", digest, trusted.keys, 1, promoter="carol")
    assert not own.approved
    assert own.reason.endswith(
        "has 0 (none); the approval by key alice does not count: the server says 'carol' made "
        "it, who promotes (four eyes); approvers run: govern approve --model-uri "
        f"{uri} --alias champion --decision approve --comment <text>"
    )
    assert approval_state(
        client, version, "champion", digest, trusted.keys, 1, promoter="dan"
    ).approved
    # where no server vouches for the promoter, names are not compared
    assert promote_model_version(uri, "champion", trusted).promoted
