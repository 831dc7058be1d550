"""``govern promote`` under a policy with drift gates, on two real explained versions
(tests/diff_store.py): with ``--data`` the promotion measures cross-fidelity on the rows;
without it, it decides on the figures of the latest signed gate decision record on the
current evidence of both versions, or refuses (exit 2, nothing recorded)."""

import json
import re
from pathlib import Path

import mlflow
import pytest
from diff_store import explained_pair, use_copy
from mlflow import MlflowClient
from signing_keys import keys_toml
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.gates.diff import diff_versions
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.trail.audit import audit_model
from miret_governance.flavors.trail.decisions import DecisionError, read_record
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.signers import SIGNING_KEY_ENV

pytest_plugins = ["mlflow_store"]

V1, V2 = "models:/credit-rf/1", "models:/credit-rf/2"
REFUSED = "no signed gate decision on the current evidence of both records it"


@pytest.fixture(scope="module")
def pair(tmp_path_factory, migrated_store, breast_cancer):
    return explained_pair(tmp_path_factory.mktemp("promote-drift"), migrated_store, breast_cancer)


@pytest.fixture
def store(pair, tmp_path, monkeypatch):
    """A copy of the pair's store, for this test alone; its URI."""
    return use_copy(pair, tmp_path, monkeypatch)


def drift_policy(folder: Path, drift_against: str = "champion", **gates) -> Path:
    """A policy file with ``gates`` (and the defaults) trusting the session's CI key."""
    path = folder / f"drift-{len(list(folder.glob('drift-*.toml')))}.toml"
    lines = "".join(f"{name} = {value!r}\n" for name, value in gates.items())
    path.write_text(f'drift_against = "{drift_against}"\n[gates]\n{lines}' + keys_toml())
    return path


def gate_runs() -> list:
    """Run ids of the governance-gates experiment, oldest first."""
    runs = mlflow.search_runs(experiment_names=["governance-gates"], order_by=["start_time"])
    return [] if runs.empty else list(runs["run_id"])


def gate_results(client: MlflowClient, run_id: str) -> dict:
    """The results of a gate run's ``gate_report.json``, by gate name."""
    report = json.loads(Path(client.download_artifacts(run_id, "gate_report.json")).read_text())
    return {result["name"]: result for result in report["results"]}


def test_promote_with_data_measures_the_drift_gates(pair, store, tmp_path):
    rows = pair["root"] / "rows.csv"
    expected = diff_versions(V1, V2, data=rows).drift
    cross = expected.cross_fidelity
    # both exactly at their thresholds: they pass
    path = drift_policy(tmp_path, max_explanation_drift=0.375, min_cross_fidelity=cross.value)

    def promote(uri, *more):
        args = ["promote", "--model-uri", uri, "--alias", "champion", "--policy", str(path)]
        return CliRunner().invoke(app, [*args, *more, "--tracking-uri", store])

    first = promote(V1)  # no champion yet: the drift gates pass, no data needed
    assert first.exit_code == 0, first.output
    assert "promoted: @champion -> models:/credit-rf/1" in first.stdout
    before = gate_runs()

    blind = promote(V2)
    assert blind.exit_code == 2 and blind.stdout == ""
    assert (
        "min_cross_fidelity needs the cross-fidelity of models:/credit-rf/2 against "
        "models:/credit-rf/1 (@champion), measured on rows, and no signed gate decision on "
        "the current evidence of both records it: pass --data <file>, or run govern gate "
        "--model-uri models:/credit-rf/2 --data <file> first; nothing was recorded"
    ) in " ".join(blind.stderr.split())
    client = MlflowClient()
    assert gate_runs() == before
    assert client.get_model_version_by_alias("credit-rf", "champion").version == 1

    measured = promote(V2, "--data", str(rows))
    assert measured.exit_code == 0, measured.output
    assert "promoted: @champion -> models:/credit-rf/2" in measured.stdout
    (run_id,) = set(gate_runs()) - set(before)
    results = gate_results(client, run_id)
    assert results["max_explanation_drift"]["value"] == pytest.approx(0.375, abs=1e-12)
    assert results["min_cross_fidelity"]["value"] == cross.value
    assert results["recomputed_fidelity"]["passed"]  # --data also recomputes the fidelity
    # the promotion's own signed record holds the figures measured on the 569 rows
    policy = load_policy(path)
    decision = read_record(client, run_id, policy.keys)
    assert decision.valid, decision.problem
    record = decision.record
    assert (record.kind, record.alias, record.decision) == ("promotion", "champion", "promoted")
    drift = record.drift
    assert drift["against"]["ensemble_uri"] == V1 and drift["against"]["alias"] == "champion"
    assert drift["explanation_drift"] == expected.distance
    assert drift["cross_fidelity"] == cross.to_json() and drift["data"]["rows"] == 569
    assert "decision_run" not in drift
    audit = audit_model("credit-rf", policy)
    assert audit.clean, audit.findings


def test_promote_without_data_decides_on_the_signed_gate_record(pair, store, tmp_path):
    rows = pair["root"] / "rows.csv"
    client = MlflowClient()
    policy = load_policy(drift_policy(tmp_path, max_explanation_drift=0.4, min_cross_fidelity=0.5))
    assert promote_model_version(V1, "champion", policy).promoted
    # a what-if gate without a signing key measured on the rows, but its record never counts
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(SIGNING_KEY_ENV)
        assert gate_model_version(V2, policy, data=rows).drift["cross_fidelity"] is not None
    before = gate_runs()
    with pytest.raises(DecisionError, match=REFUSED):
        promote_model_version(V2, "champion", policy)
    assert gate_runs() == before  # refused before anything was recorded

    measured = gate_model_version(V2, policy, data=rows)
    later = gate_model_version(V2, policy)  # signed and later, but without cross-fidelity
    assert later.drift["cross_fidelity"] is None
    cross = measured.drift["cross_fidelity"]["value"]
    assert 0.5 < cross < 1
    recorded = {**measured.drift, "decision_run": measured.run_id}

    # a stricter policy decides on the same recorded figure: refused (a failed gate)
    strict = load_policy(drift_policy(tmp_path, max_explanation_drift=0.4, min_cross_fidelity=1.0))
    refused = promote_model_version(V2, "champion", strict)
    assert not refused.promoted and refused.alias_version == "1"
    (gate,) = [r for r in refused.gate.evaluation.results if r.name == "min_cross_fidelity"]
    assert (gate.passed, gate.value) == (False, cross)
    assert gate.reason == (
        f"cross_fidelity = {cross:.4g} against models:/credit-rf/1 (@champion) does not meet >= 1"
    )
    assert refused.gate.drift == recorded

    promoted = promote_model_version(V2, "champion", policy)
    assert promoted.promoted and promoted.alias_version == "2", promoted.reason
    drift_gates = {r.name: r for r in promoted.gate.evaluation.results}
    assert drift_gates["max_explanation_drift"].value == pytest.approx(0.375, abs=1e-12)
    assert drift_gates["min_cross_fidelity"].value == cross
    # the promotion's signed record holds the figures, naming the gate run they come from
    decision = read_record(client, promoted.gate.run_id, policy.keys)
    assert decision.valid and decision.record.kind == "promotion"
    assert decision.record.drift == recorded
    run = client.get_run(promoted.gate.run_id)
    assert run.data.metrics["cross_fidelity"] == cross
    assert run.data.tags["governance.drift.against"] == V1
    audit = audit_model("credit-rf", policy)
    assert audit.clean, audit.findings


def test_a_record_counts_only_against_the_current_holder_on_its_current_evidence(
    pair, store, tmp_path
):
    rows = pair["root"] / "rows.csv"
    client = MlflowClient()
    policy = load_policy(drift_policy(tmp_path, min_cross_fidelity=0.5))
    client.set_registered_model_alias("credit-rf", "champion", "1")
    gate_model_version(V2, policy, data=rows)  # against @champion: version 1
    # the same holder under another alias: the record compared with @champion
    client.set_registered_model_alias("credit-rf", "prod", "1")
    prod = load_policy(drift_policy(tmp_path, drift_against="prod", min_cross_fidelity=0.5))
    with pytest.raises(DecisionError, match=r"against models:/credit-rf/1 \(@prod\)"):
        promote_model_version(V2, "prod", prod)
    assert promote_model_version(V2, "champion", policy).promoted  # the record counts here
    assert promote_model_version(V1, "champion", policy, data=rows).promoted  # back to v1
    # the holder explained again (superseding its promotion, knowingly): the record
    # compared with its earlier evidence
    explain_model_version(
        V1,
        pair["root"] / "v1.csv",
        target="label",
        depth=2,
        time_limit=60,
        min_test_rows=1,
        solver="highs",
        force=True,
        supersede=True,
    )
    with pytest.raises(DecisionError, match=REFUSED):
        promote_model_version(V2, "champion", policy)


def test_an_alias_moved_by_hand_after_a_signed_promotion_fails_the_drift_gates(
    pair, store, tmp_path
):
    """QA: with v1 promoted to @champion, an insider deleted the alias (the drift gates
    then passed as "no champion yet") or pointed it at the candidate itself (drift 0),
    promoted v2, and restored the alias. The drift gates compare with the version the
    latest signed promotion put on the alias, and fail when the alias says otherwise."""
    client = MlflowClient()
    rows = pair["root"] / "rows.csv"
    policy = load_policy(drift_policy(tmp_path, max_explanation_drift=0.9, min_cross_fidelity=0.1))
    assert promote_model_version(V1, "champion", policy).promoted  # no champion yet
    moved = (
        r"@champion was moved by hand: {}, but the latest signed promotion \(run \w+, .*\) "
        r"put models:/credit-rf/1 there"
    )
    client.delete_registered_model_alias("credit-rf", "champion")
    for where in ("no version holds it", "it points to models:/credit-rf/2"):
        if where != "no version holds it":
            client.set_registered_model_alias("credit-rf", "champion", "2")
        outcome = gate_model_version(V2, policy, data=rows)
        drift = {
            r.name: r
            for r in outcome.evaluation.results
            if r.name in ("max_explanation_drift", "min_cross_fidelity")
        }
        assert not outcome.evaluation.all_passed and len(drift) == 2
        for result in drift.values():
            assert not result.passed and re.fullmatch(moved.format(where) + ".*", result.reason)
    for data in (rows, None):  # measured, or on a recorded gate decision
        refused = promote_model_version(V2, "prod", policy, data=data)
        assert not refused.promoted and "@champion was moved by hand" in refused.reason
    client.set_registered_model_alias("credit-rf", "champion", "1")  # restored
    assert gate_model_version(V2, policy, data=rows).evaluation.all_passed
