"""Promotion and approval: compare-and-set of an alias, after gates and approvals, with
a signed decision record of every outcome.

``promote`` is compare-and-set: it reads which version holds the alias when it starts
(or is told, ``expected_holder``), takes the alias's promotion lock
(:func:`flavors.promotion_lock.promotion_lock`), and inside it refuses to go on when the
alias moved meanwhile. Of two concurrent promotions to one alias exactly one succeeds;
the other records nothing and raises :class:`ConcurrentPromotionError` (exit code 2).
A policy's ``[approvals]`` makes the gates necessary but not sufficient: the alias also
needs that many distinct approver keys whose latest signed decision on the current
evidence is an approval (one rejection blocks).

A policy's drift gates are decided as ``gate`` decides them
(:func:`flavors.diff.drift_results`), on the rows of ``data``; without data, a policy with
``min_cross_fidelity`` is decided on the figures a signed gate record holds
(:func:`flavors.recorded_drift.recorded_drift`). The figures go into the promotion's own
signed record (``drift``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_USER

from miret_governance.flavors.errors import GateError
from miret_governance.flavors.gates.gate_evidence import checked_evidence
from miret_governance.flavors.gates.gating import (
    GateOutcome,
    evaluate_and_record,
    linked_surrogate,
    log_gate_markdown,
)
from miret_governance.flavors.gates.recorded_drift import recorded_drift
from miret_governance.flavors.store.reads import CommandClient
from miret_governance.flavors.store.registry import (
    ENSEMBLE_URI_TAG,
    EVIDENCE_DIGEST_TAG,
    PROMOTION_RUN_TAG,
    PROMOTION_TAG,
    resolve_model_version,
    set_version_tag,
    version_uri,
)
from miret_governance.flavors.trail.chain import check_chain
from miret_governance.flavors.trail.decisions import (
    ALIAS_RUN_TAG,
    APPROVAL_EXPERIMENT,
    COMMENT_RUN_TAG,
    DECISION_RUN_TAG,
    DecisionError,
    approval_state,
    check_trail,
    decided_by,
    finish_with_record,
    new_record,
    record_in_new_run,
    require_key,
)
from miret_governance.flavors.trail.descriptions import describe_versions
from miret_governance.flavors.trail.governed import governed_model, release
from miret_governance.flavors.trail.promotion_lock import ConcurrentPromotionError, promotion_lock
from miret_governance.flavors.trust import default_signing_key
from miret_governance.governance.report.gate_markdown import ApprovalRow, ApprovalsSection
from miret_governance.governance.trust.policy import Policy
from miret_governance.governance.trust.records import ApprovalRecord, PromotionRecord
from miret_governance.governance.trust.signers import SigningKey

_ALIAS = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
DECISIONS = ("approve", "reject")


def check_alias(alias: str) -> None:
    """Refuse an alias MLflow would reject (:class:`GateError`), before any connection."""
    if not _ALIAS.match(alias) or alias.lower() == "latest" or re.match(r"^v\d+$", alias):
        raise GateError(
            f"alias {alias!r} is not valid: use letters, digits, '_' and '-', starting "
            "with a letter, and not 'latest' or 'v<number>'"
        )


def _alias_version(client: MlflowClient, name: str, alias: str) -> str | None:
    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def _signing_key(signing_key: SigningKey | None, policy: Policy, command: str, purpose: str):
    """The key of the job (argument, else ``GOVERN_SIGNING_KEY``:
    :func:`flavors.trust.default_signing_key`), trusted by ``policy`` for ``purpose``: a
    decision no policy would count is refused before it is recorded."""
    key = require_key(signing_key or default_signing_key(), command, purpose)
    policy.keys.signer_for(
        key, purpose, f"the decision {command} records", datetime.now(timezone.utc)
    )
    return key


@dataclass
class PromotionOutcome:
    """Outcome of :func:`promote_model_version`.

    Attributes
    ----------
    gate : GateOutcome
    alias : str
    promoted : bool
    alias_version : str or None
        Version the alias points to afterwards (None when it points nowhere).
    reason : str
        Why it was promoted or refused (gates, approvals).
    governed : str or None
        The governed version the alias was also set on (the policy's ``[governed]``).
    """

    gate: GateOutcome
    alias: str
    promoted: bool
    alias_version: str | None
    reason: str
    governed: str | None = None


def _moved(client: MlflowClient, name: str, alias: str, expected, holder) -> str:
    """Who moved the alias from ``expected`` to ``holder`` (the holder's promotion run)."""
    run = None
    if holder is not None:
        tags = client.get_model_version(name, holder).tags
        run = tags.get(PROMOTION_RUN_TAG.format(alias=alias))
    by = f" by the promotion of run {run}" if run else ""
    return (
        f"@{alias} moved from {f'version {expected}' if expected else 'no version'} to "
        f"{f'version {holder}' if holder else 'no version'}{by} while this promotion was "
        "starting (a concurrent promotion); nothing was recorded; run promote again to "
        "decide against the new holder"
    )


def promote_model_version(
    model_uri: str,
    alias: str,
    policy: Policy,
    client: MlflowClient | None = None,
    signing_key: SigningKey | None = None,
    expected_holder: str | None = None,
    data=None,
) -> PromotionOutcome:
    """Run the gates and the approvals, and set ``alias`` on the version only when all
    of them pass, unless the alias moved since the promotion started.

    When ``policy`` governs the model (``[governed]``), a promotion also sets ``alias``
    on the governed registered model's version holding the very files the evidence pins
    (:func:`flavors.trail.governed.release`; the record's ``governed`` names it). A
    refusal leaves the alias where it was. The decision is a signed record on the gate
    run (kind ``promotion``), tagged on the version as ``governance.promotion.<alias>``
    (``promoted``/``refused``) with ``governance.promotion.<alias>.run``. A failed
    re-evaluation of the version that already holds the alias keeps its ``promoted``
    status: a version holding an alias never shows a refusal for it.

    Parameters
    ----------
    model_uri : str
    alias : str
    policy : Policy
        Its gates, its ``[approvals]`` and the keys it trusts.
    client : MlflowClient, optional
    signing_key : SigningKey, optional
        Signs the decision (default: ``GOVERN_SIGNING_KEY``); required, and trusted by
        ``policy`` for ``decide``.
    expected_holder : str, optional
        The version the caller expects to hold the alias (``"none"``: no version);
        default: the one holding it when the call starts.
    data : str, path, governance.data.spark.frames.DataSource or Spark DataFrame, optional
        Rows the gates measure on, as ``govern gate --data`` (a file, or Spark data
        counted in Spark): the surrogate's fidelity recomputed and the drift gates'
        cross-fidelity; the signed record names them. Without it, a policy's
        ``min_cross_fidelity`` is decided on
        :func:`flavors.recorded_drift.recorded_drift`.

    Raises
    ------
    ConcurrentPromotionError
        Another promotion to the alias holds its lock, or the alias is not on
        ``expected_holder`` (nothing recorded).
    DecisionError, governance.trust.keyring.SignatureError
        No signing key, one the policy does not trust for ``decide``, or one it binds
        to users other than the one the server authenticated; or, without
        ``data``, no recorded cross-fidelity for ``min_cross_fidelity`` (nothing
        recorded).
    GateError
        An alias MLflow would reject (nothing recorded).
    """
    check_alias(alias)
    key = _signing_key(signing_key, policy, "promote", "decide")
    client = client or CommandClient()
    by = decided_by(policy.keys, key, client)
    version = resolve_model_version(client, model_uri)
    name, number, uri = version.name, str(version.version), version_uri(version)
    if expected_holder is None:
        expected = _alias_version(client, name, alias)
    else:
        expected = None if str(expected_holder).lower() == "none" else str(expected_holder)
    check_trail(client, version, policy.keys, alias)  # before a lock could be taken over
    check_chain(client, name, policy.keys)
    with promotion_lock(client, name, alias, uri, key, policy.keys) as taken_over:
        holder = _alias_version(client, name, alias)
        if holder != expected:
            raise ConcurrentPromotionError(_moved(client, name, alias, expected, holder))
        recorded = None
        if data is None and "min_cross_fidelity" in policy.gates:
            recorded = partial(recorded_drift, client, policy)
        gated = evaluate_and_record(client, uri, policy, data, decide_drift=recorded)
        outcome, checked = gated.outcome, gated.checked
        passed = outcome.evaluation.all_passed
        reason = "every gate passed"
        if not passed:
            failed = [f"{r.name}: {r.reason}" for r in outcome.evaluation.results if not r.passed]
            reason = "a gate failed: " + "; ".join(failed)
        counted, approval_words = [], "not read, as a gate failed"
        needed = policy.approvals.get(alias, 0)
        if passed and needed:
            try:
                approvals = approval_state(
                    client, gated.version, alias, checked.digest, policy.keys, needed,
                    promoter=by.server_user,
                )  # fmt: skip
            except BaseException:  # the gate run holds no decision: it failed
                client.set_terminated(outcome.run_id, "FAILED")
                raise
            counted, passed = approvals.counted, approvals.approved
            approval_words = approvals.reason
            reason = f"{reason}; {approvals.reason}"
        if needed:
            try:
                section = _approvals_section(alias, needed, counted, approval_words)
                log_gate_markdown(
                    client, outcome.run_id, outcome.evaluation, policy, outcome.ensemble_uri,
                    outcome.surrogate_uri, outcome.time, approvals=section,
                )  # fmt: skip
            except BaseException:  # the gate run holds no decision: it failed
                client.set_terminated(outcome.run_id, "FAILED")
                raise
        target = governed_model(policy, name)
        governed = None
        if passed and target is not None:
            try:  # the governed version first: the record names it
                governed = release(
                    client, target.registered_model, gated.version, checked, gated.surrogate,
                    outcome.run_id,
                )  # fmt: skip
            except BaseException:  # the gate run holds no decision: it failed
                client.set_terminated(outcome.run_id, "FAILED")
                raise
        status = "promoted" if passed else "refused"
        record = new_record(
            PromotionRecord,
            gated.version,
            gated.surrogate,
            checked,
            policy,
            by,
            result="PASS" if outcome.evaluation.all_passed else "FAIL",
            alias=alias,
            decision=status,
            reason=reason,
            approvals=tuple(
                {"run_id": d.run_id, "decision": d.record.decision} | d.signer.to_json()
                for d in counted
            ),
            drift=outcome.drift or None,
            data=outcome.data,
            lock_taken_over=taken_over.to_json() if taken_over else None,
            governed=governed,
        )
        finish_with_record(client, outcome.run_id, record, key, policy.keys)
        if governed is not None:  # what serving reads moves first
            client.set_registered_model_alias(
                target.registered_model, alias, governed.uri.rsplit("/", 1)[1]
            )
        if passed:
            client.set_registered_model_alias(name, alias, number)
        tag = PROMOTION_TAG.format(alias=alias)
        if passed or holder != number:
            set_version_tag(client, name, number, tag, status)
            set_version_tag(
                client, name, number, PROMOTION_RUN_TAG.format(alias=alias), outcome.run_id
            )
        client.set_tag(outcome.run_id, tag, status)
    describe_versions(
        client,
        gated.version,
        gated.surrogate,
        checked.evidence,
        checked.features,
        checked.signer,
    )
    return PromotionOutcome(
        gate=outcome,
        alias=alias,
        promoted=passed,
        alias_version=_alias_version(client, name, alias),
        reason=reason,
        governed=governed.uri if governed is not None else None,
    )


def _approvals_section(alias, needed, counted, words) -> ApprovalsSection:
    """The promotion's approvals for its run's ``gate_report.md``: how many were needed,
    what the promotion said of them (``words``) and each counted reviewer's decision."""
    rows = tuple(
        ApprovalRow(
            reviewer=f"{d.signer.describe()}, user {d.record.decided_by.mlflow_user}",
            decision=d.record.decision,
            time=d.record.time,
            comment=d.record.comment,
        )
        for d in counted
    )
    return ApprovalsSection(alias, needed, words, rows)


@dataclass
class ApprovalOutcome:
    """Outcome of :func:`approve_model_version`.

    Attributes
    ----------
    ensemble_uri, surrogate_uri : str
    alias, decision, comment : str
    evidence_digest : str
        The evidence approved or rejected.
    signer : str
        The policy's name of the approver key.
    run_id : str
        The approval run (experiment ``governance-approvals``).
    time : str
    """

    ensemble_uri: str
    surrogate_uri: str
    alias: str
    decision: str
    comment: str
    evidence_digest: str
    signer: str
    run_id: str
    time: str


def approve_model_version(
    model_uri: str,
    alias: str,
    decision: str,
    comment: str,
    policy: Policy,
    client: MlflowClient | None = None,
    signing_key: SigningKey | None = None,
) -> ApprovalOutcome:
    """Record a reviewer's signed approval or rejection of promoting ``model_uri`` to
    ``alias``, bound to the ensemble version and its linked surrogate's evidence.

    Parameters
    ----------
    decision : {"approve", "reject"}
    comment : str
        Why (required).
    signing_key : SigningKey, optional
        The reviewer's key (default ``GOVERN_SIGNING_KEY``), trusted by ``policy`` for
        ``approve``.

    Raises
    ------
    DecisionError
        Another decision, no comment, no signing key, or one the policy binds to users
        other than the one the server authenticated (nothing recorded).
    governance.trust.keyring.SignatureError
        A key the policy does not trust to approve, or evidence that does not verify.
    GateError
        No linked surrogate, or evidence that fails the gate's checks.
    """
    check_alias(alias)
    if decision not in DECISIONS:
        raise DecisionError(f"--decision {decision!r}: use approve or reject")
    if not comment or not comment.strip():
        raise DecisionError("an approval needs a --comment saying what was reviewed")
    key = _signing_key(signing_key, policy, "approve", "approve")
    client = client or CommandClient()
    by = decided_by(policy.keys, key, client, "approve")
    version = resolve_model_version(client, model_uri)
    surrogate = linked_surrogate(client, version)
    check_trail(client, version, policy.keys, alias)
    checked = checked_evidence(client, version, surrogate, policy.keys, current=True)
    record = new_record(
        ApprovalRecord,
        version,
        surrogate,
        checked,
        policy,
        by,
        alias=alias,
        decision=decision,
        comment=comment.strip(),
    )
    uri, surrogate_uri = version_uri(version), version_uri(surrogate)
    run_id = record_in_new_run(
        client,
        APPROVAL_EXPERIMENT,
        f"{decision.upper()} @{alias} · {version.name} v{version.version}",
        {
            MLFLOW_USER: by.mlflow_user,
            ENSEMBLE_URI_TAG: uri,
            "governance.surrogate_uri": surrogate_uri,
            EVIDENCE_DIGEST_TAG: checked.digest,
            ALIAS_RUN_TAG: alias,
            DECISION_RUN_TAG: decision,
            COMMENT_RUN_TAG: comment.strip()[:500],
        },
        record,
        key,
        policy.keys,
    )
    try:
        describe_versions(
            client, version, surrogate, checked.evidence, checked.features, checked.signer
        )
    except MlflowException as error:
        # On a server with roles an approver only reads the models (docs/deployment.md): the
        # pages are for people, and the next gate or promote (CI) writes them again.
        if error.error_code != "PERMISSION_DENIED":
            raise
    return ApprovalOutcome(
        ensemble_uri=uri,
        surrogate_uri=surrogate_uri,
        alias=alias,
        decision=decision,
        comment=comment.strip(),
        evidence_digest=checked.digest,
        signer=by.key_name,
        run_id=run_id,
        time=record.time,
    )
