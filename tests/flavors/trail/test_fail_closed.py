"""Fail closed: records an insider overwrites, re-tags or plants through the public MLflow
client (no private key they lack) block gate, promote and the audit's verdict, naming the
run, until a key the policy trusts for decide clears them; junk never crashes a command;
the audit reads every page of versions and reports a promotion under another policy."""

import hashlib
import json
import re
import sqlite3
import tempfile
import time
from pathlib import Path

import pytest
from gate_store import GOOD, explain, explained, register_ensemble
from mlflow import MlflowClient
from mlflow.entities import Param
from mlflow_store import clone_store_folder, register_wisconsin_rf, store_folder
from signing_keys import ci_key, four_eyes_toml, key_pair, keys_toml
from typer.testing import CliRunner

from miret_governance.flavors.errors import GateError
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.explain.fit_params import FitParams
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.trail import decisions, links
from miret_governance.flavors.trail.audit import audit_model
from miret_governance.flavors.trail.decisions import BlockedError
from miret_governance.flavors.trail.promotion import approve_model_version, promote_model_version
from miret_governance.flavors.trail.promotion_lock import lock_name
from miret_governance.flavors.trail.supersede import Superseded, supersede_trust, superseded_by_link
from miret_governance.governance.miret.fit.estimator import LEGACY_PARAMS
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.signers import SigningKey

pytest_plugins = ["mlflow_store"]
FEATURES = ["mean radius", "mean texture", "mean perimeter", "mean smoothness", "worst area"]
LENIENT = "[gates]\nmin_fidelity = 0.5\nmax_features = 5\n"
ORGANISATION = 'name = "organisation"\n[gates]\nmin_fidelity = 0.5\nmax_features = 2\n'
OLD_GRID = LEGACY_PARAMS["alpha_grid"]
URI = "models:/credit-rf/1"
REPLACED = (
    "the decision record of run {run} was replaced after it was written (its record is not "
    "the one its run's parameters governance.record.sha256 and "
    "governance.record.signature_sha256 bound)"
)
NOT_BOUND = (
    "the decision record of run {run} is not bound to its run (no parameter "
    "governance.record.sha256): it was not written by govern, or by a version before "
    "records were bound"
)
BLOCKED = (
    "refused (fail closed): {problem}; a record about credit-rf that does not verify may be a "
    "decision someone hid, so nothing is decided until it is restored or a key the policy "
    "trusts for decide clears it: govern clear --model-uri <the version being decided> "
    "--reason <why> (the audit lists the clearance)"
)


def govern(*args):
    from miret_governance.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args])


def said(result) -> str:
    """A CLI result's output (stdout and stderr) with its whitespace collapsed."""
    return " ".join(result.output.split())


def findings(report):
    return [(f.kind, f.version, f.alias, f.run_id) for f in report.findings]


def overwrite(client, run_id, tmp_path, content: bytes = b"{}") -> None:
    """The insider replaces ``decision/record.json`` of ``run_id`` (public client API)."""
    folder = Path(tempfile.mkdtemp(prefix="overwrite-", dir=tmp_path))
    (folder / decisions.RECORD_FILE).write_bytes(content)
    client.log_artifacts(run_id, str(folder), decisions.RECORD_FOLDER)


# ---------------------------------------------------------------------- 1. link rollback
@pytest.fixture(scope="module")
def explained_twice(tmp_path_factory, migrated_store, breast_cancer):
    """A module store folder: credit-rf v1 (5 features) explained by the CI key
    (credit-rf-surrogate v1, one feature used), the lenient and the organisation's policy
    trusting the CI key; the organisation's policy (at most 2 features) passes it. Then CI
    explains v1 again (alpha 0: three features, credit-rf-surrogate v2), which fails the
    organisation's policy. Explained once; each test rolls back its own copy (``honest``,
    :func:`roll_back`)."""
    root = tmp_path_factory.mktemp("fail-closed-honest")
    with store_folder(root, template=migrated_store) as experiment:
        register_wisconsin_rf(breast_cancer, FEATURES, 400, n_estimators=5)
        (root / "lenient.toml").write_text(LENIENT + keys_toml())
        (root / "organisation.toml").write_text(ORGANISATION + keys_toml())
        # the old default grid (with alpha 0.8) keeps this explanation at one feature
        explain_model_version(
            URI, "data.csv", target="label", params=FitParams(time_limit=2, alpha_grid=OLD_GRID)
        )
        organisation = load_policy(root / "organisation.toml")
        assert gate_model_version(URI, organisation).evaluation.all_passed
        newer = explain_model_version(
            URI, "data.csv", target="label", time_limit=5, force=True, alpha=0.0
        )
        assert newer.surrogate_uri == "models:/credit-rf-surrogate/2"
        assert not gate_model_version(URI, organisation).evaluation.all_passed
        client = MlflowClient()
        link = links.latest_link(
            client, client.get_model_version("credit-rf", "1"), organisation.keys
        )
        assert link.record.surrogate.uri == "models:/credit-rf-surrogate/2"
    return {"root": root, "experiment": experiment, "link_run": link.run_id}


@pytest.fixture
def honest(explained_twice, tmp_path, monkeypatch):
    """This test's copy of ``explained_twice``; the organisation's policy."""
    clone_store_folder(explained_twice["root"], tmp_path)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", explained_twice["experiment"])
    return load_policy(tmp_path / "organisation.toml")


def roll_back(explained_twice, tmp_path) -> str:
    """The issue's insider, after CI explained v1 again (``explained_twice``): overwrite
    the newest signed link record with ``{}`` and point governance.surrogate back at the
    older CI-signed explanation. Returns the overwritten link run."""
    client = MlflowClient()
    run = explained_twice["link_run"]
    overwrite(client, run, tmp_path)
    client.set_model_version_tag(
        "credit-rf", "1", "governance.surrogate", "models:/credit-rf-surrogate/1"
    )
    client.delete_model_version_tag("credit-rf-surrogate", "1", "governance.superseded_by")
    return run


def test_a_link_record_overwritten_to_roll_back_the_explanation_blocks(
    honest, explained_twice, tmp_path
):
    client = MlflowClient()
    organisation = honest
    run = roll_back(explained_twice, tmp_path)

    problem = REPLACED.format(run=run)
    blocked = BLOCKED.format(problem=problem)
    with pytest.raises(BlockedError) as refused:
        gate_model_version(URI, organisation)
    assert str(refused.value) == blocked
    with pytest.raises(BlockedError) as refused:
        promote_model_version(URI, "prod", organisation)
    assert str(refused.value) == blocked
    for command in (("gate",), ("promote", "--alias", "prod")):
        result = govern(*command, "--model-uri", URI, "--policy", "organisation.toml")
        assert result.exit_code == 2, result.output
        assert f"error: {blocked}" in said(result), command
    assert client.get_registered_model("credit-rf").aliases == {}
    assert not client.search_registered_models(f"name = '{lock_name('credit-rf', 'prod')}'")

    report = audit_model("credit-rf", organisation)
    assert ("decision_record", URI, None, run) in findings(report)
    (finding,) = [f for f in report.findings if f.run_id == run]
    assert finding.message == problem
    result = govern("audit", "--model-name", "credit-rf", "--policy", "organisation.toml")
    assert result.exit_code == 1, result.output
    assert f"FINDING decision_record {URI} (run {run}): {problem}" in said(result)

    reason = "link record overwritten; CI explains again"
    result = govern(
        "clear", "--model-uri", URI, "--reason", reason, "--policy", "organisation.toml"
    )
    assert result.exit_code == 0, result.output
    assert f"cleared run {run}: {problem}" in said(result)
    assert f"1 record(s) cleared for {URI}; clearance run " in said(result)
    report = audit_model("credit-rf", organisation)
    assert run not in [f.run_id for f in report.findings]
    (cleared,) = report.cleared
    (clearance,) = decisions.clearance_runs(client, "credit-rf")
    assert cleared == {
        "run_id": run,
        "problem": problem,
        "clearance_run_id": clearance.info.run_id,
        "cleared_by": "test-ci",
        "time": cleared["time"],
        "reason": reason,
    }
    result = govern("audit", "--model-name", "credit-rf", "--policy", "organisation.toml", "--json")
    assert json.loads(result.stdout)["cleared"] == report.cleared


def test_a_cleared_link_record_does_not_make_the_older_explanation_current(
    honest, explained_twice, tmp_path
):
    """Clearing the overwritten newest link sets it aside; it must not make the older
    link record current (flavors.links: "overwriting the newest one must not make an
    older one current"): the tag moved back by hand is refused until CI explains again."""
    organisation = honest
    roll_back(explained_twice, tmp_path)
    decisions.clear_records(URI, "overwritten", organisation, ci_key())
    unknown = (
        f"a link record of {URI} was cleared \\(.*\\) without being readable, so which "
        "explanation is current is unknown"
    )
    with pytest.raises(GateError, match=unknown):
        gate_model_version(URI, organisation)
    with pytest.raises(GateError, match=unknown):  # the alias stays unset
        promote_model_version(URI, "prod", organisation)
    assert MlflowClient().get_registered_model("credit-rf").aliases == {}
    again = explain_model_version(URI, "data.csv", target="label", time_limit=5, alpha=0.0)
    assert again.reused and again.surrogate_uri == "models:/credit-rf-surrogate/2"
    assert not gate_model_version(URI, organisation).evaluation.all_passed


def test_a_deleted_newest_link_does_not_make_the_older_explanation_current(store, tmp_path):
    """The same rollback with delete_run instead of an overwrite: deleted link runs are
    read, so the newest signed link still names the newer explanation."""
    client = MlflowClient()
    ci = ci_key()
    ensemble = register_ensemble(store)
    older = explain(store, ensemble, tmp_path)
    links.record_link(client, ensemble, older, ci)
    newer = explain(store, ensemble, tmp_path, metrics=dict(GOOD, test_fidelity=0.96))
    run = links.record_link(client, ensemble, newer, ci)
    client.delete_run(run)
    client.set_model_version_tag(
        "credit-rf", "1", "governance.surrogate", "models:/credit-rf-surrogate/1"
    )
    policy = tmp_path / "policy.toml"
    policy.write_text("[gates]\nmin_fidelity = 0.9\n" + keys_toml())
    with pytest.raises(GateError) as refused:
        gate_model_version(URI, load_policy(policy))
    assert str(refused.value).startswith(
        f"{URI} is tagged governance.surrogate = models:/credit-rf-surrogate/1, but the "
        f"latest link that explain signed (run {run}, "
    )
    assert "is to models:/credit-rf-surrogate/2: the tag was changed since" in str(refused.value)


# ---------------------------------------------------------------------- 2. rejection
def alice() -> SigningKey:
    return SigningKey.load(key_pair("alice")[0])


@pytest.fixture(scope="module")
def rejected(tmp_path_factory, migrated_store):
    """A module store folder: @prod needs one approval (the four-eyes policy: alice may
    approve only, the CI key explain and decide); alice approved credit-rf v1 for @prod,
    then rejected it, and promote refuses. Made once; each test tampers with its own copy
    (``four_eyes``)."""
    root = tmp_path_factory.mktemp("fail-closed-rejected")
    with store_folder(root, template=migrated_store) as experiment:
        path = root / "four-eyes.toml"
        path.write_text(four_eyes_toml())
        policy = load_policy(path)
        uri = explained(experiment, root)
        approve_model_version(uri, "prod", "approve", "rules read", policy, signing_key=alice())
        rejection = approve_model_version(
            uri, "prod", "reject", "fairness review", policy, signing_key=alice()
        )
        refused = promote_model_version(uri, "prod", policy)
        assert not refused.promoted and refused.alias_version is None
        assert refused.reason == "every gate passed; @prod was rejected by alice (fairness review)"
    return {"root": root, "experiment": experiment, "uri": uri, "run": rejection.run_id}


@pytest.fixture
def four_eyes(rejected, tmp_path, monkeypatch):
    """This test's copy of ``rejected``; the four-eyes policy."""
    clone_store_folder(rejected["root"], tmp_path)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", rejected["experiment"])
    return load_policy(tmp_path / "four-eyes.toml")


@pytest.mark.parametrize(
    "tamper", ["overwrite-and-retag", "overwrite", "retag", "overwrite-and-delete"]
)
def test_a_hidden_rejection_blocks_promote_until_cleared(rejected, tmp_path, four_eyes, tamper):
    client = MlflowClient()
    uri = rejected["uri"]
    run = rejected["run"]
    if tamper.startswith("overwrite"):
        overwrite(client, run, tmp_path)
    if tamper.endswith("retag"):
        client.set_tag(run, "governance.ensemble_uri", "models:/other-rf/1")
    if tamper.endswith("delete"):  # deleted runs are read too
        client.delete_run(run)
    if tamper == "retag":
        problem = (
            f"the decision record of run {run} disagrees with its run's tags: the record says "
            "governance.ensemble_uri = 'models:/credit-rf/1', but the run is tagged "
            "'models:/other-rf/1'; the run was re-tagged, which hides it from searches by "
            "that tag: restore the tag"
        )
    else:
        problem = REPLACED.format(run=run)
    blocked = BLOCKED.format(problem=problem)
    with pytest.raises(BlockedError) as error:
        promote_model_version(uri, "prod", four_eyes)
    assert str(error.value) == blocked
    with pytest.raises(BlockedError) as error:  # nor can a new approval outvote it
        approve_model_version(uri, "prod", "approve", "again", four_eyes, signing_key=alice())
    assert str(error.value) == blocked
    with pytest.raises(BlockedError) as error:
        gate_model_version(uri, four_eyes)
    assert str(error.value) == blocked
    assert client.get_registered_model("credit-rf").aliases == {}
    trusted = supersede_trust(tmp_path / "four-eyes.toml", None)
    if tamper != "retag":  # nor may an explain link a new surrogate past it
        with pytest.raises(BlockedError) as error:
            superseded_by_link(client, client.get_model_version("credit-rf", "1"), trusted)
        assert str(error.value) == blocked

    alias = "prod" if tamper == "retag" else None  # an overwritten record names nothing
    report = audit_model("credit-rf", four_eyes)
    assert findings(report) == [("decision_record", uri, alias, run)]
    assert report.findings[0].message == problem
    result = govern("audit", "--model-name", "credit-rf", "--policy", "four-eyes.toml")
    assert result.exit_code == 1, result.output
    assert f"(run {run}): {problem}" in said(result)

    # clearing is an explicit signed act: the cleared record no longer blocks, but it may
    # have been a rejection, so no approval signed before the clearance counts: the
    # decide key alone cannot promote, the reviewer must approve again
    _, cleared = decisions.clear_records(
        uri, "rejection lost; alice confirmed", four_eyes, ci_key(), alias="prod"
    )
    assert [d.run_id for d in cleared] == [run]
    waiting = promote_model_version(uri, "prod", four_eyes)
    assert not waiting.promoted and "@prod needs 1 approval of the current evidence" in (
        waiting.reason
    )
    approve_model_version(uri, "prod", "approve", "re-reviewed", four_eyes, signing_key=alice())
    promoted = promote_model_version(uri, "prod", four_eyes)
    assert promoted.promoted and promoted.alias_version == "1"
    assert promoted.reason == "every gate passed; approved by alice"
    assert superseded_by_link(client, client.get_model_version("credit-rf", "1"), trusted) == (
        Superseded("models:/credit-rf-surrogate/1", ("@prod",), ("@prod by alice",))
    )
    report = audit_model("credit-rf", four_eyes)
    assert report.clean, findings(report)
    assert [(c["run_id"], c["problem"], c["cleared_by"]) for c in report.cleared] == [
        (run, problem, "test-ci")
    ]

    # a clearance covers the bytes it saw: replaced again, the record blocks again
    overwrite(client, run, tmp_path, b'{"kind": "approval"}')
    with pytest.raises(BlockedError, match=f"run {run} was replaced after it was written"):
        promote_model_version(uri, "prod", four_eyes)


# ---------------------------------------------------------------------- 3. junk
EXPERIMENTS = (
    "governance-gates",
    "governance-approvals",
    "governance-links",
    "governance-clearances",
)
DECIDING = EXPERIMENTS[:3]
"""The experiments whose records the deciders read (a clearance is read only to clear)."""
JUNK_GATE = b'{"kind": "gate", "ensemble": "x"}'
NOWHERE = "models:/credit-rf/? (the run is bound to no version)"
CRASH = re.compile(r"Traceback|error: \w*(Error|Exception)\b")
MLFLOW_LOG = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARNING) mlflow")


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(
        'name = "trail"\n[gates]\nmin_fidelity = 0.9\n' + keys_toml(approvers=("alice",))
    )
    return load_policy(path)


def plant(client, experiment, content: bytes, tmp_path, uri=None, bind=False) -> str:
    """An insider's run in ``experiment`` (created when missing) holding ``content`` as
    ``decision/record.json``: tagged with ``uri`` (none: no tags), and with ``bind``
    the parameters that bind a record (their own sha256 of it, unsigned, its kind)."""
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    run = client.create_run(experiment_id, tags={"governance.ensemble_uri": uri} if uri else {})
    run_id = run.info.run_id
    if bind:
        try:
            kind = json.loads(content).get("kind")
        except (ValueError, AttributeError, RecursionError):
            kind = None
        params = {
            decisions.DIGEST_PARAM: hashlib.sha256(content).hexdigest(),
            decisions.SIGNATURE_PARAM: decisions.UNSIGNED_DIGEST,
            decisions.KIND_PARAM: kind if isinstance(kind, str) else "gate",
            decisions.URI_PARAM: uri,
        }
        client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])
    overwrite(client, run_id, tmp_path, content)
    client.set_terminated(run_id)
    return run_id


def no_crash(result, codes=(0, 1, 2)) -> str:
    """A command that ended with one of ``codes`` and at most a one-line error, never a
    traceback or an unexpected exception's name; its output, whitespace collapsed."""
    assert result.exit_code in codes, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert not CRASH.search(result.output), result.output
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if not MLFLOW_LOG.match(line)]
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return said(result)


def test_junk_in_every_governance_experiment_never_crashes(store, tmp_path, policy):
    """The issue's junk, an unsigned ``{"kind": "gate", "ensemble": "x"}`` tagged with the
    version, in each governance experiment: show, audit, gate, promote and approve answer
    with exit codes and one line; the deciders refuse, naming the first junk run."""
    client = MlflowClient()
    uri = explained(store, tmp_path)
    assert gate_model_version(uri, policy).evaluation.all_passed
    runs = {e: plant(client, e, JUNK_GATE, tmp_path, uri=uri) for e in EXPERIMENTS}

    shown = no_crash(govern("show", "--model-uri", uri, "--policy", "policy.toml"), (2,))
    link = NOT_BOUND.format(run=runs["governance-links"])
    assert f"error: {BLOCKED.format(problem=link)}" in shown
    audit = no_crash(govern("audit", "--model-name", "credit-rf", "--policy", "policy.toml"), (1,))
    for experiment, run in runs.items():
        assert f"FINDING decision_record {NOWHERE} (run {run}): {NOT_BOUND.format(run=run)}" in (
            audit
        ), experiment
    document = govern(
        "audit", "--model-name", "credit-rf", "--policy", "policy.toml", "--json"
    ).stdout
    listed = json.loads(document)["findings"]
    assert sorted(f["run_id"] for f in listed if f["kind"] == "decision_record") == sorted(
        runs.values()
    )
    (evidence,) = [f for f in listed if f["kind"] != "decision_record"]  # the link blocks it
    assert (evidence["kind"], evidence["message"]) == ("evidence", BLOCKED.format(problem=link))
    first = BLOCKED.format(problem=NOT_BOUND.format(run=runs["governance-gates"]))
    for command in (
        ("gate",),
        ("promote", "--alias", "prod"),
        ("approve", "--alias", "prod", "--decision", "approve", "--comment", "ok")
        + ("--signing-key", key_pair("alice")[0]),
    ):
        result = govern(*command, "--model-uri", uri, "--policy", "policy.toml")
        assert f"error: {first}" in no_crash(result, (2,)), command
    assert client.get_registered_model("credit-rf").aliases == {}

    result = govern("clear", "--model-uri", uri, "--reason", "junk", "--policy", "policy.toml")
    assert f"3 record(s) cleared for {uri}" in no_crash(result, (0,))
    assert no_crash(govern("gate", "--model-uri", uri, "--policy", "policy.toml"), (0,))
    report = audit_model("credit-rf", policy)
    assert sorted(c["run_id"] for c in report.cleared) == sorted(runs[e] for e in DECIDING)
    # a junk clearance blocks nothing (it clears nothing) but stays an audit finding
    assert findings(report) == [("decision_record", NOWHERE, None, runs["governance-clearances"])]


JUNK = {
    "gate-junk": JUNK_GATE,
    "deep": b"[" * 100_000,
    "2MB": b'{"kind": "gate", "pad": "' + b"x" * 2_000_000 + b'"}',
    "not-utf8": b'{"kind": "gate", "ensemble": "\xff\xfe\xfa"}',
    "list": b'[{"kind": "gate"}]',
    "wrong-types": json.dumps(
        {
            "kind": "gate",
            "ensemble": {"uri": 1, "model_id": []},
            "surrogate": "models:/credit-rf-surrogate/1",
            "evidence": {"digest": None, "signer": "test-ci"},
            "policy": [],
            "result": True,
            "decided_by": {"key_name": 0, "key_fingerprint": {}, "mlflow_user": None},
            "time": 1714564800,
        }
    ).encode(),
}
PARSED = {
    "gate-junk": "is not a record: its gate record has missing or malformed decided_by, "
    "time, ensemble, surrogate, evidence, policy, result",
    "deep": "is not a record: it is JSON nested too deeply to be a record",
    "not-utf8": "is not a record: it is not JSON (",
    "list": "is not a record: it is JSON of type list, not an object",
    "wrong-types": "is not a record: its gate record has missing or malformed decided_by, "
    "time, ensemble, surrogate, evidence, policy, result",
}


@pytest.mark.parametrize("bind", [False, True], ids=["unbound", "bound"])
@pytest.mark.parametrize("junk", sorted(JUNK))
def test_junk_records_are_findings_and_block_the_version(store, tmp_path, policy, junk, bind):
    """Each junk record tagged with the version (and, ``bound``, with the parameters that
    bind a record, computed by the insider) is a decision_record finding naming its run
    and blocks gate; nothing crashes."""
    client = MlflowClient()
    uri = explained(store, tmp_path)
    experiment = DECIDING[(sorted(JUNK).index(junk) + bind) % len(DECIDING)]
    run = plant(client, experiment, JUNK[junk], tmp_path, uri=uri, bind=bind)
    if junk == "2MB":  # read up to the size limit, bound or not
        problem = f"the decision record of run {run} is larger than 1048576 bytes"
    elif not bind:
        problem = NOT_BOUND.format(run=run)
    else:
        problem = f"the decision record of run {run} {PARSED[junk]}"

    report = audit_model("credit-rf", policy)
    (finding,) = [f for f in report.findings if f.kind == "decision_record"]
    assert (finding.kind, finding.version, finding.run_id) == (
        "decision_record",
        uri if bind else NOWHERE,
        run,
    )
    assert finding.message.startswith(problem)
    for other in report.findings:  # a link record that blocks also blocks the evidence check
        assert other is finding or (other.kind, experiment) == ("evidence", "governance-links")
    with pytest.raises(BlockedError) as refused:
        gate_model_version(uri, policy)
    assert str(refused.value).startswith(f"refused (fail closed): {problem}")
    audit = no_crash(govern("audit", "--model-name", "credit-rf", "--policy", "policy.toml"), (1,))
    assert f"(run {run}): {problem}" in audit
    gate = no_crash(govern("gate", "--model-uri", uri, "--policy", "policy.toml"), (2,))
    assert f"error: refused (fail closed): {problem}" in gate
    no_crash(govern("show", "--model-uri", uri, "--policy", "policy.toml"))


@pytest.mark.parametrize(
    "junk",
    [
        {"kind": ["gate"], "ensemble": {"uri": URI, "model_id": ""}},
        {"kind": {"gate": 1}},
        {
            "kind": "link",
            "ensemble": {"uri": URI, "model_id": ""},
            "surrogate": {"uri": "models:/credit-rf-surrogate/1", "model_id": ""},
            "evidence": 1,
            "decided_by": {"key_name": None, "key_fingerprint": None, "mlflow_user": "me"},
            "time": "2024-05-01T12:00:00+00:00",
        },
        {
            "kind": "clearance",
            "ensemble": {"uri": URI, "model_id": ""},
            "surrogate": "models:/credit-rf-surrogate/1",
            "policy": {"label": "x", "digest": "y"},
            "reason": "r",
            "cleared": [],
            "decided_by": {"key_name": None, "key_fingerprint": None, "mlflow_user": "me"},
            "time": "2024-05-01T12:00:00+00:00",
        },
    ],
    ids=["kind-list", "kind-object", "link-with-evidence-1", "clearance-with-surrogate-str"],
)
def test_bound_junk_of_odd_shapes_never_crashes(store, tmp_path, policy, junk):
    """Records bound by the insider whose kind is a JSON array or object, or which carry
    a field their kind does not have, with a wrong type: gate, audit and show answer
    (refusal or finding), never with a Python exception."""
    client = MlflowClient()
    uri = explained(store, tmp_path)
    experiment = "governance-links" if junk["kind"] == "link" else "governance-gates"
    run = plant(client, experiment, json.dumps(junk).encode(), tmp_path, uri=uri, bind=True)
    gate = govern("gate", "--model-uri", uri, "--policy", "policy.toml")
    no_crash(gate)
    audit = govern("audit", "--model-name", "credit-rf", "--policy", "policy.toml")
    no_crash(audit, (0, 1))
    no_crash(govern("show", "--model-uri", uri, "--policy", "policy.toml"))
    if not isinstance(junk["kind"], str):  # no kind: not a record, which blocks
        assert gate.exit_code == 2
        assert f"refused (fail closed): the decision record of run {run}" in said(gate)
        assert f"FINDING decision_record {uri} (run {run})" in said(audit)


def test_junk_bound_to_no_version_is_a_finding_but_blocks_no_version(store, tmp_path, policy):
    """Junk without parameters or tags may be about any model: every audit reports it,
    and no version's decisions rest on it."""
    client = MlflowClient()
    uri = explained(store, tmp_path)
    runs = [plant(client, e, JUNK_GATE, tmp_path) for e in EXPERIMENTS]
    report = audit_model("credit-rf", policy)
    assert sorted(findings(report)) == sorted(
        ("decision_record", NOWHERE, None, run) for run in runs
    )
    assert all(f.message == NOT_BOUND.format(run=f.run_id) for f in report.findings)
    assert gate_model_version(uri, policy).evaluation.all_passed
    assert promote_model_version(uri, "prod", policy).promoted
    assert no_crash(govern("gate", "--model-uri", uri, "--policy", "policy.toml"), (0,))
    result = govern("clear", "--model-uri", uri, "--reason", "junk", "--policy", "policy.toml")
    assert f"error: no record blocks decisions on {uri}; nothing was recorded" in no_crash(
        result, (2,)
    )


# ---------------------------------------------------------------------- 4. every page
VERSIONS = 10_000


def test_the_audit_reads_every_page_of_versions(store, tmp_path, policy):
    """10,000 newer versions (copies of v1's row, inserted into the store's
    model_versions table: MLflow's own create_model_version takes minutes for as many),
    and @prod set by hand on v1, which the registry search lists last: the audit finds
    it and counts every version."""
    client = MlflowClient()
    uri = explained(store, tmp_path)
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(model_versions)")]
        (row,) = db.execute("SELECT * FROM model_versions WHERE name = 'credit-rf'").fetchall()
        first = dict(zip(columns, row, strict=True))
        later = (
            first | {"version": n, "creation_time": first["creation_time"] + n}
            for n in range(2, VERSIONS + 2)
        )
        db.executemany(
            f"INSERT INTO model_versions ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' * len(columns))})",
            ([version[c] for c in columns] for version in later),
        )
    client.set_registered_model_alias("credit-rf", "prod", "1")
    page = client.search_model_versions("name = 'credit-rf'", max_results=1000)
    assert page.token and "1" not in {str(v.version) for v in page}  # not on the first page

    started = time.monotonic()
    report = audit_model("credit-rf", policy)
    elapsed = time.monotonic() - started
    assert report.versions == VERSIONS + 1
    assert findings(report) == [("alias", uri, "prod", None)]
    assert report.findings[0].message.startswith(
        f"@prod is on {uri} without a valid signed promotion decision for it"
    )
    assert elapsed < 60, f"the audit of {VERSIONS + 1} versions took {elapsed:.0f} s"


# ---------------------------------------------------------------------- 5. policy
def test_a_promotion_under_another_policy_is_found(store, tmp_path, policy):
    uri = explained(store, tmp_path)
    strict = tmp_path / "strict.toml"
    strict.write_text(
        'name = "strict"\n[gates]\nmin_fidelity = 0.9\nmax_features = 2\n' + keys_toml()
    )
    organisation = load_policy(strict)
    promotion = promote_model_version(uri, "prod", policy)  # the lenient one
    assert promotion.promoted
    assert audit_model("credit-rf", policy).clean
    report = audit_model("credit-rf", organisation)
    assert findings(report) == [("policy", uri, "prod", promotion.gate.run_id)]
    message = (
        f"@prod was promoted to {uri} under policy '{policy.label}', not under the audited "
        f"policy '{organisation.label}' (the digests differ); promote it again under the "
        "organisation's policy"
    )
    assert report.findings[0].message == message
    result = govern("audit", "--model-name", "credit-rf", "--policy", "strict.toml")
    assert result.exit_code == 1, result.output
    assert f"FINDING policy {uri} @prod (run {promotion.gate.run_id}): {message}" in said(result)
    assert promote_model_version(uri, "prod", organisation).promoted
    assert audit_model("credit-rf", organisation).clean


def test_bound_junk_about_another_model_never_breaks_this_models_audit(store, tmp_path, policy):
    """The audit reads every run of every governance experiment: a record bound to another
    model is that model's business, whatever its bytes."""
    client = MlflowClient()
    uri = explained(store, tmp_path)
    junk = json.dumps({"kind": ["gate"], "ensemble": {"uri": "models:/other-rf/1"}}).encode()
    plant(client, "governance-gates", junk, tmp_path, uri="models:/other-rf/1", bind=True)
    assert audit_model("credit-rf", policy).clean
    assert no_crash(govern("gate", "--model-uri", uri, "--policy", "policy.toml"), (0,))


def test_status_tags_citing_other_runs_never_crash_the_audit(store, tmp_path, policy):
    """governance.last_gate.run is a tag anyone can set: pointed at a clearance, a link
    record, a run that does not exist or no run id at all, the audit reports it."""
    client = MlflowClient()
    ensemble = register_ensemble(store)
    surrogate = explain(store, ensemble, tmp_path)
    link = links.record_link(client, ensemble, surrogate, ci_key())
    gate = gate_model_version(URI, policy).run_id
    overwrite(client, gate, tmp_path)
    clearance, _ = decisions.clear_records(URI, "junk", policy, ci_key())
    crashed = {}
    for name, cited in {
        "clearance": clearance,
        "link": link,
        "missing": "0" * 32,
        "no-run-id": "../../etc/passwd",
    }.items():
        client.set_model_version_tag("credit-rf", "1", "governance.last_gate.run", cited)
        result = govern("audit", "--model-name", "credit-rf", "--policy", "policy.toml")
        if result.exit_code not in (0, 1) or CRASH.search(result.output):
            crashed[name] = result.stderr.splitlines()[-1]
    assert crashed == {}
