"""Two explained versions of one model, for ``govern diff`` and the drift gates.

Version 1 of ``credit-rf``: a MinMaxScaler + 10-tree depth-2 forest on four Wisconsin
features and the first 150 rows; version 2: 20 trees on the same four features plus
``worst concave points`` and the first 300 rows. Each is explained once at depth 2 with
HiGHS (the same solver on every machine; the fits end on work, not on time), signed
with the session's CI key. ``rows.csv`` holds all 569 rows with the five features and
the label (the rows cross-fidelity is measured on). Each test copies the store
(:func:`use_copy`), so aliases and gate runs of one test never reach another.
"""

import shutil

import pytest
from mlflow import MlflowClient
from mlflow_store import copy_store, register_wisconsin_rf

from miret_governance.flavors.explain.explain import explain_model_version

FEATURES = ["mean radius", "mean texture", "mean perimeter", "worst area"]
MORE = [*FEATURES, "worst concave points"]


def _use_store(mp, uri: str) -> None:
    mp.setenv("MLFLOW_TRACKING_URI", uri)
    mp.setenv("MLFLOW_REGISTRY_URI", uri)


def explained_pair(root, migrated_store, breast_cancer) -> dict:
    """Register and explain both versions in a store in ``root``; what the tests need."""
    uri = f"sqlite:///{root / 'mlflow.db'}"
    copy_store(migrated_store, root / "mlflow.db")
    results = {}
    with pytest.MonkeyPatch.context() as mp:
        _use_store(mp, uri)
        mp.chdir(root)
        experiment = MlflowClient().create_experiment("diff", str(root / "mlruns"))
        mp.setenv("MLFLOW_EXPERIMENT_ID", experiment)
        for version, (features, rows, trees) in enumerate(
            ((FEATURES, 150, 10), (MORE, 300, 20)), start=1
        ):
            register_wisconsin_rf(breast_cancer, features, rows=rows, n_estimators=trees)
            shutil.copy(root / "data.csv", root / f"v{version}.csv")
            results[version] = explain_model_version(
                f"models:/credit-rf/{version}",
                root / f"v{version}.csv",
                target="label",
                depth=2,
                time_limit=60,
                min_test_rows=1,
                solver="highs",
            )
    X, y = breast_cancer
    X[MORE].assign(label=y.to_numpy()).to_csv(root / "rows.csv", index=False)
    return {"root": root, "results": results}


def use_copy(pair: dict, tmp_path, monkeypatch) -> str:
    """Point MLflow at a copy of the pair's store (artifacts stay where they are); its URI."""
    shutil.copy(pair["root"] / "mlflow.db", tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _use_store(monkeypatch, uri)
    return uri
