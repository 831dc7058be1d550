"""End to end through the shared-server stack (``tests/server_stack.py``: PostgreSQL,
``mlflow server`` with basic-auth and proxied artifacts): register, explain, gate,
promote over HTTP as an authenticated user with only the grants the flow needs."""

import mlflow
import pytest
import typer
from mlflow import MlflowClient
from mlflow_store import register_sklearn
from server_stack import governance_experiments
from signing_keys import keys_toml
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from typer.testing import CliRunner

pytest_plugins = ["mlflow_store", "server_stack"]
pytestmark = pytest.mark.slow


@pytest.fixture
def server(server_stack, as_user, monkeypatch):
    """The stack's URL, this test calling it as ``ci``: a user the admin made, granted
    EDIT on the experiment ``e2e`` and MANAGE on the governance experiments, which the
    admin created; the registered models it creates, and MLflow grants a resource's
    creator MANAGE on it. A user with no grant at all sees nothing
    (``default_permission = NO_PERMISSIONS``)."""
    as_user(server_stack.env())
    client = MlflowClient()
    experiment = client.create_experiment("e2e")
    assert client.get_experiment(experiment).artifact_location.startswith("mlflow-artifacts:")
    # The governance experiments exist before anyone records (on an authenticated server
    # only an admin creates them: `govern server setup`); ci may manage what it records.
    governance = [("experiment", i, "MANAGE") for i in governance_experiments(client).values()]
    grants = [("experiment", experiment, "EDIT"), *governance]
    as_user(server_stack.create_user("ci", grants=grants))
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "e2e")
    return server_stack.url


def test_register_explain_gate_promote_over_http(server, server_stack, tmp_path, breast_cancer):
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
    assert any(server_stack.artifacts.rglob("gate_report.md"))  # proxied by the server
