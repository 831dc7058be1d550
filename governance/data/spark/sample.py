"""A deterministic sample of a Spark table, collected to pandas, and the fidelity counted
on every row beyond it.

``govern explain --data spark:<table>`` fits on rows chosen by their content alone: each
row's hash (:func:`governance.data.tables.row_hashes`, computed by a pandas UDF over the
row's columns) is a 128-bit number spread evenly, so the rows whose hash is at most a
threshold (:func:`threshold_for`: about ``N`` of the table's rows fall under it, every row
of a table of at most ``N``) are a uniform sample that does not depend on partitions or
order; :func:`collect` sorts them by hash (equal hashes are equal rows) before they reach
pandas. :func:`table_fidelity` counts the surrogate's agreement with the ensemble on the
rows above the threshold in Spark (:func:`governance.data.spark.predict.agreement`), and
:class:`TableSample` is what the evidence records of it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from miret_governance.governance.data.tables import TableError, row_hashes

TABLE_FIDELITY = "table_fidelity"
"""Metric: the surrogate's agreement with the ensemble on every row beyond the sample."""
TABLE_FIDELITY_CI = ("table_fidelity_ci_low", "table_fidelity_ci_high")
"""Metrics: its 95% Wilson interval."""
TABLE_ROWS = "table_rows"
"""Metric: the rows beyond the sample it was counted on."""
TABLE_METRICS = (TABLE_FIDELITY, *TABLE_FIDELITY_CI, TABLE_ROWS)
HASH_BITS = 128
ALL_ROWS = "f" * (HASH_BITS // 4)
"""The threshold of a table of at most the rows asked for: every row is in the sample."""
_HASH = "__miret_row_hash"


@dataclass(frozen=True)
class TableSample:
    """Which rows of a Spark table an explanation was fitted on.

    Attributes
    ----------
    identity : str
        The table (``spark:<table>``, ``<path> (spark)`` or ``the Spark DataFrame``).
    row_set_digest : str
        :func:`governance.data.spark.measures.row_set_digest` of the whole table.
    table_rows : int
        Its rows.
    threshold : str
        The sample is the rows whose hash, as 32 hex digits, is at most this.
    sample_rows : int
        The rows collected.
    """

    identity: str
    row_set_digest: str
    table_rows: int
    threshold: str
    sample_rows: int

    def to_json(self) -> dict:
        """The record as plain values (:meth:`from_json` reads it back)."""
        return asdict(self)

    @classmethod
    def from_json(cls, record: dict) -> TableSample:
        """The sample :meth:`to_json` wrote."""
        return cls(**record)


def threshold_for(table_rows: int, wanted: int) -> str:
    """The hash threshold under which about ``wanted`` of ``table_rows`` rows fall
    (:data:`ALL_ROWS` when the table has no more).

    Examples
    --------
    >>> threshold_for(100, 100) == ALL_ROWS, threshold_for(4, 1)
    (True, '3fffffffffffffffffffffffffffffff')
    """
    if table_rows <= wanted:
        return ALL_ROWS
    return format(wanted * 2**HASH_BITS // table_rows - 1, f"0{HASH_BITS // 4}x")


def _hashed(frame):
    """``frame`` with each row's hash as 32 hex digits in a column :data:`_HASH`."""
    from pyspark.sql import functions as F

    from miret_governance.governance.data.spark.measures import numeric_columns

    numeric = numeric_columns(frame)

    def hashes(rows: pd.DataFrame) -> pd.Series:
        return pd.Series([h.hex() for h in row_hashes(rows, numeric)], index=rows.index)

    columns = F.struct(*[F.col(f"`{c}`") for c in frame.columns])
    return frame.withColumn(_HASH, F.pandas_udf(hashes, "string")(columns))


def collect(
    frame, identity: str, table_rows: int, digest: str, wanted: int, threshold: str | None = None
):
    """The sample of a Spark DataFrame, in hash order, as a pandas DataFrame.

    Parameters
    ----------
    frame : pyspark.sql.DataFrame
    identity : str
        What the record calls the table.
    table_rows, digest : int, str
        Its rows and :func:`governance.data.spark.measures.row_set_digest`
        (:func:`~governance.data.spark.measures.row_set` counts both in one job).
    wanted : int
        About how many rows to keep (ignored with ``threshold``).
    threshold : str, optional
        The recorded threshold (``govern reproduce``): the same rows again.

    Returns
    -------
    (pandas.DataFrame, TableSample)

    Raises
    ------
    TableError
        A sample of fewer than 2 rows.
    """
    from pyspark.sql import functions as F

    threshold = threshold or threshold_for(table_rows, wanted)
    chosen = _hashed(frame).where(F.col(_HASH) <= threshold).orderBy(_HASH).drop(_HASH)
    sample = chosen.toPandas()
    if len(sample) < 2:
        raise TableError(
            f"{identity}: the sample has {len(sample)} of {table_rows} rows; explaining needs "
            "at least 2: ask for more with --sample-rows"
        )
    record = TableSample(identity, digest, table_rows, threshold, len(sample))
    return sample, record


def table_fidelity(frame, sample: TableSample, ensemble, tree, tree_scaler) -> dict:
    """:data:`TABLE_METRICS` of the rows of ``frame`` beyond ``sample``, counted in Spark
    (``{}`` when the sample holds every row).

    Raises
    ------
    TableError
        A row beyond the sample the ensemble cannot take (text, infinite values, an
        unseen category), named by :func:`governance.data.spark.predict.model_inputs`.
    """
    from pyspark.sql import functions as F

    from miret_governance.governance.data.spark.predict import agreement
    from miret_governance.governance.measures.metrics import wilson_interval

    beyond = _hashed(frame).where(F.col(_HASH) > sample.threshold).drop(_HASH)
    counted = agreement(beyond, ensemble, tree, tree_scaler, sample.identity)
    if counted.problem is not None:
        raise TableError(f"a row beyond the sample: {counted.problem}")
    if not counted.rows:
        return {}
    low, high = wilson_interval(counted.agreeing, counted.rows)
    return {
        TABLE_FIDELITY: counted.agreeing / counted.rows,
        TABLE_FIDELITY_CI[0]: low,
        TABLE_FIDELITY_CI[1]: high,
        TABLE_ROWS: float(counted.rows),
    }
