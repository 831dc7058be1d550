"""The Spark engine measures what the pandas path measures, with equal results
(governance.data.spark), on the one local session of tests/spark_session.py."""

import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeClassifier

from miret_governance.governance.data import tables, validation
from miret_governance.governance.data.spark import measures
from miret_governance.governance.data.spark.frames import (
    SPARK_PATH,
    SPARK_TABLE,
    DataSource,
    data_source,
    spark_frame,
)
from miret_governance.governance.data.spark.predict import agreeing, agreement, model_inputs
from miret_governance.governance.data.tables import TableError, row_set_digest
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.miret.tree.paths import RowsError

pytest_plugins = ["spark_session"]
DIGEST = "dd828355aa15579d5221828a8429f04e"


def _table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "x0": [0.5, -0.0, np.nan, 2.0, 1.0, 3.5],
            "n": [1, 2, 3, 4, 5, 6],
            "flag": [True, False, True, True, False, False],
            "city": ["Zürich", None, "Oslo", "Bergen", "Oslo", "Lyon"],
        }
    )


def test_the_row_set_digest_ignores_row_order_and_nothing_else(tmp_path):
    frame = _table()
    assert row_set_digest(frame) == DIGEST
    assert row_set_digest(frame.iloc[::-1]) == DIGEST
    assert row_set_digest(frame.assign(x0=frame["x0"].replace(-0.0, 0.0))) == DIGEST
    frame.to_csv(tmp_path / "t.csv", index=False)
    assert row_set_digest(tables.read_table(tmp_path / "t.csv")) == DIGEST
    edited = frame.copy()
    edited.loc[0, "x0"] = 0.5000001
    others = [
        edited,
        pd.concat([frame, frame.iloc[:1]]),  # a row twice
        frame.rename(columns={"n": "m"}),
        frame.assign(n=frame["n"].astype(str)),  # the same values as text
        frame.iloc[:, ::-1],
    ]
    assert [row_set_digest(other) != DIGEST for other in others] == [True] * 5
    assert tables.content_digest(frame) != tables.content_digest(frame.iloc[::-1])


def test_spark_computes_the_same_digest_and_missing_shares(spark):
    frame = _table()
    rows = spark.createDataFrame(frame).repartition(3)
    assert measures.row_set_digest(rows) == DIGEST
    assert measures.row_set_digest(rows.limit(0)) == row_set_digest(frame.iloc[:0])
    assert (
        measures.missing_shares(rows, frame.columns)
        == validation.missing_shares(frame, frame.columns)
        == {"x0": 1 / 6, "n": 0.0, "flag": 0.0, "city": 1 / 6}
    )


def test_spark_counts_the_same_agreeing_rows_as_pandas(spark, breast_cancer, scaled_forest):
    X, y = breast_cancer
    ensemble = read_ensemble(scaled_forest, native=True)
    working = ensemble.transform(X)
    tree = DecisionTreeClassifier(max_depth=1, random_state=0).fit(working, y)
    expected = agreeing(ensemble, tree, None, model_inputs(ensemble, X, "rows"))
    assert expected == 536  # of 569: a stump disagrees with the forest on 33 rows
    counted = agreement(spark.createDataFrame(X).repartition(2), ensemble, tree, None, "rows")
    assert (counted.agreeing, counted.rows, counted.problem) == (expected, len(X), None)
    broken = X.head(30).assign(**{"mean radius": np.inf})
    with pytest.raises(RowsError) as refused:
        model_inputs(ensemble, broken, "rows")
    counted = agreement(spark.createDataFrame(broken).coalesce(1), ensemble, tree, None, "rows")
    assert counted.problem == str(refused.value)


def test_a_spark_source_is_named_by_table_or_path_and_refused_when_unknown(spark, tmp_path):
    assert data_source("spark:db.scores") == DataSource(SPARK_TABLE, "db.scores")
    assert data_source("x.parquet", engine="spark") == DataSource(SPARK_PATH, "x.parquet")
    assert data_source("spark:db.scores").identity == "spark:db.scores"
    with pytest.raises(TableError, match="--engine 'dask': choose one of pandas, spark"):
        data_source("x.csv", engine="dask")
    with pytest.raises(TableError, match=r"^spark:no_such_table: Spark cannot read this table"):
        spark_frame(data_source("spark:no_such_table"))
    _table().to_parquet(tmp_path / "t.parquet")
    read = spark_frame(data_source(tmp_path / "t.parquet", engine="spark"))
    assert measures.row_set_digest(read) == DIGEST
