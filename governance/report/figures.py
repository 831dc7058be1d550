"""VITE figures (matplotlib, no pyplot state): level heatmap and the representative tree.

- :func:`plot_level_frequency`: features x levels heatmap of the level frequency, darker
  where a feature is used more, annotated in percent (paper, Figure "heatmap").
- :func:`plot_vite_tree`: the representative tree of depth ``D``; each branch position
  shows the node frequency of the features used there, each with the range ``[l, u]``
  of its split thresholds (one value when ``l == u``). Leaves are omitted.
- :func:`save_vite_figures`: both figures as PNG and SVG for an ensemble.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from miret_governance.governance import vite

CMAP = "Blues"
MAX_ROWS = 8
"""Rows shown per node of the tree; beyond it the least used features become "other"."""
OTHER = "other"
MAX_LEVELS = 4
"""Levels of the representative tree drawn by default (8 nodes on the last one)."""

_NAME_CHARS = 26
_ROW_IN = 0.26  # height of one heatmap row, inches
_CELL_IN = 0.45  # width of a node's heatmap column, inches
_CHAR_IN = 0.064  # mean width of one 8-point character, inches


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
    image = ax.imshow(values, cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto")
    for (row, col), value in np.ndenumerate(values):
        ax.text(
            col,
            row,
            format_percent(value),
            ha="center",
            va="center",
            fontsize=9,
            color=_text_color(value),
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
        label="share of splits",
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
) -> Figure:
    """Representative tree with a node-frequency heatmap at every branch position.

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
        Levels drawn from the root; deeper branch nodes are left out (the figure
        doubles in width with every level) and the title says so.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    if max_rows < 2 or max_levels < 1:
        raise ValueError(
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
    tallest = max(max((len(r) for r in rows), default=1), 1)
    longest = max((len(label) for node in rows for label, _ in node), default=20)
    panel_in = _CELL_IN + 0.1 + longest * _CHAR_IN  # a node: heatmap column and labels
    level_in = tallest * _ROW_IN + 1.0
    width_in = (panel_in + 0.5) * 2 ** max(depth - 1, 0)
    height_in = depth * level_in + 0.9
    fig = Figure(figsize=(width_in, height_in))
    units = "raw input units" if raw else "the ensemble's input units"
    trees = f", {n_trees} trees" if n_trees is not None else ""
    shown = f", top {depth} levels shown" if depth < full_depth else ""
    fig.suptitle(
        title
        or f"VITE representative tree (depth {full_depth}{trees}{shown})\n"
        f"share of the trees' splits on each feature at each node; "
        f"split thresholds [l, u] in {units}",
        fontsize=10,
        y=1 - 0.2 / height_in,
        va="top",
    )
    anchors = {}
    for t in range(n_positions):
        level = int(np.log2(t + 1))
        if t and not splits[(t - 1) // 2]:
            continue  # the parent never splits: nothing reaches this position
        center = (t - (2**level - 1) + 0.5) / 2**level
        cell_left = center - panel_in / 2 / width_in
        top = 1 - (0.9 + level * level_in + 0.35) / height_in
        n_rows = max(len(rows[t]), 1)
        ax = fig.add_axes(
            (
                cell_left,
                top - n_rows * _ROW_IN / height_in,
                _CELL_IN / width_in,
                n_rows * _ROW_IN / height_in,
            )
        )
        anchors[t] = (cell_left + _CELL_IN / 2 / width_in, top, top - n_rows * _ROW_IN / height_in)
        _draw_node(ax, t, rows[t], splits[t], n_trees)
        if t:
            parent = anchors[(t - 1) // 2]
            fig.add_artist(
                Line2D(
                    [parent[0], anchors[t][0]],
                    [parent[2] - 0.02 / height_in, top + 0.28 / height_in],
                    color="0.6",
                    linewidth=1,
                    transform=fig.transFigure,
                )
            )
    return fig


def _draw_node(ax, position: int, rows: list, n_splits: int, n_trees: int | None):
    trees = f" of {n_trees}" if n_trees is not None else ""
    ax.set_title(f"node {position}: {n_splits}{trees} trees split", fontsize=8, loc="left", pad=3)
    ax.set_xticks([])
    if not rows:
        ax.set_yticks([])
        ax.text(
            0.5,
            0.5,
            "no split (a leaf in every tree)",
            fontsize=8,
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
    ax.imshow(values, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    for i, (_, value) in enumerate(rows):
        color = "black" if np.isnan(values[i, 0]) else _text_color(value)
        ax.text(0, i, format_percent(value), ha="center", va="center", fontsize=8, color=color)
    ax.yaxis.tick_right()
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.tick_params(length=0, pad=3)


def save_vite_figures(ensemble, out_dir, depth: int | None = None) -> list[Path]:
    """Write the VITE figures of an ensemble as PNG and SVG.

    Files: ``level_frequency.png/.svg`` (features x levels heatmap) and
    ``vite_tree.png/.svg`` (representative tree). Threshold intervals are in raw input
    units when the ensemble has a MinMaxScaler, in its input units otherwise.

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
        The four files written.
    """
    if ensemble.max_depth == 0:
        raise ValueError("the ensemble has no split (every tree is a single leaf): no VITE figure")
    if depth is None:
        depth = min(ensemble.max_depth, MAX_LEVELS)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = {
        "level_frequency": plot_level_frequency(
            vite.level_frequency(ensemble, depth=depth),
            title=f"VITE level frequency ({ensemble.n_trees} trees)\nshare of the splits "
            "at each level",
        ),
        "vite_tree": plot_vite_tree(
            vite.node_frequency(ensemble, depth=depth),
            vite.threshold_ranges(ensemble, depth=depth),
            ensemble.n_trees,
        ),
    }
    written = []
    for name, fig in figures.items():
        for suffix in (".png", ".svg"):
            path = out_dir / f"{name}{suffix}"
            fig.savefig(path, dpi=150 if suffix == ".png" else None, bbox_inches="tight")
            written.append(path)
    return written
