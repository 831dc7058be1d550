"""Interrupted and crashed explain runs end cleanly, and the next run cleans up after a kill.

:func:`signals_raise` turns SIGINT, SIGTERM and SIGHUP into :class:`Interrupted`, so
cleanup code runs for each, and records them: an exception raised while a finalizer
(``__del__``) runs is ignored by Python, so a signal that arrives then would be lost and
the explain would go on; :func:`check_interrupted`, called at every stage and while the
main thread waits for the fit, raises it again. :func:`guarded_run`
ends an explain run KILLED on an interrupt and FAILED on any other exception, and marks
the logged models of the run FAILED and deletes them, so no orphan is left behind.
A SIGKILL runs no handler: every explain run records its host and process id as tags,
and :func:`recover_killed_runs` ends runs of the same ensemble version whose process is
gone (and removes their temporary folders) the next time that version is explained.

Either way a run that did not finish leaves no model version behind
(:func:`discard_run_versions`): the versions registered from it are deleted, and an
ensemble version linked to one of them is linked back to its newest surrogate whose
explain run finished, or unlinked when there is none, so no link points at a version
whose logged model is gone. Deleting a version needs MANAGE on its registered model on a
server with MLflow's basic-auth app, so :func:`check_removable` refuses, before any run
starts, an explain into an existing surrogate model on which the user may register
(EDIT) but not delete: a step refused after the registration would leave the version.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import tempfile
import threading
from dataclasses import dataclass, field
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


_received: list[int] = []  # signals received in the block of signals_raise, not yet raised again


def _raise_interrupted(signum, frame):
    _received.append(signum)
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_raise():
    """Within the block, SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` and are
    recorded for :func:`check_interrupted` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None))
    _received.clear()
    previous = {s: signal.signal(s, _raise_interrupted) for s in wanted if s is not None}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _received.clear()


def check_interrupted() -> None:
    """In the main thread, raise :class:`Interrupted` once for the signals received within
    :func:`signals_raise` whose exceptions Python ignored (the handler ran inside a
    finalizer), naming the last; a no-op elsewhere and when none was received."""
    if _received and threading.current_thread() is threading.main_thread():
        signum = _received[-1]
        _received.clear()
        raise Interrupted(signum)


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


PERMISSION_ENDPOINT = "/api/3.0/mlflow/users/permissions/get"
"""MLflow's basic-auth endpoint answering a user's own permission on a resource."""


def check_removable(client: MlflowClient, registered_name: str) -> None:
    """Refuse an explain whose user could register a version of ``registered_name`` but
    not delete it again (less than MANAGE on an existing registered model, on a server
    with MLflow's basic-auth app); a no-op for admins, a new model (its creator gets
    MANAGE), a model the user cannot read (registering is refused first) and stores
    without users.

    Raises
    ------
    ExplainError
        The user's permission on the model, what explain needs and who grants it.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    from miret_governance.flavors.errors import ExplainError
    from miret_governance.flavors.store.auth import server_user
    from miret_governance.flavors.store.refusals import GRANT_HINT
    from miret_governance.governance.trust.roles import MANAGE, REGISTERED_MODEL

    uri = mlflow.get_tracking_uri()
    user = server_user(uri)
    if user is None or user.is_admin:
        return
    try:
        client.get_registered_model(registered_name)
    except MlflowException:
        return  # missing (created, then MANAGE), or unreadable (registering is refused)
    answer = http_request(
        get_default_host_creds(uri), PERMISSION_ENDPOINT, "GET",
        params={"username": user.username, "resource_type": REGISTERED_MODEL,
                "resource_id": registered_name},
    )  # fmt: skip
    permission = answer.json().get("permission") if answer.status_code == 200 else MANAGE
    if permission != MANAGE:
        raise ExplainError(
            f"user {user.username!r} has {permission} on the registered model "
            f"{registered_name!r}, and explain needs MANAGE there: it deletes the surrogate "
            "version it registered when a later step is refused, so that nothing is left "
            f"half-written; {GRANT_HINT}; nothing was registered"
        )


def discard_logged_models(client: MlflowClient, run) -> list[str]:
    """Mark every logged model of ``run`` FAILED, then delete it; their ids. A deletion
    the server refuses (it needs MANAGE on the experiment, which the CI identity does not
    hold on the data scientists' experiment: it would let it delete their runs) leaves
    the model FAILED, as its run."""
    from mlflow.exceptions import MlflowException

    models = client.search_logged_models(
        experiment_ids=[run.info.experiment_id],
        filter_string=f"source_run_id = '{run.info.run_id}'",
    )
    for model in models:
        with contextlib.suppress(Exception):
            client.finalize_logged_model(model.model_id, "FAILED")
    for model in models:
        try:
            client.delete_logged_model(model.model_id)
        except MlflowException as error:
            if error.error_code != "PERMISSION_DENIED":
                raise
    return [m.model_id for m in models]


@dataclass
class Recovery:
    """What cleaning up after unfinished explain runs did.

    Attributes
    ----------
    runs : list of str
        Runs ended as KILLED.
    versions : list of str
        ``models:/<name>/<version>`` of the versions registered from them, deleted.
    links : list of str
        One sentence per ensemble version whose link pointed at a deleted version.
    """

    runs: list = field(default_factory=list)
    versions: list = field(default_factory=list)
    links: list = field(default_factory=list)

    def notes(self) -> list[str]:
        """The recovery in sentences, for people."""
        notes = [
            f"Ended run {run_id} as KILLED: an earlier explain of this version was killed "
            "(its logged model was discarded)."
            for run_id in self.runs
        ]
        if self.versions:
            notes.append(
                f"Deleted {', '.join(self.versions)}: registered by a killed explain, its "
                "logged model is gone."
            )
        return notes + self.links


def _relink(client: MlflowClient, ensemble_uri: str, deleted: set) -> str | None:
    """Point ``ensemble_uri``'s link, when it names a ``deleted`` version, at its newest
    other surrogate whose explain run finished, or remove it; what was done."""
    from miret_governance.flavors.store.registry import (
        SURROGATE_OF_TAG,
        SURROGATE_TAG,
        link_surrogate,
        name_filter,
        resolve_model_version,
        version_uri,
    )

    ensemble = resolve_model_version(client, ensemble_uri)
    linked = ensemble.tags.get(SURROGATE_TAG)
    if linked not in deleted:
        return None
    name = linked[len("models:/") :].rsplit("/", 1)[0]
    candidates = sorted(
        (
            v
            for v in client.search_model_versions(name_filter(name))
            if v.tags.get(SURROGATE_OF_TAG) == ensemble_uri and version_uri(v) not in deleted
        ),
        key=lambda v: int(v.version),
        reverse=True,
    )
    for candidate in candidates:
        with contextlib.suppress(Exception):
            if client.get_run(candidate.run_id).info.status == "FINISHED":
                link_surrogate(client, ensemble, candidate)
                return (
                    f"Linked {ensemble_uri} back to {version_uri(candidate)} (it pointed at "
                    f"{linked}, deleted)."
                )
    client.delete_model_version_tag(ensemble.name, ensemble.version, SURROGATE_TAG)
    return f"Unlinked {ensemble_uri}: it pointed at {linked}, deleted (no other surrogate)."


def discard_run_versions(client: MlflowClient, run, recovery: Recovery | None = None) -> Recovery:
    """Delete the model versions registered from ``run`` and repair the ensemble links
    that pointed at them (:func:`_relink`); recorded in ``recovery``."""
    from miret_governance.flavors.store.registry import SURROGATE_OF_TAG, quoted, version_uri

    recovery = recovery if recovery is not None else Recovery()
    versions = client.search_model_versions(f"run_id = {quoted(run.info.run_id)}")
    deleted = {version_uri(v): v.tags.get(SURROGATE_OF_TAG) for v in versions}
    for version in versions:
        client.delete_model_version(version.name, version.version)
    recovery.versions += list(deleted)
    for ensemble_uri in dict.fromkeys(u for u in deleted.values() if u):
        note = _relink(client, ensemble_uri, set(deleted))
        if note:
            recovery.links.append(note)
    return recovery


def _server_answers() -> bool:
    """False when an HTTP tracking server does not answer a 5 s probe (every cleanup
    call would then wait for its own timeout; the next explain ends the run instead)."""
    from miret_governance.flavors.store.registry import GovernanceError, check_tracking_server

    try:
        check_tracking_server()
    except GovernanceError:
        return False
    return True


def _forget_active_run(run) -> None:
    """Drop ``run`` from MLflow's stack of active runs without calling the store: MLflow
    ends a run left active when the process exits, which would wait for an unreachable
    store once more (33 s for a hung server, 20 s for a locked SQLite store)."""
    active = mlflow.active_run()
    if active is not None and active.info.run_id == run.info.run_id:
        mlflow.tracking.fluent._active_run_stack.get().pop()
        os.environ.pop("MLFLOW_RUN_ID", None)


def end_run(client: MlflowClient, run, status: str, error: BaseException | None = None) -> None:
    """Delete the versions registered from the run (:func:`discard_run_versions`),
    discard its logged models and end it with ``status`` (best effort: the original
    ``error``, not a failing cleanup, is what the caller reports). Nothing is tried when
    the store cannot be reached (``error`` says it is locked or the server is gone, or
    the server does not answer a probe): the run stays RUNNING until the next explain of
    the version ends it (:func:`recover_killed_runs`)."""
    from miret_governance.flavors.store.outages import unreachable

    if (error is not None and unreachable(error)) or not _server_answers():
        _forget_active_run(run)
        return
    with contextlib.suppress(Exception):
        discard_run_versions(client, run)
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
    except BaseException as error:
        end_run(client, run, RunStatus.to_string(RunStatus.FAILED), error)
        raise


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_killed_runs(client: MlflowClient, experiment_id: str, ensemble_uri: str) -> Recovery:
    """End as KILLED the explain runs of ``ensemble_uri`` left RUNNING by a process of
    this host that no longer exists; delete the versions registered from them (and
    repair the links to those, :func:`discard_run_versions`), discard their logged
    models and remove their temporary folders.

    Returns
    -------
    Recovery
    """
    from miret_governance.flavors.store.registry import ENSEMBLE_URI_TAG, quoted

    runs = client.search_runs(
        [experiment_id],
        filter_string=(
            f"tags.`{ENSEMBLE_URI_TAG}` = {quoted(ensemble_uri)} and attributes.status = 'RUNNING'"
        ),
    )
    host, recovery = socket.gethostname(), Recovery()
    for run in runs:
        pid = run.data.tags.get(PID_TAG, "")
        if run.data.tags.get(HOST_TAG) != host or not pid.isdigit() or alive(int(pid)):
            continue
        client.set_tag(run.info.run_id, RECOVERED_TAG, str(os.getpid()))
        discard_run_versions(client, run, recovery)
        discard_logged_models(client, run)
        client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.KILLED))
        for folder in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}{pid}-*"):
            shutil.rmtree(folder, ignore_errors=True)
        recovery.runs.append(run.info.run_id)
    return recovery
