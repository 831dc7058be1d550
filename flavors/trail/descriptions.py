"""The Markdown descriptions of an explained ensemble version and its surrogate version.

Both pages show the same table (what a reviewer reads first): test fidelity and features
next to the CART baseline, the validation result, each promotion decision and the last
gate evaluation (who decided, under which policy, when), the approvals of each alias,
and the evidence digest. A decision or approval based on other evidence than the linked
surrogate's (the ensemble was explained again since) is shown as based on superseded
evidence, naming the surrogate version it was made on: ``promoted`` never stands next to
a digest the gate did not evaluate. Descriptions are for people and read run tags;
``govern audit`` verifies the signed records behind them.
"""

from __future__ import annotations

from datetime import datetime, timezone

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_USER

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.gates.diff import AGAINST_TAG, ALIAS_TAG
from miret_governance.flavors.gates.gate_evidence import UNVERIFIED
from miret_governance.flavors.store.registry import (
    EVIDENCE_DIGEST_TAG,
    GATE_RUN_TAG,
    GATE_TAG,
    POLICY_RUN_TAG,
    PROMOTION_RUN_TAG,
    markdown_literal,
    model_id_of,
    parse_registry_uri,
    version_link,
    version_uri,
)
from miret_governance.flavors.trail.decisions import (
    ALIAS_RUN_TAG,
    APPROVAL_EXPERIMENT,
    COMMENT_RUN_TAG,
    DECISION_RUN_TAG,
    SIGNER_TAG,
    UNSIGNED,
    decision_runs,
)
from miret_governance.flavors.trail.verification import verified_section
from miret_governance.governance.trust.policy import canonical_digest

SURROGATE_RUN_TAG = "governance.surrogate_uri"


def _number(value, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return f"{value:.{digits}f}" if not float(value).is_integer() else str(int(value))


def _run_time(run) -> str:
    stamp = datetime.fromtimestamp(run.info.start_time / 1000, tz=timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M UTC")


def _who(tags: dict) -> str:
    """Who decided, from a decision run's tags: the signing key and the MLflow user."""
    signer = tags.get(SIGNER_TAG) or UNSIGNED
    key = "unsigned" if signer == UNSIGNED else f"key {markdown_literal(signer)}"
    return f"{key}, user {markdown_literal(tags.get(MLFLOW_USER) or 'unknown')}"


def _basis(tags: dict, digest: str, surrogate_uri: str) -> str:
    """Empty when a decision run was made on ``digest``; else what it was based on."""
    decided_on = tags.get(EVIDENCE_DIGEST_TAG)
    if decided_on == digest:
        return ""
    uri = tags.get(SURROGATE_RUN_TAG) or "an unknown surrogate"
    if uri != surrogate_uri:
        try:
            name, version, _ = parse_registry_uri(uri)
        except ExplainError:
            name, version = None, None
        where = version_link(name, version) if version else markdown_literal(uri)
        return f"**based on superseded evidence** of {where} (digest `{str(decided_on)[:16]}`)"
    return f"**based on other evidence** (digest `{str(decided_on)[:16]}`)"


def _decision(client: MlflowClient, run_id: str | None):
    """The tags and time of a gate run, None when it cannot be read."""
    if not run_id:
        return None
    try:
        run = client.get_run(run_id)
    except MlflowException:
        return None
    return run.data.tags, _run_time(run)


def _status_rows(client: MlflowClient, ensemble_version, digest, surrogate_uri) -> list:
    """Table rows: one per promotion decision (by alias), then the last gate evaluation."""
    tags, held = ensemble_version.tags, set(getattr(ensemble_version, "aliases", []) or [])
    rows = []
    for key in sorted(tags):
        alias = key[len("governance.promotion.") :]
        if not key.startswith("governance.promotion.") or alias.endswith(".run"):
            continue
        decision = _decision(client, tags.get(PROMOTION_RUN_TAG.format(alias=alias)))
        run_tags, when = decision or ({}, "-")
        policy = markdown_literal(run_tags.get(POLICY_RUN_TAG, "unknown policy"))
        status = tags[key]
        if status == "promoted":
            where = "holds the alias" if alias in held else "the alias has since moved"
        else:
            where = "alias not set here"
        basis = _basis(run_tags, digest, surrogate_uri)
        text = f"**{status}** by policy {policy}, {when}, {_who(run_tags)} ({where})"
        if basis:
            text = f"{basis}: {status} by policy {policy}, {when}, {_who(run_tags)} ({where})"
        rows.append((f"Promotion `@{alias}`", text))
    gate = tags.get(GATE_TAG)
    if gate:
        run_tags, when = _decision(client, tags.get(GATE_RUN_TAG)) or ({}, "-")
        promotion = any(k.startswith("governance.promotion.") for k in run_tags)
        note = "" if promotion else " (what-if: no alias changed)"
        basis = _basis(run_tags, digest, surrogate_uri)
        policy = markdown_literal(run_tags.get(POLICY_RUN_TAG, "unknown policy"))
        text = f"**{gate}** by policy {policy}, {when}, {_who(run_tags)}{note}"
        rows.append(("Last gate evaluation", f"{basis}: {text}" if basis else text))
    return rows


def approval_rows(client: MlflowClient, ensemble_version, digest, surrogate_uri) -> list:
    """Table rows of the approvals of the ensemble version: the latest decision of each
    approver key per alias, from the approval runs' tags."""
    latest = {}
    for run in decision_runs(client, APPROVAL_EXPERIMENT, version_uri(ensemble_version)):
        tags = run.data.tags
        latest[(tags.get(ALIAS_RUN_TAG), tags.get(SIGNER_TAG))] = run  # oldest first
    rows = []
    for (alias, _), run in sorted(latest.items(), key=lambda item: tuple(map(str, item[0]))):
        tags = run.data.tags
        basis = _basis(tags, digest, surrogate_uri)
        text = (
            f"**{markdown_literal(tags.get(DECISION_RUN_TAG, '?'))}** by {_who(tags)}, {_run_time(run)}: "
            f"{markdown_literal(tags.get(COMMENT_RUN_TAG, ''))}"
        )
        rows.append(
            (f"Approval `@{markdown_literal(alias)}`", f"{basis}: {text}" if basis else text)
        )
    return rows


def since_alias(client: MlflowClient, ensemble_version, digest: str) -> str:
    """The "Since the champion" section: the drift figures of the last gate evaluation
    (:mod:`flavors.diff`), when it computed them on the current evidence; else ``""``."""
    gate_run = ensemble_version.tags.get(GATE_RUN_TAG)
    try:
        run = client.get_run(gate_run) if gate_run else None
    except MlflowException:
        run = None
    tags = run.data.tags if run is not None else {}
    if not tags.get(AGAINST_TAG) or tags.get(EVIDENCE_DIGEST_TAG) != digest:
        return ""
    try:
        name, version, _ = parse_registry_uri(tags[AGAINST_TAG])
        against = version_link(name, version)
    except ExplainError:
        against = markdown_literal(tags[AGAINST_TAG])
    alias, metrics = tags.get(ALIAS_TAG, "").replace("`", ""), run.data.metrics
    cross = metrics.get("cross_fidelity")
    rows = [
        (
            "Explanation drift (VITE level frequencies; 0 the same, 1 nothing in common)",
            _number(metrics.get("explanation_drift")),
        ),
        (
            "Features used by both surrogates (Jaccard overlap)",
            _number(metrics.get("feature_overlap")),
        ),
        (
            "Cross-fidelity (each surrogate on the other version's ensemble, the smaller)",
            _number(cross) if cross is not None else "not measured: gate without --data",
        ),
    ]
    head = (
        f"**Since the {markdown_literal(alias)}**\n\nCompared with {against}, which held `@{alias}` when the "
        f"last gate evaluation ran ({_run_time(run)}).\n\n| Figure | Value |\n|---|---|\n"
    )
    return head + "".join(f"| {k} | {v} |\n" for k, v in rows) + "\n"


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


def _validation_words(passed: bool, digest: str) -> str:
    """The stored validation result, or that nothing of the evidence is believed."""
    if digest == UNVERIFIED:
        return "**not verified**: the evidence's signature does not verify"
    return "passed" if passed else "**failed**"


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
    names = f": {', '.join(markdown_literal(f) for f in features)}" if features else ""
    validation = evidence.get("validation") or {}
    passed = validation.get("success") is True
    digest = evidence.get("digest") or canonical_digest(evidence)
    surrogate_uri = version_uri(surrogate_version)
    rows = [
        (
            "Test fidelity",
            f"{_number(metrics.get('test_fidelity'))} (CART {_number(cart_fidelity)})",
        ),
        ("Features used", f"{_number(n_used)}{names} (CART {_number(cart_features)})"),
        ("Input validation", _validation_words(passed, digest)),
        *_status_rows(client, ensemble_version, digest, surrogate_uri),
        *approval_rows(client, ensemble_version, digest, surrogate_uri),
    ]
    table = "\n".join(["| Evidence | Value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])
    report = f"Report: {_report_location(client, surrogate_version)}."
    proof = f" Evidence digest `{digest[:16]}`."
    surrogate = version_link(surrogate_version.name, surrogate_version.version)
    ensemble = version_link(ensemble_version.name, ensemble_version.version)
    since = since_alias(client, ensemble_version, digest)
    verified = verified_section(client, ensemble_version, digest)
    ensemble_text = (
        f"**Explained by** the MIRET surrogate {surrogate}.\n\n{table}\n\n{since}{verified}"
        f"{report}{proof}\n"
    )
    surrogate_text = (
        f"**MIRET surrogate of** {ensemble}: one shallow tree (oblique splits only where they "
        f"were clearly more faithful on held-out rows) that reproduces the ensemble's "
        f"predictions.\n\n{table}\n\n{report}{proof}\n"
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
