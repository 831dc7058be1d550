"""``govern show``: a surrogate's rules, metrics and CART baseline, and the gate and
promotion status of its ensemble (read-only)."""

from __future__ import annotations

from typing import Annotated

import typer
from miret_governance.cli.common import TrackingUri, connect, console, fail
from miret_governance.cli.tables import baseline_table, metrics_table
from rich.markup import escape


def show(
    model_uri: Annotated[
        str,
        typer.Option(
            "--model-uri",
            help="An explained ensemble version (its linked surrogate is shown) or a "
            "surrogate version: models:/<name>/<version>, models:/<name>@<alias>.",
        ),
    ],
    tracking_uri: TrackingUri = None,
) -> None:
    """Print a surrogate's rules, metrics and CART baseline, and the gate and promotion
    status of its ensemble. Read-only: never creates a store."""
    from miret_governance.flavors.review import describe_for_review
    from miret_governance.governance.report.html import describe_stop

    try:
        connect(tracking_uri, fail_fast=False, read_only=True)
        summary = describe_for_review(model_uri)
    except Exception as exc:  # noqa: BLE001 - every failure is a clear exit 2
        raise fail(exc) from None
    ensemble = summary["ensemble"]
    plain = {"highlight": False, "markup": False, "soft_wrap": True}
    console.print(f"[bold]{escape(summary['uri'])}[/] explains [bold]{escape(ensemble['uri'])}[/]")
    if summary["solve"]:
        console.print(describe_stop(summary["solve"]), **plain)
    validation = summary["tags"].get("governance.validation")
    if validation:
        console.print(f"input validation: {validation}", **plain)
    console.print("\n[bold]Gate and promotion status[/] of " + escape(ensemble["uri"]))
    aliases = ", ".join(f"@{a}" for a in ensemble["aliases"]) or "none"
    console.print(f"  aliases: {aliases}", **plain)
    for key, value in ensemble["status"].items():
        console.print(f"  {key} = {value}", **plain)
    if not ensemble["status"]:
        console.print(
            f"  no gate evaluated yet (govern gate --model-uri {ensemble['uri']})", **plain
        )
    console.print("\n[bold]Rules[/] (raw input units)")
    console.print(summary["rules"], **plain)
    console.print()
    console.print(metrics_table(summary["metrics"]))
    baseline = baseline_table(summary["metrics"])
    if baseline is not None:
        console.print(baseline)


def register(app: typer.Typer) -> None:
    """Add ``show`` to the ``govern`` app."""
    app.command("show")(show)
