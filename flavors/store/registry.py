"""The model registry side of governance: tag vocabulary, URIs, versions and links.

An explained ensemble version and its surrogate version point at each other by tags:
``governance.surrogate`` on the ensemble version names the surrogate version, and
``governance.surrogate_of`` on the surrogate version names the ensemble version. This
module owns those names, reads and writes the links (marking the surrogate linked
before as superseded), and builds registry filters safely; the versions' Markdown
descriptions are :mod:`flavors.descriptions`.

Tags are for machines and few (see docs/architecture.md): on the ensemble version
``governance.surrogate``, ``governance.last_gate`` (``PASS``/``FAIL`` of the last gate
evaluation), ``governance.last_gate.run``, and per alias ``governance.promotion.<alias>``
(``promoted``/``refused``) with ``governance.promotion.<alias>.run``. Policy, time and
evidence digest of a decision are on its gate run and in the description.
"""

from __future__ import annotations

import html
import re
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote as url_quote

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.models import Model

from miret_governance.flavors import miret as miret_flavor
from miret_governance.flavors.errors import ExplainError, GovernanceError
from miret_governance.flavors.evidence import model_files_digest
from miret_governance.flavors.store.refusals import refusal_message

SURROGATE_OF_TAG = "governance.surrogate_of"
SURROGATE_TAG = "governance.surrogate"
VALIDATION_TAG = "governance.validation"
EXPLAIN_DIGEST_TAG = "governance.explain_digest"
ENSEMBLE_URI_TAG = "governance.ensemble_uri"
DATA_DIGEST_TAG = "governance.data_digest"
TRUST_PICKLE_TAG = "governance.trust_pickle"
GATE_TAG = "governance.last_gate"
GATE_RUN_TAG = "governance.last_gate.run"
PROMOTION_TAG = "governance.promotion.{alias}"
PROMOTION_RUN_TAG = "governance.promotion.{alias}.run"
POLICY_RUN_TAG = "governance.policy"
EVIDENCE_DIGEST_TAG = "governance.evidence_digest"
SUPERSEDED_TAG = "governance.superseded_by"
EVIDENCE_PARAM = "evidence_digest"
"""Run param of the explain run: sha256 of the surrogate's ``evidence.json``. Params
cannot be changed once logged, so an edited or replaced manifest no longer matches it."""
RESULT_RUN_TAG = "result"
SURROGATE_SUFFIX = "-surrogate"
URI_PREFIX = "models:/"


def gate_alias(run_tags: dict) -> str | None:
    """The alias a gate run was a promotion to (its ``governance.promotion.<alias>`` tag),
    None for a what-if gate."""
    prefix = PROMOTION_TAG.format(alias="")
    return next((k[len(prefix) :] for k in sorted(run_tags) if k.startswith(prefix)), None)


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
        registry = mlflow.get_registry_uri()
        raise ExplainError(
            f"{model_uri} was not found in the registry at {registry}: "
            f"{exc.message.rstrip('.')}. "
            f"Browse the registered versions with `{sys.executable} -m mlflow ui "
            f"--backend-store-uri {registry}`"
        ) from exc


EXPLAIN_FIRST = "explain it first with `govern explain --model-uri {uri} --data <file>`"
"""The advice of :func:`linked_versions` for commands that read an explanation."""


def linked_versions(client: MlflowClient, model_uri: str, advice: str) -> tuple:
    """``(ensemble version, surrogate URI)`` of ``model_uri``, which names either an
    explained ensemble version (its ``governance.surrogate`` link is followed) or a
    surrogate version.

    Raises
    ------
    ExplainError
        The version is neither; the message ends with ``advice`` (``{uri}`` stands for
        the version's URI).
    """
    version = resolve_model_version(client, model_uri)
    if SURROGATE_OF_TAG in version.tags:
        return resolve_model_version(client, version.tags[SURROGATE_OF_TAG]), version_uri(version)
    if SURROGATE_TAG in version.tags:
        return version, version.tags[SURROGATE_TAG]
    uri = version_uri(version)
    raise ExplainError(
        f"{uri} is not a surrogate and has no linked surrogate (no {SURROGATE_TAG} tag): "
        + advice.format(uri=uri)
    )


def registry_unavailable(exc: MlflowException) -> GovernanceError:
    """The error for a registry that did not answer (or failed), never "not found"."""
    uri = mlflow.get_registry_uri()
    refused = refusal_message(exc, uri)  # a 401 or 403 answers; it is not an outage
    if refused is not None:
        return GovernanceError(refused)
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


def find_surrogate(
    client: MlflowClient, registered_name: str, ensemble_uri: str, digest: str, accept
):
    """The newest surrogate version tagged as made for ``ensemble_uri`` by the request
    ``digest`` that ``accept(version)`` confirms (tags only narrow the search: anyone can
    write them; :func:`flavors.reuse.verified_for` checks the signed evidence)."""
    matches = _surrogates_of(client, registered_name, ensemble_uri, digest)
    newest_first = sorted(matches, key=lambda v: int(v.version), reverse=True)
    return next((v for v in newest_first if accept(v)), None)


_INSERT_RACE = re.compile(r"unique (key )?constraint|duplicate (key|entry)", re.IGNORECASE)
"""A store's refusal of a duplicate row: SQLite and PostgreSQL ("UNIQUE constraint
failed", "duplicate key value violates unique constraint"), MySQL ("Duplicate entry"),
SQL Server ("Violation of UNIQUE KEY constraint")."""


def retried_after_insert_race(write, *args, **kwargs):
    """``write(*args, **kwargs)``, once more when a concurrent writer inserted the same
    row first.

    MLflow's SQL stores write a model version tag or a dataset by select-then-insert, so
    two processes can both find no row and the second insert then violates a unique
    constraint (and is rolled back). The row exists by then, so the second attempt
    updates or links it, as a serialized write would. Any other failure is raised at
    once: a locked store or a hung server is not waited for twice.
    """
    try:
        return write(*args, **kwargs)
    except MlflowException as exc:
        if not _INSERT_RACE.search(str(exc)):
            raise
        return write(*args, **kwargs)


def set_version_tag(client: MlflowClient, name: str, version, key: str, value: str) -> None:
    """Set tag ``key`` of model version ``name``/``version``; two explains linking the
    same winner at once both write it (:func:`retried_after_insert_race`)."""
    retried_after_insert_race(client.set_model_version_tag, name, version, key, value)


def link_surrogate(client: MlflowClient, ensemble_version, surrogate_version) -> None:
    """Point the ensemble version's ``governance.surrogate`` tag at ``surrogate_version``;
    the surrogate linked before is marked superseded (:func:`mark_superseded`)."""
    target = version_uri(surrogate_version)
    previous = ensemble_version.tags.get(SURROGATE_TAG)
    if previous != target:
        set_version_tag(
            client, ensemble_version.name, ensemble_version.version, SURROGATE_TAG, target
        )
        if SUPERSEDED_TAG in (surrogate_version.tags or {}):
            client.delete_model_version_tag(
                surrogate_version.name, surrogate_version.version, SUPERSEDED_TAG
            )
        if previous:
            mark_superseded(client, previous, surrogate_version)


def mark_superseded(client: MlflowClient, previous_uri: str, successor) -> None:
    """Tag the surrogate version ``previous_uri`` ``governance.superseded_by`` (the
    successor's URI) and open its description with a line saying so (a dangling
    ``previous_uri`` is left alone)."""
    try:
        old = resolve_model_version(client, previous_uri)
    except ExplainError:
        return
    successor_uri = version_uri(successor)
    set_version_tag(client, old.name, old.version, SUPERSEDED_TAG, successor_uri)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    line = (
        f"**Superseded** by {version_link(successor.name, successor.version)} (linked "
        f"{when}): decisions on this evidence no longer count for the ensemble.\n\n"
    )
    rest = re.sub(r"^\*\*Superseded\*\* by [^\n]*\n\n", "", old.description or "")
    client.update_model_version(old.name, old.version, description=line + rest)


def register_surrogate(
    client: MlflowClient,
    logged_uri: str,
    registered_name: str,
    ensemble_version,
    tags: dict,
    deduplicate=None,
    after_link=None,
):
    """Register the surrogate with ``tags``, then link the ensemble version to it (and,
    when the version linked is this call's, call ``after_link(version)``: explain's signed
    link record, :mod:`flavors.links`; a concurrent winner's caller records its own link).

    With ``deduplicate``, a predicate on versions (no identical version existed when the
    caller looked), versions of the same request registered meanwhile by concurrent
    explains that it confirms (:func:`flavors.reuse.verified_for`) are settled: the
    lowest version number wins, the others delete their own version, and every process
    links the winner. The surrogate version is deleted again when the link or
    ``after_link`` fails, so a failure leaves no version behind.

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
        if deduplicate is not None:
            tagged = _surrogates_of(client, registered_name, ensemble_uri, tags[EXPLAIN_DIGEST_TAG])
            same = [
                v for v in tagged if str(v.version) != str(registered.version) and deduplicate(v)
            ]
            winner = min([registered, *same], key=lambda v: int(v.version))
        link_surrogate(client, ensemble_version, winner)
        if after_link is not None and winner is registered:
            after_link(winner)
    except BaseException:
        client.delete_model_version(registered_name, registered.version)
        raise
    if winner is not registered:
        client.delete_model_version(registered_name, registered.version)
    return registered, winner


def check_tracking_server(uri: str | None = None, timeout: float = 5.0) -> None:
    """Fail fast when the tracking store does not answer: an HTTP server, or the database
    server of a SQL store URI (``postgresql://``, ``mysql://``, ``mssql://``).

    MLflow retries a database it cannot reach nine times with growing pauses, 101 s in
    all, before its own error; nothing in MLflow shortens that, so a command against a
    stopped database would hang for that long. A TCP connection to the database's host
    and port (SQLAlchemy's URL parser, the dialect's default port) is tried once instead;
    a URI without a host (a Unix socket) is left to MLflow.

    Raises
    ------
    GovernanceError
        Connection refused or timed out (any HTTP answer counts as reachable).
    """
    import requests

    uri = uri or mlflow.get_tracking_uri()
    if not uri.startswith(("http://", "https://")):
        _check_database(uri, timeout)
        return
    try:
        requests.get(uri.rstrip("/") + "/health", timeout=timeout)
    except requests.RequestException as error:
        raise GovernanceError(
            f"the tracking server {uri} is unreachable ({type(error).__name__}); check "
            "--tracking-uri / MLFLOW_TRACKING_URI and that the server is running"
        ) from error


DATABASE_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
"""Default port of each database MLflow's SQL store accepts (its URI's dialect)."""


def _check_database(uri: str, timeout: float) -> None:
    """A TCP connection to the database server of the SQL store ``uri`` (no-op for any
    other URI, or one without a host)."""
    import socket

    dialect = uri.split(":", 1)[0].split("+", 1)[0]
    if dialect not in DATABASE_PORTS:
        return
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    if not url.host:
        return
    address = (url.host, url.port or DATABASE_PORTS[dialect])
    try:
        socket.create_connection(address, timeout=timeout).close()
    except OSError as error:
        raise GovernanceError(
            f"the tracking store {uri} is unreachable: nothing answers at "
            f"{address[0]}:{address[1]} ({type(error).__name__}); check --tracking-uri / "
            "MLFLOW_TRACKING_URI and that the database server is running"
        ) from error


def download_model(uri: str, dst_path: str | None = None, error=ExplainError) -> str:
    """The local folder of a model's artifacts; an MLflow failure (a missing version, an
    unreachable artifact store) becomes ``error`` naming the URI."""
    try:
        return mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=dst_path)
    except MlflowException as exc:
        raise error(f"cannot download {uri}: {exc.message}") from exc


def served_files_digest(uri: str, error=ExplainError) -> str:
    """The digest (:func:`flavors.evidence.model_files_digest`) of a model's files as
    the registry serves them now, downloaded into a temporary folder; a failed download
    becomes ``error`` (:func:`download_model`)."""
    with tempfile.TemporaryDirectory(prefix="model-files-") as tmp:
        return model_files_digest(download_model(uri, tmp, error))


def describe_surrogate(model_uri: str, trusted, client: MlflowClient | None = None) -> dict:
    """Rules, metrics and links of a registered surrogate version, read once its
    signature verifies with a key ``trusted`` (``governance.trust.keyring.TrustedKeys``).

    Returns
    -------
    dict
        ``uri``, ``rules`` (raw units, original columns), ``metrics`` and ``validation``
        (its status) from the signed evidence (not the logged model's metrics or the
        version's tags, which anyone can set), ``tags`` (of the model version),
        ``solve`` (from the model's metadata), ``parameters`` (the explain run's, from
        the evidence), ``provenance`` (the whole signed provenance), ``model_id``,
        ``signer`` (``governance.trust.keyring.Signer``), ``evidence_digest`` (the
        verified ``evidence.json``'s sha256).
    """
    client = client or MlflowClient()
    version = resolve_model_version(client, model_uri)
    uri = version_uri(version)
    with tempfile.TemporaryDirectory(prefix="surrogate-") as tmp:
        local = download_model(uri, tmp)
        verified = miret_flavor.open_model_dir(local, trusted, uri)
        mlmodel = Model.load(local)
        provenance = verified.manifest["provenance"]
        parameters = provenance.get("parameters") or {}
        # the rules as explain wrote them (signed with the directory): in original
        # columns and categories, which the surrogate alone cannot name
        written = Path(local, "rules.txt")
        recorded = written.read_text(encoding="utf-8").rstrip("\n") if written.is_file() else None
    class_names = str(parameters.get("class_names") or "").split(",") if parameters else None
    if recorded is not None:  # no surrogate built: show needs no scikit-learn
        rules = recorded
    elif hasattr(verified.surrogate, "leaf_counts_"):  # a fitted MiretSurrogate: the pruned tree
        rules = verified.surrogate.rules(class_names if class_names and class_names[0] else None)
    else:
        rules = verified.tree.rules(scaler=verified.scaler)
    return {
        "uri": uri,
        "rules": rules,
        "metrics": dict(provenance.get("metrics") or {}),
        "validation": (provenance.get("validation") or {}).get("status"),
        "provenance": provenance,
        "tags": dict(version.tags),
        "solve": (mlmodel.metadata or {}).get("solve", {}),
        "parameters": parameters,
        "model_id": model_id_of(version) or "",
        "signer": verified.signer,
        "evidence_digest": verified.manifest["digest"],
    }


# ---------------------------------------------------------------------- descriptions
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def markdown_literal(text) -> str:
    """User text as literal Markdown: HTML escaped, Markdown punctuation backslashed."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(str(text), quote=False))


def version_link(name: str, version) -> str:
    """A Markdown link to a model version's page in the MLflow UI (relative, works there)."""
    return f"[{markdown_literal(name)} v{version}](#/models/{url_quote(name, safe='')}/versions/{version})"
