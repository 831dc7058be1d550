"""The signed records of the promotion trail: one frozen class per kind, and parsing.

A record is one JSON object, signed by the deciding job's key (the ``purpose`` of its
class) and stored on an MLflow run (:mod:`flavors.trail.decisions`). Whoever can log an
artifact can put any bytes where a record belongs, so every record is parsed here
before anything reads a field of it: :func:`parse_record` refuses bytes over
:data:`MAX_RECORD_BYTES`, text that is not JSON (deep nesting included), an unknown
kind, a field missing or of the wrong type and a field its kind does not have, with a
:class:`RecordError` that says which. A record that parses is an instance of its kind's
class (:data:`RECORDS`), every field of the type its annotation names.

Kinds (fields besides ``kind``, ``decided_by`` {key_name, key_fingerprint,
mlflow_user, [server_user], [certificate {authority, serial, identity}]} and ``time``, ISO 8601 with a time zone)::

    gate        ensemble, surrogate {uri, model_id}, evidence {digest, signer},
                policy {label, digest, [signer]}, result PASS|FAIL, [drift],
                [data {identity, rows, digest}]
    promotion   the same, alias, decision promoted|refused, reason, approvals,
                [lock_taken_over], [governed {uri, files_digest}]
    approval    ensemble, surrogate, evidence, policy, alias, decision approve|reject,
                comment
    link        ensemble, surrogate
    clearance   ensemble, policy, cleared [{run_id, sha256|null, problem}], reason,
                [chain_through]
    verification  ensemble, surrogate, evidence, policy, action gate|show|audit|reproduce
                (gate: never written, its gate record counts), result
                verified|failed|identical|different, detail (not chained)

and every kind may name ``[chain]`` {model, count, previous}: its place in the record
chain of its registered model (:class:`ChainLink`).

**The annotations are the schema.** A field annotated ``str`` takes a string, a
``Literal`` one of its values, ``X | None`` null or an ``X`` (a nested optional value
that is absent reads as null), a dataclass an object with no field it does not have,
``tuple[X, ...]`` an array and ``Mapping`` any object (free-form parts, kept as parsed:
typing them would be speculative). A field
with a default (``drift``, ``data``, ``lock_taken_over``, ``server_user``, ``chain``,
``chain_through``) may be absent or null,
and is written only when it is set, so a record written before the field existed reads,
and writes, the bytes it was signed as. :meth:`Record.to_json` writes exactly the bytes the trail has
always signed (``json.dumps(..., indent=1, sort_keys=True)``).

**Versions.** Every kind is at :attr:`Record.schema_version` 1, which is not written:
the format of version 1 has no such field (this parser refuses one). A future version of
a kind writes its ``schema_version`` into the JSON; a record without one is version 1.

The JSON parser is the standard library's: it builds plain values and runs nothing.
"""

from __future__ import annotations

import hashlib
import json
import types
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from functools import cache
from typing import ClassVar, Literal, NewType, Union, get_args, get_origin, get_type_hints

from miret_governance.governance.errors import GovernanceError
from miret_governance.governance.trust.keyring import ANY_PURPOSE, Signer

MAX_RECORD_BYTES = 1 << 20
"""A record larger than this (1 MiB) is refused unread."""
IsoTime = NewType("IsoTime", str)
"""An ISO 8601 time with a time zone, kept as the text that was signed."""


class RecordError(GovernanceError):
    """Bytes that are not a record of a known kind with fields of the right types.

    Exit code 2 (readers turn it into a record's problem; it reaches the CLI only from a
    record the product itself was about to write).
    """


def record_digest(raw: bytes) -> str:
    """The sha256 of a record's bytes, as its run's parameter binds it."""
    return hashlib.sha256(raw).hexdigest()


# ---------------------------------------------------------------------- nested parts
@dataclass(frozen=True)
class PinnedModel:
    """A model version as records name it: its ``models:/`` URI and MLflow model id
    (``""`` when it has none)."""

    uri: str
    model_id: str


@dataclass(frozen=True)
class GovernedRef:
    """The governed registered model's version a promotion set the alias on (the
    policy's ``[governed]``): its ``models:/`` URI and the sha256 of its files, equal to
    the ensemble files' digest the evidence pins."""

    uri: str
    files_digest: str


@dataclass(frozen=True)
class DataRef:
    """The rows a gate measured on (``--data``): their identity (``spark:<table>``,
    ``<path> (spark)``, or the file's path for pandas), row count and row-set digest
    (``governance.data.tables.row_set_digest``: the same rows give the same digest in any
    order, on pandas or Spark)."""

    identity: str
    rows: int
    digest: str

    def to_json(self) -> dict:
        """The reference as the records and ``--json`` write it."""
        return {"identity": self.identity, "rows": self.rows, "digest": self.digest}


@dataclass(frozen=True)
class EvidenceRef:
    """The evidence a decision was made on: the manifest's sha256 and the key that
    signed it (None: unsigned)."""

    digest: str
    signer: Signer | None


@dataclass(frozen=True)
class PolicyRef:
    """The policy a decision was made under: its label and digest, and who signed it
    (None: the policy was not verified against a signature; written only when set)."""

    label: str
    digest: str
    signer: Signer | None = None


@dataclass(frozen=True)
class CertificateRef:
    """The certificate a decision was signed with: the policy's authority that issued
    it, its serial (``0x`` hex) and the identity the policy trusted."""

    authority: str
    serial: str
    identity: str


@dataclass(frozen=True)
class DecidedBy:
    """Who decided: the key's policy name (None when the policy does not name it; for a
    certificate its identity), its fingerprint (None without a key; for a certificate the
    certified key's), the MLflow user, and ``server_user``: the user the tracking server
    authenticated when the record was written (None on a store without users, where
    ``mlflow_user`` is only what the client said; on one with users both are the
    server's name); ``certificate`` when signed with one."""

    key_name: str | None
    key_fingerprint: str | None
    mlflow_user: str
    server_user: str | None = None
    certificate: CertificateRef | None = None


@dataclass(frozen=True)
class ChainLink:
    """A record's place in the chain of its registered model's signed records
    (``flavors.trail.decisions``): the model's name, the record's position (1 = first)
    and the sha256 of the previous record's bytes, as its run's parameter
    ``governance.record.sha256`` binds it (None for the first). A record without one was
    written before its model's chain began, or is an unsigned what-if."""

    model: str
    count: int
    previous: str | None


@dataclass(frozen=True)
class ClearedEntry:
    """A record a clearance set aside: its run, the sha256 of its bytes and signature
    as they were (None: no record file) and its problem."""

    run_id: str
    sha256: str | None
    problem: str


# ---------------------------------------------------------------------- kinds
@dataclass(frozen=True, kw_only=True)
class Record:
    """The fields of every kind; a record is an instance of one of its subclasses.

    Attributes
    ----------
    kind : str
        The JSON ``kind`` (class attribute).
    purpose : str
        The signing purpose of the kind (:data:`governance.trust.keyring.PURPOSES`).
    schema_version : int
        The version of the kind's format (1: not written, module docstring).
    decided_by : DecidedBy
    time : str
        When it was signed, ISO 8601 with a time zone (:attr:`signed_at`).
    ensemble : PinnedModel
        The ensemble version it is about.
    chain : ChainLink or None
        Its place in its model's record chain (written only when set).
    chained : bool
        Whether a signed record of the kind takes its place in the chain (class
        attribute; a verification does not: a reader's record never waits for the
        chain lock, and no decision rests on it).
    """

    kind: ClassVar[str]
    purpose: ClassVar[str]
    schema_version: ClassVar[int] = 1
    chained: ClassVar[bool] = True
    decided_by: DecidedBy
    time: IsoTime
    ensemble: PinnedModel
    chain: ChainLink | None = None

    @property
    def signed_at(self) -> datetime:
        """:attr:`time` as a datetime."""
        return datetime.fromisoformat(self.time)

    def to_json(self) -> bytes:
        """The record's bytes, as they are signed: every field, nested null values
        included, and a field with a default (nested ones too) only when it is set."""
        return json.dumps({"kind": self.kind} | _plain(self), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Record:
        """``raw`` parsed (:func:`parse_record`) as a record of this class.

        Raises
        ------
        RecordError
            As :func:`parse_record`, or a record of another kind.
        """
        record = parse_record(raw)
        if not isinstance(record, cls):
            raise RecordError(f"it is a {record.kind} record, not a {cls.kind} record")
        return record


@dataclass(frozen=True, kw_only=True)
class SurrogateRecord(Record):
    """A record naming the surrogate version that explains the ensemble (link and
    every decision on evidence)."""

    surrogate: PinnedModel


@dataclass(frozen=True, kw_only=True)
class DecisionRecord(SurrogateRecord):
    """A decision on evidence (gate, promotion, approval): also the evidence and the
    policy."""

    evidence: EvidenceRef
    policy: PolicyRef


@dataclass(frozen=True, kw_only=True)
class GatedRecord(DecisionRecord):
    """A gate evaluation (gate, promotion): its result, with drift gates the drift
    figures (``flavors.gates.diff.drift_results``; free-form, a Mapping) and, with
    ``--data``, the rows measured on (both written only when set)."""

    result: Literal["PASS", "FAIL"]
    drift: Mapping | None = None
    data: DataRef | None = None


@dataclass(frozen=True, kw_only=True)
class GateRecord(GatedRecord):
    """``govern gate``: the gates evaluated on a version's evidence."""

    kind: ClassVar[str] = "gate"
    purpose: ClassVar[str] = "decide"


@dataclass(frozen=True, kw_only=True)
class PromotionRecord(GatedRecord):
    """``govern promote``: the alias, promoted or refused and why; ``approvals`` the
    counted approvals ({run_id, decision, name, fingerprint}) and ``lock_taken_over`` the
    lock taken over (``flavors.trail.promotion_lock.TakenOver``), both free-form
    Mappings as written; ``governed`` the governed version the alias was also set on
    (``flavors.trail.governed``), when the policy governs the model."""

    kind: ClassVar[str] = "promotion"
    purpose: ClassVar[str] = "decide"
    alias: str
    decision: Literal["promoted", "refused"]
    reason: str
    approvals: tuple[Mapping, ...]
    lock_taken_over: Mapping | None = None
    governed: GovernedRef | None = None


@dataclass(frozen=True, kw_only=True)
class ApprovalRecord(DecisionRecord):
    """``govern approve``: a reviewer's approval or rejection of an alias."""

    kind: ClassVar[str] = "approval"
    purpose: ClassVar[str] = "approve"
    alias: str
    decision: Literal["approve", "reject"]
    comment: str


@dataclass(frozen=True, kw_only=True)
class LinkRecord(SurrogateRecord):
    """Explain linked ``surrogate`` to the ensemble version."""

    kind: ClassVar[str] = "link"
    purpose: ClassVar[str] = "explain"


@dataclass(frozen=True, kw_only=True)
class ClearanceRecord(Record):
    """``govern clear``: records that blocked, set aside for a reason; ``chain_through``
    the count of its model's record chain up to which its breaks (gaps, forks) are set
    aside (``govern clear --chain``; written only when set)."""

    kind: ClassVar[str] = "clearance"
    purpose: ClassVar[str] = "decide"
    policy: PolicyRef
    reason: str
    cleared: tuple[ClearedEntry, ...]
    chain_through: int | None = None


@dataclass(frozen=True, kw_only=True)
class VerificationRecord(DecisionRecord):
    """``govern show``, ``audit`` or ``reproduce`` verified a version's evidence
    (``flavors.trail.verification``): the ``action``, its ``result`` and one line of
    ``detail``. Signed by whoever ran it with a key the policy trusts for any purpose
    (:data:`governance.trust.keyring.ANY_PURPOSE`), or an untrusted key; informative
    only: never chained, never read by a decision."""

    kind: ClassVar[str] = "verification"
    purpose: ClassVar[str] = ANY_PURPOSE
    chained: ClassVar[bool] = False
    action: Literal["gate", "show", "audit", "reproduce"]
    result: Literal["verified", "failed", "identical", "different"]
    detail: str


ALIAS_RECORDS = (PromotionRecord, ApprovalRecord)
"""The kinds about an alias: their ``alias`` and ``decision``."""
RECORDS = {
    cls.kind: cls
    for cls in (
        GateRecord,
        PromotionRecord,
        ApprovalRecord,
        LinkRecord,
        ClearanceRecord,
        VerificationRecord,
    )
}
"""Each kind's class: the one table :func:`parse_record` dispatches on."""


# ---------------------------------------------------------------------- parsing
def parse_record(raw: bytes) -> Record:
    """A record's bytes parsed and checked against its kind's class (:data:`RECORDS`).

    Raises
    ------
    RecordError
        Too large, not UTF-8 JSON (or nested too deeply to parse), not an object of a
        known kind, or a field missing or of the wrong type (named), or one its kind
        does not have.
    """
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError(f"it is larger than {MAX_RECORD_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise RecordError("it is JSON nested too deeply to be a record") from None
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError
        raise RecordError(f"it is not JSON ({error})") from None
    if not isinstance(data, dict):
        raise RecordError(f"it is JSON of type {type(data).__name__}, not an object")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in RECORDS:
        raise RecordError(f"its kind {str(kind)[:40]!r} is none of {', '.join(RECORDS)}")
    cls = RECORDS[kind]
    values = {name: _typed(hint, data.get(name)) for name, hint in _hints(cls).items()}
    wrong = [name for name, value in values.items() if value is _WRONG]
    if wrong:
        raise RecordError(f"its {kind} record has missing or malformed {', '.join(wrong)}")
    unknown = sorted(set(data) - set(values) - {"kind"})
    if unknown:
        raise RecordError(f"its {kind} record has fields no {kind} has: {', '.join(unknown)[:200]}")
    return cls(**values)


_WRONG = object()
"""What :func:`_typed` returns for a value of the wrong type."""


@cache
def _hints(cls) -> dict:
    """The annotation of each field of dataclass ``cls``, in field order."""
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


def _typed(hint, value):
    """``value`` (parsed JSON) as the type ``hint`` names (module docstring), or
    :data:`_WRONG`."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):  # X | None
        (inner,) = (a for a in get_args(hint) if a is not type(None))
        return None if value is None else _typed(inner, value)
    if origin is Literal:
        return value if isinstance(value, str) and value in get_args(hint) else _WRONG
    if origin is tuple:
        if not isinstance(value, list):
            return _WRONG
        items = tuple(_typed(get_args(hint)[0], v) for v in value)
        return _WRONG if any(i is _WRONG for i in items) else items
    if hint is Mapping:
        return value if isinstance(value, dict) else _WRONG
    if hint is IsoTime:
        return value if _is_time(value) else _WRONG
    if is_dataclass(hint):
        if not isinstance(value, dict) or set(value) - set(_hints(hint)):
            return _WRONG
        parts = {name: _typed(h, value.get(name)) for name, h in _hints(hint).items()}
        return _WRONG if any(p is _WRONG for p in parts.values()) else hint(**parts)
    if hint is int and isinstance(value, bool):  # JSON true is no count
        return _WRONG
    return value if isinstance(value, hint) else _WRONG


def _is_time(value) -> bool:
    try:
        return isinstance(value, str) and datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def _plain(value):
    """``value`` with every nested dataclass as a dict (for ``json.dumps``), without its
    fields whose default is None while they are None (written only when set)."""
    if is_dataclass(value):
        return {
            f.name: _plain(getattr(value, f.name))
            for f in fields(value)
            if f.default is not None or getattr(value, f.name) is not None
        }
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value
