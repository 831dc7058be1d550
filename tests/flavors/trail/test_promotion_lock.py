"""Promotion locks nobody can plant: a lock blocks only while its holder's proof verifies
with a key the policy trusts for decide and its time is one the store recorded, not in
the future, within the TTL; any other lock is taken over, and the promotion's signed
record names the take-over. A genuine held lock still blocks, saying how to clear it."""

import json
import os
import socket
import sqlite3
import time
from types import SimpleNamespace

import pytest
from gate_store import explained
from mlflow import MlflowClient
from signing_keys import ci_key, key_pair, keys_toml

from miret_governance.flavors.trail import promotion_lock
from miret_governance.flavors.trail.decisions import read_record
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.flavors.trail.promotion_lock import (
    CLOCK_SKEW_SECONDS,
    LOCK_HOLDER_TAG,
    LOCK_OWNER_TAG,
    LOCK_URI_TAG,
    ConcurrentPromotionError,
    clearing_advice,
    lock_name,
)
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.signers import SigningKey

pytest_plugins = ["mlflow_store"]

LOCK = lock_name("credit-rf", "prod")
YEAR_2100_MS = 4102444800000


def trail_policy(tmp_path):
    path = tmp_path / "lock.toml"
    path.write_text('name = "lock"\n[gates]\nmin_fidelity = 0.9\n' + keys_toml())
    return load_policy(path)


def signed_tags(owner="4242@ci", lock=LOCK, key=None) -> dict:
    """The tags govern promote gives a lock, as another process (``owner``) would."""
    return promotion_lock._holder_tags(lock, "models:/x/9", key or ci_key(), owner)


def set_creation_time(tmp_path, millis) -> None:
    """What a store with the client's clock (or a tampered one) records as the lock's time."""
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        db.execute("UPDATE registered_models SET creation_time = ? WHERE name = ?", (millis, LOCK))
    db.close()


def promote_taking_over(client, tmp_path, uri) -> dict:
    """Promote through the planted lock; the take-over its verified record names."""
    policy = trail_policy(tmp_path)
    created = client.get_registered_model(LOCK).creation_timestamp
    outcome = promote_model_version(uri, "prod", policy)
    assert outcome.promoted and outcome.alias_version == "1"
    decision = read_record(client, outcome.gate.run_id, policy.keys)
    assert decision.valid, decision.problem
    taken = decision.record.lock_taken_over
    assert taken["lock"] == LOCK
    assert taken["created"] == (promotion_lock._iso(created) if created else None)
    assert not client.search_registered_models(f"name = '{LOCK}'")
    return taken


def _no_proof():
    holder = {"lock": LOCK, "owner": "4242@ci", "ensemble_uri": "models:/x/9"}
    return {
        LOCK_OWNER_TAG: "4242@ci",
        LOCK_URI_TAG: "models:/x/9",
        LOCK_HOLDER_TAG: json.dumps(holder | {"nonce": "0" * 32, "taken_ms": 1}),
    }


def _untrusted_key():
    return signed_tags(key=SigningKey.load(key_pair("mallory")[0]))


def _altered_holder():
    tags = signed_tags()
    tags[LOCK_HOLDER_TAG] = tags[LOCK_HOLDER_TAG].replace("models:/x/9", "models:/x/8")
    return tags


def _another_locks_proof():
    return signed_tags(lock=lock_name("credit-rf", "staging"))


@pytest.mark.parametrize(
    ("plant", "reason"),
    [
        (_no_proof, "it carries no proof of its holder (govern promote did not make it)"),
        (_untrusted_key, "which the policy does not trust for decide (trusted for decide: test-ci)"),
        (_altered_holder, "its proof of holder does not match its signature by key 'test-ci'"),
        (_another_locks_proof, "its proof of holder is for another lock (credit-rf.promotion-lock.staging)"),
    ],
    ids=["no-proof", "untrusted-key", "altered-holder", "another-locks-proof"],
)  # fmt: skip
def test_a_lock_without_valid_proof_is_taken_over_and_recorded(store, tmp_path, plant, reason):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    client.create_registered_model(LOCK, tags=plant())
    taken = promote_taking_over(client, tmp_path, uri)
    assert (taken["holder"], taken["ensemble_uri"]) == ("4242@ci", "models:/x/9")
    assert reason in taken["reason"], taken


@pytest.mark.parametrize(
    ("millis", "reason"),
    [
        (
            YEAR_2100_MS,
            (
                "its creation time 2100-01-01T00:00:00+00:00 is in the future (more than "
                "300 s ahead): not a time the store recorded"
            ),
        ),
        (0, "the store recorded no creation time for it"),
        (None, "the store recorded no creation time for it"),
    ],
    ids=["year-2100", "zero", "missing"],
)
def test_a_lock_whose_time_the_store_did_not_record_is_taken_over(store, tmp_path, millis, reason):
    """Even with a valid proof: a time in 2100 would block the alias for ever."""
    client = MlflowClient()
    uri = explained(store, tmp_path)
    client.create_registered_model(LOCK, tags=signed_tags())
    set_creation_time(tmp_path, millis)
    taken = promote_taking_over(client, tmp_path, uri)
    assert taken["reason"] == reason
    assert taken["holder"] == "4242@ci"


@pytest.mark.parametrize(
    ("seconds", "reason"),
    [
        (-700, "it is older than 600 s (taken "),
        (86400, "the time its holder signed, "),
    ],
    ids=["replayed-old-proof", "signed-in-the-future"],
)
def test_a_signed_time_out_of_range_is_taken_over(store, tmp_path, monkeypatch, seconds, reason):
    """A genuine proof copied onto a new lock (the store's time is fresh) blocks only
    until its signed time plus the TTL; a signed time ahead of the clock does not block."""
    client = MlflowClient()
    uri = explained(store, tmp_path)
    with monkeypatch.context() as patched:
        patched.setattr(promotion_lock, "time", SimpleNamespace(time=lambda: time.time() + seconds))
        tags = signed_tags()
    client.create_registered_model(LOCK, tags=tags)
    taken = promote_taking_over(client, tmp_path, uri)
    assert taken["reason"].startswith(reason), taken


def test_a_held_lock_blocks_and_says_how_to_clear_it(store, tmp_path):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    policy = trail_policy(tmp_path)
    key = ci_key()
    with promotion_lock.promotion_lock(
        client, "credit-rf", "prod", "models:/x/9", key, policy.keys
    ) as taken:
        assert taken is None
        held = client.get_registered_model(LOCK)
        with pytest.raises(ConcurrentPromotionError) as refused:
            promote_model_version(uri, "prod", policy)
    message = str(refused.value)
    assert message.startswith(
        f"another promotion to @prod is running: models:/x/9 by process "
        f"{os.getpid()}@{socket.gethostname()} since "
    )
    assert f"(lock: registered model {LOCK}, its holder signed by key 'test-ci')" in message
    assert "nothing was recorded; run promote again when it is done. If that promotion" in message
    assert (
        "(a lock expires after 600 s; the next promote then takes it over and records the "
        f"take-over in its signed record), or delete the registered model {LOCK} "
        f"(MlflowClient().delete_registered_model('{LOCK}'), or in the MLflow UI)"
    ) in message
    taken_ms = json.loads(held.tags[LOCK_HOLDER_TAG])["taken_ms"]
    expires = min(held.creation_timestamp, taken_ms) + 600_000
    assert message.endswith("If that promotion is gone, " + clearing_advice(LOCK, expires))
    assert client.get_experiment_by_name("governance-gates") is None
    assert not client.search_registered_models(f"name = '{LOCK}'")  # released

    # another host's genuine lock, dated a little ahead (within the clock skew): blocks;
    # deleted as the message says, the next promotion goes on (no take-over to record)
    client.create_registered_model(LOCK, tags=signed_tags())
    set_creation_time(tmp_path, int((time.time() + CLOCK_SKEW_SECONDS / 2) * 1000))
    with pytest.raises(ConcurrentPromotionError, match="by process 4242@ci since"):
        promote_model_version(uri, "prod", policy)
    MlflowClient().delete_registered_model(LOCK)
    outcome = promote_model_version(uri, "prod", policy)
    assert outcome.promoted
    record = read_record(client, outcome.gate.run_id, policy.keys).record
    assert record.lock_taken_over is None and b"lock_taken_over" not in record.to_json()
