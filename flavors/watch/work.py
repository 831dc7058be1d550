"""What ``govern watch`` does with an accepted delivery: one queue per governed model.

- ``model_version.created`` on a watched model queues the explanation of that version
  (:func:`flavors.explain.explain.explain_model_version` with the watch file's data and
  options, signed with the watch's key). A redelivery or a catch-up of a version already
  explained returns the earlier surrogate (explain's own reuse check: the same key,
  request and data), so the work is idempotent.
- ``model_version_alias.created`` or ``deleted`` on a watched model (or on its governed
  registered model) queues the audit of the model (:func:`flavors.trail.audit.audit_model`):
  its findings are printed at once, and each alias holder's outcome is recorded as a
  signed ``audit`` verification record (:func:`flavors.trail.verification.record_verification`):
  ``failed``, with the first finding, when the holder has no valid promotion.

Each model has two queues, each worked by its own thread in arrival order: its
explanations, one at a time, and its audits, one at a time, so that an alias set by hand
is reported while a long explanation of a new version runs. A job already waiting is not
queued twice. :meth:`Watcher.catch_up` queues what a stopped
receiver missed: every version of a watched model without a linked surrogate, and an
audit of every watched model holding an alias.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.store.reads import CommandClient
from miret_governance.flavors.store.registry import SURROGATE_TAG, name_filter
from miret_governance.flavors.trail.governed import governed_model, governing
from miret_governance.flavors.watch.config import WatchedModel
from miret_governance.flavors.watch.deliveries import Delivery


@dataclass(frozen=True)
class Job:
    """One piece of work: ``explain`` a version of ``model``, or ``audit`` the model."""

    kind: str
    model: str
    version: str | None = None
    cause: str = field(default="", compare=False)

    def __str__(self) -> str:
        what = f"models:/{self.model}/{self.version}" if self.version else self.model
        return f"{self.kind} {what} ({self.cause})"


class Watcher:
    """Queues and runs the jobs of the watched models (module docstring).

    Parameters
    ----------
    watched : dict
        Registered model name -> :class:`flavors.watch.config.WatchedModel`.
    policy : governance.trust.policy.Policy
        The audits' policy.
    key : governance.trust.signers.SigningKey
        Signs the explanations and the audits' verification records.
    say : callable
        Receives one line per outcome (a finding, an explanation, an error).
    """

    def __init__(self, watched: dict[str, WatchedModel], policy, key, say: Callable):
        self.watched, self.policy, self.key = watched, policy, key
        self.say = say
        self._lock = threading.Lock()
        self._queues: dict[tuple, queue.Queue] = {}  # (model, kind) -> its jobs
        self._threads: list[threading.Thread] = []
        self._pending: set[Job] = set()

    def watched_name(self, name: str) -> str | None:
        """The watched model ``name`` is, or whose governed registered model it is."""
        if name in self.watched:
            return name
        source = governing(self.policy, name)
        return source.name if source is not None and source.name in self.watched else None

    def accept(self, delivery: Delivery) -> str:
        """Queue the job ``delivery`` asks for; what was done, in words."""
        model = self.watched_name(delivery.name)
        cause = f"delivery {delivery.delivery_id}"
        if model is None:
            return f"ignored: {delivery.name} is not in the watch file"
        if delivery.event == "model_version.created" and model == delivery.name:
            job = Job("explain", model, delivery.version, cause)
        elif delivery.event.startswith("model_version_alias."):
            job = Job("audit", model, cause=cause)
        else:
            return f"ignored: {delivery.event} on {delivery.name} needs no work"
        return f"queued {job}" if self.queue(job) else f"already queued: {job}"

    def queue(self, job: Job) -> bool:
        """Put ``job`` on its model's queue of its kind (False: the same job is waiting
        already)."""
        with self._lock:
            if job in self._pending:
                return False
            self._pending.add(job)
            lane = self._queues.get((job.model, job.kind))
            if lane is None:
                lane = self._queues[job.model, job.kind] = queue.Queue()
                thread = threading.Thread(
                    target=self._work, args=(lane,), name=f"watch {job}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        lane.put(job)
        return True

    def catch_up(self) -> list[Job]:
        """Queue what the registry shows undone (module docstring); the jobs queued."""
        queued, client = [], CommandClient()
        for name in self.watched:
            versions = client.search_model_versions(name_filter(name))
            for version in sorted(versions, key=lambda v: int(v.version)):
                if not (version.tags or {}).get(SURROGATE_TAG):
                    queued.append(Job("explain", name, str(version.version), "catch-up"))
            target = governed_model(self.policy, name)
            held = [m.aliases for m in client.search_registered_models(name_filter(name))]
            if target is not None:
                governed = client.search_registered_models(name_filter(target.registered_model))
                held += [m.aliases for m in governed]
            if any(held):
                queued.append(Job("audit", name, cause="catch-up"))
        return [job for job in queued if self.queue(job)]

    def close(self) -> None:
        """Let each model's current and queued jobs finish, then stop its thread."""
        with self._lock:
            lanes, threads = list(self._queues.values()), list(self._threads)
        for lane in lanes:
            lane.put(None)
        for thread in threads:
            thread.join()

    def _work(self, lane: queue.Queue) -> None:
        while (job := lane.get()) is not None:
            with self._lock:
                self._pending.discard(job)  # a new event during the run queues another
            try:
                self._run(job)
            except Exception as error:  # noqa: BLE001 - one job never stops the queue
                said = error if isinstance(error, GovernanceError) else repr(error)
                self.say(f"error: {job}: {said}")

    def _run(self, job: Job) -> None:
        if job.kind == "explain":
            self._explain(job)
        else:
            self._audit(job)

    def _explain(self, job: Job) -> None:
        from miret_governance.flavors.explain.explain import explain_model_version

        uri = f"models:/{job.model}/{job.version}"
        options = self.watched[job.model].explain_options()
        result = explain_model_version(uri, signing_key=self.key, **options)
        done = "already explained by" if result.reused else "explained:"
        self.say(f"{uri} {done} {result.surrogate_uri} ({job.cause})")

    def _audit(self, job: Job) -> None:
        from miret_governance.flavors.trail import verification
        from miret_governance.flavors.trail.audit import audit_model

        client = CommandClient()  # one job's reads memoized, never the next job's
        report = audit_model(job.model, self.policy, client)
        for finding in report.findings:
            where = f" @{finding.alias}" if finding.alias else ""
            self.say(f"FINDING {finding.kind} {finding.version}{where}: {finding.message}")
        for verified in verification.audited(client, report):
            note = verification.record_verification(client, self.policy, self.key, verified)
            if note:
                self.say(note)
        verdict = "clean" if report.clean else f"{len(report.findings)} finding(s)"
        self.say(f"audit of {job.model} under policy {report.policy}: {verdict} ({job.cause})")
