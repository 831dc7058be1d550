"""The tests' MLflow stores keep every artifact in temporary folders, never the
repository's ``./mlruns`` (a run that logs to a store copy's default experiment included)."""

from pathlib import Path
from urllib.parse import urlparse

import mlflow
from mlflow import MlflowClient
from mlflow_store import log_skops
from project_copy import ROOT
from sklearn.tree import DecisionTreeClassifier

pytest_plugins = ["mlflow_store"]


def test_a_model_logged_to_the_default_experiment_of_a_store_copy_stays_out_of_the_repo(
    store, tmp_path
):
    default = MlflowClient().get_experiment("0")
    assert not Path(urlparse(default.artifact_location).path).is_relative_to(ROOT)
    info = log_skops(DecisionTreeClassifier().fit([[0.0], [1.0]], [0, 1]), experiment_id="0")
    logged = Path(urlparse(mlflow.get_logged_model(info.model_id).artifact_location).path)
    assert logged.is_dir() and not logged.is_relative_to(ROOT)


def test_each_test_store_keeps_its_default_experiment_beside_it(tmp_path):
    """conftest copies one migrated store into every test: the copy's default experiment
    must put its artifacts in this test's folder, as a store MLflow creates here would."""
    default = MlflowClient().get_experiment("0")
    assert default.artifact_location == str(tmp_path / "mlruns" / "0")
    assert [e.experiment_id for e in MlflowClient().search_experiments()] == ["0"]
