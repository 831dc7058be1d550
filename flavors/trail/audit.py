"""``govern audit``: the promotion trail of a registered model, checked end to end.

The audit reads every version of the model (every page) and lists every run of every
governance experiment (gate and promotion, approval, link, clearance and verification
runs, deleted ones included, whatever their tags), then reads once each record that is
or may be about the model (:func:`flavors.decisions.read_record`; a run bound to another
model by its parameter is that model's, and its files are not downloaded), and checks
with the keys the organisation's policy trusts:

- **decision_record**: every record that is or may be about the model reads, is bound to
  its run, agrees with its run's parameters and tags, and verifies. A run bound to
  another model (its immutable parameter) is that model's; a run bound to none whose
  record does not verify may be about any model and is a finding in every audit. A
  record a signed clearance covers is listed under ``cleared`` instead; an unsigned
  what-if gate counts only when a status tag cites it; a run never written (a killed
  command) is nothing; a record signed with a key the policy binds to other users than
  the one the server vouched for (``[keys.<name>] users``) is a finding; so is a
  verification record that fails a check before its signature (it blocks nothing: no
  decision reads one; signed by any key the policy trusts, it verifies);
- **alias**: each alias's holder has a valid signed promotion decision (kind
  ``promotion``, decision ``promoted``, for that alias and this ensemble version's URI
  and model id) on the evidence its linked surrogate holds now, and that evidence
  verifies; an alias set by hand (in the MLflow UI, or by any API call) has none; the
  holder is the version the latest signed promotion to that alias moved it to (by the
  records' signed time: an alias moved back by hand to a version promoted earlier is
  found); and when the audited policy's ``[approvals]`` names the alias, the holder's
  current evidence has the approvals it requires and no standing rejection, none of them
  by the user the server vouched made its latest promotion (four eyes);
  When the policy governs the model (``[governed]``), each alias of the governed
  registered model is on the version the latest signed promotion to it names
  (``governed``), and that version's files hash to the digest the signed evidence pins
  (:func:`flavors.trail.governed.verified_governed`); auditing the governed model audits
  the data scientists' model it governs;
- **policy**: the promotion that put each alias on its holder was decided under the
  audited policy (by digest): a promotion under a laxer policy is found; so is one under
  a policy no verified signature backed, when a signed policy is required. Every
  decision about the model made under another policy (or, required, an unsigned one) is
  listed in ``other_policies`` (an earlier version of the policy is history, not a
  finding);
- **superseded**: the decisions a version's status tags show (``governance.last_gate.run``,
  ``governance.promotion.<alias>.run``) were made on the current evidence;
- **evidence**: the linked surrogate's evidence is signed by a key trusted for
  ``explain``, unaltered, and passes the gate's checks, among them that the link tag
  names the surrogate of the latest signed link record (:mod:`flavors.links`);
- **chain**: the model's record chain has every count once, each naming the record
  before, and no record of the model lies outside the governance experiments
  (:mod:`flavors.trail.chain`: gaps, forks, broken links, records renamed away).

Nothing here reads a tag as proof: tags only say where to look. No record makes it
crash: records are parsed by :func:`governance.trust.records.parse_record` before any field is
read. Its requests grow with the model's records, and with the store's runs only by one
listing request per 1,000 runs (``examples/benchmarks/results_org_scale.md``); the chain's
search of every experiment adds one request per 1,000 experiments.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.gates.gate_evidence import checked_evidence
from miret_governance.flavors.gates.gating import linked_surrogate
from miret_governance.flavors.store.reads import CommandClient
from miret_governance.flavors.store.registry import (
    GATE_RUN_TAG,
    SURROGATE_TAG,
    check_registered_name,
    name_filter,
    version_uri,
)
from miret_governance.flavors.trail.chain import chain_clearances, chain_problems
from miret_governance.flavors.trail.decisions import (
    GOVERNANCE_EXPERIMENTS,
    URI_PARAM,
    VERIFICATION_EXPERIMENT,
    Decision,
    alias_of,
    approval_state,
    every_run_in,
    pinned,
    read_record,
    remember_decision_runs,
    signed_time,
)
from miret_governance.flavors.trail.governed import governed_model, governing, verified_governed
from miret_governance.governance.trust.policy import Policy
from miret_governance.governance.trust.records import (
    ClearanceRecord,
    GatedRecord,
    PromotionRecord,
    VerificationRecord,
)

KINDS = ("alias", "policy", "superseded", "evidence", "decision_record", "chain")
EXPERIMENTS = GOVERNANCE_EXPERIMENTS
"""Every governance experiment: the audit reads each of their runs."""
VERSION_PAGE = 1000
"""Versions per page of the registry search (every page is read)."""


@dataclass(frozen=True)
class Finding:
    """One problem of the trail.

    Attributes
    ----------
    kind : str
        One of :data:`KINDS`.
    version : str
        The ensemble version (``models:/<name>/<v>``).
    message : str
    alias : str or None
    run_id : str or None
        The decision run concerned.
    """

    kind: str
    version: str
    message: str
    alias: str | None = None
    run_id: str | None = None


@dataclass
class AuditReport:
    """What :func:`audit_model` found.

    Attributes
    ----------
    model_name : str
    policy : str
        The policy's label.
    versions : int
        Versions checked.
    decisions : int
        Decision records checked.
    findings : list of Finding
    cleared : list of dict
        Records that do not verify, set aside by a valid signed clearance: the record's
        run, its problem, and the clearance's run, signer, time and reason.
    other_policies : list of dict
        Decisions made under another policy (or, ``signed_policy_required``, under one
        whose signature they did not verify): run, kind, version, alias, the policy's
        label, digest and signer.
    signed_policy_required : bool
        Whether a decision needs a verified policy signature.
    holders : list of Holder
        The versions holding an alias (what ``govern audit`` records it verified:
        :func:`flavors.trail.verification.audited`); not in :meth:`to_json`.
    about : dict
        Ensemble version URI -> the valid records about it, as the audit read and
        verified them (:class:`flavors.trail.decisions.Decision`; what ``govern
        inventory`` reports of each holder); not in :meth:`to_json`.
    evidence : dict
        Ensemble version URI -> its linked surrogate's verified evidence (None: none
        linked, or it did not verify: a finding says why); not in :meth:`to_json`.
    """

    model_name: str
    policy: str
    policy_digest: str
    versions: int = 0
    decisions: int = 0
    findings: list = field(default_factory=list)
    cleared: list = field(default_factory=list)
    other_policies: list = field(default_factory=list)
    signed_policy_required: bool = False
    holders: list = field(default_factory=list)
    about: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_json(self) -> dict:
        return {
            "model_name": self.model_name,
            "policy": self.policy,
            "policy_digest": self.policy_digest,
            "clean": self.clean,
            "versions_checked": self.versions,
            "decisions_checked": self.decisions,
            "findings": [asdict(f) for f in self.findings],
            "cleared": self.cleared,
            "other_policies": self.other_policies,
        }


@dataclass(frozen=True)
class Holder:
    """A version holding an alias, as audited: its linked surrogate (None: none, or a
    broken link) and that surrogate's verified evidence (None: it did not verify)."""

    version: object
    surrogate: object | None
    checked: object | None


def _evidence(client, version, policy: Policy, report: AuditReport) -> tuple:
    """The version's linked surrogate and its verified evidence (``None`` for either
    that is not there or does not verify, with a finding)."""
    uri = version_uri(version)
    if not version.tags.get(SURROGATE_TAG):
        return None, None
    surrogate = None
    try:
        surrogate = linked_surrogate(client, version)
        return surrogate, checked_evidence(client, version, surrogate, policy.keys, current=True)
    except GovernanceError as error:
        report.findings.append(Finding("evidence", uri, str(error)))
        return surrogate, None


def promoted_alias(decision: Decision, version) -> str | None:
    """The alias a valid signed promotion of ``version`` moved (None for any other
    decision; also what ``govern inventory`` reads as the alias's promotion)."""
    record = decision.record
    if (
        decision.valid
        and isinstance(record, PromotionRecord)
        and record.decision == "promoted"
        and record.ensemble == pinned(version)
    ):
        return record.alias
    return None


def _valid_promotion(decision: Decision, version, alias: str, digest: str | None) -> bool:
    """A valid signed promotion of ``version`` to ``alias`` on the evidence ``digest``."""
    return (
        digest is not None
        and promoted_alias(decision, version) == alias
        and decision.record.evidence.digest == digest
    )


def _audit_version(
    client, version, held: list, policy: Policy, report: AuditReport, trail: _Trail
) -> dict:
    """Add the findings of one version to ``report``; its valid signed promotions by
    alias (the latest decision of each)."""
    uri = version_uri(version)
    surrogate, checked = _evidence(client, version, policy, report)
    digest = checked.digest if checked is not None else None
    report.evidence[uri] = checked
    if held:
        report.holders.append(Holder(version, surrogate, checked))
    decisions = {d.run_id: d for d in trail.about.get(uri, [])}
    cited = {
        key: version.tags[key]
        for key in version.tags
        if key == GATE_RUN_TAG or (key.startswith("governance.promotion.") and key.endswith(".run"))
    }
    for key, run_id in sorted(cited.items()):
        alias = None if key == GATE_RUN_TAG else key[len("governance.promotion.") : -len(".run")]
        decision = trail.read.get(run_id) or read_record(client, run_id, policy.keys)
        if not decision.valid and run_id not in trail.reported:  # e.g. an unsigned what-if
            report.findings.append(Finding("decision_record", uri, decision.problem, alias, run_id))
            trail.reported.add(run_id)
        record = decision.record if decision.valid else None
        if record is not None and not isinstance(record, GatedRecord):
            report.findings.append(
                Finding(
                    "decision_record",
                    uri,
                    f"the status tag {key} names run {run_id}, whose record is a "
                    f"{record.kind} record, not a gate or promotion decision: the "
                    "tag was set by hand; gate or promote again",
                    alias,
                    run_id,
                )
            )
            continue
        if record is not None and digest is not None and record.evidence.digest != digest:
            what = f"the promotion to @{alias}" if alias else "the last gate evaluation"
            report.findings.append(
                Finding(
                    "superseded",
                    uri,
                    f"{what} (run {run_id}) was decided on the evidence of "
                    f"{record.surrogate.uri} (digest "
                    f"{record.evidence.digest[:16]}), not on the evidence linked now "
                    f"({version.tags.get(SURROGATE_TAG)}, digest {digest[:16]})",
                    alias,
                    run_id,
                )
            )
    for alias in held:
        needed = policy.approvals.get(alias)
        backing = [d for d in decisions.values() if _valid_promotion(d, version, alias, digest)]
        if needed and digest is not None:
            promoted = max(backing, key=signed_time) if backing else None
            promoter = promoted.record.decided_by.server_user if promoted else None
            try:
                state = approval_state(
                    client, version, alias, digest, policy.keys, needed, promoter=promoter
                )
                reason = None if state.approved else state.reason
            except GovernanceError as error:  # a blocking record: found above too
                reason = str(error)
            if reason:
                report.findings.append(
                    Finding(
                        "alias",
                        uri,
                        f"@{alias} is on {uri}, but the audited policy's approvals are not "
                        f"met on its current evidence: {reason}",
                        alias,
                    )
                )
        if not backing:
            report.findings.append(
                Finding(
                    "alias",
                    uri,
                    f"@{alias} is on {uri} without a valid signed promotion decision for "
                    "it on its current verified evidence (set by hand, on superseded or "
                    f"unverified evidence, or by a key the policy does not trust); promote "
                    f"it with govern promote --model-uri {uri} --alias {alias}, or move it",
                    alias,
                )
            )
        elif not any(d.record.policy.digest == policy.digest for d in backing):
            latest = max(backing, key=signed_time)
            report.findings.append(
                Finding(
                    "policy",
                    uri,
                    f"@{alias} was promoted to {uri} under policy "
                    f"{latest.record.policy.label!r}, not under the audited policy "
                    f"{policy.label!r} (the digests differ); promote it again under "
                    "the organisation's policy",
                    alias,
                    latest.run_id,
                )
            )
        elif report.signed_policy_required and not any(
            d.record.policy.digest == policy.digest and d.record.policy.signer for d in backing
        ):
            latest = max(backing, key=signed_time)
            report.findings.append(
                Finding(
                    "policy",
                    uri,
                    f"@{alias} was promoted to {uri} under policy {policy.label!r} without "
                    "verifying its signature, and a signed policy is required; promote it "
                    "again with --require-signed-policy and --policy-trust",
                    alias,
                    latest.run_id,
                )
            )
    promoted = {}
    for decision in decisions.values():
        alias = promoted_alias(decision, version)
        if alias is not None and (
            alias not in promoted or signed_time(decision) >= signed_time(promoted[alias])
        ):
            promoted[alias] = decision
    return promoted


@dataclass
class _Trail:
    """Every governance record of the store, read once: ``read`` by run id, ``about``
    the valid ones by the ensemble version they are about."""

    read: dict = field(default_factory=dict)
    about: dict = field(default_factory=dict)
    reported: set = field(default_factory=set)
    """Runs reported or cleared already."""


def _read_trail(client, model_name: str, policy: Policy, report: AuditReport, uris) -> _Trail:
    """List every run of every governance experiment once, read the record of each that
    is or may be about ``model_name``, and add a finding for each such record that blocks
    (unless a valid clearance covers it: then it is listed in ``report.cleared``) or was
    signed with a key the policy binds to other users (``Decision.misused``). The runs
    about each of ``uris`` (the model's versions) are what the latest link and approvals
    of each read, not searched again (:func:`flavors.trail.decisions.remember_decision_runs`)."""
    prefix = f"models:/{model_name}/"
    trail, blocking, clearances = _Trail(), [], []
    verifiers = policy.keys.trusting_any()  # who may sign a verification record
    runs = every_run_in(client, GOVERNANCE_EXPERIMENTS)
    remember_decision_runs(client, runs, uris)
    for experiment in GOVERNANCE_EXPERIMENTS:
        for run in runs[experiment]:
            bound = run.data.params.get(URI_PARAM)
            if bound is not None and not bound.startswith(prefix):
                continue  # another model's (bound for good): its own audit reads it
            keys = verifiers if experiment == VERIFICATION_EXPERIMENT else policy.keys
            decision = trail.read[run.info.run_id] = read_record(client, run, keys)
            report.decisions += 1
            about = bound or (decision.record.ensemble.uri if decision.valid else None)
            if about is not None and not about.startswith(prefix):
                continue
            if decision.valid:
                trail.about.setdefault(about, []).append(decision)
                if isinstance(decision.record, ClearanceRecord):
                    clearances.append(decision)
            elif decision.blocking or decision.misused:
                blocking.append((decision, about))
    cleared = {
        (c.run_id, c.sha256): (clearance, c)
        for clearance in clearances
        for c in clearance.record.cleared
    }
    for decision, about in blocking:
        trail.reported.add(decision.run_id)
        covered = cleared.get((decision.run_id, decision.sha256))
        if covered is not None:
            clearance, _ = covered
            report.cleared.append(
                {
                    "run_id": decision.run_id,
                    "problem": decision.problem,
                    "clearance_run_id": clearance.run_id,
                    "cleared_by": clearance.signer.name,
                    "time": clearance.record.time,
                    "reason": clearance.record.reason,
                }
            )
            continue
        where = about or f"{prefix}? (the run is bound to no version)"
        alias = alias_of(decision.record)
        report.findings.append(
            Finding("decision_record", where, decision.problem, alias, decision.run_id)
        )
    return trail


def _versions(client, model_name: str) -> list:
    """Every version of ``model_name``, every page of the registry search."""
    versions, token = [], None
    while True:
        page = client.search_model_versions(
            name_filter(model_name), max_results=VERSION_PAGE, page_token=token
        )
        versions += page
        token = page.token
        if not token:
            return versions


def _readable(client, model_name: str) -> None:
    """Nothing, or the server's 403 for ``model_name``: an authenticated server leaves
    what a user may not read out of search results, so an empty search is told apart
    from a refusal by asking for the model itself (``flavors.store.refusals`` words the
    403); a model that does not exist passes."""
    try:
        client.get_registered_model(model_name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise


def audit_model(
    model_name: str,
    policy: Policy,
    client: MlflowClient | None = None,
    require_signed_policy: bool = False,
):
    """Audit every version of ``model_name`` (module docstring); with
    ``require_signed_policy``, decisions need a verified policy signature.

    Returns
    -------
    AuditReport

    Raises
    ------
    GovernanceError
        No registered model of that name.
    """
    check_registered_name(model_name)
    client = client or CommandClient()
    source = governing(policy, model_name)
    model_name = source.name if source is not None else model_name
    versions = _versions(client, model_name)
    if not versions:
        _readable(client, model_name)
        raise GovernanceError(
            f"no registered model {model_name!r} with versions in the registry; give the "
            "ensemble's registered name (not the -surrogate one)"
        )
    report = AuditReport(
        model_name, policy.label, policy.digest, signed_policy_required=require_signed_policy
    )
    aliases = client.get_registered_model(model_name).aliases or {}
    trail = _read_trail(client, model_name, policy, report, [version_uri(v) for v in versions])
    report.about = trail.about
    latest = {}  # alias -> (decision, version) of the latest valid signed promotion
    promoted = {}  # version -> aliases it was ever validly promoted to
    for version in sorted(versions, key=lambda v: int(v.version)):
        held = sorted(a for a, v in aliases.items() if str(v) == str(version.version))
        found = _audit_version(client, version, held, policy, report, trail)
        promoted[str(version.version)] = set(found)
        for alias, decision in found.items():
            if alias not in latest or signed_time(decision) >= signed_time(latest[alias][0]):
                latest[alias] = (decision, version)
    for alias, holder in sorted(aliases.items()):
        decision, version = latest.get(alias, (None, None))
        # a holder never promoted to the alias has its own finding already
        back = alias in promoted.get(str(holder), ())
        if back and str(version.version) != str(holder):
            report.findings.append(
                Finding(
                    "alias",
                    f"models:/{model_name}/{holder}",
                    f"@{alias} is on version {holder}, but the latest signed promotion to it "
                    f"(run {decision.run_id}, {decision.record.time}) moved it to "
                    f"{version_uri(version)}: it was moved back by hand; promote the version "
                    f"that should hold it with govern promote --alias {alias}",
                    alias,
                    decision.run_id,
                )
            )
    _other_policies(trail, policy, report)
    _audit_chain(client, model_name, policy, report)
    target = governed_model(policy, model_name)
    if target is not None:
        _audit_governed(client, target.registered_model, policy, latest, report)
    report.versions = len(versions)
    return report


def _other_policies(trail: _Trail, policy: Policy, report: AuditReport) -> None:
    """List each valid decision about the model made under another policy than
    ``policy`` or, when a signed policy is required, under one without a signer."""
    for uri, decisions in sorted(trail.about.items()):
        for decision in sorted(decisions, key=signed_time):
            ref = getattr(decision.record, "policy", None)  # a link names none
            if isinstance(decision.record, VerificationRecord):  # no decision
                continue
            if ref is None or (
                ref.digest == policy.digest
                and (ref.signer is not None or not report.signed_policy_required)
            ):
                continue
            report.other_policies.append(
                {
                    "run_id": decision.run_id,
                    "kind": decision.record.kind,
                    "version": uri,
                    "alias": alias_of(decision.record),
                    "policy": ref.label,
                    "policy_digest": ref.digest,
                    "signer": ref.signer.to_json() if ref.signer else None,
                }
            )


def _audit_chain(client, model_name: str, policy: Policy, report: AuditReport) -> None:
    """Add the breaks of the model's record chain (:mod:`flavors.trail.chain`) to
    ``report``: as findings, or as cleared when a valid clearance's ``chain_through``
    covers their count (the earliest such clearance is named)."""
    problems = chain_problems(client, model_name)
    counted = [p for p in problems if p.count is not None]
    clearances = chain_clearances(client, model_name, policy.keys) if counted else []
    for problem in problems:
        covering = [
            c
            for c in clearances
            if problem.count is not None and problem.count <= c.record.chain_through
        ]
        if not covering:
            report.findings.append(
                Finding("chain", problem.version, problem.message, run_id=problem.run_id)
            )
            continue
        clearance = covering[0]
        report.cleared.append(
            {
                "run_id": problem.run_id,
                "problem": problem.message,
                "clearance_run_id": clearance.run_id,
                "cleared_by": clearance.signer.name,
                "time": clearance.record.time,
                "reason": clearance.record.reason,
            }
        )


def _audit_governed(client, name: str, policy: Policy, latest: dict, report: AuditReport):
    """Each alias of the governed model ``name``: on the version the latest valid signed
    promotion to it names, with files matching the signed evidence."""
    models = client.search_registered_models(name_filter(name))
    for alias, holder in sorted((models[0].aliases or {}).items() if models else ()):
        uri = f"models:/{name}/{holder}"
        decision, _ = latest.get(alias, (None, None))
        named = decision.record.governed if decision is not None else None
        if named is None or named.uri != uri:
            says = "no signed promotion to it exists"
            if decision is not None:
                says = (
                    f"the latest signed promotion to it (run {decision.run_id}) names "
                    f"{named.uri if named else 'no governed version'}"
                )
            report.findings.append(
                Finding(
                    "alias",
                    uri,
                    f"@{alias} is on {uri}, but {says}: it was set by hand; promote the "
                    f"version that should hold it with govern promote --alias {alias}",
                    alias,
                    decision.run_id if decision else None,
                )
            )
            continue
        try:
            verified_governed(client, client.get_model_version(name, holder), policy.keys)
        except GovernanceError as error:
            report.findings.append(Finding("alias", uri, str(error), alias, decision.run_id))
