"""``flavors/store/refusals.py`` on errors built here: the proxied artifact store's
``HTTPError`` (its request gives the method), an endpoint read with no request at hand,
an endpoint the table does not know. Real refusals by the server:
``test_server_refusals.py``."""

import pytest
import requests

from miret_governance.flavors.store.refusals import refusal_message

SERVER = "http://127.0.0.1:5000"


def http_error(status: int, method: str, path: str) -> requests.HTTPError:
    request = requests.Request(method, f"{SERVER}{path}").prepare()
    reason = {401: "UNAUTHORIZED", 403: "FORBIDDEN"}[status]
    return requests.HTTPError(
        f"{status} Client Error: {reason} for url: {SERVER}{path}", request=request
    )


@pytest.mark.parametrize(
    ("method", "permission"), [("GET", "READ"), ("PUT", "EDIT"), ("DELETE", "MANAGE")]
)
def test_proxied_artifacts_name_the_owning_experiment(method, permission, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ds")
    path = "/api/2.0/mlflow-artifacts/artifacts/3/0a1b/artifacts/gate_report.json"
    wrapped = RuntimeError("upload failed")
    wrapped.__cause__ = http_error(403, method, path)
    assert refusal_message(wrapped, SERVER) == (
        f"the tracking server {SERVER} refused user 'ds' (HTTP 403 on {method} {path}): it "
        f"needs {permission} on the experiment (id 3) owning run 0a1b's artifacts; an MLflow "
        "admin of that server must grant it (MLflow's permission API, e.g. "
        "mlflow.server.get_app_client('basic-auth', ...).grant_user_permission; "
        "`govern server setup` grants the governance roles)"
    )


def test_without_the_request_every_permission_of_the_endpoint_is_named(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    error = RuntimeError(
        "API request to endpoint /api/2.0/mlflow/registered-models/alias failed with error "
        "code 403 != 200. Response body: 'Permission denied'"
    )
    message = refusal_message(error, SERVER)
    assert (
        "refused this user (HTTP 403 on a call to /api/2.0/mlflow/registered-models/alias)"
        in message
    )
    assert "it needs READ or EDIT on the registered model;" in message


def test_an_unknown_endpoint_and_other_errors(monkeypatch):
    error = RuntimeError(
        "API request to endpoint /api/2.0/mlflow/webhooks/list failed with error code 403"
    )
    assert "a permission the server requires for /api/2.0/mlflow/webhooks/list" in (
        refusal_message(error, SERVER)
    )
    assert refusal_message(RuntimeError("failed with error code 500"), SERVER) is None
    no_user = http_error(401, "GET", "/api/2.0/mlflow/runs/get")
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    assert "refused a request without credentials (HTTP 401)" in refusal_message(no_user, SERVER)


def test_a_refused_registry_read_is_not_called_an_outage(monkeypatch):
    import mlflow
    from mlflow.exceptions import MlflowException

    from miret_governance.flavors.store.registry import registry_unavailable

    monkeypatch.setattr(mlflow, "get_registry_uri", lambda: SERVER)
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    refused = MlflowException(
        "API request to endpoint /api/2.0/mlflow/registered-models/get failed with error "
        "code 403 != 200. Response body: 'Permission denied'"
    )
    assert str(registry_unavailable(refused)).startswith(
        f"the tracking server {SERVER} refused this user (HTTP 403 on a call to "
        "/api/2.0/mlflow/registered-models/get): it needs READ on the registered model"
    )
    failing = MlflowException("API request to endpoint /x failed with error code 500 != 200")
    assert "is unreachable or failing" in str(registry_unavailable(failing))
