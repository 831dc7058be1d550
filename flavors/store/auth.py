"""Who the tracking server says we are: its basic-auth app, the user, and whether that
user is an MLflow admin.

MLflow's basic-auth app (``mlflow server --app-name basic-auth``) answers
``GET /api/2.0/mlflow/users/current`` for any signed-in user; a server without it answers
404, and a local store (SQLite, files) has no users at all. That one call tells the trail
whether it runs where permissions decide who writes what: there, the governance
experiments are made by ``govern server setup`` (owned by the admin) and never on first use
(:func:`flavors.trail.decisions.experiment_id`), because MLflow gives MANAGE on an
experiment to whoever creates it. It is also the user every record names, and the one a
key bound to users must be (:func:`flavors.trail.decisions.decided_by`): the server's
word, not the operating system's. The answer is asked once per process, server and user
name, by the commands that write a record or would create something.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.store.refusals import credentials_refused

CURRENT_USER_ENDPOINT = "/api/2.0/mlflow/users/current"
"""MLflow's basic-auth endpoint naming the signed-in user (``mlflow.server.auth.routes``)."""


class ServerAuthError(GovernanceError):
    """The server refused the credentials, or its answer about them is not MLflow's.
    Exit code 2."""


@dataclass(frozen=True)
class ServerUser:
    """The signed-in user as the server knows it."""

    username: str
    is_admin: bool


def server_user(uri: str | None = None) -> ServerUser | None:
    """The signed-in user of the tracking server at ``uri`` (default: MLflow's), or None
    when it has no basic-auth app (a local store, or a server without ``--app-name
    basic-auth``).

    Raises
    ------
    ServerAuthError
        The server refused the credentials (HTTP 401).
    """
    import mlflow

    uri = uri or mlflow.get_tracking_uri()
    if not uri.startswith(("http://", "https://")):
        return None
    return _asked(uri, os.environ.get("MLFLOW_TRACKING_USERNAME", ""))


@lru_cache(maxsize=16)
def _asked(uri: str, username: str) -> ServerUser | None:
    """The server's answer, asked once per server and user (``username`` is the cache
    key: the answer depends on whose credentials MLflow sends)."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    response = http_request(get_default_host_creds(uri), CURRENT_USER_ENDPOINT, "GET")
    if response.status_code == 404:
        return None
    if response.status_code == 401:
        raise ServerAuthError(credentials_refused(uri))
    try:
        user = response.json()["user"]
        return ServerUser(str(user["username"]), bool(user["is_admin"]))
    except (ValueError, KeyError, TypeError) as error:
        raise ServerAuthError(
            f"the tracking server {uri} answered {CURRENT_USER_ENDPOINT} with HTTP "
            f"{response.status_code} and no user: is it an MLflow server?"
        ) from error


def authenticated(uri: str | None = None) -> bool:
    """Whether the tracking server checks users and permissions (its basic-auth app)."""
    return server_user(uri) is not None
