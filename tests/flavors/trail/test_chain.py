"""The record chain of a registered model: each signed record names its count and the
digest of the one before; ``govern audit`` finds a record renamed away, a gap left by a
run removed from the store (which blocks promote until ``govern clear --chain``), and
tells a crashed writer from a withheld record; two concurrent writers take counts one
after the other.

Records are written with the library's writers on linked versions made without an
explain (``mlflow_store.linked_versions``): the chain does not depend on what a record
says."""

import contextlib
import json
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Param
from mlflow_store import linked_versions
from signing_keys import CI_KEY, ci_key, key_pair, keys_toml
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.errors import GateError
from miret_governance.flavors.trail import decisions
from miret_governance.flavors.trail.chain import chain_problems
from miret_governance.flavors.trail.decisions import (
    APPROVAL_EXPERIMENT,
    DIGEST_PARAM,
    LINK_EXPERIMENT,
    BlockedError,
    now_utc,
    pinned,
    read_record,
    record_in_new_run,
)
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.records import (
    ApprovalRecord,
    ChainLink,
    DecidedBy,
    EvidenceRef,
    LinkRecord,
    PolicyRef,
)
from miret_governance.governance.trust.signers import SigningKey

pytest_plugins = ["mlflow_store"]
MODEL = "credit-rf"
BY = DecidedBy(CI_KEY, None, "tester")


def _versions(store):
    """The client, an ensemble version and a surrogate version; the ensemble is not
    tagged with its surrogate, so its audit finds nothing but the chain's findings."""
    client = MlflowClient()
    linked_versions(store, {"fidelity": 0.95}, name=MODEL)
    client.delete_model_version_tag(MODEL, "1", "governance.surrogate")
    return (
        client,
        client.get_model_version(MODEL, "1"),
        client.get_model_version(f"{MODEL}-surrogate", "1"),
    )


def _link(client, ensemble, surrogate, key=None) -> str:
    record = LinkRecord(
        ensemble=pinned(ensemble), surrogate=pinned(surrogate), decided_by=BY, time=now_utc()
    )
    return record_in_new_run(client, LINK_EXPERIMENT, "LINK", {}, record, key or ci_key())


def _rejection(client, ensemble, surrogate) -> str:
    record = ApprovalRecord(
        ensemble=pinned(ensemble),
        surrogate=pinned(surrogate),
        evidence=EvidenceRef("e" * 64, None),
        policy=PolicyRef("trail", "p" * 64),
        alias="prod",
        decision="reject",
        comment="unstable on young applicants",
        decided_by=BY,
        time=now_utc(),
    )
    key = SigningKey.load(key_pair("alice")[0])
    return record_in_new_run(client, APPROVAL_EXPERIMENT, "REJECT", {}, record, key)


def _audit(tmp_path, cleared=None) -> tuple[int, list]:
    """``govern audit --json`` in-process: its exit code and its chain findings (and its
    cleared records appended to ``cleared``)."""
    done = CliRunner().invoke(
        app, ["audit", "--model-name", MODEL, "--policy", str(_policy(tmp_path)), "--json"]
    )
    report = json.loads(done.stdout)
    if cleared is not None:
        cleared += report["cleared"]
    return done.exit_code, [f for f in report["findings"] if f["kind"] == "chain"]


def _policy(tmp_path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(
        'name = "trail"\n[gates]\nmin_fidelity = 0.9\n' + keys_toml(approvers=("alice",))
    )
    return path


def _digest(client, run_id) -> str:
    return client.get_run(run_id).data.params[DIGEST_PARAM]


def test_each_record_names_its_count_and_the_digest_before(store, tmp_path):
    client, ensemble, surrogate = _versions(store)
    first, second = _link(client, ensemble, surrogate), _rejection(client, ensemble, surrogate)
    trusted = load_policy(_policy(tmp_path)).keys
    records = [read_record(client, run, trusted).record for run in (first, second)]
    assert records[0].chain == ChainLink(MODEL, 1, None)
    assert records[1].chain == ChainLink(MODEL, 2, _digest(client, first))
    params = client.get_run(second).data.params
    assert {k: v for k, v in params.items() if "chain" in k} == {
        "governance.record.chain_model": MODEL,
        "governance.record.chain_count": "0000000002",
        "governance.record.chain_previous": _digest(client, first),
    }
    raw = json.loads(records[0].to_json())
    assert raw["chain"] == {"count": 1, "model": MODEL, "previous": None}
    unchained = LinkRecord(
        ensemble=pinned(ensemble), surrogate=pinned(surrogate), decided_by=BY, time=now_utc()
    )
    assert "chain" not in json.loads(unchained.to_json())  # bytes of records before
    what_if = record_in_new_run(client, LINK_EXPERIMENT, "WHAT-IF", {}, unchained, None)
    assert read_record(client, what_if, trusted).record.chain is None
    assert decisions.chain_head(client, MODEL).info.run_id == second
    assert chain_problems(client, MODEL) == []
    junk = client.create_run(client.get_run(first).info.experiment_id).info.run_id
    forged = {"governance.record.chain_model": MODEL, "governance.record.chain_count": "z" * 10}
    client.log_batch(junk, params=[Param(k, v) for k, v in forged.items()])
    assert decisions.chain_head(client, MODEL).info.run_id == second  # sorted first, skipped


def test_a_rejection_renamed_away_on_sqlite_is_found_by_the_audit(store, tmp_path):
    client, ensemble, surrogate = _versions(store)
    _link(client, ensemble, surrogate)
    rejection = _rejection(client, ensemble, surrogate)
    hidden = client.get_experiment_by_name(APPROVAL_EXPERIMENT).experiment_id
    client.rename_experiment(hidden, "old-approvals")
    third = _link(client, ensemble, surrogate)  # the head it finds is the first link
    code, found = _audit(tmp_path)
    assert code == 1
    outside = (
        f"the approval record (reject @prod) of run {rejection} is in experiment "
        f"'old-approvals' (id {hidden}), not in a governance experiment: renamed or moved "
        "away, it is hidden from promote, the gates and the approvals; restore the "
        "experiment's name"
    )
    fork = (
        f"record 2 of the chain of {MODEL} is held by 2 runs ({rejection}, {third}): a fork "
        "(two writers took one count past the chain lock, or a run was forged)"
    )
    assert [f["message"] for f in found] == [outside, fork]
    assert found[0]["run_id"] == rejection and found[0]["version"] == f"models:/{MODEL}/1"


def test_a_removed_run_is_a_gap_blocking_promote_until_cleared_and_a_crash_is_not(store, tmp_path):
    client, ensemble, surrogate = _versions(store)
    runs = [_link(client, ensemble, surrogate) for _ in range(4)]
    crashed = client.get_run(runs[3])
    shutil.rmtree(Path(crashed.info.artifact_uri.removeprefix("file://"), "decision"))
    client.set_terminated(runs[3], "KILLED")  # bound, then killed before the files
    after = _link(client, ensemble, surrogate)
    assert client.get_run(after).data.params["governance.record.chain_previous"] == _digest(
        client, runs[3]
    )
    trusted = load_policy(_policy(tmp_path)).keys
    decision = read_record(client, runs[3], trusted)
    assert not decision.blocking
    assert decision.problem.endswith("was never written: its writer stopped first (run KILLED)")
    assert _audit(tmp_path) == (0, [])
    database = Path(MlflowClient().tracking_uri.removeprefix("sqlite:///"))
    with contextlib.closing(sqlite3.connect(database)) as db, db:
        for table in ("params", "tags", "runs"):  # the run gone from the store's database
            db.execute(f"DELETE FROM {table} WHERE run_uuid = ?", (runs[1],))
    code, found = _audit(tmp_path)
    assert code == 1
    gap = (
        f"record 2 of the chain of {MODEL} is missing between run {runs[0]} (record 1) "
        f"and run {runs[2]} (record 3): no run of any experiment, deleted ones included, "
        "is bound to it, so it was removed from the store's database (withheld, or "
        "garbage-collected after a deletion); a writer killed while it wrote keeps its "
        "run and count and leaves no gap"
    )
    assert [(f["message"], f["run_id"]) for f in found] == [(gap, None)]
    policy = load_policy(_policy(tmp_path))
    with pytest.raises(BlockedError) as refused:
        promote_model_version(f"models:/{MODEL}/1", "prod", policy)
    assert str(refused.value) == (
        f"refused (fail closed): {gap}; a break of the record chain of {MODEL} may be a "
        "decision someone hid, so nothing is promoted until it is restored or a key the "
        "policy trusts for decide clears it: govern clear --model-uri <the version being "
        "decided> --chain --reason <why> (the audit lists the clearance)"
    )
    clear = ["clear", "--model-uri", f"models:/{MODEL}/1", "--chain", "--reason", "restored"]
    mixed = CliRunner().invoke(app, [*clear, "--run-id", runs[0]])
    assert (mixed.exit_code, mixed.stderr) == (
        2,
        "error: --chain clears the record chain alone: drop --alias and --run-id\n",
    )
    done = CliRunner().invoke(app, [*clear, "--policy", str(_policy(tmp_path))])
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith(f"cleared a gap: {gap}\n1 record(s) cleared for")
    with pytest.raises(GateError, match="no linked surrogate"):  # past the chain
        promote_model_version(f"models:/{MODEL}/1", "prod", policy)
    cleared = []
    assert _audit(tmp_path, cleared) == (0, [])
    assert [(c["run_id"], c["problem"], c["cleared_by"], c["reason"]) for c in cleared] == [
        (None, gap, CI_KEY, "restored")
    ]


def test_concurrent_writers_take_counts_one_after_the_other(store):
    client, ensemble, surrogate = _versions(store)
    failures = []

    def write():
        try:
            for _ in range(2):
                _link(MlflowClient(), ensemble, surrogate)
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            failures.append(error)

    threads = [threading.Thread(target=write) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    runs = client.search_runs([client.get_experiment_by_name(LINK_EXPERIMENT).experiment_id])
    counts = sorted(int(r.data.params["governance.record.chain_count"]) for r in runs)
    assert counts == [1, 2, 3, 4]
    assert chain_problems(client, MODEL) == []
    assert client.search_registered_models(f"name LIKE '{MODEL}.%'") == []  # locks released
