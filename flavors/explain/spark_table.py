"""Explaining a Spark table: the deterministic sample the explain stages run on, and the
fidelity on every row beyond it (:mod:`governance.data.spark.sample`).

:func:`read_sample` gives ``govern explain`` and ``govern reproduce`` the sample as a
pandas DataFrame (then split, validated and fitted exactly as a file's rows) with its
:class:`~governance.data.spark.sample.TableSample`; :func:`table_metrics` counts, in
Spark, the surrogate's agreement with the ensemble on the rest of the table.
"""

from __future__ import annotations

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.explain.defaults import SAMPLE_ROWS
from miret_governance.governance.data.spark.frames import source_name, spark_frame
from miret_governance.governance.data.tables import TableError


def check_sample_rows(value) -> int:
    """``--sample-rows``, checked before any work: a whole number, at least 2.

    Raises
    ------
    ExplainError
    """
    if isinstance(value, bool) or not float(value).is_integer() or value < 2:
        raise ExplainError(f"sample_rows must be a whole number of rows, at least 2, got {value!r}")
    return int(value)


def read_sample(data, ensemble, target: str | None, sample_rows: int = SAMPLE_ROWS, recorded=None):
    """The sample of a Spark source or DataFrame ``data``, in hash order.

    Parameters
    ----------
    ensemble : governance.ensembles.ensemble.Ensemble
        Whose input columns the table must have.
    target : str, optional
        Label column the table must have.
    sample_rows : int
        About how many rows to collect.
    recorded : TableSample, optional
        The sample an explanation recorded: the table's row-set digest must be the
        recorded one, and the rows under the recorded threshold are collected again.

    Returns
    -------
    (pyspark.sql.DataFrame, pandas.DataFrame, TableSample)

    Raises
    ------
    ExplainError
        No session, an unknown table, no label column or feature column, a sample of
        fewer than 2 rows, or (``recorded``) a table whose rows differ from the recorded
        one's; before anything is collected.
    """
    from miret_governance.flavors.store.data_files import missing_features
    from miret_governance.governance.data.spark import sample
    from miret_governance.governance.data.spark.measures import row_set
    from miret_governance.governance.data.validation import raw_columns

    name = source_name(data)
    try:
        table = spark_frame(data)
        if target and target not in table.columns:
            raise ExplainError(
                f"{name} has no label column {target!r} (columns: "
                f"{', '.join(map(str, table.columns[:8]))}...); pass --target with one of them"
            )
        missing = missing_features(table.columns, raw_columns(ensemble), name)
        if missing is not None:
            raise missing
        table_rows, digest = row_set(table)
        if recorded is not None and digest != recorded.row_set_digest:
            raise ExplainError(
                f"{name} is not the table of this explanation: its row-set digest is "
                f"{digest}, the recorded one is {recorded.row_set_digest} (rows were added, "
                f"removed or changed since); pass the table as the explain run read it "
                f"({recorded.identity}, {recorded.table_rows} rows)"
            )
        threshold = recorded.threshold if recorded is not None else None
        frame, record = sample.collect(table, name, table_rows, digest, sample_rows, threshold)
    except TableError as error:
        raise ExplainError(str(error)) from None
    return table, frame, record


def table_metrics(table, record, ensemble, surrogate) -> dict:
    """:data:`~governance.data.spark.sample.TABLE_METRICS` of the rows of ``table``
    beyond the sample ``record``: ``ensemble`` as loaded (its own preprocessing reads
    the rows), the surrogate's tree behind its scaler, as ``govern gate --data`` counts.

    Raises
    ------
    ExplainError
        A row beyond the sample the ensemble cannot take.
    """
    from miret_governance.governance.data.spark.sample import table_fidelity

    tree_scaler = None if ensemble.scaler is not None else surrogate.input_scaler_
    try:
        return table_fidelity(table, record, ensemble, surrogate.tree_, tree_scaler)
    except TableError as error:
        raise ExplainError(str(error)) from None
