"""``govern approve | audit``: a reviewer's signed decision, and the check of the whole
promotion trail of a registered model."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from miret_governance.cli import common
from miret_governance.cli.common import (
    EXIT_FAILED,
    JsonOutput,
    ModelUri,
    PolicyFile,
    check_model_uri,
    connect,
    console,
    exit_codes,
    print_json,
)


def approve(
    model_uri: ModelUri,
    alias: Annotated[str, typer.Option("--alias", help="The alias the decision is about.")],
    decision: Annotated[
        str, typer.Option("--decision", metavar="approve|reject", help="approve or reject.")
    ],
    comment: Annotated[str, typer.Option("--comment", help="What was reviewed, and why.")],
    policy: PolicyFile = None,
    policy_trust: common.PolicyTrustFile = None,
    require_signed_policy: common.RequireSignedPolicy = False,
    signing_key: common.SigningKeyOption = None,
    signing_certificate: common.SigningCertificateOption = None,
    certificate_chain: common.CertificateChainOption = None,
    tracking_uri: common.TrackingUri = None,
) -> None:
    """Record a reviewer's signed approval or rejection of promoting a version to an alias.

    The decision is bound to the ensemble version and its linked surrogate's current
    evidence. The key (--signing-key) must be trusted by the policy for approve. A policy whose
    [approvals] names the alias lets promote move it only with that many distinct
    approver keys approving the current evidence, and none rejecting it.
    """
    with exit_codes():
        from miret_governance.flavors.trail.promotion import approve_model_version, check_alias

        check_model_uri(model_uri)
        check_alias(alias)
        key = common.load_signing_key(signing_key, signing_certificate, certificate_chain)
        parsed = common.load_checked_policy(policy, policy_trust, require_signed_policy)
        connect(tracking_uri)
        outcome = approve_model_version(
            model_uri, alias, decision, comment, parsed, signing_key=key
        )
    console.print(
        escape(
            f"{outcome.decision} of @{alias} for {outcome.ensemble_uri} recorded, signed by "
            f"key {outcome.signer}, on the evidence of {outcome.surrogate_uri} (digest "
            f"{outcome.evidence_digest[:16]}); run {outcome.run_id} (experiment "
            "governance-approvals, decision/record.json)"
        ),
        highlight=False,
        soft_wrap=True,
    )


def audit(
    model_name: Annotated[
        str, typer.Option("--model-name", help="The ensemble's registered model name.")
    ],
    policy: PolicyFile = None,
    policy_trust: common.PolicyTrustFile = None,
    require_signed_policy: common.RequireSignedPolicy = False,
    tracking_uri: common.TrackingUri = None,
    as_json: JsonOutput = False,
    signing_key: common.SigningKeyOption = None,
    signing_certificate: common.SigningCertificateOption = None,
    certificate_chain: common.CertificateChainOption = None,
    no_record: common.NoRecord = False,
) -> None:
    """Check the promotion trail of every version of a registered model.

    Exit 1 when something is found, 0 when clean. With a signing key it records one
    signed verification record per version holding an alias (verified, or failed with
    its first finding; --no-record: nothing); nothing else is written.

    Findings: an alias whose holder has no valid signed promotion decision for it on the
    holder's current verified evidence (e.g. set by hand in the MLflow UI), is not the
    version the latest signed promotion to it moved it to (moved back by hand), or lacks
    the approvals the audited policy's [approvals] requires; a status
    (last gate, promotion) decided on superseded evidence; linked evidence that is
    unsigned, untrusted or altered; decision records that are unsigned or fail
    verification (a verification record too, which blocks nothing); the promotion holding an alias made under another policy, or (with
    --require-signed-policy) under a policy whose signature it did not verify (every
    decision made so is listed: OTHER POLICY, a finding or not); a break of the model's
    record chain (a record missing between two counts, two records of one count, a record
    outside the governance experiments).

    --json prints {"command": "audit", "schema_version": 1, "model_name", "policy" (name
    v<digest8>), "policy_digest", "clean": bool, "exit_code": 0 or 1, "versions_checked":
    int, "decisions_checked": int, "findings": list of {"kind": "alias", "policy",
    "superseded", "evidence", "decision_record" or "chain", "version" (models:/<name>/<v>),
    "alias" (or null), "run_id" (or null), "message"}, "cleared": list of {"run_id" (null: a
    gap of the record chain), "problem", "clearance_run_id", "cleared_by", "time", "reason"},
    "other_policies": list of {"run_id", "kind", "version", "alias" (or null), "policy",
    "policy_digest", "signer" ({"name", "fingerprint"} or null)}}.
    """
    with exit_codes():
        from miret_governance.flavors.store.reads import CommandClient
        from miret_governance.flavors.trail import verification
        from miret_governance.flavors.trail.audit import audit_model

        parsed = common.load_checked_policy(policy, policy_trust, require_signed_policy)
        required = common.signed_policy_required(require_signed_policy)
        chain = (signing_certificate, certificate_chain)
        key = None if no_record else common.load_signing_key(signing_key, *chain)
        connect(tracking_uri, read_only=True)
        client = CommandClient()
        report = audit_model(model_name, parsed, client, require_signed_policy=required)

    def record(key) -> str:
        notes = [
            verification.record_verification(client, parsed, key, verified)
            for verified in verification.audited(client, report)
        ]
        return "\n".join(n for n in notes if n)

    code = 0 if report.clean else EXIT_FAILED
    if as_json:
        print_json("audit", report.to_json() | {"exit_code": code})
        common.record_verified(key, no_record, record)
        raise typer.Exit(code)
    plain = {"highlight": False, "soft_wrap": True, "markup": False}
    for finding in report.findings:
        console.print(finding_line(finding), **plain)
    for cleared in report.cleared:
        what = f"run {cleared['run_id']}" if cleared["run_id"] else "a gap of the record chain"
        console.print(
            f"CLEARED {what} by {cleared['cleared_by']} ({cleared['time']}, "
            f"run {cleared['clearance_run_id']}): {cleared['reason']}",
            **plain,
        )
    for other in report.other_policies:
        signer = other["signer"]
        signed = f"signed by {signer['name']}" if signer else "no verified signature"
        console.print(
            f"OTHER POLICY run {other['run_id']} ({other['kind']}, {other['version']}): under "
            f"policy {other['policy']!r} (digest {other['policy_digest'][:16]}, {signed})",
            **plain,
        )
    verdict = "clean" if report.clean else f"{len(report.findings)} finding(s)"
    console.print(
        f"audit of {model_name} under policy {report.policy}: {verdict} (versions checked: "
        f"{report.versions}, decision records checked: {report.decisions})",
        **plain,
    )
    common.record_verified(key, no_record, record)
    raise typer.Exit(code)


def finding_line(finding) -> str:
    """``FINDING <kind> <version>[ @alias][ (run <id>)]: <message>`` (audit, inventory)."""
    where = f" @{finding.alias}" if finding.alias else ""
    run = f" (run {finding.run_id})" if finding.run_id else ""
    return f"FINDING {finding.kind} {finding.version}{where}{run}: {finding.message}"


def clear(
    model_uri: ModelUri,
    reason: Annotated[
        str, typer.Option("--reason", help="Why the blocking records may be set aside.")
    ],
    alias: Annotated[
        str | None,
        typer.Option("--alias", help="Also clear the records of promotions to this alias."),
    ] = None,
    run_id: Annotated[
        list[str] | None,
        typer.Option(
            "--run-id",
            help="Clear exactly these runs' records (repeatable): e.g. records bound to no "
            "version, which the audit reports.",
        ),
    ] = None,
    chain: Annotated[
        bool,
        typer.Option(
            "--chain",
            help="Clear instead the breaks of the model's record chain (the audit's chain "
            "findings: a record missing or taken twice), up to its head now.",
        ),
    ] = False,
    policy: PolicyFile = None,
    policy_trust: common.PolicyTrustFile = None,
    require_signed_policy: common.RequireSignedPolicy = False,
    signing_key: common.SigningKeyOption = None,
    signing_certificate: common.SigningCertificateOption = None,
    certificate_chain: common.CertificateChainOption = None,
    tracking_uri: common.TrackingUri = None,
) -> None:
    """Set aside the records that block decisions on a version, with a signed clearance.

    A record about the version (or its alias) that does not read, is not bound to its
    run, was replaced or re-tagged, or does not verify blocks gate, promote and approve
    (fail closed). This records one signed clearance (key trusted for decide) naming each
    such record as it is now; the audit lists it. A record replaced again blocks again.
    With --chain, the breaks of the model's record chain, which block promote, are set
    aside up to the chain's head now; a later break blocks again.
    """
    with exit_codes():
        from miret_governance.flavors.trail.decisions import clear_records
        from miret_governance.flavors.trail.promotion import check_alias

        check_model_uri(model_uri)
        if alias is not None:
            check_alias(alias)
        if chain and (alias is not None or run_id):
            raise common.InvalidInputError(
                "--chain clears the record chain alone: drop --alias and --run-id"
            )
        key = common.load_signing_key(signing_key, signing_certificate, certificate_chain)
        parsed = common.load_checked_policy(policy, policy_trust, require_signed_policy)
        connect(tracking_uri)
        if chain:
            from miret_governance.flavors.trail.chain import clear_chain

            clearance, breaks = clear_chain(model_uri, reason, parsed, key)
            cleared = [(b.run_id, b.message) for b in breaks]
        else:
            clearance, decisions = clear_records(
                model_uri, reason, parsed, key, alias, run_ids=tuple(run_id or ())
            )
            cleared = [(d.run_id, d.problem) for d in decisions]
    plain = {"highlight": False, "soft_wrap": True, "markup": False}
    for run, problem in cleared:
        console.print(f"cleared {f'run {run}' if run else 'a gap'}: {problem}", **plain)
    console.print(
        f"{len(cleared)} record(s) cleared for {model_uri}; clearance run {clearance} "
        "(experiment governance-clearances, decision/record.json)",
        **plain,
    )


def register(app: typer.Typer) -> None:
    """Add approve, clear and audit to the ``govern`` app."""
    app.command()(approve)
    app.command()(clear)
    app.command()(audit)
