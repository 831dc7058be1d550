"""The ``govern`` command line: a thin typer layer over ``flavors`` and ``governance``."""

import os

import typer

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

app = typer.Typer(
    name="govern",
    help="Governed explanations of tree ensembles in MLflow: VITE heatmaps, MIRET "
    "surrogate trees, input validation and promotion gates.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_commands() -> None:
    from cli import explain, gates

    explain.register(app)
    gates.register(app)


def main() -> None:
    """Entry point of the ``govern`` console script."""
    _register_commands()
    app()
