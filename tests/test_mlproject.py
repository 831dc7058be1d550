"""The MLproject's ``explain`` entry point: its defaults, and a real ``mlflow run``."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from miret_governance.governance.miret import MiretSearchCV, MiretSurrogate
from mlflow import MlflowClient
from mlflow_store import register_rf

pytest_plugins = ["mlflow_store"]
ROOT = Path(__file__).resolve().parents[1]
FEATURES = ["mean radius", "mean texture", "worst area"]


def _explain_entry():
    return yaml.safe_load((ROOT / "MLproject").read_text())["entry_points"]["explain"]


def test_explain_defaults_match_the_estimator():
    params = _explain_entry()["parameters"]
    defaults = MiretSurrogate().get_params()
    for name in (
        "alpha",
        "gamma_percentile",
        "proximity_threshold",
        "max_rows",
        "time_limit",
        "solver",
    ):
        assert params[name]["default"] == defaults[name], name
    assert params["seed"]["default"] == defaults["random_state"]
    assert params["depth"]["default"] == 0 and params["target"]["default"] == ""
    assert "default" not in params["model_uri"] and params["data"]["type"] == "path"
    search = MiretSearchCV(None).get_params()
    for name in ("search_time_limit", "cv", "tolerance", "backend"):
        assert params[name]["default"] == search[name], name
    assert params["search"]["default"] == "no-search"
    command = _explain_entry()["command"]
    for name in params:
        assert "{" + name + "}" in command
    assert "--{search} " in command


@pytest.mark.slow
def test_mlflow_run_explain(store, breast_cancer, tmp_path):
    X, y = breast_cancer
    frame = X[FEATURES].iloc[:120].assign(label=y.iloc[:120].to_numpy())
    frame.to_csv("data.csv", index=False)
    register_rf(frame, FEATURES, "proj-rf", n_estimators=10, experiment_id=store)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlflow",
            "run",
            str(ROOT),
            "-e",
            "explain",
            "-P",
            "model_uri=models:/proj-rf/1",
            "-P",
            f"data={tmp_path / 'data.csv'}",
            "-P",
            "target=label",
            "-P",
            "time_limit=3",
            "-P",
            "search=search",
            "-P",
            'search_grid={"alpha": [0.2, 0.8]}',
            "-P",
            "cv=2",
            "-P",
            "search_time_limit=1",
            "--env-manager",
            "local",
            "--experiment-id",
            store,
        ],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient()
    (surrogate,) = client.search_model_versions("name = 'proj-rf-surrogate'")
    assert surrogate.tags["governance.surrogate_of"] == "models:/proj-rf/1"
    runs = client.search_runs([store], filter_string="tags.`mlflow.project.entryPoint` = 'explain'")
    assert len(runs) == 1 and runs[0].info.run_id == surrogate.run_id
    assert runs[0].data.params["ensemble_uri"] == "models:/proj-rf/1"
    assert "train_fidelity" in runs[0].data.metrics
    children = client.search_runs(
        [store], filter_string=f"tags.`mlflow.parentRunId` = '{runs[0].info.run_id}'"
    )
    assert sorted(c.data.params["alpha"] for c in children) == ["0.2", "0.8"]
    assert runs[0].data.params["search.cv"] == "2"
    chosen = [c for c in children if c.data.tags["governance.search.chosen"] == "true"]
    assert runs[0].data.params["alpha.resolved"] == chosen[0].data.params["alpha"]
