"""What every ``govern`` command shares: consoles, the tracking URI, errors, exit codes."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from miret_governance.governance.miret import MiretSearchCV, MiretSurrogate
from rich.console import Console
from rich.text import Text

SQLITE_PREFIX = "sqlite:///"
EXIT_OK = 0
EXIT_FAILED = 1
"""A gate or the input validation failed."""
EXIT_ERROR = 2
"""The request could not be carried out (bad URI, file or policy; unreachable server)."""

DEFAULTS = MiretSurrogate().get_params()
"""The estimator's hyperparameter defaults: the one source of every default shown here."""
SEARCH_DEFAULTS = MiretSearchCV(None).get_params()
"""The hyperparameter search's defaults (folds, tolerance, search time limit, backend)."""

TRACKING_URI_HELP = "MLflow tracking server, also the registry (default: MLFLOW_TRACKING_URI)."
TrackingUri = Annotated[str | None, typer.Option("--tracking-uri", help=TRACKING_URI_HELP)]
Solver = Annotated[str, typer.Option("--solver", help="MILP solver: auto, highs or gurobi.")]
TimeLimit = Annotated[
    float,
    typer.Option(
        "--time-limit",
        help="Seconds for the whole surrogate fit: building the problem, the warm-start "
        "heuristic and the MILP solve.",
    ),
]
TrustPickle = Annotated[
    bool,
    typer.Option(
        "--trust-pickle",
        help="Load a scikit-learn model stored as pickle/cloudpickle. Loading a pickle runs "
        "code from the artifact: use only for models you trust. Recorded with your user "
        "name and the time on the surrogate and in its report.",
    ),
]
Seed = Annotated[
    int, typer.Option("--seed", help="Seed of the holdout split, the heuristic and the solver.")
]

# CI logs are not terminals (rich would assume 80 columns): give tables room there.
console = Console(width=None if sys.stdout.isatty() else 120)
errors = Console(stderr=True)


def configure_mlflow() -> None:
    """Process-wide MLflow settings of the CLI: no telemetry, no download progress bars."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def connect(tracking_uri: str | None, *, fail_fast: bool = True, read_only: bool = False) -> None:
    """Point MLflow (tracking and registry) at ``tracking_uri`` and check it answers.

    Parameters
    ----------
    tracking_uri : str or None
        None keeps ``MLFLOW_TRACKING_URI`` (or MLflow's default store).
    fail_fast : bool
        No retries of MLflow's HTTP calls; otherwise two (for the long explain run). Each
        call times out after 30 s either way, unless the environment says otherwise, so
        a server that stops answering fails the command instead of hanging it.
    read_only : bool
        The command only reads: a SQLite store that does not exist is an error
        (MLflow would create an empty one).

    Raises
    ------
    GovernanceError
        ``read_only`` and the SQLite store file does not exist; or the server is down.
    """
    import mlflow
    from miret_governance.flavors.registry import check_tracking_server

    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0" if fail_fast else "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    # the SQL store logs every database error with its SQL; the command prints one line
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_registry_uri(tracking_uri)
    if read_only:
        require_existing_store()
    check_tracking_server()


def require_existing_store() -> None:
    """Refuse a ``sqlite:///`` tracking or registry URI whose file does not exist."""
    import mlflow
    from miret_governance.flavors.errors import GovernanceError

    for uri in dict.fromkeys((mlflow.get_tracking_uri(), mlflow.get_registry_uri())):
        if not uri.startswith(SQLITE_PREFIX):
            continue
        path = Path(uri[len(SQLITE_PREFIX) :]).resolve()
        if not path.is_file():
            raise GovernanceError(
                f"no MLflow store at {path} (tracking URI {uri}); nothing was created. Run "
                "from the project folder that holds mlflow.db, or pass --tracking-uri "
                "sqlite:///<path to mlflow.db> (or set MLFLOW_TRACKING_URI)"
            )


def refusals() -> tuple:
    """The exceptions a command reports as a clear error (exit code 2)."""
    from miret_governance.flavors.errors import GovernanceError
    from miret_governance.governance.gates import PolicyError
    from mlflow.exceptions import MlflowException

    return (GovernanceError, PolicyError, MlflowException, OSError, ValueError)


def store_locked(error: Exception) -> str | None:
    """The message for a locked SQLite tracking store (None for any other error)."""
    if "database is locked" not in str(error):
        return None
    import mlflow

    return (
        f"the tracking store {mlflow.get_tracking_uri()} is locked by another process "
        "(SQLite: database is locked); retry when it is done, or use a tracking server "
        "for concurrent work"
    )


def fail(message, code: int = EXIT_ERROR) -> typer.Exit:
    """Print ``message`` as an error (never read as rich markup) and return the exit."""
    errors.print(Text.assemble(("error: ", "bold red"), str(message)), soft_wrap=True)
    return typer.Exit(code)
