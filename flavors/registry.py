"""The model registry side of governance: tag vocabulary, URIs, versions and links.

An explained ensemble version and its surrogate version point at each other by tags:
``governance.surrogate`` on the ensemble version names the surrogate version, and
``governance.surrogate_of`` on the surrogate version names the ensemble version. This
module owns those names, reads and writes the links, and builds registry filters safely.
"""

from __future__ import annotations

import tempfile

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.models import Model

from flavors import miret as miret_flavor
from flavors.errors import ExplainError, GovernanceError

SURROGATE_OF_TAG = "governance.surrogate_of"
SURROGATE_TAG = "governance.surrogate"
VALIDATION_TAG = "governance.validation"
EXPLAIN_DIGEST_TAG = "governance.explain_digest"
ENSEMBLE_URI_TAG = "governance.ensemble_uri"
DATA_DIGEST_TAG = "governance.data_digest"
EVIDENCE_DIGEST_TAG = "governance.evidence_digest"
TRUST_PICKLE_TAG = "governance.trust_pickle"
SURROGATE_SUFFIX = "-surrogate"
URI_PREFIX = "models:/"


def parse_registry_uri(model_uri: str) -> tuple[str, str | None, str | None]:
    """``models:/name/version`` or ``models:/name@alias`` -> (name, version, alias)."""
    if not isinstance(model_uri, str) or not model_uri.startswith(URI_PREFIX):
        raise ExplainError(
            f"model URI {model_uri!r} is not a registered model version; use "
            "models:/<name>/<version> or models:/<name>@<alias>"
        )
    rest = model_uri[len(URI_PREFIX) :].strip("/")
    if "@" in rest and "/" not in rest:
        name, alias = rest.split("@", 1)
        if name and alias:
            return name, None, alias
    elif rest.count("/") == 1:
        name, version = rest.split("/")
        if name and version.isdigit():
            return name, version, None
    raise ExplainError(
        f"model URI {model_uri!r} is not of the form models:/<name>/<version> or "
        "models:/<name>@<alias> (a version number or an alias is required)"
    )


def version_uri(version) -> str:
    """``models:/<name>/<version>`` of a registry ModelVersion."""
    return f"{URI_PREFIX}{version.name}/{version.version}"


def model_id_of(version) -> str | None:
    """The LoggedModel id of a registry version (the SQL registry keeps it in ``source``)."""
    if getattr(version, "model_id", None):
        return version.model_id
    source = version.source or ""
    if source.startswith("models:/m-") and "/" not in source[len(URI_PREFIX) :]:
        return source[len(URI_PREFIX) :]
    return None


def resolve_model_version(client: MlflowClient, model_uri: str):
    """The registry ModelVersion of ``model_uri`` (clear error when it does not exist)."""
    name, version, alias = parse_registry_uri(model_uri)
    try:
        if alias is not None:
            return client.get_model_version_by_alias(name, alias)
        return client.get_model_version(name, version)
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise registry_unavailable(exc) from exc
        raise ExplainError(
            f"{model_uri} was not found in the registry at {mlflow.get_registry_uri()}: "
            f"{exc.message}. List versions with `mlflow models` or the MLflow UI."
        ) from exc


def registry_unavailable(exc: MlflowException) -> GovernanceError:
    """The error for a registry that did not answer (or failed), never "not found"."""
    uri = mlflow.get_registry_uri()
    if uri.startswith(("http://", "https://")):
        return GovernanceError(
            f"the tracking server {uri} is unreachable or failing ({exc.message}); check "
            "--tracking-uri / MLFLOW_TRACKING_URI and that the server is running"
        )
    return GovernanceError(f"the registry at {uri} cannot be read: {exc.message}")


def quoted(value: str) -> str:
    """``value`` as a string literal of MLflow's filter grammar.

    MLflow strips one pair of quotes and knows no escapes, so the value is quoted with
    the quote character it does not contain.

    Raises
    ------
    ExplainError
        The value contains both quote characters (no filter can name it).
    """
    for quote in ("'", '"'):
        if quote not in value:
            return f"{quote}{value}{quote}"
    raise ExplainError(
        f"{value!r} contains both ' and \"; registry filters cannot name it: choose a name "
        "without quotes"
    )


def check_registered_name(name: str) -> str:
    """A registered model name MLflow can store and filters can name, or ExplainError."""
    problem = None
    if not name or name != name.strip():
        problem = "is empty or starts or ends with spaces"
    elif any(c in name for c in "/:%") or any(ord(c) < 32 for c in name):
        problem = "contains '/', ':', '%' or a control character"
    elif "'" in name and '"' in name:
        problem = "contains both ' and \""
    if problem:
        raise ExplainError(
            f"registered model name {name!r} {problem}; choose a name of letters, digits, "
            "'-', '_' and '.', e.g. credit-rf-surrogate"
        )
    return name


def name_filter(name: str) -> str:
    """The registry filter ``name = <name>``, quoted per MLflow's filter grammar
    (:func:`quoted`)."""
    return f"name = {quoted(name)}"


def _surrogates_of(client: MlflowClient, registered_name: str, ensemble_uri: str, digest: str):
    try:
        versions = client.search_model_versions(name_filter(registered_name))
    except MlflowException:
        return []
    return [
        v
        for v in versions
        if v.tags.get(SURROGATE_OF_TAG) == ensemble_uri and v.tags.get(EXPLAIN_DIGEST_TAG) == digest
    ]


def find_surrogate(client: MlflowClient, registered_name: str, ensemble_uri: str, digest: str):
    """The newest surrogate version of ``ensemble_uri`` made by an identical request."""
    matches = _surrogates_of(client, registered_name, ensemble_uri, digest)
    return max(matches, key=lambda v: int(v.version)) if matches else None


def link_surrogate(client: MlflowClient, ensemble_version, surrogate_version) -> None:
    """Point the ensemble version's ``governance.surrogate`` tag at ``surrogate_version``."""
    target = version_uri(surrogate_version)
    if ensemble_version.tags.get(SURROGATE_TAG) != target:
        client.set_model_version_tag(
            ensemble_version.name, ensemble_version.version, SURROGATE_TAG, target
        )


def register_surrogate(
    client: MlflowClient,
    logged_uri: str,
    registered_name: str,
    ensemble_version,
    tags: dict,
    deduplicate: bool = False,
):
    """Register the surrogate with ``tags``, then link the ensemble version to it.

    With ``deduplicate`` (no identical version existed when the caller looked), versions
    of the same request registered meanwhile by concurrent explains are settled: the
    lowest version number wins, the others delete their own version, and every process
    links the winner. The surrogate version is deleted again when the link cannot be
    written, so a failure leaves no version behind.

    Returns
    -------
    (ModelVersion, ModelVersion)
        The version this call registered and the one linked (the same unless a
        concurrent explain won; the first is then deleted).
    """
    ensemble_uri = version_uri(ensemble_version)
    registered = mlflow.register_model(
        logged_uri, registered_name, tags={SURROGATE_OF_TAG: ensemble_uri, **tags}
    )
    try:
        winner = registered
        if deduplicate:
            same = _surrogates_of(client, registered_name, ensemble_uri, tags[EXPLAIN_DIGEST_TAG])
            winner = min([registered, *same], key=lambda v: int(v.version))
        link_surrogate(client, ensemble_version, winner)
    except BaseException:
        client.delete_model_version(registered_name, registered.version)
        raise
    if winner is not registered:
        client.delete_model_version(registered_name, registered.version)
    return registered, winner


def check_tracking_server(uri: str | None = None, timeout: float = 5.0) -> None:
    """Fail fast when an HTTP tracking server does not answer.

    Raises
    ------
    GovernanceError
        Connection refused or timed out (any HTTP answer counts as reachable).
    """
    import requests

    uri = uri or mlflow.get_tracking_uri()
    if not uri.startswith(("http://", "https://")):
        return
    try:
        requests.get(uri.rstrip("/") + "/health", timeout=timeout)
    except requests.RequestException as error:
        raise GovernanceError(
            f"the tracking server {uri} is unreachable ({type(error).__name__}); check "
            "--tracking-uri / MLFLOW_TRACKING_URI and that the server is running"
        ) from error


def describe_surrogate(model_uri: str, client: MlflowClient | None = None) -> dict:
    """Rules, metrics and links of a registered surrogate version.

    Returns
    -------
    dict
        ``uri``, ``rules`` (raw units), ``metrics`` (of the logged model), ``tags``
        (of the model version), ``solve`` (from the model's metadata), ``model_id``.
    """
    client = client or MlflowClient()
    version = resolve_model_version(client, model_uri)
    uri = version_uri(version)
    with tempfile.TemporaryDirectory(prefix="surrogate-") as tmp:
        try:
            local = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=tmp)
        except MlflowException as exc:
            raise ExplainError(f"cannot download {uri}: {exc.message}") from exc
        mlmodel = Model.load(local)
        if miret_flavor.FLAVOR_NAME not in mlmodel.flavors:
            raise ExplainError(f"{uri} is not a surrogate (flavors: {sorted(mlmodel.flavors)})")
        surrogate, scaler, _ = miret_flavor.read_model_dir(local)
    tree = getattr(surrogate, "tree_", surrogate)
    metrics, model_id = {}, model_id_of(version)
    if model_id:
        metrics = {m.key: m.value for m in client.get_logged_model(model_id).metrics or []}
    return {
        "uri": uri,
        "rules": tree.rules(scaler=scaler),
        "metrics": metrics,
        "tags": dict(version.tags),
        "solve": (mlmodel.metadata or {}).get("solve", {}),
        "model_id": model_id or "",
    }
