"""One applicant's path through a hand-built tree, in raw units."""

import numpy as np
import pandas as pd
import pytest
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.miret.tree.paths import (
    SHOWN_DISAGREEMENTS,
    RowsError,
    applicants,
    feature_rows,
    row_paths,
)
from miret_governance.governance.miret.tree.tree import SurrogateTree
from miret_governance.governance.report.html import (
    ReportContext,
    render_model_card,
    render_report,
)

# normalized space: node 0 x0 <= 0.5; node 1 x1 <= 0.3; node 2 x1 <= x0 (left = yes).
# Raw units: x0 in [0, 200] (x0 / 200), x1 in [10, 20] ((x1 - 10) / 10), so node 0 is
# x0 <= 100, node 1 x1 <= 13, node 2 -0.005 x0 + 0.1 x1 <= 1.
COEF = [[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]]
INTERCEPT = [-0.5, -0.3, 0.0]
RAW = pd.DataFrame(
    {
        "x0": [40.0, 180.0, 120.0, 60.0, 10.0, 90.0],
        "x1": [11.0, 12.0, 18.0, 19.0, 10.5, 12.5],
    },
    index=[7, 8, 9, 10, 11, 12],
)
# leaves: 3 (benign), 5 (benign), 6 (malignant), 4 (malignant), 3, 3
ENSEMBLE = np.array(["benign", "malignant", "malignant", "malignant", "benign", "malignant"])
CLASS_NAMES = ("no default", "default")


@pytest.fixture
def tree():
    return SurrogateTree(COEF, INTERCEPT, 2, ["x0", "x1"], ["benign", "malignant"])


@pytest.fixture
def scaler():
    return MinMaxScaler().fit(pd.DataFrame({"x0": [0.0, 200.0], "x1": [10.0, 20.0]}))


def test_paths_in_raw_units_hand_computed(tree, scaler):
    paths = row_paths(tree, RAW, ENSEMBLE, scaler=scaler, class_names=CLASS_NAMES)
    assert [p.row for p in paths] == [7, 8, 9, 10, 11, 12]
    assert [p.leaf for p in paths] == [3, 5, 6, 4, 3, 3]
    assert [p.path_text for p in paths[:4]] == [
        "x0 <= 100 (row: 40) \u2192 x1 <= 13 (row: 11)",
        "x0 > 100 (row: 180) \u2192 -0.005·x0 + 0.1·x1 <= 1 (row: 0.3)",
        "x0 > 100 (row: 120) \u2192 -0.005·x0 + 0.1·x1 > 1 (row: 1.2)",
        "x0 <= 100 (row: 60) \u2192 x1 > 13 (row: 19)",
    ]
    second = paths[1]
    assert [(s.node, s.condition, s.answer) for s in second.steps] == [
        (0, "x0 <= 100", "no"),
        (2, "-0.005·x0 + 0.1·x1 <= 1", "yes"),
    ]
    assert second.steps[1].value == pytest.approx(0.3)
    assert (second.surrogate, second.ensemble, second.agrees) == ("no default", "default", False)
    assert second.values == {"x0": 180.0, "x1": 12.0}
    assert [p.agrees for p in paths] == [True, False, True, True, True, False]
    assert paths[0].to_dict() == {
        "row": 7,
        "steps": [
            {
                "node": 0,
                "condition": "x0 <= 100",
                "answer": "yes",
                "holds": "x0 <= 100",
                "value": 40.0,
                "terms": [["x0", 0.005]],
                "category": None,
            },
            {
                "node": 1,
                "condition": "x1 <= 13",
                "answer": "yes",
                "holds": "x1 <= 13",
                "value": 11.0,
                "terms": [["x1", 0.1]],
                "category": None,
            },
        ],
        "leaf": 3,
        "surrogate": "no default",
        "ensemble": "no default",
        "agrees": True,
    }


def test_negative_weight_reads_lower_values_on_the_yes_side(scaler):
    # x0_norm >= 0.5 goes left: in raw units x0 >= 100, so "x0 < 100" is the right child
    tree = SurrogateTree([[-1.0, 0.0]], [0.5], 1, ["x0", "x1"], ["benign", "malignant"])
    rows = pd.DataFrame({"x0": [40.0, 150.0], "x1": [12.0, 12.0]})
    low, high = row_paths(tree, rows, ["malignant", "malignant"], scaler=scaler)
    assert (low.path_text, low.leaf, low.surrogate) == ("x0 < 100 (row: 40)", 2, "malignant")
    assert (high.path_text, high.leaf, high.surrogate) == ("x0 >= 100 (row: 150)", 1, "benign")
    assert [s.answer for s in low.steps + high.steps] == ["yes", "no"]
    found = applicants(tree, rows, ["malignant", "malignant"], scaler=scaler)
    assert [p.leaf for p in found.examples] == [2, 1]  # the rules' order: yes side first


def test_a_long_split_is_a_score_with_its_table():
    tree = SurrogateTree([[1.0, 1.0, 1.0, 1.0]], [-2.0], 1, ["a", "b", "c", "d"])
    rows = pd.DataFrame({"a": [0.2], "b": [0.3], "c": [0.4], "d": [0.5]})
    (path,) = row_paths(tree, rows, [-1])
    (step,) = path.steps
    assert (step.condition, step.answer, step.value) == ("S0 <= 2", "yes", pytest.approx(1.4))
    assert path.path_text == "S0 <= 2 (row: 1.4)" and step.score.name == "S0"
    assert step.terms == (("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 1.0))
    found = applicants(tree, rows, [1])
    assert found.scores == (step.score,)
    html, card = render_report(_context(found)), render_model_card(_context(found))
    heading = "S0 (node 0) = sum of 4 terms; yes when S0 &lt;= 2"
    assert f"<h3>{heading}</h3>" in html and f"\n{heading}\n" in card
    assert '<tr><td>a</td><td class="num">1</td><td class="num">-</td></tr>' in html
    assert "| a | 1 | - |" in card


def test_split_without_coefficients_is_no_step(tree):
    flat = SurrogateTree([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0]], [1.0, -0.3, -0.5], 2, ["x0", "x1"])
    (path,) = row_paths(flat, pd.DataFrame({"x0": [0.9], "x1": [0.1]}), [1])
    # node 0 sends everything right (intercept 1 > 0); node 2 is x0 <= 0.5
    assert path.path_text == "x0 > 0.5 (row: 0.9)" and path.leaf == 6
    assert (path.surrogate, path.ensemble, path.agrees) == ("1", "1", True)


def test_applicants_examples_per_leaf_and_every_disagreement(tree, scaler):
    found = applicants(tree, RAW, ENSEMBLE, scaler=scaler)
    # leaf 3 holds rows 7, 11, 12 (normalized (0.2, 0.1), (0.05, 0.05), (0.45, 0.25)):
    # their median (0.2, 0.1) is row 7
    assert [(p.leaf, p.row) for p in found.examples] == [(3, 7), (4, 10), (5, 8), (6, 9)]
    assert found.leaf_rows == {3: 3, 4: 1, 5: 1, 6: 1}
    assert [p.row for p in found.disagreements] == [8, 12]
    assert found.n_rows == 6 and found.more_disagreements == 0
    table = found.disagreement_table()
    assert table.columns.tolist() == ["row", "ensemble", "surrogate", "leaf", "path", "x0", "x1"]
    assert table.row.tolist() == [8, 12] and table.x0.tolist() == [180.0, 90.0]
    assert table.ensemble.tolist() == ["malignant"] * 2
    assert table.path[1] == "x0 <= 100 (row: 90) \u2192 x1 <= 13 (row: 12.5)"


def test_disagreements_beyond_the_cap_are_counted(tree):
    n = SHOWN_DISAGREEMENTS + 7
    rows = pd.DataFrame({"x0": np.full(n, 0.1), "x1": np.full(n, 0.1)})  # leaf 3: benign
    found = applicants(tree, rows, np.array(["malignant"] * n))
    assert len(found.disagreements) == n and len(found.shown_disagreements) == 50
    assert found.more_disagreements == 7 and len(found.disagreement_table()) == n
    agreeing = applicants(tree, rows, np.array(["benign"] * n)).disagreement_table()
    assert agreeing.empty and agreeing.columns.tolist()[:5] == [
        "row",
        "ensemble",
        "surrogate",
        "leaf",
        "path",
    ]


def test_bad_rows_are_refused_by_column():
    names = ["x0", "x1", "x2"]
    with pytest.raises(RowsError, match=r"rows.csv lacks the feature columns \['x1', 'x2'\]"):
        feature_rows(pd.DataFrame({"x0": [1.0]}), names, "rows.csv")
    text = pd.DataFrame({"x0": [1.0, 2.0], "x1": ["3", "high"], "x2": [1.0, np.inf]})
    with pytest.raises(RowsError) as refused:
        feature_rows(text, names, "rows.csv")
    assert str(refused.value) == (
        "rows.csv: the columns must hold numbers in raw units: 'x1' holds text (row 1: "
        "'high'); 'x2' has infinite values (rows [1])"
    )
    with pytest.raises(RowsError, match="has no rows"):
        feature_rows(pd.DataFrame(columns=names), names, "rows.csv")
    numbers = feature_rows(pd.DataFrame({"x2": [1], "x1": ["2.5"], "x0": [True]}), names)
    assert numbers.columns.tolist() == names and numbers.to_numpy().tolist() == [[1.0, 2.5, 1.0]]


def _context(found) -> ReportContext:
    return ReportContext(
        title="models:/credit/1",
        depth=2,
        rules="",
        metrics={},
        parameters={},
        provenance={},
        validation={"status": "passed"},
        applicants=found,
        applicants_source="test.csv",
    )


def test_page_and_card_list_the_disagreements(tree, scaler):
    context = _context(applicants(tree, RAW, ENSEMBLE, scaler=scaler, class_names=CLASS_NAMES))
    html = render_report(context)
    assert "Rows where surrogate and ensemble disagree: 2 of 6 test rows" in html
    assert (
        '<tr><td class="num">8</td><td><code>x0 &gt; 100</code> <span class="caption">(row: '
        '180)</span> &rarr; <code>-0.005·x0 + 0.1·x1 &lt;= 1</code> <span class="caption">'
        '(row: 0.3)</span></td><td>default</td><td class="differs">no default'
        "</td></tr>"
    ) in html
    assert (
        '<td class="num">12</td>' in html
        and "(3 test rows in this leaf)" in html
        and "(1 test row in this leaf)" in html
    )
    card = render_model_card(context)
    assert "Rows where surrogate and ensemble disagree: 2 of 6 test rows" in card
    assert (
        "- **Row 8**: x0 &gt; 100 (row: 180) → -0.005·x0 + 0.1·x1 &lt;= 1 (row: 0.3); "
        "ensemble **default**, surrogate **no default**"
    ) in card
    assert (
        "- **Row 7** (3 test rows in its leaf): x0 &lt;= 100 (row: 40) → x1 &lt;= 13 (row: 11); "
        "ensemble **no default**, surrogate **no default**"
    ) in card
