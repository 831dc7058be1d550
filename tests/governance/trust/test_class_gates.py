"""``min_class_fidelity``: the policy key and its gate on per-class test fidelity."""

import pytest

from miret_governance.governance.trust.gates import evaluate
from miret_governance.governance.trust.policy import PolicyError, parse_policy

THREE_CLASSES = {
    "test_fidelity": 0.9,
    "n_features_used": 2.0,
    "test_fidelity_class_grade_A": 0.95,
    "test_fidelity_class_grade_B": 0.8125,
    "test_fidelity_class_grade_C": 0.9,
}


def _class_gate(threshold, metrics):
    policy = parse_policy({"gates": {"min_class_fidelity": threshold}})
    evaluation = evaluate(policy, {"metrics": metrics, "validation": {"success": True}})
    return {r.name: r for r in evaluation.results}["min_class_fidelity"]


def test_the_worst_class_decides_and_is_named():
    failed = _class_gate(0.85, THREE_CLASSES)
    assert (failed.passed, failed.value, failed.metric) == (
        False,
        0.8125,
        "test_fidelity_class_grade_B",
    )
    assert failed.comparison == ">="
    assert failed.reason == (
        "worst of 3 classes: grade_B, test_fidelity_class_grade_B = 0.8125 does not meet >= 0.85"
    )
    at_threshold = _class_gate(0.8125, THREE_CLASSES)
    assert at_threshold.passed and at_threshold.reason == (
        "worst of 3 classes: grade_B, test_fidelity_class_grade_B = 0.8125 meets >= 0.8125"
    )
    # Four significant digits, ten where four would show the value at the threshold.
    close = _class_gate(0.8, dict(THREE_CLASSES, test_fidelity_class_grade_B=0.79999))
    assert close.reason.endswith("test_fidelity_class_grade_B = 0.79999 does not meet >= 0.8")


def test_binary_evidence_has_a_class_per_label_and_nan_counts_as_worst():
    binary = {"test_fidelity": 0.9, "test_fidelity_class_0": 0.96, "test_fidelity_class_1": 0.7}
    result = _class_gate(0.7, binary)
    assert result.passed and result.metric == "test_fidelity_class_1"
    nan = _class_gate(0.5, dict(binary, test_fidelity_class_1=float("nan")))
    assert not nan.passed and nan.reason == "test_fidelity_class_1 (class 1) is NaN"


def test_evidence_without_per_class_fidelity_fails_with_the_fix():
    older = {"test_fidelity": 0.99, "n_features_used": 2.0}
    result = _class_gate(0.5, older)
    assert not result.passed and result.value is None
    assert result.metric == "test_fidelity_class_*"
    assert result.reason == (
        "the evidence has no per-class fidelity (test_fidelity_class_*): it predates "
        "per-class fidelity; re-run `govern explain` to record it"
    )


@pytest.mark.parametrize("value", [1.5, -0.1, "0.9", True, float("nan")])
def test_min_class_fidelity_must_be_a_share(value):
    with pytest.raises(PolicyError) as error:
        parse_policy({"gates": {"min_class_fidelity": value}}, source="strict.toml")
    assert str(error.value) == (
        f"strict.toml: min_class_fidelity = {value!r} is not valid; expected test-set "
        "fidelity of every class (the worst one decides), in [0, 1]"
    )


def test_policy_keeps_the_threshold_and_lists_the_key():
    policy = parse_policy({"gates": {"min_class_fidelity": 1}})
    assert policy.gates["min_class_fidelity"] == 1.0
    with pytest.raises(PolicyError, match="min_class_fidelity = <test-set fidelity of every"):
        parse_policy({"gates": {"min_class_fidelty": 0.9}})
