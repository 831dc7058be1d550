"""The Markdown descriptions of an explained ensemble version and its surrogate version.

Each page is a few sections, one function each, what a reviewer decides on first: a
table with the test fidelity and its 95% interval next to the plain tree (CART), the
features used, the validation result, who signed the evidence, each promotion decision
(by alias: who decided, under which policy, when), the last gate when it was not one of
them (named by its alias and policy: never the version's verdict) and the approvals;
on the ensemble's page "Since the champion" (what changed in the rules and features,
then the figures); the report's location; and "Technical details" last (how the tree
was found, the evidence digest). A decision or approval based on other evidence than the
linked surrogate's (the ensemble was explained again since) is shown as based on
superseded evidence, naming the surrogate version it was made on: ``promoted`` never
stands next to a digest the gate did not evaluate. Descriptions are for people and read
run tags; ``govern audit`` verifies the signed records behind them.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_USER

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.gates.diff import AGAINST_TAG, ALIAS_TAG, CHANGES_TAG
from miret_governance.flavors.gates.gate_evidence import UNVERIFIED
from miret_governance.flavors.store.registry import (
    EVIDENCE_DIGEST_TAG,
    GATE_RUN_TAG,
    GATE_TAG,
    POLICY_RUN_TAG,
    PROMOTION_RUN_TAG,
    PROMOTION_TAG,
    RESULT_RUN_TAG,
    gate_alias,
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
from miret_governance.flavors.trail.supersede import page_line
from miret_governance.flavors.trail.verification import verified_section
from miret_governance.flavors.trust import OWN_KEY_NAME
from miret_governance.governance.measures.metrics import fidelity_with_interval
from miret_governance.governance.measures.rule_changes import RuleChanges
from miret_governance.governance.report.wording import DRIFT_NAME, DRIFT_SCALE, describe_stop
from miret_governance.governance.trust.policy import canonical_digest

SURROGATE_RUN_TAG = "governance.surrogate_uri"
SHOWN_CHANGES = 5
"""Changed rules of one kind listed on a page; the rest are counted."""


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
    """Table rows: one per promotion decision (by alias), then the last gate evaluation
    when it is not one of them, named by its alias and policy (never the version's
    verdict: a gate for another alias says nothing about the one this version holds)."""
    tags, held = ensemble_version.tags, set(getattr(ensemble_version, "aliases", []) or [])
    rows, shown = [], set()
    prefix = PROMOTION_TAG.format(alias="")
    for key in sorted(tags):
        alias = key[len(prefix) :]
        if not key.startswith(prefix) or alias.endswith(".run"):
            continue
        run_id = tags.get(PROMOTION_RUN_TAG.format(alias=alias))
        shown.add(run_id)
        run_tags, when = _decision(client, run_id) or ({}, "-")
        policy = markdown_literal(run_tags.get(POLICY_RUN_TAG, "unknown policy"))
        status = tags[key]
        if status == "promoted":
            where = "holds the alias" if alias in held else "the alias has since moved"
        else:
            where = "alias not set here"
        gate = run_tags.get(RESULT_RUN_TAG, "?")
        text = f"under policy {policy} (gate {gate}), {when}, {_who(run_tags)} ({where})"
        basis = _basis(run_tags, digest, surrogate_uri)
        value = f"{basis}: {status} {text}" if basis else f"**{status}** {text}"
        rows.append((f"Promotion `@{alias}`", value))
    run_id = tags.get(GATE_RUN_TAG)
    if tags.get(GATE_TAG) and run_id not in shown:
        run_tags, when = _decision(client, run_id) or ({}, "-")
        alias = gate_alias(run_tags)
        policy = markdown_literal(run_tags.get(POLICY_RUN_TAG, "unknown policy"))
        result = run_tags.get(RESULT_RUN_TAG) or tags[GATE_TAG]
        label = f"Gate for `@{alias}`" if alias else "What-if gate (no alias)"
        text = f"**{result}** under policy {policy}, {when}, {_who(run_tags)}"
        basis = _basis(run_tags, digest, surrogate_uri)
        rows.append((label, f"{basis}: {text}" if basis else text))
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


def _listed(title: str, lines, count: int) -> str:
    shown = list(lines)[:SHOWN_CHANGES]
    more = count - len(shown)
    items = "".join(f"  - {markdown_literal(line)}\n" for line in shown)
    tail = (
        f"  - and {more} more (gate_report.json of the gate run lists them)\n" if more > 0 else ""
    )
    return f"- {title} ({count}):\n{items}{tail}"


def changes_text(changes: RuleChanges | None) -> str:
    """What changed in the rules and features, as Markdown (None: a gate run from before
    the changes were recorded)."""
    if changes is None:
        return "What changed in the rules was not recorded by this gate: gate again to see it.\n\n"
    if not changes.any:
        return (
            f"Nothing changed in the rules ({changes.unchanged} the same) or the features used.\n\n"
        )
    parts = ["What changed:\n\n"]
    if changes.count("moved"):
        moved = [f"{a} → {b}" for a, b in changes.moved]
        parts.append(_listed("Thresholds moved", moved, changes.count("moved")))
    if changes.count("added"):
        parts.append(_listed("Rules added", changes.added, changes.count("added")))
    if changes.count("removed"):
        parts.append(_listed("Rules removed", changes.removed, changes.count("removed")))
    parts.append(f"- Rules unchanged: {changes.unchanged}\n")
    features = ", ".join(markdown_literal(f) for f in changes.gained) or "none"
    lost = ", ".join(markdown_literal(f) for f in changes.lost) or "none"
    parts.append(f"- Features gained: {features}; lost: {lost}\n\n")
    return "".join(parts)


def since_alias(client: MlflowClient, ensemble_version, digest: str) -> str:
    """The "Since the champion" section of the last gate evaluation (:mod:`flavors.diff`),
    when it compared the current evidence: what changed in the rules and features, then
    the figures; else ``""``."""
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
    recorded = tags.get(CHANGES_TAG)
    changes = RuleChanges.from_json(json.loads(recorded)) if recorded else None
    cross = metrics.get("cross_fidelity")
    rows = [
        (f"{DRIFT_NAME}: {DRIFT_SCALE}", _number(metrics.get("explanation_drift"))),
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
        f"last gate evaluation ran ({_run_time(run)}).\n\n{changes_text(changes)}"
        "The figures: the first compares the ensembles (how their trees split), the others "
        "the surrogates.\n\n| Figure | Value |\n|---|---|\n"
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


def _signature_words(signer, digest: str) -> str:
    """Who signed the surrogate's files, as the command that wrote the page verified it."""
    if digest == UNVERIFIED:
        return "**not verified**: unsigned, signed by an untrusted key or altered since"
    if signer is None:
        return "**unsigned**: no gate counts this evidence"
    if signer.name == OWN_KEY_NAME:
        return (
            f"the explain job's key, fingerprint `{signer.fingerprint[:16]}` (a gate names it "
            "as the policy does)"
        )
    return f"{markdown_literal(signer.describe())}, fingerprint `{signer.fingerprint[:16]}`"


def _percent(value) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, (int, float)) else "-"


def evidence_rows(evidence: dict, features, signer, digest: str) -> list:
    """The rows a reviewer decides on: test fidelity with its interval next to the plain
    tree (CART), features used, input validation and who signed."""
    metrics = evidence.get("metrics") or {}
    baseline = evidence.get("baseline") or {}
    cart_fidelity = baseline.get("test_fidelity", metrics.get("baseline_cart_test_fidelity"))
    cart_features = baseline.get("n_features_used", metrics.get("baseline_cart_n_features"))
    names = f": {', '.join(markdown_literal(f) for f in features)}" if features else ""
    fidelity = fidelity_with_interval(metrics) or "-"
    validation = evidence.get("validation") or {}
    return [
        ("Fidelity on test rows", f"{fidelity}; plain tree (CART) {_percent(cart_fidelity)}"),
        (
            "Features used",
            f"{_number(metrics.get('n_features_used'))}{names}; "
            + f"plain tree (CART) {_number(cart_features)}",
        ),
        ("Input validation", _validation_words(validation.get("success") is True, digest)),
        ("Signed by", _signature_words(signer, digest)),
    ]


def _table(header: str, rows) -> str:
    lines = [f"| {header} | Value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]
    return "\n".join(lines) + "\n\n"


def technical_details(evidence: dict, digest: str) -> str:
    """The "Technical details" section: how the tree was found, and the evidence digest."""
    rows = []
    if evidence.get("solve"):
        rows.append(("How the tree was found", markdown_literal(describe_stop(evidence["solve"]))))
    rows.append(("Evidence digest", f"`{digest[:16]}`"))
    return "**Technical details**\n\n" + _table("Detail", rows)


def version_descriptions(
    client: MlflowClient,
    ensemble_version,
    surrogate_version,
    evidence: dict,
    features=None,
    signer=None,
) -> tuple[str, str]:
    """The Markdown descriptions of an ensemble version and of its surrogate version.

    Each page is a list of sections (one function each), what a reviewer decides on
    first and the technical details last.

    Parameters
    ----------
    ensemble_version, surrogate_version : ModelVersion
        As they are now (tags and aliases are read from them).
    evidence : dict
        The surrogate's stored evidence (``metrics``, ``validation``, ``baseline``,
        ``solve``).
    features : sequence of str, optional
        Names of the features the surrogate uses.
    signer : governance.trust.keyring.Signer, optional
        The trusted key that signed the surrogate (None: unsigned).

    Returns
    -------
    (ensemble_description, surrogate_description)
    """
    digest = evidence.get("digest") or canonical_digest(evidence)
    surrogate_uri = version_uri(surrogate_version)
    rows = evidence_rows(evidence, features, signer, digest)
    decisions = [
        *_status_rows(client, ensemble_version, digest, surrogate_uri),
        *approval_rows(client, ensemble_version, digest, surrogate_uri),
    ]
    table = _table("Evidence and decisions", rows + decisions)
    report = f"Report: {_report_location(client, surrogate_version)}.\n\n"
    technical = technical_details(evidence, digest)
    surrogate = version_link(surrogate_version.name, surrogate_version.version)
    ensemble = version_link(ensemble_version.name, ensemble_version.version)
    supersedes = page_line(surrogate_version)
    ensemble_sections = [
        f"**Explained by** the MIRET surrogate {surrogate}.\n\n",
        supersedes,
        table,
        since_alias(client, ensemble_version, digest),
        verified_section(client, ensemble_version, digest),
        report,
        technical,
    ]
    intro = (
        f"**MIRET surrogate of** {ensemble}: one shallow tree (oblique splits only where they "
        "were clearly more faithful on held-out rows) that reproduces the ensemble's "
        "predictions.\n\n"
    )
    surrogate_sections = [
        intro,
        supersedes,
        table,
        report,
        technical,
    ]
    return "".join(ensemble_sections).rstrip() + "\n", "".join(surrogate_sections).rstrip() + "\n"


def describe_versions(
    client: MlflowClient, ensemble_version, surrogate_version, evidence, features=None, signer=None
) -> None:
    """Write both versions' Markdown descriptions (:func:`version_descriptions`).

    Called by explain after registration and by gate and promote after their tags; it
    re-reads the ensemble version so the promotion status shown is the current one.
    """
    current = client.get_model_version(ensemble_version.name, ensemble_version.version)
    ensemble_text, surrogate_text = version_descriptions(
        client, current, surrogate_version, evidence, features, signer
    )
    client.update_model_version(current.name, current.version, description=ensemble_text)
    client.update_model_version(
        surrogate_version.name, surrogate_version.version, description=surrogate_text
    )
