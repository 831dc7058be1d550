"""Nothing from an artifact runs: pickles refused unless trusted, no class names or code/
folders from MLmodel, surrogate files verified against their signature, and (behind it,
for what a trusted key signed) against their evidence digests."""

import json
import sys
from pathlib import Path

import mlflow
import pytest
import yaml
from mlflow import MlflowClient
from mlflow_store import register_rf
from signing_keys import ci_key
from sklearn.ensemble import RandomForestClassifier

from miret_governance.flavors import miret
from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.evidence import TamperedModelError, file_digest
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.store.registry import (
    EVIDENCE_DIGEST_TAG,
    TRUST_PICKLE_TAG,
    model_id_of,
)
from miret_governance.flavors.trust import sign_model_dir
from miret_governance.governance.miret.tree.tree import SurrogateTree
from miret_governance.governance.trust.keyring import SignatureError

pytest_plugins = ["mlflow_store"]
FEATURES = ["mean radius", "mean texture", "mean perimeter", "worst area"]
KEY = ci_key()
ALTERED = "does not match its signature by key 'test-ci'"


class Payload:
    """Unpickling this writes ``marker``: what a malicious pickle would do."""

    def __init__(self, marker):
        self.marker = Path(marker)

    def __reduce__(self):
        return (Path.write_text, (self.marker, "payload ran"))


@pytest.fixture
def data(store, breast_cancer, monkeypatch):
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", store)
    X, y = breast_cancer
    frame = X[FEATURES].iloc[:120].assign(label=y.iloc[:120].to_numpy())
    frame.to_csv("data.csv", index=False)
    return frame


def _log_pickled(frame, name, payload=None):
    forest = RandomForestClassifier(n_estimators=5, max_depth=2, random_state=0)
    forest.fit(frame[FEATURES], frame["label"])
    if payload is not None:
        forest.payload = payload
    with mlflow.start_run():
        mlflow.sklearn.log_model(
            forest,
            name="model",
            serialization_format="cloudpickle",
            registered_model_name=name,
            pip_requirements=["scikit-learn"],
        )


def _model_dir(name, version="1") -> Path:
    """The stored (not downloaded) artifact folder of a registered version."""
    client = MlflowClient()
    model_id = model_id_of(client.get_model_version(name, version))
    location = client.get_logged_model(model_id).artifact_location
    return Path(location.removeprefix("file://"))


def test_pickled_payload_is_refused_and_never_runs(data, tmp_path):
    marker = tmp_path / "pwned.txt"
    _log_pickled(data, "evil-rf", Payload(marker))
    assert not marker.exists()
    with pytest.raises(ExplainError, match=r"'cloudpickle'.*serialization_format='skops'") as info:
        explain_model_version("models:/evil-rf/1", "data.csv", target="label", time_limit=2)
    assert "--trust-pickle" in str(info.value)
    assert (
        "skops_trusted_types=['sklearn.tree._tree.Tree', "
        "'sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor', "
        "'functools.partial', 'sklearn.utils.validation.check_array']"
    ) in str(info.value)
    assert not marker.exists()
    assert MlflowClient().search_model_versions("name = 'evil-rf-surrogate'") == []


def test_trust_pickle_loads_and_is_recorded(data):
    _log_pickled(data, "old-rf")
    result = explain_model_version(
        "models:/old-rf/1",
        "data.csv",
        target="label",
        time_limit=2,
        trust_pickle=True,
        min_test_rows=1,
    )
    client = MlflowClient()
    version = client.get_model_version("old-rf-surrogate", result.version)
    record = version.tags[TRUST_PICKLE_TAG]
    assert record.endswith("Z") and " at 20" in record
    assert client.get_run(result.run_id).data.tags[TRUST_PICKLE_TAG] == record
    evidence = miret.read_evidence(result.surrogate_uri)
    assert evidence["provenance"]["trust_pickle"] == record
    assert version.tags[EVIDENCE_DIGEST_TAG] == evidence["digest"]
    local = mlflow.artifacts.download_artifacts(result.surrogate_uri, dst_path="dl")
    assert record in Path(local, "model_card.md").read_text()
    assert "MLFLOW_ALLOW_PICKLE_DESERIALIZATION" not in __import__("os").environ
    # QA: reproduce advised re-logging with skops, which makes another version
    from miret_governance.flavors.read.reproduce import reproduce_explanation

    with pytest.raises(ExplainError) as refused:
        reproduce_explanation("models:/old-rf/1", "data.csv")
    assert str(refused.value) == (
        f"the explanation loaded models:/old-rf/1, a pickled model, trusted by {record}; "
        "loading it again runs the artifact's code: pass --trust-pickle to reproduce it"
    )
    assert reproduce_explanation("models:/old-rf/1", "data.csv", trust_pickle=True).identical


def test_xgboost_model_class_and_code_from_mlmodel_are_ignored(data, tmp_path):
    import xgboost

    model = xgboost.XGBClassifier(n_estimators=4, max_depth=2).fit(data[FEATURES], data["label"])
    with mlflow.start_run():
        mlflow.xgboost.log_model(
            model, name="model", registered_model_name="evil-xgb", pip_requirements=["xgboost"]
        )
    folder = _model_dir("evil-xgb")
    marker = tmp_path / "imported.txt"
    (folder / "code").mkdir()
    (folder / "code" / "evil.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
        "class XGBClassifier:\n    pass\n"
    )
    mlmodel = yaml.safe_load((folder / "MLmodel").read_text())
    assert mlmodel["flavors"]["xgboost"]["model_class"] == "xgboost.sklearn.XGBClassifier"
    mlmodel["flavors"]["xgboost"]["model_class"] = "evil.XGBClassifier"
    mlmodel["flavors"]["xgboost"]["code"] = "code"
    (folder / "MLmodel").write_text(yaml.safe_dump(mlmodel))

    with pytest.raises(ExplainError, match="model_class 'evil.XGBClassifier'"):
        explain_model_version("models:/evil-xgb/1", "data.csv", target="label", time_limit=2)
    assert not marker.exists() and "evil" not in sys.modules
    assert not any(p.endswith("code") and "evil-xgb" in p for p in sys.path)


@pytest.fixture
def saved_tree(tmp_path):
    tree = SurrogateTree([[1.0, 0.0]], [-0.5], 1, feature_names=["a", "b"], classes=[0, 1])
    path = tmp_path / "tree"
    miret.save_model(tree, path, evidence={"ensemble_uri": "models:/x/1"}, signing_key=KEY)
    return path


def test_evidence_manifest_digests_every_file(saved_tree):
    evidence = miret.read_evidence(saved_tree)
    assert evidence["provenance"] == {"ensemble_uri": "models:/x/1"}
    assert set(evidence["files"]) == {
        "surrogate.json",
        "conda.yaml",
        "python_env.yaml",
        "requirements.txt",
    }
    assert evidence["files"]["surrogate.json"] == file_digest(saved_tree / "surrogate.json")
    conf = yaml.safe_load((saved_tree / "MLmodel").read_text())["flavors"]["miret"]
    assert conf["evidence_digest"] == evidence["digest"]
    assert evidence["digest"] == file_digest(saved_tree / "evidence.json")
    assert (
        evidence["signer"].name == "test-ci" and evidence["signer"].fingerprint == KEY.fingerprint
    )


def test_edited_surrogate_json_is_refused(saved_tree):
    data = json.loads((saved_tree / "surrogate.json").read_text())
    data["a"] = [[1e308, 0.0]]
    (saved_tree / "surrogate.json").write_text(json.dumps(data))
    for load in (miret.load_model, mlflow.pyfunc.load_model, miret.read_evidence):
        with pytest.raises(SignatureError, match=f"{ALTERED} .edited: surrogate.json"):
            load(str(saved_tree))
    sign_model_dir(saved_tree, KEY)  # signed by the key holder: the manifest still refuses it
    with pytest.raises(TamperedModelError, match="edited: surrogate.json"):
        miret.load_model(str(saved_tree))
    with pytest.raises(TamperedModelError, match="edited: surrogate.json"):
        mlflow.pyfunc.load_model(str(saved_tree))


def test_edited_or_missing_manifest_is_refused(saved_tree):
    manifest = json.loads((saved_tree / "evidence.json").read_text())
    manifest["provenance"]["ensemble_uri"] = "models:/other/9"
    (saved_tree / "evidence.json").write_text(json.dumps(manifest))
    with pytest.raises(SignatureError, match=f"{ALTERED} .edited: evidence.json"):
        miret.load_model(str(saved_tree))
    sign_model_dir(saved_tree, KEY)
    with pytest.raises(TamperedModelError, match="evidence.json was modified"):
        miret.load_model(str(saved_tree))
    (saved_tree / "evidence.json").unlink()
    with pytest.raises(
        SignatureError, match=f"{ALTERED} .Missing files in model 'tree': evidence.json\\)"
    ):
        miret.load_model(str(saved_tree))
    sign_model_dir(saved_tree, KEY)
    with pytest.raises(TamperedModelError, match="no verifiable evidence.json"):
        miret.load_model(str(saved_tree))


def test_planted_code_in_a_surrogate_is_not_imported(saved_tree, tmp_path):
    marker = tmp_path / "planted.txt"
    (saved_tree / "code").mkdir()
    (saved_tree / "code" / "planted_module.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
    )
    mlmodel = yaml.safe_load((saved_tree / "MLmodel").read_text())
    mlmodel["flavors"]["miret"]["code"] = "code"
    (saved_tree / "MLmodel").write_text(yaml.safe_dump(mlmodel))
    path_before = list(sys.path)
    with pytest.raises(SignatureError, match=f"{ALTERED} .edited: MLmodel; Extra files"):
        miret.load_model(str(saved_tree))
    sign_model_dir(saved_tree, KEY)
    with pytest.raises(TamperedModelError, match="added: code/planted_module.py"):
        miret.load_model(str(saved_tree))
    assert sys.path == path_before
    assert not marker.exists() and "planted_module" not in sys.modules


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("loader_module", "planted_loader", "loader_module 'planted_loader'"),
        ("code", "code", "code 'code'"),
        ("data", "other.json", "data 'other.json'"),
    ],
)
def test_an_mlmodel_pointing_pyfunc_elsewhere_is_refused(saved_tree, key, value, named):
    """MLmodel is covered by the signature; behind it (for what a trusted key signed) its
    pyfunc entry is checked against what the flavor writes before anything else is read."""
    mlmodel = yaml.safe_load((saved_tree / "MLmodel").read_text())
    mlmodel["flavors"]["python_function"][key] = value
    (saved_tree / "MLmodel").write_text(yaml.safe_dump(mlmodel))
    with pytest.raises(SignatureError, match=f"{ALTERED} .edited: MLmodel"):
        miret.load_model(str(saved_tree))
    sign_model_dir(saved_tree, KEY)
    for load in (miret.load_model, miret.read_evidence):
        with pytest.raises(TamperedModelError, match=f"names {named} in its python_function"):
            load(str(saved_tree))


def test_registered_surrogate_verifies_after_registration(data):
    register_rf(data, FEATURES, "fine-rf", n_estimators=5)
    result = explain_model_version(
        "models:/fine-rf/1", "data.csv", target="label", time_limit=2, min_test_rows=1
    )
    evidence = miret.read_evidence(result.surrogate_uri)
    provenance = evidence["provenance"]
    assert provenance["ensemble_uri"] == "models:/fine-rf/1"
    assert provenance["run_id"] == result.run_id
    assert provenance["metrics"] == pytest.approx(result.metrics)
    assert provenance["validation"]["status"] == "passed"
    assert provenance["trust_pickle"] == ""
    assert set(provenance["baseline_cart"]) == {
        "train_fidelity",
        "cv_fidelity",
        "test_fidelity",
        "n_features_used",
    }
    assert provenance["solve"]["status"] == result.solve["status"]
    assert {"report.html", "model_card.md", "surrogate.json"} <= set(evidence["files"])
    version = MlflowClient().get_model_version("fine-rf-surrogate", result.version)
    assert version.tags[EVIDENCE_DIGEST_TAG] == evidence["digest"]
