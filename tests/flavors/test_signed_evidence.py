"""Attacks on the evidence by an insider with write access to the tracking store, the
artifact store and the registry, but not the CI job's private key: each is refused.

(a) a forged explain run, evidence and model version built with public MLflow calls;
(b) an honest surrogate's evidence edited in the artifact store, its digest param updated
by SQL; (c) a forged version carrying an honest request's tags, offered to explain's
reuse and to the settling of concurrent explains; (d) an MLmodel pointed at planted code. The forged folder signed by the trusted
key passes the strict gate: the signature is what tells the two apart.
"""

import hashlib
import json
import sqlite3
import sys
from pathlib import Path
from types import SimpleNamespace

import gate_store
import mlflow
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient
from mlflow_store import clone_store_folder, register_wisconsin_rf, store_folder
from signing_keys import ci_key, key_pair, keys_toml
from typer.testing import CliRunner

from miret_governance.flavors import miret
from miret_governance.flavors.errors import GateError
from miret_governance.flavors.explain import reuse
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.store.registry import (
    EXPLAIN_DIGEST_TAG,
    model_id_of,
    register_surrogate,
)
from miret_governance.flavors.trail import links
from miret_governance.flavors.trust import UnsignedEvidenceWarning, sign_model_dir
from miret_governance.governance.miret.tree.tree import SurrogateTree
from miret_governance.governance.trust.keyring import SignatureError
from miret_governance.governance.trust.policy import load_policy
from miret_governance.governance.trust.records import PinnedModel
from miret_governance.governance.trust.signers import SigningKey

pytest_plugins = ["mlflow_store"]
FEATURES = ["mean radius", "mean texture", "mean perimeter", "mean smoothness", "worst area"]
STRICT = "[gates]\nmin_fidelity = 0.99\nmax_features = 1\nrequire_validation_pass = true\n"
LENIENT = "[gates]\nmin_fidelity = 0.5\nmax_features = 5\n"


def govern(*args):
    from miret_governance.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def forest_folder(tmp_path_factory, migrated_store, breast_cancer):
    """A module store where a 5-feature forest is registered as credit-rf v1 (never
    explained), its data in ``data.csv`` and the strict and lenient policies trusting the
    CI key beside it; made once, each test works on its own copy (``forest``)."""
    root = tmp_path_factory.mktemp("signed-evidence-forest")
    with store_folder(root, template=migrated_store) as experiment:
        (root / "strict.toml").write_text(STRICT + keys_toml())
        (root / "lenient.toml").write_text(LENIENT + keys_toml())
        frame = register_wisconsin_rf(breast_cancer, FEATURES, 400, n_estimators=5)
    return {"root": root, "experiment": experiment, "frame": frame}


@pytest.fixture(scope="module")
def honest_folder(tmp_path_factory, forest_folder):
    """A copy of ``forest_folder`` where credit-rf v1 is explained by the CI key
    (credit-rf-surrogate v1) and gated with the lenient policy: PASS. Explained once for
    the module; each test works on its own copy (``honest``)."""
    root = tmp_path_factory.mktemp("signed-evidence-honest")
    with store_folder(root, source=forest_folder["root"]):
        result = explain_model_version(
            "models:/credit-rf/1", "data.csv", target="label", time_limit=2
        )
        outcome = gate_model_version("models:/credit-rf/1", load_policy(root / "lenient.toml"))
        assert outcome.evaluation.all_passed
    return {"root": root, "result": result}


@pytest.fixture
def store(forest_folder):
    """The experiment of the module's store (each test's copy keeps its id)."""
    return forest_folder["experiment"]


@pytest.fixture
def forest(forest_folder, tmp_path, monkeypatch):
    """This test's copy of ``forest_folder`` (store, artifacts, data and policies), MLflow
    and the working folder on it; the registered data frame."""
    clone_store_folder(forest_folder["root"], tmp_path)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", forest_folder["experiment"])
    return forest_folder["frame"]


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def forge(tmp_path, experiment, ensemble_uri="models:/credit-rf/1", digest="f" * 64, key=None):
    """The issue's forgery, public MLflow calls only: an explain-like run with the data as
    training input, a one-feature surrogate.json, evidence.json claiming test fidelity
    1.0 with every file's sha256, an MLmodel with a miret flavor and that digest, the param
    ``evidence_digest``, a logged model, a registered version and both link tags.
    ``key``: a private key to sign the folder with (an untrusted one). Returns the
    surrogate version."""
    client = MlflowClient()
    name, number = ensemble_uri.removeprefix("models:/").split("/")
    ensemble = client.get_model_version(name, number)
    frame = pd.read_csv("data.csv")
    folder = Path(tmp_path, f"forged-{len(list(Path(tmp_path).glob('forged-*')))}")
    folder.mkdir()
    with mlflow.start_run(experiment_id=experiment, run_name=f"explain {name} v{number}") as run:
        data = mlflow.data.from_pandas(frame, source="data.csv", targets="label", name="data.csv")
        mlflow.log_input(data, context="training")
        tree = SurrogateTree([[1.0, 0, 0, 0, 0]], [-0.5], 1, feature_names=FEATURES, classes=[0, 1])
        (folder / "surrogate.json").write_text(json.dumps(tree.to_dict()))
        provenance = {
            "ensemble_uri": ensemble_uri,
            "ensemble_name": name,
            "ensemble_version": number,
            "ensemble_model_id": model_id_of(ensemble),
            "ensemble_files_digest": gate_store.files_digest(ensemble),
            "data_digest": data.digest,
            "explain_digest": digest,
            "metrics": {"test_fidelity": 1.0, "test_fidelity_ci_low": 1.0, "n_features_used": 1},
            "validation": {"status": "passed", "summary": ""},
        }
        evidence = {
            "format": "miret-evidence",
            "format_version": 1,
            "provenance": provenance,
            "files": {"surrogate.json": _sha(folder / "surrogate.json")},
        }
        (folder / "evidence.json").write_text(json.dumps(evidence))
        flavors = {
            "miret": {
                "format_version": 2,
                "surrogate": "surrogate.json",
                "surrogate_class": "SurrogateTree",
                "input_space": "normalized",
                "evidence": "evidence.json",
                "evidence_digest": _sha(folder / "evidence.json"),
            },
            "python_function": {
                "loader_module": "miret_governance.flavors.miret",
                "data": "surrogate.json",
            },
        }
        (folder / "MLmodel").write_text(yaml.safe_dump({"flavors": flavors}))
        if key is not None:
            sign_model_dir(folder, key)
        mlflow.log_param("evidence_digest", _sha(folder / "evidence.json"))
        model = mlflow.initialize_logged_model(name="surrogate", experiment_id=experiment)
        client.log_model_artifacts(model.model_id, str(folder))
        mlflow.finalize_logged_model(model.model_id, "READY")
    if not client.search_registered_models("name = 'credit-rf-surrogate'"):
        client.create_registered_model("credit-rf-surrogate")
    version = client.create_model_version(
        "credit-rf-surrogate",
        f"models:/{model.model_id}",
        run.info.run_id,
        model_id=model.model_id,
        tags={"governance.surrogate_of": ensemble_uri, EXPLAIN_DIGEST_TAG: digest},
    )
    target = f"models:/credit-rf-surrogate/{version.version}"
    client.set_model_version_tag(name, number, "governance.surrogate", target)
    return version, folder


def _artifacts(version) -> Path:
    """The stored (not downloaded) artifact folder of a registered version."""
    client = MlflowClient()
    location = client.get_logged_model(model_id_of(version)).artifact_location
    return Path(location.removeprefix("file://"))


# ---------------------------------------------------------------------- (a) forgery
@pytest.mark.parametrize("signed_by", [None, "insider"], ids=["unsigned", "untrusted-key"])
def test_a_forged_explanation_never_passes_gate_or_promote(forest, store, tmp_path, signed_by):
    key = SigningKey.load(key_pair(signed_by)[0]) if signed_by else None
    forge(tmp_path, store, key=key)
    result = govern("gate", "--model-uri", "models:/credit-rf/1", "--policy", "strict.toml")
    assert result.exit_code == 1, result.output
    output = " ".join(result.output.split())
    missing = (
        "is unsigned (no model.sig): it was not produced by a job holding a trusted signing key"
        if key is None
        else f"is signed by key {key.fingerprint[:16]}..., which the policy does not trust "
        "for explain (trusted for explain: test-ci)"
    )
    for gate in ("max_features", "min_fidelity", "require_validation_pass"):
        assert (
            f"FAIL {gate}: unverified evidence: the evidence of models:/credit-rf-surrogate/1 {missing}"
            in output
        )
    client = MlflowClient()
    assert client.get_model_version("credit-rf", "1").tags["governance.last_gate"] == "FAIL"

    result = govern(
        "promote", "--model-uri", "models:/credit-rf/1", "--alias", "champion",
        "--policy", "strict.toml",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert client.get_registered_model("credit-rf").aliases == {}


def test_the_same_forgery_signed_by_the_trusted_key_would_pass(forest, store, tmp_path):
    """Control: the forged folder is complete and self-consistent; only the signature of a
    key the policy trusts (which the insider does not hold) separates it from evidence."""
    forge(tmp_path, store, key=ci_key())
    outcome = gate_model_version("models:/credit-rf/1", load_policy(tmp_path / "strict.toml"))
    assert outcome.evaluation.all_passed


# ---------------------------------------------------------------------- honest explain
@pytest.fixture
def honest(honest_folder, forest_folder, tmp_path, monkeypatch):
    """This test's copy of ``honest_folder`` (its store and artifacts: a test may edit the
    stored evidence); the module's explain result."""
    clone_store_folder(honest_folder["root"], tmp_path)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", forest_folder["experiment"])
    return honest_folder["result"]


def test_the_honest_explanation_is_signed_and_shown_with_its_signer(honest, tmp_path):
    assert honest.signed_by == ci_key().fingerprint
    stored = _artifacts(MlflowClient().get_model_version("credit-rf-surrogate", "1"))
    assert (stored / "model.sig").is_file()
    result = govern("show", "--model-uri", "models:/credit-rf/1", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["signed_by"] == {"name": "test-ci", "fingerprint": honest.signed_by}


# ---------------------------------------------------------------------- (b) tampering
def test_evidence_edited_after_the_fact_is_caught_by_gate_show_and_reproduce(honest, tmp_path):
    client = MlflowClient()
    surrogate = client.get_model_version("credit-rf-surrogate", "1")
    stored = _artifacts(surrogate)
    manifest = json.loads((stored / "evidence.json").read_text())
    manifest["provenance"]["metrics"]["test_fidelity"] = 1.0
    (stored / "evidence.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    digest = _sha(stored / "evidence.json")
    mlmodel = yaml.safe_load((stored / "MLmodel").read_text())
    mlmodel["flavors"]["miret"]["evidence_digest"] = digest
    (stored / "MLmodel").write_text(yaml.safe_dump(mlmodel))
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        db.execute(
            "UPDATE params SET value = ? WHERE key = 'evidence_digest' AND run_uuid = ?",
            (digest, surrogate.run_id),
        )
    assert client.get_run(surrogate.run_id).data.params["evidence_digest"] == digest

    altered = (
        "the evidence of models:/credit-rf-surrogate/1 does not match its signature by key "
        "'test-ci' (edited: MLmodel, evidence.json): it was altered after it was signed"
    )
    result = govern("gate", "--model-uri", "models:/credit-rf/1", "--policy", "lenient.toml")
    assert result.exit_code == 1, result.output
    assert f"FAIL min_fidelity: unverified evidence: {altered}" in " ".join(result.output.split())
    assert "(evidence not verified)" in " ".join(result.output.split())
    page = client.get_model_version("credit-rf", "1").description
    assert (
        "| Input validation | **not verified**: the evidence's signature does not verify |" in page
    )

    result = govern("show", "--model-uri", "models:/credit-rf/1", "--policy", "lenient.toml")
    assert result.exit_code == 2
    assert (
        "error: models:/credit-rf-surrogate/1 does not match its signature by key 'test-ci' "
        "(edited: MLmodel, evidence.json)" in " ".join(result.output.split())
    )
    result = govern("reproduce", "--model-uri", "models:/credit-rf/1", "--data", "data.csv")
    assert result.exit_code == 2
    assert f"error: {altered}" in " ".join(result.output.split())


# ---------------------------------------------------------------------- (c) reuse
def test_a_forged_version_with_the_honest_digest_is_not_reused(honest, store, tmp_path, caplog):
    client = MlflowClient()
    digest = client.get_model_version("credit-rf-surrogate", "1").tags[EXPLAIN_DIGEST_TAG]
    forged, _ = forge(tmp_path, store, digest=digest)
    assert str(forged.version) == "2"
    again = explain_model_version("models:/credit-rf/1", "data.csv", target="label", time_limit=2)
    assert again.reused and again.surrogate_uri == "models:/credit-rf-surrogate/1"
    link = client.get_model_version("credit-rf", "1").tags["governance.surrogate"]
    assert link == "models:/credit-rf-surrogate/1"
    assert (
        "models:/credit-rf-surrogate/2 carries this request's tags but is not reused: "
        "models:/credit-rf-surrogate/2 is unsigned (no model.sig)" in caplog.text
    )


def test_without_a_signing_key_explain_warns_and_reuses_nothing(honest, monkeypatch):
    monkeypatch.delenv("GOVERN_SIGNING_KEY")
    with pytest.warns(UnsignedEvidenceWarning, match="no gate will pass it"):
        result = explain_model_version(
            "models:/credit-rf/1", "data.csv", target="label", time_limit=2
        )
    assert not result.reused and result.version == "2" and result.signed_by == ""
    client = MlflowClient()
    (run,) = client.search_runs([client.get_experiment_by_name("governance-links").experiment_id])
    assert run.data.tags["governance.surrogate_uri"] == "models:/credit-rf-surrogate/1"
    outcome = gate_model_version("models:/credit-rf/1", load_policy("lenient.toml"))
    assert not outcome.evaluation.all_passed
    assert outcome.evaluation.results[0].reason.startswith(
        "unverified evidence: the evidence of models:/credit-rf-surrogate/2 is unsigned"
    )


# ---------------------------------------------------------------------- (e) the link
def test_a_link_moved_back_to_an_older_explanation_is_not_followed(honest, tmp_path):
    """QA: two CI-signed explanations of v1 exist; the insider points the link tag back at
    the older one (and clears its superseded mark), then signs a link record of their own.
    The gates follow only the latest link record a trusted key signed, until CI links
    an explanation again."""
    client = MlflowClient()
    lenient = load_policy(tmp_path / "lenient.toml")
    newer = explain_model_version(
        "models:/credit-rf/1", "data.csv", target="label", time_limit=2, force=True
    )
    assert newer.surrogate_uri == "models:/credit-rf-surrogate/2"
    latest = links.latest_link(client, client.get_model_version("credit-rf", "1"), lenient.keys)
    assert latest.record.surrogate == PinnedModel(
        "models:/credit-rf-surrogate/2",
        model_id_of(client.get_model_version("credit-rf-surrogate", "2")),
    )
    assert gate_model_version("models:/credit-rf/1", lenient).evaluation.all_passed

    client.set_model_version_tag(
        "credit-rf", "1", "governance.surrogate", "models:/credit-rf-surrogate/1"
    )
    client.delete_model_version_tag("credit-rf-surrogate", "1", "governance.superseded_by")
    insider = SigningKey.load(key_pair("insider")[0])
    links.record_link(
        client,
        client.get_model_version("credit-rf", "1"),
        client.get_model_version("credit-rf-surrogate", "1"),
        insider,
    )
    moved = (
        "models:/credit-rf/1 is tagged governance.surrogate = models:/credit-rf-surrogate/1, "
        f"but the latest link that explain signed (run {latest.run_id}, "
        f"{latest.record.time}) is to models:/credit-rf-surrogate/2"
    )
    with pytest.raises(GateError) as refused:
        gate_model_version("models:/credit-rf/1", lenient)
    assert str(refused.value).startswith(moved)
    for command in (("gate",), ("show",), ("explain-row", "--data", "data.csv")):
        result = govern(*command, "--model-uri", "models:/credit-rf/1", "--policy", "lenient.toml")
        assert result.exit_code == 2 and moved in " ".join(result.output.split()), command
    shown = govern(
        "show", "--model-uri", "models:/credit-rf-surrogate/1", "--policy", "lenient.toml"
    )
    assert shown.exit_code == 0, shown.output  # an older explanation named by its own URI

    again = explain_model_version("models:/credit-rf/1", "data.csv", target="label", time_limit=2)
    assert again.reused
    relinked = links.latest_link(client, client.get_model_version("credit-rf", "1"), lenient.keys)
    assert relinked.record.surrogate.uri == again.surrogate_uri
    assert gate_model_version("models:/credit-rf/1", lenient).evaluation.all_passed


# ---------------------------------------------------------------------- (d) code
def test_an_mlmodel_pointing_at_code_is_refused_before_import(honest, tmp_path):
    stored = _artifacts(MlflowClient().get_model_version("credit-rf-surrogate", "1"))
    marker = tmp_path / "ran.txt"
    (stored / "code").mkdir()
    (stored / "code" / "planted.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "def _load_pyfunc(path):\n    return None\n"
    )
    mlmodel = yaml.safe_load((stored / "MLmodel").read_text())
    mlmodel["flavors"]["python_function"].update(loader_module="planted", code="code")
    (stored / "MLmodel").write_text(yaml.safe_dump(mlmodel))
    path_before = list(sys.path)
    with pytest.raises(SignatureError) as error:
        miret.load_model("models:/credit-rf-surrogate/1", policy=tmp_path / "lenient.toml")
    assert "does not match its signature by key 'test-ci' (edited: MLmodel; Extra files" in str(
        error.value
    )
    assert "code/planted.py" in str(error.value)
    assert not marker.exists() and "planted" not in sys.modules and sys.path == path_before


def test_the_loader_refuses_without_trust_and_names_govern_policy(honest, monkeypatch):
    monkeypatch.delenv("GOVERN_POLICY")
    with pytest.raises(SignatureError, match="pass policy=<policy file> .* set GOVERN_POLICY"):
        miret.load_model("models:/credit-rf-surrogate/1")
    with pytest.raises(SignatureError, match="set GOVERN_POLICY"):
        mlflow.pyfunc.load_model("models:/credit-rf-surrogate/1")
    other = miret.load_model("models:/credit-rf-surrogate/1", policy="lenient.toml")
    assert other.tree_.depth >= 1


def test_concurrent_explains_settle_only_on_verified_versions(forest, store, tmp_path):
    """The deduplication after registration (concurrent explains of one request) ignores a
    lower version that carries the request's tags but not this key's signature."""
    client = MlflowClient()
    ensemble = client.get_model_version("credit-rf", "1")
    forged, _ = forge(tmp_path, store, digest="e" * 16)  # version 1
    honest = gate_store.explain(store, ensemble, tmp_path, link=False)  # version 2, signed
    evidence = miret.read_evidence(f"models:/credit-rf-surrogate/{honest.version}")
    request = SimpleNamespace(
        digest="e" * 16,
        ensemble_name="credit-rf",
        ensemble_version="1",
        ensemble_model_id=model_id_of(ensemble),
        data_digest=evidence["provenance"]["data_digest"],
    )
    trust = reuse.own_trust(ci_key())
    accept = reuse.verified_for(request, trust)
    assert accept(honest) and not accept(forged)
    other_data = SimpleNamespace(**{**vars(request), "data_digest": "0" * 16})
    assert not reuse.verified_for(other_data, trust)(honest)  # signed, but another request
    registered, linked = register_surrogate(
        client,
        f"models:/{model_id_of(honest)}",
        "credit-rf-surrogate",
        ensemble,
        {EXPLAIN_DIGEST_TAG: "e" * 16},
        deduplicate=accept,
    )
    assert str(forged.version) == "1" and str(registered.version) == "3"
    assert linked is registered
    link = client.get_model_version("credit-rf", "1").tags["governance.surrogate"]
    assert link == "models:/credit-rf-surrogate/3"
