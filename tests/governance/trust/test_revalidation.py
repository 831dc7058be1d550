"""The policy's [revalidate_every_days] and the due-date rule (no MLflow)."""

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from miret_governance.governance.trust.policy import PolicyError, parse_policy
from miret_governance.governance.trust.records import parse_record
from miret_governance.governance.trust.revalidation import last_revalidation, revalidation

pytestmark = pytest.mark.no_store
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
URI = "models:/credit-rf/3"


def _policy(**tables):
    return parse_policy({"name": "strict", "gates": {}, **tables}, source="p.toml")


def test_the_digest_covers_the_periods_only_when_set():
    plain = _policy()
    assert plain.revalidate_every_days == {}
    assert plain.digest == parse_policy({"gates": {}}, source="other").digest
    periodic = _policy(revalidate_every_days={"champion": 180})
    assert periodic.revalidate_every_days == {"champion": 180}
    assert (
        len({plain.digest, periodic.digest, _policy(revalidate_every_days={"champion": 90}).digest})
        == 3
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (180, "[revalidate_every_days] must map aliases to days, e.g. champion = 180"),
        ({"champion": 0}, "revalidate_every_days champion = 0; give a whole number of days"),
        ({"champion": 1.5}, "revalidate_every_days champion = 1.5; give a whole number"),
        ({"champion": True}, "revalidate_every_days champion = True; give a whole number"),
        ({"latest": 30}, "revalidate_every_days names 'latest', not a valid alias"),
    ],
)
def test_bad_periods_are_refused_in_one_line(table, message):
    with pytest.raises(PolicyError) as error:
        _policy(revalidate_every_days=table)
    assert str(error.value).startswith(f"p.toml: {message}")


def test_due_only_past_the_period_and_when_never_revalidated():
    policy = _policy(revalidate_every_days={"champion": 180})
    assert revalidation(policy, URI, "prod", NOW, NOW) is None  # no period for @prod
    fresh = revalidation(policy, URI, "champion", NOW - timedelta(days=180), NOW)
    assert (fresh.due, fresh.age_days) == (False, 180)
    old = revalidation(policy, URI, "champion", datetime(2026, 3, 1, tzinfo=timezone.utc), NOW)
    assert (old.due, old.age_days) == (True, 273)
    assert old.message() == (
        "last re-validated 2026-03-01 (273 days; policy strict allows 180): run "
        f"govern reproduce --model-uri {URI}, or govern gate --model-uri {URI} --data "
        "<current rows>, with the policy's signing key"
    )
    never = revalidation(policy, URI, "champion", None, NOW)
    assert never.due and never.age_days is None
    assert never.message().startswith("never re-validated (no signed gate or")


def test_only_a_passed_gate_or_an_identical_reproduction_of_the_evidence_counts():
    stored = Path(__file__).parent / "records"
    gate, shown = (
        parse_record((stored / f"{k}.json").read_bytes()) for k in ("gate", "verification")
    )
    digest = gate.evidence.digest
    assert last_revalidation([gate, shown], digest) is None  # a FAIL, and a show
    passed = replace(gate, result="PASS", time="2026-11-29T00:00:00.000+00:00")
    reproduced = replace(shown, action="reproduce", result="identical")
    assert last_revalidation([gate, reproduced], digest) is reproduced
    assert last_revalidation([reproduced, passed], digest) is passed  # the later one
    assert last_revalidation([passed], "0" * 64) is None  # other evidence
    assert last_revalidation([passed], None) is None  # no verified evidence
