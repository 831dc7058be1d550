"""Failed gates that say what to change (``GateResult.advice``), and the gates an explain's
settings cannot meet (:mod:`governance.trust.attainable`), on hand-made policies and
evidence."""

import pytest

from miret_governance.governance.trust.attainable import (
    ExplainSettings,
    binaries_per_row,
    rows_for_lower_bound,
    unattainable,
)
from miret_governance.governance.trust.gates import GateResult, evaluate
from miret_governance.governance.trust.policy import GATE_TABLE, parse_policy

DEFAULTS = ExplainSettings(solver="auto", depth=0, max_rows=2000)
LENIENT = {"min_fidelity": 0.9, "max_features": 5, "min_proximity_agreement": 0.9}


def test_every_gate_says_what_it_measures_and_what_to_do():
    for name, spec in GATE_TABLE.items():
        assert spec.meaning and spec.remedy, name
        assert not spec.meaning.endswith(".") and not spec.remedy.endswith("."), name


def test_a_failed_proximity_gate_says_what_proximity_agreement_is_and_what_to_change():
    evidence = {  # HistGradientBoosting of the README's "Your own models"
        "metrics": {"test_fidelity": 0.95, "n_features_used": 3, "test_proximity_agreement": 0.845},
        "validation": {"success": True},
    }
    results = {r.name: r for r in evaluate(parse_policy({"gates": LENIENT}), evidence).results}
    failed = results["min_proximity_agreement"]
    assert failed.reason == "test_proximity_agreement = 0.845 does not meet >= 0.9"
    assert failed.advice == (
        "It measures the share of the pairs of test rows the ensemble treats as alike (they "
        "share a leaf in at least the share m of its trees, m the fit's --proximity-threshold) "
        "that the surrogate also puts in one leaf. To meet it, explain again at another depth "
        "(--depth) and compare: only the MIRET tree is fitted to keep alike training rows in "
        "one leaf, and the fit returns the optimal univariate or CART tree instead when that "
        "is more faithful on held-out rows (the report says which tree it returned), or the "
        "risk function, which owns the policy, sets another threshold."
    )
    assert [name for name, r in results.items() if r.advice] == ["min_proximity_agreement"]
    row = evaluate(parse_policy({"gates": LENIENT}), evidence).to_json()["results"]
    assert {r["name"]: r["advice"] is None for r in row} == {
        "max_features": True,
        "min_fidelity": True,
        "min_proximity_agreement": False,
        "require_validation_pass": True,
    }


def test_a_gap_of_one_says_the_whole_milp_did_not_run():
    evidence = {"metrics": {"test_fidelity": 0.99, "n_features_used": 2, "solver.gap": 1.0}}
    policy = parse_policy({"gates": {"max_gap": 0.01, "require_validation_pass": False}})
    gap = {r.name: r for r in evaluate(policy, evidence).results}["max_gap"]
    assert gap.advice == (
        "It measures how far the surrogate's objective may be from the best tree's, as the "
        "whole MILP's bound proves it: 1 (nothing proven) when the whole MILP did not run, "
        "as on all but small samples without a full Gurobi licence. To meet it, explain "
        "again with --solver gurobi and a Gurobi licence without size limit, so that the "
        "whole MILP runs and proves a gap (a longer --time-limit gives it more work), or the "
        "risk function drops max_gap from the policy (govern policy check names the gates an "
        "explain's settings cannot meet)."
    )


@pytest.mark.parametrize(
    "result",
    [
        GateResult("min_fidelity", "test_fidelity", 0.9, None, False, "metric not logged"),
        GateResult("min_fidelity", "test_fidelity", 0.9, float("nan"), False, "NaN"),
        GateResult("min_fidelity", "test_fidelity", 0.9, 0.95, True, "meets"),
    ],
)
def test_no_advice_without_a_failed_figure(result):
    assert result.advice is None  # unsigned evidence, a missing metric: the reason says


def test_max_gap_below_one_cannot_be_met_without_the_whole_milp():
    policy = parse_policy({"gates": {"max_gap": 0.01, "min_fidelity": 0.9}})
    (highs,) = unattainable(policy, DEFAULTS, licence=lambda: "unavailable")
    assert highs.line == (
        "max_gap = 0.01 cannot be met: solver.gap is 1 unless the whole MILP runs, and HiGHS "
        "is given it only up to 400 binaries (about 100 training rows at depth 1, fewer when "
        "deeper); --max-rows 2000 allows more; explain where a full Gurobi licence is "
        "installed (--solver auto or gurobi), or the risk function drops max_gap from the "
        "policy"
    )
    (limited,) = unattainable(
        policy, ExplainSettings("auto", 2, 2000), licence=lambda: "size-limited"
    )
    assert limited.why == (
        "solver.gap is 1 unless the whole MILP runs, and Gurobi's size-limited licence here "
        "takes it only up to 2000 variables (about 200 training rows at depth 2, fewer when "
        "deeper); --max-rows 2000 allows more"
    )
    (handed,) = unattainable(
        policy, ExplainSettings("gurobi", None, 500), licence=lambda: "unavailable"
    )
    assert handed.why == (
        "without a full Gurobi licence here, --solver gurobi hands a whole MILP of more than "
        "400 binaries (about 100 training rows at depth 1, fewer when deeper) to HiGHS, which "
        "typically stalls on it at gaps of 70-95%, and --max-rows 500 allows more"
    )


def test_max_gap_can_be_met_with_a_full_licence_a_small_sample_or_a_gap_of_one():
    policy = parse_policy({"gates": {"max_gap": 0.01}})
    assert unattainable(policy, DEFAULTS, licence=lambda: "full") == []
    highs = ExplainSettings("highs", 2, 40)  # 40 rows x 10 binaries: within 400
    assert binaries_per_row(2) == 10
    assert unattainable(policy, highs, licence=lambda: pytest.fail("HiGHS needs no probe")) == []
    assert unattainable(parse_policy({"gates": {"max_gap": 1}}), DEFAULTS, lambda: "x") == []


def test_a_lower_bound_needs_enough_test_rows_and_is_never_one():
    policy = parse_policy({"gates": {"min_fidelity_lower_bound": 0.95}})
    assert rows_for_lower_bound(0.95) == 73  # 73 of 73 agreeing: 95% interval from 0.9501
    assert unattainable(policy, DEFAULTS) == []  # the test rows are not known
    few = ExplainSettings("auto", 0, 2000, test_rows=50)
    assert [item.line for item in unattainable(policy, few)] == [
        (
            "min_fidelity_lower_bound = 0.95 cannot be met: 50 test rows prove at most 0.9287 "
            "even when every row agrees; explain with at least 73 test rows (--test-data), or the "
            "risk function sets a lower threshold"
        )
    ]
    assert unattainable(policy, ExplainSettings("auto", 0, 2000, test_rows=73)) == []
    never = parse_policy({"gates": {"min_fidelity_lower_bound": 1.0}})
    assert [item.line for item in unattainable(never, DEFAULTS)] == [
        (
            "min_fidelity_lower_bound = 1 cannot be met: the lower end of a 95% interval is below "
            "1 on any number of test rows; the risk function sets a threshold below 1"
        )
    ]
