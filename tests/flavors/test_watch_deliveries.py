"""The delivery checks of ``govern watch`` (flavors.watch.deliveries) and its watch file
(flavors.watch.config): deliveries signed as MLflow 3.17's server signs them, and each
refusal's status and words."""

import json

import pytest
from mlflow.webhooks.delivery import _generate_hmac_signature

from miret_governance.flavors.watch.config import load_watch_file
from miret_governance.flavors.watch.deliveries import Delivery, DeliveryRefused, Verifier
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
