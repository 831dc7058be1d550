"""The ``govern`` command line: a thin typer layer over ``flavors`` and ``governance``.

The command modules are cheap to import (typer, rich and ``cli.common``); each command
imports MLflow and the solver when it runs.
"""

import inspect
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from miret_governance.cli import (
    audit,
    diff,
    explain,
    explain_row,
    gates,
    inventory,
    keys,
    policy,
    reproduce,
    serve,
    server,
    show,
    watch,
)
from miret_governance.cli.common import (
    EXIT_CODES_HELP,
    GOVERN_SERVER,
    configure_mlflow,
    exit_codes_of_main,
)
from miret_governance.cli.warm_process import hand_over

app = typer.Typer(
    name="govern",
    help="Governed explanations of tree ensembles in MLflow: VITE heatmaps, MIRET "
    "surrogate trees, input validation and promotion gates.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
explain.register(app)
show.register(app)
explain_row.register(app)
gates.register(app)
reproduce.register(app)
audit.register(app)
inventory.register(app)
keys.register(app)
diff.register(app)
server.register(app)
policy.register(app)
serve.register(app)
watch.register(app)


def _reflowed(text: str) -> str:
    """``text`` with each paragraph on one line, for the terminal to wrap: typer's rich
    help keeps a docstring's line breaks, so paragraphs wrapped for the source broke
    raggedly in a terminal narrower than them."""
    return "\n\n".join(" ".join(part.split()) for part in text.split("\n\n"))


for command in app.registered_commands + [
    command
    for group in app.registered_groups
    for command in group.typer_instance.registered_commands
]:
    command.help = _reflowed(command.help or inspect.getdoc(command.callback))


def _installed(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"govern {_installed('miret-governance')} (mlflow {_installed('mlflow')})")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version of govern (and of MLflow) and exit.",
        ),
    ] = False,
) -> None:
    """The options of ``govern`` itself (the app's help text is set on ``app``)."""


def run(argv: list) -> None:
    """Run the command of ``argv`` (``argv[0]`` the program) in this process."""
    configure_mlflow()
    app(args=argv[1:], prog_name="govern")


def main() -> None:
    """Entry point of the ``govern`` console script: the command runs here, or in the
    warm process whose socket ``GOVERN_SERVER`` names (``govern serve``)."""
    socket_path = os.environ.get(GOVERN_SERVER)
    if socket_path and sys.argv[1:2] != ["serve"]:
        with exit_codes_of_main():
            sys.exit(hand_over(socket_path, sys.argv))
    run(sys.argv)
