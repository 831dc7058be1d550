"""A server's refusals in words: HTTP 401 (credentials refused) and 403 (a permission
missing), with what to set or whom to ask.

On a tracking server with MLflow's basic-auth app, a refused request reaches the product
as an ``MlflowException`` ("API request to endpoint /api/2.0/mlflow/registered-models/get
failed with error code 403 != 200. Response body: 'Permission denied'") or, for proxied
artifacts, a ``requests.HTTPError`` ("403 Client Error: FORBIDDEN for url: ..."), often
wrapped in one of ours. Without this module that read as "tracking server unreachable or
failing".

Which permission: MLflow's auth app checks each REST endpoint with a validator
(``mlflow/server/auth/__init__.py``, ``BEFORE_REQUEST_HANDLERS``: reading needs READ,
writing EDIT, deleting MANAGE, on the experiment of a run or logged model, or on the
registered model of a version). :data:`ENDPOINT_PERMISSIONS` repeats that table for the
endpoints the product calls (importing the auth app would import Flask on a client).
Which resource: the refused request's own fields. The exception does not carry them, so
:func:`_refused_request` reads them from the frame of MLflow's ``call_endpoint`` in the
exception's traceback (its ``method`` and ``json_body``), or from the ``HTTPError``'s
request; when neither is there the message names the kind of resource only.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlparse

from miret_governance.flavors.store.outages import error_chain
from miret_governance.governance.trust.roles import EDIT, MANAGE, READ

_REST = re.compile(r"API request to endpoint (\S+) failed with error code (401|403)\b")
_HTTP = re.compile(r"\b(401|403) Client Error: [A-Za-z ]+ for url: (\S+)")

CREDENTIALS = "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
"""The variables MLflow's client sends as credentials."""
ENDPOINT_PERMISSIONS = (
    # (endpoint pattern after /api/2.0/mlflow/, {method: permission}, resource kind)
    (r"experiments/(get|get-by-name|search)", {"*": READ}, "experiment"),
    (r"experiments/(update|set-experiment-tag|delete-experiment-tag)", {"*": EDIT}, "experiment"),
    (r"experiments/(delete|restore)", {"*": MANAGE}, "experiment"),
    (r"runs/(get|search)|metrics/get-history|artifacts/list", {"*": READ}, "run"),
    (
        (
            r"runs/(create|update|log-batch|log-metric|log-parameter|set-tag|delete-tag"
            r"|log-inputs|log-outputs|log-model)"
        ),
        {"*": EDIT},
        "run",
    ),
    (r"runs/(delete|restore)", {"*": MANAGE}, "run"),
    (r"logged-models", {"*": EDIT}, "experiment"),  # create
    (r"logged-models/[^/]+(/tags.*)?", {"GET": READ, "DELETE": MANAGE, "*": EDIT}, "logged"),
    (r"registered-models/(get|get-latest-versions)", {"*": READ}, "registered_model"),
    (
        r"registered-models/(update|rename|set-tag|delete-tag)",
        {"*": EDIT},
        "registered_model",
    ),
    (r"registered-models/delete", {"*": MANAGE}, "registered_model"),
    (r"registered-models/alias", {"GET": READ, "*": EDIT}, "registered_model"),
    (r"model-versions/(get|get-download-uri)", {"*": READ}, "registered_model"),
    (r"model-versions/(create|update|set-tag|transition-stage)", {"*": EDIT}, "registered_model"),
    (r"model-versions/(delete|delete-tag)", {"*": MANAGE}, "registered_model"),
    (r"artifacts/.*", {"GET": READ, "DELETE": MANAGE, "*": EDIT}, "artifacts"),  # proxied
)
"""Each endpoint the product calls: the permission MLflow's auth app requires (by HTTP
method, ``*`` for any other) and on what."""
KINDS = {
    "experiment": "the experiment",
    "run": "the experiment of run",
    "logged": "the experiment of logged model",
    "registered_model": "the registered model",
    "artifacts": "the experiment owning the artifacts",
}
GRANT_HINT = (
    "an MLflow admin of that server must grant it (MLflow's permission API, e.g. "
    "mlflow.server.get_app_client('basic-auth', ...).grant_user_permission; "
    "`govern server setup` grants the governance roles)"
)


def _refused_request(chain: list) -> tuple:
    """``(method, fields)`` of the refused request: an ``HTTPError``'s own request, or
    the locals of MLflow's ``call_endpoint`` in a traceback (the exception MLflow raised
    has it; the ones wrapping it repeat its text only); ``("", {})`` when none has."""
    for error in chain:
        request = getattr(error, "request", None)
        if request is not None and getattr(request, "method", None):
            return request.method, {}
        tb = error.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if frame.f_code.co_name == "call_endpoint" and "method" in frame.f_locals:
                body = frame.f_locals.get("json_body")
                return frame.f_locals["method"], body if isinstance(body, dict) else {}
            tb = tb.tb_next
    return "", {}


def _resource(kind: str, path: str, fields: dict) -> str:
    """The refused resource in words, as precisely as the request names it."""
    what = KINDS[kind]
    if kind == "experiment":
        name = fields.get("experiment_id") or fields.get("experiment_name") or fields.get("name")
        label = "id" if "experiment_id" in fields else "name"
        return f"{what} ({label} {name})" if name else what
    if kind == "run":
        run = fields.get("run_id") or fields.get("run_uuid")
        if run:
            return f"{what} {run}"
        experiment = fields.get("experiment_id")
        return f"the experiment (id {experiment})" if experiment else "the run's experiment"
    if kind == "logged":
        return f"{what} {path.split('logged-models/')[1].split('/')[0]}"
    if kind == "registered_model":
        name = fields.get("name")
        return f"{what} '{name}'" if name else what
    owner = re.search(r"/artifacts/(\d+)/([^/]+)/", path)  # <experiment id>/<run id>/...
    if owner:
        return f"the experiment (id {owner.group(1)}) owning run {owner.group(2)}'s artifacts"
    return what


def _required(path: str, method: str) -> tuple | None:
    """``(permission text, kind)`` of an endpoint path, or None for an unknown one."""
    tail = re.sub(r"^.*?/api/2\.0/mlflow(-artifacts)?/", "", path)
    for pattern, by_method, kind in ENDPOINT_PERMISSIONS:
        if re.fullmatch(pattern, tail):
            if method:
                return by_method.get(method.upper(), by_method["*"]), kind
            wanted = sorted(set(by_method.values()), key=(READ, EDIT, MANAGE).index)
            return " or ".join(wanted), kind
    return None


def credentials_refused(server: str) -> str:
    """The one line for a server's HTTP 401: whose credentials, and what to set."""
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    sent = f"the credentials of user '{user}'" if user else "a request without credentials"
    return (
        f"the tracking server {server} refused {sent} (HTTP 401): set {CREDENTIALS} to an "
        "account of that server (its MLflow admin creates accounts and resets passwords)"
    )


def refusal_message(error: BaseException, server: str) -> str | None:
    """One line for a 401 or 403 anywhere in ``error``'s chain, else None.

    Parameters
    ----------
    error : BaseException
        Any error a command raised.
    server : str
        The tracking URI the command called.
    """
    chain = error_chain(error)
    for link in chain:
        text = str(link)
        rest, http = _REST.search(text), _HTTP.search(text)
        if rest is None and http is None:
            continue
        status, path = (rest.group(2), rest.group(1)) if rest else (http.group(1), http.group(2))
        path = unquote(urlparse(path).path or path)
        if status == "401":
            return credentials_refused(server)
        user = os.environ.get("MLFLOW_TRACKING_USERNAME")
        method, fields = _refused_request(chain)
        required = _required(path, method)
        who = f"user '{user}'" if user else "this user"
        if required is None:
            need = f"a permission the server requires for {path}"
        else:
            permission, kind = required
            need = f"{permission} on {_resource(kind, path, fields)}"
        return (
            f"the tracking server {server} refused {who} (HTTP 403 on {method or 'a call to'} "
            f"{path}): it needs {need}; {GRANT_HINT}"
        )
    return None
