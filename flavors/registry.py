"""The model registry side of governance: tag vocabulary, URIs, versions and links.

An explained ensemble version and its surrogate version point at each other by tags:
``governance.surrogate`` on the ensemble version names the surrogate version, and
``governance.surrogate_of`` on the surrogate version names the ensemble version. This
module owns those names, reads and writes the links and the versions' Markdown
descriptions (what a reviewer reads first), and builds registry filters safely.

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
from urllib.parse import quote as url_quote

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.models import Model

from miret_governance.flavors import miret as miret_flavor
from miret_governance.flavors.errors import ExplainError, GovernanceError
from miret_governance.governance.gates import canonical_digest

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
EVIDENCE_PARAM = "evidence_digest"
"""Run param of the explain run: sha256 of the surrogate's ``evidence.json``. Params
cannot be changed once logged, so an edited or replaced manifest no longer matches it."""
RESULT_RUN_TAG = "result"
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
        registry = mlflow.get_registry_uri()
        raise ExplainError(
            f"{model_uri} was not found in the registry at {registry}: {exc.message}. "
            f"Browse the registered versions with `{sys.executable} -m mlflow ui "
            f"--backend-store-uri {registry}`"
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


def download_model(uri: str, dst_path: str | None = None, error=ExplainError) -> str:
    """The local folder of a model's artifacts; an MLflow failure (a missing version, an
    unreachable artifact store) becomes ``error`` naming the URI."""
    try:
        return mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=dst_path)
    except MlflowException as exc:
        raise error(f"cannot download {uri}: {exc.message}") from exc


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
        local = download_model(uri, tmp)
        mlmodel = Model.load(local)
        if miret_flavor.FLAVOR_NAME not in mlmodel.flavors:
            raise ExplainError(f"{uri} is not a surrogate (flavors: {sorted(mlmodel.flavors)})")
        surrogate, scaler, _ = miret_flavor.read_model_dir(local)
        parameters = miret_flavor.read_evidence(local)["provenance"].get("parameters") or {}
    tree = getattr(surrogate, "tree_", surrogate)
    class_names = str(parameters.get("class_names") or "").split(",") if parameters else None
    if hasattr(surrogate, "leaf_counts_"):  # a fitted MiretSurrogate: the pruned tree
        rules = surrogate.rules(class_names if class_names and class_names[0] else None)
    else:
        rules = tree.rules(scaler=scaler)
    metrics, model_id = {}, model_id_of(version)
    if model_id:
        metrics = {m.key: m.value for m in client.get_logged_model(model_id).metrics or []}
    return {
        "uri": uri,
        "rules": rules,
        "metrics": metrics,
        "tags": dict(version.tags),
        "solve": (mlmodel.metadata or {}).get("solve", {}),
        "model_id": model_id or "",
    }


# ---------------------------------------------------------------------- descriptions
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def _md(text) -> str:
    """User text as literal Markdown: HTML escaped, Markdown punctuation backslashed."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(str(text), quote=False))


def version_link(name: str, version) -> str:
    """A Markdown link to a model version's page in the MLflow UI (relative, works there)."""
    return f"[{_md(name)} v{version}](#/models/{url_quote(name, safe='')}/versions/{version})"


def _number(value, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return f"{value:.{digits}f}" if not float(value).is_integer() else str(int(value))


def _run_time(run) -> str:
    stamp = datetime.fromtimestamp(run.info.start_time / 1000, tz=timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M UTC")


def _decision(client: MlflowClient, run_id: str | None) -> tuple[str, str, bool] | None:
    """(policy label, time, is a promotion) of a gate run, None when it cannot be read."""
    if not run_id:
        return None
    try:
        run = client.get_run(run_id)
    except MlflowException:
        return None
    tags = run.data.tags
    promotion = any(key.startswith("governance.promotion.") for key in tags)
    return tags.get(POLICY_RUN_TAG, "unknown policy"), _run_time(run), promotion


def _status_rows(client: MlflowClient, ensemble_version) -> list[tuple[str, str]]:
    """Table rows: one per promotion decision (by alias), then the last gate evaluation."""
    tags, held = ensemble_version.tags, set(getattr(ensemble_version, "aliases", []) or [])
    rows = []
    for key in sorted(tags):
        alias = key[len("governance.promotion.") :]
        if not key.startswith("governance.promotion.") or alias.endswith(".run"):
            continue
        decision = _decision(client, tags.get(PROMOTION_RUN_TAG.format(alias=alias)))
        policy, when = (decision[0], decision[1]) if decision else ("unknown policy", "-")
        status = tags[key]
        if status == "promoted":
            where = "holds the alias" if alias in held else "the alias has since moved"
        else:
            where = "alias not set here"
        rows.append(
            (f"Promotion `@{alias}`", f"**{status}** by policy {_md(policy)}, {when} ({where})")
        )
    gate = tags.get(GATE_TAG)
    if gate:
        decision = _decision(client, tags.get(GATE_RUN_TAG))
        policy, when, promotion = decision or ("unknown policy", "-", False)
        note = "" if promotion else " (what-if: no alias changed)"
        rows.append(("Last gate evaluation", f"**{gate}** by policy {_md(policy)}, {when}{note}"))
    return rows


def _report_location(client: MlflowClient, surrogate_version) -> str:
    model_id = model_id_of(surrogate_version)
    if not model_id:
        return "`report.html` and `model_card.md` in the surrogate version's artifacts"
    try:
        experiment_id = client.get_logged_model(model_id).experiment_id
    except MlflowException:
        return f"`report.html` and `model_card.md` in the artifacts of logged model `{model_id}`"
    return (
        f"`report.html` and `model_card.md` in the artifacts of the surrogate's logged model "
        f"[{model_id}](#/experiments/{experiment_id}/models/{model_id}/artifacts)"
    )


def version_descriptions(
    client: MlflowClient, ensemble_version, surrogate_version, evidence: dict, features=None
) -> tuple[str, str]:
    """The Markdown descriptions of an ensemble version and of its surrogate version.

    Parameters
    ----------
    ensemble_version, surrogate_version : ModelVersion
        As they are now (tags and aliases are read from them).
    evidence : dict
        The surrogate's stored evidence (``metrics``, ``validation``, ``baseline``).
    features : sequence of str, optional
        Names of the features the surrogate uses.

    Returns
    -------
    (ensemble_description, surrogate_description)
    """
    metrics = evidence.get("metrics") or {}
    baseline = evidence.get("baseline") or {}
    cart_fidelity = baseline.get("test_fidelity", metrics.get("baseline_cart_test_fidelity"))
    cart_features = baseline.get("n_features_used", metrics.get("baseline_cart_n_features"))
    n_used = metrics.get("n_features_used")
    names = f": {', '.join(_md(f) for f in features)}" if features else ""
    validation = evidence.get("validation") or {}
    passed = validation.get("success") is True
    rows = [
        (
            "Test fidelity",
            f"{_number(metrics.get('test_fidelity'))} (CART {_number(cart_fidelity)})",
        ),
        ("Features used", f"{_number(n_used)}{names} (CART {_number(cart_features)})"),
        ("Input validation", "passed" if passed else "**failed**"),
        *_status_rows(client, ensemble_version),
    ]
    table = "\n".join(["| Evidence | Value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])
    report = f"Report: {_report_location(client, surrogate_version)}."
    digest = evidence.get("digest") or canonical_digest(evidence)
    proof = f" Evidence digest `{digest[:16]}`."
    surrogate = version_link(surrogate_version.name, surrogate_version.version)
    ensemble = version_link(ensemble_version.name, ensemble_version.version)
    ensemble_text = (
        f"**Explained by** the MIRET surrogate {surrogate}.\n\n{table}\n\n{report}{proof}\n"
    )
    surrogate_text = (
        f"**MIRET surrogate of** {ensemble}: one shallow oblique tree that reproduces the "
        f"ensemble's predictions.\n\n{table}\n\n{report}{proof}\n"
    )
    return ensemble_text, surrogate_text


def describe_versions(
    client: MlflowClient, ensemble_version, surrogate_version, evidence: dict, features=None
) -> None:
    """Write both versions' Markdown descriptions (:func:`version_descriptions`).

    Called by explain after registration and by gate and promote after their tags; it
    re-reads the ensemble version so the promotion status shown is the current one.
    """
    current = client.get_model_version(ensemble_version.name, ensemble_version.version)
    ensemble_text, surrogate_text = version_descriptions(
        client, current, surrogate_version, evidence, features
    )
    client.update_model_version(current.name, current.version, description=ensemble_text)
    client.update_model_version(
        surrogate_version.name, surrogate_version.version, description=surrogate_text
    )
