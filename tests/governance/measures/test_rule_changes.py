"""What changed in the rules between two explanations (governance.measures.rule_changes)."""

import json

from miret_governance.governance.measures.rule_changes import (
    RuleChanges,
    rule_changes,
    rules_of,
)

CHAMPION = """if x1 <= 3.5 and x2 > 0.25 then approve (40.0% of samples, purity 97.0%)
if x1 <= 3.5 and x2 <= 0.25 then decline (10.0% of samples, purity 80.0%)
if x1 > 3.5 then decline (50.0% of samples, purity 99.0%)
missing values: x1 <= 3.5: missing x1 -> yes branch
(purity: share of a leaf's rows; each condition reads value <= threshold)"""


def test_moved_thresholds_added_and_removed_rules_and_features():
    candidate = """if x1 <= 4 and x2 > 0.25 then approve (45.0% of samples, purity 96.0%)
if x1 <= 4 and x2 <= 0.25 then approve (5.0% of samples, purity 70.0%)
if x1 > 4 and x3 > 1e-3 then decline (50.0% of samples, purity 99.0%)
if x1 > 4 and x3 <= 1e-3 then approve (0.1% of samples, purity 100.0%)"""
    changes = rule_changes(CHAMPION, candidate, ("x1", "x2"), ("x1", "x2", "x3"))
    # x1 <= 3.5 -> x1 <= 4 with the same class: moved; the decline leaf became approve
    assert changes.moved == (
        ("if x1 <= 3.5 and x2 > 0.25 then approve", "if x1 <= 4 and x2 > 0.25 then approve"),
    )
    assert changes.removed == (
        "if x1 <= 3.5 and x2 <= 0.25 then decline",
        "if x1 > 3.5 then decline",
    )
    assert changes.added == (
        "if x1 <= 4 and x2 <= 0.25 then approve",
        "if x1 > 4 and x3 > 1e-3 then decline",
        "if x1 > 4 and x3 <= 1e-3 then approve",
    )
    assert (changes.unchanged, changes.gained, changes.lost) == (0, ("x3",), ())
    assert changes.any


def test_same_rules_with_other_shares_are_unchanged_and_digits_in_names_are_not_numbers():
    same = CHAMPION.replace("40.0%", "41.0%").replace("purity 99.0%", "purity 98.0%")
    changes = rule_changes(CHAMPION, same, ("x1", "x2"), ("x1", "x2"))
    assert changes == RuleChanges(unchanged=3)
    assert not changes.any
    # x2 -> x3 is another feature, not a moved threshold
    renamed = rule_changes("if x2 > 1 then a", "if x3 > 1 then a")
    assert (renamed.moved, renamed.added, renamed.removed) == (
        (),
        ("if x3 > 1 then a",),
        ("if x2 > 1 then a",),
    )


def test_rules_of_keeps_the_leaf_rules_only():
    assert rules_of(CHAMPION) == [
        "if x1 <= 3.5 and x2 > 0.25 then approve",
        "if x1 <= 3.5 and x2 <= 0.25 then decline",
        "if x1 > 3.5 then decline",
    ]
    assert rules_of("always yes (100.0% of samples, purity 100.0%)") == ["always yes"]


def test_json_text_cuts_the_longest_list_and_keeps_the_counts():
    added = tuple(f"if feature_{i} > {i} then yes" for i in range(40))
    changes = RuleChanges(added=added, removed=("always no",), lost=("f",))
    assert RuleChanges.from_json(json.loads(changes.to_json_text())) == changes
    cut = RuleChanges.from_json(json.loads(changes.to_json_text(limit=300)))
    assert len(cut.to_json_text(limit=10_000)) <= 300
    assert cut.removed == ("always no",) and cut.added == added[: len(cut.added)]
    assert cut.counts == {"added": 40, "removed": 1, "moved": 0}
    assert (cut.count("added"), cut.count("removed")) == (40, 1)
