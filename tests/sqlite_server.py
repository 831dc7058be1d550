"""The SQLite-backed ``mlflow server`` of ``tests/test_server_faults.py``: no
authentication, a copy of the migrated SQLite store, proxied artifacts; stoppable and
restartable on the same store (the faults kill and hang it). The governed flow runs on
the PostgreSQL + basic-auth stack instead (``tests/server_stack.py``); these faults stay
on SQLite, whose locked-store and killed-server behaviour they test."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from mlflow_store import copy_store
from processes import free_port, stop_group
from stack import wait_for_health


class Server:
    """``mlflow server`` on a SQLite backend with proxied artifacts; stoppable and
    restartable on the same store.

    MLflow's job execution is off (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``): by
    default the server also starts a job runner and seven Huey consumers, each a Python
    process importing MLflow (about 15 s of CPU per start on a 2-core machine), for
    MLflow's GenAI jobs, which nothing here submits; the tracking and registry API the
    tests use is the same.
    """

    def __init__(self, tmp_path: Path, migrated_store: Path, app_name: str = "", env=None):
        """``app_name``: MLflow's ``--app-name`` (e.g. ``basic-auth``); ``env``: more
        variables for the server (its auth configuration)."""
        self.folder = tmp_path
        self.backend = tmp_path / "server.db"
        copy_store(migrated_store, self.backend)
        self.artifacts = tmp_path / "artifacts"
        self.app = ["--app-name", app_name] if app_name else []
        self.env = env or {}
        self.process = None
        self.url = ""

    def start(self) -> str:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with open(self.folder / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "mlflow", "server", *self.app,
                    "--backend-store-uri", f"sqlite:///{self.backend}",
                    "--serve-artifacts", "--artifacts-destination", str(self.artifacts),
                    "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(
                    os.environ,
                    MLFLOW_DISABLE_TELEMETRY="true",
                    MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
                    **self.env,
                ),
                start_new_session=True,
            )  # fmt: skip
        wait_for_health(self.url, self.process, timeout=90.0)
        return self.url

    def stop(self) -> None:
        """Kill the server and its workers (a graceful stop takes 1-7 s and tests
        nothing: the store is thrown away)."""
        if self.process is not None:
            stop_group(self.process, signal.SIGKILL)

    @contextlib.contextmanager
    def serving(self):
        """The server started, and stopped when the block ends (however it ends)."""
        try:
            self.start()
            yield self
        finally:
            self.stop()
