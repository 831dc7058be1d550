"""Failed Great Expectations results in words for people: counts, rows and examples."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from miret_governance.governance.ensembles.encoding import UNSEEN_ADVICE

EXAMPLES = 5
"""Example rows and values quoted per failed expectation."""
DISTINCT_SHOWN = 10
"""Distinct values (classes, unseen categories) quoted per failed expectation."""


@dataclass
class Failure:
    """One failed expectation, in words for people.

    Attributes
    ----------
    expectation : str
        Great Expectations expectation type.
    column : str or None
        Column concerned (None for table-level expectations).
    message : str
        What is wrong, with counts and example values.
    """

    expectation: str
    column: str | None
    message: str


def _rows(result) -> str:
    index = result.get("partial_unexpected_index_list") or []
    more = ", ..." if result.get("unexpected_count", 0) > len(index) else ""
    return f"rows {', '.join(str(i) for i in index)}{more}" if index else ""


def _count(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


class Cells(Protocol):
    """The values of a validated batch that messages quote (pandas or Spark alike)."""

    def head(self, column: str, n: int) -> list:
        """The first ``n`` values of ``column``."""

    def distinct(self, column: str, leaving_out=()) -> list:
        """Up to :data:`DISTINCT_SHOWN` distinct non-missing values of ``column`` not in
        ``leaving_out``, the first in the order of their text."""

    def infinite(self, column: str) -> int:
        """How many values of ``column`` are infinite."""

    def value(self, column: str, row: int):
        """The value of ``column`` in row ``row``; None without such a column."""

    def type_name(self, observed: str) -> str:
        """GE's observed column type as pandas names it."""


def describe(run: dict, cells: Cells, raw: Cells | None, raw_units: bool = False) -> list[Failure]:
    """One Failure per unsuccessful expectation of one GE run on the batch ``cells``
    (``raw``: the same rows in raw units; ``raw_units``: the batch is in raw units)."""
    failures = []
    for item in run["results"]:
        if item["success"]:
            continue
        config = item["expectation_config"]
        kind, kwargs, result = config["type"], config["kwargs"], item.get("result", {})
        column = kwargs.get("column")
        error = item.get("exception_info", {}).get("exception_message")
        if error:
            message = f"{kind} on {column!r} could not run: {error}"
        elif kind == "expect_table_row_count_to_be_between":
            message = "the frame has no rows: give at least one row of data"
        elif kind == "expect_table_columns_to_match_set":
            mismatched = result.get("details", {}).get("mismatched", {})
            parts = []
            if mismatched.get("missing"):
                parts.append(f"missing columns {sorted(mismatched['missing'])}")
            if mismatched.get("unexpected"):
                parts.append(f"unexpected columns {sorted(mismatched['unexpected'])}")
            message = (
                f"the columns do not match the {len(kwargs['column_set'])} expected "
                f"(the ensemble's features, and the label if named): {'; '.join(parts)}"
            )
        elif kind == "expect_column_values_to_be_in_type_list":
            observed = cells.type_name(str(result.get("observed_value")))
            message = (
                f"column {column!r} has type {observed}, not numeric "
                f"(e.g. {cells.head(column, 3)})"
                + (": write True/False as 1/0" if observed in ("bool", "bool_") else "")
            )
        elif kind == "expect_column_values_to_not_be_null":
            message = _missing_message(column, result, config.get("meta") or {})
        elif kind == "expect_column_unique_value_count_to_be_between":
            classes = cells.distinct(column)
            k = kwargs["max_value"]
            needs = (
                "a binary label needs exactly two"
                if k == 2
                else f"the ensemble has {k} classes, so the label needs 2 to {k} of them"
            )
            found = result.get("observed_value")
            message = (
                f"label column {column!r} has {found} class{'' if found == 1 else 'es'} "
                f"{classes}; {needs}"
            )
        elif kind == "expect_column_distinct_values_to_be_in_set":
            message = (
                f"label column {column!r} has values "
                f"{sorted(_plain(result.get('partial_unexpected_list')), key=str)} outside "
                "the ensemble's "
                f"classes {_plain(kwargs['value_set'])}"
            )
        elif kind == "expect_column_values_to_be_in_set":
            seen = kwargs["value_set"]
            unseen = cells.distinct(column, leaving_out=seen)
            message = (
                f"column {column!r} has categories not seen in training: "
                f"{', '.join(map(str, unseen))} ({_count(result.get('unexpected_count', 0))}"
                f"{', ' + _rows(result) if _rows(result) else ''}); seen in training: "
                f"{', '.join(map(str, seen))}; {UNSEEN_ADVICE}"
            )
        elif kind == "expect_column_values_to_be_between" and raw_units:
            message = _raw_range_message(column, result, cells, kwargs)
        elif kind == "expect_column_values_to_be_between":
            message = _range_message(column, result, cells, raw)
        else:
            message = f"{kind} failed on {column!r}: {result}"
        failures.append(Failure(kind, column, message))
    return failures


def _missing_message(column, result, meta: dict) -> str:
    """Missing values in words, against the training data's share when it is known."""
    n = result.get("unexpected_count", 0)
    if meta.get("label"):
        rows = _rows(result)
        return (
            f"label column {column!r}: {_count(n)} without a label (null/NaN); every row "
            "needs one: label them or drop them" + (f" ({rows})" if rows else "")
        )
    head = (
        f"column {column!r}: {_count(n)} ({result.get('unexpected_percent', 0):.3g}%) with "
        "missing values (null/NaN)"
    )
    share = meta.get("training_missing_share")
    if share is None:
        return f"{head}; {_rows(result)}"
    if share == 0:
        return f"{head}, but the training data had none in this column; {_rows(result)}"
    tolerance = meta.get("missing_tolerance", 0.0)
    return (
        f"{head}, more than the training data's {100 * share:.3g}% plus the tolerance of "
        f"{100 * tolerance:.3g} points (at most {100 * min(1.0, share + tolerance):.3g}%); "
        f"{_rows(result)}"
    )


def _range_message(column, result, scaled, raw) -> str:
    n = result.get("unexpected_count", 0)
    examples = result.get("partial_unexpected_list") or []
    index = result.get("partial_unexpected_index_list") or []
    infinite = scaled.infinite(column)
    shown = []
    for position, value in zip(index, examples):
        text = f"{value:.4g}" if isinstance(value, (int, float)) else str(value)
        raw_value = raw.value(column, position) if np.isfinite(value) else None
        if raw_value is not None and raw_value != value:
            text += f" (raw {raw_value:.6g})"
        shown.append(text)
    what = f"{infinite} infinite, " if infinite else ""
    return (
        f"column {column!r}: {_count(n)} ({result.get('unexpected_percent', 0):.3g}%) "
        f"outside [0, 1] after the ensemble's normalization ({what}beyond the range it was "
        f"fitted on); e.g. {', '.join(shown)}; {_rows(result)}"
    )


def _raw_range_message(column, result, raw, kwargs) -> str:
    n = result.get("unexpected_count", 0)
    examples = ", ".join(f"{v:.6g}" for v in result.get("partial_unexpected_list") or [])
    infinite = raw.infinite(column)
    low, high = kwargs["min_value"], kwargs["max_value"]
    if high >= np.finfo(np.float64).max:
        where = "infinite (no training range is recorded, so values must be finite)"
    else:
        what = f"{infinite} infinite, " if infinite else ""
        where = f"outside the training range [{low:.6g}, {high:.6g}] ({what}e.g. {examples})"
    return (
        f"column {column!r}: {_count(n)} ({result.get('unexpected_percent', 0):.3g}%) "
        f"{where}; {_rows(result)}"
    )


def _plain(values) -> list:
    """Values as people write them (``0.5``, not ``np.float64(0.5)``)."""
    return [v.item() if isinstance(v, np.generic) else v for v in (values or [])]
