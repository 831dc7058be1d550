"""``govern server setup``: the shared server's permissions, from the policy's roles."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from miret_governance.cli import common
from miret_governance.cli.common import connect, console, existing_file, exit_codes

server_app = typer.Typer(
    name="server",
    help="Set up a shared MLflow server (basic-auth app) for governance.",
    no_args_is_help=True,
)


def setup(
    policy: Annotated[
        Path,
        typer.Option(
            "--policy",
            help='TOML policy file with a \\[roles] table and \\[governed."<model>"] tables.',
            metavar="FILE",
            callback=existing_file,
        ),
    ],
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the plan only; change and contact nothing."),
    ] = False,
    tracking_uri: common.TrackingUri = None,
) -> None:
    """Create the governance experiments and registered models and grant each role its
    permissions, with an MLflow admin's MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD.

    Idempotent: a second run changes nothing and says so. Users must exist already;
    missing ones are named and nothing is changed.
    """
    with exit_codes():
        from miret_governance.flavors.server.setup import setup_plan, setup_server
        from miret_governance.governance.trust.policy import load_policy

        parsed = load_policy(policy)
        plan = setup_plan(parsed)
        if dry_run:
            console.print(_table(f"Plan of {parsed.label} (dry run: nothing changed)", plan))
            return
        connect(tracking_uri)
        report = setup_server(parsed)
    applied = [a.grant for a in report.grants]
    states = [f"granted (was {a.before})" if a.changed else "unchanged" for a in report.grants]
    console.print(_table(f"Permissions of {parsed.label}", applied, states))
    for resource in report.created:
        console.print(
            Text(f"created {resource.kind.replace('_', ' ')} {resource.name} (owner: admin)")
        )
    changed = sum(a.changed for a in report.grants)
    if report.changed:
        console.print(
            Text(f"{len(report.created)} created, {changed} of {len(applied)} grants changed")
        )
    else:
        console.print(Text("nothing changed: the server already matches the plan"))


def _table(title: str, grants, states=None) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("user", "role", "resource", "name", "permission"):
        table.add_column(column)
    if states is not None:
        table.add_column("state")
    for i, grant in enumerate(grants):
        cells = [
            grant.user,
            grant.role,
            grant.resource.kind.replace("_", " "),
            grant.resource.name,
            grant.permission,
        ]
        if states is not None:
            cells.append(states[i])
        table.add_row(*(Text(cell) for cell in cells))
    return table


def register(app: typer.Typer) -> None:
    """Add the ``server`` group (``govern server setup``) to the ``govern`` app."""
    server_app.command("setup")(setup)
    app.add_typer(server_app)
