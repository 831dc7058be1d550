"""A warm ``govern``: one process that imports MLflow, its store, model-signing,
scikit-learn, skops and Great Expectations once, and forks a process for each command.

Every ``govern`` command that reads a store spends about 2.9 s importing MLflow, its SQL
store and model-signing before any work, 1.3 s more for scikit-learn and skops when it
reads a model, and about 1.8 s for Great Expectations when it validates
(``examples/benchmarks/results_command_speed.md``). ``govern serve`` pays them once;
with ``GOVERN_SERVER`` naming its socket, the ``govern`` console script hands its argv,
environment, working folder and standard streams to it (:func:`hand_over`) and exits
with the command's exit code. Each command still runs in a process of its own, forked
from the imported server, so nothing of one command reaches the next.

Written with the standard library rather than ``multiprocessing``'s fork server, whose
processes cannot be handed a command's standard streams and environment. The socket is
created in a folder only its user may enter, and the server serves only connections
from its own user (``SO_PEERCRED``): anyone who may use it could run ``govern`` as that
user anyway. It runs only ``govern`` commands, never code sent to it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from miret_governance.governance.errors import GovernanceError

PRELOAD = (
    "miret_governance.cli.app",
    "mlflow",
    "mlflow.tracking",
    "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.store.model_registry.sqlalchemy_store",
    "skops.io",  # before the rest of scikit-learn: its import scans every loaded module
    "sklearn.ensemble",
    "pandas",
    "model_signing",
    "matplotlib.figure",
    "great_expectations",
    "miret_governance.flavors.explain.explain",
    "miret_governance.flavors.gates.gating",
    "miret_governance.flavors.read.review",
    "miret_governance.governance.miret.heuristics.kernels",  # numba: 0.26 s per explain
)
"""What the server imports before it forks: the CLI and what its commands import. With
Great Expectations imported, an explain validates in its own process instead of starting
a child that imports it (``flavors/explain/validation_worker.py``)."""
_PEER = struct.Struct("3i")  # struct ucred: pid, uid, gid


class WarmProcessError(GovernanceError):
    """The warm process cannot serve: its socket's folder is open to other users, its
    socket is taken, or it is not running. ``govern`` reports it in one line; exit
    code 2."""


def _check_folder(folder: Path) -> None:
    mode = folder.stat().st_mode
    if folder.stat().st_uid != os.getuid() or mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise WarmProcessError(
            f"{folder} must belong to you and be closed to others (chmod 700 {folder}): "
            "whoever can reach the socket runs govern as you"
        )


def hand_over(socket_path: str, argv: list) -> int:
    """Run ``argv`` in the warm process at ``socket_path``, with this process's
    environment, working folder and standard streams; its exit code (``128 + n`` for
    a signal ``n``)."""
    connection = socket.socket(socket.AF_UNIX)
    try:
        connection.connect(socket_path)
    except OSError as error:
        raise WarmProcessError(
            f"no govern serve answers on {socket_path} ({error.strerror}): start it with "
            "`govern serve`, or unset GOVERN_SERVER"
        ) from None
    header = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()})
    socket.send_fds(connection, [header.encode() + b"\n"], [0, 1, 2])
    answer = b""
    while chunk := connection.recv(64):
        answer += chunk
    connection.close()
    return int(answer) if answer else 70


def _become(request: dict, fds: list) -> None:
    """In the forked process: take the command's streams, folder, environment, argv."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = request["argv"]


def _run_and_exit(run: Callable[[list], object], argv: list) -> None:
    """Run the command and end the process with its exit code, as the console script
    would (exit handlers run, streams flushed)."""
    import atexit

    try:
        code = run(argv)
    except SystemExit as done:
        code = done.code
    code = code if isinstance(code, int) else (0 if code is None else 1)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _close(fds: list) -> None:
    for fd in fds:
        os.close(fd)


def _serve_one(connection: socket.socket, run: Callable[[list], object]) -> None:
    """In a forked waiter: check the caller, fork the command, send its exit code."""
    _, uid, _ = _PEER.unpack(
        connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER.size)
    )
    message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    if uid != os.getuid():  # the folder keeps others out; this is the second lock
        _close(fds)
        connection.sendall(b"77")
        os._exit(0)
    while message and not message.endswith(b"\n"):
        chunk = connection.recv(1 << 20)
        if not chunk:
            break
        message += chunk
    if not message.endswith(b"\n") or len(fds) != 3:  # a probe, or a caller gone
        _close(fds)
        os._exit(0)
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        connection.close()
        _become(request, fds)
        _run_and_exit(run, sys.argv)
    _close(fds)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    connection.sendall(str(code if code >= 0 else 128 - code).encode())
    connection.close()
    os._exit(0)


def _stop(signum, frame) -> None:
    sys.exit(0)


def serve(socket_path: str, run: Callable[[list], object], ready=None) -> None:
    """Import :data:`PRELOAD`, then fork a waiter for each connection on ``socket_path``
    whose command ``run(argv)`` runs; ``ready()`` is called once it accepts. Runs until
    the process is stopped."""
    import importlib

    path = Path(socket_path)
    _check_folder(path.parent)
    if path.exists():
        try:
            socket.socket(socket.AF_UNIX).connect(socket_path)
        except OSError:
            path.unlink()  # left by a server that was killed
        else:
            raise WarmProcessError(f"a govern serve already answers on {socket_path}")
    from miret_governance.governance.data.expectation_suites import import_great_expectations

    import_great_expectations()  # first: quiet about PySpark next to pandas 3
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:  # a fork copies only the forking thread
        raise WarmProcessError(
            f"threads after the imports, a fork would lose them: {threading.enumerate()}"
        )
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # waiters are reaped by the kernel
    signal.signal(signal.SIGTERM, _stop)  # the socket is removed on the way out
    server = socket.socket(socket.AF_UNIX)
    server.bind(socket_path + ".new")
    server.listen(64)
    os.rename(socket_path + ".new", socket_path)
    if ready is not None:
        ready()
    try:
        while True:
            connection, _ = server.accept()
            sys.stdout.flush()
            sys.stderr.flush()
            if os.fork() == 0:
                server.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _serve_one(connection, run)
            connection.close()
    finally:
        server.close()
        path.unlink(missing_ok=True)
