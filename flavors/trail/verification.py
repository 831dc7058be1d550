"""Verification records: who verified a version's evidence, when, under which policy,
and what they found (``govern show``, ``audit`` and ``reproduce``).

Each time one of these commands verifies an ensemble version it leaves one signed
``verification`` record (:class:`governance.trust.records.VerificationRecord`: action,
result ``verified|failed|identical|different`` and one line of detail) in a new run of
the experiment :data:`flavors.trail.decisions.VERIFICATION_EXPERIMENT`, bound like every
record (:func:`flavors.trail.decisions.record_in_new_run`: one run, the record and its
signature), but **not chained**: a reviewer's read never waits for the chain lock of
promotions. ``govern gate`` writes no second record: its gate record counts.

The record is signed with the command's signing key, and names its signer
(``decided_by.key_name``) when the policy trusts that key, or that certificate's
identity, for any purpose (:meth:`governance.trust.keyring.TrustedKeys.trusting_any`),
else it is recorded unnamed ("an untrusted key <fingerprint>" on the page). Without a key
nothing is recorded, and the CLI says so once; nothing here changes a command's outcome.

No decision reads these records (:func:`flavors.trail.decisions.trail_runs` leaves the
experiment out): one that does not verify never blocks a gate, an approval or a
promotion; ``govern audit`` reports it. The ensemble version's page shows the latest of
each action (:func:`verified_section`), from run tags like the rest of the page;
 the writer rewrites that section alone (one request) after a record is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_USER

from miret_governance.flavors.store.registry import (
    ENSEMBLE_URI_TAG,
    EVIDENCE_DIGEST_TAG,
    POLICY_RUN_TAG,
    RESULT_RUN_TAG,
    markdown_literal,
    resolve_model_version,
    version_uri,
)
from miret_governance.flavors.trail.decisions import (
    GATE_EXPERIMENT,
    KIND_PARAM,
    SIGNER_TAG,
    SURROGATE_URI_TAG,
    UNSIGNED,
    VERIFICATION_EXPERIMENT,
    VERIFICATION_TAGS,
    decided_by,
    decision_runs_in,
    now_utc,
    pinned,
    policy_ref,
    record_in_new_run,
    run_tags,
)
from miret_governance.governance.trust.keyring import (
    ANY_PURPOSE,
    SignatureError,
    Signer,
    TrustedKeys,
)
from miret_governance.governance.trust.records import (
    DecidedBy,
    EvidenceRef,
    VerificationRecord,
)

ACTIONS = ("gate", "show", "audit", "reproduce")
"""The page's rows, in order (a ``gate`` row is the latest gate record's)."""
NO_KEY = "not recorded: no signing key"
"""What a command says on stderr when it verified without a signing key."""
MAX_DETAIL = 500
"""Characters of ``detail`` kept (one line)."""
HEADING = "**Verified**"
_SECTION = re.compile(r"\*\*Verified\*\*[^\n]*\n\n(?:\|[^\n]*\n)*\n?")
"""The section as :func:`verified_section` writes it, wherever it is on the page."""


@dataclass(frozen=True)
class Verified:
    """What one command verified of one ensemble version, to be recorded.

    Attributes
    ----------
    ensemble, surrogate : ModelVersion
    evidence : EvidenceRef
        The evidence's digest and the key that signed it (signer None: it did not verify).
    action : str
        One of ``show``, ``audit``, ``reproduce``.
    result : str
        ``verified`` or ``failed`` (``identical`` or ``different`` for ``reproduce``).
    detail : str
        One line: what was checked, or why it failed.
    """

    ensemble: object
    surrogate: object
    evidence: EvidenceRef
    action: str
    result: str
    detail: str


def verifier(policy, key, client: MlflowClient) -> DecidedBy:
    """``decided_by`` of a verification record signed with ``key``: named when ``policy``
    trusts the key (or its certificate's identity) for any purpose now, unnamed
    otherwise (:func:`flavors.trail.decisions.decided_by`).

    Raises
    ------
    flavors.trail.decisions.DecisionError
        The policy binds the key to other users than the one the server vouches for.
    """
    trusted = policy.keys.trusting_any()
    try:
        trusted.signer_for(key, ANY_PURPOSE, "a verification", datetime.now(timezone.utc))
    except SignatureError:  # not trusted now: recorded as an untrusted key
        trusted = TrustedKeys()
    return decided_by(trusted, key, client, ANY_PURPOSE)


def record_verification(client: MlflowClient, policy, key, verified: Verified) -> str | None:
    """Write ``verified`` as a verification record signed with ``key`` under ``policy``
    in a new run of :data:`VERIFICATION_EXPERIMENT`, then the "Verified" section of the
    ensemble's page (:func:`verified_section`, with this record).

    Returns
    -------
    str or None
        None; or, when the store refused the page (a reviewer may write the experiment
        but not the data scientists' model), a line saying the record was written but
        the page not updated.

    Raises
    ------
    GovernanceError
        A key the policy binds to other users (nothing recorded).
    MlflowException
        The store refused the record (nothing recorded).
    """
    ensemble, surrogate = verified.ensemble, verified.surrogate
    # the page as it is and its rows, read before writing: a command that read them
    # already (show, audit) makes no request here
    current = client.get_model_version(ensemble.name, ensemble.version)
    latest = latest_rows(client, current)
    detail = " ".join(verified.detail.split())[:MAX_DETAIL]
    record = VerificationRecord(
        ensemble=pinned(ensemble),
        surrogate=pinned(surrogate),
        evidence=verified.evidence,
        policy=policy_ref(policy),
        action=verified.action,
        result=verified.result,
        detail=detail,
        decided_by=verifier(policy, key, client),
        time=now_utc(),
    )
    tags = {
        ENSEMBLE_URI_TAG: record.ensemble.uri,
        SURROGATE_URI_TAG: record.surrogate.uri,
        EVIDENCE_DIGEST_TAG: record.evidence.digest,
        POLICY_RUN_TAG: policy.label,
        MLFLOW_USER: record.decided_by.mlflow_user,
        **dict(zip(VERIFICATION_TAGS, (record.action, record.result, record.detail))),
    }
    name = f"{record.action.upper()} {record.result} · {ensemble.name} v{ensemble.version}"
    run_id = record_in_new_run(client, VERIFICATION_EXPERIMENT, name, tags, record, key)
    latest[record.action] = (tags | run_tags(record), record.signed_at)
    try:
        _rewrite_page(client, current, _section(latest, record.evidence.digest))
    except MlflowException as error:
        return (
            f"verification recorded (run {run_id}), but the page of {record.ensemble.uri} "
            f"was not updated ({error.error_code}): the next gate or explain rewrites it"
        )
    return None


# ---------------------------------------------------------------------- what each command verified
def shown(client: MlflowClient, summary: dict) -> Verified:
    """What ``govern show`` verified (:func:`flavors.read.review.describe_for_review`'s
    summary): the surrogate's signature and that the signed link names it."""
    signer: Signer = summary["signer"]
    return Verified(
        resolve_model_version(client, summary["ensemble"]["uri"]),
        resolve_model_version(client, summary["uri"]),
        EvidenceRef(summary["evidence_digest"], signer),
        "show",
        "verified",
        f"evidence signed by {signer.describe()} verified; it explains this version and is "
        "the one the latest signed link names",
    )


def reproduced(client: MlflowClient, result) -> Verified:
    """What ``govern reproduce`` found (a :class:`flavors.read.reproduce.Reproduction`):
    ``identical``, or ``different`` and why."""
    digests, hit = result.tree_digest, result.time_limit_hit
    if result.identical:
        detail = f"the same tree (digest {str(digests['recorded'])[:16]}) and headline metrics"
    else:
        reasons = []
        if digests["recorded"] != digests["reproduced"]:
            reasons.append(
                f"tree digest {str(digests['recorded'])[:16]} recorded, "
                f"{str(digests['reproduced'])[:16]} now"
            )
        unequal = [name for name, m in result.metrics.items() if not m["equal"]]
        if unequal:
            reasons.append(f"metrics differ: {', '.join(unequal)}")
        if hit["recorded"] or hit["reproduced"]:
            reasons.append("the time limit cut a fit short")
        detail = "; ".join(reasons)
    if result.versions_differ:
        detail += f"; versions differ: {', '.join(result.versions_differ)}"
    return Verified(
        resolve_model_version(client, result.ensemble_uri),
        resolve_model_version(client, result.surrogate_uri),
        EvidenceRef(result.evidence_digest, Signer(**result.signed_by)),
        "reproduce",
        "identical" if result.identical else "different",
        detail,
    )


def audited(client: MlflowClient, report) -> list:
    """What ``govern audit`` verified (a :class:`flavors.trail.audit.AuditReport`): one
    :class:`Verified` per version holding an alias (``report.holders``; one with no
    readable linked surrogate has nothing to name and is left out), ``verified`` when
    no finding is about it, else ``failed`` with the first."""
    elsewhere = len(report.findings)
    listed = []
    for holder in report.holders:
        if holder.surrogate is None:
            continue
        uri = version_uri(holder.version)
        about = [f for f in report.findings if f.version == uri]
        elsewhere -= len(about)
        checked = holder.checked
        evidence = (
            EvidenceRef(checked.digest, checked.signer)
            if checked is not None
            else EvidenceRef(holder.surrogate.tags.get(EVIDENCE_DIGEST_TAG, ""), None)
        )
        detail = (
            f"{len(about)} finding(s), the first: {about[0].kind}: {about[0].message}"
            if about
            else f"no finding about this version under policy {report.policy}"
        )
        listed.append((holder, evidence, "failed" if about else "verified", detail))
    return [
        Verified(
            holder.version,
            holder.surrogate,
            evidence,
            "audit",
            result,
            detail + (f" ({elsewhere} about other versions or the chain)" if elsewhere else ""),
        )
        for holder, evidence, result, detail in listed
    ]


# ---------------------------------------------------------------------- the page
def latest_rows(client: MlflowClient, ensemble_version) -> dict:
    """Action -> (run tags, start time) of the latest gate record and the latest
    verification record of each action about ``ensemble_version``: one search of both
    experiments (none within a command that searched them already)."""
    about = decision_runs_in(
        client, (GATE_EXPERIMENT, VERIFICATION_EXPERIMENT), version_uri(ensemble_version)
    )
    entries = [
        (r, "gate") for r in about[GATE_EXPERIMENT] if r.data.params.get(KIND_PARAM) == "gate"
    ]
    entries += [(r, r.data.tags.get(VERIFICATION_TAGS[0])) for r in about[VERIFICATION_EXPERIMENT]]
    latest = {}
    for run, action in sorted(entries, key=lambda entry: entry[0].info.start_time or 0):
        if action in ACTIONS:
            when = datetime.fromtimestamp(run.info.start_time / 1000, timezone.utc)
            latest[action] = (run.data.tags, when)
    return latest


def _by(tags: dict) -> str:
    """Who signed, from the run's tags: the key's policy name, or an untrusted key."""
    signer = tags.get(SIGNER_TAG) or UNSIGNED
    if signer == UNSIGNED:
        key = "unsigned"
    elif re.fullmatch(r"[0-9a-f]{64}", signer):  # decided_by named no key
        key = f"an untrusted key {signer[:16]}"
    else:
        key = f"key {markdown_literal(signer)}"
    return f"{key}, user {markdown_literal(tags.get(MLFLOW_USER) or 'unknown')}"


def _section(latest: dict, digest: str | None) -> str:
    """The section of :func:`latest_rows`' ``latest`` (``""`` when empty)."""
    rows = []
    for action in (a for a in ACTIONS if a in latest):
        tags, when = latest[action]
        result = tags.get(RESULT_RUN_TAG if action == "gate" else VERIFICATION_TAGS[1], "?")
        detail = markdown_literal(tags.get(VERIFICATION_TAGS[2], ""))
        on = tags.get(EVIDENCE_DIGEST_TAG, "")
        if digest is not None and on != digest:
            detail = f"on other evidence (digest `{markdown_literal(on[:16])}`) {detail}".strip()
        rows.append(
            f"| {action} | **{markdown_literal(result)}** | {_by(tags)} | "
            f"{when.strftime('%Y-%m-%d %H:%M UTC')} | "
            f"{markdown_literal(tags.get(POLICY_RUN_TAG, 'unknown policy'))} | "
            f"{detail} |"
        )
    if not rows:
        return ""
    head = (
        f"{HEADING} (the latest of each; signed records in experiments "
        f"{GATE_EXPERIMENT} and {VERIFICATION_EXPERIMENT}, checked by govern audit)\n\n"
        "| Action | Result | By | When | Policy | Detail |\n|---|---|---|---|---|---|\n"
    )
    return head + "".join(f"{row}\n" for row in rows) + "\n"


def verified_section(client: MlflowClient, ensemble_version, digest: str | None = None) -> str:
    """The page's "Verified" section: the latest gate record and the latest verification
    record of each action about ``ensemble_version`` (who, when, under which policy,
    result; ``digest``: the evidence linked now, a row on other evidence says so), from
    their runs' tags (:func:`latest_rows`; ``govern audit`` verifies the records behind
    them); ``""`` when there is none."""
    return _section(latest_rows(client, ensemble_version), digest)


def _rewrite_page(client: MlflowClient, version, section: str) -> None:
    """Put ``section`` in place of the page's "Verified" section (at its end when it has
    none); a version without a page (never explained) is left alone."""
    text = version.description or ""
    found = _SECTION.search(text)
    if found is not None:
        updated = text[: found.start()] + section + text[found.end() :]
    else:
        updated = f"{text.rstrip()}\n\n{section.rstrip()}\n"
    if text and updated != text:
        client.update_model_version(version.name, version.version, description=updated)
