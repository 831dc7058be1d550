"""The shared-server stack for tests (a pytest plugin: ``pytest_plugins =
["server_stack"]``): PostgreSQL and ``mlflow server --app-name basic-auth`` started by
``examples/server/stack.py``, the launcher ``make server`` runs, so the tests pass on
the stack a user tries.

One stack per worker process (session scope): starting it costs about 8 s of CPU
(``initdb``, MLflow's schema migrations on two PostgreSQL databases, the server's
imports), and the modules that use it (``tests/test_server_e2e.py``,
``tests/flavors/store/test_server_refusals.py``) name their own users, experiments and
models, so they share it safely. It is stopped, and its temporary folder deleted, when
the session ends.
"""

from __future__ import annotations

import pytest
from processes import free_port  # noqa: F401 - puts examples/server on sys.path
from stack import Stack

CPU_USED = []
"""The server stack's CPU seconds (:meth:`stack.Stack.cpu_seconds`), printed at the end
of a session without xdist workers (theirs end in the workers): the test process's own
CPU does not include the server's."""


@pytest.fixture(scope="session")
def server_stack():
    """The running :class:`stack.Stack`: ``url``, ``admin_username``/``admin_password``,
    ``env(user, password)``, ``create_user(name, grants)``, ``as_admin()``, ``artifacts``."""
    with Stack() as stack:
        yield stack
        CPU_USED.append(stack.cpu_seconds())


def pytest_terminal_summary(terminalreporter):
    for seconds in CPU_USED:
        terminalreporter.write_line(
            f"server stack (PostgreSQL, mlflow server): {seconds:.1f} s CPU"
        )


@pytest.fixture
def as_user(monkeypatch):
    """``as_user(env)``: MLflow and in-process ``govern`` calls in this test go to the
    stack with ``env``'s credentials (from ``Stack.env`` or ``Stack.create_user``), and
    fail fast (no retries, a 30 s timeout) instead of backing off on a refusal."""

    def use(env: dict) -> None:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("MLFLOW_REGISTRY_URI", env["MLFLOW_TRACKING_URI"])
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")

    return use


def governance_experiments(admin) -> dict:
    """Name -> id of each governance experiment (``flavors.trail.audit.EXPERIMENTS``),
    created with the admin's ``MlflowClient`` ``admin`` unless a module sharing the stack
    made it first (on an authenticated server only an admin creates them: ``govern
    server setup``)."""
    from miret_governance.flavors.trail.audit import EXPERIMENTS

    found = {name: admin.get_experiment_by_name(name) for name in EXPERIMENTS}
    return {
        name: e.experiment_id if e else admin.create_experiment(name) for name, e in found.items()
    }
