"""Great Expectations checks of the inputs an ensemble is explained or scored on.

Every feature must lie in the range the ensemble was trained on: the data range of a
recorded MinMaxScaler (the ensemble's own, or the one an explain run learned from the
training data and stored with the surrogate), checked in raw units; with only the
ensemble's own scaler, the normalized values must lie in ``[0, 1]``.

Validation runs in two stages, both as Great Expectations suites in an ephemeral context:

1. *structure*, on the frame as given: at least one row, the exact column set (the
   features, plus the label column when one is named), numeric feature types, missing
   values (null/NaN) no more often than in the training data, and a label with values
   among the ensemble's classes only (both of a binary ensemble's, at least two of
   ``k > 2``);
2. *range*, only when the structure is sound (a frame with missing or string columns
   cannot be normalized): every normalized feature in ``[0, 1]``. Infinite raw values
   are carried through the normalization as infinities and reported as such.

Missing values: ``expect_column_values_to_not_be_null`` with ``mostly`` one minus the
share allowed (the training share in its ``meta``, see ``training_missing``); the range
expectations skip them.

The suites are built and run by :mod:`governance.expectation_suites`; a Spark DataFrame
runs them through GE's Spark datasource (:mod:`governance.data.spark.validation`), with
the same report. Unexpected examples are quoted in row order; a label's unexpected
classes sorted by their text (Spark's distinct values come in no order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from miret_governance.governance.data import expectation_suites as suites
from miret_governance.governance.data.spark.frames import is_spark_frame
from miret_governance.governance.data.tables import check_labels
from miret_governance.governance.data.validation_messages import (
    DISTINCT_SHOWN,
    Failure,
    describe,
)
from miret_governance.governance.ensembles.encoding import encoding_of
from miret_governance.governance.errors import InvalidInputError, InvalidTypeError

MISSING_TOLERANCE = 0.05
"""How much larger than in training a column's share of missing values may be."""
_ROUND_OFF = 1e-9


@dataclass
class ValidationReport:
    """Outcome of :func:`validate_inputs`.

    Attributes
    ----------
    success : bool
        True when every expectation passed (within ``mostly``).
    frame : DataFrame or None
        The features in the ensemble's order, followed by the label column when one was
        named; None when the columns do not match the ensemble's, or on Spark.
    normalized : ndarray or None
        The features after the ensemble's preprocessing, shape ``(n, n_features)``;
        None when the structure checks failed, or on Spark.
    failures : list of Failure
    mostly : float
    n_rows : int
    ignored_columns : list of str
        Columns of the file that are neither a feature nor the label, left out before
        validating (``govern validate`` and explain read a file alike).
    """

    success: bool
    results: dict
    frame: pd.DataFrame | None
    normalized: np.ndarray | None
    failures: list = field(default_factory=list)
    mostly: float = 1.0
    n_rows: int = 0
    ignored_columns: list = field(default_factory=list)

    def to_json(self) -> dict:
        """Great Expectations' validation result (JSON-serializable dict).

        The results of both stages are merged into one result with GE's keys
        (``success``, ``results``, ``statistics``, ``suite_name``, ``meta``); each
        expectation's ``batch_id`` tells whether it ran on the raw or the normalized
        batch.
        """
        return self.results

    def summary(self) -> str:
        """A short account for people: which columns failed, how many rows, examples."""
        stats = self.results["statistics"]
        head = (
            f"Input validation {'passed' if self.success else 'FAILED'}: "
            f"{stats['successful_expectations']} of {stats['evaluated_expectations']} "
            f"expectations met on {self.n_rows} rows (mostly={self.mostly:g})."
        )
        lines = [head] + [f"  - {failure.message}" for failure in self.failures]
        if self.ignored_columns:
            lines.append(f"  (not used by the model, not checked: {self.ignored_columns})")
        if not self.success:
            lines.append(
                "Fix the data (or the model's feature schema): the columns must be the "
                "ensemble's numeric features, finite, within the range the ensemble was "
                "fitted on, and missing values no more often than in the training data."
            )
        return "\n".join(lines)


def raw_columns(ensemble) -> list[str]:
    """Columns an input frame must have: the ensemble pipeline's input features."""
    names = getattr(ensemble.preprocessor, "feature_names_in_", None)
    return [str(n) for n in (names if names is not None else ensemble.feature_names)]


def model_columns(frame: pd.DataFrame, ensemble, label: str | None = None):
    """``(used, ignored)``: ``frame`` with only the ensemble's input columns (and
    ``label``) that it holds, in that order, and the names of its other columns; explain
    and ``govern validate`` validate ``used``, so both read a file alike."""
    wanted = raw_columns(ensemble) + ([label] if label else [])
    used = frame[[c for c in wanted if c in frame.columns]]
    return used, [str(c) for c in frame.columns if c not in wanted]


def missing_shares(frame: pd.DataFrame, columns) -> dict:
    """Share of the rows of ``frame`` missing each of ``columns`` (null or NaN), the
    ``training_missing`` reference of :func:`validate_inputs`."""
    return {str(c): float(frame[c].isna().mean()) if len(frame) else 0.0 for c in columns}


def validate_inputs(
    frame,
    ensemble,
    label: str | None = None,
    mostly: float = 1.0,
    *,
    training_range=None,
    training_missing=None,
    missing_tolerance: float = MISSING_TOLERANCE,
):
    """Validate a frame of inputs against an ensemble's feature schema.

    Parameters
    ----------
    frame : DataFrame or pyspark.sql.DataFrame
        Raw inputs (the ensemble pipeline's own input units). Columns in another order
        are accepted and reordered. A Spark DataFrame is validated in Spark
        (:mod:`governance.data.spark.validation`) with the same suites and messages.
    ensemble : governance.ensemble.Ensemble
    label : str, optional
        Name of a label column allowed in the frame; its values must be the ensemble's
        classes: both of a binary ensemble's, at least two of ``k > 2``.
    mostly : float
        Fraction of rows that must meet each null and range expectation (GE's
        ``mostly``): 1.0 (strict, the default) for explaining, lower for scoring data.
    training_range : MinMaxScaler, optional
        Fitted on the raw training features (its ``data_min_``/``data_max_``, and
        ``feature_names_in_`` when set, name the recorded range), e.g. the surrogate's
        ``input_scaler_``. Raw features must lie within it. Without it, the
        ensemble's own MinMaxScaler defines the range (normalized values in
        ``[0, 1]``); without either, features must only be finite.
    training_missing : mapping of str to float, optional
        Share of the training rows missing each column (:func:`missing_shares` of the
        training frame). A column may miss at most that share plus
        ``missing_tolerance`` of its rows; one complete in training (or absent from the
        mapping) must be complete. None: every column must be complete.
    missing_tolerance : float
        Allowed excess of a column's missing share over its training share.

    Returns
    -------
    ValidationReport
    """
    on_spark = is_spark_frame(frame)
    if not (on_spark or isinstance(frame, pd.DataFrame)):
        raise InvalidTypeError(
            f"validate_inputs needs a pandas DataFrame (or a Spark one) with named columns, got "
            f"{type(frame).__name__}; build one with pd.DataFrame(X, columns=feature_names)"
        )
    if not 0.0 < float(mostly) <= 1.0:
        raise InvalidInputError(f"mostly must be in (0, 1], got {mostly}")
    if not 0.0 <= float(missing_tolerance) <= 1.0:
        raise InvalidInputError(f"missing_tolerance must be in [0, 1], got {missing_tolerance}")
    if on_spark:
        from miret_governance.governance.data.spark.validation import spark_rows

        rows = spark_rows(frame, normalized_inputs)
    else:
        rows = PandasRows(frame.reset_index(drop=True).rename(columns=str))
    repeated = _duplicate_names(rows.columns)
    if repeated:
        raise InvalidInputError(
            f"duplicate column names {repeated}: every column needs a unique name; "
            "rename or drop the duplicates"
        )
    return _validate(
        rows,
        ensemble,
        label,
        float(mostly),
        training_range,
        training_missing,
        float(missing_tolerance),
    )


_BROKEN_STRUCTURE = (
    "expect_table_columns_to_match_set",
    "expect_table_row_count_to_be_between",
    "expect_column_values_to_be_in_type_list",
)
"""Failures after which the frame cannot be normalized (no range stage)."""


def _validate(rows, ensemble, label, mostly, training_range, training_missing, tolerance):
    """:func:`validate_inputs` on the rows of either engine (:class:`PandasRows`, or
    :class:`governance.data.spark.validation.SparkRows`)."""
    features = raw_columns(ensemble)
    encoding = encoding_of(ensemble.preprocessor)
    numeric = [c for c in features if encoding is None or c not in encoding.seen]
    if encoding is not None and training_range is not None:
        training_range = encoding.numeric_range(training_range)
    bounds = _training_bounds(training_range, numeric)
    context = suites.ephemeral_context()

    expected = features + ([label] if label is not None else [])
    reference = {
        c: float((training_missing or {}).get(c, 0.0)) for c in features if c in rows.columns
    }
    suite = suites.structure_suite(
        rows.columns, rows.n_rows, features, label, ensemble, mostly, rows.types
    )
    suite += suites.missing_suite(reference, tolerance, mostly, known=training_missing is not None)
    structure = rows.run(context, "raw", suite)
    results = [structure]
    failures = describe(structure, rows, None)
    sound = not any(f.expectation in _BROKEN_STRUCTURE for f in failures)
    normalized = None
    if sound:
        in_range = bounds is not None or ensemble.scaler is None
        scaled, normalized, problem = rows.normalize(features, ensemble, keep=not in_range)
        if problem is not None:
            failures.append(Failure("preprocessing", None, problem))
        elif in_range:
            raw = rows.subset(numeric)  # categories are checked against the training ones
            range_result = raw.run(
                context, "range", suites.raw_range_suite(numeric, bounds, mostly)
            )
            results.append(range_result)
            failures += describe(range_result, raw, raw, raw_units=True)
        else:
            names = list(ensemble.feature_names)
            range_result = scaled.run(context, "normalized", suites.range_suite(names, mostly))
            results.append(range_result)
            failures += describe(range_result, scaled, rows.subset(features))
    if label is not None and label in rows.columns and sound:
        error = rows.label_error(label, ensemble.classes)
        if error is not None:
            label_failures = [f for f in failures if f.column == label]
            if not label_failures or "mixes numbers and text" in error:
                failures = [f for f in failures if f.column != label]
                failures.append(Failure("labels", label, error))
    merged = suites.merged_result(results)
    broken = [f.message for f in failures if f.expectation in ("preprocessing", "labels")]
    if broken:
        merged["meta"] = {**merged.get("meta", {}), "preprocessing_error": broken[0]}
    if bounds is not None:
        low, high = bounds
        merged["meta"] = {
            **merged.get("meta", {}),
            "training_range": {f: [lo, hi] for f, lo, hi in zip(numeric, low, high)},
        }
    success = merged["success"] and not broken
    merged["success"] = success
    return ValidationReport(
        success=success,
        results=merged,
        frame=rows.ordered(expected),
        normalized=normalized,
        failures=failures,
        mostly=mostly,
        n_rows=rows.n_rows,
    )


class PandasRows:
    """A pandas DataFrame as :func:`validate_inputs` reads it: GE's pandas datasource,
    the ensemble's preprocessing on the whole frame, and the cells messages quote
    (:class:`governance.data.validation_messages.Cells`)."""

    types = suites.NUMERIC_TYPES

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame
        self.columns = list(frame.columns)
        self.n_rows = len(frame)

    def run(self, context, batch: str, expectations) -> dict:
        """GE's result of ``expectations`` on the frame."""
        return suites.run_suite(context, batch, self.frame, expectations)

    def subset(self, columns) -> PandasRows:
        """These ``columns`` only."""
        return PandasRows(self.frame[list(columns)])

    def ordered(self, columns) -> pd.DataFrame | None:
        """The frame's ``columns`` in that order; None when some are missing."""
        return self.frame[columns] if set(columns) <= set(self.columns) else None

    def normalize(self, features, ensemble, keep: bool):
        """``(rows, array, problem)``: the ``features`` through the ensemble's
        preprocessing (:func:`normalized_inputs`), as rows and as an array, or the
        problem; ``keep`` is for Spark (the rows are only needed for the range stage)."""
        normalized, problem = normalized_inputs(self.frame[features], ensemble)
        if problem is not None:
            return None, None, problem
        names = list(ensemble.feature_names)
        return PandasRows(pd.DataFrame(normalized, columns=names)), normalized, None

    def label_error(self, label: str, classes) -> str | None:
        """:func:`governance.data.tables.check_labels`' refusal of the labels, if any."""
        try:
            check_labels(self.frame[label], classes, label)
        except ValueError as error:
            return str(error)
        return None

    def head(self, column, n):
        return self.frame[column].head(n).tolist()

    def distinct(self, column, leaving_out=()):
        values = set(self.frame[column].dropna().tolist()) - set(leaving_out)
        return sorted(values, key=str)[:DISTINCT_SHOWN]

    def infinite(self, column):
        return int(np.isinf(self.frame[column].to_numpy(dtype=float)).sum())

    def value(self, column, row):
        return self.frame[column].iloc[row] if column in self.columns else None

    def type_name(self, observed):
        return observed


def _duplicate_names(names) -> list[str]:
    seen, repeated = set(), []
    for name in names:
        if name in seen and name not in repeated:
            repeated.append(name)
        seen.add(name)
    return repeated


def _training_bounds(scaler, features):
    """``(data_min, data_max)`` of a fitted MinMaxScaler in the order of ``features``."""
    if scaler is None:
        return None
    low = getattr(scaler, "data_min_", None)
    high = getattr(scaler, "data_max_", None)
    if low is None or high is None:
        raise InvalidInputError(
            "training_range must be a fitted MinMaxScaler (data_min_, data_max_)"
        )
    names = getattr(scaler, "feature_names_in_", None)
    if names is None:
        if len(low) != len(features):
            raise InvalidInputError(
                f"the training range has {len(low)} features, the ensemble {len(features)}"
            )
        return np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    index = {str(n): i for i, n in enumerate(names)}
    missing = [f for f in features if f not in index]
    if missing:
        raise InvalidInputError(
            f"the recorded training range has no entry for features {missing[:5]}; it was "
            "recorded for another feature schema: explain the model again"
        )
    order = [index[f] for f in features]
    return np.asarray(low, dtype=float)[order], np.asarray(high, dtype=float)[order]


# --------------------------------------------------------------------------- normalization
def normalized_inputs(raw: pd.DataFrame, ensemble):
    """The ensemble's own preprocessing of ``raw``, with raw infinities kept infinite.

    Returns ``(array, None)`` or ``(None, message)`` when the preprocessing fails.
    """
    numbers = raw.select_dtypes("number")  # categorical columns hold text
    values = numbers.to_numpy(dtype=np.float64, na_value=np.nan)
    infinite = np.isinf(values)
    finite_input = raw
    if infinite.any():
        finite_input = raw.copy()
        finite_input[numbers.columns] = numbers.mask(infinite)
    if getattr(ensemble.preprocessor, "feature_names_in_", None) is None:
        finite_input = finite_input.to_numpy(dtype=np.float64, na_value=np.nan)
    try:
        normalized = np.array(ensemble.transform(finite_input), dtype=np.float64)
    except ValueError as error:
        return None, f"the ensemble's preprocessing failed on this data: {error}"
    # The scaler's own float round-off maps the training extremes to 1 + 1e-16 or so.
    for bound in (0.0, 1.0):
        normalized[np.abs(normalized - bound) <= _ROUND_OFF] = bound
    if normalized.shape != (len(raw), ensemble.n_features):
        return None, (
            f"the ensemble's preprocessing produced shape {normalized.shape}, expected "
            f"({len(raw)}, {ensemble.n_features})"
        )
    if infinite.any():
        if normalized.shape == values.shape:
            normalized[infinite] = values[infinite]
        else:
            normalized[infinite.any(axis=1)] = np.inf
    return normalized, None
