"""The ``govern`` command line: a thin typer layer over ``flavors`` and ``governance``."""

import typer
from miret_governance.cli import explain, gates, show
from miret_governance.cli.common import configure_mlflow

app = typer.Typer(
    name="govern",
    help="Governed explanations of tree ensembles in MLflow: VITE heatmaps, MIRET "
    "surrogate trees, input validation and promotion gates.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
explain.register(app)
show.register(app)
gates.register(app)


def main() -> None:
    """Entry point of the ``govern`` console script."""
    configure_mlflow()
    app()
