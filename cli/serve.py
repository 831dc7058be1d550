"""``govern serve``: a warm process that answers ``govern`` commands without paying their
imports again (:mod:`cli.warm_process`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from miret_governance.cli.common import GOVERN_SERVER, configure_mlflow, console, exit_codes


def _default_socket() -> Path:
    """``$XDG_RUNTIME_DIR/govern/govern.sock``, else ``~/.cache/govern/govern.sock``."""
    base = os.environ.get("XDG_RUNTIME_DIR") or str(Path.home() / ".cache")
    return Path(base) / "govern" / "govern.sock"


def serve(
    ctx: typer.Context,
    socket_path: Annotated[
        Path | None,
        typer.Option(
            "--socket",
            help="Where to listen (default $XDG_RUNTIME_DIR/govern/govern.sock, else "
            "~/.cache/govern/govern.sock); its folder is created closed to other users.",
        ),
    ] = None,
) -> None:
    """Run govern commands in forks of one warm process, without their imports.

    The process imports MLflow, its store, model-signing, scikit-learn, skops and Great
    Expectations once; a command then costs its own work, not the 3 to 7 s of imports.

    Set GOVERN_SERVER to the socket it prints, in the shell that runs the commands;
    every govern command there (but serve) is handed to this process with its
    arguments, environment, working folder and standard streams, and exits with its exit
    code. Only your own user is served; it runs govern commands only. Stop it with
    Ctrl-C; unset GOVERN_SERVER to run commands on their own again.
    """
    from miret_governance.cli.warm_process import serve as serve_forever

    command = ctx.find_root().command

    def run(argv: list) -> None:
        configure_mlflow()
        command.main(args=argv[1:], prog_name="govern")

    path = socket_path or _default_socket()
    with exit_codes():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)

        def ready() -> None:
            console.print(
                f"govern serve: ready; in the shell that runs govern:\n"
                f"  export {GOVERN_SERVER}={path}",
                highlight=False,
                markup=False,
            )

        try:
            serve_forever(str(path), run, ready)
        except KeyboardInterrupt:
            console.print("govern serve: stopped", highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(serve)
