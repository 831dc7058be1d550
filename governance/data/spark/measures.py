"""What the pandas path measures of a table, as Spark jobs with equal results.

- :func:`row_set_digest`: :func:`governance.data.tables.row_set_digest` of a Spark
  DataFrame; each batch's :func:`~governance.data.tables.row_hash_sum` is computed by the
  same function in a ``mapInPandas`` task and the sums added on the driver (modulo
  :data:`~governance.data.tables.ROW_SET_MODULUS`, so the order of rows and batches
  does not matter).
- :func:`missing_shares`: :func:`governance.data.validation.missing_shares` as one
  aggregation (counts of null or NaN over the row count, divided on the driver as
  pandas divides).
"""

from __future__ import annotations

from functools import partial

from miret_governance.governance.data.tables import (
    ROW_SET_MODULUS,
    row_hash_sum,
    row_set_digest_of,
)


def numeric_columns(frame) -> tuple[bool, ...]:
    """Per column of a Spark DataFrame, whether it is hashed as numbers (numeric and
    boolean types), as :func:`governance.data.tables.numeric_columns` decides for pandas."""
    from pyspark.sql.types import BooleanType, NumericType

    return tuple(isinstance(f.dataType, (NumericType, BooleanType)) for f in frame.schema.fields)


def _batch_sums(numeric, batches):
    import pandas as pd

    for batch in batches:
        yield pd.DataFrame({"rows": [len(batch)], "total": [str(row_hash_sum(batch, numeric))]})


def row_set(frame) -> tuple[int, str]:
    """The rows of a Spark DataFrame and their :func:`row_set_digest`, one job (the
    digest counts the rows anyway: no second ``count()`` scan)."""
    numeric = numeric_columns(frame)
    sums = frame.mapInPandas(partial(_batch_sums, numeric), "rows long, total string").collect()
    rows = sum(int(r["rows"]) for r in sums)
    total = sum(int(r["total"]) for r in sums) % ROW_SET_MODULUS
    return rows, row_set_digest_of([str(c) for c in frame.columns], numeric, rows, total)


def row_set_digest(frame) -> str:
    """:func:`governance.data.tables.row_set_digest` of a Spark DataFrame."""
    return row_set(frame)[1]


def missing_shares(frame, columns) -> dict:
    """Share of the rows of a Spark DataFrame missing each of ``columns`` (null, or NaN
    in a floating-point column), one aggregation."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType

    types = {f.name: f.dataType for f in frame.schema.fields}

    def missing(name):
        column = F.col(f"`{name}`")
        gone = column.isNull()
        if isinstance(types[name], (DoubleType, FloatType)):
            gone = gone | F.isnan(column)
        return F.sum(F.when(gone, 1).otherwise(0)).alias(name)

    row = frame.agg(F.count(F.lit(1)).alias("__rows"), *[missing(str(c)) for c in columns]).first()
    rows = int(row["__rows"])
    return {str(c): (int(row[str(c)] or 0) / rows if rows else 0.0) for c in columns}
