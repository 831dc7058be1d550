"""gate_report.md: the verdict first, a three-column table, the reasons as a list (a failed
gate's with what to do)."""

from miret_governance.governance.report.gate_markdown import gate_markdown, verdict
from miret_governance.governance.trust.gates import evaluate
from miret_governance.governance.trust.policy import Policy


def test_gate_report_puts_the_verdict_first_and_the_reasons_below_a_narrow_table():
    evaluation = evaluate(
        Policy(gates={"min_fidelity": 0.99, "max_features": 3}),
        {"metrics": {"test_fidelity": 0.9767441860465116, "n_features_used": 2}},
    )
    text = gate_markdown(
        evaluation,
        ensemble_uri="models:/rf/1",
        surrogate_uri="models:/rf-surrogate/1",
        policy="strict v1a2b3c4d",
        source="strict.toml",
        time="2026-11-24T06:35:30+00:00",
    )
    lines = text.splitlines()
    assert lines[0] == "# Gates FAILED: 1 of 2 gates fail"
    assert lines[2] == "Failed: min_fidelity."
    assert lines[4] == (
        "Ensemble models:/rf/1; surrogate models:/rf-surrogate/1 (its stored evidence); "
        "policy strict v1a2b3c4d (strict.toml); evaluated 2026-11-24T06:35:30+00:00."
    )
    assert lines[6:10] == [
        "| Gate | Result | Value (threshold) |",
        "|---|---|---|",
        "| min_fidelity | **FAIL** | 0.9767 (needs &gt;= 0.99) |",
        "| max_features | pass | 2 (needs &lt;= 3) |",
    ]
    assert max(len(line) for line in lines[6:10]) < 60  # no long reason inside the table
    assert lines[11:16] == [
        "## Reasons",
        "",
        (
            "- FAIL **min_fidelity** (test_fidelity): test\\_fidelity = 0.9767 does not meet "
            "&gt;= 0.99"
        ),
        (  # a failed gate says what its figure measures and what to do
            "  - It measures the share of test rows on which the surrogate tree gives the "
            "ensemble's class. To meet it, explain again with a deeper tree (--depth; the "
            "default is the ensemble's depth, at most 4), which agrees more often but uses "
            "more features, or a smaller sparsity weight (--alpha 0.2), or the risk function, "
            "which owns the policy, sets another threshold."
        ),
        "- pass **max_features** (n_features_used): n\\_features\\_used = 2 meets &lt;= 3",
    ]
    assert f"Policy digest: `{evaluation.policy_digest}`" in lines
    assert f"Evidence digest: `{evaluation.evidence_digest}`" in lines


def test_verdict_of_a_passing_evaluation():
    evaluation = evaluate(Policy(gates={"min_fidelity": 0.9}), {"metrics": {"test_fidelity": 0.95}})
    assert verdict(evaluation) == "PASSED: all 1 gates pass"
    assert gate_markdown(evaluation).startswith("# Gates PASSED: all 1 gates pass\n\n| Gate |")


def test_reasons_round_for_people_unless_rounding_hides_the_difference():
    from miret_governance.governance.trust.gates import readable_pair

    assert readable_pair(0.9883720930232558, 0.99) == ("0.9884", "0.99")
    assert readable_pair(0.99996, 0.99997) == ("0.99996", "0.99997")
    assert readable_pair(2.0, 2.0) == ("2", "2")
