"""The solver's outcome for people and the glossary."""

import numpy as np
import pytest

from miret_governance.governance.report.wording import (
    describe_stop,
    gate_verdict,
    glossary,
    solver_outcome,
    tree_kind,
)


@pytest.mark.parametrize(
    ("solve", "expected"),
    [
        (
            {"stop_reason": "stalled", "wall_time": 4.21, "gap": 0.864},
            "best tree found, optimality not proven (solver: stalled after 4.2 s, gap 86.4%)",
        ),
        (
            {"stop_reason": "work_limit", "wall_time": 9.9, "gap": 0.5},
            (
                "best tree found, optimality not proven (solver: used its work budget after 9.9 s, "
                "gap 50.0%)"
            ),
        ),
        (
            {"stop_reason": "time_limit", "wall_time": 20.1, "gap": 0.5, "time_limit_hit": True},
            (
                "best tree found, optimality not proven (solver: hit the time limit after 20.1 s, "
                "gap 50.0%, so a re-run may give another tree)"
            ),
        ),
        (
            {"stop_reason": "optimal", "wall_time": 1.0, "gap": 0.0, "time_limit_hit": True},
            (
                "proved optimal (solver: proved optimal after 1.0 s; the time limit cut the warm "
                "start short, so a re-run may give another tree)"
            ),
        ),
        (
            {"stop_reason": "gap_limit", "wall_time": 2.0, "gap": 0.0001},
            "proved near-optimal (solver: reached the requested gap after 2.0 s, gap 0.0%)",
        ),
        (
            {"stop_reason": "trivial", "wall_time": 0.1},
            "no solve needed (solver: not run (the ensemble predicts one class))",
        ),
    ],
)
def test_the_stop_is_told_with_whether_a_rerun_can_differ(solve, expected):
    assert describe_stop(solve) == expected


def test_outcome_says_what_was_proven_and_what_was_not():
    stalled = solver_outcome(
        {
            "stop_reason": "stalled",
            "wall_time": 3.6,
            "gap": 0.864,
            "objective": 8.542,
            "bound": 1.163,
        }
    )
    assert stalled["proved"] is False
    assert stalled["proven"] == (
        "No tree of this depth can score below 1.163 on the MIRET objective (the solver's "
        "proven bound); this tree scores 8.542."
    )
    assert stalled["not_proven"].startswith(
        "Whether a better-scoring tree exists: the search stopped before closing the gap of "
        "86.4% between the two."
    )
    statuses = {"0": "optimal", "1": "stalled", "2": "optimal", "3": "nothing_to_decide"}
    nodes = solver_outcome(
        {"stop_reason": "node_milps", "wall_time": 4.2, "gap": 1.0, "node_statuses": statuses}
    )
    assert nodes["proven"].startswith(
        "2 of 3 splits are proven the best at their node given the rest of the tree"
    )
    assert nodes["not_proven"].startswith(
        "Whether a better-scoring tree exists: the search stopped."
    )
    assert nodes["technical"] == (
        "solver: whole MILP not run, each split solved as its own MILP after 4.2 s"
    )
    statuses = {"0": "too_large", "1": "optimal", "2": "optimal"}
    large = solver_outcome({"stop_reason": "node_milps", "gap": 1.0, "node_statuses": statuses})
    assert large["proven"] == (
        "2 of 3 splits are proven the best at their node given the rest of the tree (each "
        "node solved as its own MILP; 1 was too large to solve within the budget and kept "
        "the split the search found); the whole tree was not solved as one MILP."
    )
    statuses = {"0": "too_large", "1": "too_large", "2": "optimal"}
    both = solver_outcome({"stop_reason": "node_milps", "gap": 1.0, "node_statuses": statuses})
    assert "1 of 3 splits are proven" in both["proven"] and "; 2 were too large" in both["proven"]
    optimal = solver_outcome({"stop_reason": "optimal", "gap": 0.0})
    assert optimal["proved"] and optimal["headline"] == "proved optimal"
    assert "fidelity" in optimal["not_proven"]
    replaced = solver_outcome(
        {"stop_reason": "stalled", "gap": 0.5, "fallback": "held out", "chosen": "univariate"}
    )
    assert replaced["proven"].startswith(
        "The tree shown is the optimal univariate tree, chosen on held-out rows (held out). "
        "About the MIRET tree it was compared with: No tree of this depth can score below"
    )
    assert replaced["technical"].endswith("; returned the optimal univariate tree")


def test_glossary_lists_the_terms_of_the_sections_shown():
    always = [term for term, _ in glossary(set())]
    assert "Purity" in always and "yes / no" in always and "MIP gap" not in always
    everything = dict(
        glossary({"fidelity", "interval", "scores", "solver", "baseline", "parameters", "vite"})
    )
    for term in (
        "Proximity agreement",
        "MIP gap",
        "alpha",
        "h (gamma_percentile)",
        "epsilon",
        "m (proximity_threshold)",
        "Guarantee floor",
        "VITE node frequency",
    ):
        assert everything[term].endswith(".")
    assert "lower values go left" in everything["yes / no"]


def test_the_tree_is_named_by_the_candidate_returned_and_its_splits():
    """QA: an optimal univariate tree, and a MIRET tree whose every split is on one
    feature, were both titled "MIRET oblique decision tree"."""
    from types import SimpleNamespace

    one_feature = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    two_features = np.array([[1.0, 0.5], [0.0, 2.0], [0.0, 0.0]])

    def fitted(chosen, coef):
        return SimpleNamespace(
            solve_report_=SimpleNamespace(chosen=chosen), tree_=SimpleNamespace(coef=coef)
        )

    assert tree_kind(fitted("univariate", two_features)) == "optimal univariate tree"
    assert tree_kind(fitted("cart", one_feature)) == "CART tree"
    assert tree_kind(fitted("miret", one_feature)) == "MIRET tree, one feature per split"
    assert tree_kind(fitted("miret", two_features)) == "MIRET tree with oblique splits"


def test_a_gate_verdict_names_its_alias_and_policy_never_the_version():
    assert gate_verdict("FAIL", "strict v1a2b3c4d", "prod") == (
        "gate for @prod under strict v1a2b3c4d: FAIL"
    )
    assert gate_verdict("PASS", "lenient v5e6f7a8b", None) == (
        "what-if gate (no alias) under lenient v5e6f7a8b: PASS"
    )
