"""Human-facing wording of a surrogate tree: the pruned display tree and its rules.

A :class:`~governance.miret.tree.SurrogateTree` is a complete tree of depth ``D``; many
of its branch nodes do not split the data (all coefficients zero, or every sample on one
side). The *display tree* keeps only what a reader needs:

- only nodes reached by the samples given, and only real splits: a split that sends all
  samples (or, without coefficients, the whole space) to one side is collapsed into
  that side;
- each split as one plain condition in raw units, written as
  :mod:`governance.miret.conditions` writes them (``value <= threshold``, the ``yes``
  branch drawn on the left; long oblique splits as score tables);
- each leaf with its class name, share of the samples and purity: the share of its
  samples whose label is the leaf's class. The product's displays count the fit rows
  with the *ensemble's* labels, so purity is the leaf's agreement with the ensemble.

The display describes the samples it was built from: a split collapsed here never
separates those samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.miret.tree.conditions import (
    CONVENTION_NOTE,
    PURITY_NOTE,
    negation,
    split_table,
)
from miret_governance.governance.report.formatting import format_percent


# ---------------------------------------------------------------------- display tree
@dataclass(frozen=True)
class DisplayNode:
    """One node of the display tree.

    Attributes
    ----------
    node : int
        Breadth-first position in the surrogate tree.
    depth : int
        Depth in the display tree (root 0), after collapsing.
    n_samples : int
    share : float
        Fraction of all samples that reach the node.
    condition : str or None
        The split's condition (its ``yes`` branch); None at leaves.
    yes, no : DisplayNode or None
        Children of a split: ``yes`` where the condition holds.
    class_name : str or None
        Predicted class of a leaf.
    purity : float or None
        Share of a leaf's samples whose label is the leaf's class (nan when empty).
    missing : str or None
        Where a split sends a row missing one of its features
        (``missing income -> yes branch``); None at leaves or without a rule.
    """

    node: int
    depth: int
    n_samples: int
    share: float
    condition: str | None = None
    yes: DisplayNode | None = None
    no: DisplayNode | None = None
    class_name: str | None = None
    purity: float | None = None
    missing: str | None = None

    @property
    def is_leaf(self) -> bool:
        return self.condition is None

    def walk(self):
        """This node and its descendants, depth first, ``yes`` before ``no``."""
        yield self
        if not self.is_leaf:
            yield from self.yes.walk()
            yield from self.no.walk()


@dataclass(frozen=True)
class DisplayTree:
    """The pruned tree a reader sees.

    Attributes
    ----------
    root : DisplayNode
    depth : int
        Surrogate depth ``D`` (levels available to the MILP).
    effective_depth : int
        Depth of the display tree (real splits on the longest path).
    class_names : tuple of str
        Names of the tree's classes, in ``classes`` order.
    n_samples : int
    scores : tuple of Score
        The score tables of the splits shown, in display order.
    """

    root: DisplayNode
    depth: int
    effective_depth: int
    class_names: tuple
    n_samples: int
    scores: tuple = ()

    def nodes(self) -> list:
        return list(self.root.walk())

    def leaves(self) -> list:
        return [node for node in self.root.walk() if node.is_leaf]

    def missing_rules(self) -> list[str]:
        """Where each split shown sends a row missing one of its features:
        ``income <= 4.2e+04: missing income -> yes branch`` (none without a rule)."""
        return [f"{node.condition}: {node.missing}" for node in self.nodes() if node.missing]


def _class_names(tree, class_names) -> tuple:
    if class_names is None:
        return tuple(str(c) for c in tree.classes)
    names = tuple(str(c) for c in class_names)
    if len(names) != tree.classes.size:
        raise InvalidInputError(
            f"class_names needs {tree.classes.size} names (for classes {list(tree.classes)}), "
            f"got {len(names)}"
        )
    return names


def display_tree(tree, X, labels, *, scaler=None, class_names=None, feature_names=None):
    """The pruned display tree of ``tree`` on samples ``X`` with ``labels``.

    Parameters
    ----------
    tree : governance.miret.tree.SurrogateTree
    X : array-like of shape (n, p)
        Normalized samples (the tree's own input space), at least one; without
        ``scaler`` their range is the score tables' data range.
    labels : array-like of shape (n,)
        Labels in ``tree.classes`` for the purity of the leaves: the ensemble's labels
        (the product's one meaning of purity).
    scaler, class_names, feature_names
        As in :func:`display_from_counts`.

    Returns
    -------
    DisplayTree
    """
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels)
    if X.ndim != 2 or X.shape[0] == 0 or labels.shape != (X.shape[0],):
        raise InvalidInputError("give at least one sample and one label per sample")
    leaves = tree.apply(X) - tree.n_branch_nodes
    known = labels[:, None] == np.asarray(tree.classes)[None, :]
    if not known.any(axis=1).all():
        raise InvalidInputError(
            f"labels must be among the tree's classes {tree.classes.tolist()!r}"
        )
    counts = np.zeros((tree.n_leaves, tree.classes.size), dtype=np.int64)
    np.add.at(counts, (leaves, np.argmax(known, axis=1)), 1)
    return display_from_counts(
        tree,
        counts,
        scaler=scaler,
        class_names=class_names,
        feature_names=feature_names,
        data_range=None if scaler is not None else (X.min(axis=0), X.max(axis=0)),
    )


def display_from_counts(
    tree,
    leaf_counts,
    *,
    scaler=None,
    class_names=None,
    feature_names=None,
    data_range=None,
    encoding=None,
) -> DisplayTree:
    """The pruned display tree of ``tree`` from its samples' counts per leaf.

    A branch node is shown only when samples reach both of its sides; otherwise it is
    collapsed into the side its samples take.

    Parameters
    ----------
    tree : governance.miret.tree.SurrogateTree
    leaf_counts : array-like of shape (2**D, k)
        Samples per leaf (leaf ``2^D - 1 + i`` is row ``i``) labelled with each class
        (``tree.classes`` order), e.g. a fitted surrogate's ``leaf_counts_``.
    scaler : fitted MinMaxScaler, optional
        Conditions are written in raw units when given; its data range bounds the
        contributions of the score tables.
    class_names : sequence of str, optional
        Names of ``tree.classes``, one each (default: the class values as text).
    feature_names : sequence of str, optional
        Default: the tree's feature names.
    data_range : (array-like, array-like), optional
        Minimum and maximum of every feature in the conditions' units (default: the
        scaler's; without either, score tables give no contribution range).
    encoding : governance.encoding.Encoding, optional
        The tree's features are a pipeline's encoded columns: conditions name the
        original columns and categories (:func:`~governance.miret.conditions.split_table`).
    """
    leaf_counts = np.asarray(leaf_counts, dtype=np.int64)
    shape = (tree.n_leaves, tree.classes.size)
    if leaf_counts.shape != shape or leaf_counts.sum() == 0:
        raise InvalidInputError(f"leaf_counts must have shape {shape} and count a sample")
    names = _class_names(tree, class_names)
    splits = split_table(tree, feature_names, scaler, data_range, encoding)
    n_branch = tree.n_branch_nodes
    reached = np.zeros(n_branch + tree.n_leaves, dtype=np.int64)
    reached[n_branch:] = leaf_counts.sum(axis=1)
    for t in range(n_branch - 1, -1, -1):  # one pass over the 2^D - 1 branch nodes
        reached[t] = reached[2 * t + 1] + reached[2 * t + 2]
    n = int(reached[0])
    scores = []

    def build(t: int, depth: int) -> DisplayNode:
        count = int(reached[t])
        if t >= n_branch:  # a leaf predicts classes[leaf_class]
            k = int(tree.leaf_class[t - n_branch])
            purity = leaf_counts[t - n_branch, k] / count if count else float("nan")
            return DisplayNode(t, depth, count, count / n, class_name=names[k], purity=purity)
        left, right = reached[2 * t + 1], reached[2 * t + 2]
        split = splits[t]
        if split["condition"] is None or not left or not right:
            return build(2 * t + 1 if left else 2 * t + 2, depth)
        if split["score"] is not None:
            scores.append(split["score"])
        yes, no = (2 * t + 1, 2 * t + 2) if split["yes"] == "left" else (2 * t + 2, 2 * t + 1)
        return DisplayNode(
            t,
            depth,
            count,
            count / n,
            condition=split["condition"],
            yes=build(yes, depth + 1),
            no=build(no, depth + 1),
            missing=split["missing"],
        )

    root = build(0, 0)
    effective = max(node.depth for node in root.walk() if node.is_leaf)
    return DisplayTree(root, int(tree.depth), int(effective), names, n, tuple(scores))


def leaf_rules(display: DisplayTree) -> list[dict]:
    """One rule per leaf: the conditions on its path and its class.

    Returns
    -------
    list of dict
        Keys ``conditions`` (list of str, root first), ``class_name``, ``share``,
        ``purity``, ``n_samples``, in ``yes``-first order.
    """
    rules = []

    def walk(node, path):
        if node.is_leaf:
            rules.append(
                {
                    "conditions": list(path),
                    "class_name": node.class_name,
                    "share": node.share,
                    "purity": node.purity,
                    "n_samples": node.n_samples,
                }
            )
            return
        walk(node.yes, path + [node.condition])
        walk(node.no, path + [negation(node.condition)])

    walk(display.root, [])
    return rules


def rules_text(display: DisplayTree) -> str:
    """The rules as plain text: one line per leaf, the score tables, then what purity
    and the conditions mean.

    ``if <c1> and <c2> then <class> (<share> of samples, purity <p>)``; a tree with no
    real split reads ``always <class> (...)``. A tree with a rule for missing values
    adds one line: ``missing values: <condition>: missing <feature> -> yes branch; ...``.
    """
    lines = []
    for rule in leaf_rules(display):
        stats = (
            f"({format_percent(rule['share'])} of samples, purity {format_percent(rule['purity'])})"
        )
        if rule["conditions"]:
            lines.append(f"if {' and '.join(rule['conditions'])} then {rule['class_name']} {stats}")
        else:
            lines.append(f"always {rule['class_name']} {stats}")
    if display.missing_rules():
        lines.append(f"missing values: {'; '.join(display.missing_rules())}")
    lines += [score.text() for score in display.scores]
    lines.append(f"({PURITY_NOTE}; {CONVENTION_NOTE})")
    return "\n".join(lines)
