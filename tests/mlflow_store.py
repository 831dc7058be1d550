"""Registry fixtures for the gate tests: store copies, and linked version pairs.

Creating an MLflow SQLite database runs every schema migration (about a second of CPU);
copying an already-migrated one (``conftest.py``'s ``migrated_store``) is instant:
:func:`copy_store` makes each test's store, and each module's own.
"""

import contextlib
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from miret_governance.flavors.store.registry import name_filter


def copy_store(template: Path, path: Path) -> None:
    """A copy of the ``template`` store at ``path`` whose default experiment keeps its
    artifacts beside it (``./mlruns/0``), as in a store MLflow creates there."""
    shutil.copy(template, path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
            (str(path.parent / "mlruns" / "0"),),
        )


def clone_store_folder(source: Path, target: Path) -> None:
    """Copy a module's store folder ``source`` (its ``mlflow.db`` and the artifacts it
    keeps beside it) into ``target``, every path under ``source`` that the database
    records (artifact locations, run and dataset sources) rewritten to ``target``: a test
    may then edit the store and its artifacts (evidence, MLmodel files) as its own, the
    module's explain having run once. Artifact files are copied byte for byte (their
    signatures still verify)."""
    shutil.copytree(source, target, dirs_exist_ok=True)
    # MLflow keeps each run's and logged model's artifact repository, by id, for the
    # process: the clone's runs have the source's ids, and must write to their own folder
    from mlflow.tracking._tracking_service import utils

    utils._artifact_repos_cache.clear()
    old, new = f"{source}{os.sep}", f"{target}{os.sep}"
    with contextlib.closing(sqlite3.connect(target / "mlflow.db")) as db, db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for _, column, kind, *_ in db.execute(f'PRAGMA table_info("{table}")').fetchall():
                if any(word in kind.upper() for word in ("CHAR", "TEXT", "CLOB")):
                    db.execute(
                        f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?) '
                        f'WHERE instr("{column}", ?) > 0',
                        (old, new, old),
                    )


@contextlib.contextmanager
def store_folder(root: Path, template: Path | None = None, source: Path | None = None):
    """MLflow and the working folder on the module folder ``root``, made from a copy of the
    migrated store ``template`` (an experiment ``tests`` created, its artifacts in
    ``root/mlruns``) or from a clone of the module folder ``source``
    (:func:`clone_store_folder`); ``MLFLOW_EXPERIMENT_ID`` is that experiment's id, which
    the context yields. A module fixture builds its store once in it; each test then takes
    a :func:`clone_store_folder` of ``root``."""
    if source is None:
        copy_store(template, root / "mlflow.db")
    else:
        clone_store_folder(source, root)
    with pytest.MonkeyPatch.context() as mp:
        for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
            mp.setenv(name, f"sqlite:///{root / 'mlflow.db'}")
        mp.chdir(root)
        client = MlflowClient()
        if source is None:
            experiment = client.create_experiment("tests", str(root / "mlruns"))
        else:
            experiment = client.get_experiment_by_name("tests").experiment_id
        mp.setenv("MLFLOW_EXPERIMENT_ID", experiment)
        yield experiment


@pytest.fixture
def store(tmp_path):
    """An experiment of this test's store (conftest's copy of the migrated store),
    its artifacts in the test's folder; its id."""
    return MlflowClient().create_experiment("tests", artifact_location=str(tmp_path / "mlruns"))


def linked_versions(experiment, metrics, name="credit-rf", validation="passed", on_model=True):
    """An ensemble version and a surrogate version linked by tags, metrics logged.

    Metrics go to the surrogate's logged model (by model_id) or, with ``on_model=False``,
    to its run only.
    """
    client = MlflowClient()
    with mlflow.start_run(experiment_id=experiment) as run:
        ensemble = mlflow.initialize_logged_model(name="ensemble", experiment_id=experiment)
        surrogate = mlflow.initialize_logged_model(name="surrogate", experiment_id=experiment)
        if on_model:
            mlflow.log_metrics(metrics, model_id=surrogate.model_id)
        else:
            mlflow.log_metrics(metrics)
    for registered in (name, f"{name}-surrogate"):
        if not client.search_registered_models(name_filter(registered)):
            client.create_registered_model(registered)
    ens = client.create_model_version(
        name, f"models:/{ensemble.model_id}", run.info.run_id, model_id=ensemble.model_id
    )
    sur = client.create_model_version(
        f"{name}-surrogate",
        f"models:/{surrogate.model_id}",
        run.info.run_id,
        model_id=surrogate.model_id,
        tags={
            "governance.surrogate_of": f"models:/{name}/{ens.version}",
            "governance.validation": validation,
        },
    )
    client.set_model_version_tag(
        name, ens.version, "governance.surrogate", f"models:/{name}-surrogate/{sur.version}"
    )
    return f"models:/{name}/{ens.version}"


@pytest.fixture
def short_sqlite_lock_wait(monkeypatch):
    """MLflow's sessions on SQLite wait 1 s instead of 20 s for another process's lock
    (its ``PRAGMA busy_timeout = 20000`` in every session, rewritten): a locked-store
    test takes the same code path in a twentieth of the time."""
    from mlflow.store.db import utils

    text = utils.sql.text
    monkeypatch.setattr(
        utils.sql, "text", lambda clause: text(clause.replace("= 20000;", "= 1000;"))
    )


def register_sklearn(model, name, experiment_id=None, **log_options):
    """Log a fitted scikit-learn model in a new run and register it as ``name``.

    The model is saved with skops, trusting sklearn's tree type, with scikit-learn as its
    only pip requirement (MLflow would otherwise load the model in a child process to
    infer them: about 3 s of CPU); ``log_options`` go to :func:`mlflow.sklearn.log_model`.
    Returns ``model``.
    """
    with mlflow.start_run(experiment_id=experiment_id):
        mlflow.sklearn.log_model(
            model,
            name="model",
            registered_model_name=name,
            skops_trusted_types=["sklearn.tree._tree.Tree"],
            **{"pip_requirements": ["scikit-learn"]} | log_options,
        )
    return model


def log_skops(model, experiment_id=None, name=None):
    """Log a fitted scikit-learn model (a Pipeline with encoders, HistGradientBoosting)
    in a new run with skops, trusting every type the product's loader trusts
    (``flavors.inputs.SKOPS_TRUSTED_TYPES``), scikit-learn its only requirement, and
    register it as ``name`` (None: not registered). Returns MLflow's ``ModelInfo``."""
    from miret_governance.flavors.store.inputs import SKOPS_TRUSTED_TYPES

    with mlflow.start_run(experiment_id=experiment_id):
        return mlflow.sklearn.log_model(
            model,
            name="model",
            registered_model_name=name,
            serialization_format="skops",
            skops_trusted_types=list(SKOPS_TRUSTED_TYPES),
            pip_requirements=["scikit-learn"],
        )


def register_rf(frame, features, name, n_estimators, experiment_id=None):
    """Fit a MinMaxScaler + depth-2 random forest on ``frame[features]`` -> ``frame["label"]``
    and register it with scikit-learn as its only pip requirement. Returns the Pipeline."""
    model = make_pipeline(
        MinMaxScaler(),
        RandomForestClassifier(n_estimators=n_estimators, max_depth=2, random_state=0),
    ).fit(frame[features], frame["label"])
    return register_sklearn(
        model, name, experiment_id=experiment_id, pip_requirements=["scikit-learn"]
    )


def register_wisconsin_rf(breast_cancer, features, rows, n_estimators, name="credit-rf"):
    """The first ``rows`` Wisconsin rows of ``features`` with their label, written to
    ``data.csv`` in the working folder, and a forest of them registered as ``name``."""
    X, y = breast_cancer
    frame = X[features].iloc[:rows].assign(label=y.iloc[:rows].to_numpy())
    frame.to_csv("data.csv", index=False)
    register_rf(frame, features, name, n_estimators=n_estimators)
    return frame


def interruptible_cli(*args) -> list:
    """The command line of ``govern *args`` in a child the test will interrupt: SIGINT
    raises KeyboardInterrupt as at a terminal, even when the runner started the tests in
    the background (which makes its children ignore SIGINT)."""
    script = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from miret_governance.cli.app import main; sys.argv = ['govern'] + sys.argv[1:]; main()"
    )
    return [sys.executable, "-c", script, *args]
