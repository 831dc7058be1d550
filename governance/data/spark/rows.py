"""A few rows of a Spark table, selected in Spark, for what explains single rows.

:func:`selected_rows` filters with a Spark SQL condition (``frame.where``), collects at
most ``limit`` rows and orders them by their row hash
(:func:`governance.data.tables.row_hashes`, the hashes the row-set digest adds up), so the rows and their numbers do
not depend on the table's partitions: the same rows as a file in that order give the
same answers.
"""

from __future__ import annotations

import pandas as pd

from miret_governance.governance.data.spark.measures import numeric_columns
from miret_governance.governance.data.tables import TableError, row_hashes


def selected_rows(frame, where: str | None, limit: int, source: str) -> pd.DataFrame:
    """The rows of the Spark DataFrame ``frame`` that ``where`` selects (every row
    without one), in row-hash order, numbered from 0.

    Raises
    ------
    TableError
        ``limit`` below 1, a condition Spark cannot parse or resolve, or more than
        ``limit`` rows selected (their count named).
    """
    from pyspark.errors import AnalysisException

    if limit < 1:
        raise TableError(f"--limit {limit}: give at least 1 row")
    try:
        chosen = frame if where is None else frame.where(where)
        rows = chosen.limit(limit + 1).toPandas()
        count = chosen.count() if len(rows) > limit else len(rows)
    except AnalysisException as error:
        first = str(error).strip().splitlines()[0]
        raise TableError(
            f"--where {where!r} on {source}: Spark cannot evaluate it ({first}); give a Spark "
            'SQL condition on the table\'s columns, e.g. "id = 42"'
        ) from None
    if count > limit:
        raise TableError(
            f"--where {where!r} selects {count} rows of {source}, more than --limit {limit}; "
            "narrow the condition or raise --limit"
        )
    hashes = row_hashes(rows, numeric_columns(chosen))
    order = sorted(range(len(rows)), key=hashes.__getitem__)
    return rows.iloc[order].reset_index(drop=True)
