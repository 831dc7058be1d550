"""``govern validate | gate | promote | pipeline``: thin commands over ``flavors.gating``.

Exit codes: 0 everything passed, 1 a gate or the validation failed, 2 an error (bad
URI, unreadable file, invalid policy, no linked surrogate, unreachable server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from miret_governance.cli import common
from miret_governance.cli.common import EXIT_FAILED, connect, console, fail, refusals
from rich.markup import escape
from rich.table import Table

ModelUri = Annotated[
    str,
    typer.Option("--model-uri", help="models:/<name>/<version> or models:/<name>@<alias>"),
]
PolicyFile = Annotated[
    str | None,
    typer.Option(
        "--policy",
        help="TOML policy file with a gates table and an optional name (default: "
        "min_fidelity 0.90, max_features 5, require_validation_pass)",
    ),
]
DataFile = Annotated[Path, typer.Option("--data", help="CSV or Parquet file of raw inputs")]
Target = Annotated[str | None, typer.Option("--target", help="Label column allowed in the data")]


def _policy_and_connect(policy: str | None, tracking_uri: str | None, fail_fast: bool = True):
    """Read the gate policy (before any network call), then connect to the server."""
    from miret_governance.governance.gates import load_policy

    parsed = load_policy(policy or None)
    connect(tracking_uri, fail_fast=fail_fast)
    return parsed


def print_gates(outcome) -> None:
    """The gate table of a GateOutcome, and where it was recorded."""
    from miret_governance.governance.gates import format_value

    evaluation = outcome.evaluation
    table = Table(
        title=escape(f"Gates for {outcome.ensemble_uri} (surrogate {outcome.surrogate_uri})"),
        caption=f"policy digest {evaluation.policy_digest[:16]}",
    )
    for column in ("Gate", "Metric"):
        table.add_column(column, overflow="fold")
    for column in ("Threshold", "Value"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("Result", no_wrap=True)
    for r in evaluation.results:
        table.add_row(
            escape(r.name),
            escape(r.metric),
            escape(f"{r.comparison} {format_value(r.threshold)}"),
            escape(format_value(r.value)),
            "[green]pass[/]" if r.passed else "[red]FAIL[/]",
        )
    console.print(table)
    for r in evaluation.results:
        if not r.passed:
            console.print(
                f"[red]FAIL[/] {escape(f'{r.name}: {r.reason}')}", highlight=False, soft_wrap=True
            )
    verdict = "[green]all gates passed[/]" if evaluation.all_passed else "[red]a gate failed[/]"
    console.print(
        f"{verdict} under policy {escape(outcome.policy)}, on the evidence stored in "
        f"{escape(outcome.surrogate_uri)} (digest {(evaluation.evidence_digest or '')[:16]}); "
        f"recorded as tag governance.last_gate on {escape(outcome.ensemble_uri)}, in both versions' "
        f"descriptions and in run {outcome.run_id} (experiment governance-gates, artifacts "
        "gate_report.json / .md)",
        highlight=False,
        soft_wrap=True,
    )


def validate(
    model_uri: ModelUri,
    data: DataFile,
    target: Target = None,
    mostly: Annotated[
        float, typer.Option("--mostly", help="Fraction of rows that must pass (scoring data)")
    ] = 1.0,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write GE's JSON result to this file")
    ] = None,
    tracking_uri: common.TrackingUri = None,
    trust_pickle: common.TrustPickle = False,
) -> None:
    """Validate data against an ensemble's feature schema with Great Expectations."""
    import json

    from miret_governance.flavors.gating import validate_model_inputs

    try:
        connect(tracking_uri, read_only=True)
        result = validate_model_inputs(
            model_uri, data, target=target or None, mostly=mostly, trust_pickle=trust_pickle
        )
    except refusals() as error:
        raise fail(error) from None
    console.print(result.summary(), highlight=False, soft_wrap=True)
    if report is not None:
        report.write_text(json.dumps(result.to_json(), indent=1, default=str))
    raise typer.Exit(0 if result.success else EXIT_FAILED)


def gate(
    model_uri: ModelUri,
    policy: PolicyFile = None,
    tracking_uri: common.TrackingUri = None,
) -> None:
    """Evaluate the promotion gates on the ensemble version's linked surrogate."""
    from miret_governance.flavors.gating import gate_model_version

    try:
        parsed = _policy_and_connect(policy, tracking_uri)
        outcome = gate_model_version(model_uri, parsed)
    except refusals() as error:
        raise fail(error) from None
    print_gates(outcome)
    raise typer.Exit(0 if outcome.evaluation.all_passed else 1)


def promote(
    model_uri: ModelUri,
    alias: Annotated[str, typer.Option("--alias", help="Alias to set when every gate passes")],
    policy: PolicyFile = None,
    tracking_uri: common.TrackingUri = None,
) -> None:
    """Set an alias on the ensemble version only if every gate passes."""
    from miret_governance.flavors.gating import promote_model_version

    try:
        parsed = _policy_and_connect(policy, tracking_uri)
        outcome = promote_model_version(model_uri, alias, parsed)
    except refusals() as error:
        raise fail(error) from None
    print_gates(outcome.gate)
    where = escape(f"tag governance.promotion.{alias} on {outcome.gate.ensemble_uri}")
    if outcome.promoted:
        console.print(
            f"[green]promoted[/]: {escape(f'@{alias} -> {outcome.gate.ensemble_uri}')} ({where})",
            highlight=False,
            soft_wrap=True,
        )
    else:
        now = f"version {outcome.alias_version}" if outcome.alias_version else "no version"
        console.print(
            f"[red]refused[/]: {escape(f'@{alias} stays on {now}')} ({where})",
            highlight=False,
            soft_wrap=True,
        )
    raise typer.Exit(0 if outcome.promoted else 1)


def pipeline(
    model_uri: ModelUri,
    data: DataFile,
    target: Target = None,
    policy: PolicyFile = None,
    time_limit: common.TimeLimit = common.DEFAULTS["time_limit"],
    solver: common.Solver = common.DEFAULTS["solver"],
    seed: common.Seed = common.DEFAULTS["random_state"],
    tracking_uri: common.TrackingUri = None,
    trust_pickle: common.TrustPickle = False,
) -> None:
    """Validate the data, explain the ensemble version, then evaluate the gates."""
    from miret_governance.flavors.errors import ValidationFailedError
    from miret_governance.flavors.explain import explain_model_version
    from miret_governance.flavors.gating import gate_model_version, validate_model_inputs

    target = target or None
    try:
        parsed = _policy_and_connect(policy, tracking_uri, fail_fast=False)
        console.rule("1/3 validate")
        report = validate_model_inputs(model_uri, data, target=target, trust_pickle=trust_pickle)
        console.print(report.summary(), highlight=False, soft_wrap=True)
        if not report.success:
            raise typer.Exit(EXIT_FAILED)
        console.rule("2/3 explain")
        explained = explain_model_version(
            model_uri,
            data,
            target=target,
            solver=solver,
            time_limit=time_limit,
            seed=seed,
            trust_pickle=trust_pickle,
        )
        console.print(
            f"surrogate {explained.surrogate_uri} (run {explained.run_id}"
            f"{', reused' if explained.reused else ''})",
            highlight=False,
            soft_wrap=True,
        )
        console.rule("3/3 gate")
        outcome = gate_model_version(model_uri, parsed)
    except ValidationFailedError as error:
        raise fail(error, EXIT_FAILED) from None
    except refusals() as error:
        raise fail(error) from None
    print_gates(outcome)
    raise typer.Exit(0 if outcome.evaluation.all_passed else 1)


def register(app: typer.Typer) -> None:
    """Add the validate, gate, promote and pipeline commands to the ``govern`` app."""
    app.command()(validate)
    app.command()(gate)
    app.command()(promote)
    app.command()(pipeline)
