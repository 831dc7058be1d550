"""The surrogate tree as a reader sees it (see :mod:`governance.miret.display`).

Only reached nodes and real splits are drawn; the title gives the effective depth (title
and note left-aligned and wrapped to the narrowest figure's width, so a narrow frame that
scrolls the figure sideways still shows them whole). Each
split box holds its condition (``value <= threshold``) and how many samples reach it;
its left edge is ``yes`` (the condition holds, lower values) and its right edge ``no``.
Leaves show the class name, in one colour per class (orange and blue for two classes;
for more, Okabe and Ito's colour-blind-safe palette and a legend naming every class),
the share of samples and the purity by the ensemble's labels. A split of more than three terms reads ``S0 <= t`` and
its score table (term, weight, contribution over the data) is drawn below the tree.

Every box is measured from its text, then placed: subtrees side by side, each row of
boxes aligned at the top, the ``yes``/``no`` labels in the free band between two rows,
so no box covers a label. A feature name is never broken across lines. User text
(feature and class names) is never parsed as mathtext.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from miret_governance.governance.miret.tree.conditions import NO_BREAK, glued
from miret_governance.governance.report.figures import text_size

FONT_SIZE = 9.5
_PAD = 0.4  # box padding, in font sizes
_GAP_IN = 0.3  # horizontal room between two subtrees, inches
_BAND_IN = 0.6  # vertical band between two rows of boxes (edges and labels), inches
_MARGIN_IN = 0.15
_MIN_WIDTH_IN = 4.6  # the figure's narrowest width, inches (about 440 px)
_LINE_CHARS = 34  # a condition is wrapped (between terms) beyond this many characters
SPLIT_STYLE = {"fc": "#f2f4f7", "ec": "#44505c"}
CLASS_STYLES = ({"fc": "#fde8d4", "ec": "#b35900"}, {"fc": "#dcebf7", "ec": "#1f5f99"})
"""Leaf colours of ``classes[0]`` (orange) and ``classes[1]`` (blue)."""
OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
"""Okabe and Ito's colour-blind-safe palette (its black left out: it is the text's
colour); leaves of more than two classes take these in class order, repeating after
seven (the class name is always written in the leaf)."""
_TINT = 0.3  # share of the palette colour in a leaf's fill; the rest is white
_LEGEND_ROW_IN = 0.34  # one row of the class legend, inches
_LEGEND_GAP_IN = 0.2  # between two legend boxes, inches
EDGE_COLOURS = {"yes": "#1b5e20", "no": "#8a3a3a"}
BROWSER_SLACK = 1.15
"""How much wider than measured here a title may be drawn: the SVG keeps its text as text,
which a browser sets in its own font (a title measured exactly was clipped at both edges)."""


def class_styles(n_classes: int) -> list[dict]:
    """Box style (fill ``fc``, edge ``ec``) of each class's leaves: :data:`CLASS_STYLES`
    for two classes, else a light tint of :data:`OKABE_ITO` with the colour as edge."""
    from matplotlib.colors import to_rgb

    if n_classes == 2:
        return list(CLASS_STYLES)
    styles = []
    for k in range(n_classes):
        colour = OKABE_ITO[k % len(OKABE_ITO)]
        fill = tuple(1 - _TINT * (1 - c) for c in to_rgb(colour))
        styles.append({"fc": fill, "ec": colour})
    return styles


def _legend_items(display) -> list[str]:
    """The legend's text per class (``k > 2`` only): its name, and ``(no leaf)`` for a
    class no drawn leaf predicts."""
    if len(display.class_names) <= 2:
        return []
    drawn = {node.class_name for node in display.leaves()}
    return [name if name in drawn else f"{name} (no leaf)" for name in display.class_names]


def _legend_rows(widths: list, room: float) -> list[list[int]]:
    """Legend items (by index) packed into rows no wider than ``room`` inches."""
    rows, used = [[]], 0.0
    for k, width in enumerate(widths):
        if rows[-1] and used + width > room:
            rows.append([])
            used = 0.0
        rows[-1].append(k)
        used += width
    return rows


def _legend(display, room: float) -> tuple[list, list, float]:
    """The legend's items (text, style, width in inches), their rows within ``room``
    inches, and the height it takes (0 for two classes)."""
    texts = _legend_items(display)
    if not texts:
        return [], [], 0.0
    styles = class_styles(len(display.class_names))
    pad = 2 * _PAD * (FONT_SIZE - 0.5) / 72
    widths = [w + pad + _LEGEND_GAP_IN for w, _ in text_size(texts, FONT_SIZE - 0.5)]
    rows = _legend_rows(widths, room)
    height = _LEGEND_ROW_IN * len(rows) + _LEGEND_GAP_IN  # and a gap above the root
    return list(zip(texts, styles, widths, strict=True)), rows, height


def _draw_legend(ax, items: list, rows: list, width: float, top: float) -> None:
    """One box per class, styled as its leaves, rows centred under ``top``."""
    for r, row in enumerate(rows):
        left = (width - sum(items[k][2] for k in row)) / 2
        y = top - _LEGEND_ROW_IN * (r + 0.5)
        for k in row:
            text, style, span = items[k]
            _text(
                ax,
                left + span / 2,
                y,
                text,
                ha="center",
                va="center",
                fontsize=FONT_SIZE - 0.5,
                bbox={"boxstyle": f"round,pad={_PAD}", "lw": 1.4, **style},
            )
            left += span


def _wrap(condition: str) -> str:
    """The condition on lines of about :data:`_LINE_CHARS`, broken only between terms."""
    lines = textwrap.wrap(
        glued(condition), width=_LINE_CHARS, break_long_words=False, break_on_hyphens=False
    )
    return "\n".join(line.replace(NO_BREAK, " ") for line in lines)


def _text(ax, x, y, text, **kwargs):
    # parse_math=False: a feature named "$\frac{a$" is text, not mathtext.
    return ax.text(x, y, text, parse_math=False, usetex=False, **kwargs)


def _node_text(node, percent) -> str:
    reach = f"{node.n_samples} samples ({percent(node.share)})"
    if node.is_leaf:
        return f"{node.class_name}\n{reach}\npurity {percent(node.purity)}"
    return f"{_wrap(node.condition)}\n{reach}"


def _layout(display, boxes: dict) -> tuple[dict, float, list]:
    """Centre x of every node (inches from the left), the tree's width and the height
    of each row of boxes."""
    nodes = display.nodes()
    rows = [0.0] * (display.effective_depth + 1)
    for node in nodes:
        rows[node.depth] = max(rows[node.depth], boxes[id(node)][1])
    widths = {}

    def width(node) -> float:
        own = boxes[id(node)][0]
        if not node.is_leaf:
            own = max(own, width(node.yes) + _GAP_IN + width(node.no))
        widths[id(node)] = own
        return own

    xs = {}

    def place(node, left: float) -> float:
        span, own = widths[id(node)], boxes[id(node)][0]
        if node.is_leaf:
            x = left + span / 2
        else:
            inner = widths[id(node.yes)] + _GAP_IN + widths[id(node.no)]
            start = left + (span - inner) / 2
            yes = place(node.yes, start)
            no = place(node.no, start + widths[id(node.yes)] + _GAP_IN)
            x = min(max((yes + no) / 2, left + own / 2), left + span - own / 2)
        xs[id(node)] = x
        return x

    total = width(display.root)
    place(display.root, 0.0)
    return xs, total, rows


def _score_blocks(scores) -> list:
    """Per score: its heading and its rows of (term, weight, contribution) text."""
    blocks = []
    for score in scores:
        rows = [("term", "weight", "contribution over the data")]
        rows += [(r["feature"], r["weight"], r["contribution"]) for r in score.rows()]
        blocks.append((score.heading, rows))
    return blocks


def _score_width(blocks) -> tuple[list, float]:
    """Column widths (inches) over every score table and the widest table or heading."""
    if not blocks:
        return [0.0, 0.0, 0.0], 0.0
    columns = [
        max(w for w, _ in text_size([row[k] for _, rows in blocks for row in rows], FONT_SIZE))
        for k in range(3)
    ]
    headings = max(w for w, _ in text_size([h for h, _ in blocks], FONT_SIZE, "bold"))
    return columns, max(sum(columns) + 0.5, headings)


def _title(display, kind: str, room: float) -> str:
    """The figure's title, on two lines when one (with :data:`BROWSER_SLACK`) is wider
    than ``room`` inches."""
    head = f"Surrogate: {kind},"
    tail = f"effective depth {display.effective_depth} (MILP depth {display.depth})"
    line = f"{head} {tail}"
    wide = text_size([line], FONT_SIZE + 1.5, "bold")[0][0] * BROWSER_SLACK > room
    return f"{head}\n{tail}" if wide else line


def draw_display_tree(display, kind: str = "MIRET tree"):
    """A matplotlib figure of a :class:`~governance.miret.display.DisplayTree`, sized
    to its text (inches of the figure are the inches of the layout); ``kind`` names the
    tree in the title (:func:`governance.report.wording.tree_kind`)."""
    from matplotlib.figure import Figure

    from miret_governance.governance.report.formatting import format_percent

    nodes = display.nodes()
    texts = [_node_text(node, format_percent) for node in nodes]
    pad = 2 * _PAD * FONT_SIZE / 72
    boxes = {
        id(node): (w + pad, h + pad)
        for node, (w, h) in zip(nodes, text_size(texts, FONT_SIZE), strict=True)
    }
    xs, tree_width, rows = _layout(display, boxes)
    blocks = _score_blocks(display.scores)
    columns, table_width = _score_width(blocks)
    width = max(_MIN_WIDTH_IN, tree_width, table_width) + 2 * _MARGIN_IN
    # title and note left-aligned within the narrowest figure's width: a frame narrower
    # than the figure scrolls it sideways, and still shows them whole from its left edge
    room = _MIN_WIDTH_IN - 2 * _MARGIN_IN
    title = _title(display, kind, room)
    title_w = text_size([title], FONT_SIZE + 1.5, "bold")[0][0] * BROWSER_SLACK
    width = max(width, title_w + 2 * _MARGIN_IN)
    note = textwrap.fill(
        f"{display.n_samples} training samples. Each condition reads value <= threshold: "
        "samples that meet it follow 'yes' (left). Purity: share of a leaf's samples to "
        "which the ensemble gives the leaf's class.",
        width=max(40, int(room / (0.55 * (FONT_SIZE - 0.5) / 72))),
    )
    (_, title_h), (_, note_h) = text_size([title], FONT_SIZE + 1.5, "bold") + text_size(
        [note], FONT_SIZE - 0.5
    )
    line = 1.45 * FONT_SIZE / 72
    legend, legend_rows, legend_h = _legend(display, width - 2 * _MARGIN_IN)
    header = _MARGIN_IN + title_h + 0.08 + note_h + 0.25 + legend_h
    tree_height = sum(rows) + _BAND_IN * (len(rows) - 1)
    tables = sum(0.3 + line * (len(rows_) + 1) for _, rows_ in blocks)
    height = header + tree_height + tables + _MARGIN_IN
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    _text(
        ax,
        _MARGIN_IN,
        height - _MARGIN_IN,
        title,
        ha="left",
        va="top",
        fontsize=FONT_SIZE + 1.5,
        weight="bold",
    )
    _text(
        ax,
        _MARGIN_IN,
        height - _MARGIN_IN - title_h - 0.08,
        note,
        ha="left",
        va="top",
        fontsize=FONT_SIZE - 0.5,
        color="#44505c",
    )
    _draw_legend(ax, legend, legend_rows, width, height - header + legend_h)
    tops = [height - header - sum(rows[:d]) - _BAND_IN * d for d in range(len(rows))]
    shift = (width - tree_width) / 2
    for node in nodes:
        if node.is_leaf:
            continue
        x, bottom = xs[id(node)] + shift, tops[node.depth] - boxes[id(node)][1]
        band = (tops[node.depth] - rows[node.depth] + tops[node.depth + 1]) / 2
        for word, child in (("yes", node.yes), ("no", node.no)):
            cx, top = xs[id(child)] + shift, tops[child.depth]
            ax.plot([x, cx], [bottom, top], color="#5b6b7b", lw=1.2, zorder=1)
            at = x + (cx - x) * (bottom - band) / (bottom - top)
            _text(
                ax,
                at,
                band,
                word,
                ha="center",
                va="center",
                fontsize=FONT_SIZE,
                color=EDGE_COLOURS[word],
                weight="bold",
                zorder=2,
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none"},
            )
    styles = class_styles(len(display.class_names))
    for node, text in zip(nodes, texts, strict=True):
        if node.is_leaf:
            style = styles[display.class_names.index(node.class_name)]
        else:
            style = SPLIT_STYLE
        x, y = xs[id(node)] + shift, tops[node.depth] - boxes[id(node)][1] / 2
        _text(
            ax,
            x,
            y,
            text,
            ha="center",
            va="center",
            multialignment="center",
            fontsize=FONT_SIZE,
            zorder=3,
            bbox={"boxstyle": f"round,pad={_PAD}", "lw": 1.4, **style},
        )
    _draw_scores(ax, blocks, columns, (width - table_width) / 2, tops[-1] - rows[-1] - 0.1, line)
    return fig


def _draw_scores(ax, blocks, columns, left: float, y: float, line: float) -> None:
    """The score tables, one under the other: heading, column names, one row per term."""
    for heading, rows in blocks:
        y -= 0.3
        _text(ax, left, y, heading, va="bottom", fontsize=FONT_SIZE, weight="bold")
        for k, row in enumerate(rows):
            y -= line
            style = {
                "fontsize": FONT_SIZE,
                "va": "bottom",
                "color": "#44505c" if k == 0 else "black",
            }
            _text(ax, left, y, row[0], ha="left", **style)
            _text(ax, left + columns[0] + 0.25 + columns[1], y, row[1], ha="right", **style)
            _text(ax, left + columns[0] + columns[1] + 0.5, y, row[2], ha="left", **style)


def save_tree_figure(display, out_dir, kind: str = "MIRET tree") -> list[Path]:
    """Write ``surrogate_tree.png`` and ``surrogate_tree.svg`` (text as text) into ``out_dir``
    (``kind``: as :func:`draw_display_tree`).

    Returns
    -------
    list of pathlib.Path
    """
    import matplotlib

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig = draw_display_tree(display, kind)
    paths = [out_dir / "surrogate_tree.png", out_dir / "surrogate_tree.svg"]
    fig.savefig(paths[0], dpi=110)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "surrogate-tree"}):
        fig.savefig(paths[1])
    return paths
