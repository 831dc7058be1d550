"""No silent supersede: an explain that would link a new surrogate over a promotion or an
approval is refused before it writes anything, unless ``--supersede`` (what it then says:
``tests/flavors/explain/test_explain.py::test_rf_reuse_then_force``, on the module's
explanation)."""

import json
import os

import pytest
from gate_store import explained
from mlflow import MlflowClient
from mlflow.entities import ViewType
from signing_keys import four_eyes_toml, key_pair
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.trail.promotion import approve_model_version, promote_model_version
from miret_governance.flavors.trail.supersede import (
    Superseded,
    SupersedeError,
    supersede_trust,
    superseded_by_link,
)
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.signers import SigningKey

pytest_plugins = ["mlflow_store"]
FEATURES = ["mean radius", "mean texture", "worst area"]


def _store_state(client: MlflowClient) -> tuple:
    """Every run (tags included) and every model version (tags, aliases, description)."""
    experiments = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    runs = {
        r.info.run_id: dict(r.data.tags)
        for r in client.search_runs(experiments, run_view_type=ViewType.ALL)
    }
    versions = {
        (v.name, v.version): (dict(v.tags), sorted(v.aliases), v.description)
        for m in client.search_registered_models()
        for v in client.search_model_versions(f"name = '{m.name}'")
    }
    return runs, versions


def test_a_forced_explain_of_a_promoted_version_is_refused_and_writes_nothing(store, tmp_path):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    assert promote_model_version(uri, "champion", load_policy(os.environ["GOVERN_POLICY"])).promoted
    (tmp_path / "data.csv").write_text("x0,x1,x2,y\n0.1,0.2,0.5,0\n")
    before = _store_state(client)
    result = CliRunner().invoke(
        app,
        ["explain", "--model-uri", uri, "--data", "data.csv", "--target", "y", "--force"],
    )
    assert result.exit_code == 2, result.output
    assert " ".join(result.stderr.split()).endswith(
        "error: refused: models:/credit-rf/1 is explained by models:/credit-rf-surrogate/1, "
        "whose evidence carries @champion; --force would link a new surrogate and they would "
        "stop counting; drop --force to reuse the current explanation, or pass --supersede "
        "to explain anyway (then @champion needs a new gate and promotion: govern promote "
        "--model-uri models:/credit-rf/1 --alias champion); nothing was written"
    )
    assert _store_state(client) == before


def test_an_approval_alone_is_refused_when_the_policy_trusts_its_key(store, tmp_path):
    """Only records the keys trust count: the session policy does not trust alice."""
    client = MlflowClient()
    uri = explained(store, tmp_path)
    path = tmp_path / "four-eyes.toml"
    path.write_text(four_eyes_toml())
    alice = SigningKey.load(key_pair("alice")[0])
    approve_model_version(uri, "prod", "approve", "ok", load_policy(path), signing_key=alice)
    version = client.get_model_version("credit-rf", "1")
    assert superseded_by_link(client, version, supersede_trust(path, None)) == Superseded(
        "models:/credit-rf-surrogate/1", (), ("@prod by alice",)
    )
    assert superseded_by_link(client, version, supersede_trust(None, None)) is None
    before = _store_state(client)
    with pytest.raises(SupersedeError) as refused:
        explain_model_version(uri, "data.csv", force=True, policy=path)
    assert str(refused.value) == (
        "refused: models:/credit-rf/1 is explained by models:/credit-rf-surrogate/1, whose "
        "evidence carries 1 approval (@prod by alice); --force would link a new surrogate "
        "and they would stop counting; drop --force to reuse the current explanation, or "
        "pass --supersede to explain anyway (then the approvers must approve the new "
        "evidence); nothing was written"
    )
    assert _store_state(client) == before


def test_what_an_explain_that_superseded_says():
    superseded = Superseded(
        "models:/credit-rf-surrogate/1",
        ("@champion", "credit-rf.governed@champion"),
        ("@prod by alice",),
    )
    assert superseded.sentence("models:/credit-rf/1") == (
        "Superseded models:/credit-rf-surrogate/1, which carried @champion, "
        "credit-rf.governed@champion, 1 approval (@prod by alice): those decisions no longer "
        "count; @champion needs a new gate and promotion: govern promote --model-uri "
        "models:/credit-rf/1 --alias champion, and the approvers must approve the new evidence."
    )
    assert json.loads(superseded.tag()) == [
        "models:/credit-rf-surrogate/1",
        "@champion",
        "credit-rf.governed@champion",
        "1 approval",
    ]
