"""``govern diff --data``, the drift gates (gate, promote) and ``govern explain-row`` on
Spark data give what the pandas path gives on a file of the same rows; the signed gate
and promotion records name the rows (identity, count, row-set digest).

Two versions of ``credit-cat`` (tests/categorical_data.py: category strings, income
missing on every tenth row; version 1 one-hot encodes ``purpose``, version 2
ordinal-encodes it), each explained once on 200 rows at depth 1 with HiGHS. ``rows.csv`` holds 40
of the rows (4 without income) and the label; the Spark table ``cat_rows`` holds the
same rows shuffled over 2 partitions. One module fixture serves diff, the gates and
explain-row: two more explains per file would cost more than the tests themselves.
"""

import json
from dataclasses import asdict

import numpy as np
import pytest
from categorical_data import explained_credit_cat, use_store_copy
from mlflow import MlflowClient
from signing_keys import keys_toml
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.gates.diff import diff_versions
from miret_governance.flavors.gates.gating import GATE_EXPERIMENT, gate_model_version
from miret_governance.flavors.store.data_files import read_table
from miret_governance.flavors.trail.decisions import read_record
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.governance.data.spark.frames import data_source
from miret_governance.governance.data.tables import numeric_columns, row_hash_sum, row_set_digest
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.records import DataRef

pytest_plugins = ["mlflow_store", "spark_session"]
V1, V2 = "models:/credit-cat/1", "models:/credit-cat/2"


@pytest.fixture(scope="module")
def explained(tmp_path_factory, migrated_store, spark):
    """Both versions explained on 200 rows (tests/categorical_data.py); ``rows.csv``
    (40 rows) and the same rows shuffled as the Spark temp view ``cat_rows``."""
    root = tmp_path_factory.mktemp("spark-diff")
    explained = explained_credit_cat(root, migrated_store, n=200, trees=(5, 8), depth=1)
    rows = read_table(root / "rows.csv")
    shuffled = rows.sample(frac=1.0, random_state=3)
    spark.createDataFrame(shuffled).repartition(2).createOrReplaceTempView("cat_rows")
    return explained | {"rows": rows}


@pytest.fixture
def case(explained, tmp_path, monkeypatch):
    """MLflow on a copy of the store; a policy file trusting the CI key."""
    use_store_copy(explained, tmp_path, monkeypatch)
    (tmp_path / "policy.toml").write_text("[gates]\nmin_fidelity = 0.5\n" + keys_toml())
    return explained | {"policy": tmp_path / "policy.toml"}


def invoke(*args):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def _diff_json(*data) -> tuple[int, dict | str]:
    done = invoke("diff", "--from", V1, "--to", V2, "--json", *data)
    return done.exit_code, (json.loads(done.stdout) if done.exit_code == 0 else done.output)


def test_diff_on_a_spark_table_equals_the_file(case, spark):
    code, on_file = _diff_json("--data", "rows.csv")
    assert code == 0, on_file
    digest = row_set_digest(case["rows"])
    assert on_file["data"] == {"identity": "rows.csv", "rows": 40, "digest": digest}
    cross = on_file["cross_fidelity"]
    assert cross["rows"] == 40 and 0 < cross["value"] <= 1
    code, on_spark = _diff_json("--data", "spark:cat_rows")
    assert code == 0, on_spark
    assert on_spark == on_file | {"data": on_file["data"] | {"identity": "spark:cat_rows"}}
    api = diff_versions(V1, V2, data=spark.table("cat_rows"))  # the Python API
    assert api.to_json()["cross_fidelity"] == cross
    assert api.data == DataRef("the Spark DataFrame", 40, digest)


def test_rows_the_pandas_path_refuses_are_refused_alike_on_spark(case, spark, tmp_path):
    rows = case["rows"]
    boats = rows.copy()
    boats.loc[boats.index[7], "purpose"] = "boat"  # a category not seen in training
    boats.to_csv(tmp_path / "boats.csv", index=False)
    spark.createDataFrame(boats).coalesce(1).createOrReplaceTempView("boats")
    code, on_file = _diff_json("--data", str(tmp_path / "boats.csv"))
    assert code == 2 and "cannot be scored by models:/credit-cat/1" in on_file
    assert "purpose: boat (seen in training" in " ".join(on_file.split())
    assert _diff_json("--data", "spark:boats") == (2, on_file)
    # a table without a feature column: refused before the gate records anything
    spark.createDataFrame(rows.drop(columns="age")).createOrReplaceTempView("narrow")
    MlflowClient().set_registered_model_alias("credit-cat", "champion", "1")
    args = ["gate", "--model-uri", V2, "--policy", str(case["policy"])]
    narrow = invoke(*args, "--data", "spark:narrow")
    assert (narrow.exit_code, narrow.output) == (
        2,
        (
            "error: spark:narrow lacks the ensemble's feature columns ['age']; it must have the "
            "columns the model was trained on\n"
        ),
    )
    assert MlflowClient().get_experiment_by_name(GATE_EXPERIMENT) is None


def test_the_drift_gates_and_the_signed_records_on_spark(case, spark):
    client = MlflowClient()
    policy = load_policy(case["policy"])
    assert promote_model_version(V1, "champion", policy).promoted  # no champion yet: passes
    case["policy"].write_text(
        "[gates]\nmin_fidelity = 0.5\nmin_cross_fidelity = 0.5\n" + keys_toml()
    )
    policy = load_policy(case["policy"])
    on_file = gate_model_version(V2, policy, data="rows.csv")
    on_spark = gate_model_version(V2, policy, data=data_source("spark:cat_rows"))
    results = [{r.name: asdict(r) for r in o.evaluation.results} for o in (on_file, on_spark)]
    recomputed = results[0]["recomputed_fidelity"]
    assert results[1] == results[0] | {
        "recomputed_fidelity": recomputed | {"reason": f"spark:cat_rows: {recomputed['reason']}"}
    }
    cross = on_file.drift["cross_fidelity"]
    assert results[1]["min_cross_fidelity"]["value"] == cross["value"] >= 0.5
    assert on_file.evaluation.all_passed and on_spark.evaluation.all_passed
    digest = row_set_digest(case["rows"])
    assert on_file.data == DataRef("rows.csv", 40, digest)
    assert on_spark.data == DataRef("spark:cat_rows", 40, digest)
    assert on_spark.drift == on_file.drift | {"data": on_spark.data.to_json()}
    for outcome in (on_file, on_spark):
        record = read_record(client, outcome.run_id, policy.keys).record
        assert record.data == outcome.data and record.drift["data"] == outcome.data.to_json()
    # promote --data PATH --engine spark: the gates on Spark, the record names the rows
    case["rows"].to_parquet("rows.parquet")
    done = invoke(
        "promote", "--model-uri", V2, "--alias", "champion", "--policy", str(case["policy"]),
        "--data", "rows.parquet", "--engine", "spark",
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    reference = DataRef("rows.parquet (spark)", 40, digest)
    assert (
        f"measured on rows.parquet (spark): 40 rows, row-set digest {digest} (in the signed "
        "decision record)"
    ) in done.stdout
    run_id = client.get_model_version("credit-cat", "2").tags["governance.promotion.champion.run"]
    record = read_record(client, run_id, policy.keys).record
    assert (record.kind, record.decision, record.data) == ("promotion", "promoted", reference)
    assert record.drift["cross_fidelity"] == cross


def _explain_row(*args) -> tuple[int, dict | str]:
    done = invoke("explain-row", "--model-uri", V2, "--json", *args)
    return done.exit_code, (json.loads(done.stdout) if done.exit_code == 0 else done.output)


def test_explain_row_selects_spark_rows_with_a_condition(case, tmp_path):
    rows = case["rows"]
    chosen = rows[(rows["age"] < 40) & (rows["housing"] == "rent")]  # 6 of the 40
    numeric = numeric_columns(rows)
    hashes = [row_hash_sum(chosen.iloc[[i]], numeric) for i in range(len(chosen))]
    chosen.iloc[np.argsort(hashes)].to_csv(tmp_path / "chosen.csv", index=False)
    code, on_file = _explain_row("--data", str(tmp_path / "chosen.csv"))
    assert code == 0, on_file
    assert on_file["n_rows"] == len(chosen) == 6
    where = "age < 40 AND housing = 'rent'"
    assert _explain_row("--data", "spark:cat_rows", "--where", where) == (0, on_file)
    assert _explain_row("--data", "spark:cat_rows", "--where", where, "--limit", "5") == (
        2,
        (
            f"error: --where {where!r} selects 6 rows of spark:cat_rows, more than --limit 5; "
            "narrow the condition or raise --limit\n"
        ),
    )
    code, message = _explain_row("--data", "spark:cat_rows", "--where", "age <")
    assert code == 2 and message.count("\n") == 1
    assert message.startswith("error: --where 'age <' on spark:cat_rows: Spark cannot evaluate it")
    assert _explain_row("--data", "rows.csv", "--where", where) == (
        2,
        (
            f"error: --where {where!r} selects rows of Spark data only; give --data "
            "spark:<table> (or a path with --engine spark), or a file of just the rows to "
            "explain\n"
        ),
    )
    assert _explain_row("--data", "spark:cat_rows")[0] == 2  # 40 rows, more than 20
