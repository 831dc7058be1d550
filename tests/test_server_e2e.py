"""End to end through a real `mlflow server`: register, explain, gate, promote over HTTP."""

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import pytest
import typer
from mlflow import MlflowClient
from mlflow_store import copy_store, register_sklearn
from processes import free_port, stop_group
from signing_keys import keys_toml
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from typer.testing import CliRunner

pytest_plugins = ["mlflow_store"]
pytestmark = pytest.mark.slow


def wait_for_health(url: str, server: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"mlflow server at {url} did not answer /health in {timeout:.0f} s")


class Server:
    """``mlflow server`` on a SQLite backend with proxied artifacts; stoppable and
    restartable on the same store.

    MLflow's job execution is off (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``): by
    default the server also starts a job runner and seven Huey consumers, each a Python
    process importing MLflow (about 15 s of CPU per start on a 2-core machine), for
    MLflow's GenAI jobs, which nothing here submits; the tracking and registry API the
    tests use is the same.
    """

    def __init__(self, tmp_path: Path, migrated_store: Path):
        self.folder = tmp_path
        self.backend = tmp_path / "server.db"
        copy_store(migrated_store, self.backend)
        self.artifacts = tmp_path / "artifacts"
        self.process = None
        self.url = ""

    def start(self) -> str:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with open(self.folder / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "mlflow", "server",
                    "--backend-store-uri", f"sqlite:///{self.backend}",
                    "--serve-artifacts", "--artifacts-destination", str(self.artifacts),
                    "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(
                    os.environ,
                    MLFLOW_DISABLE_TELEMETRY="true",
                    MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
                ),
                start_new_session=True,
            )  # fmt: skip
        wait_for_health(self.url, self.process)
        return self.url

    def stop(self) -> None:
        """Kill the server and its workers (a graceful stop takes 1-7 s and tests
        nothing: the store is thrown away)."""
        if self.process is not None:
            stop_group(self.process, signal.SIGKILL)


@pytest.fixture
def server(tmp_path, migrated_store, monkeypatch):
    """A tracking server on a free port: SQLite backend, proxied artifacts in tmp_path."""
    running = Server(tmp_path, migrated_store)
    try:
        url = running.start()
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        monkeypatch.setenv("MLFLOW_REGISTRY_URI", url)
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        experiment = MlflowClient().create_experiment("e2e")
        assert (
            MlflowClient()
            .get_experiment(experiment)
            .artifact_location.startswith("mlflow-artifacts:")
        )
        monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "e2e")
        yield url
    finally:
        running.stop()


def test_register_explain_gate_promote_over_http(server, tmp_path, breast_cancer):
    from miret_governance.cli.gates import register
    from miret_governance.flavors.explain.explain import explain_model_version

    X, y = breast_cancer
    X, y = X.iloc[:200, :8], y.iloc[:200]
    forest = RandomForestClassifier(n_estimators=5, max_depth=2, random_state=0)
    pipe = make_pipeline(MinMaxScaler(), forest).fit(X, y)
    X.assign(label=y).to_csv(tmp_path / "train.csv", index=False)
    register_sklearn(pipe, "wisconsin-rf")

    app = typer.Typer()
    register(app)
    runner = CliRunner()

    def govern(*args):
        return runner.invoke(app, [*args, "--tracking-uri", server])

    # Drifted data (a raw value far beyond the training range): the pipeline stops at
    # validation, before anything is explained or registered.
    X.assign(label=y, **{"mean area": X["mean area"] * 10}).to_csv(
        tmp_path / "drifted.csv", index=False
    )
    drifted = govern(
        "pipeline", "--model-uri", "models:/wisconsin-rf/1", "--data",
        str(tmp_path / "drifted.csv"), "--target", "label",
    )  # fmt: skip
    assert drifted.exit_code == 1, drifted.output
    assert "Input validation FAILED" in drifted.output and "column 'mean area'" in drifted.output
    assert MlflowClient().search_registered_models("name = 'wisconsin-rf-surrogate'") == []

    explained = explain_model_version(
        "models:/wisconsin-rf/1",
        tmp_path / "train.csv",
        target="label",
        solver="highs",
        time_limit=5,
        min_test_rows=5,  # 200 rows: 40 test rows
    )
    assert explained.surrogate_uri == "models:/wisconsin-rf-surrogate/1"
    assert explained.tracking_uri == server
    used, fidelity = explained.metrics["n_features_used"], explained.metrics["test_fidelity"]
    assert used >= 1

    # Thresholds exactly at the surrogate's values pass; one feature fewer fails.
    (tmp_path / "lenient.toml").write_text(
        f"[gates]\nmin_fidelity = {fidelity!r}\nmax_features = {int(used)}\n" + keys_toml()
    )
    (tmp_path / "strict.toml").write_text(
        f"[gates]\nmin_fidelity = {fidelity!r}\nmax_features = {int(used) - 1}\n" + keys_toml()
    )
    # The pipeline with the same explain settings reuses the surrogate, then gates it.
    piped = govern(
        "pipeline", "--model-uri", "models:/wisconsin-rf/1", "--data",
        str(tmp_path / "train.csv"), "--target", "label", "--solver", "highs",
        "--time-limit", "5", "--min-test-rows", "5", "--policy", str(tmp_path / "lenient.toml"),
    )  # fmt: skip
    assert piped.exit_code == 0, piped.output
    assert "surrogate models:/wisconsin-rf-surrogate/1" in piped.output
    assert "all gates passed" in piped.output

    gate = govern(
        "gate", "--model-uri", "models:/wisconsin-rf/1", "--policy", str(tmp_path / "lenient.toml")
    )
    assert gate.exit_code == 0, gate.output
    promoted = govern(
        "promote",
        "--model-uri",
        "models:/wisconsin-rf/1",
        "--alias",
        "champion",
        "--policy",
        str(tmp_path / "lenient.toml"),
    )
    assert promoted.exit_code == 0, promoted.output
    refused = govern(
        "promote",
        "--model-uri",
        "models:/wisconsin-rf@champion",
        "--alias",
        "champion",
        "--policy",
        str(tmp_path / "strict.toml"),
    )
    assert refused.exit_code == 1, refused.output
    assert "refused: @champion stays on version 1" in refused.output

    client = MlflowClient()
    version = client.get_model_version_by_alias("wisconsin-rf", "champion")
    assert str(version.version) == "1"
    # The refused re-promotion of the alias holder is a failed gate, not its alias status.
    assert version.tags["governance.promotion.champion"] == "promoted"
    assert version.tags["governance.last_gate"] == "FAIL"
    assert version.tags["governance.surrogate"] == "models:/wisconsin-rf-surrogate/1"
    run_id = version.tags["governance.last_gate.run"]
    report = mlflow.artifacts.load_dict(f"runs:/{run_id}/gate_report.json")
    assert len(report["evidence_digest"]) == 64
    verdicts = {r["name"]: r["passed"] for r in report["results"]}
    assert verdicts == {
        "max_features": False,
        "min_fidelity": True,
        "require_validation_pass": True,
    }
    assert any((tmp_path / "artifacts").rglob("gate_report.md"))  # proxied by the server
