"""Human-facing wording of a surrogate tree: the pruned display tree and its rules.

A :class:`~governance.miret.tree.SurrogateTree` is a complete tree of depth ``D``; many
of its branch nodes do not split the data (all coefficients zero, or every sample on one
side). The *display tree* keeps only what a reader needs:

- only nodes reached by the samples given, and only real splits: a split that sends all
  samples (or, without coefficients, the whole space) to one side is collapsed into
  that side;
- each split as one plain condition in raw units (``worst perimeter >= 115.4`` or
  ``0.42·a + 0.1·b <= 3.2``), whose ``yes`` branch is where the condition holds (the
  tree's left child, ``a·x + b <= 0``) and ``no`` branch the other;
- each leaf with its class name, share of the samples and purity (share of its samples
  whose label is the leaf's class).

The display describes the samples it was built from (normally the training samples with
the ensemble's labels): a split collapsed here never separates those samples.
The text is plain; each output (HTML, Markdown, figures) escapes it for its format.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from miret_governance.governance.miret.layout import node_level

SIGNIFICANT = 4


def format_number(value: float) -> str:
    """A number with a few significant digits, without exponent noise for zero."""
    if value == 0:
        return "0"
    return f"{value:.{SIGNIFICANT}g}"


def raw_hyperplanes(tree, scaler=None) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients and intercepts of every branch node in raw units.

    With a fitted MinMaxScaler (``x_norm = x * scale_ + min_``):
    ``a . (x * scale_ + min_) + b = (a * scale_) . x + (b + a . min_)``.
    """
    coef, intercept = np.asarray(tree.coef), np.asarray(tree.intercept)
    if scaler is None:
        return coef, intercept
    scale = np.asarray(getattr(scaler, "scale_", None), dtype=np.float64)
    shift = np.asarray(getattr(scaler, "min_", None), dtype=np.float64)
    if scale.shape != (tree.n_features,) or shift.shape != (tree.n_features,):
        raise ValueError(
            f"scaler must be a fitted MinMaxScaler over the tree's {tree.n_features} "
            f"features (scale_ and min_ of that length)"
        )
    return coef * scale, intercept + coef @ shift


def linear_text(terms, rhs: float, op: str = "<=") -> str:
    """``c1·x1 + c2·x2 <op> rhs`` with rounded coefficients."""
    parts = []
    for k, (name, coef) in enumerate(terms):
        magnitude = format_number(abs(coef))
        term = name if magnitude == "1" else f"{magnitude}·{name}"
        if k == 0:
            parts.append(f"-{term}" if coef < 0 else term)
        else:
            parts.append(f"{'-' if coef < 0 else '+'} {term}")
    return f"{' '.join(parts)} {op} {format_number(rhs + 0.0)}"


def univariate_text(terms, rhs: float) -> str | None:
    """``c·x <= r`` solved for ``x`` (``x <= r/c`` or ``x >= r/c``); None otherwise."""
    if len(terms) != 1:
        return None
    name, coef = terms[0]
    return f"{name} {'<=' if coef > 0 else '>='} {format_number(rhs / coef + 0.0)}"


_NEGATED = {"<=": ">", ">=": "<"}


def negation(condition: str) -> str:
    """The condition of the ``no`` branch (``x <= c`` becomes ``x > c``)."""
    for op, negated in _NEGATED.items():
        head, sep, tail = condition.rpartition(f" {op} ")
        if sep:
            return f"{head} {negated} {tail}"
    raise ValueError(f"not a condition: {condition!r}")


def split_table(tree, feature_names=None, scaler=None) -> list[dict]:
    """The split of every branch node of the complete tree, breadth-first.

    Returns
    -------
    list of dict
        Keys ``node``, ``terms`` (``(name, coef)`` of nonzero raw coefficients, full
        precision), ``intercept`` (raw), ``condition`` (plain text of the ``yes``
        branch = left child, or None without coefficients) and ``passes``
        (``"yes"``/``"no"``: where everything goes when there are no coefficients).
    """
    names = tree.feature_names if feature_names is None else tuple(map(str, feature_names))
    if len(names) != tree.n_features:
        raise ValueError(
            f"feature_names has {len(names)} names but the tree has {tree.n_features} features"
        )
    coef, intercept = raw_hyperplanes(tree, scaler)
    normalized = np.asarray(tree.coef)
    table = []
    for t in range(tree.n_branch_nodes):
        terms = [(names[j], float(coef[t, j])) for j in np.flatnonzero(normalized[t])]
        rhs = -float(intercept[t])
        condition = None
        if terms:
            condition = univariate_text(terms, rhs) or linear_text(terms, rhs)
        passes = "yes" if float(tree.intercept[t]) <= 0 else "no"
        table.append(
            {
                "node": t,
                "terms": terms,
                "intercept": float(intercept[t]),
                "condition": condition,
                "passes": None if terms else passes,
            }
        )
    return table


# ---------------------------------------------------------------------- complete tree
def rule_table(tree, feature_names=None, scaler=None) -> list:
    """The split of every branch node, breadth-first, as plain records.

    Parameters
    ----------
    feature_names : sequence of str, optional
        Defaults to the tree's feature names.
    scaler : fitted sklearn.preprocessing.MinMaxScaler, optional
        When given, splits are expressed in raw (unscaled) units:
        ``(a * scale_) . x + (b + a . min_) <= 0``.

    Returns
    -------
    list of dict
        Keys ``node``, ``level``, ``terms`` (list of ``(name, coef)`` for nonzero
        coefficients, full precision), ``intercept``, ``left``, ``right`` (child ids),
        ``last_level`` (children are leaves), ``text`` (rounded, human-readable) and
        ``univariate`` (a one-feature split solved for the feature, e.g.
        ``x3 >= 0.25``, else None).
    """
    names = tree.feature_names if feature_names is None else tuple(map(str, feature_names))
    if len(names) != tree.n_features:
        raise ValueError(
            f"feature_names has {len(names)} names but the tree has {tree.n_features} features"
        )
    coef, intercept = raw_hyperplanes(tree, scaler)
    table = []
    for t in range(tree.n_branch_nodes):
        nonzero = np.flatnonzero(np.asarray(tree.coef)[t])
        terms = [(names[j], float(coef[t, j])) for j in nonzero]
        b = float(intercept[t])
        univariate = univariate_text(terms, -b) if terms and terms[0][1] != 1 else None
        if terms:
            text = linear_text(terms, -b)
        else:
            side = "left" if np.asarray(tree.intercept)[t] <= 0 else "right"
            text = f"(no split: all samples go {side})"
        table.append(
            {
                "node": t,
                "level": int(node_level(t)),
                "terms": terms,
                "intercept": b,
                "left": 2 * t + 1,
                "right": 2 * t + 2,
                "last_level": bool(node_level(t) == tree.depth - 1),
                "text": text,
                "univariate": univariate,
            }
        )
    return table


def complete_rules(tree, feature_names=None, scaler=None) -> str:
    """Human-readable rules, one line per branch node in breadth-first order.

    A split reads ``node t (level d): if <a.x <= -b> then <left> else <right>``; the
    children of a last-level node are leaves, shown with their class label. A node
    without coefficients reads ``(no split: all samples go left|right) -> <child>``.
    Coefficients are rounded to 4 significant digits; :func:`rule_table` has them at
    full precision and explains ``scaler``.
    """
    lines = []
    for row in rule_table(tree, feature_names, scaler):
        children = []
        for side, child in enumerate((row["left"], row["right"])):
            if row["last_level"]:
                children.append(f"leaf {child} (class {tree.classes[side]})")
            else:
                children.append(f"node {child}")
        head = f"node {row['node']} (level {row['level']}): "
        if row["terms"]:
            condition = row["text"]
            if row["univariate"]:
                condition += f" (i.e. {row['univariate']})"
            lines.append(f"{head}if {condition} then {children[0]} else {children[1]}")
        else:
            side = 0 if np.asarray(tree.intercept)[row["node"]] <= 0 else 1
            lines.append(f"{head}{row['text']} -> {children[side]}")
    return "\n".join(lines)


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
        Children of a split.
    class_name : str or None
        Predicted class of a leaf.
    purity : float or None
        Share of a leaf's samples whose label is the leaf's class (nan when empty).
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
        Names of ``classes[0]`` and ``classes[1]``.
    n_samples : int
    """

    root: DisplayNode
    depth: int
    effective_depth: int
    class_names: tuple
    n_samples: int

    def nodes(self) -> list:
        return list(self.root.walk())

    def leaves(self) -> list:
        return [node for node in self.root.walk() if node.is_leaf]


def _class_names(tree, class_names) -> tuple:
    if class_names is None:
        return tuple(str(c) for c in tree.classes)
    names = tuple(str(c) for c in class_names)
    if len(names) != 2:
        raise ValueError(
            f"class_names needs two names (for classes {list(tree.classes)}), got {len(names)}"
        )
    return names


def display_tree(tree, X, labels, *, scaler=None, class_names=None, feature_names=None):
    """The pruned display tree of ``tree`` on samples ``X`` with ``labels``.

    Parameters
    ----------
    tree : governance.miret.tree.SurrogateTree
    X : array-like of shape (n, p)
        Normalized samples (the tree's own input space), at least one.
    labels : array-like of shape (n,)
        Labels in ``tree.classes`` (the ensemble's labels, or the ground truth), for
        the purity of the leaves.
    scaler, class_names, feature_names
        As in :func:`display_from_counts`.

    Returns
    -------
    DisplayTree
    """
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels)
    if X.ndim != 2 or X.shape[0] == 0 or labels.shape != (X.shape[0],):
        raise ValueError("give at least one sample and one label per sample")
    leaves = tree.apply(X) - tree.n_branch_nodes
    counts = np.zeros((tree.n_leaves, 2), dtype=np.int64)
    np.add.at(counts, (leaves, (labels == np.asarray(tree.classes)[1]).astype(np.int64)), 1)
    return display_from_counts(
        tree, counts, scaler=scaler, class_names=class_names, feature_names=feature_names
    )


def display_from_counts(
    tree, leaf_counts, *, scaler=None, class_names=None, feature_names=None
) -> DisplayTree:
    """The pruned display tree of ``tree`` from its samples' counts per leaf.

    A branch node is shown only when samples reach both of its sides; otherwise it is
    collapsed into the side its samples take.

    Parameters
    ----------
    tree : governance.miret.tree.SurrogateTree
    leaf_counts : array-like of shape (2**D, 2)
        Samples per leaf (leaf ``2^D - 1 + i`` is row ``i``) labelled ``classes[0]``
        and ``classes[1]``, e.g. a fitted surrogate's ``leaf_counts_``.
    scaler : fitted MinMaxScaler, optional
        Conditions are written in raw units when given.
    class_names : sequence of two str, optional
        Names of ``tree.classes`` (default: the class values as text).
    feature_names : sequence of str, optional
        Default: the tree's feature names.
    """
    leaf_counts = np.asarray(leaf_counts, dtype=np.int64)
    if leaf_counts.shape != (tree.n_leaves, 2) or leaf_counts.sum() == 0:
        raise ValueError(f"leaf_counts must have shape ({tree.n_leaves}, 2) and count a sample")
    names = _class_names(tree, class_names)
    splits = split_table(tree, feature_names, scaler)
    n_branch = tree.n_branch_nodes
    reached = np.zeros(n_branch + tree.n_leaves, dtype=np.int64)
    reached[n_branch:] = leaf_counts.sum(axis=1)
    for t in range(n_branch - 1, -1, -1):  # one pass over the 2^D - 1 branch nodes
        reached[t] = reached[2 * t + 1] + reached[2 * t + 2]
    n = int(reached[0])

    def build(t: int, depth: int) -> DisplayNode:
        count = int(reached[t])
        if t >= n_branch:  # a leaf: odd positions predict classes[0], even classes[1]
            k = 0 if t % 2 == 1 else 1
            purity = leaf_counts[t - n_branch, k] / count if count else float("nan")
            return DisplayNode(t, depth, count, count / n, class_name=names[k], purity=purity)
        left, right = reached[2 * t + 1], reached[2 * t + 2]
        if splits[t]["condition"] is None or not left or not right:
            return build(2 * t + 1 if left else 2 * t + 2, depth)
        return DisplayNode(
            t,
            depth,
            count,
            count / n,
            condition=splits[t]["condition"],
            yes=build(2 * t + 1, depth + 1),
            no=build(2 * t + 2, depth + 1),
        )

    root = build(0, 0)
    effective = max(node.depth for node in root.walk() if node.is_leaf)
    return DisplayTree(root, int(tree.depth), int(effective), names, n)


def format_percent(value: float) -> str:
    """A share for people: ``41.2%`` (``-`` when undefined)."""
    if value is None or not np.isfinite(value):
        return "-"
    return f"{100 * value:.1f}%"


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
    """The rules as plain text, one line per leaf.

    ``if <c1> and <c2> then <class> (<share> of samples, purity <p>)``; a tree with no
    real split reads ``always <class> (...)``.
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
    return "\n".join(lines)
