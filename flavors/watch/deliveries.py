"""One registry webhook delivery, checked before anything is queued.

MLflow 3.17's tracking server (a SQL-backed registry; its file store sends nothing)
posts each registry event to every active webhook subscribed to it
(:mod:`mlflow.webhooks.delivery`): a JSON body ``{"entity", "action", "timestamp",
"data"}``, with the headers ``X-MLflow-Delivery-Id`` (a fresh UUID per event; MLflow's
own retries of one event resend it), ``X-MLflow-Timestamp`` (Unix seconds) and, when
the webhook has a secret, ``X-MLflow-Signature``: ``v1,`` and the base64 HMAC-SHA256
of ``<delivery id>.<timestamp>.<body>`` with that secret.

A delivery is accepted only when it is signed with the shared secret, its timestamp is
within :data:`TOLERANCE_S` of this clock and its delivery id was not accepted before
(ids are remembered for as long as their timestamp is fresh: older ones are refused as
stale anyway). Given a state folder, the ids accepted are kept in its
:data:`STATE_FILE` (JSON: delivery id -> timestamp, rewritten atomically and pruned of
stale ids at each acceptance), so a delivery replayed after a restart of the receiver is
refused too; one receiver per folder. The signature is computed by MLflow's own signer
(``mlflow.webhooks.delivery._generate_hmac_signature``, private): the receiver then
checks exactly what the sender signs, and a change of MLflow's scheme fails the tests
here instead of refusing every delivery in production.
"""

from __future__ import annotations

import hmac
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from mlflow.webhooks.constants import (
    WEBHOOK_DELIVERY_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TIMESTAMP_HEADER,
)
from mlflow.webhooks.delivery import _generate_hmac_signature

from miret_governance.flavors.errors import GovernanceError
from miret_governance.governance.errors import InvalidInputError

TOLERANCE_S = 300
"""How far a delivery's timestamp may be from this clock (seconds, either way)."""
EVENTS = ("model_version.created", "model_version_alias.created", "model_version_alias.deleted")
"""The registry events ``govern watch`` acts on (``--register`` subscribes to these)."""
STATE_FILE = "accepted_deliveries.json"
"""The file of a state folder keeping the accepted delivery ids (module docstring)."""


class DeliveryRefused(GovernanceError):
    """A delivery that is not accepted (nothing is queued): answered with ``status``,
    never raised out of the receiver (were it, Exit code 2).

    Attributes
    ----------
    status : int
        The HTTP status answered: 401 unsigned or bad signature, 400 malformed or
        stale, 409 replayed, 503 its id could not be kept in the state file (the
        sender retries).
    """

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Delivery:
    """An accepted delivery.

    Attributes
    ----------
    delivery_id : str
    event : str
        ``<entity>.<action>``, e.g. ``model_version_alias.created``.
    name : str
        The registered model.
    version : str or None
        The version created, or the alias's holder (None: an alias deleted).
    alias : str or None
    """

    delivery_id: str
    event: str
    name: str
    version: str | None = None
    alias: str | None = None


class Verifier:
    """Checks deliveries with the shared ``secret`` (module docstring); thread-safe.

    Parameters
    ----------
    secret : str
    tolerance : float
    state : Path or None
        The state folder (created if missing) whose :data:`STATE_FILE` keeps the ids
        accepted across restarts; None: kept in memory only.

    Raises
    ------
    InvalidInputError
        The state folder cannot be created, or its file is not a state file.
    """

    def __init__(self, secret: str, tolerance: float = TOLERANCE_S, state: Path | None = None):
        self._secret = secret
        self._tolerance = tolerance
        self._state = state / STATE_FILE if state is not None else None
        self._seen: dict[str, int] = _load(self._state) if self._state else {}  # id -> stamp
        self._lock = threading.Lock()

    def check(self, headers, body: bytes, now: float) -> Delivery:
        """The delivery ``body`` with ``headers`` (a case-insensitive mapping), received
        at ``now`` (Unix seconds).

        Raises
        ------
        DeliveryRefused
            Unsigned, bad signature, stale, replayed or malformed.
        """
        delivery_id = headers.get(WEBHOOK_DELIVERY_ID_HEADER, "")
        stamp = headers.get(WEBHOOK_TIMESTAMP_HEADER, "")
        signature = headers.get(WEBHOOK_SIGNATURE_HEADER)
        if not signature:
            raise DeliveryRefused(
                401, f"unsigned delivery {delivery_id!r}: give the webhook the shared secret"
            )
        try:
            text = body.decode("utf-8")
            expected = _generate_hmac_signature(self._secret, delivery_id, stamp, text)
        except UnicodeDecodeError:
            raise DeliveryRefused(400, "a delivery whose body is not UTF-8") from None
        if not delivery_id or not hmac.compare_digest(signature.encode(), expected.encode()):
            raise DeliveryRefused(
                401,
                f"delivery {delivery_id!r} has a bad signature: the webhook's secret is not "
                "the one this receiver was given",
            )
        if not stamp.isdigit() or abs(now - int(stamp)) > self._tolerance:
            raise DeliveryRefused(
                400,
                f"delivery {delivery_id} is stale (timestamp {stamp!r}, more than "
                f"{self._tolerance:.0f} s from this clock)",
            )
        delivery = _parse(delivery_id, text)
        with self._lock:
            seen = {k: t for k, t in self._seen.items() if now - t <= self._tolerance}
            if delivery_id in seen:
                raise DeliveryRefused(409, f"delivery {delivery_id} was accepted before: replayed")
            seen[delivery_id] = int(stamp)
            if self._state is not None:
                try:
                    _save(self._state, seen)
                except OSError as error:
                    raise DeliveryRefused(
                        503,
                        f"delivery {delivery_id} not accepted: its id could not be kept in "
                        f"{self._state} ({error}); nothing was done, the sender may retry",
                    ) from None
            self._seen = seen
        return delivery


def _load(path: Path) -> dict[str, int]:
    """The ids and timestamps kept in the state file ``path`` (none: empty), its folder
    created if missing."""
    fix = (
        "give --state-dir a folder only this receiver writes, or delete the file (a "
        f"delivery accepted in the last {TOLERANCE_S} s could then be replayed once)"
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        seen = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise InvalidInputError(f"the watch state {path} cannot be read ({error}): {fix}") from None
    if not isinstance(seen, dict) or not all(
        isinstance(k, str) and type(t) is int for k, t in seen.items()
    ):
        raise InvalidInputError(
            f"the watch state {path} is not a delivery id -> timestamp table: {fix}"
        )
    return seen


def _save(path: Path, seen: dict[str, int]) -> None:
    """Write ``seen`` to ``path`` atomically: a temporary file in its folder, flushed to
    disk, then renamed over it (a crash leaves the old file or the new one)."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(seen, file, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _parse(delivery_id: str, text: str) -> Delivery:
    """The signed body as a :class:`Delivery`."""
    try:
        document = json.loads(text)
        event = f"{document['entity']}.{document['action']}"
        data = document["data"]
        name = data["name"]
    except (ValueError, KeyError, TypeError):
        raise DeliveryRefused(
            400, f"delivery {delivery_id} is not an MLflow webhook payload"
        ) from None
    version = data.get("version")
    return Delivery(
        delivery_id,
        event,
        str(name),
        str(version) if version is not None else None,
        data.get("alias"),
    )
