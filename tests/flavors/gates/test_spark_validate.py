"""``govern validate`` and ``validate_inputs`` on Spark data (GE's Spark engine): the same
report as the pandas path on the same rows, a CSV file against the same file read by Spark
and against a Spark table of its rows, passing and failing (a value out of range, a
missing share over the training one, a wrong type, a missing column, an unseen category,
a label outside the classes); an unknown table is refused (exit 2)."""

import json

import numpy as np
import pandas as pd
import pytest
from mlflow_store import register_sklearn
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.governance.data.tables import read_table
from miret_governance.governance.data.validation import validate_inputs
from miret_governance.governance.ensembles.readers.reading import read_ensemble

pytest_plugins = ["mlflow_store", "spark_session"]
FEATURES = ["age", "income", "debt", "score"]


@pytest.fixture(scope="module")
def rows():
    """60 rows of 4 features in [0, 100] and a binary label."""
    rng = np.random.default_rng(0)
    raw = pd.DataFrame(rng.uniform(0, 100, size=(60, 4)).round(2), columns=FEATURES)
    return raw.assign(label=(raw["income"] > raw["debt"]).astype(int))


@pytest.fixture(scope="module")
def scaled(rows):
    """Pipeline(MinMaxScaler, RandomForest): its range is checked after normalization."""
    forest = RandomForestClassifier(n_estimators=2, max_depth=2, random_state=0)
    return make_pipeline(MinMaxScaler(), forest).fit(rows[FEATURES], rows["label"])


def _outcome(report) -> tuple:
    """What must be equal on both engines (GE's raw results carry run ids and times)."""
    failures = [(f.expectation, f.column, f.message) for f in report.failures]
    return report.success, report.n_rows, failures, report.to_json()["statistics"]


def _both(spark, frame, path, ensemble, **arguments) -> tuple:
    """The outcome of the CSV file ``path`` of ``frame`` on pandas, asserted equal on a
    Spark table of ``frame`` (two partitions: row positions run on across them)."""
    frame.to_csv(path, index=False)
    on_pandas = _outcome(validate_inputs(read_table(path), ensemble, **arguments))
    table = spark.createDataFrame(frame)
    assert table.rdd.getNumPartitions() == 2
    assert _outcome(validate_inputs(table, ensemble, **arguments)) == on_pandas
    return on_pandas


def test_out_of_range_missing_and_unlabelled_rows_are_reported_alike(spark, rows, scaled, tmp_path):
    ensemble = read_ensemble(scaled)
    bad = rows.astype({"label": object, "age": float})
    bad.loc[[40, 45], "debt"] = [250.0, -10.0]  # beyond the scaler's range
    bad.loc[[3, 7, 31, 50, 52], "age"] = np.nan  # 5 of 60 missing: training had 2%
    bad.loc[[8, 33], "label"] = 2  # not a class of the ensemble
    success, n_rows, failures, statistics = _both(
        spark,
        bad,
        tmp_path / "bad.csv",
        ensemble,
        label="label",
        training_missing={"age": 0.02},
    )
    assert (success, n_rows) == (False, 60)
    assert statistics["evaluated_expectations"] == 17
    assert [(kind, column) for kind, column, _ in failures] == [
        ("expect_column_values_to_not_be_null", "age"),
        ("expect_column_unique_value_count_to_be_between", "label"),
        ("expect_column_distinct_values_to_be_in_set", "label"),
        ("expect_column_values_to_be_between", "debt"),
    ]
    assert [message for _, _, message in failures] == [
        (
            "column 'age': 5 rows (8.33%) with missing values (null/NaN), more than the "
            "training data's 2% plus the tolerance of 5 points (at most 7%); rows 3, 7, 31, "
            "50, 52"
        ),
        "label column 'label' has 3 classes [0, 1, 2]; a binary label needs exactly two",
        "label column 'label' has values [2] outside the ensemble's classes [0, 1]",
        (
            "column 'debt': 2 rows (3.33%) outside [0, 1] after the ensemble's normalization "
            "(beyond the range it was fitted on); e.g. 2.522 (raw 250), -0.1114 (raw -10); "
            "rows 40, 45"
        ),
    ]


def test_a_wrong_type_and_a_missing_column_are_reported_alike(spark, rows, scaled, tmp_path):
    ensemble = read_ensemble(scaled)
    bad = rows.drop(columns=["score", "label"]).assign(
        income=lambda f: f["income"].astype(str).str.replace(".", ",", regex=False)
    )
    success, n_rows, failures, _ = _both(spark, bad, tmp_path / "types.csv", ensemble)
    assert (success, n_rows) == (False, 60)
    assert [(kind, column) for kind, column, _ in failures] == [
        ("expect_table_columns_to_match_set", None),
        ("expect_column_values_to_be_in_type_list", "income"),
    ]
    assert failures[0][2].endswith("missing columns ['score']")
    examples = [f"{v:g}".replace(".", ",") for v in rows["income"].head(3)]
    assert failures[1][2] == f"column 'income' has type str, not numeric (e.g. {examples})"


def test_the_training_range_and_unseen_categories_are_reported_alike(spark, tmp_path):
    """A native categorical HistGradientBoosting on raw units: range from the recorded
    training scaler, categories from the ensemble."""
    rng = np.random.default_rng(1)
    X = pd.DataFrame({"region": rng.integers(0, 4, 80), "income": rng.uniform(20, 60, 80)})
    y = (X["region"].isin([1, 2]) & (X["income"] > 38)).astype(int)
    model = HistGradientBoostingClassifier(max_iter=3, categorical_features=[0], random_state=0)
    ensemble = read_ensemble(model.fit(X, y), native=True)
    bad = X.assign(region=X["region"].replace(3, 7))
    bad.loc[[5, 60], "income"] = [75.5, np.inf]
    limits = MinMaxScaler().fit(X[["income"]])
    success, _, failures, _ = _both(
        spark, bad, tmp_path / "regions.csv", ensemble, training_range=limits
    )
    assert not success
    assert [(kind, column) for kind, column, _ in failures] == [
        ("expect_column_values_to_be_in_set", "region"),
        ("expect_column_values_to_be_between", "income"),
    ]
    assert failures[0][2].startswith("column 'region' has categories not seen in training: 7 (")
    assert failures[1][2].endswith("(1 infinite, e.g. 75.5, inf); rows 5, 60")


def test_govern_validate_on_a_spark_table_prints_the_files_result(
    spark, store, rows, scaled, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    register_sklearn(scaled, "credit-rf", experiment_id=store)
    rows.assign(customer=range(60)).to_csv("rows.csv", index=False)
    read = spark.read.csv(str(tmp_path / "rows.csv"), header=True, inferSchema=True)
    read.createOrReplaceTempView("rows")  # with a column the model does not use

    def validate(*data):
        done = CliRunner().invoke(
            app, ["validate", "--model-uri", "models:/credit-rf/1", "--json", *data]
        )
        return done.exit_code, (json.loads(done.stdout) if done.exit_code != 2 else done.output)

    code, on_pandas = validate("--data", "rows.csv", "--target", "label")
    assert code == 0 and on_pandas["data"] == "rows.csv"
    assert (on_pandas["failures"], on_pandas["rows"]) == ([], 60)
    assert on_pandas["expectations"] == {"evaluated": 17, "successful": 17}
    code, on_spark = validate("--data", "spark:rows", "--target", "label")
    assert code == 0 and on_spark == on_pandas | {"data": "spark:rows"}
    code, message = validate("--data", "spark:no_such_table")
    assert code == 2 and message.startswith(
        "error: spark:no_such_table: Spark cannot read this table ("
    )
    assert message.count("\n") == 1
