"""The delivery checks of ``govern watch`` (flavors.watch.deliveries) and its watch file
(flavors.watch.config): deliveries signed as MLflow 3.17's server signs them, and each
refusal's status and words."""

import json

import pytest
from mlflow.webhooks.delivery import _generate_hmac_signature

from miret_governance.flavors.watch.config import load_watch_file
from miret_governance.flavors.watch.deliveries import (
    STATE_FILE,
    Delivery,
    DeliveryRefused,
    Verifier,
)
from miret_governance.governance.errors import InvalidInputError

SECRET = "0123456789abcdef-shared"
NOW = 1_800_000_000
BODY = json.dumps(
    {
        "entity": "model_version_alias",
        "action": "created",
        "timestamp": "2027-01-15T08:00:00+00:00",
        "data": {"name": "credit-rf", "alias": "champion", "version": "3"},
    }
)


def _headers(delivery_id="d-1", stamp=NOW, body=BODY, secret=SECRET) -> dict:
    return {
        "X-MLflow-Delivery-Id": delivery_id,
        "X-MLflow-Timestamp": str(stamp),
        "X-MLflow-Signature": _generate_hmac_signature(secret, delivery_id, str(stamp), body),
    }


def test_a_signed_fresh_delivery_is_accepted_once():
    verifier = Verifier(SECRET)
    assert verifier.check(_headers(), BODY.encode(), NOW + 10) == Delivery(
        "d-1", "model_version_alias.created", "credit-rf", "3", "champion"
    )
    with pytest.raises(DeliveryRefused, match="^delivery d-1 was accepted before: replayed$") as e:
        verifier.check(_headers(), BODY.encode(), NOW + 20)
    assert e.value.status == 409


def test_accepted_ids_outlive_a_restart_in_the_state_folder(tmp_path):
    state = tmp_path / "state"
    Verifier(SECRET, state=state).check(_headers(), BODY.encode(), NOW)
    restarted = Verifier(SECRET, state=state)
    with pytest.raises(DeliveryRefused, match="^delivery d-1 was accepted before: replayed$") as e:
        restarted.check(_headers(), BODY.encode(), NOW + 299)
    assert e.value.status == 409
    # an acceptance prunes the ids whose timestamp is no longer fresh (refused as stale)
    restarted.check(_headers("d-2", NOW + 301), BODY.encode(), NOW + 301)
    assert json.loads((state / STATE_FILE).read_text()) == {"d-2": NOW + 301}
    assert sorted(p.name for p in state.iterdir()) == [STATE_FILE]  # no temporary left


def test_a_state_file_that_is_not_one_is_refused(tmp_path):
    (tmp_path / STATE_FILE).write_text('{"d-1": "yesterday"}')
    with pytest.raises(InvalidInputError) as refused:
        Verifier(SECRET, state=tmp_path)
    assert str(refused.value) == (
        f"the watch state {tmp_path / STATE_FILE} is not a delivery id -> timestamp table: "
        "give --state-dir a folder only this receiver writes, or delete the file (a delivery "
        "accepted in the last 300 s could then be replayed once)"
    )


def test_an_id_that_cannot_be_kept_is_not_accepted(tmp_path):
    verifier = Verifier(SECRET, state=tmp_path / "state")
    (tmp_path / "state").rmdir()  # e.g. the folder removed under the running receiver
    with pytest.raises(DeliveryRefused, match="^delivery d-1 not accepted: its id could") as e:
        verifier.check(_headers(), BODY.encode(), NOW)
    assert e.value.status == 503
    (tmp_path / "state").mkdir()
    assert verifier.check(_headers(), BODY.encode(), NOW).delivery_id == "d-1"  # not kept


@pytest.mark.parametrize(
    ("headers", "body", "status", "message"),
    [
        (
            {"X-MLflow-Delivery-Id": "d-2", "X-MLflow-Timestamp": str(NOW)},
            BODY,
            401,
            "unsigned delivery 'd-2': give the webhook the shared secret",
        ),
        (
            _headers("d-3", secret="another-secret-of-16"),
            BODY,
            401,
            (
                "delivery 'd-3' has a bad signature: the webhook's secret is not the one this "
                "receiver was given"
            ),
        ),
        (_headers("d-4"), BODY.replace("champion", "challenger"), 401, "delivery 'd-4' has"),
        (
            _headers("d-5", stamp=NOW - 301),
            BODY,
            400,
            "delivery d-5 is stale (timestamp '1799999699', more than 300 s from this clock)",
        ),
        (
            _headers("d-6", body="[1]"),
            "[1]",
            400,
            "delivery d-6 is not an MLflow webhook payload",
        ),
    ],
    ids=["unsigned", "other-secret", "altered-body", "stale", "not-a-payload"],
)
def test_refused_deliveries(headers, body, status, message):
    verifier = Verifier(SECRET)
    with pytest.raises(DeliveryRefused) as refused:
        verifier.check(headers, body.encode(), NOW)
    assert (refused.value.status, str(refused.value)[: len(message)]) == (status, message)
    # a refused delivery leaves no trace: the same id, signed, is accepted afterwards
    assert verifier.check(_headers(headers["X-MLflow-Delivery-Id"]), BODY.encode(), NOW).name == (
        "credit-rf"
    )


def test_watch_file(tmp_path):
    (tmp_path / "data.csv").write_text("a,label\n1,0\n")
    path = tmp_path / "watch.toml"
    path.write_text('[models."credit-rf"]\ndata = "data.csv"\ntarget = "label"\ntime_limit = 5\n')
    watched = load_watch_file(path)
    assert watched["credit-rf"].explain_options() == {
        "data": str(tmp_path / "data.csv"),
        "target": "label",
        "time_limit": 5,
    }
    path.write_text('[models."credit-rf"]\ndata = "data.csv"\ndepht = 3\n')
    with pytest.raises(InvalidInputError, match=r"takes only data, target, .* \(got depht\)$"):
        load_watch_file(path)
    path.write_text('[models."credit-rf"]\ndata = "missing.csv"\n')
    with pytest.raises(InvalidInputError, match=r"missing.csv is not a file; give a CSV"):
        load_watch_file(path)
