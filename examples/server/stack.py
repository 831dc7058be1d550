"""A local shared-server stack: PostgreSQL and an authenticated ``mlflow server`` on it.

``python examples/server/stack.py`` (what ``make server`` runs) starts it in the
foreground, prints the URL, the admin's credentials and the variables to export, and
stops it on Ctrl-C; the tests import :class:`Stack` (``tests/server_stack.py``), so the
stack a user tries is the one the tests pass on.

What runs, all on 127.0.0.1 and in one temporary folder deleted on stop:

- a real PostgreSQL server (Debian's ``postgresql`` package; ``make services`` installs
  it when it is missing): ``initdb`` in the folder, a free port, its unix socket in the
  folder, password authentication (scram) for every connection, and one login role,
  ``mlflow``, owning two databases: ``mlflow`` (MLflow's tracking and registry store)
  and ``mlflow_auth`` (the basic-auth app's users and permissions). The data is thrown
  away, so durability is off (``fsync``, ``synchronous_commit``, ``full_page_writes``):
  it saves seconds of disk waits per test module and changes no SQL behaviour;
- ``mlflow server --app-name basic-auth`` on a plain ``postgresql://`` URI (SQLAlchemy
  2.1 takes psycopg 3 for it, pinned in ``constraints.txt``), with proxied artifacts
  (``--serve-artifacts``, URIs ``mlflow-artifacts:``) under the folder and one worker.
  Its auth configuration is generated: ``default_permission = NO_PERMISSIONS`` (a user
  sees what they are granted, as a bank runs it), a generated admin password, the
  ``mlflow_auth`` database, and a 60 s credential cache (:data:`AUTH_CACHE_TTL`: without
  it every request costs half a second of password hashing). MLflow's job execution is off
  (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``): it would start a job runner and seven
  Huey consumers, each a Python process importing MLflow (about 15 s of CPU on 2 cores),
  for GenAI jobs nothing here submits.

Every child starts in its own process group (``start_new_session``), so Ctrl-C in the
terminal reaches only this script, which then stops the children in order: the MLflow
server's group is killed (its state is in PostgreSQL; nothing to flush), PostgreSQL gets
an immediate shutdown (SIGQUIT to the postmaster, which ends its backends and releases
its shared memory), then whatever is left of either group is killed. ``initdb`` and
``postgres`` refuse to run as root: as root they run as the ``postgres`` user
(``runuser``), in a folder given to that user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
"""Where Debian's ``postgresql`` package puts the server binaries (not on ``PATH``)."""
INSTALL_HINT = "install PostgreSQL's server (Debian/Ubuntu: apt-get install -y postgresql)"
DATABASES = ("mlflow", "mlflow_auth")
"""MLflow's tracking and registry store, and the basic-auth app's users and permissions."""
AUTH_CACHE_TTL = 60
"""Seconds the server trusts a checked password (MLflow's ``auth_cache_ttl_seconds``,
off by default). Without it every request re-hashes the password (PBKDF2): about 0.5 s
of server CPU per request on 2 cores, and a ``govern`` command makes tens to hundreds
of requests (the end-to-end test took 413 s instead of 21 s). The cost: a changed or
revoked password is still accepted for up to this long by the worker that cached it."""
START_TIMEOUT = 120.0
"""Seconds to wait for PostgreSQL, then for the server's ``/health`` (the server runs
MLflow's schema migrations on both databases first)."""


def free_port() -> int:
    """A local TCP port nothing listens on (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def postgres_bin() -> Path:
    """The folder of PostgreSQL's server binaries (the newest Debian version, else
    ``PATH``'s), or RuntimeError saying what to install."""
    versions = sorted(
        (Path(p) for p in glob.glob(PG_BIN_GLOB) if (Path(p) / "pg_ctl").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1]
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    raise RuntimeError(f"no PostgreSQL server binaries (pg_ctl) found: {INSTALL_HINT}")


def stop_group(process: subprocess.Popen | None, sig=signal.SIGTERM, grace: float = 10.0):
    """Send ``sig`` to ``process``'s group (0: none, only wait), wait up to ``grace``
    seconds for it, then kill what is left of the group (a server's workers...).
    ``tests/processes.py`` uses it for every child the tests start in a group."""
    if process is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def wait_for_health(url: str, server: subprocess.Popen, timeout: float = START_TIMEOUT) -> None:
    """Poll ``url``'s ``/health`` until it answers 200: RuntimeError if ``server`` exits
    first, TimeoutError after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"mlflow server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:  # refused, reset or timed out while the server starts
            time.sleep(0.3)
    raise TimeoutError(f"mlflow server at {url} did not answer /health in {timeout:.0f} s")


class Stack:
    """PostgreSQL and ``mlflow server --app-name basic-auth`` in a temporary folder.

    Use as a context manager, or :meth:`start` then :meth:`stop`. After start:
    :attr:`url`, :attr:`admin_username`, :attr:`admin_password`, :attr:`backend_uri`
    (the tracking store's ``postgresql://`` URI), :attr:`artifacts` (the proxied
    artifact folder), :meth:`env` and :meth:`create_user`. ``auth_cache_ttl``: seconds the
    server trusts a checked password (:data:`AUTH_CACHE_TTL`; 0 leaves the setting out,
    MLflow's default: every request re-hashes the password).
    """

    def __init__(
        self, port: int = 0, admin_username: str = "admin", auth_cache_ttl: int = AUTH_CACHE_TTL
    ):
        self.requested_port = port
        self.auth_cache_ttl = auth_cache_ttl
        self.admin_username = admin_username
        self.admin_password = secrets.token_urlsafe(18)  # MLflow wants 12 characters or more
        self.db_password = secrets.token_urlsafe(18)
        self.folder: Path | None = None
        self.url = ""
        self.backend_uri = ""
        self.pg_port = 0
        self._postgres: subprocess.Popen | None = None
        self._server: subprocess.Popen | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Stack:
        try:
            self.folder = Path(tempfile.mkdtemp(prefix="miret-stack-"))
            self._start_postgres()
            self._create_databases()
            self._start_server()
        except BaseException:
            self.stop()
            raise
        return self

    def cpu_seconds(self) -> float:
        """CPU seconds the stack's processes used so far: every live process whose
        working directory is in the folder (the server, its worker, the postmaster and
        its backends) with its reaped children (ended backends); Linux only."""
        ticks, folder = os.sysconf("SC_CLK_TCK"), str(self.folder)
        total = 0
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and os.readlink(entry / "cwd").startswith(folder):
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
            except OSError:
                continue  # ended meanwhile, or not ours to read
        return total / ticks

    def stop(self) -> None:
        """Stop the server, then PostgreSQL, and delete the folder; safe to call twice."""
        stop_group(self._server, signal.SIGKILL)
        self._server = None
        if self._postgres is not None:
            pid_file = self.folder / "pgdata" / "postmaster.pid"
            with contextlib.suppress(OSError, ValueError, ProcessLookupError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGQUIT)
            stop_group(self._postgres, 0)  # signal 0: only wait, then kill the rest
            self._postgres = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def restart_server(self, auth_cache_ttl: int) -> None:
        """Restart ``mlflow server`` on the same port and data with ``auth_cache_ttl``
        (a benchmark compares the auth settings on one store)."""
        stop_group(self._server, signal.SIGKILL)
        self.auth_cache_ttl = auth_cache_ttl
        self.requested_port = int(self.url.rsplit(":", 1)[1])
        self._start_server()

    def __enter__(self) -> Stack:  # noqa: PYI034 - Python 3.10 has no typing.Self
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ PostgreSQL
    def _as_postgres(self, command: list) -> list:
        """``command`` run as the ``postgres`` user when this process is root."""
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command

    def _give_to_postgres(self, *paths: Path) -> None:
        if os.geteuid() == 0:
            for path in paths:
                shutil.chown(path, "postgres", "postgres")

    def _start_postgres(self) -> None:
        bin_dir = postgres_bin()
        sockets, pwfile = self.folder / "sockets", self.folder / "pg-superuser-password"
        sockets.mkdir()
        pwfile.write_text(self.db_password + "\n")
        self._give_to_postgres(self.folder, sockets, pwfile)
        subprocess.run(
            self._as_postgres([
                str(bin_dir / "initdb"), "-D", str(self.folder / "pgdata"), "-U", "postgres",
                f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8", "--locale=C",
                "--no-sync", "--no-instructions",
            ]),
            check=True, capture_output=True,
        )  # fmt: skip
        pwfile.unlink()
        self.pg_port = free_port()
        with open(self.folder / "postgres.log", "ab") as log:
            self._postgres = subprocess.Popen(
                self._as_postgres([
                    str(bin_dir / "postgres"), "-D", str(self.folder / "pgdata"),
                    "-h", "127.0.0.1", "-p", str(self.pg_port), "-k", str(sockets),
                    "-c", "fsync=off", "-c", "synchronous_commit=off",
                    "-c", "full_page_writes=off",
                ]),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self._wait_for_postgres()

    def _connect(self, user: str, password: str, dbname: str = "postgres", timeout: int = 2):
        import psycopg

        return psycopg.connect(
            host="127.0.0.1",
            port=self.pg_port,
            user=user,
            password=password,
            dbname=dbname,
            connect_timeout=timeout,
            autocommit=True,
        )

    def _wait_for_postgres(self) -> None:
        import psycopg

        deadline = time.time() + START_TIMEOUT
        while True:
            if self._postgres.poll() is not None:
                raise RuntimeError(self._failure("PostgreSQL exited", "postgres.log"))
            try:
                self._connect("postgres", self.db_password).close()
                return
            except psycopg.OperationalError:
                if time.time() > deadline:
                    raise RuntimeError(self._failure("PostgreSQL did not start", "postgres.log"))
                time.sleep(0.2)

    def _create_databases(self) -> None:
        """One login role, ``mlflow``, owning MLflow's two databases (the superuser's
        password stays in this process: MLflow never needs it)."""
        from psycopg import sql

        with self._connect("postgres", self.db_password) as db:
            db.execute(
                sql.SQL("CREATE ROLE mlflow LOGIN PASSWORD {}").format(
                    sql.Literal(self.db_password)
                )
            )
            for name in DATABASES:
                db.execute(sql.SQL("CREATE DATABASE {} OWNER mlflow").format(sql.Identifier(name)))
        self.backend_uri = self.database_uri("mlflow")

    def database_uri(self, name: str) -> str:
        """A plain ``postgresql://`` URI of one of :data:`DATABASES` as role ``mlflow``."""
        return f"postgresql://mlflow:{self.db_password}@127.0.0.1:{self.pg_port}/{name}"

    # ------------------------------------------------------------------ MLflow
    @property
    def artifacts(self) -> Path:
        return self.folder / "artifacts"

    def _write_auth_config(self) -> Path:
        path = self.folder / "basic_auth.ini"
        path.write_text(
            "[mlflow]\n"
            "default_permission = NO_PERMISSIONS\n"
            f"database_uri = {self.database_uri('mlflow_auth')}\n"
            f"admin_username = {self.admin_username}\n"
            f"admin_password = {self.admin_password}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
            + (f"auth_cache_ttl_seconds = {self.auth_cache_ttl}\n" if self.auth_cache_ttl else "")
        )
        path.chmod(0o600)
        return path

    def _start_server(self) -> None:
        port = self.requested_port or free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env.update(
            MLFLOW_AUTH_CONFIG_PATH=str(self._write_auth_config()),
            MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
            MLFLOW_DISABLE_TELEMETRY="true",
            # the basic-auth app's forms are CSRF-protected: MLflow wants a fixed key
            MLFLOW_FLASK_SERVER_SECRET_KEY=secrets.token_urlsafe(32),
        )
        with open(self.folder / "server.log", "ab") as log:
            self._server = subprocess.Popen(
                [
                    sys.executable, "-m", "mlflow", "server",
                    "--backend-store-uri", self.backend_uri,
                    "--serve-artifacts", "--artifacts-destination", str(self.artifacts),
                    "--app-name", "basic-auth",
                    "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                ],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.folder,
                start_new_session=True,
            )  # fmt: skip
        try:
            wait_for_health(self.url, self._server)
        except (RuntimeError, TimeoutError) as error:
            raise RuntimeError(self._failure(str(error), "server.log")) from None

    def _failure(self, what: str, log: str) -> str:
        text = (self.folder / log).read_text(errors="replace")[-3000:]
        return f"{what}; the end of {log}:\n{text}"

    # ------------------------------------------------------------------ users
    def env(self, username: str | None = None, password: str | None = None) -> dict:
        """The variables a client (``govern``, MLflow) needs to call the server as
        ``username`` (the admin by default)."""
        return {
            "MLFLOW_TRACKING_URI": self.url,
            "MLFLOW_TRACKING_USERNAME": username or self.admin_username,
            "MLFLOW_TRACKING_PASSWORD": password or self.admin_password,
        }

    @contextlib.contextmanager
    def as_admin(self):
        """MLflow's ``AuthServiceClient`` on this server, called as the admin (its
        credentials come from the environment, set for the block only)."""
        from mlflow.server import get_app_client

        saved = {k: os.environ.get(k) for k in self.env()}
        os.environ.update(self.env())
        try:
            yield get_app_client("basic-auth", tracking_uri=self.url)
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def create_user(self, username: str, grants: tuple = ()) -> dict:
        """Create ``username`` with a generated password, grant it each ``(resource_type,
        resource_id, permission)`` of ``grants`` (MLflow's names: ``"experiment"``,
        ``"registered_model"``; ``READ``, ``EDIT``, ``MANAGE``...), and return
        :meth:`env` for it."""
        password = secrets.token_urlsafe(18)
        with self.as_admin() as client:
            client.create_user(username, password)
            for resource_type, resource_id, permission in grants:
                client.grant_user_permission(username, resource_type, resource_id, permission)
        return self.env(username, password)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="the server's port (default: free)")
    port = parser.parse_args().port
    # Ctrl-C and SIGTERM stop it cleanly, also when a script started it in the background
    # (a non-interactive shell's background job inherits SIGINT ignored)
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.default_int_handler)
    stack = Stack(port=port)
    try:
        stack.start()
        print(f"MLflow server (basic-auth, PostgreSQL): {stack.url}")
        print(f"  admin user {stack.admin_username}, password {stack.admin_password}")
        print(f"  PostgreSQL on 127.0.0.1:{stack.pg_port}, everything under {stack.folder}")
        print("To run govern against it as the admin, export:")
        for key, value in stack.env().items():
            print(f"  export {key}={value}")
        print("Ctrl-C stops it and deletes its folder.", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop()
        print("stopped", flush=True)


if __name__ == "__main__":
    main()
