"""VITE figures (matplotlib, no pyplot state): level heatmap and the representative tree.

- :func:`plot_level_frequency`: features x levels heatmap of the level frequency, darker
  where a feature is used more, annotated in percent (paper, Figure "heatmap").
- :func:`plot_vite_tree`: the representative tree of depth ``D``; each branch position
  shows the node frequency of the features used there, each with the range ``[l, u]``
  of its split thresholds (one value when ``l == u``). Leaves are omitted. The tree is
  folded into rows of at most two nodes, so its text stays legible on a narrow page.
- :func:`save_vite_figures`: both figures as PNG and SVG for an ensemble.

Colour scales run from 0 to the data's maximum (a labelled colour bar says so), so the
most used feature is the darkest cell, however small its share.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.measures import vite

CMAP = "Blues"
MAX_ROWS = 8
"""Rows shown per node of the tree; beyond it the least used features become "other"."""
OTHER = "other"
WEIGHTED = "each tree counted with its boosting weight"
"""What a share of splits says of a boosted ensemble, whose trees weigh differently."""
MAX_LEVELS = 4
"""Levels of the representative tree drawn by default (8 nodes on the last one)."""

NODE_FONT = 9
"""Point size of the representative tree's text: 12 px at the figure's own size."""
PNG_DPI = 150
"""Resolution of the PNG files (the SVG files are vector graphics)."""

_NAME_CHARS = 26
_ROW_IN = 0.25  # height of one heatmap row, inches
_CELL_IN = 0.42  # width of a node's heatmap column, inches
_TITLE_IN = 0.42  # a node's two-line title, inches
_PANEL_GAP_IN = 0.35  # between the two children on a row, inches
_BAR_IN = 0.8  # the colour bar and its label, inches


def format_percent(value: float) -> str:
    """A fraction as a whole percentage: ``""`` for 0, ``"<1%"`` when it rounds to 0."""
    if value <= 0:
        return ""
    return f"{round(100 * value)}%" if round(100 * value) else "<1%"


def _number(value: float, digits: int) -> str:
    """``digits`` significant digits, without exponent below one million."""
    if 10**digits <= abs(value) < 1e6:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def _short(name: str) -> str:
    """A feature name cut to fit, with ``$`` escaped so matplotlib never reads mathtext."""
    short = name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 1] + "\u2026"
    return short.replace("$", r"\$")


def format_interval(low: float, high: float) -> str:
    """``[l, u]`` with enough significant digits to tell ``l`` and ``u`` apart.

    A single value is returned when ``l == u``.
    """
    if low == high:
        return _number(low, 4)
    for digits in range(3, 10):
        a, b = _number(low, digits), _number(high, digits)
        if a != b:
            return f"[{a}, {b}]"
    return f"[{low!r}, {high!r}]"


def _text_color(value: float) -> str:
    """Text colour on a cell whose colour is at ``value`` of the scale (0 to 1)."""
    return "white" if value > 0.55 else "black"


def plot_level_frequency(frequency: pd.DataFrame, ax=None, title=None) -> Figure:
    """Heatmap of a level-frequency table (:func:`governance.vite.level_frequency`).

    Parameters
    ----------
    frequency : DataFrame
        Index: feature names; columns: levels; values: fractions in ``[0, 1]``.
    ax : matplotlib Axes, optional
        Where to draw; a new figure sized for the table is made when omitted.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    n_features, n_levels = frequency.shape
    if ax is None:
        longest = max((len(_short(str(n))) for n in frequency.index), default=0)
        fig = Figure(figsize=(0.6 + 0.075 * longest + 0.5 * n_levels, 1.9 + 0.24 * n_features))
        ax = fig.add_subplot()
    values = frequency.to_numpy(dtype=float)
    vmax = float(values.max(initial=0.0)) or 1.0  # the scale ends at the data's maximum
    image = ax.imshow(values, cmap=CMAP, vmin=0.0, vmax=vmax, aspect="auto")
    for (row, col), value in np.ndenumerate(values):
        ax.text(
            col,
            row,
            format_percent(value),
            ha="center",
            va="center",
            fontsize=9,
            color=_text_color(value / vmax),
        )
    ax.set_xticks(range(n_levels), [f"level {d}" for d in frequency.columns], fontsize=9)
    ax.set_yticks(range(n_features), [_short(str(n)) for n in frequency.index], fontsize=9)
    ax.xaxis.tick_top()
    ax.set_xticks(np.arange(-0.5, n_levels), minor=True)
    ax.set_yticks(np.arange(-0.5, n_features), minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    ax.set_title(
        title or "VITE level frequency\nshare of the splits at each level", fontsize=10, pad=24
    )
    # Below the table, so that the figure stays narrow enough for a phone-width page.
    ax.figure.colorbar(
        image,
        ax=ax,
        orientation="horizontal",
        fraction=0.6 / ax.figure.get_figheight(),
        pad=0.02,
        aspect=30,
        label=f"share of the level's splits (darkest: {format_percent(vmax)}, the largest)",
        format=lambda v, _: f"{100 * v:.0f}%",
    )
    return ax.figure


def _node_rows(frequency: pd.Series, intervals: dict, max_rows: int) -> list[tuple]:
    """(label, frequency) rows of one node, most used first, the tail folded."""
    used = frequency[frequency > 0].sort_values(ascending=False, kind="stable")
    rows = [(f"{_short(str(name))} {intervals[name]}", value) for name, value in used.items()]
    if len(rows) > max_rows:
        tail = rows[max_rows - 1 :]
        rows = rows[: max_rows - 1] + [
            (f"{OTHER} ({len(tail)} features)", sum(value for _, value in tail))
        ]
    return rows


def plot_vite_tree(
    frequency: pd.DataFrame,
    ranges: pd.DataFrame,
    n_trees: int | None = None,
    max_rows: int = MAX_ROWS,
    max_levels: int = MAX_LEVELS,
    title: str | None = None,
    weighted: bool = False,
) -> Figure:
    """Representative tree with a node-frequency heatmap at every branch position.

    The tree is folded to stay legible on a narrow page: the root on the first row,
    then each node's two children side by side on a row of their own (left child, the
    ``<=`` side, on the left), in breadth-first order. Text is 9 points; names are cut
    to 26 characters, so two nodes fit in about 7.5 inches (720 px) and the text keeps
    about 11 px in the MLflow artifact viewer's 870 px.

    Parameters
    ----------
    frequency : DataFrame
        :func:`governance.vite.node_frequency` (positions x features).
    ranges : DataFrame
        :func:`governance.vite.threshold_ranges`; raw-unit intervals are shown when it
        has ``low_raw``/``high_raw``, normalized ones otherwise.
    n_trees : int, optional
        Number of trees, to state at each node how many of them split there.
    max_rows : int
        Most rows per node; when more features are used, the least used are summed
        into one "other" row.
    max_levels : int
        Levels drawn from the root; deeper branch nodes are left out and the title
        says so.
    title : str, optional
    weighted : bool
        The trees weigh differently (a boosted ensemble): the title says the shares
        count each tree with its weight.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if max_rows < 2 or max_levels < 1:
        raise InvalidInputError(
            "max_rows must be at least 2 (one feature and 'other') and max_levels at least 1"
        )
    full_depth = int(np.log2(frequency.shape[0] + 1))
    depth = min(full_depth, max_levels)
    n_positions = 2**depth - 1
    raw = "low_raw" in ranges.columns
    low, high = ("low_raw", "high_raw") if raw else ("low", "high")
    intervals = {t: {} for t in range(n_positions)}
    splits = np.zeros(n_positions, dtype=int)
    for row in ranges[ranges.position < n_positions].itertuples(index=False):
        position = int(row.position)
        intervals[position][row.feature] = format_interval(getattr(row, low), getattr(row, high))
        splits[position] += int(row.count)
    rows = [_node_rows(frequency.iloc[t], intervals[t], max_rows) for t in range(n_positions)]
    # The root, then each splitting node's two children on a row of their own.
    lines = [[0]] + [[2 * p + 1, 2 * p + 2] for p in range(n_positions // 2) if splits[p]]
    labels = [label for node in rows for label, _ in node] or ["no split"]
    label_in = max(w for w, _ in text_size(labels, NODE_FONT))
    panel_in = _CELL_IN + 0.1 + label_in
    width_in = max(4.5, 2 * panel_in + _PANEL_GAP_IN)
    heights = [_TITLE_IN + max(len(rows[t]) for t in line) * _ROW_IN + 0.3 for line in lines]
    top_in = 0.95
    height_in = top_in + sum(heights) + _BAR_IN
    fig = Figure(figsize=(width_in, height_in))
    units = "raw input units" if raw else "the ensemble's input units"
    trees = f", {n_trees} trees" if n_trees is not None else ""
    shown = f", top {depth} levels shown" if depth < full_depth else ""
    fig.suptitle(
        title
        or f"VITE representative tree (depth {full_depth}{trees}{shown})\n"
        "share of the trees' splits on each feature at each node"
        + (f",\n{WEIGHTED}; " if weighted else "; ")
        + f"thresholds [l, u]\nin {units}; a node's left child (<= threshold) is drawn left",
        fontsize=NODE_FONT + 0.5,
        y=1 - 0.1 / height_in,
        va="top",
    )
    shares = [v for node in rows for label, v in node if not label.startswith(OTHER)]
    vmax = max(shares, default=1.0) or 1.0
    y = height_in - top_in
    for line, line_in in zip(lines, heights, strict=True):
        for k, t in enumerate(line):
            n_rows = max(len(rows[t]), 1)
            left = (width_in - panel_in) / 2 if len(line) == 1 else k * (panel_in + _PANEL_GAP_IN)
            left += (width_in - 2 * panel_in - _PANEL_GAP_IN) / 2 if len(line) == 2 else 0
            bottom = y - _TITLE_IN - n_rows * _ROW_IN
            ax = fig.add_axes(
                (
                    left / width_in,
                    bottom / height_in,
                    _CELL_IN / width_in,
                    n_rows * _ROW_IN / height_in,
                )
            )
            _draw_node(ax, t, rows[t], splits[t], n_trees, vmax)
        y -= line_in
    bar = fig.add_axes((0.25, 0.35 / height_in, 0.5, 0.12 / height_in))
    _colour_bar(fig, bar, vmax, "share of the node's splits (grey: several features)")
    return fig


def _draw_node(ax, position: int, rows: list, n_splits: int, n_trees, vmax: float):
    trees = f" of {n_trees}" if n_trees is not None else ""
    parent = (position - 1) // 2
    where = "root" if position == 0 else (f"{'<=' if position % 2 else '>'} side of node {parent}")
    ax.set_title(
        f"node {position}: {where}\n{n_splits}{trees} trees split here",
        fontsize=NODE_FONT,
        loc="left",
        pad=4,
    )
    ax.set_xticks([])
    if not rows:
        ax.set_yticks([])
        ax.text(
            0.5,
            0.5,
            "no split (a leaf in every tree)",
            fontsize=NODE_FONT,
            va="center",
            ha="left",
            transform=ax.transAxes,
        )
        return
    # The folded "other" row is grey: it sums several features, so no colour scale.
    folded = rows[-1][0].startswith(OTHER)
    values = np.array(
        [[np.nan if folded and i == len(rows) - 1 else value] for i, (_, value) in enumerate(rows)]
    )
    cmap = colormaps[CMAP].with_extremes(bad="0.88")
    ax.imshow(values, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    for i, (_, value) in enumerate(rows):
        color = "black" if np.isnan(values[i, 0]) else _text_color(value / vmax)
        ax.text(
            0, i, format_percent(value), ha="center", va="center", fontsize=NODE_FONT, color=color
        )
    ax.yaxis.tick_right()
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=NODE_FONT)
    ax.tick_params(length=0, pad=3)


def _colour_bar(fig, ax, vmax: float, label: str) -> None:
    """A horizontal colour bar in ``ax`` from 0 to ``vmax`` (the data's maximum)."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    bar = fig.colorbar(
        ScalarMappable(Normalize(0.0, vmax), CMAP),
        cax=ax,
        orientation="horizontal",
        format=lambda v, _: f"{100 * v:.0f}%",
    )
    bar.set_label(label, fontsize=NODE_FONT)
    bar.ax.tick_params(labelsize=NODE_FONT)


def text_size(texts: list, fontsize: float, weight: str = "normal") -> list:
    """(width, height) in inches of each text as matplotlib draws it (never mathtext)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(dpi=72)
    renderer = FigureCanvasAgg(fig).get_renderer()
    sizes = []
    for text in texts:
        artist = fig.text(0, 0, text, fontsize=fontsize, weight=weight, parse_math=False)
        box = artist.get_window_extent(renderer)
        sizes.append((box.width / 72, box.height / 72))
    return sizes


def save_vite_figures(ensemble, out_dir, depth: int | None = None) -> list[Path]:
    """Write the VITE figures of an ensemble as PNG and SVG.

    Files: ``level_frequency.png/.svg`` (features x levels heatmap) and
    ``vite_tree.png/.svg`` (representative tree); for an ensemble on a pipeline's
    encoded columns also ``level_frequency_by_column.png/.svg`` (one row per original
    column). Threshold intervals are in raw input units when the ensemble has a
    MinMaxScaler, in its input units otherwise.

    Parameters
    ----------
    ensemble : governance.ensemble.Ensemble
    out_dir : str or Path
        Created if missing.
    depth : int, optional
        Levels shown (the surrogate's depth ``D``); default: the ensemble's depth up to
        :data:`MAX_LEVELS`.

    Returns
    -------
    list of Path
        The files written.
    """
    if ensemble.max_depth == 0:
        raise InvalidInputError(
            "the ensemble has no split (every tree is a single leaf): no VITE figure"
        )
    if depth is None:
        depth = min(ensemble.max_depth, MAX_LEVELS)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    weighted = bool(np.ptp(ensemble.tree_weights) > 0)
    figures = {
        "level_frequency": plot_level_frequency(
            vite.level_frequency(ensemble, depth=depth),
            title=f"VITE level frequency ({ensemble.n_trees} trees)\nshare of the splits "
            "at each level" + (f",\n{WEIGHTED}" if weighted else ""),
        ),
        "vite_tree": plot_vite_tree(
            vite.node_frequency(ensemble, depth=depth),
            vite.threshold_ranges(ensemble, depth=depth),
            ensemble.n_trees,
            weighted=weighted,
        ),
    }
    if ensemble.encoding is not None:  # a pipeline's encoded columns: one row per original
        figures["level_frequency_by_column"] = plot_level_frequency(
            vite.level_frequency_by_column(ensemble, depth=depth),
            title=f"VITE level frequency per original column ({ensemble.n_trees} trees)\n"
            "share of the splits at each level, a one-hot group summed"
            + (f",\n{WEIGHTED}" if weighted else ""),
        )
    return [path for name, fig in figures.items() for path in _save(fig, out_dir / name)]


def _save(fig: Figure, stem: Path) -> list[Path]:
    """``fig`` as ``stem.png`` and ``stem.svg``, both cropped to its drawn content plus
    matplotlib's padding, as ``bbox_inches="tight"`` crops; that option lays the figure
    out once more for each format (a third of a save's CPU): the box is computed once,
    at the PNG's resolution, without a draw (these figures have no layout engine)."""
    from matplotlib import rcParams
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    dpi, fig.dpi = fig.dpi, PNG_DPI
    box = fig.get_tightbbox(FigureCanvasAgg(fig).get_renderer())
    box = box.padded(rcParams["savefig.pad_inches"])
    fig.dpi = dpi
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    fig.savefig(paths[0], dpi=PNG_DPI, bbox_inches=box)
    fig.savefig(paths[1], bbox_inches=box)
    return paths
