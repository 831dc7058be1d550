"""Spark data (governance.data.spark): the row-set digest, missing shares and agreement
counts equal the pandas path's; ``govern gate --data spark:<table>`` gives the CSV file's
recomputed fidelity; bad Spark input is refused (exit 2, nothing written). One file, so
the suite starts one JVM (tests/spark_session.py), and the domain tests' fast lane none."""

import json
import os
import subprocess
import sys

import gate_store
import numpy as np
import pandas as pd
import pytest
from gate_store import FEATURES, GOOD, explain
from mlflow import MlflowClient
from mlflow_store import register_sklearn
from signing_keys import keys_toml
from sklearn.ensemble import RandomForestClassifier
from sklearn.tree import DecisionTreeClassifier
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.gates.gating import GATE_EXPERIMENT, gate_model_version
from miret_governance.flavors.store.data_files import read_table
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
from miret_governance.governance.trust.policy import load_policy

pytest_plugins = ["mlflow_store", "spark_session"]
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


@pytest.fixture
def gated(store, tmp_path, monkeypatch):
    """A 5-tree forest on ``x0..x2`` with gate_store's signed hand-made surrogate, 200 rows
    of it as CSV, and a policy trusting the CI key; returns the rows."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    rows = pd.DataFrame(rng.random((200, 3)), columns=FEATURES)
    forest = RandomForestClassifier(n_estimators=5, max_depth=2, random_state=0)
    register_sklearn(
        forest.fit(rows, (rows["x0"] > rows["x1"]).astype(int)), "credit-rf", experiment_id=store
    )
    version = MlflowClient().get_model_version("credit-rf", "1")
    provenance_of = gate_store.provenance_of
    request = {"target": None, "data_digest": "d" * 32, "test_data_digest": None}
    with monkeypatch.context() as patched:  # the request record explain keeps
        patched.setattr(
            gate_store,
            "provenance_of",
            lambda *a, **k: provenance_of(*a, **k) | {"request": request},
        )
        explain(store, version, tmp_path, metrics=GOOD | {"test_fidelity_ci_high": 1.0})
    (tmp_path / "policy.toml").write_text("[gates]\nmin_fidelity = 0.9\n" + keys_toml())
    rows.to_csv("rows.csv", index=False)
    return rows


def _gate(*data) -> tuple[int, dict | str]:
    done = CliRunner().invoke(
        app,
        ["gate", "--model-uri", "models:/credit-rf/1", "--policy", "policy.toml", "--json", *data],
    )
    if done.exit_code == 2:
        return 2, done.output
    document = json.loads(done.stdout)
    (gate,) = [g for g in document["gates"] if g["name"] == "recomputed_fidelity"]
    return done.exit_code, gate | {"data": document["data"]}


def _gate_runs() -> int:
    experiment = MlflowClient().get_experiment_by_name(GATE_EXPERIMENT)
    return 0 if experiment is None else len(MlflowClient().search_runs([experiment.experiment_id]))


def test_a_spark_table_and_a_spark_path_give_the_csv_files_fidelity(gated, spark, tmp_path):
    code, on_pandas = _gate("--data", "rows.csv")
    assert on_pandas["reason"].startswith("99 of 200 rows agree: 0.4950 (95% 0.426-0.564)")
    assert code == 1 and on_pandas["value"] == 0.495 and not on_pandas["passed"]
    spark.createDataFrame(gated.sample(frac=1.0, random_state=1)).createOrReplaceTempView("scores")
    digest = row_set_digest(gated)
    code, on_spark = _gate("--data", "spark:scores")
    assert code == 1
    assert on_pandas["data"] == {"identity": "rows.csv", "rows": 200, "digest": digest}
    assert on_spark == on_pandas | {
        "reason": f"spark:scores: {on_pandas['reason']}",
        "data": {"identity": "spark:scores", "rows": 200, "digest": digest},
    }
    policy = load_policy("policy.toml")  # the Python API takes a Spark DataFrame
    outcome = gate_model_version("models:/credit-rf/1", policy, data=spark.table("scores"))
    (result,) = [r for r in outcome.evaluation.results if r.name == "recomputed_fidelity"]
    assert result.value == 0.495
    assert result.reason == f"the Spark DataFrame: {on_pandas['reason']}"
    assert (outcome.data.identity, outcome.data.digest) == ("the Spark DataFrame", digest)
    gated.to_parquet("rows.parquet")
    code, on_path = _gate("--data", "rows.parquet", "--engine", "spark")
    assert code == 1, on_path
    assert on_path["value"] == on_pandas["value"]
    assert on_path["reason"].startswith("rows.parquet (spark): 99 of")


def test_bad_spark_input_is_refused_and_nothing_is_written(gated, spark):
    runs = _gate_runs()
    spark.createDataFrame(gated.drop(columns="x2")).createOrReplaceTempView("narrow")
    assert _gate("--data", "spark:narrow") == (
        2,
        (
            "error: spark:narrow lacks the ensemble's feature columns ['x2']; it must have "
            "the columns the model was trained on\n"
        ),
    )
    code, message = _gate("--data", "spark:no_such_table")
    assert code == 2
    assert message.startswith("error: spark:no_such_table: Spark cannot read this table (")
    assert _gate("--data", "rows.csv", "--engine", "dask") == (
        2,
        "error: --engine 'dask': choose one of pandas, spark\n",
    )
    done = CliRunner().invoke(
        app, ["pipeline", "--model-uri", "models:/credit-rf/1", "--data", "spark:scores"]
    )
    assert (done.exit_code, done.output) == (
        2,
        (
            "error: --data spark:scores: this command reads a CSV or Parquet file and takes no "
            "Spark table yet (gate, promote, validate, diff, explain, reproduce and explain-row "
            "do); give a file sample\n"
        ),
    )
    with pytest.raises(ExplainError, match=r"^the Spark DataFrame: this reads its rows into "):
        read_table(spark.table("narrow"))  # validate, diff, explain, explain-row, evaluator
    assert _gate_runs() == runs


def test_a_session_that_cannot_start_is_one_line_naming_java(tmp_path):
    """Without Java (a JAVA_HOME with none, no java on PATH) in a fresh interpreter."""
    script = (
        "from miret_governance.governance.data.spark.frames import session\n"
        "from miret_governance.governance.data.tables import TableError\n"
        "try:\n    session()\nexcept TableError as error:\n    print(error)\n"
    )
    env = {**os.environ, "JAVA_HOME": str(tmp_path), "PATH": os.path.dirname(sys.executable)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.startswith("the Spark session cannot start (")
    assert done.stdout.rstrip().endswith(
        "Spark needs Java 17 or later: install it (sh examples/server/ensure_java.sh) or set "
        "JAVA_HOME"
    )
    assert done.stdout.count("\n") == 1


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
