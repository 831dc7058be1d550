"""``govern inventory``: every governed model of the registry, its aliases and what is due."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from miret_governance.cli import common
from miret_governance.cli.audit import finding_line
from miret_governance.cli.common import (
    EXIT_FAILED,
    JsonOutput,
    PolicyFile,
    connect,
    console,
    exit_codes,
    print_json,
)

LogRun = Annotated[
    bool,
    typer.Option(
        "--log-run",
        help="Also log inventory.html, inventory.json, inventory_table.json and the metrics "
        "n_models, n_findings, n_due in a new run of the governance-inventory experiment "
        "(the scheduled job: MLproject entry point inventory).",
    ),
]


def inventory(
    policy: PolicyFile = None,
    policy_trust: common.PolicyTrustFile = None,
    require_signed_policy: common.RequireSignedPolicy = False,
    tracking_uri: common.TrackingUri = None,
    as_json: JsonOutput = False,
    log_run: LogRun = False,
) -> None:
    """List every registered model and alias with its governance state, and what is due.

    Each registered model (surrogates and governed copies aside) is audited as govern
    audit audits it; each alias gets a row: the version holding it, whether its evidence
    verifies, the promotion holding it (policy, date, approvers, the explanation drift it
    recorded against the previous holder), the latest gate, verification and
    reproduction, and, when the policy's [revalidate_every_days] names the alias, when it
    was last re-validated (a signed gate or promotion that passed, or an identical
    reproduction, on its current evidence) and whether that is longer ago than allowed.
    A model the server does not let the caller read (one a governance record or the
    policy's [governed] names: the registry search leaves it out) is an unreadable
    finding, and the rest is listed. Exit 1 when anything is found (the audit's findings,
    due and unreadable), 0 when clean; nothing is written but, with --log-run, the run.

    --json prints {"command": "inventory", "schema_version": 1, "policy", "policy_digest",
    "now", "clean", "exit_code", "run_id" (or null), "n_models", "n_findings", "n_due",
    "models": list of names, "aliases": list of {"model", "alias" (null: a model with no
    alias, its latest version), "version", "evidence" ("verified", "not verified" or
    "none"), "evidence_digest", "promotion" ({"run_id", "time", "policy",
    "policy_digest", "approvals", "drift", "drift_against"} or null), "last_gate",
    "last_verification", "last_reproduction" ({"run_id", "time", "result", "action"} or
    null), "last_revalidated", "revalidate_every_days", "due" (null: no period)},
    "findings": list of {"kind" (the audit's kinds, "due" or "unreadable"), "version", "alias",
    "run_id", "message"}}.
    """
    with exit_codes():
        from datetime import datetime, timezone

        from miret_governance.flavors.store.reads import CommandClient
        from miret_governance.flavors.trail import inventory as trail_inventory
        from miret_governance.governance.report.html import render_inventory

        parsed = common.load_checked_policy(policy, policy_trust, require_signed_policy)
        required = common.signed_policy_required(require_signed_policy)
        connect(tracking_uri, read_only=not log_run)
        client = CommandClient()
        found = trail_inventory.inventory(parsed, datetime.now(timezone.utc), client, required)
        document = found.to_json()
        run_id = (
            trail_inventory.log_inventory(client, found, render_inventory(document))
            if log_run
            else None
        )
    code = EXIT_FAILED if found.findings else 0
    if as_json:
        print_json("inventory", document | {"exit_code": code, "run_id": run_id})
        raise typer.Exit(code)
    plain = {"highlight": False, "soft_wrap": True, "markup": False}
    for finding in found.findings:
        console.print(finding_line(finding), **plain)
    console.print(_table(found))
    logged = f"; logged in run {run_id} (experiment governance-inventory)" if run_id else ""
    console.print(
        f"inventory under policy {found.policy}: {len(found.models)} model(s), "
        f"{len(found.rows)} row(s), {len(found.findings)} finding(s), {found.due} due{logged}",
        **plain,
    )
    raise typer.Exit(code)


def _table(found) -> Table:
    """One line per alias (rows of :class:`flavors.trail.inventory.AliasState`)."""
    table = Table(title="Governed models", title_justify="left")
    for column in ("Model @alias", "Version", "Evidence", "Promoted", "Re-validated", "Drift"):
        table.add_column(column, overflow="fold")
    for row in found.rows:
        promotion = row.promotion
        promoted = "-"
        if promotion is not None:
            promoted = f"{promotion.time[:10]} {promotion.policy}"
            promoted += (
                f" (approved: {', '.join(promotion.approvals)})" if promotion.approvals else ""
            )
        revalidated = row.last_revalidated[:10] if row.last_revalidated else "never"
        if row.due is not None:
            revalidated += f" ({'DUE' if row.due else 'in time'}, {row.revalidate_every_days} d)"
        drift = promotion.drift if promotion is not None else None
        table.add_row(
            f"{row.model} @{row.alias}" if row.alias else f"{row.model} (no alias)",
            row.version,
            row.evidence,
            promoted,
            revalidated,
            "-" if drift is None else f"{drift:.3g}",
            end_section=False,
        )
    return table


def register(app: typer.Typer) -> None:
    """Add inventory to the ``govern`` app."""
    app.command()(inventory)
