import pytest

"""The reviewer's page and model card: escaping, valid tables, score tables, the
solver's outcome in words, the glossary, the VITE node tables."""

import numpy as np


# --------------------------------------------------------------------------- report and card
def _table_rows_have_header_width(markdown: str):
    """Every row of every Markdown table has as many cells as its header."""
    import re

    def cells(line):
        return len(re.split(r"(?<!\\)\|", line.strip())[1:-1])

    lines = markdown.splitlines()
    tables = 0
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            tables += 1
            width = cells(line)
            k = i + 1
            while k < len(lines) and lines[k].startswith("|"):
                assert cells(lines[k]) == width, lines[k]
                k += 1
    return tables


def test_report_and_model_card_escape_user_text_and_keep_tables_valid(tmp_path):
    from miret_governance.governance.miret.tree.display import display_tree
    from miret_governance.governance.miret.tree.tree import SurrogateTree
    from miret_governance.governance.report.html import ReportContext, write_report
    from miret_governance.governance.report.tree_figure import save_tree_figure

    evil = "<script>alert(1)</script>"
    names = (evil, "$\\frac{a$", "a|b")
    coef = np.zeros((3, 3))
    coef[0] = [1.0, 0.0, 0.0]
    coef[2] = [0.0, 2.0, -1.0]
    tree = SurrogateTree(coef, [-0.5, 0.0, -0.2], 2, feature_names=names, classes=(0, 1))
    rng = np.random.default_rng(0)
    X = rng.random((40, 3))
    shown = display_tree(tree, X, tree.predict(X), class_names=("benign", "malig|nant"))
    tree_svg = save_tree_figure(shown, tmp_path / "figures")[1]
    context = ReportContext(
        title="models:/credit-rf/3",
        depth=2,
        rules="",
        metrics={
            "train_fidelity": 0.95321987654,
            "test_fidelity": 0.9,
            "solver.gap": 0.0123,
            "train_proximity_pairs": 12.0,
            "n_features_used": 3.0,
        },
        parameters={"alpha": 0.5, "formulation": "miret"},
        provenance={"ensemble_version_digest": "sha256:" + "ab" * 32, "feature|note": evil},
        validation={"status": "passed", "summary": f"Input validation passed\n  - {evil}"},
        solve={
            "stop_reason": "stalled",
            "wall_time": 4.2,
            "gap": 0.864,
            "objective": 8.5,
            "bound": 1.16,
        },
        tree_svg=tree_svg,
        display=shown,
        baseline={"train_fidelity": 0.91, "test_fidelity": 0.88, "n_features_used": 2},
        allowed_features=[[evil, "a|b"], ["$\\frac{a$"]],
    )
    html_path, card_path = write_report(context, tmp_path)
    html, card = html_path.read_text(), card_path.read_text()
    assert evil not in html and evil not in card
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in card
    assert "<script" not in html.lower() and "http" not in html.replace("http://www.w3.org", "")
    assert _table_rows_have_header_width(card) >= 6
    for section in (
        "## Model details",
        "## Intended use",
        "## Metrics",
        "## Evidence",
        "## Caveats",
        "### Comparison with the depth-2 CART baseline",
        "### Features allowed per level (VITE)",
    ):
        assert section in card
    assert "| Train fidelity | 0.9532 | 0.91 |" in card
    assert "0.95321987654" not in html and "0.953" in html
    # The rules of the display tree, with yes-branch wording, in both outputs.
    root = shown.root.condition
    assert root.startswith("&lt;script&gt;") is False and "<= 0.5" in root
    assert "malig\\|nant" in card and "malig|nant" in html
    assert 'viewBox="' in html and "width:100%" in html


# --------------------------------------------------------------------------- report layout
def test_vite_nodes_lists_features_by_trees_and_folds_the_tail():
    import pandas as pd

    from miret_governance.governance.report.html import vite_nodes

    ranges = pd.DataFrame(
        {
            "position": [0, 0, 1, 1, 1, 3],
            "feature": ["a", "b", "a", "b", "c", "a"],
            "low": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
            "high": [0.1, 0.25, 0.35, 0.4, 0.5, 0.6],
            "low_raw": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            "high_raw": [1.0, 2.5, 3.5, 4.0, 5.0, 6.0],
            "count": [3, 1, 1, 2, 1, 4],
            "share": [0.75, 0.25, 0.2, 0.6, 0.2, 1.0],  # weighted: not count over trees
        }
    )
    nodes = vite_nodes(ranges, depth=2, max_rows=2)  # position 3 is on level 2: left out
    assert [n["position"] for n in nodes] == [0, 1]
    root, left = nodes
    assert (root["parent"], root["trees"]) == (None, 4)
    assert [(r["feature"], r["trees"], r["share"], r["thresholds"]) for r in root["rows"]] == [
        ("a", 3, 0.75, "1"),
        ("b", 1, 0.25, "[2, 2.5]"),
    ]
    assert (left["parent"], left["side"], left["level"]) == (0, "left", 1)
    assert [(r["feature"], r["trees"], r["share"]) for r in left["rows"]] == [
        ("b", 2, 0.6),
        ("other (2 features)", 2, pytest.approx(0.4)),
    ]


def test_inlined_figure_keeps_its_text_readable(tmp_path):
    from miret_governance.governance.report.html import inline_svg

    svg = tmp_path / "f.svg"
    svg.write_text('<?xml version="1.0"?>\n<svg width="300pt" height="10pt"><g/></svg>')
    assert str(inline_svg(svg)).startswith('<svg style="min-width:340px;max-width:480px" width=')


def _scored_context(tmp_path, solve):
    """A report context whose root is the score S0 of four raw-unit terms."""
    from sklearn.preprocessing import MinMaxScaler

    from miret_governance.governance.miret.tree.display import display_tree
    from miret_governance.governance.miret.tree.tree import SurrogateTree
    from miret_governance.governance.report.html import ReportContext

    # a in [0, 10], b in [100, 300], c in [0, 1], d in [-5, 5]
    scaler = MinMaxScaler().fit(np.array([[0.0, 100.0, 0.0, -5.0], [10.0, 300.0, 1.0, 5.0]]))
    tree = SurrogateTree([[1.0, 1.0, 2.0, 0.5]], [-2.0], 1, feature_names=list("abcd"))
    X = np.random.default_rng(0).random((50, 4))
    shown = display_tree(tree, X, tree.predict(X), scaler=scaler, class_names=("no", "yes"))
    return ReportContext(
        title="models:/m/1",
        depth=1,
        rules="",
        metrics={"test_fidelity": 0.9, "test_fidelity_ci_low": 0.8, "test_fidelity_ci_high": 0.95},
        parameters={},
        provenance={},
        validation={"status": "passed"},
        display=shown,
        solve=solve,
    )


def test_page_and_card_show_score_tables_the_solver_outcome_and_a_glossary(tmp_path):
    from miret_governance.governance.report.html import write_report

    solve = {
        "stop_reason": "stalled",
        "wall_time": 3.6,
        "gap": 0.864,
        "objective": 8.542,
        "bound": 1.163,
    }
    html_path, card_path = write_report(_scored_context(tmp_path, solve), tmp_path)
    html, card = html_path.read_text(), card_path.read_text()
    # 0.1 a + 0.005 b + 2 c + 0.05 d <= 2.25, the widest contribution first.
    heading = "S0 (node 0) = sum of 4 terms; yes when S0 &lt;= 2.25"
    assert heading in html
    assert "if <code>S0 &lt;=\u00a02.25</code> then <strong>no</strong>" in html
    assert '<td>c</td><td class="num">2</td><td class="num">0 to 2</td>' in html
    assert "| d | 0.05 | -0.25 to 0.25 |" in card
    for text in (html, card):
        assert "best tree found, optimality not proven" in text
        assert "stalled after 3.6 s, gap 86.4%" in text
        assert "can score below 1.163" in text and "scores 8.542" in text
        assert "stalled (gap" not in text  # the old badge wording
        assert "MIP gap" in text and "Proximity agreement" in text
        assert "Score S&lt;node&gt;" in text  # a score is shown: its term is explained
    # the solver's outcome is a technical detail, never a headline badge
    header, technical = html.split("</header>")[0], html.split("<h2>Technical details</h2>")[1]
    assert "solver" not in header and "optimality not proven" not in header
    assert "What the solver proved: best tree found, optimality not proven" in technical
    assert "<h2>Glossary</h2>" in html and "## Glossary" in card
    assert "- **Purity**: Share of a leaf's fit rows to which the ensemble gives" in card
    assert _table_rows_have_header_width(card) >= 2


def test_without_a_whole_milp_the_gap_says_so_instead_of_100_percent(tmp_path):
    """Node MILPs only: no bound, so the logged gap of 1 (nothing proven, for gates) is
    not shown as a measured 100% gap."""
    from miret_governance.governance.report.html import WHOLE_MILP_NOT_RUN, write_report

    solve = {"stop_reason": "node_milps", "wall_time": 3.3, "gap": 1.0, "global_milp": False}
    context = _scored_context(tmp_path, solve)
    context.metrics.update({"solver.objective": 8.542, "solver.gap": 1.0})
    html, card = (path.read_text() for path in write_report(context, tmp_path))
    assert f'<td>MIP gap</td><td class="num">{WHOLE_MILP_NOT_RUN}</td>' in html
    assert f"| MIP gap | {WHOLE_MILP_NOT_RUN} |" in card
    assert "100.00%" not in html and "100.00%" not in card
    assert '<td>Objective</td><td class="num">8.542</td>' in html
    solved = {**solve, "global_milp": True, "stop_reason": "stalled", "gap": 0.864}
    context = _scored_context(tmp_path / "whole", solved)
    context.metrics.update({"solver.objective": 8.542, "solver.gap": 0.864})
    html = write_report(context, tmp_path / "whole")[0].read_text()
    assert '<td>MIP gap</td><td class="num">86.40%</td>' in html


def test_page_and_card_show_how_the_tree_was_chosen(tmp_path):
    from miret_governance.governance.report.html import write_report

    solve = {
        "stop_reason": "node_milps",
        "cv_fidelity": {"miret": 0.9, "univariate": 0.85, "cart": 0.8},
        "candidate_features": {"miret": 2, "univariate": 3, "cart": 4},
        "chosen": "miret",
        "node_statuses": {"0": "optimal"},
    }
    html_path, card_path = write_report(_scored_context(tmp_path, solve), tmp_path)
    html, card = html_path.read_text(), card_path.read_text()
    assert "<h2>How the tree was chosen</h2>" in html and "### How the tree was chosen" in card
    row = '<tr><td>MIRET tree</td><td class="num">0.9</td><td class="num">2</td><td>yes</td>'
    assert row in html
    assert "| optimal univariate tree | 0.85 | 3 |  |" in card
    assert "1 of 1 splits are proven the best at their node" in html
    paper = write_report(
        _scored_context(tmp_path / "paper", {"stop_reason": "optimal"}), tmp_path / "paper"
    )
    assert "How the tree was chosen" not in paper[0].read_text()


def test_page_and_card_show_the_grid_the_fit_chose_from(tmp_path):
    from miret_governance.governance.miret.fit.grid import RULE
    from miret_governance.governance.report.html import write_report

    rows = [
        {"candidate": "miret", "depth": 2, "alpha": 0.2, "cv_fidelity": 0.9, "features": 2.0},
        {"candidate": "miret", "depth": 2, "alpha": 0.5, "cv_fidelity": 0.85, "features": 1.5},
        {"candidate": "univariate", "depth": 2, "alpha": None, "cv_fidelity": 0.8, "features": 1.0},
        {"candidate": "cart", "depth": 2, "alpha": None, "cv_fidelity": 0.75, "features": 2.0},
    ]
    solve = {
        "stop_reason": "node_milps",
        "cv_fidelity": {"miret": 0.9, "univariate": 0.8, "cart": 0.75},
        "candidate_features": {"miret": 2, "univariate": 1, "cart": 2},
        "chosen": "miret",
        "grid": {
            "depths": [2],
            "alphas": [0.2, 0.5],
            "depth": 2,
            "alpha": 0.2,
            "rule": RULE,
            "rows": rows,
        },
    }
    html_path, card_path = write_report(_scored_context(tmp_path, solve), tmp_path)
    html, card = html_path.read_text(), card_path.read_text()
    # a record written before m was chosen: no proximity_threshold anywhere
    text = "chose alpha 0.2 among alpha 0.2 / 0.5 (not given) on the same folds: "
    assert f"The fit {text}{RULE}" in html and f"The fit {text}{RULE}" in card
    chosen = (
        '<tr><td class="num">2</td><td class="num">0.2</td><td class="num">-</td>'
        '<td>MIRET tree</td><td class="num">0.9</td><td class="num">2</td><td>yes</td></tr>'
    )
    assert chosen in html
    assert '<td class="num">-</td><td>CART tree</td><td class="num">0.75</td>' in html
    assert "| 2 | 0.5 | - | MIRET tree | 0.85 | 1.5 |  |" in card
    assert "| 2 | - | - | optimal univariate tree | 0.8 | 1 |  |" in card
    # and one with m chosen too: the setting (alpha 0.5, m 1) is marked, not alpha 0.5 at 0.9
    for row, m in zip(rows, (0.9, 0.9, None, None), strict=True):
        row["proximity_threshold"] = m
    rows.append({**rows[1], "proximity_threshold": 1.0, "cv_fidelity": 0.95})
    solve["grid"].update(
        depths=[2, 3], alpha=0.5, proximity_threshold=1.0, proximity_thresholds=[0.9, 1.0]
    )
    html = write_report(_scored_context(tmp_path, solve), tmp_path)[0].read_text()
    text = "chose depth 2, alpha 0.5, m 1 among depth 2 / 3, alpha 0.2 / 0.5, m 0.9 / 1"
    assert text in html
    assert html.count("<td>yes</td></tr>") == 1 + 1  # the grid's row and the candidate's
    assert (
        '<td class="num">0.5</td><td class="num">1</td><td>MIRET tree</td>'
        '<td class="num">0.95</td><td class="num">1.5</td><td>yes</td></tr>'
    ) in html


# --------------------------------------------------------------------------- k classes
def _class_context(confusion_table, **extra):
    from miret_governance.governance.report.html import ReportContext

    return ReportContext(
        title="models:/grades/1",
        depth=2,
        rules="always A",
        metrics={"test_fidelity": 0.7, "train_fidelity": 0.8},
        parameters={"alpha": 0.5},
        provenance={"seed": 0},
        validation={"status": "passed", "summary": "Input validation passed"},
        confusion=confusion_table,
        **extra,
    )


def _three_class_display():
    """Depth 1 on x0: leaves predict classes 0 and 2 of three, named grade A, B and C."""
    from miret_governance.governance.miret.tree.display import display_tree
    from miret_governance.governance.miret.tree.tree import SurrogateTree

    tree = SurrogateTree(
        [[1.0]], [-0.5], 1, feature_names=("x0",), classes=(0, 1, 2), leaf_class=[0, 2]
    )
    X = np.array([[0.1], [0.2], [0.8]])
    return display_tree(tree, X, np.array([0, 1, 2]), class_names=("A", "B", "C"))


def test_three_classes_show_the_fidelity_per_class_and_the_confusion_matrix(tmp_path):
    from miret_governance.governance.measures.metrics import confusion
    from miret_governance.governance.report.html import write_report
    from miret_governance.governance.report.tree_figure import save_tree_figure

    ensemble = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    surrogate = [0, 0, 0, 1, 1, 1, 0, 2, 1, 2]
    table = confusion(ensemble, surrogate, [0, 1, 2])
    display = _three_class_display()  # names the classes A, B and C
    tree_svg = save_tree_figure(display, tmp_path / "figures")[1]
    context = _class_context(table, display=display, tree_svg=tree_svg)
    html_path, card_path = write_report(context, tmp_path)
    html, card = html_path.read_text(), card_path.read_text()
    assert "<h2>Fidelity per class</h2>" in html
    assert "B (no leaf)" in html  # the tree figure's legend
    for name, rows, agreeing, share in (("A", 4, 3, "75.0%"), ("B", 3, 2, "66.7%")):
        cells = f'<td class="num">{rows}</td><td class="num">{agreeing}</td>'
        assert f'<tr><td>{name}</td>{cells}<td class="num">{share}</td></tr>' in html
        assert f"| {name} | {rows} | {agreeing} | {share} |" in card
    assert "<h3>Confusion matrix: ensemble &times; surrogate, 10 test rows</h3>" in html
    assert (
        '<tr><th>A</th><td class="num agree">3</td><td class="num">1</td>'
        '<td class="num">0</td><td class="num">4</td></tr>'
    ) in html
    assert "### Confusion matrix: ensemble × surrogate, 10 test rows" in card
    assert "| Ensemble ↓ surrogate → | A | B | C | Total |" in card
    assert "| **C** | 0 | 1 | **2** | 3 |" in card
    assert "| Total | 4 | 4 | 2 | 10 |" in card
    assert "- **Confusion matrix**: Test rows counted by the ensemble's class (row)" in card
    assert "- **Fidelity per class**: Of the test rows the ensemble gives a class" in card
    assert _table_rows_have_header_width(card) >= 3


def test_two_classes_show_the_fidelity_per_class_without_a_matrix(tmp_path):
    from miret_governance.governance.measures.metrics import confusion
    from miret_governance.governance.report.html import render_model_card, render_report

    table = confusion([0, 0, 1, 1, 1], [0, 1, 1, 1, 1], [0, 1])
    html, card = render_report(_class_context(table)), render_model_card(_class_context(table))
    assert '<tr><td>1</td><td class="num">3</td><td class="num">3</td>' in html
    assert "| 0 | 2 | 1 | 50.0% |" in card
    assert "Confusion matrix" not in html and "Confusion matrix" not in card
    # Without a confusion table (older callers) neither section is drawn.
    plain = _class_context(None)
    assert "Fidelity per class" not in render_report(plain) + render_model_card(plain)
