"""Surrogate versions with stored evidence, as `govern explain` leaves them, built fast.

A hand-made depth-2 ``SurrogateTree`` on features ``x0, x1, x2`` (nonzero coefficients on
``x0`` and ``x1`` only: two features used) is saved with the ``miret`` flavor and its
provenance (the flavor writes ``evidence.json`` with the sha256 of every file), signed with
the session's CI key (``GOVERN_SIGNING_KEY``) as explain signs, logged as
a logged model of an explain run that records the training data as input and the
evidence digest as a param, registered as ``<name>-surrogate`` and linked to the
ensemble version.
"""

import hashlib
import json
import tempfile
from pathlib import Path

import mlflow
import pandas as pd
import yaml
from mlflow import MlflowClient
from signing_keys import ci_key

from miret_governance.flavors import miret as miret_flavor
from miret_governance.flavors.evidence import file_digest, model_files_digest
from miret_governance.flavors.store.registry import download_model, model_id_of
from miret_governance.flavors.trust import sign_model_dir
from miret_governance.governance.miret.tree.tree import SurrogateTree

FEATURES = ["x0", "x1", "x2"]
COEF = [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.5, 0.0, 0.0]]
GOOD = {
    "test_fidelity": 0.95,
    "test_fidelity_ci_low": 0.9,
    "n_features_used": 2,
    "train_fidelity": 0.97,
    "test_proximity_agreement": 0.9,
    "solver.gap": 0.0,
}


def register_ensemble(experiment, name="credit-rf") -> object:
    """A new version of ``name`` (a logged model with no artifacts: gates never load it)."""
    client = MlflowClient()
    with mlflow.start_run(experiment_id=experiment) as run:
        model = mlflow.initialize_logged_model(name="ensemble", experiment_id=experiment)
    if not client.search_registered_models(f"name = '{name}'"):
        client.create_registered_model(name)
    return client.create_model_version(
        name, f"models:/{model.model_id}", run.info.run_id, model_id=model.model_id
    )


def files_digest(ensemble) -> str:
    """The digest of the ensemble version's model files, as explain records it."""
    with tempfile.TemporaryDirectory() as folder:
        uri = f"models:/{ensemble.name}/{ensemble.version}"
        return model_files_digest(download_model(uri, folder))


def provenance_of(ensemble, data_digest, metrics, success=True, pin_files=True) -> dict:
    """The provenance explain stores (``flavors.publish.evidence_record``'s keys;
    ``pin_files=False``: without ``ensemble_files_digest``, as before it was recorded)."""
    provenance = {
        "ensemble_uri": f"models:/{ensemble.name}/{ensemble.version}",
        "ensemble_name": ensemble.name,
        "ensemble_version": str(ensemble.version),
        "ensemble_model_id": model_id_of(ensemble),
        "ensemble_files_digest": files_digest(ensemble),
        "data_digest": data_digest,
        "explain_digest": "e" * 16,
        "metrics": dict(metrics),
        "validation": {"status": "passed" if success else "failed", "summary": ""},
        "baseline_cart": {"test_fidelity": 0.9, "n_features_used": 3},
        "solve": {"status": "optimal", "gap": 0.0},
    }
    if not pin_files:
        del provenance["ensemble_files_digest"]
    return provenance


def rewrite_evidence(model_dir, manifest: dict) -> None:
    """Replace ``evidence.json`` and the digest MLmodel records for it, as someone with
    write access to the artifact store could (only the run's param still vouches)."""
    path = Path(model_dir, "evidence.json")
    path.write_text(json.dumps(manifest))
    mlmodel = Path(model_dir, "MLmodel")
    conf = yaml.safe_load(mlmodel.read_text())
    conf["flavors"]["miret"]["evidence_digest"] = hashlib.sha256(path.read_bytes()).hexdigest()
    mlmodel.write_text(yaml.safe_dump(conf))


def explain(
    experiment,
    ensemble,
    tmp_path,
    metrics=GOOD,
    success=True,
    edit=None,
    link=True,
    data_digest=None,
    sign=True,
    pin_files=True,
    created=None,
):
    """Log, register and link a surrogate of ``ensemble`` with stored evidence.

        ``edit(model_dir, manifest)`` may change the model directory after the evidence was
        digested and its digest recorded, before it is signed (what the checks behind the
        signature find in evidence a trusted key signed); ``data_digest`` overrides the
        digest the evidence names; ``sign=False`` leaves it unsigned; ``pin_files=False``
        leaves out the ensemble files' digest; ``created`` (ISO 8601 UTC) the time it states it was
    signed, as explain records it (a certificate is checked at that time). Returns the
    surrogate version.
    """
    client = MlflowClient()
    frame = pd.DataFrame({"x0": [0.1, 0.9], "x1": [0.2, 0.8], "x2": [0.5, 0.5], "y": [0, 1]})
    model_dir = Path(tmp_path) / f"surrogate-{ensemble.name}-{ensemble.version}-{len(metrics)}"
    n = 0
    while model_dir.exists():
        n += 1
        model_dir = model_dir.with_name(f"{model_dir.name}-{n}")
    with mlflow.start_run(experiment_id=experiment) as run:
        data = mlflow.data.from_pandas(frame, name="train.csv", targets="y")
        mlflow.log_input(data, context="training")
        tree = SurrogateTree(COEF, [0.0, 0.0, 0.0], 2, feature_names=FEATURES, classes=(0, 1))
        digest = data_digest or data.digest
        provenance = provenance_of(ensemble, digest, metrics, success, pin_files)
        provenance |= {"created": created} if created else {}
        miret_flavor.save_model(tree, str(model_dir), evidence=provenance)
        manifest = json.loads((model_dir / "evidence.json").read_text())
        mlflow.log_param("evidence_digest", file_digest(model_dir / "evidence.json"))
        if edit is not None:
            edit(model_dir, manifest)
        if sign:
            sign_model_dir(model_dir, ci_key())
        model = mlflow.initialize_logged_model(name="surrogate", experiment_id=experiment)
        client.log_model_artifacts(model.model_id, str(model_dir))
        mlflow.finalize_logged_model(model.model_id, "READY")
    registered = f"{ensemble.name}-surrogate"
    if not client.search_registered_models(f"name = '{registered}'"):
        client.create_registered_model(registered)
    surrogate = client.create_model_version(
        registered,
        f"models:/{model.model_id}",
        run.info.run_id,
        model_id=model.model_id,
        tags={"governance.surrogate_of": f"models:/{ensemble.name}/{ensemble.version}"},
    )
    if link:
        client.set_model_version_tag(
            ensemble.name,
            ensemble.version,
            "governance.surrogate",
            f"models:/{registered}/{surrogate.version}",
        )
    return surrogate


def explained(experiment, tmp_path, name="credit-rf", **options) -> str:
    """A new ensemble version of ``name`` with a linked, evidenced surrogate; its URI."""
    ensemble = register_ensemble(experiment, name)
    explain(experiment, ensemble, tmp_path, **options)
    return f"models:/{ensemble.name}/{ensemble.version}"
