"""``govern inventory``: every governed model of the registry, its aliases and what is due.

Every registered model (every page of the registry search) but the surrogates' (their
versions name an ensemble: ``governance.surrogate_of``) and the governed copies the
policy's ``[governed]`` names (their source's audit checks them) is audited as ``govern
audit`` audits it (:func:`flavors.trail.audit.audit_model`, one :class:`CommandClient`
for all of them, so the governance experiments' runs are listed once); nothing is
verified here again. Each alias then gets one :class:`AliasState` row, read from the
records the audit verified (``AuditReport.about``) and its holders' checked evidence:
the promotion that holds it (policy, time, approvals, the drift figures it recorded
against the previous holder of ``drift_against``), the latest gate, verification and
reproduction records, and whether it is due (:mod:`governance.trust.revalidation`: the
latest signed gate or promotion that passed, or identical reproduction, on the holder's
current evidence). A model with no alias gets one row without one.

Findings: the audit's (:data:`flavors.trail.audit.KINDS`), ``due`` and ``unreadable``;
the clock is the caller's (``now``).

**Models the caller cannot read.** An authenticated server leaves them out of the
registry search (MLflow's auth app filters its results), so the inventory would pass over
them in silence. Every model a governance record is about (the runs' bound ensemble URI,
from the listing the audits read anyway) or the policy's ``[governed]`` names, and the
search did not list, is asked for: refused (HTTP 403), it is an ``unreadable`` finding
naming the user and what to do, and the rest is listed; one that no longer exists is
nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime

from mlflow.exceptions import MlflowException

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.store.auth import server_user
from miret_governance.flavors.store.reads import CommandClient
from miret_governance.flavors.store.registry import (
    SURROGATE_OF_TAG,
    SURROGATE_TAG,
    parse_registry_uri,
    version_uri,
)
from miret_governance.flavors.trail.audit import Finding, audit_model, promoted_alias
from miret_governance.flavors.trail.decisions import (
    GOVERNANCE_EXPERIMENTS,
    URI_PARAM,
    every_run_in,
    signed_time,
)
from miret_governance.flavors.trail.governed import governing
from miret_governance.governance.trust.records import GatedRecord, VerificationRecord
from miret_governance.governance.trust.revalidation import last_revalidation, revalidation

UNREADABLE = "unreadable"
"""The kind of the finding of a model the caller may not read (module docstring)."""
MODEL_PAGE = 1000
"""Registered models per page of the registry search (every page is read)."""
INVENTORY_EXPERIMENT = "governance-inventory"
"""Where :func:`log_inventory` logs each inventory (the scheduled job's runs)."""
TABLE_COLUMNS = (
    "model",
    "alias",
    "version",
    "evidence",
    "promoted",
    "policy",
    "approvals",
    "last_revalidated",
    "due",
    "drift",
    "findings",
)
"""The columns of ``inventory_table.json``."""


@dataclass(frozen=True)
class Signed:
    """One signed record, as a row names it: its run, signed time and result."""

    run_id: str
    time: str
    result: str
    action: str | None = None
    """A verification record's action (``show``, ``audit``, ``reproduce``)."""


@dataclass(frozen=True)
class Promotion:
    """The valid signed promotion that put an alias on its holder (the latest)."""

    run_id: str
    time: str
    policy: str
    policy_digest: str
    approvals: tuple[str, ...]
    """The approver keys whose approvals it counted."""
    drift: float | None
    """The explanation drift it recorded against ``drift_against`` (None: none)."""
    drift_against: str | None
    """The version it was compared with (None: none)."""


@dataclass(frozen=True)
class AliasState:
    """One row of the inventory: an alias and its holder (alias None: a model with no
    alias, its latest version)."""

    model: str
    alias: str | None
    version: str | None
    evidence: str
    """``verified``, ``not verified`` (a finding says why) or ``none`` (not explained)."""
    evidence_digest: str | None
    promotion: Promotion | None
    last_gate: Signed | None
    last_verification: Signed | None
    last_reproduction: Signed | None
    last_revalidated: str | None
    revalidate_every_days: int | None
    due: bool | None
    """None: the policy sets no period for the alias."""


@dataclass
class Inventory:
    """What :func:`inventory` found."""

    policy: str
    policy_digest: str
    now: datetime
    models: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    """The audit's findings of every model and the ``due`` ones, each naming its version
    (``models:/<name>/<v>``), then the ``unreadable`` ones (``models:/<name>``)."""

    @property
    def due(self) -> int:
        return sum(1 for row in self.rows if row.due)

    def to_json(self) -> dict:
        return {
            "policy": self.policy,
            "policy_digest": self.policy_digest,
            "now": self.now.isoformat(),
            "clean": not self.findings,
            "n_models": len(self.models),
            "n_findings": len(self.findings),
            "n_due": self.due,
            "models": self.models,
            "aliases": [asdict(row) for row in self.rows],
            "findings": [asdict(f) for f in self.findings],
        }


def governed_models(client, policy) -> list:
    """The registered models :func:`inventory` audits, by name: every one with a version,
    every page, but the surrogates' and the governed copies (module docstring)."""
    models, token = [], None
    while True:
        page = client.search_registered_models(max_results=MODEL_PAGE, page_token=token)
        for model in page:
            latest = model.latest_versions or []
            if not latest or any(SURROGATE_OF_TAG in v.tags for v in latest):
                continue
            if governing(policy, model.name) is None:
                models.append(model)
        token = page.token
        if not token:
            return sorted(models, key=lambda m: m.name)


def inventory(policy, now: datetime, client=None, require_signed_policy: bool = False):
    """Audit every model :func:`governed_models` lists under ``policy`` and list each
    alias's state at ``now`` (module docstring).

    Returns
    -------
    Inventory
    """
    client = client or CommandClient()
    found = Inventory(policy.label, policy.digest, now)
    for model in governed_models(client, policy):
        report = audit_model(model.name, policy, client, require_signed_policy)
        found.models.append(model.name)
        found.findings += report.findings
        holders = {version_uri(h.version): h.version for h in report.holders}
        aliases = client.get_registered_model(model.name).aliases or {}  # the audit's read
        if not aliases:
            latest = max(model.latest_versions, key=lambda v: int(v.version))
            found.rows.append(_row(report, None, latest, policy, now, found))
        for alias, number in sorted(aliases.items()):
            holder = holders[f"models:/{model.name}/{number}"]
            found.rows.append(_row(report, alias, holder, policy, now, found))
    for name in sorted(_named(client, policy) - set(found.models)):
        if _refused(client, name):
            user = server_user()
            found.findings.append(
                Finding(
                    UNREADABLE,
                    f"models:/{name}",
                    f"no read permission for {user.username if user else 'this user'}: ask "
                    "an admin for READ, or run the inventory as the governance identity",
                )
            )
    return found


def _named(client, policy) -> set:
    """The registered models the governance records are about and the policy's
    ``[governed]`` names (both sides)."""
    runs = every_run_in(client, GOVERNANCE_EXPERIMENTS)  # the audits' listing (memoized)
    names = {n for m in policy.governed for n in (m.name, m.registered_model)}
    for uri in {run.data.params.get(URI_PARAM) for found in runs.values() for run in found}:
        try:
            names.add(parse_registry_uri(uri)[0])
        except GovernanceError:  # none, or not a model URI: the audits report such a run
            continue
    return names


def _refused(client, name: str) -> bool:
    """Whether the server refuses the caller a read of the registered model ``name``
    (HTTP 403); one it lists, or that does not exist, is not."""
    try:
        client.get_registered_model(name)
    except MlflowException as error:
        if error.error_code == "PERMISSION_DENIED":
            return True
        if error.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
    return False


def _row(report, alias, version, policy, now, found: Inventory) -> AliasState:
    """The state of ``alias`` (None: none) on ``version`` as ``report`` audited it,
    adding a ``due`` finding to ``found`` when it is due."""
    uri = version_uri(version)
    checked = report.evidence.get(uri)
    digest = checked.digest if checked is not None else None
    about = sorted(report.about.get(uri, []), key=signed_time)
    gates = [d for d in about if isinstance(d.record, GatedRecord)]
    verifications = [d for d in about if isinstance(d.record, VerificationRecord)]
    reproductions = [d for d in verifications if d.record.action == "reproduce"]
    last = last_revalidation([d.record for d in about], digest)
    promotions = [d for d in about if alias and promoted_alias(d, version) == alias]
    check = revalidation(policy, uri, alias, last.signed_at if last else None, now)
    if check is not None and check.due:
        found.findings.append(Finding("due", uri, check.message(), alias))
    if checked is not None:
        evidence = "verified"
    elif version.tags.get(SURROGATE_TAG):
        evidence = "not verified"
    else:
        evidence = "none"
    return AliasState(
        model=report.model_name,
        alias=alias,
        version=uri,
        evidence=evidence,
        evidence_digest=digest,
        promotion=_promotion(promotions[-1]) if promotions else None,
        last_gate=_signed(gates[-1]) if gates else None,
        last_verification=_signed(verifications[-1]) if verifications else None,
        last_reproduction=_signed(reproductions[-1]) if reproductions else None,
        last_revalidated=last.time if last else None,
        revalidate_every_days=check.every_days if check else None,
        due=check.due if check else None,
    )


def _signed(decision) -> Signed:
    record = decision.record
    action = getattr(record, "action", None)
    return Signed(decision.run_id, record.time, record.result, action)


def _promotion(decision) -> Promotion:
    record = decision.record
    drift = record.drift or {}
    return Promotion(
        run_id=decision.run_id,
        time=record.time,
        policy=record.policy.label,
        policy_digest=record.policy.digest,
        approvals=tuple(a["name"] for a in record.approvals if a.get("decision") == "approve"),
        drift=drift.get("explanation_drift"),
        drift_against=(drift.get("against") or {}).get("ensemble_uri"),
    )


def table_rows(found: Inventory) -> dict:
    """The rows as MLflow table columns (``inventory_table.json``): one row per alias,
    flat text, its findings' messages in the last column."""
    columns = {name: [] for name in TABLE_COLUMNS}
    for row in found.rows:
        about = [
            f"{f.kind}: {f.message}"
            for f in found.findings
            if f.version == row.version and f.alias in (None, row.alias)
        ]
        promotion = row.promotion
        values = (
            row.model,
            row.alias or "",
            row.version,
            row.evidence,
            promotion.time if promotion else "",
            promotion.policy if promotion else "",
            ", ".join(promotion.approvals) if promotion else "",
            row.last_revalidated or "",
            "" if row.due is None else str(row.due).lower(),
            "" if promotion is None or promotion.drift is None else promotion.drift,
            "\n".join(about),
        )
        for name, value in zip(TABLE_COLUMNS, values):
            columns[name].append(value)
    return columns


def log_inventory(client, found: Inventory, html: str) -> str:
    """Log ``found`` in a new run of :data:`INVENTORY_EXPERIMENT` (created when missing):
    ``inventory.html`` (``html``), ``inventory.json`` (:meth:`Inventory.to_json`),
    ``inventory_table.json`` (:func:`table_rows`, an MLflow table) and the metrics
    ``n_models``, ``n_findings``, ``n_due``; the run ends FINISHED whatever was found.

    Returns
    -------
    str
        The run's id.
    """
    experiment = client.get_experiment_by_name(INVENTORY_EXPERIMENT)
    experiment_id = (
        experiment.experiment_id
        if experiment is not None
        else client.create_experiment(INVENTORY_EXPERIMENT)
    )
    name = f"inventory {found.now.strftime('%Y-%m-%d %H:%M')} UTC"
    run = client.create_run(experiment_id, run_name=name, tags={"governance.policy": found.policy})
    run_id = run.info.run_id
    try:
        document = found.to_json()
        client.log_param(run_id, "policy", found.policy)
        for metric in ("n_models", "n_findings", "n_due"):
            client.log_metric(run_id, metric, document[metric])
        client.log_text(run_id, html, "inventory.html")
        client.log_dict(run_id, document, "inventory.json")
        client.log_table(run_id, table_rows(found), "inventory_table.json")
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, "FINISHED")
    return run_id
