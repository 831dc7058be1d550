"""Interrupted and crashed explain runs end cleanly, and the next run cleans up after a kill.

:func:`signals_raise` turns SIGTERM and SIGHUP into :class:`Interrupted` (SIGINT already
raises ``KeyboardInterrupt``), so cleanup code runs for them too. :func:`guarded_run`
ends an explain run KILLED on an interrupt and FAILED on any other exception, and marks
the logged models of the run FAILED and deletes them, so no orphan is left behind.
A SIGKILL runs no handler: every explain run records its host and process id as tags,
and :func:`recover_killed_runs` ends runs of the same ensemble version whose process is
gone (and removes their temporary folders) the next time that version is explained.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path

import mlflow
from mlflow import MlflowClient
from mlflow.entities import RunStatus

PID_TAG = "governance.pid"
HOST_TAG = "governance.host"
RECOVERED_TAG = "governance.recovered_by"
TEMP_PREFIX = "explain-"


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP received; ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_raise():
    """Within the block, SIGTERM and SIGHUP raise :class:`Interrupted` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    previous = {s: signal.signal(s, _raise_interrupted) for s in wanted}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def reraise_signal(signum: int) -> None:
    """Deliver ``signum`` again with its default action (the process ends as signalled)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def process_tags() -> dict:
    """The tags that let a later run tell whether this process is still alive."""
    return {PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}


def temporary_folder():
    """A temporary folder named after this process (``explain-<pid>-...``)."""
    return tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-")


def discard_logged_models(client: MlflowClient, run) -> list[str]:
    """Mark every logged model of ``run`` FAILED and delete it; their ids."""
    models = client.search_logged_models(
        experiment_ids=[run.info.experiment_id],
        filter_string=f"source_run_id = '{run.info.run_id}'",
    )
    for model in models:
        with contextlib.suppress(Exception):
            client.finalize_logged_model(model.model_id, "FAILED")
        client.delete_logged_model(model.model_id)
    return [m.model_id for m in models]


def end_run(client: MlflowClient, run, status: str) -> None:
    """Discard the run's logged models and end it with ``status`` (best effort: the
    original error, not a failing cleanup, is what the caller reports)."""
    with contextlib.suppress(Exception):
        discard_logged_models(client, run)
    with contextlib.suppress(Exception):
        if mlflow.active_run() is not None and mlflow.active_run().info.run_id == run.info.run_id:
            mlflow.end_run(status)
        else:
            client.set_terminated(run.info.run_id, status)


@contextlib.contextmanager
def guarded_run(client: MlflowClient, run):
    """End ``run`` KILLED on an interrupt, FAILED on any other exception, and re-raise."""
    try:
        yield
    except KeyboardInterrupt:
        end_run(client, run, RunStatus.to_string(RunStatus.KILLED))
        raise
    except BaseException:
        end_run(client, run, RunStatus.to_string(RunStatus.FAILED))
        raise


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_killed_runs(client: MlflowClient, experiment_id: str, ensemble_uri: str) -> list[str]:
    """End as KILLED the explain runs of ``ensemble_uri`` left RUNNING by a process of
    this host that no longer exists; discard their logged models and remove their
    temporary folders.

    Returns
    -------
    list of str
        The run ids that were ended.
    """
    from miret_governance.flavors.registry import ENSEMBLE_URI_TAG, quoted

    runs = client.search_runs(
        [experiment_id],
        filter_string=(
            f"tags.`{ENSEMBLE_URI_TAG}` = {quoted(ensemble_uri)} and attributes.status = 'RUNNING'"
        ),
    )
    host, ended = socket.gethostname(), []
    for run in runs:
        pid = run.data.tags.get(PID_TAG, "")
        if run.data.tags.get(HOST_TAG) != host or not pid.isdigit() or _alive(int(pid)):
            continue
        client.set_tag(run.info.run_id, RECOVERED_TAG, str(os.getpid()))
        discard_logged_models(client, run)
        client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.KILLED))
        for folder in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}{pid}-*"):
            shutil.rmtree(folder, ignore_errors=True)
        ended.append(run.info.run_id)
    return ended
