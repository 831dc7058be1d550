"""``govern`` processes forked from one that has imported the CLI, for tests that run many
commands as printed (the README's) or start commands in processes of their own (races,
kills, faults): ``conftest.warm_forks``, one per test worker.

Each ``govern`` process spends 2 to 3.5 s of CPU importing MLflow, pandas and the CLI
before it does anything; the README's section runs 30 of them. :class:`GovernForks`
starts one server process that imports them once and then, for each command, forks a
process that runs it: the command still runs in a process of its own, with its argv,
environment, working directory, standard streams and exit code, only without paying the
imports again. The server is the product's ``govern serve`` engine
(:func:`miret_governance.cli.warm_process.serve`), here also running ``python -c``. The
``govern`` a test calls is a stub (:meth:`GovernForks.install`) that
hands its argv, environment, working folder and standard streams to the server over a
Unix socket and exits with the command's exit code (``128 + n`` for a signal ``n``); the
stub :data:`PYTHON` does the same for ``python -c CODE`` and ``python SCRIPT`` (the
README's Python blocks and the demo).

The console script's own start (imports and entry point) stays tested where it is the
point: ``tests/cli/test_cli_contract.py`` and the other tests that run ``govern`` as a
subprocess. Written here rather than with ``multiprocessing``'s fork server, whose
processes cannot be handed a command's standard streams and environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

STUB = """#!{python} -S
import json, os, socket, sys
connection = socket.socket(socket.AF_UNIX)
connection.connect({socket_path!r})
header = json.dumps({{"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}})
socket.send_fds(connection, [header.encode() + b"\\n"], [0, 1, 2])
answer = b""
while chunk := connection.recv(64):
    answer += chunk
sys.exit(int(answer) if answer else 70)
"""
"""The ``govern`` stub: stdlib only, started without ``site`` (about 20 ms)."""
PYTHON = "python-forked"
"""The stub that runs ``python -c CODE`` in a fork instead of the CLI (the README's
Python blocks: the same imports, paid once)."""


class GovernForks:
    """The fork server: ``with GovernForks(env) as forks: forks.install(bin_folder)``."""

    def __init__(self, env: dict, folder: Path):
        self.env = env
        (folder / ".govern").mkdir(mode=0o700)  # as govern serve wants its socket's folder
        self.socket_path = str(folder / ".govern" / "govern.sock")
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Self:
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.socket_path], env=self.env, start_new_session=True
        )
        deadline = time.monotonic() + 120
        while not os.path.exists(self.socket_path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the govern fork server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)

    def stubs(self, bin_folder: Path) -> Path:
        """Both stubs, ``govern`` and :data:`PYTHON`, in ``bin_folder`` (made); returns it."""
        bin_folder.mkdir(parents=True, exist_ok=True)
        self.install(bin_folder)
        self.install(bin_folder, PYTHON)
        return bin_folder

    def install(self, bin_folder: Path, name: str = "govern") -> Path:
        """Write the stub ``name`` into ``bin_folder``; returns its path. The stub
        :data:`PYTHON` runs ``python -c CODE`` or ``python SCRIPT``; any other runs the
        CLI."""
        stub = bin_folder / name
        stub.write_text(STUB.format(python=sys.executable, socket_path=self.socket_path))
        stub.chmod(0o755)
        return stub


def _run(argv: list) -> object:
    """A command in the forked process: :data:`PYTHON` runs Python (:func:`_python`), any other
    name the CLI (:func:`miret_governance.cli.app.run`)."""
    from miret_governance.cli.app import run

    return _python(argv) if Path(argv[0]).name == PYTHON else run(argv)


def _python(argv: list) -> int:
    """``python -c CODE ARGS`` (CODE as ``__main__``, the working folder on ``sys.path``)
    or ``python SCRIPT ARGS`` (the script as ``__main__``, its folder on ``sys.path``):
    1 and the traceback if it raises."""
    import runpy
    import traceback

    if argv[1:2] == ["-c"] and len(argv) > 2:
        sys.argv, sys.path[0] = ["-c", *argv[3:]], ""  # the working folder, not this file's

        def main():
            exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102

    elif len(argv) > 1 and not argv[1].startswith("-"):
        sys.argv, sys.path[0] = argv[1:], str(Path(argv[1]).resolve().parent)

        def main():
            runpy.run_path(argv[1], run_name="__main__")

    else:
        print(f"{PYTHON}: only -c CODE and SCRIPT are served", file=sys.stderr)
        return 2
    try:
        main()
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - as python: the traceback, exit code 1
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    from miret_governance.cli.warm_process import serve

    serve(sys.argv[1], _run)
