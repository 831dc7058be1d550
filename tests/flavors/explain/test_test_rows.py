"""Explain refuses a test split too small to measure fidelity (``min_test_rows``)."""

import pytest
from mlflow import MlflowClient
from mlflow_store import register_wisconsin_rf
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.explain.request import MIN_TEST_ROWS
from miret_governance.flavors.miret import read_evidence

pytest_plugins = ["mlflow_store"]
FEATURES = ["mean radius", "mean texture", "worst area"]


@pytest.fixture
def registered(store, breast_cancer, monkeypatch):
    """A forest of the first 120 Wisconsin rows (24 test rows: the ensemble predicts 14 of class 0, 10 of class 1)."""
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", store)
    return register_wisconsin_rf(breast_cancer, FEATURES, rows=120, n_estimators=5)


def _explain_runs(experiment_id):
    return MlflowClient().search_runs([experiment_id], "tags.`governance.pid` != ''")


def test_the_two_row_file_of_the_issue_is_refused_before_the_fit(registered, store):
    two = registered.groupby("label").head(1)  # one row of each class
    two.to_csv("two.csv", index=False)
    done = CliRunner().invoke(
        app,
        ["explain", "--model-uri", "models:/credit-rf/1", "--data", "two.csv", "--target", "label"],
    )
    assert done.exit_code == 2, done.output
    message = " ".join(done.output.split())
    assert "the test rows are too few to measure fidelity: " in message
    assert "fewer than 20 per class" in message and "--min-test-rows N" in message
    assert MlflowClient().search_model_versions("name = 'credit-rf-surrogate'") == []
    (run,) = _explain_runs(store)
    assert run.info.status == "FAILED"  # ended, not left RUNNING
    assert "solver.objective" not in run.data.metrics  # nothing was fitted


def test_the_default_refuses_24_test_rows_and_names_the_counts(registered, store):
    with pytest.raises(ExplainError) as info:
        explain_model_version("models:/credit-rf/1", "data.csv", target="label", time_limit=2)
    assert "test rows are too few to measure fidelity: 14 of class 0, 10 of class 1" in str(
        info.value
    )
    assert MlflowClient().search_model_versions("name = 'credit-rf-surrogate'") == []
    assert [r.info.status for r in _explain_runs(store)] == ["FAILED"]


def test_a_lowered_minimum_is_recorded_in_the_run_and_the_evidence(registered, store):
    result = explain_model_version(
        "models:/credit-rf/1", "data.csv", target="label", time_limit=2, min_test_rows=10
    )
    assert MlflowClient().get_run(result.run_id).data.params["min_test_rows"] == "10"
    provenance = read_evidence(result.surrogate_uri)["provenance"]
    assert provenance["request"]["min_test_rows"] == 10
    assert provenance["parameters"]["min_test_rows"] == 10
    assert result.metrics["n_test_rows"] == 24.0
    with pytest.raises(ExplainError, match="14 of class 0, 10 of class 1"):
        # the minimum is part of the request: a stricter one is not answered by reuse
        explain_model_version(
            "models:/credit-rf/1", "data.csv", target="label", time_limit=2, min_test_rows=11
        )


@pytest.mark.parametrize("value", [-1, 2.5, True])
def test_a_bad_minimum_is_refused_before_anything_is_read(store, value):
    with pytest.raises(ExplainError, match="min_test_rows must be a whole number"):
        explain_model_version("models:/nowhere/1", "missing.csv", min_test_rows=value)
    assert MlflowClient().search_runs([store]) == []


def test_the_default_is_documented_in_help_and_the_mlproject():
    helped = " ".join(CliRunner().invoke(app, ["explain", "--help"]).output.split())
    assert "--min-test-rows" in helped and f"default: {MIN_TEST_ROWS}]" in helped
    assert MIN_TEST_ROWS == 20
