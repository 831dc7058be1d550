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
stale anyway). The signature is computed by MLflow's own signer
(``mlflow.webhooks.delivery._generate_hmac_signature``, private): the receiver then
checks exactly what the sender signs, and a change of MLflow's scheme fails the tests
here instead of refusing every delivery in production.
"""

from __future__ import annotations

import hmac
import json
import threading
from dataclasses import dataclass

from mlflow.webhooks.constants import (
    WEBHOOK_DELIVERY_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TIMESTAMP_HEADER,
)
from mlflow.webhooks.delivery import _generate_hmac_signature

from miret_governance.flavors.errors import GovernanceError

TOLERANCE_S = 300
"""How far a delivery's timestamp may be from this clock (seconds, either way)."""
EVENTS = ("model_version.created", "model_version_alias.created", "model_version_alias.deleted")
"""The registry events ``govern watch`` acts on (``--register`` subscribes to these)."""


class DeliveryRefused(GovernanceError):
    """A delivery that is not accepted (nothing is queued): answered with ``status``,
    never raised out of the receiver (were it, Exit code 2).

    Attributes
    ----------
    status : int
        The HTTP status answered: 401 unsigned or bad signature, 400 malformed or
        stale, 409 replayed.
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
    """Checks deliveries with the shared ``secret`` (module docstring); thread-safe."""

    def __init__(self, secret: str, tolerance: float = TOLERANCE_S):
        self._secret = secret
        self._tolerance = tolerance
        self._seen: dict[str, int] = {}  # delivery id -> its timestamp
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
            self._seen = {k: t for k, t in self._seen.items() if now - t <= self._tolerance}
            if delivery_id in self._seen:
                raise DeliveryRefused(409, f"delivery {delivery_id} was accepted before: replayed")
            self._seen[delivery_id] = int(stamp)
        return delivery


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
