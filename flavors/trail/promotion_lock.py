"""One promotion to an alias at a time, with locks nobody can plant.

:func:`promotion_lock` holds a registered model named ``<name>.promotion-lock.<alias>``
while a promotion runs; the store refuses to create it while it exists (compare-and-set
in MLflow's own store).

The lock carries proof of its holder. Its tag :data:`LOCK_HOLDER_TAG` holds the holder as
canonical JSON (the lock's name, ``pid@host``, the ensemble version promoted, a random
nonce and the time taken) and :data:`LOCK_PROOF_TAG` the signature of exactly those bytes
by the promotion's key: the OpenSSF model-signing bundle decision records carry (about
1.3 KB of JSON), made by :func:`governance.trust.signers.sign_path` on a temporary file and
checked by :func:`governance.trust.signing.verify_path` with the keys the policy trusts for
``decide``. The bundle fits in a tag (8000 characters even for run tags,
``mlflow.utils.validation.MAX_TAG_VAL_LENGTH``; registered-model tags allow more), so
taking the lock stays one ``create_registered_model``: one compare-and-set. No
cryptography is written here: the project signs only through model-signing.

A lock blocks only while it is verifiably held: its proof verifies with a key the policy
trusts for ``decide`` and names this lock; the store recorded its creation time, and
neither that time nor the signed one is more than
:data:`governance.trust.keyring.CLOCK_SKEW_SECONDS` ahead of this host's clock or older
than :data:`LOCK_TTL_SECONDS`; its key or certificate was trusted when it signed; and a
holder on this host is a live process (this very process: inside a promotion). Any
other lock is taken over: unverifiable (made by hand, no or a bad proof, a key the
policy does not trust), timeless or dated in the future (the store's clock is the client's, or was tampered with), or
left behind (older than the TTL, its process gone, its release failed). A genuine proof
copied onto a new lock blocks at most until its signed time plus the TTL. The take-over
is not silent: the context manager yields :class:`TakenOver`, which ``promote`` writes
into its signed record (``lock_taken_over``).

On a server with permissions, a lock the promoting identity may not read or remove (made
by a data scientist, whom MLflow made its only MANAGE holder) is refused at once as a
misconfiguration naming the lock (:class:`LockMisconfiguredError`), not reported as a
concurrent promotion for ever.

The record chain (:mod:`flavors.trail.decisions`) serialises the writers of a model's
records on the same machinery: its lock (:func:`chain_lock_name`) is a registered model
no alias can name, and its holder's proof verifies with a key trusted for any purpose
that writes records (``purposes``).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.explain.faults import alive
from miret_governance.flavors.store.registry import name_filter
from miret_governance.governance.trust.keyring import (
    CLOCK_SKEW_SECONDS,
    SignatureError,
    TrustedKeys,
)
from miret_governance.governance.trust.signers import SigningKey, sign_path
from miret_governance.governance.trust.signing import verify_path

LOCK_TTL_SECONDS = 600
"""A promotion lock older than this (10 minutes) is taken over: its promotion was killed."""
_HELD: set = set()
"""The nonces of the locks this process holds, is taking or released (a holder of this
process is told apart from another thread's by its nonce, and a lock read before its
release is no lock left behind); a lock whose release failed is forgotten here, so the
next taker takes it over."""
LOCK_OWNER_TAG = "governance.lock.owner"
LOCK_URI_TAG = "governance.lock.ensemble_uri"
LOCK_HOLDER_TAG = "governance.lock.holder"
"""The holder as canonical JSON: lock, owner (pid@host), ensemble_uri, nonce, taken_ms."""
LOCK_PROOF_TAG = "governance.lock.proof"
"""The model-signing bundle of :data:`LOCK_HOLDER_TAG`'s bytes by the promotion's key."""
_HOLDER_FILE, _PROOF_FILE = "promotion-lock.json", "promotion-lock.sig"
_SHOWN = 200
"""Characters kept of an unverified tag value in a record or message."""


class ConcurrentPromotionError(GovernanceError):
    """Another promotion to the same alias ran at the same time; this one recorded
    nothing. Exit code 2."""


class LockMisconfiguredError(GovernanceError):
    """A promotion lock exists that the promoting identity may not read or remove (the
    server refuses with 403): not a promotion to wait for. Exit code 2."""


@dataclass(frozen=True)
class TakenOver:
    """A promotion lock a promotion took over (for its signed record).

    Attributes
    ----------
    lock : str
        The lock's registered model.
    holder, ensemble_uri : str
        The process (``pid@host``) and the version it names (as tagged: unverified
        unless the proof verified).
    reason : str
        Why it did not block.
    created : str or None
        The time the store recorded for it (ISO 8601, UTC); None when it recorded none.
    """

    lock: str
    holder: str
    ensemble_uri: str
    reason: str
    created: str | None

    def to_json(self) -> dict:
        return asdict(self)


def lock_name(name: str, alias: str) -> str:
    """The registered model that locks promotions of ``name`` to ``alias``."""
    return f"{name}.promotion-lock.{alias}"


def chain_lock_name(name: str) -> str:
    """The registered model that locks the record chain of ``name`` (``.`` is in no
    alias: no promotion lock has this name)."""
    return lock_name(name, ".chain")


def _iso(millis) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).isoformat(timespec="seconds")


def _holder_tags(lock: str, ensemble_uri: str, key: SigningKey, owner: str = "") -> dict:
    """The lock's tags: its holder (``owner``: this process) and the holder's proof
    signed with ``key``."""
    owner = owner or f"{os.getpid()}@{socket.gethostname()}"
    holder = {
        "lock": lock,
        "owner": owner,
        "ensemble_uri": ensemble_uri,
        "nonce": secrets.token_hex(16),
        "taken_ms": int(time.time() * 1000),
    }
    text = json.dumps(holder, sort_keys=True)
    with tempfile.TemporaryDirectory(prefix="govern-lock-") as tmp:
        path = Path(tmp, _HOLDER_FILE)
        path.write_bytes(text.encode())
        sign_path(path, key, Path(tmp, _PROOF_FILE))
        proof = Path(tmp, _PROOF_FILE).read_text()
    return {
        LOCK_OWNER_TAG: owner,
        LOCK_URI_TAG: ensemble_uri,
        LOCK_HOLDER_TAG: text,
        LOCK_PROOF_TAG: proof,
    }


def _take(client: MlflowClient, lock: str, tags: dict) -> bool:
    try:
        client.create_registered_model(
            lock, tags=tags, description="A promotion to this alias is running (govern promote)."
        )
    except MlflowException as error:
        # MLflow reads a name it could not insert again; released meanwhile, it is gone
        if error.error_code not in ("RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST"):
            raise
        return False
    return True


@contextmanager
def promotion_lock(
    client: MlflowClient,
    name: str,
    alias: str,
    ensemble_uri: str,
    key: SigningKey,
    trusted: TrustedKeys,
    lock: str | None = None,
    purposes: tuple = ("decide",),
):
    """Hold the lock of promotions of ``name`` to ``alias`` while the block runs.

    Parameters
    ----------
    key : SigningKey
        The promotion's key: signs the proof of this holder.
    trusted : TrustedKeys
        The policy's keys: a lock blocks only when its proof verifies with one trusted
        for one of ``purposes``.
    lock : str, optional
        The lock's registered model (default :func:`lock_name`).

    Yields
    ------
    TakenOver or None
        The lock taken over on the way in (not verifiably held), or None.

    Raises
    ------
    ConcurrentPromotionError
        Another promotion verifiably holds it (named with its ensemble version, process,
        start and how to clear the lock if that promotion is gone).
    """
    lock = lock or lock_name(name, alias)
    tags = _holder_tags(lock, ensemble_uri, key)
    nonce = json.loads(tags[LOCK_HOLDER_TAG])["nonce"]
    _HELD.add(nonce)
    try:
        taken_over = _acquire(client, lock, tags, alias, trusted, purposes)
    except BaseException:
        _HELD.discard(nonce)
        raise
    try:
        yield taken_over
    finally:
        try:
            client.delete_registered_model(lock)
        except BaseException:
            _HELD.discard(nonce)  # left behind
            raise


def _acquire(client, lock: str, tags: dict, alias: str, trusted, purposes) -> TakenOver | None:
    """Take ``lock`` with ``tags``, taking over one not verifiably held; the lock taken
    over (None: it was free)."""
    taken_over = None
    if not _take(client, lock, tags):
        try:
            held = client.get_registered_model(lock)
        except MlflowException as error:  # released meanwhile, or not ours to read
            _refuse_foreign(error, lock, "read")
            held = None
        if held is not None:
            reason, holder = _judge(held, lock, trusted, purposes)
            if reason is None:
                raise ConcurrentPromotionError(_held_message(held, holder, alias, lock))
            held = _same_lock(client, lock, held, alias)
        try:
            if held is not None:
                client.delete_registered_model(lock)
        except MlflowException as error:
            _refuse_foreign(error, lock, "remove")
            if error.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            held = None  # released meanwhile
        if held is not None:
            taken_over = TakenOver(
                lock=lock,
                holder=str(holder.get("owner") or "unknown")[:_SHOWN],
                ensemble_uri=str(holder.get("ensemble_uri") or "unknown")[:_SHOWN],
                reason=reason,
                created=_iso(held.creation_timestamp) if held.creation_timestamp else None,
            )
        if not _take(client, lock, tags):
            raise ConcurrentPromotionError(
                f"another promotion to @{alias} took the lock {lock} at the same time; "
                "nothing was recorded; run promote again when it is done"
            )
    return taken_over


def _same_lock(client: MlflowClient, lock: str, held, alias: str):
    """``held`` when the store still holds that very lock (read again, unmemoized), None
    when it was released meanwhile.

    A read racing a release and a new take may see the lock without its tags (SQLite
    reads a model and its tags apart), which looks like a lock nobody can prove: only a
    lock read the same twice is taken over.

    Raises
    ------
    ConcurrentPromotionError
        The lock changed hands between the reads.
    """
    again = next(iter(client.search_registered_models(name_filter(lock))), None)
    if again is None:
        return None
    if (again.creation_timestamp, again.tags) != (held.creation_timestamp, held.tags):
        raise ConcurrentPromotionError(
            f"another promotion to @{alias} is taking the lock {lock}; nothing was "
            "recorded; run promote again when it is done"
        )
    return held


def _refuse_foreign(error: MlflowException, lock: str, action: str) -> None:
    """A lock the server does not let this user read or remove (HTTP 403) is a
    misconfiguration, not a promotion to wait for: someone other than the promoting
    identity created it (MLflow gives MANAGE only to a registered model's creator), and it
    would block every promotion to its alias until an admin deletes it."""
    if error.error_code != "PERMISSION_DENIED":
        return
    user = os.environ.get("MLFLOW_TRACKING_USERNAME") or "this user"
    raise LockMisconfiguredError(
        f"the promotion lock {lock} exists and {user} cannot {action} it: it lacks MANAGE on "
        f"registered model {lock} (HTTP 403), so govern promote did not create it; nothing "
        f"was recorded. An MLflow admin must delete registered model {lock} (MLflow UI, or "
        f"MlflowClient().delete_registered_model('{lock}') with admin credentials); only the "
        "governance CI identity should promote (docs/deployment.md)"
    ) from None  # names the 403 itself: not the server's generic refusal line


def _held_message(held, holder: dict, alias: str, lock: str) -> str:
    expires = min(held.creation_timestamp, holder["taken_ms"]) + LOCK_TTL_SECONDS * 1000
    return (
        f"another promotion to @{alias} is running: {holder['ensemble_uri']} by process "
        f"{holder['owner']} since {_iso(held.creation_timestamp)} (lock: registered model "
        f"{lock}, its holder signed by key {holder['signer']!r}); nothing was recorded; run "
        "promote again when it is done. If that promotion is gone, "
        + clearing_advice(lock, expires)
    )


def clearing_advice(lock: str, expires_ms: int) -> str:
    """How to clear ``lock`` whose holder is gone."""
    return (
        f"wait until {_iso(expires_ms)} (a lock expires after {LOCK_TTL_SECONDS} s; the "
        "next promote then takes it over and records the take-over in its signed record), "
        f"or delete the registered model {lock} (MlflowClient().delete_registered_model("
        f"'{lock}'), or in the MLflow UI)"
    )


def _judge(held, lock: str, trusted: TrustedKeys, purposes) -> tuple[str | None, dict]:
    """Why ``held`` does not block (None: it is verifiably held), and its holder (the
    verified one with its ``signer``, else what its tags claim)."""
    now = time.time()
    claimed = {
        "owner": held.tags.get(LOCK_OWNER_TAG),
        "ensemble_uri": held.tags.get(LOCK_URI_TAG),
    }
    created = held.creation_timestamp
    if not created:
        return "the store recorded no creation time for it", claimed
    if created / 1000 > now + CLOCK_SKEW_SECONDS:
        return (
            f"its creation time {_iso(created)} is in the future (more than "
            f"{CLOCK_SKEW_SECONDS} s ahead): not a time the store recorded"
        ), claimed
    holder, problem = _verified_holder(held, lock, trusted, purposes)
    if holder is None:
        return problem, claimed
    taken = holder["taken_ms"]
    if taken / 1000 > now + CLOCK_SKEW_SECONDS:
        return (
            f"the time its holder signed, {_iso(taken)}, is in the future (more than "
            f"{CLOCK_SKEW_SECONDS} s ahead)"
        ), holder
    if now - min(created, taken) / 1000 > LOCK_TTL_SECONDS:
        return (
            f"it is older than {LOCK_TTL_SECONDS} s (taken {_iso(min(created, taken))}): "
            "its promotion was killed"
        ), holder
    pid, _, host = holder["owner"].partition("@")
    if host == socket.gethostname() and pid.isdigit():
        if int(pid) == os.getpid() and holder.get("nonce") not in _HELD:
            return "this process left it outside a promotion (its release failed)", holder
        if int(pid) != os.getpid() and not alive(int(pid)):
            return f"its process {pid} on this host is gone", holder
    return None, holder


def _verified_holder(held, lock: str, trusted: TrustedKeys, purposes) -> tuple[dict | None, str]:
    """The holder ``held``'s proof verifies (with ``signer``: the key's name), or None
    and why not."""
    text, proof = held.tags.get(LOCK_HOLDER_TAG), held.tags.get(LOCK_PROOF_TAG)
    if not text or not proof:
        return None, "it carries no proof of its holder (govern promote did not make it)"
    try:  # read for its signed time, trusted only once the proof verified these bytes
        holder = json.loads(text)
    except ValueError:
        holder = None
    taken = holder.get("taken_ms") if isinstance(holder, dict) else None
    signed_at = datetime.fromtimestamp(taken / 1000, timezone.utc) if type(taken) is int else None
    with tempfile.TemporaryDirectory(prefix="govern-lock-") as tmp:
        path, signature = Path(tmp, _HOLDER_FILE), Path(tmp, _PROOF_FILE)
        path.write_bytes(text.encode())
        signature.write_bytes(proof.encode())
        signer, problem = None, ""
        for purpose in purposes:
            try:
                signer = verify_path(
                    path, signature, trusted, purpose, "its proof of holder", signed_at
                )
                break
            except (SignatureError, OverflowError, ValueError, OSError) as error:
                problem = str(error)[: _SHOWN * 2]
        if signer is None:
            return None, problem
    if not (
        isinstance(holder, dict)
        and isinstance(holder.get("owner"), str)
        and isinstance(holder.get("ensemble_uri"), str)
        and type(holder.get("taken_ms")) is int
    ):
        return None, "its signed holder is not one govern promote writes"
    if holder.get("lock") != lock:
        return None, f"its proof of holder is for another lock ({str(holder.get('lock'))[:_SHOWN]})"
    return holder | {"signer": signer.name}, ""
