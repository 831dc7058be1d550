"""The one local Spark session of the Spark tests: one core (a second one cost the suite 5
CPU s more: another Python worker), 2 shuffle partitions, no UI, no whole-stage code
generation, the JIT's first tier only (tiny tables).

Load it in a test module with ``pytest_plugins = ["spark_session"]``; session-scoped,
so the JVM starts once per worker.
"""

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """A ``local[1]`` SparkSession whose Python workers run this interpreter."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # pyspark reads it, not the conf
    folder = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[1]")
        .appName("miret-governance-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.codegen.wholeStage", "false")  # no Janino compiles: tiny tables
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", str(folder / "warehouse"))
        .config("spark.local.dir", str(folder / "local"))
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss4m")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
