"""``govern audit``: the promotion trail of a registered model, checked end to end.

For every version of the model the audit verifies, with the keys a policy trusts:

- **alias**: each alias's holder has a valid signed promotion decision (kind
  ``promotion``, decision ``promoted``, for that alias and this ensemble version's URI
  and model id) on the evidence its linked surrogate holds now, and that evidence
  verifies; an alias set by hand (in the MLflow UI, or by any API call) has none; the
  holder is the version the latest signed promotion to that alias moved it to (by the
  records' signed time: an alias moved back by hand to a version promoted earlier is
  found); and when the audited policy's ``[approvals]`` names the alias, the holder's
  current evidence has the approvals it requires and no standing rejection (a promotion
  decided under a laxer policy is found);
- **superseded**: the decisions a version's status tags show (``governance.last_gate.run``,
  ``governance.promotion.<alias>.run``) were made on the current evidence;
- **evidence**: the linked surrogate's evidence is signed by a key trusted for
  ``explain``, unaltered, and passes the gate's checks, among them that the link tag
  names the surrogate of the latest signed link record (:mod:`flavors.links`);
- **decision_record**: every decision record of the model's gate, promotion and approval
  runs verifies (unsigned what-if gate runs count only when a status tag cites them); and
  no verified record about a version of the model sits on a run tagged with another
  version, alias (an approval) or decision (a promotion): the gates, ``promote`` and the
  audit find records by those tags, so re-tagging a run hides its record from them
  (:func:`_retagged`; this reads every record of the store's gate, approval and link
  experiments).

Nothing here reads a tag as proof: tags only say where to look.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mlflow import MlflowClient

from miret_governance.flavors.decisions import (
    ALIAS_RUN_TAG,
    APPROVAL_EXPERIMENT,
    GATE_EXPERIMENT,
    SIGNER_TAG,
    UNSIGNED,
    Decision,
    approval_state,
    decision_runs,
    every_run,
    read_record,
    signed_time,
)
from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.gate_evidence import checked_evidence
from miret_governance.flavors.gating import linked_surrogate
from miret_governance.flavors.links import LINK_EXPERIMENT
from miret_governance.flavors.registry import (
    ENSEMBLE_URI_TAG,
    GATE_RUN_TAG,
    PROMOTION_TAG,
    SURROGATE_TAG,
    check_registered_name,
    model_id_of,
    name_filter,
    version_uri,
)
from miret_governance.governance.policy import Policy

KINDS = ("alias", "superseded", "evidence", "decision_record")


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
    """

    model_name: str
    policy: str
    policy_digest: str
    versions: int = 0
    decisions: int = 0
    findings: list = field(default_factory=list)

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
        }


def _evidence_digest(client, version, policy: Policy, report: AuditReport) -> str | None:
    """The verified evidence digest of the version's linked surrogate, or a finding."""
    uri = version_uri(version)
    if not version.tags.get(SURROGATE_TAG):
        return None
    try:
        surrogate = linked_surrogate(client, version)
        return checked_evidence(client, version, surrogate, policy.keys, current=True).digest
    except GovernanceError as error:
        report.findings.append(Finding("evidence", uri, str(error)))
        return None


def _promoted_alias(decision: Decision, version) -> str | None:
    """The alias a valid signed promotion of ``version`` moved (None for any other
    decision)."""
    record = decision.record
    if (
        decision.valid
        and record.get("kind") == "promotion"
        and record.get("decision") == "promoted"
        and record.get("ensemble")
        == {"uri": version_uri(version), "model_id": model_id_of(version) or ""}
    ):
        return record.get("alias")
    return None


def _valid_promotion(decision: Decision, version, alias: str, digest: str | None) -> bool:
    """A valid signed promotion of ``version`` to ``alias`` on the evidence ``digest``."""
    return (
        digest is not None
        and _promoted_alias(decision, version) == alias
        and (decision.record.get("evidence") or {}).get("digest") == digest
    )


def _audit_version(
    client, version, held: list, policy: Policy, report: AuditReport, read: dict
) -> dict:
    """Add the findings of one version to ``report``; its valid signed promotions by
    alias (the latest decision of each). ``read`` collects the records read, by run id."""
    uri = version_uri(version)
    digest = _evidence_digest(client, version, policy, report)
    runs = decision_runs(client, GATE_EXPERIMENT, uri) + decision_runs(
        client, APPROVAL_EXPERIMENT, uri
    )
    cited = {
        key: version.tags[key]
        for key in version.tags
        if key == GATE_RUN_TAG or (key.startswith("governance.promotion.") and key.endswith(".run"))
    }
    decisions = {}
    for run in runs:
        run_id = run.info.run_id
        decision = decisions[run_id] = read[run_id] = read_record(client, run_id, policy.keys)
        unsigned_what_if = run.data.tags.get(SIGNER_TAG) == UNSIGNED and (
            decision.record.get("kind") == "gate"
        )
        if not decision.valid and not (unsigned_what_if and run_id not in cited.values()):
            report.findings.append(Finding("decision_record", uri, decision.problem, None, run_id))
    report.decisions += len(runs)
    for key, run_id in sorted(cited.items()):
        alias = None if key == GATE_RUN_TAG else key[len("governance.promotion.") : -len(".run")]
        decision = decisions.get(run_id) or read_record(client, run_id, policy.keys)
        if run_id not in decisions and not decision.valid:
            report.findings.append(Finding("decision_record", uri, decision.problem, alias, run_id))
        decided_on = (decision.record.get("evidence") or {}).get("digest")
        if decision.valid and digest is not None and decided_on != digest:
            what = f"the promotion to @{alias}" if alias else "the last gate evaluation"
            report.findings.append(
                Finding(
                    "superseded",
                    uri,
                    f"{what} (run {run_id}) was decided on the evidence of "
                    f"{decision.record.get('surrogate', {}).get('uri')} (digest "
                    f"{str(decided_on)[:16]}), not on the evidence linked now "
                    f"({version.tags.get(SURROGATE_TAG)}, digest {digest[:16]})",
                    alias,
                    run_id,
                )
            )
    for alias in held:
        needed = policy.approvals.get(alias)
        if needed and digest is not None:
            state = approval_state(client, version, alias, digest, policy.keys, needed)
            if not state.approved:
                report.findings.append(
                    Finding(
                        "alias",
                        uri,
                        f"@{alias} is on {uri}, but the audited policy's approvals are not "
                        f"met on its current evidence: {state.reason}",
                        alias,
                    )
                )
        if not any(_valid_promotion(d, version, alias, digest) for d in decisions.values()):
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
    promoted = {}
    for decision in decisions.values():
        alias = _promoted_alias(decision, version)
        if alias is not None and (
            alias not in promoted or signed_time(decision) >= signed_time(promoted[alias])
        ):
            promoted[alias] = decision
    return promoted


def _retagged(client, model_name: str, policy: Policy, report: AuditReport, read: dict) -> None:
    """Add a finding for each verified record about a version of ``model_name`` whose
    run's tags say otherwise: another version, or another alias (an approval) or decision
    (a promotion). Whoever can write the store can re-tag a run, and every search by
    those tags then misses it (a rejection no longer blocks, a later promotion no longer
    shows an alias moved back). ``read``: records already read, by run id."""
    prefix = f"models:/{model_name}/"
    for experiment in (GATE_EXPERIMENT, APPROVAL_EXPERIMENT, LINK_EXPERIMENT):
        for run in every_run(client, experiment):
            run_id = run.info.run_id
            decision = read.get(run_id) or read_record(client, run_id, policy.keys)
            record = decision.record
            about = str((record.get("ensemble") or {}).get("uri", ""))
            if not decision.valid or not about.startswith(prefix):
                continue
            signed = {ENSEMBLE_URI_TAG: about}
            if record.get("kind") == "approval":
                signed[ALIAS_RUN_TAG] = record.get("alias")
            if record.get("kind") == "promotion":
                signed[PROMOTION_TAG.format(alias=record.get("alias"))] = record.get("decision")
            for tag, value in signed.items():
                if run.data.tags.get(tag) != value:
                    report.findings.append(
                        Finding(
                            "decision_record",
                            about,
                            f"run {run_id}'s signed {record.get('kind')} record says "
                            f"{tag} = {value!r}, but the run is tagged "
                            f"{run.data.tags.get(tag)!r}: it was re-tagged, which hides it "
                            "from the searches of the gates, promote and the audit; restore "
                            "the run's tags",
                            record.get("alias"),
                            run_id,
                        )
                    )


def audit_model(model_name: str, policy: Policy, client: MlflowClient | None = None):
    """Audit every version of ``model_name`` (module docstring).

    Returns
    -------
    AuditReport

    Raises
    ------
    GovernanceError
        No registered model of that name.
    """
    check_registered_name(model_name)
    client = client or MlflowClient()
    versions = client.search_model_versions(name_filter(model_name))
    if not versions:
        raise GovernanceError(
            f"no registered model {model_name!r} with versions in the registry; give the "
            "ensemble's registered name (not the -surrogate one)"
        )
    report = AuditReport(model_name, policy.label, policy.digest)
    aliases = client.get_registered_model(model_name).aliases or {}
    latest = {}  # alias -> (decision, version) of the latest valid signed promotion
    promoted = {}  # version -> aliases it was ever validly promoted to
    read = {}  # run id -> Decision, every record read
    for version in sorted(versions, key=lambda v: int(v.version)):
        held = sorted(a for a, v in aliases.items() if str(v) == str(version.version))
        found = _audit_version(client, version, held, policy, report, read)
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
                    f"(run {decision.run_id}, {decision.record.get('time')}) moved it to "
                    f"{version_uri(version)}: it was moved back by hand; promote the version "
                    f"that should hold it with govern promote --alias {alias}",
                    alias,
                    decision.run_id,
                )
            )
    _retagged(client, model_name, policy, report, read)
    report.versions = len(versions)
    return report
