"""The store of the bad-input campaign (issue 8): its models, and a snapshot of it.

:func:`build_campaign` registers small models in a SQLite MLflow store: a MinMaxScaler +
random forest Pipeline (explained once), XGBoost, a regressor, a 3-class forest, a
non-tree model, a pickled forest carrying a payload, an XGBoost model whose MLmodel names
a class shipped in its ``code/`` folder. It also leaves the registry states an attacker
could: an edited surrogate artifact, a forged validation tag, a fake surrogate linked by
tags. :class:`StoreSnapshot` is what a refusal must leave unchanged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import ViewType
from processes import free_port

FEATURES = ["mean radius", "mean texture", "mean perimeter", "mean smoothness", "worst area"]
RECORDED_TAG_PREFIXES = ("governance.last_gate", "governance.promotion.")
"""Tags a gate or promotion decision writes on the ensemble version by design."""


# ---------------------------------------------------------------------- the store
@dataclass(frozen=True)
class StoreSnapshot:
    """What a refusal must leave alone: registry versions, tags, aliases, models, runs."""

    versions: dict
    version_tags: dict
    model_tags: dict
    aliases: dict
    logged_models: frozenset
    runs: dict

    @classmethod
    def take(cls, uri: str) -> StoreSnapshot:
        """Read the whole store at ``uri`` (tracking and registry)."""
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        models = client.search_registered_models(max_results=1000)
        versions = client.search_model_versions(max_results=10000)
        experiments = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
        runs = client.search_runs(experiments, run_view_type=ViewType.ALL, max_results=50000)
        logged = client.search_logged_models(experiments, max_results=1000) if experiments else []
        return cls(
            versions={f"{v.name}/{v.version}": (v.status, v.source) for v in versions},
            version_tags={f"{v.name}/{v.version}": dict(v.tags) for v in versions},
            model_tags={m.name: dict(m.tags) for m in models},
            aliases={f"{m.name}@{a}": str(n) for m in models for a, n in m.aliases.items()},
            logged_models=frozenset(m.model_id for m in logged),
            runs={r.info.run_id: r.info.status for r in runs},
        )

    def changes(self, later: StoreSnapshot, records: str = "nothing") -> list[str]:
        """What changed from this snapshot to ``later`` beyond what ``records`` allows.

        Parameters
        ----------
        later : StoreSnapshot
        records : {"nothing", "runs", "gate"}
            ``runs``: new finished runs may appear (an explain run that recorded its
            failed validation); ``gate``: also ``governance.last_gate*`` and
            ``governance.promotion.*`` tags on versions (a recorded gate decision).
            Versions, aliases, logged models and all other tags never change, and no
            run is ever left RUNNING.
        """
        found = []
        for key in sorted(set(self.versions) | set(later.versions)):
            if self.versions.get(key) != later.versions.get(key):
                found.append(
                    f"version {key}: {self.versions.get(key)} -> {later.versions.get(key)}"
                )
        for key in sorted(set(self.version_tags) & set(later.version_tags)):
            before, after = self.version_tags[key], later.version_tags[key]
            for tag in sorted(set(before) | set(after)):
                allowed = records == "gate" and tag.startswith(RECORDED_TAG_PREFIXES)
                if before.get(tag) != after.get(tag) and not allowed:
                    found.append(f"tag {tag} on {key}: {before.get(tag)!r} -> {after.get(tag)!r}")
        for name in sorted(set(self.model_tags) | set(later.model_tags)):
            if self.model_tags.get(name) != later.model_tags.get(name):
                found.append(
                    f"registered model {name}: {self.model_tags.get(name)} -> "
                    f"{later.model_tags.get(name)}"
                )
        if self.aliases != later.aliases:
            found.append(f"aliases: {self.aliases} -> {later.aliases}")
        new_models = later.logged_models - self.logged_models
        if new_models:
            found.append(f"{len(new_models)} new logged model(s)")
        new_runs = {r: s for r, s in later.runs.items() if r not in self.runs}
        if new_runs and records == "nothing":
            found.append(f"{len(new_runs)} new run(s)")
        running = [r for r, s in later.runs.items() if s == "RUNNING"]
        if running:
            found.append(f"{len(running)} run(s) left RUNNING")
        return found


# ---------------------------------------------------------------------- the models
class Payload:
    """Unpickling this object writes ``marker``: a stand-in for any code an attacker runs."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('payload ran')",)


@dataclass
class Campaign:
    """A store with the campaign's registered models, and the values cases refer to.

    ``places`` fills the ``{placeholders}`` of a case's arguments.
    """

    root: Path
    uri: str
    experiment_id: str
    frame: pd.DataFrame
    places: dict = field(default_factory=dict)

    @contextlib.contextmanager
    def active(self):
        """MLflow pointed at this store (environment and process-wide URIs), then restored."""
        values = {
            "MLFLOW_TRACKING_URI": self.uri,
            "MLFLOW_REGISTRY_URI": self.uri,
            "MLFLOW_EXPERIMENT_ID": self.experiment_id,
            "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
        }
        saved = {k: os.environ.get(k) for k in values}
        os.environ.update(values)
        mlflow.set_tracking_uri(None)
        mlflow.set_registry_uri(None)
        try:
            yield self
        finally:
            mlflow.set_tracking_uri(None)
            mlflow.set_registry_uri(None)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _pipeline(model):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler

    return make_pipeline(MinMaxScaler(), model)


def _log_sklearn(model, name, **options):
    """Log and register a scikit-learn model (requirements given: MLflow would otherwise
    infer them in a subprocess, seconds per model)."""
    with mlflow.start_run():
        return mlflow.sklearn.log_model(
            model,
            name="model",
            registered_model_name=name,
            pip_requirements=["scikit-learn"],
            **options,
        )


def _log_skops(model, name):
    return _log_sklearn(model, name, skops_trusted_types=["sklearn.tree._tree.Tree"])


def _register_again(client: MlflowClient, info, name: str) -> str:
    """A new registered model ``name`` whose version 1 is the logged model of ``info``."""
    client.create_registered_model(name)
    client.create_model_version(
        name, f"models:/{info.model_id}", info.run_id, model_id=info.model_id
    )
    return f"models:/{name}/1"


def _local_artifacts(client: MlflowClient, model_id: str) -> Path:
    location = client.get_logged_model(model_id).artifact_location
    return Path(location.removeprefix("file://"))


def _evil_xgboost(client, frame, marker: Path, root: Path) -> None:
    """XGBoost whose MLmodel names ``evil.XGBClassifier``, with ``evil.py`` in ``code/``."""
    import yaml
    from xgboost import XGBClassifier

    evil = root / "evil.py"
    evil.write_text(
        f"open({str(marker)!r}, 'w').write('imported')\nfrom xgboost import XGBClassifier\n"
    )
    model = XGBClassifier(n_estimators=4, max_depth=2).fit(frame[FEATURES], frame["label"])
    with mlflow.start_run():
        info = mlflow.xgboost.log_model(
            model,
            name="model",
            code_paths=[str(evil)],
            registered_model_name="campaign-evil",
            pip_requirements=["xgboost"],
        )
    mlmodel = _local_artifacts(client, info.model_id) / "MLmodel"
    conf = yaml.safe_load(mlmodel.read_text())
    conf["flavors"]["xgboost"]["model_class"] = "evil.XGBClassifier"
    conf["flavors"]["python_function"]["code"] = "code"
    mlmodel.write_text(yaml.safe_dump(conf))


def _edited_surrogate(client, rf, surrogate_model_id: str) -> None:
    """``campaign-edited/1`` (the forest again) linked to a copy of its real surrogate
    whose ``surrogate.json`` was edited: 1e308 coefficients, same metrics."""
    import json

    from miret_governance.flavors.store.registry import SURROGATE_OF_TAG, SURROGATE_TAG

    ensemble = _register_again(client, rf, "campaign-edited")
    original = client.get_logged_model(surrogate_model_id)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "model"
        shutil.copytree(_local_artifacts(client, surrogate_model_id), local)
        path = local / "surrogate.json"
        data = json.loads(path.read_text())
        data["tree"]["coef"] = [[1e308] * len(row) for row in data["tree"]["coef"]]
        path.write_text(json.dumps(data))
        with mlflow.start_run() as run:
            copy = client.create_logged_model(
                original.experiment_id, name="surrogate", source_run_id=run.info.run_id
            )
            client.log_model_artifacts(copy.model_id, str(local))
            client.finalize_logged_model(copy.model_id, "READY")
            mlflow.log_metrics({m.key: m.value for m in original.metrics}, model_id=copy.model_id)
    client.create_registered_model("campaign-edited-surrogate")
    tags = dict(client.get_model_version("campaign-rf-surrogate", "1").tags)
    version = client.create_model_version(
        "campaign-edited-surrogate",
        f"models:/{copy.model_id}",
        run.info.run_id,
        model_id=copy.model_id,
        tags={**tags, SURROGATE_OF_TAG: ensemble},
    )
    client.set_model_version_tag(
        "campaign-edited",
        "1",
        SURROGATE_TAG,
        f"models:/campaign-edited-surrogate/{version.version}",
    )


def _forged_validation(client, rf, frame: pd.DataFrame, root: Path) -> None:
    """``campaign-forged/1`` explained on out-of-range data with ``allow_invalid``; then
    the surrogate version and its run are hand-tagged ``governance.validation=passed``."""
    from miret_governance.flavors.explain.explain import explain_model_version
    from miret_governance.flavors.store.registry import VALIDATION_TAG

    uri = _register_again(client, rf, "campaign-forged")
    shifted = frame.copy()
    shifted.loc[shifted.index[:20], FEATURES[0]] *= 10
    shifted.to_csv(root / "out_of_range.csv", index=False)
    result = explain_model_version(
        uri,
        root / "out_of_range.csv",
        target="label",
        time_limit=2,
        allow_invalid=True,
        min_test_rows=1,
    )
    assert result.validation == "failed", result.validation
    client.set_model_version_tag(result.registered_name, result.version, VALIDATION_TAG, "passed")
    client.set_tag(result.run_id, VALIDATION_TAG, "passed")


def _fake_surrogate(client, rf, frame: pd.DataFrame) -> None:
    """``campaign-fake/1`` linked by tags to a LogisticRegression version whose run has
    metrics named like a surrogate's (perfect fidelity, one feature)."""
    from sklearn.linear_model import LogisticRegression

    from miret_governance.flavors.store.registry import (
        SURROGATE_OF_TAG,
        SURROGATE_TAG,
        VALIDATION_TAG,
    )

    ensemble = _register_again(client, rf, "campaign-fake")
    model = LogisticRegression().fit(frame[FEATURES], frame["label"])
    info = _log_sklearn(model, "campaign-fake-surrogate")
    metrics = {"test_fidelity": 1.0, "train_fidelity": 1.0, "n_features_used": 1, "solver.gap": 0}
    mlflow.log_metrics(metrics, model_id=info.model_id, run_id=info.run_id)
    client.set_model_version_tag("campaign-fake-surrogate", "1", SURROGATE_OF_TAG, ensemble)
    client.set_model_version_tag("campaign-fake-surrogate", "1", VALIDATION_TAG, "passed")
    client.set_model_version_tag(
        "campaign-fake", "1", SURROGATE_TAG, "models:/campaign-fake-surrogate/1"
    )


def build_campaign(root: Path, migrated_store: Path | None = None) -> Campaign:
    """Register the campaign's models in a new SQLite store under ``root``.

    Parameters
    ----------
    root : Path
        An empty folder; the store, artifacts, data and case inputs go there.
    migrated_store : Path, optional
        An empty, migrated ``mlflow.db`` to copy (saves the schema migrations).
    """
    from sklearn.datasets import load_breast_cancer
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
    from sklearn.linear_model import LogisticRegression
    from xgboost import XGBClassifier

    from miret_governance.flavors.explain.explain import explain_model_version
    from miret_governance.flavors.store.registry import model_id_of

    root.mkdir(parents=True, exist_ok=True)
    if migrated_store is not None:
        from mlflow_store import copy_store

        copy_store(migrated_store, root / "mlflow.db")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.create_experiment("campaign", artifact_location=str(root / "mlruns"))
    client.create_experiment("governance-gates", artifact_location=str(root / "gate-runs"))
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    frame = X[FEATURES].iloc[:300].assign(label=y.iloc[:300].to_numpy())
    frame.to_csv(root / "data.csv", index=False)
    campaign = Campaign(root=root, uri=uri, experiment_id=experiment, frame=frame)
    pickle_marker = root / "pickle-payload-ran"
    evil_marker = root / "evil-module-imported"
    with campaign.active():
        client = MlflowClient()
        forest = _pipeline(RandomForestClassifier(n_estimators=5, max_depth=2, random_state=0))
        forest.fit(frame[FEATURES], frame["label"])
        rf = _log_skops(forest, "campaign-rf")
        explained = explain_model_version(
            "models:/campaign-rf/1",
            root / "data.csv",
            target="label",
            time_limit=2,
            min_test_rows=1,
        )
        surrogate = client.get_model_version(explained.registered_name, explained.version)

        xgb = XGBClassifier(n_estimators=4, max_depth=2).fit(frame[FEATURES], frame["label"])
        with mlflow.start_run():
            mlflow.xgboost.log_model(
                xgb,
                name="model",
                registered_model_name="campaign-xgb",
                pip_requirements=["xgboost"],
            )
        regressor = RandomForestRegressor(n_estimators=3, max_depth=2, random_state=0)
        _log_skops(_pipeline(regressor).fit(frame[FEATURES], frame["label"]), "campaign-regressor")
        two_outputs = np.column_stack([frame["label"], np.arange(len(frame)) % 3])
        multioutput = RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0)
        _log_skops(_pipeline(multioutput).fit(frame[FEATURES], two_outputs), "campaign-multioutput")
        _log_sklearn(
            _pipeline(LogisticRegression()).fit(frame[FEATURES], frame["label"]),
            "campaign-logistic",
        )
        pickled = _pipeline(RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0))
        pickled.fit(frame[FEATURES], frame["label"])
        pickled.steps[-1][1].payload = Payload(pickle_marker)
        _log_sklearn(pickled, "campaign-pickle", serialization_format="cloudpickle")
        _evil_xgboost(client, frame, evil_marker, root)
        _edited_surrogate(client, rf, model_id_of(surrogate))
        _forged_validation(client, rf, frame, root)
        _fake_surrogate(client, rf, frame)
    campaign.places.update(
        data=str(root / "data.csv"),
        uri=uri,
        pickle_marker=str(pickle_marker),
        evil_marker=str(evil_marker),
        closed_port=str(free_port()),  # nothing listens there
    )
    return campaign
