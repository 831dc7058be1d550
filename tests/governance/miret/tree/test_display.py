"""Conditions for people: one convention (value <= threshold, yes on the left), weights
at 3 significant digits, long splits as score tables with contribution ranges."""

import numpy as np
import pytest
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.miret.tree.conditions import (
    format_number,
    glued,
    negation,
    split_table,
)
from miret_governance.governance.miret.tree.display import display_from_counts, rules_text
from miret_governance.governance.miret.tree.tree import SurrogateTree

# a in [0, 10], b in [100, 300], c in [0, 1], d in [-5, 5]
SCALER = MinMaxScaler().fit(np.array([[0.0, 100.0, 0.0, -5.0], [10.0, 300.0, 1.0, 5.0]]))


def test_numbers_have_the_digits_asked_and_no_exponent_below_a_million():
    assert format_number(115.43) == "115.4"
    assert format_number(115.43, 3) == "115"
    assert format_number(12345.6) == "12346"
    assert format_number(0.000394512, 3) == "0.000395"
    assert format_number(14.4123, 3) == "14.4"
    assert format_number(-0.0) == "0"
    assert negation("x < 2") == "x >= 2" and negation("S0 <= 2.25") == "S0 > 2.25"
    # Line breaks only between terms: never inside a feature name.
    assert glued("0.1·worst area - 2·mean radius <= 2.5") == (
        "0.1·worst\u00a0area -\u00a02·mean\u00a0radius <=\u00a02.5"
    )


def test_a_four_term_split_is_a_score_table_with_contribution_ranges():
    # normalized x + y + 2 z + 0.5 w - 2 <= 0 is, in raw units,
    # 0.1 a + 0.005 b + 2 c + 0.05 d <= 2 + 0.5 - 0.25 = 2.25.
    tree = SurrogateTree([[1.0, 1.0, 2.0, 0.5]], [-2.0], 1, feature_names=list("abcd"))
    (split,) = split_table(tree, scaler=SCALER)
    score = split["score"]
    assert split["condition"] == score.condition == "S0 <= 2.25" and split["yes"] == "left"
    assert score.threshold == pytest.approx(2.25)
    assert score.rows() == [  # the widest contribution first: c (2), a (1), b (1), d (0.5)
        {"feature": "c", "weight": "2", "contribution": "0 to 2"},
        {"feature": "a", "weight": "0.1", "contribution": "0 to 1"},
        {"feature": "b", "weight": "0.005", "contribution": "0.5 to 1.5"},
        {"feature": "d", "weight": "0.05", "contribution": "-0.25 to 0.25"},
    ]
    assert score.text().splitlines() == [
        "S0 (node 0) = sum of 4 terms; yes when S0 <= 2.25",
        "  term  weight  contribution over the data",
        "  c          2  0 to 2",
        "  a        0.1  0 to 1",
        "  b      0.005  0.5 to 1.5",
        "  d       0.05  -0.25 to 0.25",
    ]
    # Without a data range the table still lists the terms, without contributions.
    (bare,) = split_table(tree)
    assert [r["contribution"] for r in bare["score"].rows()] == ["-"] * 4


def test_three_terms_stay_one_inequality_and_one_feature_is_solved_lower_values_yes():
    coef = [[1.0, 1.0, 2.0, 0.0], [0.0, -1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]]
    tree = SurrogateTree(coef, [-2.0, 0.5, -1.5], 2, feature_names=list("abcd"))
    table = split_table(tree, scaler=SCALER)
    assert table[0]["condition"] == "0.1·a + 0.005·b + 2·c <= 2.5" and table[0]["yes"] == "left"
    # -y + 0.5 <= 0 sends b >= 200 left: written "b < 200", its yes is the right child.
    assert (table[1]["condition"], table[1]["yes"]) == ("b < 200", "right")
    assert (table[2]["condition"], table[2]["yes"]) == ("d <= 0", "left")
    assert all(row["score"] is None for row in table)


def test_display_draws_the_yes_branch_first_and_lists_scores_and_the_meaning_of_purity():
    coef = np.zeros((3, 4))
    coef[0, 1] = -1.0  # b < 200 on the yes (right) side
    coef[2] = [1.0, 1.0, 2.0, 0.5]  # the score S2
    tree = SurrogateTree(coef, [0.5, 0.0, -2.0], 2, feature_names=list("abcd"), classes=(0, 1))
    # leaves 3..6: 3 and 4 under node 1 (b >= 200), 5 and 6 under node 2 (b < 200)
    counts = [[4, 0], [0, 0], [3, 1], [0, 2]]
    shown = display_from_counts(tree, counts, scaler=SCALER, class_names=("no", "yes"))
    assert shown.root.condition == "b < 200" and shown.root.yes.node == 2
    assert shown.root.yes.condition == "S2 <= 2.25" and [s.name for s in shown.scores] == ["S2"]
    lines = rules_text(shown).splitlines()
    assert lines[:3] == [
        "if b < 200 and S2 <= 2.25 then no (40.0% of samples, purity 75.0%)",
        "if b < 200 and S2 > 2.25 then yes (20.0% of samples, purity 100.0%)",
        "if b >= 200 then no (40.0% of samples, purity 100.0%)",
    ]
    assert lines[3] == "S2 (node 2) = sum of 4 terms; yes when S2 <= 2.25"
    assert lines[-1] == (
        "(purity: share of a leaf's rows to which the ensemble gives the leaf's class; each "
        "condition reads value <= threshold (or <): rows that meet it take the yes branch, "
        "drawn on the left, so lower values go left)"
    )


def test_complete_rules_keep_weights_at_three_digits():
    tree = SurrogateTree([[0.123456, -14.41234, 0.00039451]], [1.0], 1, feature_names=list("xyz"))
    assert tree.rules() == (
        "node 0 (level 0): if 0.123·x - 14.4·y + 0.000395·z <= -1 "
        "then leaf 1 (class -1) else leaf 2 (class 1)"
    )
