"""Shared fixtures: telemetry off, and every test isolated from the user's mlflow.db."""

import os

os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _isolated_mlflow(tmp_path, monkeypatch):
    """Point MLflow at a throw-away SQLite store; never the user's ./mlflow.db."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture(scope="session")
def breast_cancer():
    """Wisconsin diagnostic data (569 x 30) as a DataFrame and a label Series."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    return X, y


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(0)
