"""Conditions for people: a surrogate tree's splits in raw units, one convention.

Every condition reads "value <= threshold" (or ``<``): its ``yes`` branch takes the rows
that meet it and is drawn on the left, so lower values go left, as in the VITE tables. A
one-feature split is solved for the feature (``worst perimeter < 115.4``); a split of up
to :data:`MAX_INLINE_TERMS` terms reads ``0.42·a + 0.1·b <= 3.2``; a longer one is a
*score* (``S0 <= 3.2``) defined by a table of its terms: weight and the range of the
term's contribution over the data. Weights and contributions have 3 significant digits,
thresholds 4. The text is plain; each output escapes it for its format.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from miret_governance.governance.errors import InvalidInputError

SIGNIFICANT = 4
"""Significant digits of thresholds and values."""
WEIGHT_DIGITS = 3
"""Significant digits of weights (coefficients) and contributions."""
MAX_INLINE_TERMS = 3
"""Longest split written as one inequality; a longer one is a score table."""
PURITY_NOTE = "purity: share of a leaf's rows to which the ensemble gives the leaf's class"
CONVENTION_NOTE = (
    "each condition reads value <= threshold (or <): rows that meet it take the yes "
    "branch, drawn on the left, so lower values go left"
)


def format_number(value: float, digits: int = SIGNIFICANT) -> str:
    """A number with ``digits`` significant digits: ``0`` for zero, no exponent between
    ``10**digits`` and a million (``12346``, not ``1.235e+04``)."""
    if value == 0:
        return "0"
    if 10**digits <= abs(value) < 1e6:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


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
        raise InvalidInputError(
            f"scaler must be a fitted MinMaxScaler over the tree's {tree.n_features} "
            f"features (scale_ and min_ of that length)"
        )
    return coef * scale, intercept + coef @ shift


def linear_text(terms, rhs: float, op: str = "<=") -> str:
    """``c1·x1 + c2·x2 <op> rhs``: weights at 3 significant digits, ``rhs`` at 4."""
    parts = []
    for k, (name, coef) in enumerate(terms):
        magnitude = format_number(abs(coef), WEIGHT_DIGITS)
        term = name if magnitude == "1" else f"{magnitude}·{name}"
        if k == 0:
            parts.append(f"-{term}" if coef < 0 else term)
        else:
            parts.append(f"{'-' if coef < 0 else '+'} {term}")
    return f"{' '.join(parts)} {op} {format_number(rhs + 0.0)}"


_NEGATED = {"<=": ">", "<": ">="}
_OPERATORS = {"+", "-", "<=", "<", ">", ">=", "and"}
NO_BREAK = "\u00a0"


def glued(condition: str) -> str:
    """The condition with no-break spaces inside each term: a weight and its feature
    name, an operator and what follows it. A line then breaks only before ``+``, ``-``,
    a comparison or ``and``, never inside a feature name."""
    tokens = []
    for word in condition.split(" "):
        if word in _OPERATORS or not tokens:
            tokens.append(word)
        else:
            tokens[-1] += NO_BREAK + word
    return " ".join(tokens)


def negation(condition: str) -> str:
    """The condition of the ``no`` branch (``x <= c`` becomes ``x > c``, ``x < c``
    becomes ``x >= c``)."""
    for toggle in ((" not in {", " in {"), (" in {", " not in {")):
        head, sep, tail = condition.partition(toggle[0])
        if sep and tail.endswith("}"):  # a category set (governance.encoding)
            return f"{head}{toggle[1]}{tail}"
    for op, negated in _NEGATED.items():
        head, sep, tail = condition.rpartition(f" {op} ")
        if sep:
            return f"{head} {negated} {tail}"
    raise InvalidInputError(f"not a condition: {condition!r}")


@dataclass(frozen=True)
class Score:
    """A split of more than :data:`MAX_INLINE_TERMS` terms: ``S<node> <= threshold``,
    where the score ``S<node>`` is the sum of its terms (raw units).

    Attributes
    ----------
    name : str
        ``S`` and the node's breadth-first position, e.g. ``S0``.
    node : int
    terms : tuple of (str, float, float or None, float or None)
        ``(feature, weight, low, high)``: ``low``/``high`` bound the term's contribution
        ``weight · feature`` over the data's range (None when the range is unknown);
        the widest contribution first.
    threshold : float
    """

    name: str
    node: int
    terms: tuple
    threshold: float

    @property
    def condition(self) -> str:
        return f"{self.name} <= {format_number(self.threshold + 0.0)}"

    def rows(self) -> list[dict]:
        """One dict per term: ``feature``, ``weight`` and ``contribution`` as text."""
        return [
            {
                "feature": feature,
                "weight": format_number(weight, WEIGHT_DIGITS),
                "contribution": "-"
                if low is None
                else f"{format_number(low + 0.0, WEIGHT_DIGITS)} to "
                f"{format_number(high + 0.0, WEIGHT_DIGITS)}",
            }
            for feature, weight, low, high in self.terms
        ]

    @property
    def heading(self) -> str:
        return (
            f"{self.name} (node {self.node}) = sum of {len(self.terms)} terms; "
            f"yes when {self.condition}"
        )

    def text(self) -> str:
        """The score as a plain-text table (heading, then one aligned line per term)."""
        rows = [
            {"feature": "term", "weight": "weight", "contribution": "contribution over the data"}
        ]
        rows += self.rows()
        wide = [max(len(r[key]) for r in rows) for key in ("feature", "weight")]
        lines = [self.heading]
        for r in rows:
            lines.append(
                f"  {r['feature']:<{wide[0]}}  {r['weight']:>{wide[1]}}  {r['contribution']}"
            )
        return "\n".join(lines)


def _score(node: int, terms, rhs: float, data_range) -> Score:
    rows = []
    for name, weight, j in terms:
        low = high = None
        if data_range is not None:
            low, high = sorted((weight * data_range[0][j], weight * data_range[1][j]))
        rows.append((name, weight, low, high))
    if data_range is not None:
        rows.sort(key=lambda r: r[3] - r[2], reverse=True)
    return Score(f"S{node}", node, tuple(rows), rhs)


def _data_range(scaler, data_range, n_features: int):
    """(low, high) arrays of every feature in raw units, or None."""
    if data_range is None and scaler is not None:
        data_range = (getattr(scaler, "data_min_", None), getattr(scaler, "data_max_", None))
    if data_range is None:
        return None
    low, high = (np.asarray(v, dtype=np.float64) for v in data_range)
    if low.shape != (n_features,) or high.shape != (n_features,):
        raise InvalidInputError(
            f"the data range needs a minimum and a maximum for each of the tree's "
            f"{n_features} features"
        )
    return low, high


def split_table(
    tree, feature_names=None, scaler=None, data_range=None, encoding=None
) -> list[dict]:
    """The split of every branch node of the complete tree, breadth-first.

    Parameters
    ----------
    tree : governance.miret.tree.SurrogateTree
    feature_names : sequence of str, optional
    scaler : fitted MinMaxScaler, optional
        Conditions in raw units; its ``data_min_`` and ``data_max_`` are the data range
        of the score tables unless ``data_range`` is given.
    data_range : (array-like, array-like), optional
        Minimum and maximum of every feature in the conditions' units.
    encoding : governance.encoding.Encoding, optional
        The tree's features are these encoded columns: conditions name the original
        columns and categories (``purpose in {car}``), scaled numeric columns in raw units.

    Returns
    -------
    list of dict
        Keys ``node``, ``terms`` (``(name, coef)`` of nonzero raw coefficients, full
        precision; with ``encoding`` named as :meth:`Encoding.term` names them),
        ``intercept`` (raw), ``condition`` (plain text of the ``yes`` branch, or None
        without coefficients), ``yes`` (``"left"`` or ``"right"``: the
        child the ``yes`` branch is) and ``score`` (a :class:`Score`, or None when the
        split has at most :data:`MAX_INLINE_TERMS` terms), ``missing`` (where a row
        missing one of the split's features goes, e.g. ``missing income -> yes branch``,
        with ``encoding`` naming original columns; None without coefficients or for a
        tree without a rule for missing values).
    """
    names = tree.feature_names if feature_names is None else tuple(map(str, feature_names))
    if len(names) != tree.n_features:
        raise InvalidInputError(
            f"feature_names has {len(names)} names but the tree has {tree.n_features} features"
        )
    coef, intercept = raw_hyperplanes(tree, scaler)
    span = _data_range(scaler, data_range, tree.n_features)
    if encoding is not None:
        coef, intercept = coef.copy(), np.array(intercept, dtype=np.float64)
        for t in range(tree.n_branch_nodes):
            coef[t], intercept[t] = encoding.raw_terms(coef[t], intercept[t])
        span = None if span is None else encoding.raw_range(*span)
    normalized = np.asarray(tree.coef)
    table = []
    for t in range(tree.n_branch_nodes):
        used = np.flatnonzero(normalized[t])
        terms = [(names[j], float(coef[t, j])) for j in used]
        rhs = -float(intercept[t])
        condition, yes, score = None, "left", None
        if len(terms) == 1:  # solved for the feature: lower values on the yes side
            name, weight = terms[0]
            op, yes = ("<=", "left") if weight > 0 else ("<", "right")
            if encoding is not None:
                condition = encoding.condition(name, rhs / weight + 0.0, op)
            else:
                condition = f"{name} {op} {format_number(rhs / weight + 0.0)}"
        if encoding is not None:  # the terms in original columns too
            terms = [(encoding.term(name), weight) for name, weight in terms]
        if len(terms) > MAX_INLINE_TERMS:
            score = _score(t, [(*term, j) for term, j in zip(terms, used, strict=True)], rhs, span)
            condition = score.condition
        elif len(terms) > 1:
            condition = linear_text(terms, rhs)
        table.append(
            {
                "node": t,
                "terms": terms,
                "intercept": float(intercept[t]),
                "condition": condition,
                "yes": yes,
                "score": score,
                "missing": missing_text(tree, t, _missing_names(names, used, encoding), yes),
            }
        )
    return table


def _missing_names(names, used, encoding) -> list:
    """The columns a row can miss at a split: the features ``used``, or with an
    ``encoding`` the distinct original columns of those that can hold a missing value
    (``income``, not ``num__income``). A one-hot column never does (the encoder writes
    0 or 1 for a missing category too), so such a row follows the split's condition."""
    if encoding is None:
        return [names[j] for j in used]
    columns = [encoding.column(names[j]) for j in used]
    # "one-hot" is governance.encoding.ONE_HOT (that module imports this one)
    return list(dict.fromkeys(c.column for c in columns if c.kind != "one-hot"))


def missing_text(tree, node: int, features, yes: str) -> str | None:
    """Where node ``node`` sends a row missing one of ``features`` (its features with
    a nonzero coefficient): ``missing a or b -> no branch``; None without a rule."""
    if tree.missing_left is None or not features:
        return None
    side = "left" if tree.missing_left[node] else "right"
    return f"missing {' or '.join(features)} -> {'yes' if side == yes else 'no'} branch"
