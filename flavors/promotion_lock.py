"""One promotion to an alias at a time.

:func:`promotion_lock` holds a registered model named ``<name>.promotion-lock.<alias>``
while a promotion runs; the store refuses to create it while it exists (compare-and-set
in MLflow's own store). A lock left behind is taken over: one older than
:data:`LOCK_TTL_SECONDS`, one whose process on this host is gone (killed), and one of
this very process outside a promotion (its release failed, e.g. on a locked store).
"""

from __future__ import annotations

import os
import socket
import time
from contextlib import contextmanager
from datetime import datetime, timezone

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.faults import alive

LOCK_TTL_SECONDS = 600
"""A promotion lock older than this (10 minutes) is taken over: its promotion was killed."""
_HELD: set = set()
"""Promotion locks this process holds now."""
LOCK_OWNER_TAG = "governance.lock.owner"
LOCK_URI_TAG = "governance.lock.ensemble_uri"


class ConcurrentPromotionError(GovernanceError):
    """Another promotion to the same alias ran at the same time; this one recorded
    nothing. Exit code 2."""


def lock_name(name: str, alias: str) -> str:
    """The registered model that locks promotions of ``name`` to ``alias``."""
    return f"{name}.promotion-lock.{alias}"


def _take(client: MlflowClient, lock: str, tags: dict) -> bool:
    try:
        client.create_registered_model(
            lock, tags=tags, description="A promotion to this alias is running (govern promote)."
        )
    except MlflowException as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return False
    return True


@contextmanager
def promotion_lock(client: MlflowClient, name: str, alias: str, ensemble_uri: str):
    """Hold the lock of promotions of ``name`` to ``alias`` while the block runs.

    Raises
    ------
    ConcurrentPromotionError
        Another promotion holds it (named with its ensemble version, process and start).
    """
    lock = lock_name(name, alias)
    tags = {LOCK_OWNER_TAG: f"{os.getpid()}@{socket.gethostname()}", LOCK_URI_TAG: ensemble_uri}
    if not _take(client, lock, tags):
        try:
            held = client.get_registered_model(lock)
        except MlflowException:  # released meanwhile
            held = None
        if held is not None and not _stale(held, lock):
            since = datetime.fromtimestamp(held.creation_timestamp / 1000, tz=timezone.utc)
            raise ConcurrentPromotionError(
                f"another promotion to @{alias} is running: "
                f"{held.tags.get(LOCK_URI_TAG, 'unknown version')} by process "
                f"{held.tags.get(LOCK_OWNER_TAG, 'unknown')} since "
                f"{since.isoformat(timespec='seconds')} (lock: registered model {lock}); "
                "nothing was recorded; run promote again when it is done"
            )
        if held is not None:  # stale: its promotion was killed
            client.delete_registered_model(lock)
        if not _take(client, lock, tags):
            raise ConcurrentPromotionError(
                f"another promotion to @{alias} took the lock {lock} at the same time; "
                "nothing was recorded; run promote again when it is done"
            )
    _HELD.add(lock)
    try:
        yield
    finally:
        _HELD.discard(lock)
        client.delete_registered_model(lock)


def _stale(held, lock: str) -> bool:
    """Whether a lock is left by a promotion that is no longer running: older than
    :data:`LOCK_TTL_SECONDS`, or taken on this host by a process that is gone, or by
    this process outside any promotion (its release failed, e.g. on a locked store)."""
    if time.time() - held.creation_timestamp / 1000 > LOCK_TTL_SECONDS:
        return True
    pid, _, host = held.tags.get(LOCK_OWNER_TAG, "").partition("@")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return lock not in _HELD
    return not alive(int(pid))
