"""The complete tree's rules, node by node: every branch node's split, reached or not.

:mod:`governance.miret.display` words the pruned tree a reviewer reads; this module
lists the whole complete tree of a :class:`~governance.miret.tree.SurrogateTree`, for
a tree known without its fit data. Each split reads ``a·x <= r``: the tree's left child
takes the rows that meet it (lower values go left, as in VITE).
"""

from __future__ import annotations

import numpy as np

from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.miret.problem.layout import node_level
from miret_governance.governance.miret.tree.conditions import (
    format_number,
    linear_text,
    raw_hyperplanes,
)


def _solved(terms, rhs: float) -> str | None:
    """``c·x <= r`` solved for ``x`` (``x <= r/c`` or ``x >= r/c``); None otherwise."""
    if len(terms) != 1 or terms[0][1] == 1:
        return None
    name, coef = terms[0]
    return f"{name} {'<=' if coef > 0 else '>='} {format_number(rhs / coef + 0.0)}"


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
        raise InvalidInputError(
            f"feature_names has {len(names)} names but the tree has {tree.n_features} features"
        )
    coef, intercept = raw_hyperplanes(tree, scaler)
    table = []
    for t in range(tree.n_branch_nodes):
        nonzero = np.flatnonzero(np.asarray(tree.coef)[t])
        terms = [(names[j], float(coef[t, j])) for j in nonzero]
        b = float(intercept[t])
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
                "univariate": _solved(terms, -b) if terms else None,
            }
        )
    return table


def complete_rules(tree, feature_names=None, scaler=None) -> str:
    """Human-readable rules, one line per branch node in breadth-first order.

    A split reads ``node t (level d): if <a.x <= -b> then <left> else <right>``; the
    children of a last-level node are leaves, shown with their class label. A node
    without coefficients reads ``(no split: all samples go left|right) -> <child>``.
    Weights have 3 significant digits, thresholds 4; :func:`rule_table` has them at full
    precision and explains ``scaler``.
    """
    lines = []
    for row in rule_table(tree, feature_names, scaler):
        children = []
        for child in (row["left"], row["right"]):
            if row["last_level"]:
                children.append(f"leaf {child} (class {tree.classes[tree.leaf_class_of(child)]})")
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
