"""The input validation of :func:`governance.data.validation.validate_inputs` on a Spark
DataFrame: the same suites run by Great Expectations' Spark datasource, the same report.

- **Missing values.** A NaN of a floating-point column is made null first: pandas counts
  both as missing, GE's Spark engine only nulls.
- **Rows.** Each row gets an index column (:data:`INDEX`, ``monotonically_increasing_id``:
  its partition and place in it) and the rows are fixed once (``localCheckpoint``, on the
  executors, spilling to disk): every expectation sees the same rows, however often GE
  reads them. One aggregation counts the rows of each partition, so the indices GE quotes
  become row positions (0-based, in the order Spark reads the table: a file's own
  order), as pandas quotes them. GE's table-level expectations run without that column.
- **Preprocessing.** The ensemble's preprocessing runs batch by batch in ``mapInPandas``
  (:func:`governance.data.validation.normalized_inputs`, over our own arrays; passed in,
  as validation imports this module); the range
  stage validates its output. A preprocessing failure is the first batch's.
- **What is collected.** Aggregates, GE's bounded unexpected samples, and for messages at
  most :data:`~governance.data.validation_messages.DISTINCT_SHOWN` distinct values, the
  first three values of a column of the wrong type and the raw values of quoted rows.
"""

from __future__ import annotations

from functools import partial

from miret_governance.governance.data import expectation_suites as suites
from miret_governance.governance.data.tables import check_labels
from miret_governance.governance.data.validation_messages import DISTINCT_SHOWN, EXAMPLES

INDEX = "__governance_row"
"""The index column added to the validated rows (never one of the table's)."""
PROBLEM = "__governance_problem"
"""The preprocessing's refusal, in the rows of a batch it refused."""
_PARTITION_BITS = 33
"""``monotonically_increasing_id`` holds the partition above these bits, the row below."""
_PANDAS_TYPES = {"StringType": "str", "BooleanType": "bool"}
"""Spark's type names as pandas names the same columns read from a file."""


def _quoted(name: str):
    from pyspark.sql import functions as F

    return F.col(f"`{name}`")


def spark_rows(frame, normalize) -> SparkRows:
    """The rows of a Spark DataFrame for :func:`governance.data.validation.validate_inputs`:
    NaN made null, the index column added, the rows of each partition counted.
    ``normalize`` is the pandas path's preprocessing of a batch
    (:func:`governance.data.validation.normalized_inputs`, which imports this module)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType

    columns = [str(c) for c in frame.columns]
    floats = {
        f.name for f in frame.schema.fields if isinstance(f.dataType, (DoubleType, FloatType))
    }
    clean = frame.select(
        *[
            F.when(~F.isnan(_quoted(c)), _quoted(c)).alias(c) if c in floats else _quoted(c)
            for c in columns
        ]
    )
    # fixed once: GE runs several jobs over the rows, and an index recomputed per job
    # could differ (Spark evaluates a projection of local rows on the driver)
    indexed = clean.withColumn(INDEX, F.monotonically_increasing_id()).localCheckpoint()
    counts = (
        indexed.groupBy(F.shiftright(INDEX, _PARTITION_BITS).alias("partition")).count().collect()
    )
    starts, start = {}, 0
    for row in sorted(counts, key=lambda r: r["partition"]):
        starts[int(row["partition"])] = start
        start += int(row["count"])
    return SparkRows(indexed.drop(INDEX), indexed, columns, starts, start, normalize)


class SparkRows:
    """A Spark DataFrame as :func:`governance.data.validation.validate_inputs` reads it:
    GE's Spark datasource, the preprocessing in ``mapInPandas``, and the cells messages
    quote (:class:`governance.data.validation_messages.Cells`).

    Attributes
    ----------
    frame : pyspark.sql.DataFrame
        The rows without the index (GE's table-level expectations).
    indexed : pyspark.sql.DataFrame
        The rows with :data:`INDEX`.
    columns : list of str
    starts : dict of int to int
        Position of each partition's first row.
    n_rows : int
    normalize : callable
        ``(raw frame, ensemble) -> (array, problem)``, run on each batch.
    """

    types = suites.SPARK_NUMERIC_TYPES

    def __init__(self, frame, indexed, columns, starts, n_rows, normalize):
        self.frame, self.indexed = frame, indexed
        self.columns, self.starts, self.n_rows = columns, starts, n_rows
        self.normalize_batch = normalize

    def _position(self, index: int) -> int:
        partition = index >> _PARTITION_BITS
        return self.starts[partition] + index - (partition << _PARTITION_BITS)

    def _index(self, position: int) -> int:
        partition = max(p for p, start in self.starts.items() if start <= position)
        return (partition << _PARTITION_BITS) + position - self.starts[partition]

    def run(self, context, batch: str, expectations) -> dict:
        """GE's result of ``expectations`` on the rows: the table-level ones (listed
        first by every suite) on :attr:`frame`, the column ones on :attr:`indexed`, the
        quoted indices as row positions."""
        table = [e for e in expectations if getattr(e, "column", None) is None]
        columns = [e for e in expectations if getattr(e, "column", None) is not None]
        runs = []
        if table:
            runs.append(suites.run_suite(context, f"{batch}-table", self.frame, table))
        if columns:
            run = suites.run_suite(context, batch, self.indexed, columns, index=INDEX)
            for item in run["results"]:
                result = item.get("result") or {}
                quoted = result.pop("partial_unexpected_index_list", None)
                result.pop("unexpected_index_column_names", None)
                if quoted is not None:
                    result["partial_unexpected_index_list"] = [
                        self._position(int(q[INDEX])) for q in quoted
                    ]
            runs.append(run)
        return {
            **runs[-1],
            "results": [r for run in runs for r in run["results"]],
            "success": all(run["success"] for run in runs),
        }

    def subset(self, columns) -> SparkRows:
        """These ``columns`` only."""
        selected = [_quoted(c) for c in columns]
        return SparkRows(
            self.frame.select(*selected),
            self.indexed.select(_quoted(INDEX), *selected),
            list(columns),
            self.starts,
            self.n_rows,
            self.normalize_batch,
        )

    def ordered(self, columns) -> None:
        """None: the rows stay in Spark."""

    def normalize(self, features, ensemble, keep: bool):
        """``(rows, None, problem)``: the ``features`` through the ensemble's
        preprocessing in ``mapInPandas``, as rows when ``keep`` (for the range stage),
        or the first refusal."""
        from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

        names = [str(n) for n in ensemble.feature_names]
        schema = StructType(
            [StructField(INDEX, LongType())]
            + [StructField(n, DoubleType()) for n in names]
            + [StructField(PROBLEM, StringType())]
        )
        task = partial(_normalized_batches, self.normalize_batch, ensemble, list(features), names)
        rows = self.indexed.select(_quoted(INDEX), *[_quoted(c) for c in features])
        normalized = rows.mapInPandas(task, schema)
        refused = normalized.where(_quoted(PROBLEM).isNotNull()).select(PROBLEM).limit(1).collect()
        if refused:
            return None, None, refused[0][PROBLEM]
        if not keep:
            return None, None, None
        normalized = normalized.drop(PROBLEM)
        return (
            SparkRows(
                normalized.drop(INDEX),
                normalized,
                names,
                self.starts,
                self.n_rows,
                self.normalize_batch,
            ),
            None,
            None,
        )

    def label_error(self, label: str, classes) -> str | None:
        """:func:`governance.data.tables.check_labels`' refusal of the label's distinct
        values (a bounded number, in the order of their text), if any."""
        bound = len(classes) + EXAMPLES + 1
        values = [r[0] for r in self.frame.select(_quoted(label)).distinct().limit(bound).collect()]
        try:
            check_labels(sorted(values, key=str), classes, label)
        except ValueError as error:
            return str(error)
        return None

    def head(self, column, n):
        return [r[0] for r in self.frame.select(_quoted(column)).limit(n).collect()]

    def distinct(self, column, leaving_out=()):
        values = _quoted(column)
        kept = values.isNotNull()
        if leaving_out:
            kept = kept & ~values.isin(list(leaving_out))
        found = (
            self.frame.where(kept)
            .select(values)
            .distinct()
            .orderBy(values.cast("string"))
            .limit(DISTINCT_SHOWN)
            .collect()
        )
        return sorted((r[0] for r in found), key=str)

    def infinite(self, column):
        return self.frame.where(_quoted(column).isin(float("inf"), float("-inf"))).count()

    def value(self, column, row):
        if column not in self.columns:
            return None
        found = self.indexed.where(_quoted(INDEX) == self._index(row)).select(_quoted(column))
        return found.first()[0]

    def type_name(self, observed):
        return _PANDAS_TYPES.get(observed, observed)


def _normalized_batches(normalize, ensemble, features, names, batches):
    """``normalize`` (:func:`governance.data.validation.normalized_inputs`) of each batch:
    its rows with their index, or one row holding the refusal."""
    import pandas as pd

    for batch in batches:
        if not len(batch):
            continue
        normalized, problem = normalize(batch[features].reset_index(drop=True), ensemble)
        if problem is not None:
            yield pd.DataFrame({INDEX: [None], **{n: [None] for n in names}, PROBLEM: [problem]})
            continue
        out = pd.DataFrame(normalized, columns=names)
        out.insert(0, INDEX, batch[INDEX].to_numpy())
        out[PROBLEM] = None
        yield out
