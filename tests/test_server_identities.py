"""Identities the server vouches for, on the shared-server stack (``tests/server_stack.py``:
PostgreSQL, ``mlflow server`` with basic-auth): records name the user the server
authenticated, not the operating system's; a key the policy binds to a user signs
nothing for another one, even where the server would let that user write; and an
approval by the user who promotes does not count where four eyes are required.

One explained version serves every test (explaining costs CPU). Users ``id-ci``,
``id-rev`` and ``id-ds`` and the experiment ``identities`` are this module's own (the
stack is shared with other modules); the governance experiments are fixed names, made
by the admin here unless another module made them first."""

import pytest
from mlflow import MlflowClient
from mlflow_store import register_sklearn
from server_stack import governance_experiments
from signing_keys import CI_KEY, key_pair
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.trail.decisions import (
    APPROVAL_EXPERIMENT,
    decision_runs,
    read_record,
)
from miret_governance.governance.trust.policy import load_policy

pytest_plugins = ["mlflow_store", "server_stack"]
pytestmark = pytest.mark.slow

MODEL = "models:/id-rf/1"


@pytest.fixture(scope="module")
def identities(server_stack, breast_cancer, tmp_path_factory):
    """The users' environments (``ci``, ``rev``, ``ds``), the policy file and ``id-rf``
    version 1 explained by ``id-ci``. The policy binds the CI key to ``id-ci`` and the
    approver key ``id-rev`` to ``id-rev``; the approver key ``id-any`` is bound to
    nobody; ``@champion`` needs one approval. ``id-ds`` holds every grant ``id-rev``
    holds: whatever refuses it is the product, not the server."""
    from miret_governance.flavors.explain.explain import explain_model_version

    folder = tmp_path_factory.mktemp("identities")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in server_stack.env().items():
            patch.setenv(name, value)
        admin = MlflowClient(server_stack.url)
        experiment = admin.create_experiment("identities")
        governance = governance_experiments(admin)
        grants = [("experiment", experiment, "EDIT")]
        grants += [("experiment", i, "MANAGE") for i in governance.values()]
        users = {"ci": server_stack.create_user("id-ci", grants=grants)}
        for name, value in users["ci"].items():
            patch.setenv(name, value)
        patch.setenv("MLFLOW_EXPERIMENT_NAME", "identities")
        X, y = breast_cancer
        X, y = X.iloc[:120, :4], y.iloc[:120]
        forest = RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0)
        register_sklearn(make_pipeline(MinMaxScaler(), forest).fit(X, y), "id-rf")
        X.assign(label=y).to_csv(folder / "train.csv", index=False)
        explain_model_version(
            MODEL, folder / "train.csv", target="label", solver="highs", time_limit=5,
            min_test_rows=5,
        )  # fmt: skip
    reads = [("experiment", experiment, "READ")]
    reads += [("experiment", i, "READ") for n, i in governance.items() if n != APPROVAL_EXPERIMENT]
    reads += [("registered_model", m, "READ") for m in ("id-rf", "id-rf-surrogate")]
    approving = [("experiment", governance[APPROVAL_EXPERIMENT], "EDIT"), *reads]
    users["rev"] = server_stack.create_user("id-rev", grants=approving)
    users["ds"] = server_stack.create_user("id-ds", grants=approving)
    policy = folder / "identities.toml"
    policy.write_text(
        "[gates]\nmin_fidelity = 0.5\nmax_features = 4\n"
        + "".join(
            f'[keys.{name}]\npublic_key = "{key_pair(name)[1]}"\nmay_sign = {purposes}\n'
            + (f'users = ["{user}"]\n' if user else "")
            for name, purposes, user in (
                (CI_KEY, '["explain", "decide"]', "id-ci"),
                ("id-rev", '["approve"]', "id-rev"),
                ("id-any", '["approve"]', None),
            )
        )
        + "[approvals]\nchampion = 1\n"
    )
    return users, policy


def govern(*args):
    return CliRunner().invoke(app, list(args))


def approve(policy, key: str, comment: str = "rules read"):
    return govern(
        "approve", "--model-uri", MODEL, "--alias", "champion", "--decision", "approve",
        "--comment", comment, "--policy", str(policy), "--signing-key", str(key_pair(key)[0]),
    )  # fmt: skip


def approvals(policy) -> list:
    client = MlflowClient()
    trusted = load_policy(policy).keys
    return [
        read_record(client, r, trusted) for r in decision_runs(client, APPROVAL_EXPERIMENT, MODEL)
    ]


def test_a_key_bound_to_another_user_signs_nothing(identities, as_user):
    users, policy = identities
    as_user(users["ds"])
    before = len(approvals(policy))
    refused = approve(policy, "id-rev")
    assert refused.exit_code == 2, refused.output
    assert "key 'id-rev' may be used only by id-rev; the server says you are 'id-ds'" in (
        refused.output
    )
    assert "nothing was recorded" in refused.output
    assert len(approvals(policy)) == before  # the server would have taken it


def test_records_name_the_server_user_and_the_promoter_approves_for_nothing(
    identities, as_user, monkeypatch
):
    users, policy = identities
    for name in ("USER", "LOGNAME"):  # what MLflow would say without a server to ask
        monkeypatch.setenv(name, "os-user")
    as_user(users["ci"])
    assert approve(policy, "id-any", "my own").exit_code == 0
    refused = govern(
        "promote", "--model-uri", MODEL, "--alias", "champion", "--policy", str(policy)
    )
    assert refused.exit_code == 1, refused.output
    assert "the approval by key id-any does not count: the server says 'id-ci' made it, who " in (
        " ".join(refused.output.split())
    )
    run_id = (
        MlflowClient().get_model_version("id-rf", "1").tags["governance.promotion.champion.run"]
    )
    promotion = read_record(MlflowClient(), run_id, load_policy(policy).keys)
    assert promotion.valid and promotion.record.decision == "refused"
    assert (
        promotion.record.decided_by.server_user
        == "id-ci"
        == promotion.record.decided_by.mlflow_user
    )

    as_user(users["rev"])
    approved = approve(policy, "id-rev")
    assert approved.exit_code == 0, approved.output
    by_user = {d.record.decided_by.server_user: d for d in approvals(policy)}
    assert set(by_user) == {"id-ci", "id-rev"}
    assert by_user["id-rev"].valid and by_user["id-rev"].record.decided_by.mlflow_user == "id-rev"
    run = MlflowClient().get_run(by_user["id-rev"].run_id)
    assert run.info.user_id == run.data.tags["mlflow.user"] == "id-rev"
