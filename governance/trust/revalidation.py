"""Periodic re-validation: when the holder of an alias is due (SR 11-7's periodic review).

A policy's ``[revalidate_every_days]`` gives, per alias, how many days may pass since
its holder was last re-validated: the latest signed record that checked it again, a gate
or promotion record that passed (``result`` PASS) or a reproduction found ``identical``
(a verification record of action ``reproduce``). Older than that, or never, the holder
is due. The clock is the caller's (``now``): nothing here reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from miret_governance.governance.trust.records import GatedRecord, VerificationRecord

DAY_SECONDS = 24 * 3600


@dataclass(frozen=True)
class Revalidation:
    """How one alias holder stands against its policy's re-validation period.

    Attributes
    ----------
    uri : str
        The holder (``models:/<name>/<version>``).
    alias : str
    every_days : int
        The policy's period for the alias.
    last : datetime or None
        Its latest re-validation (signed time); None: never.
    now : datetime
    policy : str
        The policy's name, as the finding words it.
    """

    uri: str
    alias: str
    every_days: int
    last: datetime | None
    now: datetime
    policy: str

    @property
    def age_days(self) -> int | None:
        """Whole days since :attr:`last` (None: never re-validated)."""
        if self.last is None:
            return None
        return int((self.now - self.last).total_seconds() // DAY_SECONDS)

    @property
    def due(self) -> bool:
        """Never re-validated, or longer ago than :attr:`every_days` allows."""
        return self.last is None or (self.now - self.last).total_seconds() > (
            self.every_days * DAY_SECONDS
        )

    def message(self) -> str:
        """The finding, naming what to run (only meaningful when :attr:`due`); the
        finding itself names the version and alias."""
        if self.last is None:
            when = "never re-validated (no signed gate or identical reproduction)"
        else:
            when = f"last re-validated {self.last.date().isoformat()} ({self.age_days} days"
            when += f"; policy {self.policy} allows {self.every_days})"
        return (
            f"{when}: run govern reproduce --model-uri {self.uri}, or govern "
            f"gate --model-uri {self.uri} --data <current rows>, with the policy's signing key"
        )


def last_revalidation(records, digest: str | None):
    """The latest (by signed time) of ``records`` (valid, verified records about one
    version) that re-validated the evidence ``digest``: a gate or promotion record that
    passed, or an identical reproduction; None when none did (or ``digest`` is None: no
    verified evidence)."""
    revalidating = [
        record
        for record in records
        if getattr(record, "evidence", None) is not None
        and record.evidence.digest == digest
        and (
            (isinstance(record, GatedRecord) and record.result == "PASS")
            or (
                isinstance(record, VerificationRecord)
                and (record.action, record.result) == ("reproduce", "identical")
            )
        )
    ]
    return max(revalidating, key=lambda record: record.signed_at, default=None)


def revalidation(policy, uri: str, alias: str, last, now: datetime) -> Revalidation | None:
    """``alias``'s holder ``uri`` against ``policy``'s period (None: the policy sets none
    for the alias); ``last`` its latest re-validation or None, ``now`` the clock."""
    every = policy.revalidate_every_days.get(alias)
    if every is None:
        return None
    return Revalidation(uri, alias, every, last, now, policy.name)
