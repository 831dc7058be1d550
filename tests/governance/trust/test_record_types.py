"""Typed records (``governance.trust.records``): a record read from the bytes the trail
signed writes exactly those bytes again, for every kind.

``records/*.json`` are ``decision/record.json`` files written by the product before its
records were typed (``json.dumps(record_dict, indent=1, sort_keys=True)``): gate with and
without drift, promotion with drift, approvals and a lock taken over, approval, link and
clearance, and a verification record (a kind added since, written the same way)."""

import json
from pathlib import Path

import pytest

from miret_governance.governance.trust.records import (
    RECORDS,
    ApprovalRecord,
    ClearanceRecord,
    GateRecord,
    LinkRecord,
    PromotionRecord,
    Record,
    RecordError,
    parse_record,
)

FIXTURES = sorted(Path(__file__).with_name("records").glob("*.json"))


def encode(record: dict) -> bytes:
    """How the trail wrote a record dict before records were typed."""
    return json.dumps(record, indent=1, sort_keys=True).encode()


def test_every_kind_has_a_fixture():
    assert {json.loads(path.read_bytes())["kind"] for path in FIXTURES} == set(RECORDS)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_a_stored_record_round_trips_byte_identically(path):
    raw = path.read_bytes()
    record = parse_record(raw)
    assert type(record) is RECORDS[record.kind]
    assert record.to_json() == raw
    assert type(record).from_json(raw) == record == Record.from_json(raw)
    assert record.schema_version == 1 and b"schema_version" not in raw


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_null_fields_round_trip(path):
    """An unsigned decision (no evidence signer, no key) and a cleared record that had no
    file write their nulls as they were written."""
    data = json.loads(path.read_bytes())
    data["decided_by"] |= {"key_name": None, "key_fingerprint": None}
    if "evidence" in data:
        data["evidence"]["signer"] = None
    for entry in data.get("cleared", []):
        entry["sha256"] = None
    assert parse_record(encode(data)).to_json() == encode(data)


@pytest.mark.parametrize("name", ["drift", "lock_taken_over"])
def test_an_optional_field_is_written_only_when_set(name):
    raw = Path(FIXTURES[0].parent, "promotion_lock_taken_over.json").read_bytes()
    record = PromotionRecord.from_json(raw)
    data = json.loads(raw)
    data.pop(name, None)
    cleared = parse_record(encode(data))
    assert getattr(cleared, name) is None and cleared.to_json() == encode(data)
    assert parse_record(encode(data | {name: None})).to_json() == encode(data)
    assert (name in json.loads(record.to_json())) == (getattr(record, name) is not None)


def test_typed_fields():
    by_stem = {path.stem: parse_record(path.read_bytes()) for path in FIXTURES}
    gate, link = by_stem["gate_drift"], by_stem["link"]
    assert isinstance(gate, GateRecord) and gate.drift["against"]["alias"] == "champion"
    assert gate.ensemble.uri == "models:/credit-rf/2" and gate.evidence.signer.name == "test-ci"
    assert gate.signed_at.tzinfo is not None and gate.purpose == "decide"
    assert isinstance(link, LinkRecord) and link.purpose == "explain"
    assert isinstance(by_stem["approval"], ApprovalRecord) and by_stem["approval"].purpose == (
        "approve"
    )
    cleared = by_stem["clearance"]
    assert isinstance(cleared, ClearanceRecord) and cleared.cleared[0].run_id
    approvals = by_stem["promotion_approvals"].approvals
    assert len(approvals) == 2 and {"run_id", "decision", "name"} <= set(approvals[0])


def test_a_record_of_another_kind_is_refused_by_a_kind_class():
    raw = Path(FIXTURES[0].parent, "link.json").read_bytes()
    with pytest.raises(RecordError, match="it is a link record, not a gate record"):
        GateRecord.from_json(raw)


@pytest.mark.parametrize(
    ("part", "value"),
    [("ensemble", {"uri": "u", "model_id": "m", "extra": 1}), ("evidence", {"digest": 1})],
)
def test_a_nested_part_has_exactly_its_fields(part, value):
    data = json.loads(Path(FIXTURES[0].parent, "gate.json").read_bytes())
    with pytest.raises(RecordError, match=f"its gate record has missing or malformed {part}$"):
        parse_record(encode(data | {part: value}))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_the_server_user_is_written_only_when_vouched(path):
    """``decided_by.server_user``: absent in every record written before it existed (they
    keep their bytes), written when a server vouched for the user, null read as absent."""
    data = json.loads(path.read_bytes())
    assert "server_user" not in data["decided_by"]
    vouched = data | {"decided_by": data["decided_by"] | {"server_user": "reviewer"}}
    record = parse_record(encode(vouched))
    assert record.decided_by.server_user == "reviewer"
    assert record.to_json() == encode(vouched)
    unvouched = data | {"decided_by": data["decided_by"] | {"server_user": None}}
    assert parse_record(encode(unvouched)).to_json() == path.read_bytes()
    wrong = data | {"decided_by": data["decided_by"] | {"server_user": 7}}
    with pytest.raises(RecordError, match="malformed decided_by"):
        parse_record(encode(wrong))
