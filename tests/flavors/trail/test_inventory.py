"""`govern inventory`'s library: every governed model's aliases, their state, what is due."""

from datetime import datetime, timedelta, timezone

import pytest
from gate_store import explained
from mlflow import MlflowClient
from signing_keys import keys_toml

from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.trail.inventory import inventory
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.governance.trust.policy import load_policy

pytest_plugins = ["mlflow_store"]


@pytest.fixture
def policy(tmp_path):
    path = tmp_path / "inv.toml"
    path.write_text(
        'name = "inv"\n[gates]\nmin_fidelity = 0.9\n[revalidate_every_days]\nchampion = 180\n'
        + keys_toml()
    )
    return load_policy(path)


def findings(found):
    return [(f.kind, f.version, f.alias) for f in found.findings]


def test_each_alias_its_state_and_what_is_due(store, tmp_path, policy):
    client = MlflowClient()
    promoted = explained(store, tmp_path)
    assert promote_model_version(promoted, "champion", policy).promoted
    by_hand = explained(store, tmp_path, name="other-rf", sign=False)
    client.set_registered_model_alias("other-rf", "champion", "1")
    client.create_registered_model("empty-rf")  # no version: nothing to govern
    plain = explained(store, tmp_path, name="plain-rf")
    now = datetime.now(timezone.utc)

    found = inventory(policy, now)
    assert found.models == ["credit-rf", "other-rf", "plain-rf"]  # no surrogates
    assert findings(found) == [
        ("evidence", by_hand, None),
        ("alias", by_hand, "champion"),
        ("due", by_hand, "champion"),
    ]
    assert found.findings[2].message.startswith("never re-validated")
    champion, other, unaliased = found.rows
    assert (champion.alias, champion.version, champion.evidence) == (
        "champion",
        promoted,
        "verified",
    )
    assert champion.promotion.policy == policy.label and champion.promotion.approvals == ()
    assert champion.last_revalidated == champion.promotion.time == champion.last_gate.time
    assert (champion.due, champion.revalidate_every_days) == (False, 180)
    assert (other.evidence, other.promotion, other.due) == ("not verified", None, True)
    assert (unaliased.alias, unaliased.version, unaliased.evidence) == (None, plain, "verified")
    assert unaliased.due is None  # no alias: no period

    promoted_at = datetime.fromisoformat(champion.promotion.time)
    later = inventory(policy, promoted_at + timedelta(days=200))
    assert findings(later)[0] == ("due", promoted, "champion")
    assert later.findings[0].message.startswith(
        f"last re-validated {promoted_at.date().isoformat()} (200 days; policy inv "
        f"allows 180): run govern reproduce --model-uri {promoted}"
    )
    gate = gate_model_version(promoted, policy)  # a signed gate that passed re-validates
    again = inventory(policy, now).rows[0]
    assert again.last_gate.run_id == gate.run_id
    assert again.last_revalidated == again.last_gate.time > again.promotion.time
