"""One applicant's path: how the surrogate tree decides a given row, in raw units.

A reviewer follows single rows through the surrogate: each split on the row's path as
the condition that held for it (``worst radius > 15.2``, or the oblique
``0.42·a + 0.1·b <= 3.2``) in the ensemble's raw input units, with the row's own value
of the condition's left side, then the surrogate's and the ensemble's answers.

- :func:`row_paths`: the path of every row given (``govern explain-row``).
- :func:`applicants`: what the reviewer page and the model card show of a holdout: one
  example row per leaf the rows reach (the row nearest the leaf's median) and every row
  where surrogate and ensemble disagree.
- :func:`feature_rows`, :func:`encoded_rows`: a file's rows checked, in the tree's
  features; for a pipeline that encodes categories, from its original columns (an
  unseen category refused by name).

The side a row takes is the tree's own (:meth:`SurrogateTree.decision_path`, in the
tree's normalized space), so a path always ends in the leaf that decided the row; the
raw-unit conditions and values are how :mod:`governance.miret.display` writes them.
A branch node without coefficients is no condition on the row and is not listed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from miret_governance.governance.ensembles.arrays import scaled
from miret_governance.governance.ensembles.encoding import NUMERIC, EncodingError
from miret_governance.governance.ensembles.native_categories import category_label
from miret_governance.governance.errors import GovernanceError, InvalidInputError
from miret_governance.governance.miret.tree.conditions import (
    format_number,
    negation,
    raw_hyperplanes,
    split_table,
)

SHOWN_DISAGREEMENTS = 50
"""Disagreeing rows the page and the card list; ``disagreements.csv`` holds them all."""
PATH_SEPARATOR = " \u2192 "


class RowsError(GovernanceError):
    """Rows that cannot be followed through the tree: missing columns, values that are
    not numbers, missing or infinite values, no rows. Exit code 2."""


@dataclass(frozen=True)
class Step:
    """One split on a row's path.

    Attributes
    ----------
    node : int
        Breadth-first position of the branch node.
    condition : str
        The split's condition (its ``yes`` branch), raw units.
    answer : str
        ``"yes"`` (the row meets ``condition``) or ``"no"``.
    holds : str
        The condition that held for the row: ``condition`` or its negation.
    value : float
        The row's value of the condition's left side (the feature, or the weighted sum
        of an oblique split, a score's value), raw units; a split on a categorical
        column: its encoded value (one-hot 0/1, ordinal code), NaN when the row has no
        category.
    terms : tuple of (str, float)
        The split's features and raw weights, full precision.
    score : governance.miret.conditions.Score or None
        The table that defines ``S<node>`` when ``condition`` is a score's.
    category : str or None
        A split on one categorical column: the row's category of that column (its
        original value); None for other splits or a row without a category.
    """

    node: int
    condition: str
    answer: str
    holds: str
    value: float
    terms: tuple = ()
    score: object = None
    category: str | None = None

    @property
    def value_text(self) -> str:
        """The row's value as shown: ``16.3``, its category (``obese``), or ``missing, by
        the rule for missing values`` where a missing value leaves it undefined."""
        if self.category is not None:
            return self.category
        if np.isnan(self.value):
            return "missing, by the rule for missing values"
        return format_number(self.value)

    @property
    def text(self) -> str:
        """``worst radius > 15.2 (row: 16.3)``, ``bmi_band in {obese} (row: obese)``."""
        return f"{self.holds} (row: {self.value_text})"


@dataclass(frozen=True)
class RowPath:
    """A row's path through the surrogate and both models' answers.

    Attributes
    ----------
    row : object
        The row's label (its number in the data file, first data row 0).
    steps : tuple of Step
        Root first.
    leaf : int
        Breadth-first position of the leaf reached.
    surrogate, ensemble : str
        Class names of the surrogate's and the ensemble's answers.
    agrees : bool
    values : dict
        Feature -> the row's raw value, in the tree's feature order; with an encoding,
        original column -> its value (a category, None when the row has none).
    """

    row: object
    steps: tuple
    leaf: int
    surrogate: str
    ensemble: str
    agrees: bool
    values: dict

    @property
    def path_text(self) -> str:
        """The steps joined by arrows (``always`` when no split decides the row)."""
        return PATH_SEPARATOR.join(step.text for step in self.steps) or "always"

    def to_dict(self) -> dict:
        """Plain JSON: row, steps (node, condition, answer, holds, value, terms as
        ``[feature, weight]``, category), leaf, answers."""
        return {
            "row": self.row,
            "steps": [
                {
                    "node": s.node,
                    "condition": s.condition,
                    "answer": s.answer,
                    "holds": s.holds,
                    "value": s.value,
                    "terms": [list(term) for term in s.terms],
                    "category": s.category,
                }
                for s in self.steps
            ],
            "leaf": self.leaf,
            "surrogate": self.surrogate,
            "ensemble": self.ensemble,
            "agrees": self.agrees,
        }


@dataclass(frozen=True)
class Applicants:
    """The rows a reviewer reads on the page and the card.

    Attributes
    ----------
    examples : tuple of RowPath
        One per leaf the rows reach, in the rules' order (``yes`` side first): the row
        nearest the median of the leaf's rows (normalized units; the first on a tie).
    leaf_rows : dict
        Leaf position -> rows of ``examples``' leaves.
    disagreements : tuple of RowPath
        Every row where surrogate and ensemble disagree, in row order.
    n_rows : int
    """

    examples: tuple
    leaf_rows: dict
    disagreements: tuple
    n_rows: int

    @property
    def shown_disagreements(self) -> tuple:
        """The first :data:`SHOWN_DISAGREEMENTS` disagreements."""
        return self.disagreements[:SHOWN_DISAGREEMENTS]

    @property
    def scores(self) -> tuple:
        """The score tables the shown paths go through (:func:`path_scores`)."""
        return path_scores(self.examples + self.shown_disagreements)

    @property
    def more_disagreements(self) -> int:
        """Disagreements beyond those shown."""
        return max(0, len(self.disagreements) - SHOWN_DISAGREEMENTS)

    def disagreement_table(self) -> pd.DataFrame:
        """Every disagreement as one row: ``row``, ``ensemble``, ``surrogate``, ``leaf``,
        ``path``, then the row's raw feature values, a pipeline's or native categorical
        columns as the original columns with their categories (``disagreements.csv``)."""
        columns = ["row", "ensemble", "surrogate", "leaf", "path"]
        records = [
            {
                "row": p.row,
                "ensemble": p.ensemble,
                "surrogate": p.surrogate,
                "leaf": p.leaf,
                "path": p.path_text,
                **p.values,
            }
            for p in self.disagreements
        ]
        if not records:
            return pd.DataFrame(columns=columns)
        return pd.DataFrame.from_records(records)


def path_scores(paths) -> tuple:
    """The distinct scores (:class:`governance.miret.conditions.Score`) on ``paths``, by
    node: what a reader needs to read their ``S<node>`` conditions."""
    scores = {s.node: s.score for p in paths for s in p.steps if s.score is not None}
    return tuple(scores[node] for node in sorted(scores))


def _require(frame: pd.DataFrame, names: list, source: str, kind: str, every: str) -> None:
    """Raise :class:`RowsError` when ``frame`` lacks any of the columns ``names`` (named
    as ``kind``, the advice asking for every ``every`` was trained on) or has no rows."""
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise RowsError(
            f"{source} lacks {kind} {missing}; give every {every} was trained on: "
            f"{', '.join(names)}"
        )
    if len(frame) == 0:
        raise RowsError(f"{source} has no rows; give at least one row to follow")


def feature_rows(frame: pd.DataFrame, feature_names, source="the rows") -> pd.DataFrame:
    """The feature columns of ``frame`` as numbers (NaN where missing), in
    ``feature_names`` order.

    Raises
    ------
    RowsError
        Naming the missing columns, the columns that hold something other than numbers
        (with the first such value), the columns with infinite values, or an empty file.
    """
    names = [str(n) for n in feature_names]
    _require(frame, names, source, "the feature columns", "feature the model")
    rows = frame[names]
    problems = []
    for name in names:
        column = rows[name]
        numbers = pd.to_numeric(column, errors="coerce")
        wrong = numbers.isna() & column.notna()
        if wrong.any():
            row = wrong.idxmax()
            problems.append(f"{name!r} holds text (row {row}: {column[row]!r})")
        elif np.isinf(numbers.to_numpy(dtype=np.float64)).any():
            bad = numbers.index[np.isinf(numbers.to_numpy(dtype=np.float64))]
            problems.append(f"{name!r} has infinite values (rows {bad[:5].tolist()})")
    if problems:
        raise RowsError(
            f"{source}: the columns must hold numbers in raw units: {'; '.join(problems)}"
        )
    return rows.apply(pd.to_numeric).astype(np.float64)


def encoded_rows(frame: pd.DataFrame, encoding, transformer, source="the rows") -> pd.DataFrame:
    """Rows in a pipeline's original columns (category strings and raw numbers) as the
    encoded columns its ``ColumnTransformer`` feeds the ensemble
    (:meth:`governance.encoding.Encoding.encode`).

    Parameters
    ----------
    frame : pandas.DataFrame
        Every input column of the transformer (others, such as a label, are ignored).
    encoding : governance.encoding.Encoding
    transformer : the fitted ColumnTransformer ``encoding`` was read from.
    source : str
        How messages name the rows (a file name).

    Raises
    ------
    RowsError
        Missing columns, numeric columns holding text or infinite values, no rows, or
        a category not seen in training: the column, the value and the categories seen
        in training are named, and the value is never mapped.
    """
    _require(frame, list(encoding.inputs), source, "the columns", "column the model's pipeline")
    numeric = [c for c in encoding.inputs if c not in encoding.seen]
    checked = frame[list(encoding.inputs)].copy()
    checked[numeric] = feature_rows(frame, numeric, source)
    try:
        return encoding.encode(transformer, checked)
    except EncodingError as error:
        raise RowsError(f"{source}: {error}") from None
    except ValueError as error:  # the encoder's own refusal, e.g. a missing category
        raise RowsError(f"{source}: the pipeline cannot encode the rows ({error})") from None


def class_names_of(tree, class_names) -> tuple:
    """The names of ``tree.classes``: ``class_names`` checked, or the labels as text."""
    names = tuple(str(c) for c in (tree.classes if class_names is None else class_names))
    if len(names) != tree.classes.size:
        raise InvalidInputError(f"class_names needs {tree.classes.size} names, got {len(names)}")
    return names


class _Router:
    """The tree, its splits in raw units and the class names, ready to follow rows."""

    def __init__(self, tree, scaler, class_names, encoding=None):
        self.tree, self.scaler, self.encoding = tree, scaler, encoding
        self.splits = split_table(tree, scaler=scaler, encoding=encoding)
        self.coef = raw_hyperplanes(tree, scaler)[0]
        if encoding is not None:  # scaled numeric columns of the pipeline in raw units
            self.coef = np.array([encoding.raw_terms(row, 0.0)[0] for row in self.coef])
        self.names = class_names_of(tree, class_names)

    def yes_first(self) -> list:
        """Leaf positions in the rules' order: at every split the ``yes`` side first."""

        def leaves(t: int) -> list:
            if t >= self.tree.n_branch_nodes:
                return [t]
            left, right = leaves(2 * t + 1), leaves(2 * t + 2)
            return right + left if self.splits[t]["yes"] == "right" else left + right

        return leaves(0)

    def _categorical(self, used) -> bool:
        """The split reads one encoded column of a categorical original column."""
        return (
            self.encoding is not None
            and used.size == 1
            and self.encoding.columns[used[0]].kind != NUMERIC
        )

    def _category(self, used, values: dict):
        """The row's category (text) of a split on one categorical column, else None."""
        if not self._categorical(used):
            return None
        category = values[self.encoding.columns[used[0]].column]
        return None if category is None else category_label(category)

    def to_tree(self, raw: np.ndarray) -> np.ndarray:
        return raw if self.scaler is None else scaled(self.scaler, raw)

    def name(self, label) -> str:
        return self.names[int(np.argmax(label == self.tree.classes))]

    def path(self, row, raw: np.ndarray, x_tree: np.ndarray, ensemble_label) -> RowPath:
        steps = []
        if self.encoding is not None:
            raw = self.encoding.raw_values(raw)
            values = self.encoding.original_values(raw)
        else:
            values = dict(zip(self.tree.feature_names, map(float, raw), strict=True))
        for node, _, side in self.tree.decision_path(x_tree):
            split = self.splits[node]
            if split["condition"] is None:
                continue
            used = np.flatnonzero(self.tree.coef[node])
            # over the split's own features: another one missing leaves it defined
            value = float(raw[used[0]] if used.size == 1 else self.coef[node][used] @ raw[used])
            category = self._category(used, values)
            if category is None and self._categorical(used):
                value = float("nan")  # no category: the model's rule for a missing one
            answer = "yes" if side == split["yes"] else "no"
            holds = split["condition"] if answer == "yes" else negation(split["condition"])
            steps.append(
                Step(
                    node,
                    split["condition"],
                    answer,
                    holds,
                    value,
                    tuple(split["terms"]),
                    split["score"],
                    category,
                )
            )
        leaf = int(self.tree.apply(x_tree[None, :])[0])
        surrogate = self.tree.classes[self.tree.leaf_class_of(leaf)]
        return RowPath(
            row,
            tuple(steps),
            leaf,
            self.name(surrogate),
            self.name(ensemble_label),
            bool(surrogate == ensemble_label),
            values,
        )


def _prepared(tree, rows, ensemble_labels):
    rows = feature_rows(rows, tree.feature_names)
    labels = np.asarray(ensemble_labels)
    if labels.shape != (len(rows),):
        raise InvalidInputError(
            f"give one ensemble label per row: {labels.shape} for {len(rows)} rows"
        )
    return rows, labels


def row_paths(tree, rows, ensemble_labels, *, scaler=None, class_names=None, encoding=None) -> list:
    """The path of every row of ``rows`` through ``tree``.

    Parameters
    ----------
    tree : governance.miret.tree.SurrogateTree
    rows : pandas.DataFrame
        The tree's feature columns in raw units (the ensemble's input units); the index
        labels the rows.
    ensemble_labels : array-like of shape (n,)
        The ensemble's answers, in ``tree.classes``.
    scaler : fitted MinMaxScaler, optional
        Raw units to the tree's normalized space (the surrogate's ``input_scaler_``).
    class_names : sequence of str, optional
        Names of ``tree.classes`` (default: the classes as text).
    encoding : governance.encoding.Encoding, optional
        The tree's features are a pipeline's encoded columns: conditions name the
        original columns and categories, and values are in raw units.

    Returns
    -------
    list of RowPath
    """
    rows, labels = _prepared(tree, rows, ensemble_labels)
    router = _Router(tree, scaler, class_names, encoding)
    raw = rows.to_numpy()
    X = router.to_tree(raw)
    return [router.path(row, raw[i], X[i], labels[i]) for i, row in enumerate(rows.index.tolist())]


def applicants(
    tree, rows, ensemble_labels, *, scaler=None, class_names=None, encoding=None
) -> Applicants:
    """The example rows (one per reached leaf) and every disagreement of ``rows``.

    Parameters are those of :func:`row_paths` (``rows`` normally the holdout); only the
    rows shown are followed one by one.
    """
    rows, labels = _prepared(tree, rows, ensemble_labels)
    router = _Router(tree, scaler, class_names, encoding)
    raw = rows.to_numpy()
    X = router.to_tree(raw)
    leaves = tree.apply(X)
    ids = rows.index.tolist()

    def follow(i: int) -> RowPath:
        return router.path(ids[i], raw[i], X[i], labels[i])

    examples, leaf_rows = [], {}
    for leaf in sorted(np.unique(leaves).tolist(), key=router.yes_first().index):
        members = np.flatnonzero(leaves == leaf)
        centre = np.median(X[members], axis=0)
        distance = np.sum((X[members] - centre) ** 2, axis=1)
        examples.append(follow(int(members[np.argmin(distance)])))
        leaf_rows[int(leaf)] = int(members.size)
    disagree = np.flatnonzero(tree.predict(X) != labels)
    return Applicants(
        tuple(examples), leaf_rows, tuple(follow(int(i)) for i in disagree), len(rows)
    )
