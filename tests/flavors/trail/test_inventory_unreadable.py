"""``govern inventory`` by a user the authenticated server does not let read every model
(the shared stack, ``tests/server_stack.py``: PostgreSQL, ``mlflow server`` with
basic-auth, ``default_permission = NO_PERMISSIONS``): the registry search leaves the
unreadable model out, the inventory names it in a finding and lists the rest."""

import json

import pytest
from gate_store import explained
from mlflow import MlflowClient
from server_stack import governance_experiments
from signing_keys import ci_key, keys_toml
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.governance.trust.policy import load_policy

pytest_plugins = ["mlflow_store", "server_stack"]
pytestmark = pytest.mark.slow

READABLE, HIDDEN = "inventory-readable", "inventory-hidden"


def test_an_unreadable_model_is_a_finding_and_the_rest_is_listed(server_stack, as_user, tmp_path):
    as_user(server_stack.env())  # the admin: both models, explained, the hidden one gated
    admin = MlflowClient()
    governance = governance_experiments(admin)
    experiment = admin.create_experiment("inventory-unreadable")
    policy = tmp_path / "policy.toml"
    policy.write_text("[gates]\nmin_fidelity = 0.5\n" + keys_toml())
    explained(experiment, tmp_path, name=READABLE)
    hidden = explained(experiment, tmp_path, name=HIDDEN)
    gate_model_version(hidden, load_policy(policy), admin, signing_key=ci_key())
    reads = [
        ("experiment", experiment, "READ"),
        ("registered_model", READABLE, "READ"),
        ("registered_model", f"{READABLE}-surrogate", "READ"),
        *(("experiment", i, "READ") for i in governance.values()),
    ]
    as_user(server_stack.create_user("inventory-reader", grants=reads))

    result = CliRunner().invoke(app, ["inventory", "--policy", str(policy), "--json"])
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    mine = {READABLE, HIDDEN}
    assert [name for name in document["models"] if name in mine] == [READABLE]
    assert [
        (row["alias"], row["version"], row["evidence"])
        for row in document["aliases"]
        if row["model"] in mine
    ] == [(None, f"models:/{READABLE}/1", "verified")]
    assert [f for f in document["findings"] if f["version"].split("/")[1] in mine] == [
        {
            "kind": "unreadable",
            "version": f"models:/{HIDDEN}",
            "message": (
                "no read permission for inventory-reader: ask an admin for READ, or run the "
                "inventory as the governance identity"
            ),
            "alias": None,
            "run_id": None,
        }
    ]
