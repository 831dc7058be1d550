"""``min_class_fidelity`` decided by MLflow's ``MetricThreshold`` too, on the worst class."""

import pytest

from miret_governance.flavors.gates.gating import evaluate_gates
from miret_governance.governance.trust.policy import parse_policy


@pytest.mark.parametrize(
    ("worst", "passed"), [(0.8, True), (0.8 + 1e-9, True), (0.8 - 1e-9, False)]
)
def test_mlflow_agrees_on_the_worst_class(worst, passed):
    policy = parse_policy({"gates": {"min_class_fidelity": 0.8}})
    metrics = {
        "test_fidelity": 0.9,
        "n_features_used": 2.0,
        "test_fidelity_class_a": 0.95,
        "test_fidelity_class_b": worst,
    }
    evaluation = evaluate_gates(policy, {"metrics": metrics, "validation": {"success": True}})
    result = {r.name: r for r in evaluation.results}["min_class_fidelity"]
    assert (result.passed, result.metric, result.value) == (passed, "test_fidelity_class_b", worst)


def test_mlflow_agrees_that_older_evidence_fails():
    policy = parse_policy({"gates": {"min_class_fidelity": 0.8}})
    evidence = {"metrics": {"test_fidelity": 0.99, "n_features_used": 1.0}}
    result = {r.name: r for r in evaluate_gates(policy, evidence).results}["min_class_fidelity"]
    assert not result.passed and "re-run `govern explain`" in result.reason
