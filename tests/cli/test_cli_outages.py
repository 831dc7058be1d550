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
