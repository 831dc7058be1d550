"""VITE figures: files are written, and the tree stays legible with many features."""

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.measures import vite
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
def _boxes(fig):
    """The node boxes' texts (every boxed text but the edge labels) and the edge labels."""
    texts = [t for t in fig.axes[0].texts if t.get_bbox_patch() is not None]
    labels = [t for t in texts if t.get_text() in ("yes", "no")]
    return [t for t in texts if t not in labels], labels


def test_surrogate_tree_figure_draws_only_the_display_tree(tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from miret_governance.governance.miret.tree.display import display_tree
    from miret_governance.governance.miret.tree.tree import SurrogateTree
    from miret_governance.governance.report.tree_figure import (
        BROWSER_SLACK,
        draw_display_tree,
        save_tree_figure,
    )

    names = ("$\\frac{a$", "<script>alert(1)</script>")
    coef = np.zeros((3, 2))
    coef[0] = [1.0, 0.0]  # node 1 and 2 have no coefficients: dummy splits
    tree = SurrogateTree(coef, [-0.5, -1.0, 1.0], 2, feature_names=names, classes=(0, 1))
    X = np.array([[0.2, 0.0], [0.7, 1.0], [0.9, 0.3]])
    shown = display_tree(tree, X, tree.predict(X), class_names=(names[1], "yes"))
    fig = draw_display_tree(shown, "optimal univariate tree")
    boxes, labels = _boxes(fig)
    assert len(boxes) == len(shown.nodes()) == 3  # root and two leaves, no dummy node
    assert boxes[0].get_text() == "$\\frac{a$ <= 0.5\n3 samples (100.0%)"
    assert sorted(t.get_text() for t in labels) == ["no", "yes"]
    title = fig.axes[0].texts[0]  # two lines: one would not fit a browser's wider font
    assert (
        title.get_text() == "Surrogate: optimal univariate tree,\neffective depth 1 (MILP depth 2)"
    )
    drawn = title.get_window_extent(FigureCanvasAgg(fig).get_renderer())
    assert drawn.width * BROWSER_SLACK <= fig.bbox.width
    # One colour per class: the two leaves differ.
    leaf_colours = {b.get_bbox_patch().get_facecolor() for b in boxes[1:]}
    assert len(leaf_colours) == 2
    paths = save_tree_figure(shown, tmp_path)  # renders: the name is not mathtext
    svg = paths[1].read_text()
    assert "<script>" not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
    assert "$\\frac{a$ &lt;= 0.5" in svg


def _long_tree():
    """Depth 2 on five long-named features: a 3-term split (wrapped between terms) at
    the root, a 5-term score at node 1, a one-feature split at node 2."""
    from sklearn.preprocessing import MinMaxScaler

    from miret_governance.governance.miret.tree.display import display_tree
    from miret_governance.governance.miret.tree.tree import SurrogateTree

    names = [f"worst concave points {k} of the cell nucleus" for k in range(5)]
    coef = np.zeros((3, 5))
    coef[0, :3] = [1.0, 1.0, 1.0]
    coef[1] = [1.0, -0.5, 0.25, 2.0, 1.0]
    coef[2, 4] = -1.0
    tree = SurrogateTree(coef, [-1.5, -1.0, 0.5], 2, feature_names=names, classes=(0, 1))
    X = np.random.default_rng(0).random((200, 5))
    scaler = MinMaxScaler().fit(X * 1000)
    return names, display_tree(tree, X, tree.predict(X), scaler=scaler, class_names=("a", "b"))


def test_tree_figure_boxes_hold_their_text_and_never_cover_the_edge_labels():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from miret_governance.governance.report.tree_figure import draw_display_tree

    names, shown = _long_tree()
    fig = draw_display_tree(shown)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # places the boxes around their texts
    renderer = canvas.get_renderer()
    boxes, labels = _boxes(fig)
    assert len(boxes) == len(shown.nodes()) == 7 and len(labels) == 6
    frames = [b.get_bbox_patch().get_window_extent(renderer) for b in boxes]
    for box, frame in zip(boxes, frames, strict=True):
        text = box.get_window_extent(renderer)
        assert frame.x0 < text.x0 and text.x1 < frame.x1  # the box is sized to its text
        assert frame.y0 < text.y0 and text.y1 < frame.y1
    for k, frame in enumerate(frames):
        assert not any(frame.overlaps(other) for other in frames[k + 1 :])
        for label in labels:
            assert not frame.overlaps(label.get_bbox_patch().get_window_extent(renderer))
    # The root's three terms are wrapped between terms: every name stays on one line.
    root = boxes[0].get_text().splitlines()
    assert len(root) == 5 and [sum(name in line for line in root) for name in names[:3]] == [1] * 3
    # The 5-term split is the score S1, its table drawn under the tree.
    assert boxes[1].get_text().startswith("S1 <= ")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert shown.scores[0].heading in texts
    assert all(name in texts for name in names)


# --------------------------------------------------------------------------- VITE legibility
def test_vite_tree_is_folded_to_two_nodes_a_row_with_readable_text(wide_ensemble):
    frequency = vite.node_frequency(wide_ensemble)
    fig = figures.plot_vite_tree(frequency, vite.threshold_ranges(wide_ensemble), 40)
    width, _ = fig.get_size_inches()
    # Two nodes a row and text of 9 points: at most 8 inches, 768 px, so the text keeps
    # at least 10 px in the 870 px artifact viewer (about 800 px of content).
    assert width <= 8.0
    nodes = [ax for ax in fig.axes if ax.get_title(loc="left").startswith("node ")]
    sizes = {t.get_fontsize() for ax in nodes for t in ax.get_yticklabels()}
    assert sizes == {figures.NODE_FONT} and figures.NODE_FONT * 96 / 72 * 768 / (96 * width) >= 10
    lefts = {round(ax.get_position().x0, 3) for ax in nodes}
    assert len(lefts) == 3  # the root centred, then left and right children
    assert nodes[1].get_title(loc="left").startswith("node 1: <= side of node 0\n")
    # One colour scale from 0 to the largest share shown.
    top = max(ax.images[0].get_array().max() for ax in nodes if ax.images)
    assert all(ax.images[0].norm.vmax == top for ax in nodes if ax.images)


def test_level_heatmap_scales_to_the_data_maximum(breast_cancer):
    X, y = breast_cancer
    model = RandomForestClassifier(n_estimators=10, max_depth=3, random_state=0).fit(X, y)
    frequency = vite.level_frequency(read_ensemble(model))
    fig = figures.plot_level_frequency(frequency)
    image = fig.axes[0].images[0]
    assert image.norm.vmax == frequency.to_numpy().max() < 1
    bar = fig.axes[1]
    assert bar.get_xlabel().startswith("share of the level's splits (darkest: ")


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


# --------------------------------------------------------------------------- k classes
def _four_class_tree():
    """Depth 2: x0 at the root, x1 below; leaves predict A, B, C, B (no leaf D)."""
    from miret_governance.governance.miret.tree.display import display_tree
    from miret_governance.governance.miret.tree.tree import SurrogateTree

    coef = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    tree = SurrogateTree(
        coef,
        [-0.5, -0.5, -0.5],
        2,
        feature_names=("income", "debt"),
        classes=("A", "B", "C", "D"),
        leaf_class=np.array([0, 1, 2, 1]),
    )
    X = np.array([[0.2, 0.2], [0.3, 0.8], [0.7, 0.1], [0.9, 0.9], [0.8, 0.6]])
    return display_tree(tree, X, tree.predict(X))


def test_more_than_two_classes_take_okabe_ito_colours_and_a_legend(tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import to_hex
    from PIL import Image

    from miret_governance.governance.report.tree_figure import (
        OKABE_ITO,
        class_styles,
        draw_display_tree,
        save_tree_figure,
    )

    shown = _four_class_tree()
    fig = draw_display_tree(shown)
    boxes, _ = _boxes(fig)
    leaf_boxes = [b for b in boxes if "purity" in b.get_text()]
    assert len(leaf_boxes) == 4
    leaves = {b.get_text().splitlines()[0]: b.get_bbox_patch() for b in leaf_boxes}
    edges = {name: to_hex(patch.get_edgecolor()).upper() for name, patch in leaves.items()}
    assert edges == {"A": OKABE_ITO[0], "B": OKABE_ITO[1], "C": OKABE_ITO[2]}
    # A light tint of the colour fills the leaf: 30% orange, 70% white.
    assert to_hex(leaves["A"].get_facecolor()) == to_hex(class_styles(4)[0]["fc"]) == "#f8e2b2"
    legend = [b.get_text() for b in boxes if "samples" not in b.get_text()]
    assert legend == ["A", "B", "C", "D (no leaf)"]
    assert class_styles(2)[0] == {"fc": "#fde8d4", "ec": "#b35900"}  # binary keeps orange
    # Legible in MLflow's 870 px artifact viewer: the PNG (110 dpi) is no wider.
    png = save_tree_figure(shown, tmp_path)[0]
    assert Image.open(png).size[0] <= 870
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # places the boxes around their texts
    frames = [b.get_bbox_patch().get_window_extent(canvas.get_renderer()) for b in boxes]
    for k, frame in enumerate(frames):
        assert not any(frame.overlaps(other) for other in frames[k + 1 :])


def test_two_classes_draw_no_legend():
    from miret_governance.governance.report.tree_figure import draw_display_tree

    _, shown = _long_tree()
    texts = {t.get_text() for t in draw_display_tree(shown).axes[0].texts}
    assert not any("(no leaf)" in t for t in texts)
    assert len(_boxes(draw_display_tree(shown))[0]) == 7  # the nodes only
