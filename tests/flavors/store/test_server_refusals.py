"""Refusals of the authenticated server in one line (``flavors/store/refusals.py``):
real calls to the PostgreSQL + basic-auth stack (``tests/server_stack.py``) by users the
admin made with too few grants. A 401 names the credential variables; a 403 names the
permission, the resource and who grants it; exit code 2; a command refused mid-way
leaves no run RUNNING and no version behind."""

import mlflow
import pytest
from mlflow import MlflowClient
from mlflow.entities import RunStatus, ViewType
from mlflow_store import register_sklearn
from signing_keys import keys_toml
from sklearn.ensemble import RandomForestClassifier
from typer.testing import CliRunner

from miret_governance.cli.app import app

pytest_plugins = ["mlflow_store", "server_stack"]
pytestmark = pytest.mark.slow

MODEL = "refusal-rf"


@pytest.fixture(scope="module")
def refusals(server_stack, breast_cancer, tmp_path_factory):
    """As the admin: the experiment ``refusals``, a registered forest ``refusal-rf``
    (version 1) logged there, its training file and a policy; their ids and paths."""
    folder = tmp_path_factory.mktemp("refusals")
    X, y = breast_cancer
    X, y = X.iloc[:120, :5], y.iloc[:120]
    X.assign(label=y).to_csv(folder / "train.csv", index=False)
    (folder / "policy.toml").write_text("[gates]\nmin_fidelity = 0.5\n" + keys_toml())
    with pytest.MonkeyPatch.context() as mp:
        for key, value in server_stack.env().items():
            mp.setenv(key, value)
        mlflow.set_tracking_uri(None)
        experiment = MlflowClient().create_experiment("refusals")
        forest = RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0)
        register_sklearn(forest.fit(X, y), MODEL, experiment_id=experiment)
    return {"experiment": experiment, "folder": folder}


def govern(stack_env: dict, *args):
    """``govern`` in process, calling the stack with ``stack_env``'s credentials."""
    registry = {"MLFLOW_REGISTRY_URI": stack_env["MLFLOW_TRACKING_URI"], "COLUMNS": "400"}
    return CliRunner().invoke(app, [*args], env={**stack_env, **registry})


def one_line(result) -> str:
    """The one error line of a command that exited 2 (explain's progress lines aside)."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.output
    return lines[0]


def admin_client(server_stack, monkeypatch) -> MlflowClient:
    for key, value in server_stack.env().items():
        monkeypatch.setenv(key, value)
    return MlflowClient(server_stack.url, registry_uri=server_stack.url)


def test_wrong_password_names_the_credential_variables(server_stack, refusals):
    env = {**server_stack.create_user("mistyped"), "MLFLOW_TRACKING_PASSWORD": "not-the-password"}
    line = one_line(govern(env, "show", "--model-uri", f"models:/{MODEL}/1"))
    assert f"the tracking server {server_stack.url} refused the credentials of user " in line
    assert "'mistyped' (HTTP 401)" in line
    assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in line


@pytest.mark.parametrize("command", ["show", "gate", "audit"])
def test_unreadable_model_names_the_permission(server_stack, refusals, command):
    env = server_stack.create_user(f"outsider-{command}")  # no grant at all
    policy = ["--policy", str(refusals["folder"] / "policy.toml")]
    args = {
        "show": ["show", "--model-uri", f"models:/{MODEL}/1"],
        "gate": ["gate", "--model-uri", f"models:/{MODEL}/1", *policy],
        "audit": ["audit", "--model-name", MODEL, *policy],
    }[command]
    line = one_line(govern(env, *args))
    assert f"refused user 'outsider-{command}' (HTTP 403 on GET /api/2.0/mlflow/" in line
    assert f"it needs READ on the registered model '{MODEL}'" in line
    assert "an MLflow admin of that server must grant it" in line


def explain_as(server_stack, refusals, user: str, experiment_permission: str) -> str:
    """The error line of ``govern explain`` of ``refusal-rf`` v1 into ``refusals`` by a
    new ``user`` with ``experiment_permission`` there and READ on the registered model and
    on the governance experiments other modules of the shared stack made (every role reads
    them once ``govern server setup`` ran)."""
    with pytest.MonkeyPatch.context() as mp:
        governance = admin_client(server_stack, mp).search_experiments(
            filter_string="name LIKE 'governance-%'"
        )
    env = server_stack.create_user(
        user,
        grants=[
            ("experiment", refusals["experiment"], experiment_permission),
            ("registered_model", MODEL, "READ"),
            *(("experiment", e.experiment_id, "READ") for e in governance),
        ],
    )
    result = govern(
        {**env, "MLFLOW_EXPERIMENT_NAME": "refusals"},
        "explain", "--model-uri", f"models:/{MODEL}/1", "--data",
        str(refusals["folder"] / "train.csv"), "--target", "label", "--solver", "highs",
        "--time-limit", "5", "--min-test-rows", "5",
    )  # fmt: skip
    return one_line(result)


def test_explain_into_an_experiment_it_cannot_write(server_stack, refusals, monkeypatch):
    line = explain_as(server_stack, refusals, "reader", "READ")
    assert "refused user 'reader' (HTTP 403 on POST /api/2.0/mlflow/runs/create)" in line
    assert f"it needs EDIT on the experiment (id {refusals['experiment']})" in line
    client = admin_client(server_stack, monkeypatch)
    runs = client.search_runs([refusals["experiment"]], run_view_type=ViewType.ALL)
    assert [r.info.run_name for r in runs if r.data.tags.get("mlflow.user") == "reader"] == []


def test_explain_refused_midway_leaves_nothing_behind(server_stack, refusals, monkeypatch):
    """EDIT on the experiment but only READ on the ensemble's registered model: explain
    runs, registers its surrogate (the user creates ``refusal-rf-surrogate``), and the
    server refuses the link tag on the ensemble's version; the run ends FAILED and the
    surrogate version is deleted (``flavors/explain/faults.py``)."""
    line = explain_as(server_stack, refusals, "half-granted", "EDIT")
    assert "refused user 'half-granted' (HTTP 403 on POST " in line
    assert f"it needs EDIT on the registered model '{MODEL}'" in line
    client = admin_client(server_stack, monkeypatch)
    runs = client.search_runs([refusals["experiment"]], run_view_type=ViewType.ALL)
    assert [r for r in runs if r.info.status == RunStatus.to_string(RunStatus.RUNNING)] == []
    assert client.search_model_versions(f"name = '{MODEL}-surrogate'") == []
    assert client.get_model_version(MODEL, "1").tags == {}
