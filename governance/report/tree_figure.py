"""The surrogate tree drawn like the paper's Cleveland figure.

Every node shows ``[negatives, positives]``: how many samples of a labelled set reach it,
split by label (the paper uses the ground truth; without labels the ensemble's labels
are used). Branch nodes also show their oblique rule ``a'.x <= c`` in the ensemble's raw
input units; a node whose coefficients are all zero sends every sample one way and is
drawn as a pass-through. Leaves show their class.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class DiagramNode:
    """One node of the drawn tree.

    Attributes
    ----------
    position : int
        Breadth-first position (root 0, children ``2t+1`` and ``2t+2``).
    level : int
    counts : tuple of int
        ``(negatives, positives)`` among the samples reaching the node.
    rule : str or None
        Oblique rule of a branch node in raw units (``None`` at leaves).
    univariate : str or None
        A one-feature rule solved for its feature (``x >= c``), shown under the rule.
    passthrough : str or None
        ``"left"``/``"right"`` for a branch node with no split, else ``None``.
    leaf_class : object or None
        Class label of a leaf.
    """

    position: int
    level: int
    counts: tuple
    rule: str | None = None
    univariate: str | None = None
    passthrough: str | None = None
    leaf_class: object = None

    @property
    def is_leaf(self) -> bool:
        return self.rule is None and self.passthrough is None


def tree_diagram(tree, X, labels, scaler=None) -> list[DiagramNode]:
    """Nodes of the complete surrogate tree with their label counts and rules.

    Parameters
    ----------
    tree : governance.miret.SurrogateTree
    X : array-like of shape (n, p)
        Normalized samples (the MILP's working space).
    labels : array-like of shape (n,)
        Labels in ``tree.classes`` (ground truth, or the ensemble's labels).
    scaler : sklearn.preprocessing.MinMaxScaler, optional
        Rules are shown in raw units when given.

    Returns
    -------
    list of DiagramNode
        Branch nodes ``0..2^D-2`` then leaves ``2^D-1..2^{D+1}-2``.
    """
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels)
    classes = list(tree.classes)
    positive = labels == classes[1]
    negative = labels == classes[0]
    sides = np.asarray(tree.branch_sides(X))
    leaves = np.asarray(tree.apply(X))
    n_branch = 2**tree.depth - 1
    nodes = []
    for row in tree.rule_table(scaler=scaler):
        t = row["node"]
        reach = sides[:, t] >= 0
        if row["terms"]:
            rule, through = row["text"].replace(" <= ", " \u2264 "), None
        else:
            rule, through = None, "left" if tree.intercept[t] <= 0 else "right"
        nodes.append(
            DiagramNode(
                position=t,
                level=row["level"],
                counts=(int((reach & negative).sum()), int((reach & positive).sum())),
                rule=rule,
                univariate=row["univariate"],
                passthrough=through,
            )
        )
    for t in range(n_branch, 2 * n_branch + 1):
        reach = leaves == t
        nodes.append(
            DiagramNode(
                position=t,
                level=int(tree.depth),
                counts=(int((reach & negative).sum()), int((reach & positive).sum())),
                leaf_class=classes[0] if t % 2 == 1 else classes[1],
            )
        )
    return nodes


def _wrap_rule(rule: str, width: int) -> str:
    lhs, rhs = rule.rsplit(" \u2264 ", 1)
    # keep "+ 0.3·x" together when wrapping
    glued = lhs.replace("+ ", "+\u00a0").replace("- ", "-\u00a0")
    lines = textwrap.wrap(glued, width=max(width, 12), break_long_words=False)
    lines[-1] += f" \u2264 {rhs}"
    return "\n".join(lines)


def draw_tree(nodes, depth: int, label_source: str = "ground truth"):
    """A matplotlib figure of the diagram returned by :func:`tree_diagram`."""
    from matplotlib.figure import Figure

    n_leaves = 2**depth
    width = max(11.0, 1.6 * n_leaves)
    height = 1.9 * depth + 1.6
    fontsize = 11.0 if depth <= 3 else 9.5 if depth == 4 else 8.0
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0.01, 0.02, 0.98, 0.9))
    ax.set_xlim(0, 1)
    ax.set_ylim(-depth - 0.45, 0.35)
    ax.axis("off")

    def xy(position):
        level = int(np.floor(np.log2(position + 1)))
        k = position - (2**level - 1)
        return (k + 0.5) / 2**level, -float(level)

    for node in nodes:
        if node.is_leaf:
            continue
        x, y = xy(node.position)
        for side, child in (("\u2264", 2 * node.position + 1), (">", 2 * node.position + 2)):
            cx, cy = xy(child)
            muted = node.passthrough is not None and (
                (node.passthrough == "left") != (side == "\u2264")
            )
            ax.plot([x, cx], [y, cy], color="#b9c2cc" if muted else "#5b6b7b", lw=1.2, zorder=1)
            ax.text(
                (x + cx) / 2 + (-0.006 if side == "\u2264" else 0.006),
                (y + cy) / 2,
                side if node.passthrough is None else "",
                ha="right" if side == "\u2264" else "left",
                va="center",
                fontsize=fontsize + 2,
                color="#33414e",
            )
    chars_per_unit = width * 72 / (0.62 * fontsize)  # characters per unit of x
    for node in nodes:
        x, y = xy(node.position)
        counts = f"[{node.counts[0]}, {node.counts[1]}]"
        if node.is_leaf:
            text = f"{counts}\nclass {node.leaf_class}"
            style = {"boxstyle": "round,pad=0.35", "fc": "#eef8ef", "ec": "#3a8a47", "lw": 1.4}
        elif node.passthrough is not None:
            text = f"{counts}\nno split: all \u2192 {node.passthrough}"
            style = {
                "boxstyle": "round,pad=0.35",
                "fc": "#f4f5f7",
                "ec": "#9aa5b1",
                "lw": 1.2,
                "ls": "--",
            }
        else:
            available = int(0.92 * chars_per_unit / 2**node.level)
            text = f"{counts}\n{_wrap_rule(node.rule, available)}"
            if node.univariate:
                text += (
                    "\n(" + node.univariate.replace(">=", "\u2265").replace("<=", "\u2264") + ")"
                )
            style = {"boxstyle": "round,pad=0.4", "fc": "#eef3fb", "ec": "#1f4e89", "lw": 1.6}
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=fontsize,
            bbox=style,
            zorder=3,
            linespacing=1.35,
        )
    fig.suptitle(
        f"MIRET surrogate tree (D={depth}); [negatives, positives] by {label_source} labels "
        "of the training samples reaching each node",
        fontsize=11,
        y=0.985,
    )
    return fig


def save_tree_figure(nodes, depth: int, out_dir, label_source: str = "ground truth"):
    """Write ``surrogate_tree.png`` and ``surrogate_tree.svg`` into ``out_dir``.

    Returns
    -------
    list of pathlib.Path
    """
    import matplotlib

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig = draw_tree(nodes, depth, label_source)
    paths = [out_dir / "surrogate_tree.png", out_dir / "surrogate_tree.svg"]
    fig.savefig(paths[0], dpi=110)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "surrogate-tree"}):
        fig.savefig(paths[1])
    return paths
