"""Where data comes from: a file read into pandas, or a Spark table or path.

A :class:`DataSource` is parsed once at the command-line edge (``--data spark:<table>``,
``--data PATH --engine spark``) and travels to every command that takes data; the
Python API also takes a Spark DataFrame itself. :func:`spark_frame` opens a Spark
source in the active session (or a local one), refusing, with one line each, a session
that cannot start (no Java), an unknown table and an unreadable path.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from miret_governance.governance.data.spark import SPARK_PREFIX
from miret_governance.governance.data.tables import PARQUET_SUFFIXES, TableError

ENGINES = ("pandas", "spark")
"""The engines ``--engine`` chooses between (pandas: the file read in one process)."""
FILE, SPARK_TABLE, SPARK_PATH = "file", "spark-table", "spark-path"


@dataclass(frozen=True)
class DataSource:
    """Data a command reads.

    Attributes
    ----------
    kind : str
        :data:`FILE` (a CSV or Parquet file read into pandas), :data:`SPARK_TABLE` (a
        table of the session's catalog) or :data:`SPARK_PATH` (a Parquet or CSV path read
        by Spark).
    location : str
        The file's path or the table's name.
    """

    kind: str
    location: str

    @property
    def on_spark(self) -> bool:
        """Whether Spark reads it."""
        return self.kind != FILE

    @property
    def identity(self) -> str:
        """What the evidence records of it: ``spark:<table>``, or the path and engine."""
        if self.kind == SPARK_TABLE:
            return SPARK_PREFIX + self.location
        return f"{self.location} ({'spark' if self.on_spark else 'pandas'})"


def data_source(value, engine: str = "pandas") -> DataSource:
    """The :class:`DataSource` of a ``--data`` value and ``--engine``.

    ``spark:<table>`` is a Spark table whatever the engine; a path is read by the engine.

    Raises
    ------
    TableError
        An unknown engine or an empty table name.
    """
    if engine not in ENGINES:
        raise TableError(f"--engine {engine!r}: choose one of {', '.join(ENGINES)}")
    text = str(value)
    if text.startswith(SPARK_PREFIX):
        table = text[len(SPARK_PREFIX) :]
        if not table:
            raise TableError("--data spark: names no table; give spark:<table>")
        return DataSource(SPARK_TABLE, table)
    return DataSource(SPARK_PATH if engine == "spark" else FILE, text)


def is_spark_frame(data) -> bool:
    """Whether ``data`` is a Spark DataFrame (classic or Connect), without importing
    pyspark when it is not loaded."""
    module = type(data).__module__
    return module.startswith("pyspark.") and type(data).__name__ == "DataFrame"


def on_spark(data) -> bool:
    """Whether ``data`` (a path, a DataSource or a Spark DataFrame) is read by Spark."""
    return is_spark_frame(data) or (isinstance(data, DataSource) and data.on_spark)


def session():
    """The active Spark session, or a new one on Spark's configured master (by default
    ``local[*]``: every core of this machine); its Python workers run this interpreter
    unless ``PYSPARK_PYTHON`` names another.

    Raises
    ------
    TableError
        pyspark is not installed, or the session cannot start (no Java).
    """
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
        from pyspark.sql import SparkSession
    except ImportError:
        raise TableError(
            "Spark data needs pyspark: pip install 'miret-governance[spark]'"
        ) from None
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # pyspark starts its Python workers with PYSPARK_PYTHON (else `python3` on PATH, which
    # may lack this package): this interpreter, unless the environment names another.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        return (
            SparkSession.builder.appName("govern").config("spark.ui.enabled", "false").getOrCreate()
        )
    except (PySparkException, Py4JError, OSError) as error:  # no Java, or one that fails
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TableError(
            f"the Spark session cannot start ({first}); Spark needs Java 17 or later: "
            "install it (sh examples/server/ensure_java.sh) or set JAVA_HOME"
        ) from None


def spark_frame(data):
    """The Spark DataFrame of ``data`` (a Spark DataFrame is returned as it is).

    Raises
    ------
    TableError
        No session, an unknown table, a path Spark cannot read, or duplicate columns.
    """
    if is_spark_frame(data):
        frame, where = data, "the Spark DataFrame"
    else:
        spark = session()
        from pyspark.errors import AnalysisException

        where, path = data.identity, data.location
        if "://" not in path:  # a local path from this folder, not the JVM's
            path = str(Path(path).resolve())
        try:
            if data.kind == SPARK_TABLE:
                frame = spark.table(data.location)
            elif Path(path).suffix.lower() in PARQUET_SUFFIXES or Path(path).is_dir():
                frame = spark.read.parquet(path)
            else:
                frame = spark.read.csv(path, header=True, inferSchema=True)
        except AnalysisException as error:
            kind = "table" if data.kind == SPARK_TABLE else "path"
            first = str(error).strip().splitlines()[0]
            raise TableError(
                f"{where}: Spark cannot read this {kind} ({first}); give an existing table "
                "(spark:<db.table>) or a Parquet path with --engine spark"
            ) from None
    names = [str(c) for c in frame.columns]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise TableError(
            f"{where}: duplicate column names {repeated}; every column needs a unique name"
        )
    return frame


def source_name(data) -> str:
    """``data`` for messages: the table's identity, or ``the Spark DataFrame``."""
    return "the Spark DataFrame" if is_spark_frame(data) else data.identity
