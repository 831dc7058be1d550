"""Verification records: ``govern show``, ``audit`` and ``reproduce`` leave a signed,
bound, unchained record of what they verified, the ensemble's page shows the latest of
each (and of the gate), a record that does not verify is an audit finding that blocks no
decision, and without a key nothing is recorded and the command says so once."""

import re
from pathlib import Path

import pytest
from gate_store import explained
from mlflow import MlflowClient
from signing_keys import CI_KEY, ci_key, key_pair, keys_toml
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.read.reproduce import Reproduction
from miret_governance.flavors.store.registry import model_id_of
from miret_governance.flavors.trail.audit import audit_model
from miret_governance.flavors.trail.chain import chain_problems
from miret_governance.flavors.trail.decisions import (
    CHAIN_COUNT_PARAM,
    VERIFICATION_EXPERIMENT,
    check_trail,
    every_run,
    read_record,
)
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.flavors.trail.verification import record_verification, reproduced
from miret_governance.governance.trust.keyring import Signer
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.records import (
    DecidedBy,
    EvidenceRef,
    PinnedModel,
    PolicyRef,
    VerificationRecord,
)
from miret_governance.governance.trust.signers import SIGNING_KEY_ENV, SigningKey

pytest_plugins = ["mlflow_store"]
REVIEWER = "alice"
STRANGER = "stranger"


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(
        'name = "reviewed"\n[gates]\nmin_fidelity = 0.9\n' + keys_toml(approvers=(REVIEWER,))
    )
    return load_policy(path)


def govern(*args, key: str | None = None):
    env = {SIGNING_KEY_ENV: str(key_pair(key)[0]) if key else ""}
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def said(result) -> list:
    """The command's own lines on stderr (not MLflow's log lines)."""
    return [line for line in result.stderr.splitlines() if not re.match(r"\d{4}/\d\d/", line)]


def verifications(policy) -> list:
    """The verification runs of the store, oldest first, read with the policy's keys."""
    client = MlflowClient()
    trusted = policy.keys.trusting_any()
    return [read_record(client, r, trusted) for r in every_run(client, VERIFICATION_EXPERIMENT)]


def verified_rows(uri: str) -> dict:
    """The ensemble page's "Verified" rows: action -> cells after it."""
    name, version = uri.removeprefix("models:/").split("/")
    page = MlflowClient().get_model_version(name, version).description
    section = page[page.index("**Verified**") :].split("\n\n")[1]
    rows = [line.strip("|").split(" | ") for line in section.splitlines()[2:]]
    return {row[0].strip(): [cell.strip() for cell in row[1:]] for row in rows}


def test_show_records_a_signed_unchained_verification_shown_on_the_page(store, tmp_path, policy):
    uri = explained(store, tmp_path)
    gate_model_version(uri, policy)  # the gate counts through its gate record
    shown = govern("show", "--model-uri", uri, "--policy", policy.source, key=REVIEWER)
    assert shown.exit_code == 0 and said(shown) == [], shown.output
    (decision,) = verifications(policy)
    client = MlflowClient()
    ensemble = client.get_model_version("credit-rf", "1")
    surrogate = client.get_model_version("credit-rf-surrogate", "1")
    digest = evidence_digest(client)
    record = decision.record
    reviewer = SigningKey.load(key_pair(REVIEWER)[0])
    assert decision.valid and decision.signer.name == REVIEWER
    assert record == VerificationRecord(
        ensemble=PinnedModel(uri, model_id_of(ensemble)),
        surrogate=PinnedModel("models:/credit-rf-surrogate/1", model_id_of(surrogate)),
        evidence=EvidenceRef(digest, ci_key_signer()),
        policy=PolicyRef(policy.label, policy.digest),
        action="show",
        result="verified",
        detail=f"evidence signed by key '{CI_KEY}' verified; it explains this version and is "
        "the one the latest signed link names",
        decided_by=DecidedBy(REVIEWER, reviewer.fingerprint, record.decided_by.mlflow_user),
        time=record.time,
    )
    run = client.get_run(decision.run_id)
    assert CHAIN_COUNT_PARAM not in run.data.params and record.chain is None
    assert chain_problems(client, "credit-rf") == []  # signed, yet never chained
    rows = verified_rows(uri)
    assert list(rows) == ["gate", "show"]
    assert rows["gate"][0] == "**PASS**" and rows["gate"][3] == "reviewed v" + policy.digest[:8]
    assert rows["show"][:2] == ["**verified**", f"key {REVIEWER}, user {run_user(run)}"]
    # an untrusted key is recorded unnamed, and the page says so
    again = govern("show", "--model-uri", uri, "--policy", policy.source, key=STRANGER)
    assert again.exit_code == 0, again.output
    stranger = SigningKey.load(key_pair(STRANGER)[0]).fingerprint
    latest = verifications(policy)[-1]
    assert latest.record.decided_by.key_name is None and not latest.valid
    assert verified_rows(uri)["show"][1].startswith(f"an untrusted key {stranger[:16]}, user ")


def evidence_digest(client) -> str:
    """The sha256 of the surrogate's evidence.json, as its explain run's param binds it."""
    run_id = client.get_model_version("credit-rf-surrogate", "1").run_id
    return client.get_run(run_id).data.params["evidence_digest"]


def ci_key_signer() -> Signer:
    return Signer(CI_KEY, ci_key().fingerprint)


def run_user(run) -> str:
    return re.sub(r"([_.\-])", r"\\\1", run.data.tags["mlflow.user"])


def test_without_a_key_nothing_is_recorded_and_the_command_says_so_once(store, tmp_path, policy):
    uri = explained(store, tmp_path)
    shown = govern("show", "--model-uri", uri, "--policy", policy.source)
    assert shown.exit_code == 0 and said(shown) == ["not recorded: no signing key"]
    quiet = govern("show", "--model-uri", uri, "--policy", policy.source, "--no-record")
    assert quiet.exit_code == 0 and said(quiet) == []
    assert MlflowClient().get_experiment_by_name(VERIFICATION_EXPERIMENT) is None


def test_a_tampered_verification_is_an_audit_finding_and_blocks_no_promotion(
    store, tmp_path, policy
):
    uri = explained(store, tmp_path)
    client = MlflowClient()
    assert (
        govern("show", "--model-uri", uri, "--policy", policy.source, key=REVIEWER).exit_code == 0
    )
    (decision,) = verifications(policy)
    artifacts = Path(client.get_run(decision.run_id).info.artifact_uri.removeprefix("file://"))
    record = artifacts / "decision" / "record.json"
    record.write_bytes(record.read_bytes().replace(b'"verified"', b'"failed"'))
    version = client.get_model_version("credit-rf", "1")
    check_trail(client, version, policy.keys, "champion")  # no decision reads it
    assert promote_model_version(uri, "champion", policy).promoted
    report = audit_model("credit-rf", policy)
    assert [(f.kind, f.version, f.run_id) for f in report.findings] == [
        ("decision_record", uri, decision.run_id)
    ]
    assert "was replaced after it was written" in report.findings[0].message
    # the audit records one verification of the holder of @champion: failed, and why
    audited = govern("audit", "--model-name", "credit-rf", "--policy", policy.source, key=REVIEWER)
    assert audited.exit_code == 1 and said(audited) == [], audited.output
    latest = verifications(policy)[-1]
    assert (latest.record.action, latest.record.result) == ("audit", "failed")
    assert latest.record.detail.startswith(
        "1 finding(s), the first: decision_record: the decision record of run "
        f"{decision.run_id} was replaced after it was written"
    )
    assert verified_rows(uri)["audit"][0] == "**failed**"


def test_reproduce_records_identical_or_different_and_why(store, tmp_path, policy):
    uri = explained(store, tmp_path)
    client = MlflowClient()
    digest = evidence_digest(client)
    metrics = {"test_fidelity": {"recorded": 0.95, "reproduced": 0.95, "equal": True}}
    same = Reproduction(
        uri,
        "models:/credit-rf-surrogate/1",
        "d" * 32,
        {"recorded": "a" * 64, "reproduced": "a" * 64},
        metrics,
        {},
        {"recorded": False, "reproduced": False},
        ci_key_signer().to_json(),
        uri,
        digest,
    )
    other = Reproduction(
        **{
            **same.__dict__,
            "tree_digest": {"recorded": "a" * 64, "reproduced": "b" * 64},
            "metrics": {"test_fidelity": {"recorded": 0.95, "reproduced": 0.9, "equal": False}},
            "versions_differ": {"scikit-learn": {"recorded": "1.5", "current": "1.6"}},
        }
    )
    key = SigningKey.load(key_pair(REVIEWER)[0])
    for result in (same, other):
        assert record_verification(client, policy, key, reproduced(client, result)) is None
    found = [(d.record.result, d.record.detail, d.valid) for d in verifications(policy)]
    assert found == [
        ("identical", f"the same tree (digest {'a' * 16}) and headline metrics", True),
        (
            "different",
            (
                f"tree digest {'a' * 16} recorded, {'b' * 16} now; metrics differ: "
                "test_fidelity; versions differ: scikit-learn"
            ),
            True,
        ),
    ]
    # a version explain never wrote a page for is left without one
    assert not client.get_model_version("credit-rf", "1").description
