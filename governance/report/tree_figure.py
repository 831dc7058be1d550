"""The surrogate tree as a reader sees it (see :mod:`governance.miret.display`).

Only reached nodes and real splits are drawn; the title gives the effective depth. Each
split box holds its condition and how many samples reach it; its left edge is ``yes``
(the condition holds) and its right edge ``no``. Leaves show the class name, the share
of samples and the purity. User text (feature and class names) is never parsed as
mathtext.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

FONT_SIZE = 9.5
_LEAF_IN = 1.8  # horizontal room per leaf, inches (a leaf box is about 1.5)
_MIN_WIDTH_IN = 4.2  # the figure's narrowest width, inches (about 400 px)
_LEVEL_IN = 1.25  # vertical room per level, inches
_HEADER_IN = 0.75  # title and legend, inches
_CHAR_IN = 0.072  # mean width of one 9.5-point character, inches


def _layout(display) -> dict:
    """(x, y) of every node: leaves left to right in yes-first order, parents centred."""
    xy = {}
    leaves = iter(range(len(display.leaves())))

    def place(node):
        if node.is_leaf:
            x = next(leaves) + 0.5
        else:
            x = (place(node.yes) + place(node.no)) / 2
        xy[id(node)] = (x, -float(node.depth))
        return x

    place(display.root)
    return xy


def _wrap(condition: str, width: int) -> str:
    glued = condition.replace("+ ", "+\u00a0").replace("- ", "-\u00a0")
    return "\n".join(textwrap.wrap(glued, width=max(width, 14), break_long_words=False))


def _text(ax, x, y, text, **kwargs):
    # parse_math=False: a feature named "$\frac{a$" is text, not mathtext.
    return ax.text(x, y, text, parse_math=False, usetex=False, **kwargs)


def draw_display_tree(display, label_source: str = "ensemble"):
    """A matplotlib figure of a :class:`~governance.miret.display.DisplayTree`.

    Parameters
    ----------
    display : governance.miret.display.DisplayTree
    label_source : str
        Whose labels define the leaves' purity, named in the subtitle.
    """
    from matplotlib.figure import Figure

    from miret_governance.governance.miret.display import format_percent

    n_leaves = len(display.leaves())
    levels = display.effective_depth
    width = max(_MIN_WIDTH_IN, _LEAF_IN * n_leaves)
    height = _LEVEL_IN * (levels + 1) + _HEADER_IN
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0.01, 0.02, 0.98, 0.98 - _HEADER_IN / height))
    ax.set_xlim(-0.06, n_leaves + 0.06)
    ax.set_ylim(-levels - 0.5, 0.5)
    ax.axis("off")
    xy = _layout(display)
    for node in display.nodes():
        if node.is_leaf:
            continue
        x, y = xy[id(node)]
        for word, child in (("yes", node.yes), ("no", node.no)):
            cx, cy = xy[id(child)]
            ax.plot([x, cx], [y, cy], color="#5b6b7b", lw=1.2, zorder=1)
            _text(
                ax,
                (x + cx) / 2,
                (y + cy) / 2,
                word,
                ha="center",
                va="center",
                fontsize=FONT_SIZE,
                color="#1f4e89" if word == "yes" else "#8a3a3a",
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none"},
                zorder=2,
            )
    for node in display.nodes():
        x, y = xy[id(node)]
        reach = f"{node.n_samples} samples ({format_percent(node.share)})"
        if node.is_leaf:
            text = f"{node.class_name}\n{reach}\npurity {format_percent(node.purity)}"
            style = {"boxstyle": "round,pad=0.35", "fc": "#eef8ef", "ec": "#3a8a47", "lw": 1.3}
        else:
            span = width / n_leaves * len(list(_leaves_under(node)))
            text = f"{_wrap(node.condition, int(0.9 * span / _CHAR_IN))}\n{reach}"
            style = {"boxstyle": "round,pad=0.4", "fc": "#eef3fb", "ec": "#1f4e89", "lw": 1.5}
        _text(ax, x, y, text, ha="center", va="center", fontsize=FONT_SIZE, bbox=style, zorder=3)
    title = (
        f"MIRET surrogate tree, effective depth {display.effective_depth} "
        f"(MILP depth {display.depth})"
    )
    fig.suptitle(title, fontsize=FONT_SIZE + 1, y=1 - 0.05 / height, va="top")
    _text(
        fig,
        0.5,
        1 - 0.3 / height,
        f"{display.n_samples} training samples; 'yes': the condition holds;\n"
        f"purity by {label_source} labels",
        ha="center",
        va="top",
        fontsize=FONT_SIZE - 1,
        color="#44505c",
        transform=fig.transFigure,
    )
    return fig


def _leaves_under(node):
    return (n for n in node.walk() if n.is_leaf)


def save_tree_figure(display, out_dir, label_source: str = "ensemble") -> list[Path]:
    """Write ``surrogate_tree.png`` and ``surrogate_tree.svg`` (text as text) into ``out_dir``.

    Returns
    -------
    list of pathlib.Path
    """
    import matplotlib

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig = draw_display_tree(display, label_source)
    paths = [out_dir / "surrogate_tree.png", out_dir / "surrogate_tree.svg"]
    fig.savefig(paths[0], dpi=110)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "surrogate-tree"}):
        fig.savefig(paths[1])
    return paths
