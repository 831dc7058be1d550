"""Store and server failures are printed as one line naming the failure and its fix."""

import errno
from pathlib import Path

import mlflow
import pytest
from mlflow.exceptions import MlflowException

from miret_governance.cli.common import error_message, exit_code
from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.store.outages import unreachable


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_a_full_disk_is_named_as_such():
    """A real ENOSPC (/dev/full always is), raw and as MLflow wraps it."""
    with pytest.raises(OSError) as info, open("/dev/full", "w") as full:
        full.write("x")
        full.flush()
    assert info.value.errno == errno.ENOSPC
    try:
        raise MlflowException(f"failed to log artifact: {info.value}") from info.value
    except MlflowException as wrapped:
        raised = wrapped
    expected = (
        "the disk is full (no space left on device); free space on the disk of the "
        "temporary folder (TMPDIR), the tracking store or the artifact store and run the "
        "command again"
    )
    assert error_message(info.value) == error_message(raised) == expected
    assert exit_code(info.value) == 2


def test_a_wrapped_refusal_names_the_server_not_the_http_library(monkeypatch):
    monkeypatch.setattr(mlflow, "get_tracking_uri", lambda: "http://127.0.0.1:9")
    import requests

    try:
        requests.get("http://127.0.0.1:9/health", timeout=5)
    except requests.ConnectionError as refused:
        error = ExplainError(f"cannot download models:/m/1: {refused}")
    assert unreachable(error)
    assert error_message(error) == (
        "the tracking server http://127.0.0.1:9 refused the connection (it is not running, "
        "or --tracking-uri / MLFLOW_TRACKING_URI names another port); start it and run the "
        "command again"
    )


@pytest.mark.no_store
def test_a_read_only_store_is_named_as_such(tmp_path, monkeypatch):
    """A real SQLite refusal (a connection opened read-only), as MLflow wraps it: QA got
    SQLAlchemy's whole autoflush text and the statement from a read-only mlflow.db."""
    import sqlite3

    path = tmp_path / "mlflow.db"
    sqlite3.connect(path).execute("CREATE TABLE runs (id TEXT)").connection.commit()
    monkeypatch.setattr(mlflow, "get_tracking_uri", lambda: f"sqlite:///{path}")
    with pytest.raises(sqlite3.OperationalError) as info:
        sqlite3.connect(f"file:{path}?mode=ro", uri=True).execute("INSERT INTO runs VALUES ('a')")
    try:
        raise MlflowException(
            f"(sqlite3.OperationalError) {info.value} [SQL: INSERT]"
        ) from info.value
    except MlflowException as wrapped:
        raised = wrapped
    assert error_message(raised) == (
        f"the tracking store sqlite:///{path} is read-only (SQLite: attempt to write a "
        "readonly database); nothing was recorded: run with write access to the file and its "
        "folder, or point --tracking-uri / MLFLOW_TRACKING_URI at a writable store"
    )
    assert exit_code(raised) == 2


def test_a_store_uri_password_never_appears_in_a_message(tmp_path):
    """A PostgreSQL store URI carries its database's password: a command that cannot
    reach it (nothing listens on port 1) names the store without it, exit 2, at once
    (MLflow alone retries the database for 101 s first)."""
    from typer.testing import CliRunner

    from miret_governance.cli.app import app

    policy = Path(__file__).parents[2] / "examples" / "policies" / "lenient.toml"
    uri = "postgresql://mlflow:s3cret-pw@127.0.0.1:1/mlflow"
    result = CliRunner().invoke(
        app, ["audit", "--model-name", "m", "--tracking-uri", uri, "--policy", str(policy)]
    )
    assert result.exit_code == 2, result.output
    assert "s3cret-pw" not in result.output
    assert "postgresql://mlflow:***@127.0.0.1:1/mlflow refused the connection" in result.output


@pytest.mark.parametrize(
    ("uri", "address"),
    [
        ("postgresql://u:p@127.0.0.1:1/mlflow", "127.0.0.1:1"),
        ("mysql+pymysql://u:p@127.0.0.1:1/mlflow", "127.0.0.1:1"),
    ],
)
def test_an_unreachable_database_is_refused_before_mlflow_retries_it(uri, address):
    """MLflow retries a database it cannot reach for 101 s: the probe tries its port once."""
    from miret_governance.flavors.errors import GovernanceError
    from miret_governance.flavors.store.registry import check_tracking_server

    with pytest.raises(GovernanceError, match=f"nothing answers at {address}") as raised:
        check_tracking_server(uri)
    assert isinstance(raised.value.__cause__, ConnectionRefusedError)


@pytest.mark.parametrize(
    "uri", ["sqlite:///mlflow.db", "postgresql:///mlflow?host=/run/postgresql", "file:./mlruns"]
)
def test_a_store_without_a_database_host_is_left_to_mlflow(uri):
    from miret_governance.flavors.store.registry import check_tracking_server

    assert check_tracking_server(uri) is None


def test_without_passwords_keeps_everything_but_the_password():
    from miret_governance.cli.common import without_passwords

    assert without_passwords("at postgresql+psycopg://u:p%40ss@db:5432/x and http://h:5000/") == (
        "at postgresql+psycopg://u:***@db:5432/x and http://h:5000/"
    )
    assert (
        without_passwords("sqlite:///mlflow.db, models:/m/1") == "sqlite:///mlflow.db, models:/m/1"
    )
