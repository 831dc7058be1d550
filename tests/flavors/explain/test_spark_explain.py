"""``govern explain`` and ``govern reproduce`` on a Spark table, and the ``miret`` evaluator
given a Spark DataFrame, against a real SQLite store and the suite's one local Spark
session: the deterministic sample explains as the same rows in a CSV file in the same
order, the fidelity on every other row is counted and recorded, reproduce on the same
table gives the same tree and refuses a changed one, and the evaluator refuses the first
10,000 rows MLflow hands it of a larger DataFrame."""

import json

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow_store import register_rf, store_folder
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.explain.request import ExplainRequest
from miret_governance.flavors.miret import load_model, read_evidence
from miret_governance.flavors.read.reproduce import reproduce_explanation
from miret_governance.flavors.store.inputs import load_explainable_ensemble
from miret_governance.governance.data.spark.predict import agreeing, model_inputs
from miret_governance.governance.data.spark.sample import ALL_ROWS, threshold_for
from miret_governance.governance.data.tables import numeric_columns, row_hashes, row_set_digest
from miret_governance.governance.measures.metrics import wilson_interval

pytest_plugins = ["mlflow_store", "spark_session"]

FEATURES = ["mean radius", "mean texture", "mean perimeter", "mean smoothness", "worst area"]
ROWS, SAMPLE = 200, 150
FIT = ["--target", "label", "--depth", "2", "--solver", "highs", "--time-limit", "60"]
FIT += ["--min-test-rows", "1"]
"""Depth 2 with HiGHS and a generous time limit: the fit ends on work, never on seconds."""


def _sample_of(frame: pd.DataFrame, threshold: str) -> pd.DataFrame:
    """The rows of ``frame`` whose hash is at most ``threshold``, in hash order (pandas)."""
    keys = pd.Series([h.hex() for h in row_hashes(frame, numeric_columns(frame))])
    chosen = keys[keys <= threshold].sort_values(kind="stable")
    return frame.iloc[chosen.index].reset_index(drop=True)


@pytest.fixture(scope="module")
def explained(tmp_path_factory, migrated_store, breast_cancer, spark):
    """A 10-tree forest of 200 Wisconsin rows, explained from the Spark view
    ``applicants`` (the rows shuffled over 3 partitions) on a sample of about 150 rows;
    the sample (computed in pandas) in hash order in ``sample.csv``."""
    root = tmp_path_factory.mktemp("spark-explain")
    X, y = breast_cancer
    frame = X[FEATURES].iloc[:ROWS].assign(label=y.iloc[:ROWS].to_numpy())
    with store_folder(root, migrated_store) as experiment:
        register_rf(frame, FEATURES, "credit-rf", n_estimators=10)
        shuffled = spark.createDataFrame(frame.sample(frac=1.0, random_state=1))
        shuffled.repartition(3).createOrReplaceTempView("applicants")
        command = ["explain", "--model-uri", "models:/credit-rf/1", "--data", "spark:applicants"]
        done = CliRunner().invoke(app, [*command, *FIT, "--sample-rows", str(SAMPLE)])
        assert done.exit_code == 0, done.output
        sample = _sample_of(frame, threshold_for(ROWS, SAMPLE))
        sample.to_csv("sample.csv", index=False)
    return {
        "root": root,
        "experiment": experiment,
        "frame": frame,
        "sample": sample,
        "output": done.output,
    }


@pytest.fixture
def case(explained, monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
        monkeypatch.setenv(name, f"sqlite:///{explained['root'] / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", explained["experiment"])
    monkeypatch.chdir(explained["root"])
    return explained


def _evidence() -> dict:
    return read_evidence("models:/credit-rf-surrogate/1")["provenance"]


def test_the_sample_explains_as_the_same_rows_in_a_csv_file(case):
    """The explain stages (split, fit, metrics) on the CSV file give the recorded tree and
    every headline metric; the file's dataset digest is the recorded sample's."""
    on_csv = reproduce_explanation("models:/credit-rf/1", "sample.csv")
    assert on_csv.identical and on_csv.data_digest == _evidence()["data_digest"]
    assert {"train_fidelity", "test_fidelity", "n_features_used"} <= set(on_csv.metrics)
    record = _evidence()["request"]
    sample = case["sample"]
    assert record["data"] == "spark:applicants"
    assert record["data_source"] == {
        "identity": "spark:applicants",
        "row_set_digest": row_set_digest(case["frame"]),
        "table_rows": ROWS,
        "threshold": threshold_for(ROWS, SAMPLE),
        "sample_rows": len(sample),
    }
    file_record = {k: v for k, v in record.items() if k != "data_source"}
    assert ExplainRequest.from_record(file_record).record() == file_record  # a file's: as ever
    assert len(sample) == 156  # about 150 of 200: those whose hash is in the lowest 3/4


def test_the_fidelity_on_every_other_row_is_counted_and_shown(case):
    metrics = _evidence()["metrics"]
    frame = case["frame"]
    beyond = frame.merge(case["sample"], how="left", indicator=True)
    beyond = beyond[beyond["_merge"] == "left_only"].drop(columns=["_merge", "label"])
    ensemble = load_explainable_ensemble("models:/credit-rf/1")
    surrogate = load_model("models:/credit-rf-surrogate/1")
    agree = agreeing(ensemble, surrogate.tree_, None, model_inputs(ensemble, beyond, "rows"))
    low, high = wilson_interval(agree, len(beyond))
    assert len(beyond) == ROWS - len(case["sample"])
    assert {k: metrics[k] for k in metrics if k.startswith("table_")} == {
        "table_fidelity": agree / len(beyond),
        "table_fidelity_ci_low": low,
        "table_fidelity_ci_high": high,
        "table_rows": float(len(beyond)),
    }
    described = MlflowClient().get_run(_evidence()["run_id"]).data.tags["mlflow.note.content"]
    assert f"the {len(case['sample'])} of its {ROWS} rows of smallest row hash" in described
    line = f"fidelity on the table's other rows: {100 * agree / len(beyond):.1f}% (95% CI "
    assert line in case["output"]
    assert f"n={len(beyond)} rows beyond the sample)" in case["output"]


def _reproduce(*data) -> tuple[int, str]:
    done = CliRunner().invoke(
        app,
        [
            "reproduce",
            "--model-uri",
            "models:/credit-rf-surrogate/1",
            "--json",
            "--no-record",
            *data,
        ],
    )
    return done.exit_code, done.output


def test_reproduce_on_the_same_table_gives_the_same_tree(case, spark):
    spark.table("applicants").coalesce(1).createOrReplaceTempView("applicants_again")
    code, output = _reproduce("--data", "spark:applicants_again")
    assert code == 0, output
    result = json.loads(output)
    assert result["identical"] is True
    assert result["tree_digest"]["reproduced"] == _evidence()["tree_digest"]
    assert result["metrics"]["table_fidelity"]["equal"] is True
    assert result["metrics"]["table_rows"]["reproduced"] == ROWS - len(case["sample"])


def test_reproduce_refuses_a_changed_table_naming_both_digests(case, spark):
    changed = case["frame"].iloc[1:]
    spark.createDataFrame(changed).createOrReplaceTempView("applicants_changed")
    code, output = _reproduce("--data", "spark:applicants_changed")
    assert (code, output) == (
        2,
        (
            f"error: spark:applicants_changed is not the table of this explanation: its "
            f"row-set digest is {row_set_digest(changed)}, the recorded one is "
            f"{row_set_digest(case['frame'])} (rows were added, removed or changed since); "
            f"pass the table as the explain run read it (spark:applicants, {ROWS} rows)\n"
        ),
    )


def test_bad_spark_input_is_refused_before_anything_is_collected(case, spark):
    spark.table("applicants").drop("worst area").createOrReplaceTempView("narrow")
    command = ["explain", "--model-uri", "models:/credit-rf/1", *FIT]
    done = CliRunner().invoke(app, [*command, "--data", "spark:narrow"])
    assert (done.exit_code, done.output.splitlines()[-1]) == (
        2,
        (
            "error: spark:narrow lacks the ensemble's feature columns ['worst area']; it must "
            "have the columns the model was trained on"
        ),
    )
    done = CliRunner().invoke(app, [*command, "--data", "spark:applicants", "--sample-rows", "1"])
    assert (done.exit_code, done.output.splitlines()[-1]) == (
        2,
        "error: sample_rows must be a whole number of rows, at least 2, got 1",
    )
    assert len(MlflowClient().search_model_versions("name = 'credit-rf-surrogate'")) == 1
    assert threshold_for(ROWS, ROWS) == ALL_ROWS
    assert threshold_for(ROWS, 100) == "7fffffffffffffffffffffffffffffff"


def test_the_evaluator_refuses_the_first_10000_rows_of_a_larger_spark_dataframe(case, spark):
    """A smaller Spark DataFrame arrives whole: it is evaluated."""
    columns = [f"cast(id % {7 + i} as double) as `{name}`" for i, name in enumerate(FEATURES)]
    rows = spark.range(10_001).selectExpr(*columns, "cast(id % 2 as int) as label")
    config = {"miret": {"enabled": True, "depth": 1, "work_limit": 1.0, "stall_work": 0.5}}

    def evaluate(data):
        return mlflow.models.evaluate(
            "models:/credit-rf/1",
            data,
            targets="label",
            model_type="classifier",
            evaluators=["miret"],
            evaluator_config=config,
        )

    with (
        mlflow.start_run(experiment_id=case["experiment"]) as run,
        pytest.raises(ExplainError) as refused,
    ):
        evaluate(rows)
    assert str(refused.value) == (
        "the miret evaluator was given a Spark DataFrame, of which MLflow hands evaluators "
        "only the first 10,000 rows; it does not judge a truncated sample: explain the table "
        "with govern explain --data spark:<table> (a deterministic sample, fidelity counted "
        "on every other row in Spark)"
    )
    assert not MlflowClient().get_run(run.info.run_id).data.metrics
    with mlflow.start_run(experiment_id=case["experiment"]):
        result = evaluate(spark.table("applicants"))
    assert result.metrics["miret_n_rows"] == ROWS
