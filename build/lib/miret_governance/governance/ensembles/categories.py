"""Routing of native categorical splits (LightGBM's and HistGradientBoosting's), for
:meth:`governance.ensemble.Ensemble.apply`.

A categorical node reads its feature as the code ``trunc(x)`` and looks it up in a table
of the node's answers: left, right, or "missing" (the node's missing-value direction).
A NaN takes the missing direction; a negative value and a code the node does not know
go where :attr:`governance.trees.Tree.category_unknown` says (the table's last column):
LightGBM sends them right (``trunc(x) < 0`` is negative), HistGradientBoosting by the
missing direction and XGBoost left (``x < 0`` is negative for both).

In a one-hot view (:mod:`governance.native_categories`) a categorical column is a group
of indicator columns, one per code in code order; :func:`code_matrix` turns the group
back into its code (NaN where no indicator is 1: a missing or unseen category).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from miret_governance.governance.ensembles.trees import MalformedModelError

RIGHT, LEFT, MISSING = 0, 1, 2


@dataclass(frozen=True)
class CategoryTable:
    """The categorical nodes of an ensemble's padded trees.

    Attributes
    ----------
    row : ndarray of int, shape (n_trees, max_nodes)
        Row of ``answer`` of each categorical node, ``-1`` at every other node.
    answer : ndarray of int8, shape (n_categorical_nodes, n_codes + 1)
        :data:`LEFT`, :data:`RIGHT` or :data:`MISSING` per code; the last column answers
        every code ``>= n_codes``.
    missing_left : ndarray of bool
        Where a missing value goes at each categorical node.
    truncates_negative : ndarray of bool
        True where ``trunc(x) < 0`` is negative (LightGBM, every code known: ``-0.5`` is
        code 0), False where ``x < 0`` is (HistGradientBoosting, XGBoost).
    """

    row: np.ndarray
    answer: np.ndarray
    missing_left: np.ndarray
    truncates_negative: np.ndarray


def category_table(trees, width: int) -> CategoryTable | None:
    """The :class:`CategoryTable` of ``trees`` padded to ``width`` nodes, None when no
    tree has a categorical node."""
    nodes = [
        (e, node) for e, tree in enumerate(trees) for node in np.flatnonzero(tree.is_categorical)
    ]
    if not nodes:
        return None
    highest = -1
    for e, node in nodes:
        for codes in (trees[e].category_left[node], trees[e].category_known[node]):
            if codes is not None:
                highest = max(highest, int(codes.max(initial=-1)))
    n_codes = highest + 1
    row = np.full((len(trees), width), -1, dtype=np.int64)
    answer = np.zeros((len(nodes), n_codes + 1), dtype=np.int8)
    missing_left = np.zeros(len(nodes), dtype=bool)
    truncates = np.zeros(len(nodes), dtype=bool)
    for index, (e, node) in enumerate(nodes):
        tree = trees[e]
        row[e, node] = index
        known = tree.category_known[node]
        answer[index] = tree.category_unknown[node]  # RIGHT, LEFT, MISSING: 0, 1, 2
        if known is None:
            answer[index, :-1] = RIGHT
            truncates[index] = True
        else:
            answer[index, known] = RIGHT
        answer[index, tree.category_left[node]] = LEFT
        missing_left[index] = tree.missing_left[node]
    return CategoryTable(row, answer, missing_left, truncates)


def categorical_left(table: CategoryTable, at: np.ndarray, x: np.ndarray, go_left: np.ndarray):
    """``go_left`` with the answers of the categorical nodes filled in.

    Parameters
    ----------
    table : CategoryTable
    at : ndarray of int, shape (n, n_trees)
        ``table.row`` at each sample's current node.
    x, go_left : ndarray, shape (n, n_trees)
        The node's feature value of each sample, and the numeric answer.
    """
    categorical = at >= 0
    if not categorical.any():
        return go_left
    rows, values = at[categorical], x[categorical]
    last = table.answer.shape[1] - 1
    with np.errstate(invalid="ignore"):
        code = np.trunc(values)
        negative = np.where(table.truncates_negative[rows], code < 0, values < 0)
        missing = np.isnan(values)
        code = np.where(missing | negative | ~(code < last), last, code).astype(np.int64)
    answer = np.where(missing, MISSING, table.answer[rows, code])
    left = np.where(answer == MISSING, table.missing_left[rows], answer == LEFT)
    go_left = go_left.copy()
    go_left[categorical] = left
    return go_left


def check_groups(groups, n_features: int) -> tuple:
    """One-hot groups ``(start, width)`` checked: inside the features, disjoint."""
    checked, covered = [], np.zeros(n_features, dtype=bool)
    for group in groups:
        start, width = (int(v) for v in group)
        if width < 1 or start < 0 or start + width > n_features:
            raise MalformedModelError(
                f"the one-hot group ({start}, {width}) lies outside the {n_features} features"
            )
        if covered[start : start + width].any():
            raise MalformedModelError(f"the one-hot group ({start}, {width}) overlaps another")
        covered[start : start + width] = True
        checked.append((start, width))
    return tuple(checked)


def code_matrix(X: np.ndarray, groups) -> np.ndarray:
    """``X`` with each one-hot group's first column replaced by the group's code: the
    position of its first indicator above 0.5, NaN when none is (missing or unseen)."""
    if not groups:
        return X
    X = X.copy()
    for start, width in groups:
        hot = X[:, start : start + width] > 0.5
        code = hot.argmax(axis=1).astype(np.float64)
        code[~hot.any(axis=1)] = np.nan
        X[:, start] = code
    return X
