"""``govern diff`` and the drift gates on two real explained versions (flavors.diff)."""

import json
from pathlib import Path

import numpy as np
import pytest
from diff_store import FEATURES, MORE, explained_pair, use_copy
from mlflow import MlflowClient
from mlflow_store import register_wisconsin_rf
from signing_keys import trusting
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from miret_governance.flavors.gates.diff import (
    AGAINST_TAG,
    ALIAS_TAG,
    CHANGES_TAG,
    DiffError,
    diff_versions,
)
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.miret import load_model
from miret_governance.flavors.store.inputs import load_explainable_ensemble
from miret_governance.flavors.store.registry import describe_surrogate
from miret_governance.flavors.trail.decisions import read_record
from miret_governance.governance.measures import vite
from miret_governance.governance.measures.drift import explanation_distance
from miret_governance.governance.trust.policy import parse_policy

pytest_plugins = ["mlflow_store"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory, migrated_store, breast_cancer):
    return explained_pair(tmp_path_factory.mktemp("diff"), migrated_store, breast_cancer)


@pytest.fixture
def store(pair, tmp_path, monkeypatch):
    """A copy of the pair's store, for this test alone."""
    return use_copy(pair, tmp_path, monkeypatch)


def drift_policy(**gates):
    return parse_policy(trusting({"gates": gates}))


def test_diff_of_two_explained_versions(pair, store, breast_cancer):
    outcome = diff_versions(
        "models:/credit-rf/1", "models:/credit-rf/2", data=pair["root"] / "rows.csv"
    )
    drift = outcome.drift
    # level 0: v1 splits 40% mean radius, 60% worst area; v2 20% mean radius, 15% mean
    # perimeter, 35% worst area, 30% worst concave points: (.2 + .15 + .25 + .3) / 2 = .45
    # level 1: mean texture 50% -> 20%, worst concave points 0% -> 30%: (.3 + .3) / 2 = .3
    assert drift.distance == pytest.approx(0.375, abs=1e-12)
    levels = [
        vite.level_frequency(load_explainable_ensemble(f"models:/credit-rf/{v}")) for v in (1, 2)
    ]
    assert explanation_distance(*levels) == drift.distance  # the stored VITE is the model's
    top = drift.changes.head(3)
    assert top["feature"].tolist() == [
        "mean texture",
        "worst concave points",
        "worst concave points",
    ]
    assert top["level"].tolist() == [1, 0, 1]
    assert top["change"].round(12).tolist() == [-0.3, 0.3, 0.3]
    # the surrogates (solved by the MILP) read independently: their features, and
    # cross-fidelity against scikit-learn's own predictions of the same fitted forests
    X, y = breast_cancer
    used, predictions = {}, {}
    for version, (features, rows, trees) in enumerate(((FEATURES, 150, 10), (MORE, 300, 20)), 1):
        forest = RandomForestClassifier(n_estimators=trees, max_depth=2, random_state=0)
        model = make_pipeline(MinMaxScaler(), forest).fit(X[features][:rows], y[:rows])
        surrogate = load_model(f"models:/credit-rf-surrogate/{version}")
        used[version] = {features[j] for j in surrogate.tree_.used_features()}
        predictions[version] = (model.predict(X[features]), surrogate.predict(X[features]))
    assert set(drift.shared) == used[1] & used[2]
    assert (set(drift.only_from), set(drift.only_to)) == (used[1] - used[2], used[2] - used[1])
    assert drift.overlap == len(used[1] & used[2]) / len(used[1] | used[2])
    from_on_to = int(np.sum(predictions[1][1] == predictions[2][0]))
    to_on_from = int(np.sum(predictions[2][1] == predictions[1][0]))
    cross = drift.cross_fidelity
    assert (cross.rows, cross.from_on_to, cross.to_on_from) == (569, from_on_to, to_on_from)
    assert cross.value == min(from_on_to, to_on_from) / 569
    # the rules are the surrogates' own rules text, side by side
    summary = describe_surrogate(
        "models:/credit-rf-surrogate/1", parse_policy(trusting({"gates": {}})).keys
    )
    document = outcome.to_json()
    assert document["rules"]["from"] == summary["rules"]
    assert drift.rules[0][0] == summary["rules"].splitlines()[0]
    assert document["from"]["surrogate_uri"] == "models:/credit-rf-surrogate/1"
    assert document["data"]["rows"] == 569
    without = diff_versions("models:/credit-rf/1", "models:/credit-rf/2")
    assert without.drift.cross_fidelity is None and without.data is None
    assert without.drift.distance == drift.distance


def test_a_version_without_a_verified_explanation_is_refused(pair, store, breast_cancer, tmp_path):
    register_wisconsin_rf(breast_cancer, FEATURES, rows=150, n_estimators=5)  # version 3
    with pytest.raises(
        DiffError, match=r"--to models:/credit-rf/3: .* explain it first: govern explain"
    ):
        diff_versions("models:/credit-rf/1", "models:/credit-rf/3")
    with pytest.raises(DiffError, match="is a surrogate version; compare the ensemble versions"):
        diff_versions("models:/credit-rf-surrogate/1", "models:/credit-rf/2")
    untrusting = tmp_path / "untrusting.toml"
    untrusting.write_text("[gates]\nmin_fidelity = 0.9\n")
    with pytest.raises(
        DiffError, match="--from models:/credit-rf/1: the explanation .* cannot be used"
    ):
        diff_versions("models:/credit-rf/1", "models:/credit-rf/2", policy=untrusting)


def test_gate_fails_on_max_explanation_drift_against_the_champion(pair, store):
    client = MlflowClient()
    client.set_registered_model_alias("credit-rf", "champion", "1")
    rows = pair["root"] / "rows.csv"
    expected = diff_versions("models:/credit-rf/1", "models:/credit-rf/2", data=rows).drift
    cross = expected.cross_fidelity
    # exactly at its threshold the cross-fidelity gate passes; the drift 0.375 > 0.3 fails
    policy = drift_policy(max_explanation_drift=0.3, min_cross_fidelity=cross.value)
    renamed = parse_policy(trusting({"gates": policy.gates, "drift_against": "prod"}))
    assert policy.digest != renamed.digest
    outcome = gate_model_version("models:/credit-rf/2", policy, data=rows)
    results = {r.name: r for r in outcome.evaluation.results}
    assert not outcome.evaluation.all_passed
    drift_gate, cross_gate = results["max_explanation_drift"], results["min_cross_fidelity"]
    assert (drift_gate.passed, drift_gate.value) == (False, expected.distance)
    assert drift_gate.value == pytest.approx(0.375, abs=1e-12)
    assert "against models:/credit-rf/1 (@champion) does not meet <= 0.3" in drift_gate.reason
    assert (cross_gate.passed, cross_gate.value) == (True, cross.value)
    assert outcome.drift["against"] == {
        "alias": "champion",
        "ensemble_uri": "models:/credit-rf/1",
        "surrogate_uri": "models:/credit-rf-surrogate/1",
        "evidence_digest": client.get_model_version("credit-rf-surrogate", "1").tags[
            "governance.evidence_digest"
        ],
    }
    # the signed decision record, the gate run and its report hold the figures
    decision = read_record(client, outcome.run_id, policy.keys)
    assert decision.valid and decision.record.result == "FAIL"
    assert decision.record.drift["explanation_drift"] == expected.distance
    assert decision.record.drift["cross_fidelity"] == cross.to_json()
    assert decision.record.drift["data"]["rows"] == 569
    run = client.get_run(outcome.run_id)
    assert run.data.tags[AGAINST_TAG] == "models:/credit-rf/1"
    assert run.data.tags[ALIAS_TAG] == "champion"
    assert run.data.metrics["feature_overlap"] == expected.overlap
    assert run.data.metrics["cross_fidelity"] == cross.value
    report = Path(client.download_artifacts(outcome.run_id, "gate_report.json")).read_text()
    assert json.loads(report)["drift"]["features"]["only_candidate"] == list(expected.only_to)
    # the candidate's page says what changed since the champion
    page = client.get_model_version("credit-rf", "2").description
    assert "**Since the champion**" in page
    changed = (  # what changed in the rules and features, before the figures
        "What changed:\n\n- Rules added (2):\n"
        "  - if \\-0\\.000308·worst area \\- 1\\.54·worst concave points &lt;= \\-0\\.4367 then 0\n"
        "  - if \\-0\\.000308·worst area \\- 1\\.54·worst concave points &gt; \\-0\\.4367 then 1\n"
        "- Rules removed (3):\n"
        "  - if worst area &lt; 806\\.3 and mean texture &lt; 21\\.66 then 1\n"
        "  - if worst area &lt; 806\\.3 and mean texture &gt;= 21\\.66 then 0\n"
        "  - if worst area &gt;= 806\\.3 then 0\n"
        "- Rules unchanged: 0\n"
        "- Features gained: worst concave points; lost: mean texture\n\n"
        "The figures: the first compares the ensembles (how their trees split), the others the "
        "surrogates.\n\n| Figure | Value |\n|---|---|\n"
        "| Change in the ensembles' feature use (VITE): 0 the same share of splits on each "
        "feature at each depth, 1 nothing in common | 0.375 |\n"
    )
    assert changed in page
    assert json.loads(run.data.tags[CHANGES_TAG]) == decision.record.drift["rule_changes"]
    assert decision.record.drift["rule_changes"]["lost"] == ["mean texture"]
    assert (
        f"| Features used by both surrogates (Jaccard overlap) | {expected.overlap:.3f} |" in page
    )
    assert f"the other version's ensemble, the smaller) | {cross.value:.3f} |" in page
    # without data the cross-fidelity gate cannot be decided: it fails
    blind = gate_model_version("models:/credit-rf/2", policy)
    (cross_gate,) = [r for r in blind.evaluation.results if r.name == "min_cross_fidelity"]
    assert not cross_gate.passed
    assert cross_gate.reason == (
        "cross-fidelity against models:/credit-rf/1 (@champion) needs --data"
    )
    page = client.get_model_version("credit-rf", "2").description
    assert "the smaller) | not measured: gate without --data |" in page


def test_drift_gates_pass_when_no_version_holds_the_champion_alias(pair, store):
    policy = drift_policy(max_explanation_drift=0.0, min_cross_fidelity=1.0)
    outcome = gate_model_version("models:/credit-rf/2", policy)
    results = {r.name: r for r in outcome.evaluation.results}
    assert outcome.evaluation.all_passed, [r.reason for r in outcome.evaluation.results]
    for name in ("max_explanation_drift", "min_cross_fidelity"):
        assert results[name].passed and results[name].value is None
        assert results[name].reason == "no champion yet: no version holds @champion"
    assert outcome.drift is None
    client = MlflowClient()
    record = read_record(client, outcome.run_id, policy.keys).record
    assert record.drift is None and b'"drift"' not in record.to_json()
    assert "Since the champion" not in client.get_model_version("credit-rf", "2").description
