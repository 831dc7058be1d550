"""Store and server failures in words: a locked or read-only SQLite store, a tracking server that
refuses connections or stops answering, a full disk or a failing artifact store; a server's
refusal of the credentials or of a permission (HTTP 401, 403) is worded by
:mod:`flavors.store.refusals`, which ``cli.common.error_message`` asks first.

MLflow reports these as its own exceptions with the raw text of the layer below
(``API request to ... failed with exception HTTPConnectionPool(...): Max retries
exceeded ... Connection refused``, ``too many 500 error responses``, ``(sqlite3.
OperationalError) database is locked``, ``[Errno 28] No space left on device``), often
wrapped in one of ours. :func:`outage_message` recognises them anywhere in an error's
chain and says what failed and what to do; ``cli.common.error_message`` prints that one
line with exit code 2.

How long a command waits for a server (:data:`HTTP_SETTINGS`, set with
``os.environ.setdefault`` by ``cli.common.connect``, so the environment still decides):
every HTTP call times out after 10 s; commands that write once retry no call, the long
explain run retries twice with exponential backoff (0 s, then 2 s, plus up to 1 s of
jitter), so one call gives up after at most about 34 s. A server that does not answer at
all is caught before any work by a 5 s probe of ``/health``
(:func:`flavors.registry.check_tracking_server`), and an explain that loses its server
mid-run probes once more (5 s) before its cleanup calls, which it skips when the server
is gone (the next explain of that version ends the run).
"""

from __future__ import annotations

import errno
import os
import re

HTTP_TIMEOUT = "10"
"""Seconds of ``MLFLOW_HTTP_REQUEST_TIMEOUT`` (MLflow's default, 120, retried seven
times, made a hung server cost minutes)."""
HTTP_SETTINGS = {
    "fail_fast": {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": HTTP_TIMEOUT,
    },
    "retrying": {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": HTTP_TIMEOUT,
    },
}
"""The HTTP settings of a command that writes once (``fail_fast``) and of explain."""


def error_chain(error: BaseException) -> list:
    """``error`` and its causes and contexts, outermost first (a context hidden by
    ``raise ... from None`` is not followed: the error says all itself)."""
    seen = []
    while error is not None and not any(error is e for e in seen):
        seen.append(error)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return seen


def _tracking_uri() -> str:
    import mlflow

    return mlflow.get_tracking_uri()


UNREACHABLE = (
    "database is locked",
    "Connection refused",
    "NewConnectionError",
    "Read timed out",
)
"""Texts of a store that cannot be reached at all: a cleanup would wait as long again
(MLflow gives each SQLite statement 20 s on a locked store), so it is left to the next
explain (:func:`flavors.faults.recover_killed_runs`). A connection dropped mid-request
(reset, aborted) is not one of them: a server that refuses an upload before reading it
closes the connection too, and still answers the cleanup (the caller probes it)."""


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or its cause) says the store or server cannot be reached."""
    text = " ".join(str(e) for e in error_chain(error))
    return any(mark in text for mark in UNREACHABLE)


def outage_message(error: BaseException) -> str | None:
    """One line naming a store or server failure and its fix, or None for other errors.

    Parameters
    ----------
    error : BaseException
        Any error a command raised (its ``__cause__`` chain is searched too).
    """
    chain = error_chain(error)
    text = " ".join(str(e) for e in chain)
    if "database is locked" in text:
        return (
            f"the tracking store {_tracking_uri()} is locked by another process (SQLite: "
            "database is locked); retry when it is done, or use a tracking server for "
            "concurrent work"
        )
    if "attempt to write a readonly database" in text:
        return (
            f"the tracking store {_tracking_uri()} is read-only (SQLite: attempt to write a "
            "readonly database); nothing was recorded: run with write access to the file and "
            "its folder, or point --tracking-uri / MLFLOW_TRACKING_URI at a writable store"
        )
    full = [e for e in chain if isinstance(e, OSError) and e.errno == errno.ENOSPC]
    if full or "database or disk is full" in text or "No space left on device" in text:
        where = f" writing {full[0].filename}" if full and full[0].filename else ""
        return (
            f"the disk is full{where} (no space left on device); free space on the disk of "
            "the temporary folder (TMPDIR), the tracking store or the artifact store and run "
            "the command again"
        )
    if "too many 500 error responses" in text:
        return (
            f"the tracking server {_tracking_uri()} failed to store or serve artifacts "
            "(HTTP 500 on every attempt): its artifact store may be full or not writable; "
            "check the server's log and the disk of its --artifacts-destination"
        )
    if "Read timed out" in text or "ReadTimeout" in text:
        waited = re.search(r"read timeout=([0-9.]+)", text)
        timeout = waited.group(1) if waited else os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT")
        return (
            f"the tracking server {_tracking_uri()} stopped answering (no reply within "
            f"{float(timeout or HTTP_TIMEOUT):g} s; MLFLOW_HTTP_REQUEST_TIMEOUT sets the wait): "
            "check that it is running and not overloaded, then run the command again"
        )
    if "Connection reset by peer" in text or "Connection aborted" in text:
        return (
            f"the tracking server {_tracking_uri()} dropped the connection in the middle of a "
            "request (it stopped, restarted or was killed); check that it is running, then "
            "run the command again"
        )
    if "Connection refused" in text or "NewConnectionError" in text:
        return (
            f"the tracking server {_tracking_uri()} refused the connection (it is not "
            "running, or --tracking-uri / MLFLOW_TRACKING_URI names another port); start it "
            "and run the command again"
        )
    return None
