"""The promotion trail: signed decision records naming who decided, compare-and-set
promotion (two real processes), four-eyes approvals, and decisions shown as based on
superseded evidence once a new surrogate is linked."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gate_store import GOOD, explain, explained, register_ensemble
from mlflow import MlflowClient
from signing_keys import CI_KEY, ci_key, key_pair, keys_toml

from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.store.registry import link_surrogate, version_uri
from miret_governance.flavors.trail import decisions, promotion_lock
from miret_governance.flavors.trail.decisions import (
    DecisionError,
    mlflow_user,
    read_record,
)
from miret_governance.flavors.trail.promotion import approve_model_version, promote_model_version
from miret_governance.flavors.trail.promotion_lock import ConcurrentPromotionError, lock_name
from miret_governance.governance.trust.keyring import SignatureError, Signer
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.records import DecidedBy, GateRecord, PolicyRef
from miret_governance.governance.trust.signers import SigningKey

pytest_plugins = ["mlflow_store"]


def policy_file(tmp_path, approvals="", approvers=(), name="trail"):
    text = f'name = "{name}"\n[gates]\nmin_fidelity = 0.9\n' + keys_toml(approvers=approvers)
    if approvals:
        text += f"\n[approvals]\n{approvals}\n"
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def approver(name) -> SigningKey:
    return SigningKey.load(key_pair(name)[0])


def test_gate_run_holds_a_signed_record_naming_who_decided(store, tmp_path, monkeypatch):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    policy = load_policy(policy_file(tmp_path))
    outcome = gate_model_version(uri, policy)
    decision = read_record(client, outcome.run_id, policy.keys)
    assert decision.valid and decision.signer.name == CI_KEY
    record = decision.record
    ci = ci_key().fingerprint
    assert isinstance(record, GateRecord) and record.result == "PASS"
    assert record.ensemble.uri == uri
    assert record.surrogate.uri == "models:/credit-rf-surrogate/1"
    assert record.evidence.digest == outcome.evaluation.evidence_digest
    assert record.evidence.signer == Signer(CI_KEY, ci)
    assert record.policy == PolicyRef(policy.label, policy.digest)
    assert record.decided_by == DecidedBy(CI_KEY, ci, mlflow_user(client))
    run = client.get_run(outcome.run_id)
    tags = run.data.tags
    assert tags["mlflow.user"] == run.info.user_id == mlflow_user(client) != ""
    assert tags["governance.decision_signer"] == CI_KEY
    text = client.get_model_version("credit-rf", "1").description
    assert f"key {CI_KEY.replace('-', chr(92) + '-')}, user" in text

    monkeypatch.delenv("GOVERN_SIGNING_KEY")
    what_if = gate_model_version(uri, policy)
    unsigned = read_record(client, what_if.run_id, policy.keys)
    assert not unsigned.valid and "unsigned" in unsigned.problem
    assert unsigned.record.decided_by.key_fingerprint is None
    assert client.get_run(what_if.run_id).data.tags["governance.decision_signer"] == "unsigned"


def test_altered_record_does_not_verify(store, tmp_path):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    policy = load_policy(policy_file(tmp_path))
    outcome = gate_model_version(uri, policy)
    run = client.get_run(outcome.run_id)
    record = Path(run.info.artifact_uri.removeprefix("file://"), "decision", "record.json")
    data = json.loads(record.read_text())
    data["result"] = "FAIL"
    record.write_text(json.dumps(data, indent=1, sort_keys=True))
    decision = read_record(client, outcome.run_id, policy.keys)
    assert not decision.valid and decision.signer is None and decision.blocking
    assert decision.problem.startswith(
        f"the decision record of run {outcome.run_id} was replaced after it was written"
    )
    with pytest.raises(decisions.BlockedError, match=f"run {outcome.run_id} was replaced"):
        gate_model_version(uri, policy)


def test_promote_without_a_key_records_nothing(store, tmp_path, monkeypatch):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    policy = load_policy(policy_file(tmp_path))
    monkeypatch.delenv("GOVERN_SIGNING_KEY")
    with pytest.raises(DecisionError, match="needs a signing key trusted for decide"):
        promote_model_version(uri, "champion", policy)
    untrusted = approver("mallory")
    with pytest.raises(SignatureError, match="the decision promote records is signed by key"):
        promote_model_version(uri, "champion", policy, signing_key=untrusted)
    assert client.get_experiment_by_name("governance-gates") is None
    assert client.get_model_version("credit-rf", "1").tags == {
        "governance.surrogate": "models:/credit-rf-surrogate/1"
    }
    assert client.get_registered_model("credit-rf").aliases == {}


def test_cli_promote_without_a_key_exits_2(store, tmp_path, monkeypatch):
    """In-process (typer's runner): the console script's own exit 2 from a child process
    is test_concurrent_promotions_exactly_one_succeeds's loser."""
    from typer.testing import CliRunner

    from miret_governance.cli.app import app

    uri = explained(store, tmp_path)
    monkeypatch.delenv("GOVERN_SIGNING_KEY")
    done = CliRunner().invoke(
        app,
        ["promote", "--model-uri", uri, "--alias", "champion"]
        + ["--policy", str(policy_file(tmp_path))],
    )
    assert done.exit_code == 2, done.output
    assert done.stdout == ""
    assert "promote records a signed decision and needs a signing key" in done.stderr
    assert "nothing was recorded" in done.stderr
    assert MlflowClient().get_experiment_by_name("governance-gates") is None


def test_concurrent_promotions_exactly_one_succeeds(store, tmp_path, warm_bin):
    """Two `govern promote` processes of v1 and v2 to @prod on one SQLite store, both
    expecting the alias unset: whichever runs first moves it; the other exits 2 naming
    the concurrent promotion and leaves no promotion record or tag."""
    client = MlflowClient()
    uris = [explained(store, tmp_path), explained(store, tmp_path)]
    policy = policy_file(tmp_path)
    processes = [
        subprocess.Popen(
            [warm_bin / "govern", "promote", "--model-uri", uri]
            + ["--alias", "prod", "--policy", str(policy), "--expect-holder", "none"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for uri in uris
    ]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in processes]
    codes = [code for code, _, _ in results]
    assert sorted(codes) == [0, 2], results
    winner, loser = (1, 2) if codes[0] == 0 else (2, 1)
    assert client.get_model_version_by_alias("credit-rf", "prod").version == winner
    message = results[loser - 1][2]
    assert "another promotion to @prod is running" in message or (
        f"@prod moved from no version to version {winner} by the promotion of run" in message
    ), message
    assert "nothing was recorded" in message
    assert "governance.promotion.prod" not in client.get_model_version("credit-rf", loser).tags
    runs = client.search_runs(
        [client.get_experiment_by_name("governance-gates").experiment_id],
        filter_string="tags.`governance.promotion.prod` = 'promoted'",
    )
    assert [r.data.tags["governance.ensemble_uri"] for r in runs] == [uris[winner - 1]]
    assert len(client.search_runs([runs[0].info.experiment_id])) == 1
    assert not client.search_registered_models(f"name = '{lock_name('credit-rf', 'prod')}'")


def test_a_held_lock_refuses_and_a_stale_one_is_taken_over(store, tmp_path, monkeypatch):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    policy = load_policy(policy_file(tmp_path))
    lock = lock_name("credit-rf", "prod")
    key = ci_key()  # a lock of govern promote: its holder signed
    tags = promotion_lock._holder_tags(lock, "models:/x/9", key, owner="4242@ci")
    client.create_registered_model(lock, tags=tags)
    with pytest.raises(ConcurrentPromotionError) as refused:
        promote_model_version(uri, "prod", policy)
    assert str(refused.value).startswith(
        "another promotion to @prod is running: models:/x/9 by process 4242@ci since "
    )
    assert client.get_experiment_by_name("governance-gates") is None
    monkeypatch.setattr(promotion_lock, "LOCK_TTL_SECONDS", -1.0)
    promoted = promote_model_version(uri, "prod", policy)
    assert promoted.promoted
    taken = read_record(client, promoted.gate.run_id, policy.keys).record.lock_taken_over
    assert taken["holder"] == "4242@ci" and taken["reason"].startswith("it is older than -1.0 s")
    assert not client.search_registered_models(f"name = '{lock}'")


def test_a_lock_of_a_gone_process_of_this_host_is_taken_over(store, tmp_path):
    import socket
    import subprocess

    client = MlflowClient()
    uri = explained(store, tmp_path)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    owner = f"{gone.stdout.strip()}@{socket.gethostname()}"
    lock = lock_name("credit-rf", "prod")
    key = ci_key()
    client.create_registered_model(
        lock, tags=promotion_lock._holder_tags(lock, "models:/x/9", key, owner=owner)
    )
    policy = load_policy(policy_file(tmp_path))
    promoted = promote_model_version(uri, "prod", policy)
    assert promoted.promoted
    taken = read_record(client, promoted.gate.run_id, policy.keys).record.lock_taken_over
    assert taken["reason"] == f"its process {gone.stdout.strip()} on this host is gone"
    assert not client.search_registered_models(f"name = '{lock}'")


def test_the_alias_moved_since_the_promotion_started(store, tmp_path):
    client = MlflowClient()
    explained(store, tmp_path)
    uri = explained(store, tmp_path)
    policy = load_policy(policy_file(tmp_path))
    first = promote_model_version("models:/credit-rf/1", "prod", policy)
    with pytest.raises(ConcurrentPromotionError) as moved:
        promote_model_version(uri, "prod", policy, expected_holder="none")
    assert str(moved.value).startswith(
        f"@prod moved from no version to version 1 by the promotion of run {first.gate.run_id}"
    )
    assert "governance.last_gate" not in client.get_model_version("credit-rf", "2").tags
    assert promote_model_version(uri, "prod", policy, expected_holder="1").promoted


def test_four_eyes(store, tmp_path):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    policy = load_policy(
        policy_file(tmp_path, approvals="champion = 2", approvers=("alice", "bob"))
    )
    refused = promote_model_version(uri, "champion", policy)
    assert not refused.promoted and refused.alias_version is None
    assert refused.reason.startswith(
        "every gate passed; @champion needs 2 approvals of the current evidence by approver "
        "keys the policy trusts, has 0 (none)"
    )
    record = read_record(client, refused.gate.run_id, policy.keys).record
    assert (record.kind, record.decision, record.result) == ("promotion", "refused", "PASS")
    assert client.get_model_version("credit-rf", "1").tags["governance.promotion.champion"] == (
        "refused"
    )

    with pytest.raises(SignatureError, match="the decision approve records is signed by key"):
        approve_model_version(uri, "champion", "approve", "ok", policy, signing_key=approver("eve"))
    with pytest.raises(SignatureError, match="'test-ci', which the policy trusts to sign"):
        approve_model_version(uri, "champion", "approve", "ok", policy)
    alice = approve_model_version(
        uri, "champion", "approve", "rules read", policy, signing_key=approver("alice")
    )
    assert (alice.signer, alice.decision) == ("alice", "approve")
    approve_model_version(
        uri, "champion", "reject", "fidelity too low", policy, signing_key=approver("bob")
    )
    blocked = promote_model_version(uri, "champion", policy)
    assert not blocked.promoted
    assert blocked.reason == "every gate passed; @champion was rejected by bob (fidelity too low)"
    approve_model_version(
        uri, "champion", "approve", "checked again", policy, signing_key=approver("bob")
    )
    promoted = promote_model_version(uri, "champion", policy)
    assert promoted.promoted and promoted.alias_version == "1"
    assert promoted.reason == "every gate passed; approved by alice, bob"
    record = read_record(client, promoted.gate.run_id, policy.keys).record
    assert [(a["name"], a["decision"]) for a in record.approvals] == [
        ("alice", "approve"),
        ("bob", "approve"),
    ]
    report = client.download_artifacts(promoted.gate.run_id, "gate_report.md")
    section = Path(report).read_text().split("## Approvals for @champion\n\n")[1]
    lines = section.split("\n\nPolicy digest")[0].splitlines()
    assert lines[:4] == [
        "2 needed: approved by alice, bob.",
        "",
        "| Reviewer | Decision | When | Comment |",
        "|---|---|---|---|",
    ]
    assert [line.split(" | ")[1::2] for line in lines[4:]] == [
        ["approve", "rules read |"],
        ["approve", "checked again |"],
    ]
    assert lines[4].startswith("| key 'alice', user ")
    refused_report = client.download_artifacts(blocked.gate.run_id, "gate_report.md")
    assert (
        "2 needed: @champion was rejected by bob (fidelity too low).\n"
        in Path(refused_report).read_text()
    )
    text = client.get_model_version("credit-rf", "1").description
    assert "| Approval `@champion` | **approve** by key alice, user " in text
    assert ": rules read |" in text and ": checked again |" in text
    assert "fidelity too low" not in text  # bob's latest decision replaced it


def test_a_replayed_approval_or_a_deleted_rejection_does_not_unblock(store, tmp_path, monkeypatch):
    """QA: alice approved, bob approved, alice rejected; an insider logged a copy of
    alice's old approval in a new run (approvals went by the run's start time) or deleted
    her rejection run (searches skipped deleted runs), and promote went through. Pages of
    two runs: the rejection is on the second (QA round 2 hid one behind 5,000 junk runs
    when only the first page was read)."""
    monkeypatch.setattr(decisions, "DECISION_PAGE", 2)
    client = MlflowClient()
    uri = explained(store, tmp_path)
    policy = load_policy(
        policy_file(tmp_path, approvals="champion = 2", approvers=("alice", "bob"))
    )
    first = approve_model_version(
        uri, "champion", "approve", "ok", policy, signing_key=approver("alice")
    )
    approve_model_version(uri, "champion", "approve", "ok", policy, signing_key=approver("bob"))
    rejection = approve_model_version(
        uri, "champion", "reject", "on second thought", policy, signing_key=approver("alice")
    )
    blocked = "every gate passed; @champion was rejected by alice (on second thought)"
    assert promote_model_version(uri, "champion", policy).reason == blocked

    copied = client.download_artifacts(first.run_id, decisions.RECORD_FOLDER, str(tmp_path))
    old = client.get_run(first.run_id)
    replay = client.create_run(old.info.experiment_id, tags=old.data.tags)
    client.log_artifacts(replay.info.run_id, copied, decisions.RECORD_FOLDER)
    client.set_terminated(replay.info.run_id)
    unbound = f"run {replay.info.run_id} is not bound to its run"
    with pytest.raises(decisions.BlockedError, match=unbound):  # fail closed
        promote_model_version(uri, "champion", policy)
    _, cleared = decisions.clear_records(uri, "a replayed copy", policy, ci_key())
    assert [d.run_id for d in cleared] == [replay.info.run_id]
    assert promote_model_version(uri, "champion", policy).reason == blocked

    client.delete_run(rejection.run_id)
    assert promote_model_version(uri, "champion", policy).reason == blocked
    assert not client.get_registered_model("credit-rf").aliases


def test_a_rejection_of_newer_evidence_blocks_after_the_link_is_moved_back(store, tmp_path):
    """QA: alice approved v1 on surrogate 1; CI explained v1 again (surrogate 2) and alice
    rejected it there; an insider moved the link tags back to surrogate 1, whose approval
    then counted and promote went through. A rejection blocks on any evidence of the
    version until its key approves again."""
    client = MlflowClient()
    ensemble = register_ensemble(store)
    first = explain(store, ensemble, tmp_path)
    uri = "models:/credit-rf/1"
    policy = load_policy(policy_file(tmp_path, approvals="champion = 1", approvers=("alice",)))
    approve_model_version(uri, "champion", "approve", "ok", policy, signing_key=approver("alice"))
    newer = explain(store, ensemble, tmp_path, metrics=dict(GOOD, test_fidelity=0.96), link=False)
    link_surrogate(client, client.get_model_version("credit-rf", "1"), newer)
    approve_model_version(
        uri, "champion", "reject", "fairness review", policy, signing_key=approver("alice")
    )
    blocked = "every gate passed; @champion was rejected by alice (fairness review)"
    assert promote_model_version(uri, "champion", policy).reason == blocked
    client.set_model_version_tag("credit-rf", "1", "governance.surrogate", version_uri(first))
    client.delete_model_version_tag(first.name, first.version, "governance.superseded_by")
    assert promote_model_version(uri, "champion", policy).reason == blocked
    assert not client.get_registered_model("credit-rf").aliases
    approve_model_version(
        uri, "champion", "approve", "fixed", policy, signing_key=approver("alice")
    )
    assert promote_model_version(uri, "champion", policy).promoted  # on surrogate 1 again


def test_an_approval_of_another_version_retagged_is_not_listed_as_this_ones(store, tmp_path):
    """QA: an insider copied v2's signed approval into a run tagged with v1; govern show
    listed it as an approval of v1."""
    client = MlflowClient()
    explained(store, tmp_path)
    v2 = explained(store, tmp_path)
    policy = load_policy(policy_file(tmp_path, approvers=("alice",)))
    approval = approve_model_version(
        v2, "champion", "approve", "ok", policy, signing_key=approver("alice")
    )
    copied = client.download_artifacts(approval.run_id, decisions.RECORD_FOLDER, str(tmp_path))
    old = client.get_run(approval.run_id)
    tags = {**old.data.tags, "governance.ensemble_uri": "models:/credit-rf/1"}
    replay = client.create_run(old.info.experiment_id, tags=tags)
    client.log_artifacts(replay.info.run_id, copied, decisions.RECORD_FOLDER)
    v1 = client.get_model_version("credit-rf", "1")
    (listed,) = decisions.approvals_of(client, v1, policy.keys, "models:/credit-rf-surrogate/1")
    assert (listed["run_id"], listed["signed_by"]) == (replay.info.run_id, None)
    assert listed["problem"] == (
        f"the decision record of run {replay.info.run_id} is not bound to its run (no "
        "parameter governance.record.sha256): it was not written by govern, or by a version "
        "before records were bound"
    )
    (own,) = decisions.approvals_of(
        client, client.get_model_version("credit-rf", "2"), policy.keys, ""
    )
    assert own["signed_by"]["name"] == "alice" and own["problem"] is None


def test_superseded_decisions_are_shown_as_such(store, tmp_path):
    client = MlflowClient()
    ensemble = register_ensemble(store)
    explain(store, ensemble, tmp_path)
    uri = "models:/credit-rf/1"
    policy = load_policy(policy_file(tmp_path))
    promoted = promote_model_version(uri, "champion", policy)
    assert promoted.promoted
    newer = explain(store, ensemble, tmp_path, metrics=dict(GOOD, test_fidelity=0.96), link=False)
    link_surrogate(client, client.get_model_version("credit-rf", "1"), newer)
    old = client.get_model_version("credit-rf-surrogate", "1")
    assert old.tags["governance.superseded_by"] == "models:/credit-rf-surrogate/2"
    assert old.description.startswith(
        "**Superseded** by [credit\\-rf\\-surrogate v2](#/models/credit-rf-surrogate/versions/2)"
    )
    gate_model_version(uri, policy)
    text = client.get_model_version("credit-rf", "1").description
    row = next(line for line in text.splitlines() if line.startswith("| Promotion `@champion`"))
    assert row.startswith(
        "| Promotion `@champion` | **based on superseded evidence** of "
        "[credit\\-rf\\-surrogate v1](#/models/credit-rf-surrogate/versions/1) (digest `"
    )
    assert "**promoted**" not in text
    surrogate_text = client.get_model_version("credit-rf-surrogate", "2").description
    assert row in surrogate_text.splitlines()
    gate_row = next(line for line in text.splitlines() if line.startswith("| What-if gate"))
    assert gate_row.startswith("| What-if gate (no alias) | **PASS** under policy ")
