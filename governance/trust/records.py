"""The signed records of the promotion trail: their kinds, schema and parsing.

A record is one JSON object, signed by the deciding job's key (the purpose of its
kind: :data:`KIND_PURPOSE`) and stored on an MLflow run (:mod:`flavors.decisions`).
Whoever can log an artifact can put any bytes where a record belongs, so every record
is parsed here before anything reads a field of it: :func:`parse_record` refuses bytes
over :data:`MAX_RECORD_BYTES`, text that is not JSON (deep nesting included), an
unknown kind, a field missing or of the wrong type and a field its kind does not have,
with a :class:`RecordError` that says which. A record that parses has exactly the fields
its kind has, each of the right type.

Kinds (fields besides ``kind``, ``decided_by`` {key_name, key_fingerprint,
mlflow_user} and ``time``, ISO 8601 with a time zone)::

    gate        ensemble, surrogate {uri, model_id}, evidence {digest, signer},
                policy {label, digest}, result PASS|FAIL, [drift]
    promotion   the same, alias, decision promoted|refused, reason, approvals,
                [lock_taken_over]
    approval    ensemble, surrogate, evidence, policy, alias, decision approve|reject,
                comment
    link        ensemble, surrogate
    clearance   ensemble, policy, cleared [{run_id, sha256|null, problem}], reason

The JSON parser is the standard library's: it builds plain values and runs nothing.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from miret_governance.governance.errors import GovernanceError

MAX_RECORD_BYTES = 1 << 20
"""A record larger than this (1 MiB) is refused unread."""
KIND_PURPOSE = {
    "gate": "decide",
    "promotion": "decide",
    "approval": "approve",
    "link": "explain",
    "clearance": "decide",
}
"""The signing purpose (:data:`governance.signing.PURPOSES`) of each kind of record."""


class RecordError(GovernanceError):
    """Bytes that are not a record of a known kind with fields of the right types.

    Exit code 2 (readers turn it into a record's problem; it reaches the CLI only from a
    record the product itself was about to write).
    """


def record_digest(raw: bytes) -> str:
    """The sha256 of a record's bytes, as its run's parameter binds it."""
    return hashlib.sha256(raw).hexdigest()


def _text(value) -> bool:
    return isinstance(value, str)


def _optional_text(value) -> bool:
    return value is None or isinstance(value, str)


def _fields(**checks):
    def check(value) -> bool:
        return isinstance(value, dict) and all(c(value.get(k)) for k, c in checks.items())

    return check


def _one_of(*allowed):
    return lambda value: value in allowed


def _optional(check):
    return lambda value: value is None or check(value)


def _time(value) -> bool:
    try:
        return isinstance(value, str) and datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def _list_of(check):
    return lambda value: isinstance(value, list) and all(check(v) for v in value)


_PINNED = _fields(uri=_text, model_id=_text)
_EVIDENCE = _fields(digest=_text, signer=_optional(_fields(name=_text, fingerprint=_text)))
_POLICY = _fields(label=_text, digest=_text)
_DECIDED = _fields(key_name=_optional_text, key_fingerprint=_optional_text, mlflow_user=_text)
_COMMON = {"decided_by": _DECIDED, "time": _time, "ensemble": _PINNED}
_DECISION = {"surrogate": _PINNED, "evidence": _EVIDENCE, "policy": _POLICY}
_RESULT = {"result": _one_of("PASS", "FAIL"), "drift": _optional(lambda v: isinstance(v, dict))}
SCHEMA = {
    "gate": _COMMON | _DECISION | _RESULT,
    "promotion": _COMMON
    | _DECISION
    | _RESULT
    | {
        "alias": _text,
        "decision": _one_of("promoted", "refused"),
        "reason": _text,
        "approvals": _list_of(lambda v: isinstance(v, dict)),
        "lock_taken_over": _optional(lambda v: isinstance(v, dict)),
    },
    "approval": _COMMON
    | _DECISION
    | {"alias": _text, "decision": _one_of("approve", "reject"), "comment": _text},
    "link": _COMMON | {"surrogate": _PINNED},
    "clearance": _COMMON
    | {
        "policy": _POLICY,
        "reason": _text,
        "cleared": _list_of(_fields(run_id=_text, sha256=_optional_text, problem=_text)),
    },
}
"""Each kind's fields and their checks (every field is required; an optional one
accepts None or absence)."""


def parse_record(raw: bytes) -> dict:
    """A record's bytes parsed and checked against its kind's :data:`SCHEMA`.

    Raises
    ------
    RecordError
        Too large, not UTF-8 JSON (or nested too deeply to parse), not an object of a
        known kind, or a field missing or of the wrong type (named).
    """
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError(f"it is larger than {MAX_RECORD_BYTES} bytes")
    try:
        record = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise RecordError("it is JSON nested too deeply to be a record") from None
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError
        raise RecordError(f"it is not JSON ({error})") from None
    if not isinstance(record, dict):
        raise RecordError(f"it is JSON of type {type(record).__name__}, not an object")
    kind = record.get("kind")
    if not isinstance(kind, str) or kind not in SCHEMA:
        raise RecordError(f"its kind {str(kind)[:40]!r} is none of {', '.join(SCHEMA)}")
    wrong = [name for name, check in SCHEMA[kind].items() if not check(record.get(name))]
    if wrong:
        raise RecordError(f"its {kind} record has missing or malformed {', '.join(wrong)}")
    unknown = sorted(set(record) - set(SCHEMA[kind]) - {"kind"})
    if unknown:
        raise RecordError(f"its {kind} record has fields no {kind} has: {', '.join(unknown)[:200]}")
    return record
