"""Promotion into the governed registered model on a plain local store (no users): the
files are copied under governance's own run, the alias set there, every read verifies
them against the signed evidence, and a promotion stopped half-way leaves nothing a
later one trusts blindly. The same flow as each role on an authenticated server is in
tests/flavors/server/test_setup.py (one server per module)."""

from pathlib import Path

import pytest
from gate_store import GOOD, explain, register_ensemble
from mlflow import MlflowClient
from signing_keys import trusting

from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.read.review import describe_for_review
from miret_governance.flavors.trail import promotion
from miret_governance.flavors.trail.audit import audit_model
from miret_governance.flavors.trail.decisions import read_record
from miret_governance.flavors.trail.governed import (
    FILES_DIGEST_TAG,
    FROM_TAG,
    GovernedFilesError,
)
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.governance.trust.policy import parse_policy

pytest_plugins = ["mlflow_store"]
GOVERNED = "credit-rf.governed"


def governed_policy():
    return parse_policy(
        trusting({"gates": {"min_fidelity": 0.9}, "governed": {"credit-rf": {"experiment": "x"}}})
    )


def explained(store, tmp_path, **options) -> str:
    """A registered ensemble version with model files (as a data scientist logs them),
    explained; its URI."""
    ensemble = register_ensemble(store)
    folder = tmp_path / "ensemble-files"
    folder.mkdir(exist_ok=True)
    (folder / "MLmodel").write_text("flavors: {}\n")
    (folder / "model.json").write_text('{"trees": []}')
    MlflowClient().log_model_artifacts(ensemble.source.removeprefix("models:/"), str(folder))
    explain(store, ensemble, tmp_path, **options)
    return f"models:/{ensemble.name}/{ensemble.version}"


def storage(client: MlflowClient, name: str, version) -> str:
    return client.get_model_version_download_uri(name, str(version))


def test_copy_model_version_leaves_the_files_where_the_data_scientist_writes(store, tmp_path):
    """Why promotion copies the files itself: MLflow's copy points at the source's."""
    client = MlflowClient()
    uri = explained(store, tmp_path)
    copy = client.copy_model_version(uri, "copied")
    assert copy.source == uri
    assert storage(client, "copied", copy.version) == storage(client, "credit-rf", 1)


def _swap_a_file(client: MlflowClient, version) -> None:
    """Overwrite one file of the governed version where its files are stored (as an
    admin with access to the artifact store would)."""
    folder = Path(storage(client, GOVERNED, version).removeprefix("file://"))
    target = next(p for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "MLmodel")
    target.write_bytes(target.read_bytes() + b" ")


def test_promotion_goes_into_the_governed_model_and_every_read_verifies_it(store, tmp_path):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    policy = governed_policy()
    outcome = promote_model_version(uri, "champion", policy)
    assert outcome.promoted
    held = client.get_model_version_by_alias(GOVERNED, "champion")
    assert held.tags[FROM_TAG] == uri
    pinned = held.tags[FILES_DIGEST_TAG]
    gate_run = client.get_run(outcome.gate.run_id)
    assert held.source == f"{gate_run.info.artifact_uri}/governed_model"  # governance's run
    record = read_record(client, gate_run, policy.keys).record
    assert record.governed.uri == f"models:/{GOVERNED}/{held.version}"
    assert record.governed.files_digest == pinned
    assert outcome.governed == record.governed.uri
    assert client.get_model_version_by_alias("credit-rf", "champion").version == 1

    again = promote_model_version(uri, "challenger", policy)  # same files: same version
    assert again.promoted
    assert client.get_model_version_by_alias(GOVERNED, "challenger").version == held.version
    assert len(client.search_model_versions(f"name = '{GOVERNED}'")) == 1

    shown = describe_for_review(f"models:/{GOVERNED}@champion", client, policy)
    assert shown["ensemble"]["uri"] == uri
    assert gate_model_version(f"models:/{GOVERNED}@champion", policy).ensemble_uri == uri
    assert audit_model(GOVERNED, policy).clean  # the data scientists' model, and this one
    by_hand = client.create_model_version(GOVERNED, f"models:/{GOVERNED}/{held.version}")
    client.set_registered_model_alias(GOVERNED, "challenger", by_hand.version)
    (finding,) = audit_model("credit-rf", policy).findings
    assert finding.alias == "challenger" and "it was set by hand" in finding.message
    client.set_registered_model_alias(GOVERNED, "challenger", held.version)
    _swap_a_file(client, held.version)
    (one, two) = audit_model("credit-rf", policy).findings
    assert "were replaced after promotion" in one.message and one.alias == "challenger"
    assert "were replaced after promotion" in two.message and two.alias == "champion"
    with pytest.raises(GovernedFilesError, match="differ from those the signed evidence"):
        describe_for_review(f"models:/{GOVERNED}@champion", client, policy)
    with pytest.raises(GovernedFilesError, match="were replaced after promotion"):
        gate_model_version(f"models:/{GOVERNED}@champion", policy)


def test_a_promotion_stopped_after_the_copy_moves_no_alias_and_is_not_trusted_blindly(
    store, tmp_path, monkeypatch
):
    client = MlflowClient()
    uri = explained(store, tmp_path)
    policy = governed_policy()

    def refused(*args, **kwargs):
        raise RuntimeError("the server refused the record")

    with monkeypatch.context() as mp:
        mp.setattr(promotion, "finish_with_record", refused)
        with pytest.raises(RuntimeError, match="refused the record"):
            promote_model_version(uri, "champion", policy)
    (orphan,) = client.search_model_versions(f"name = '{GOVERNED}'")
    assert not client.get_registered_model(GOVERNED).aliases
    assert not client.get_registered_model("credit-rf").aliases
    _swap_a_file(client, orphan.version)  # whoever could write there meanwhile

    assert promote_model_version(uri, "champion", policy).promoted
    held = client.get_model_version_by_alias(GOVERNED, "champion")
    assert held.version != orphan.version  # the swapped copy was not reused
    assert promote_model_version(uri, "champion", policy).promoted
    assert client.get_model_version_by_alias(GOVERNED, "champion").version == held.version


def test_a_registration_the_server_refuses_leaves_nothing_and_blocks_nothing(
    store, tmp_path, monkeypatch
):
    """Refused after the files were uploaded (403 on the governed model): no governed
    version, no alias moved, the gate run ended FAILED, and the next promotion and the
    audit are not held up by it."""
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    uri = explained(store, tmp_path)
    policy = governed_policy()
    register = MlflowClient.create_model_version

    def refused(self, name, *args, **kwargs):
        if name == GOVERNED:
            raise MlflowException("Permission denied", error_code="PERMISSION_DENIED")
        return register(self, name, *args, **kwargs)

    with monkeypatch.context() as mp:
        mp.setattr(MlflowClient, "create_model_version", refused)
        with pytest.raises(MlflowException, match="Permission denied"):
            promote_model_version(uri, "champion", policy)
    assert client.search_model_versions(f"name = '{GOVERNED}'") == []
    assert not client.get_registered_model("credit-rf").aliases
    (run,) = client.search_runs(
        [client.get_experiment_by_name("governance-gates").experiment_id],
        filter_string="attributes.status = 'FAILED'",
    )
    assert "governance.record.sha256" not in run.data.params  # no decision bound
    assert promote_model_version(uri, "champion", policy).promoted
    assert client.get_model_version_by_alias(GOVERNED, "champion").tags[FROM_TAG] == uri
    assert audit_model("credit-rf", policy).clean


def test_without_governed_models_promotion_stays_on_the_data_scientists_model(store, tmp_path):
    client = MlflowClient()
    uri = explained(store, tmp_path, metrics=GOOD)
    policy = parse_policy(trusting({"gates": {"min_fidelity": 0.9}}))
    assert promote_model_version(uri, "champion", policy).promoted
    assert client.search_registered_models(f"name = '{GOVERNED}'") == []
