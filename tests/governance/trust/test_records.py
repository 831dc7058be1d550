"""``governance.records.parse_record``: every kind's minimal record parses, and any bytes
an insider can put where a record belongs either parse into a record whose every field
passes its kind's schema or raise :class:`RecordError`, never another exception."""

import copy
import dataclasses
import hashlib
import json
import random

import pytest

from miret_governance.governance.trust.keyring import ANY_PURPOSE, PURPOSES
from miret_governance.governance.trust.records import (
    MAX_RECORD_BYTES,
    RECORDS,
    ChainLink,
    DataRef,
    GovernedRef,
    Record,
    RecordError,
    parse_record,
    record_digest,
)

PINNED = {"uri": "models:/credit-rf/1", "model_id": "m-0123"}
DECIDED = {"key_name": "test-ci", "key_fingerprint": "ab" * 32, "mlflow_user": "ci"}
TIME = "2024-05-01T12:00:00.000+00:00"
DECISION = {
    "surrogate": {"uri": "models:/credit-rf-surrogate/1", "model_id": "m-4567"},
    "evidence": {"digest": "d" * 64, "signer": {"name": "test-ci", "fingerprint": "ab" * 32}},
    "policy": {"label": "lenient v0123abcd", "digest": "p" * 64},
}
MINIMAL = {
    "gate": {"kind": "gate", "ensemble": PINNED, **DECISION, "result": "PASS"},
    "promotion": {
        "kind": "promotion",
        "ensemble": PINNED,
        **DECISION,
        "result": "FAIL",
        "alias": "prod",
        "decision": "refused",
        "reason": "a gate failed",
        "approvals": [],
    },
    "approval": {
        "kind": "approval",
        "ensemble": PINNED,
        **DECISION,
        "alias": "prod",
        "decision": "reject",
        "comment": "not yet",
    },
    "link": {"kind": "link", "ensemble": PINNED, "surrogate": DECISION["surrogate"]},
    "clearance": {
        "kind": "clearance",
        "ensemble": PINNED,
        "policy": DECISION["policy"],
        "reason": "a replayed copy",
        "cleared": [{"run_id": "r" * 32, "sha256": None, "problem": "not bound"}],
    },
    "verification": {
        "kind": "verification",
        "ensemble": PINNED,
        **DECISION,
        "action": "reproduce",
        "result": "different",
        "detail": "metrics differ: test_fidelity",
    },
}
for _record in MINIMAL.values():
    _record.update(decided_by=DECIDED, time=TIME)


def encode(record) -> bytes:
    return json.dumps(record, indent=1, sort_keys=True).encode()


def conforms(record: Record) -> bool:
    """The record is of its kind's class and reads back as the same bytes."""
    return type(record) is RECORDS[record.kind] and (
        parse_record(record.to_json()).to_json() == record.to_json()
    )


def field_names(kind: str) -> list[str]:
    return [f.name for f in dataclasses.fields(RECORDS[kind])]


def without_nulls(value):
    """``value`` without null object members: absent and null read the same."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def test_every_kind_has_a_minimal_record_and_a_purpose():
    assert set(MINIMAL) == set(RECORDS)
    purposes = (*PURPOSES, ANY_PURPOSE)  # a verification: any purpose the policy trusts
    assert all(RECORDS[kind].kind == kind and RECORDS[kind].purpose in purposes for kind in RECORDS)


@pytest.mark.parametrize("kind", sorted(MINIMAL))
def test_a_minimal_record_of_every_kind_parses(kind):
    raw = encode(MINIMAL[kind])
    record = parse_record(raw)
    assert record.to_json() == raw and conforms(record)
    assert record_digest(raw) == hashlib.sha256(raw).hexdigest()


@pytest.mark.parametrize(
    "optional",
    [
        ("gate", "drift", {"cross_fidelity": None}),
        ("promotion", "lock_taken_over", None),
        ("promotion", "governed", None),
    ],
)
def test_optional_fields_accept_a_value_or_none(optional):
    kind, name, value = optional
    assert getattr(parse_record(encode(MINIMAL[kind] | {name: value})), name) == value


def test_a_promotion_names_its_governed_version_typed():
    governed = {"uri": "models:/m.governed/1", "files_digest": "ab" * 32}
    record = parse_record(encode(MINIMAL["promotion"] | {"governed": governed}))
    assert record.governed == GovernedRef(**governed) and conforms(record)
    with pytest.raises(RecordError, match="malformed governed"):
        parse_record(encode(MINIMAL["promotion"] | {"governed": {"uri": 1}}))


def test_a_gate_names_the_rows_it_measured_on_typed_and_only_when_set():
    data = {"identity": "spark:scoring.applicants", "rows": 40, "digest": "ab" * 16}
    for kind in ("gate", "promotion"):
        bare = parse_record(encode(MINIMAL[kind]))
        assert bare.data is None and b'"data"' not in bare.to_json()  # the bytes as before
        record = parse_record(encode(MINIMAL[kind] | {"data": data}))
        assert record.data == DataRef(**data) and record.data.to_json() == data
        assert record.to_json() == encode(MINIMAL[kind] | {"data": data}) and conforms(record)
        assert dataclasses.replace(bare, data=DataRef(**data)).to_json() == record.to_json()
        for wrong in ({**data, "rows": "40"}, {**data, "more": 1}, {"identity": "x"}):
            with pytest.raises(RecordError, match="malformed data"):
                parse_record(encode(MINIMAL[kind] | {"data": wrong}))


def test_a_record_names_its_place_in_the_chain_typed():
    chain = {"model": "m", "count": 2, "previous": "ab" * 32}
    record = parse_record(encode(MINIMAL["link"] | {"chain": chain}))
    assert record.chain == ChainLink(**chain) and conforms(record)
    for count in (True, "2", None):
        with pytest.raises(RecordError, match="malformed chain"):
            parse_record(encode(MINIMAL["link"] | {"chain": chain | {"count": count}}))


@pytest.mark.parametrize("kind", sorted(MINIMAL))
def test_every_field_of_every_kind_is_required(kind):
    optional = {"drift", "data", "lock_taken_over", "governed", "chain", "chain_through"}
    for name in field_names(kind):
        record = {k: v for k, v in MINIMAL[kind].items() if k != name}
        if name in optional:
            assert parse_record(encode(record)).to_json() == encode(record)
            continue
        with pytest.raises(RecordError) as error:
            parse_record(encode(record))
        assert str(error.value) == f"its {kind} record has missing or malformed {name}"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[" * 100_000, "it is JSON nested too deeply to be a record"),
        (b"[1, 2]", "it is JSON of type list, not an object"),
        (b'"gate"', "it is JSON of type str, not an object"),
        (b"null", "it is JSON of type NoneType, not an object"),
        (
            b"{}",
            "its kind 'None' is none of gate, promotion, approval, link, clearance, verification",
        ),
        (b'{"kind": "gate", "ensemble": "x"}', None),
        (
            b'{"kind": 1}',
            "its kind '1' is none of gate, promotion, approval, link, clearance, verification",
        ),
        (b"\xff\xfe{}", None),
        (b"", None),
    ],
    ids=str.split("deep list string null empty-object junk-gate int-kind utf16 empty"),
)
def test_junk_is_a_record_error(raw, message):
    with pytest.raises(RecordError) as error:
        parse_record(raw)
    if message is not None:
        assert str(error.value) == message


@pytest.mark.parametrize("kind", [["gate"], {"gate": 1}, [], {}], ids=repr)
def test_a_kind_of_any_json_type_is_a_record_error(kind):
    """A kind that is a JSON array or object (unhashable in Python) is no kind."""
    with pytest.raises(RecordError, match="its kind .* is none of gate, promotion"):
        parse_record(encode(MINIMAL["gate"] | {"kind": kind}))


def test_size_limit_is_exact():
    raw = encode(MINIMAL["link"])
    at_limit = raw + b" " * (MAX_RECORD_BYTES - len(raw))
    assert len(at_limit) == MAX_RECORD_BYTES
    assert parse_record(at_limit).to_json() == raw
    with pytest.raises(RecordError, match=f"it is larger than {MAX_RECORD_BYTES} bytes"):
        parse_record(at_limit + b" ")


def test_time_needs_a_time_zone():
    for time in ("2024-05-01T12:00:00", "yesterday", "2024-13-01T00:00:00+00:00", 20240501):
        with pytest.raises(RecordError, match="malformed time"):
            parse_record(encode(MINIMAL["gate"] | {"time": time}))
    assert parse_record(encode(MINIMAL["gate"] | {"time": "2024-05-01T12:00:00Z"}))


# ---------------------------------------------------------------------- fuzz
ODD_VALUES = (
    0,
    -1,
    2**70,
    1.5,
    float("nan"),
    True,
    None,
    "",
    "x",
    "PASS ",
    [],
    ["gate"],
    [{}],
    {},
    {"uri": 1},
    {"uri": "u", "model_id": None},
)


def _paths(value, prefix=()):
    """Every key path into dicts and lists of ``value``."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, child in items:
        yield (*prefix, key)
        yield from _paths(child, (*prefix, key))


def _parent(record, path):
    for key in path[:-1]:
        record = record[key]
    return record


def _nest(rng, depth):
    value = rng.choice(ODD_VALUES)
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


def mutate(rng: random.Random) -> tuple[str, bytes]:
    """One mutation of a valid record, and its name."""
    kind = rng.choice(sorted(MINIMAL))
    record = copy.deepcopy(MINIMAL[kind])
    operation = rng.choice(
        ["drop", "retype", "kind", "extra", "wrap", "deep", "truncate", "bytes", "huge", "encode"]
    )
    if operation in ("drop", "retype"):
        path = rng.choice(list(_paths(record)))
        parent = _parent(record, path)
        if operation == "drop":
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))
    elif operation == "kind":
        record["kind"] = rng.choice([*ODD_VALUES, *MINIMAL, "GATE", "gate\x00"])
    elif operation == "extra":
        record[rng.choice(["surrogate", "evidence", "alias", "decision", "drift", "zz"])] = (
            copy.deepcopy(rng.choice(ODD_VALUES))
        )
    elif operation == "wrap":
        record = rng.choice([[record], record.get("ensemble"), list(record.items()), 7])
    elif operation == "deep":
        path = rng.choice(list(_paths(record)))
        _parent(record, path)[path[-1]] = _nest(rng, rng.choice([2, 50, 400]))
    raw = json.dumps(record, sort_keys=rng.random() < 0.5).encode()
    if operation == "deep" and rng.random() < 0.3:  # deeper than the parser may recurse
        n = rng.choice([1_000, 10_000, 200_000])
        raw = raw.replace(b'"kind"', b'"x": ' + b"[" * n + b"]" * n + b', "kind"', 1)
    elif operation == "truncate":
        raw = raw[: rng.randrange(len(raw))]
    elif operation == "bytes":
        data = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        raw = bytes(data)
    elif operation == "huge":
        raw = raw + b" " * (MAX_RECORD_BYTES + 1 - len(raw))
    elif operation == "encode":
        raw = json.dumps(record, ensure_ascii=False).encode(rng.choice(["utf-16", "latin-1"]))
    return operation, raw


def test_fuzzed_records_parse_conforming_or_raise_record_error():
    rng = random.Random(0)
    unexpected, outcomes = {}, {"parsed": 0, "refused": 0}
    for _ in range(2_000):
        operation, raw = mutate(rng)
        try:
            record = parse_record(raw)
        except RecordError:
            outcomes["refused"] += 1
            continue
        except Exception as error:  # noqa: BLE001 - what the test looks for
            unexpected.setdefault(f"{type(error).__name__}: {error}", (operation, raw[:200]))
            continue
        outcomes["parsed"] += 1
        assert len(raw) <= MAX_RECORD_BYTES
        assert conforms(record), (operation, raw[:200])
        written, read = (json.loads(r) for r in (record.to_json(), raw.decode("utf-8")))
        assert json.dumps(without_nulls(written), sort_keys=True) == json.dumps(
            without_nulls(read), sort_keys=True
        )
    assert not unexpected, unexpected
    assert outcomes["parsed"] > 50 and outcomes["refused"] > 1_000, outcomes
