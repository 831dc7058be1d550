"""VITE figures: files are written, and the tree stays legible with many features."""

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance import vite
from miret_governance.governance.readers import read_ensemble
from miret_governance.governance.report import figures

FILES = ["level_frequency.png", "level_frequency.svg", "vite_tree.png", "vite_tree.svg"]


def _check_files(paths, out_dir):
    assert [p.name for p in paths] == FILES
    for path in paths:
        assert path.parent == out_dir and path.stat().st_size > 1000
        head = path.read_bytes()[:200]
        if path.suffix == ".png":
            assert head.startswith(b"\x89PNG\r\n\x1a\n")
        else:
            assert b"<svg" in path.read_bytes()[:2000] and head.startswith(b"<?xml")


def test_save_vite_figures_for_a_small_forest(breast_cancer, tmp_path):
    X, y = breast_cancer
    model = RandomForestClassifier(n_estimators=10, max_depth=3, random_state=0).fit(X, y)
    out_dir = tmp_path / "vite"
    _check_files(figures.save_vite_figures(read_ensemble(model), out_dir), out_dir)


@pytest.fixture(scope="module")
def wide_ensemble():
    """60 features (like Sonar), scaled: many features per node, raw-unit intervals."""
    X, y = make_classification(n_samples=300, n_features=60, n_informative=30, random_state=0)
    pipeline = make_pipeline(
        MinMaxScaler(),
        RandomForestClassifier(n_estimators=40, max_depth=3, max_features=None, random_state=0),
    )
    return read_ensemble(pipeline.fit(X * 100, y))


def test_save_vite_figures_for_60_features(wide_ensemble, tmp_path):
    _check_files(figures.save_vite_figures(wide_ensemble, tmp_path), tmp_path)


def test_tree_folds_rarely_used_features_and_shows_raw_intervals(wide_ensemble):
    frequency = vite.node_frequency(wide_ensemble)
    ranges = vite.threshold_ranges(wide_ensemble)
    fig = figures.plot_vite_tree(frequency, ranges, wide_ensemble.n_trees)
    nodes = [ax for ax in fig.axes if ax.get_title(loc="left").startswith("node ")]
    assert len(nodes) == 7
    folded = 0
    for ax in nodes:
        position = int(ax.get_title(loc="left").split(":")[0].split()[1])
        labels = [t.get_text() for t in ax.get_yticklabels()]
        used = int((frequency.loc[position] > 0).sum())
        assert len(labels) == min(used, figures.MAX_ROWS)
        if used > figures.MAX_ROWS:
            folded += 1
            assert labels[-1] == f"other ({used - figures.MAX_ROWS + 1} features)"
        name = labels[0].split(" [")[0].split(" ")[0]
        top = frequency.loc[position].idxmax()
        assert name == top
        row = ranges[(ranges.position == position) & (ranges.feature == top)].iloc[0]
        assert labels[0] == f"{top} {figures.format_interval(row.low_raw, row.high_raw)}"
    assert folded > 0


def test_format_interval():
    assert figures.format_interval(0.25, 0.25) == "0.25"
    assert figures.format_interval(927.04, 1058.2) == "[927, 1058]"
    assert figures.format_interval(0.04892, 0.05268) == "[0.0489, 0.0527]"
    assert figures.format_interval(0.12341, 0.12349) == "[0.1234, 0.1235]"


def test_level_frequency_heatmap_annotates_percentages(breast_cancer):
    X, y = breast_cancer
    model = RandomForestClassifier(n_estimators=10, max_depth=3, random_state=0).fit(X, y)
    frequency = vite.level_frequency(read_ensemble(model))
    fig = figures.plot_level_frequency(frequency)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == frequency.size
    expected = [figures.format_percent(v) for v in frequency.to_numpy().ravel()]
    assert texts == expected
    assert [t.get_text() for t in ax.get_yticklabels()] == list(X.columns)
    root = frequency[0].to_numpy()
    assert np.isclose(root.sum(), 1.0) and texts[int(np.argmax(root)) * 3].endswith("%")


def test_deep_tree_draws_the_top_levels_only(breast_cancer):
    X, y = breast_cancer
    model = RandomForestClassifier(n_estimators=5, max_depth=6, random_state=0).fit(X, y)
    ensemble = read_ensemble(model)
    assert ensemble.max_depth == 6
    fig = figures.plot_vite_tree(vite.node_frequency(ensemble), vite.threshold_ranges(ensemble))
    nodes = [ax for ax in fig.axes if ax.get_title(loc="left").startswith("node ")]
    assert len(nodes) == 15
    assert "depth 6, top 4 levels shown" in fig.get_suptitle()


# --------------------------------------------------------------------------- surrogate tree
def test_surrogate_tree_figure_draws_only_the_display_tree(tmp_path):
    from miret_governance.governance.miret.display import display_tree
    from miret_governance.governance.miret.tree import SurrogateTree
    from miret_governance.governance.report.tree_figure import draw_display_tree, save_tree_figure

    names = ("$\\frac{a$", "<script>alert(1)</script>")
    coef = np.zeros((3, 2))
    coef[0] = [1.0, 0.0]  # node 1 and 2 have no coefficients: dummy splits
    tree = SurrogateTree(coef, [-0.5, -1.0, 1.0], 2, feature_names=names, classes=(0, 1))
    X = np.array([[0.2, 0.0], [0.7, 1.0], [0.9, 0.3]])
    shown = display_tree(tree, X, tree.predict(X), class_names=(names[1], "yes"))
    fig = draw_display_tree(shown)
    texts = [t.get_text() for t in fig.axes[0].texts]
    boxes = [t for t in texts if "samples" in t]
    assert len(boxes) == len(shown.nodes()) == 3  # root and two leaves, no dummy node
    assert boxes[0].startswith("$\\frac{a$ <= 0.5\n3 samples (100.0%)")
    assert sorted(t for t in texts if t in ("yes", "no")) == ["no", "yes"]
    assert "effective depth 1 (MILP depth 2)" in fig._suptitle.get_text()
    paths = save_tree_figure(shown, tmp_path)  # renders: the name is not mathtext
    svg = paths[1].read_text()
    assert "<script>" not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    assert "$\\frac{a$ &lt;= 0.5" in svg


def test_vite_figures_render_feature_names_with_dollars(tmp_path):
    X, y = make_classification(
        n_samples=200, n_features=3, n_informative=2, n_redundant=0, random_state=0
    )
    import pandas as pd

    frame = pd.DataFrame(X, columns=["$\\frac{a$", "<script>alert(1)</script>", "c"])
    model = RandomForestClassifier(n_estimators=5, max_depth=2, random_state=0).fit(frame, y)
    paths = figures.save_vite_figures(read_ensemble(model), tmp_path)
    svg = paths[1].read_text()
    assert "<script>" not in svg
    fig = figures.plot_level_frequency(vite.level_frequency(read_ensemble(model)))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "\\$\\frac{a\\$" in labels


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
    from miret_governance.governance.miret.display import display_tree
    from miret_governance.governance.miret.tree import SurrogateTree
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
        label_source="ensemble",
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
    assert [(r["feature"], r["trees"]) for r in left["rows"]] == [
        ("b", 2),
        ("other (2 features)", 2),
    ]


def test_inlined_figure_keeps_its_text_readable(tmp_path):
    from miret_governance.governance.report.html import inline_svg

    svg = tmp_path / "f.svg"
    svg.write_text('<?xml version="1.0"?>\n<svg width="300pt" height="10pt"><g/></svg>')
    assert str(inline_svg(svg)).startswith('<svg style="min-width:320px;max-width:480px" width=')
    assert str(inline_svg(svg, shrink=True)).startswith('<svg style="max-width:480px" width=')


@pytest.mark.parametrize(
    ("solve", "expected"),
    [
        (
            {"stop_reason": "stalled", "wall_time": 4.21, "gap": 0.864},
            "solver stopped: stalled after 4.2 s (gap 86.4%)",
        ),
        (
            {"stop_reason": "work_limit", "wall_time": 9.9, "gap": 0.5},
            "solver stopped: used its work budget after 9.9 s (gap 50.0%)",
        ),
        (
            {"stop_reason": "time_limit", "wall_time": 20.1, "gap": 0.5, "time_limit_hit": True},
            (
                "solver stopped: hit the time limit after 20.1 s (gap 50.0%), so a re-run may "
                "give another tree"
            ),
        ),
        (
            {"stop_reason": "optimal", "wall_time": 1.0, "gap": 0.0, "time_limit_hit": True},
            (
                "solver stopped: proved optimal after 1.0 s; the time limit cut the warm start "
                "short, so a re-run may give another tree"
            ),
        ),
    ],
)
def test_the_stop_is_told_with_whether_a_rerun_can_differ(solve, expected):
    from miret_governance.governance.report.html import describe_stop

    assert describe_stop(solve) == expected
