"""The bad-input campaign of issue 8: one table of refusals run against a real store.

:func:`build_campaign` registers small models in a SQLite MLflow store (a MinMaxScaler +
random forest Pipeline, XGBoost, a regressor, a 3-class forest, a non-tree model, a
pickled forest carrying a payload, an XGBoost model whose MLmodel names a class shipped
in its ``code/`` folder) and prepares the registry states an attacker could leave: an
edited surrogate artifact, a forged validation tag, a fake surrogate linked by tags.
:data:`CASES` lists what ``govern`` is asked and how it must refuse: the exit code, a
regular expression the message must match, and what the store may record. Every case
runs through :func:`run_case`, which snapshots the store before and after.

``tests/test_campaign.py`` asserts every case; ``examples/campaign_table.py`` prints
the same cases as a Markdown table.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import ViewType

ROOT = Path(__file__).resolve().parents[1]
FEATURES = ["mean radius", "mean texture", "mean perimeter", "mean smoothness", "worst area"]
LENIENT_POLICY = "[gates]\nmin_fidelity = 0.0\nmax_features = 100\nrequire_validation_pass = true\n"
RECORDED_TAG_PREFIXES = ("governance.gate.", "governance.promotion.")
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
            failed validation); ``gate``: also ``governance.gate.*`` and
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

    from flavors.registry import SURROGATE_OF_TAG, SURROGATE_TAG

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
    from flavors.explain import explain_model_version
    from flavors.registry import VALIDATION_TAG

    uri = _register_again(client, rf, "campaign-forged")
    shifted = frame.copy()
    shifted.loc[shifted.index[:20], FEATURES[0]] *= 10
    shifted.to_csv(root / "out_of_range.csv", index=False)
    result = explain_model_version(
        uri, root / "out_of_range.csv", target="label", time_limit=2, allow_invalid=True
    )
    assert result.validation == "failed", result.validation
    client.set_model_version_tag(result.registered_name, result.version, VALIDATION_TAG, "passed")
    client.set_tag(result.run_id, VALIDATION_TAG, "passed")


def _fake_surrogate(client, rf, frame: pd.DataFrame) -> None:
    """``campaign-fake/1`` linked by tags to a LogisticRegression version whose run has
    metrics named like a surrogate's (perfect fidelity, one feature)."""
    from sklearn.linear_model import LogisticRegression

    from flavors.registry import SURROGATE_OF_TAG, SURROGATE_TAG, VALIDATION_TAG

    ensemble = _register_again(client, rf, "campaign-fake")
    model = LogisticRegression().fit(frame[FEATURES], frame["label"])
    info = _log_sklearn(model, "campaign-fake-surrogate")
    metrics = {"test_fidelity": 1.0, "train_fidelity": 1.0, "n_features_used": 1, "mip_gap": 0}
    mlflow.log_metrics(metrics, model_id=info.model_id, run_id=info.run_id)
    client.set_model_version_tag("campaign-fake-surrogate", "1", SURROGATE_OF_TAG, ensemble)
    client.set_model_version_tag("campaign-fake-surrogate", "1", VALIDATION_TAG, "passed")
    client.set_model_version_tag(
        "campaign-fake", "1", SURROGATE_TAG, "models:/campaign-fake-surrogate/1"
    )


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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

    from flavors.explain import explain_model_version
    from flavors.registry import model_id_of

    root.mkdir(parents=True, exist_ok=True)
    if migrated_store is not None:
        shutil.copy(migrated_store, root / "mlflow.db")
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
            "models:/campaign-rf/1", root / "data.csv", target="label", time_limit=2
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
        three = np.arange(len(frame)) % 3
        multiclass = RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0)
        _log_skops(_pipeline(multiclass).fit(frame[FEATURES], three), "campaign-multiclass")
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
        closed_port=str(_closed_port()),
    )
    return campaign


# ---------------------------------------------------------------------- the cases
def _csv(transform: Callable[[pd.DataFrame], pd.DataFrame], name: str = "input.csv"):
    """A ``prepare`` step: write ``transform(campaign data)`` as CSV to ``{case}/name``."""

    def prepare(folder: Path, campaign: Campaign) -> None:
        transform(campaign.frame.copy()).to_csv(folder / name, index=False)

    return prepare


def _bytes(content: bytes, name: str):
    def prepare(folder: Path, campaign: Campaign) -> None:
        (folder / name).write_bytes(content)

    return prepare


def _text(transform: Callable[[str], str], name: str = "input.csv"):
    """A ``prepare`` step: the campaign data as CSV text, transformed, to ``{case}/name``."""

    def prepare(folder: Path, campaign: Campaign) -> None:
        text = campaign.frame.to_csv(index=False)
        (folder / name).write_text(transform(text), encoding="utf-8")

    return prepare


def _policy(text: str):
    return _bytes(text.encode(), "policy.toml")


def _set(column, rows, value):
    def transform(frame):
        frame[column] = frame[column].astype(object)
        frame.loc[frame.index[rows], column] = value
        return frame

    return transform


def _lenient_policy(folder: Path, campaign: Campaign) -> None:
    (folder / "policy.toml").write_text(LENIENT_POLICY)


def _duplicated(frame):
    frame.insert(1, "mean radius ", frame["mean radius"] * 2)
    return frame.rename(columns={"mean radius ": "mean radius"})


def _latin1(folder: Path, campaign: Campaign) -> None:
    frame = campaign.frame.rename(columns={"mean texture": "mean texture é"})
    frame.to_csv(folder / "input.csv", index=False, encoding="latin-1")


@dataclass(frozen=True)
class Case:
    """One bad input and the refusal it must get.

    Attributes
    ----------
    name : str
    area : str
        data, model, parameters, uri, policy, artifacts or faults.
    argv : tuple of str
        ``govern`` arguments; ``{case}`` is the case's folder, other placeholders come
        from :attr:`Campaign.places`.
    exit_code : int
        2 an error, 1 a failed validation or gate.
    message : str
        Regular expression the output must match (it names the problem).
    records : str
        What the store may record: see :meth:`StoreSnapshot.changes`.
    prepare : callable, optional
        ``prepare(folder, campaign)`` writes the case's input files.
    marker : str
        Placeholder of a file whose existence proves code from an artifact ran.
    subprocess : bool
        Run ``python -m cli`` in a subprocess (network faults), not in-process.
    """

    name: str
    area: str
    argv: tuple
    exit_code: int
    message: str
    records: str = "nothing"
    prepare: Callable | None = None
    marker: str = ""
    subprocess: bool = False


def _explain(*extra, model="models:/campaign-rf/1", data="{case}/input.csv", target="label"):
    argv = ["explain", "--model-uri", model, "--data", data, "--time-limit", "2"]
    return tuple(argv + (["--target", target] if target else []) + list(extra))


def _validate(*extra, model="models:/campaign-rf/1", data="{case}/input.csv", target="label"):
    argv = ["validate", "--model-uri", model, "--data", data]
    return tuple(argv + (["--target", target] if target else []) + list(extra))


def _gate(model="models:/campaign-rf/1", policy="{case}/policy.toml", command="gate"):
    argv = [command, "--model-uri", model, "--policy", policy]
    return tuple(argv + (["--alias", "champion"] if command == "promote" else []))


GOOD = "{data}"
_OVERSIZE = "[gates]\nmin_fidelity = 0.9\n" + "# padding\n" * 10_000

# One case per entry, laid out as a table (ruff format would spread each over 8 lines).
# fmt: off
CASES = (
    # ------------------------------------------------------------------ data
    Case("missing column", "data", _explain(), 1, r"worst area",
         "runs", _csv(lambda f: f.drop(columns=["worst area"]))),
    Case("renamed column", "data", _explain(), 1, r"mean texture",
         "runs", _csv(lambda f: f.rename(columns={"mean texture": "texture"}))),
    Case("duplicated column", "data", _explain(), 2, r"duplicate column.*mean radius",
         prepare=_csv(_duplicated)),
    Case("duplicated column (validate)", "data", _validate(), 2,
         r"duplicate column.*mean radius", prepare=_csv(_duplicated)),
    Case("NaN feature", "data", _explain(), 1, r"mean perimeter.*(null|missing|NaN)",
         "runs", _csv(_set("mean perimeter", [3, 7], np.nan))),
    Case("inf feature", "data", _explain(), 1, r"mean smoothness.*(inf|finite)",
         "runs", _csv(_set("mean smoothness", [5], np.inf))),
    Case("3 classes", "data", _explain(), 1, r"label.*3 classes",
         "runs", _csv(_set("label", [0, 1, 2], 2))),
    Case("3 classes (validate)", "data", _validate(), 1, r"label.*3 classes",
         prepare=_csv(_set("label", [0, 1, 2], 2))),
    Case("string labels", "data", _explain(), 1, r"label.*'(yes|no)'.*classes",
         "runs", _csv(lambda f: f.assign(label=np.where(f["label"] == 1, "yes", "no")))),
    Case("string labels (validate)", "data", _validate(), 1, r"label.*'(yes|no)'.*classes",
         prepare=_csv(lambda f: f.assign(label=np.where(f["label"] == 1, "yes", "no")))),
    Case("mixed labels", "data", _explain(), 1, r"label.*maybe",
         "runs", _csv(_set("label", [4], "maybe"))),
    Case("float labels 0.5", "data", _explain(), 1, r"label.*0\.5.*classes",
         "runs", _csv(lambda f: f.assign(label=f["label"] * 0.5))),
    Case("label missing values", "data", _explain(), 1, r"label.*(missing|null)",
         "runs", _csv(_set("label", [8], np.nan))),
    Case("non-UTF-8 file", "data", _explain(), 2, r"UTF-8", prepare=_latin1),
    Case("non-UTF-8 file (validate)", "data", _validate(), 2, r"UTF-8", prepare=_latin1),
    Case("wrong delimiter", "data", _explain(), 2, r"(delimiter|single column).*",
         prepare=_text(lambda t: t.replace(",", ";"))),
    Case("directory as data", "data", _explain(data="{case}"), 2, r"is a directory"),
    Case("empty file", "data", _explain(), 2, r"empty", prepare=_bytes(b"", "input.csv")),
    Case("header only", "data", _explain(), 2, r"\b0 rows|no (data )?rows",
         prepare=_text(lambda t: t.splitlines()[0] + "\n")),
    Case("missing file", "data", _explain(data="{case}/nowhere.csv"), 2,
         r"nowhere\.csv.*(no such file|does not exist)"),
    Case("missing label column", "data", _explain(target="outcome", data=GOOD), 2,
         r"no label column 'outcome'"),
    Case("label value with markup [/]", "data", _explain(), 1, re.escape("'[/]'"),
         "runs", _csv(_set("label", [2], "[/]"))),
    Case("mathtext target name", "data", _explain(target=r"$\frac{a$", data=GOOD), 2,
         re.escape(r"'$\\frac{a$'")),
    Case("test data missing column", "data", _explain("--test-data", "{case}/test.csv",
         data=GOOD), 1, r"worst area", "runs",
         _csv(lambda f: f.drop(columns=["worst area"]), "test.csv")),
    # ------------------------------------------------------------------ model
    Case("regressor", "model", _explain(model="models:/campaign-regressor/1", data=GOOD), 2,
         r"(?i)regress"),
    Case("multiclass model", "model", _explain(model="models:/campaign-multiclass/1",
         data=GOOD, target=""), 2, r"(?i)(binary|two classes|3 classes)"),
    Case("non-tree model", "model", _explain(model="models:/campaign-logistic/1", data=GOOD),
         2, r"LogisticRegression"),
    Case("pickled model, payload", "model", _explain(model="models:/campaign-pickle/1",
         data=GOOD), 2, r"(?s)pickle.*--trust-pickle", marker="pickle_marker"),
    Case("pickled model (validate)", "model", _validate(model="models:/campaign-pickle/1",
         data=GOOD), 2, r"(?s)pickle.*--trust-pickle", marker="pickle_marker"),
    Case("XGBoost with evil model_class", "model", _explain(
         model="models:/campaign-evil/1", data=GOOD, target="outcome"), 2,
         r"outcome|model_class|evil", marker="evil_marker"),
    Case("XGBoost with evil model_class (validate)", "model", _validate(
         model="models:/campaign-evil/1"), 1, r"worst area", marker="evil_marker",
         prepare=_csv(lambda f: f.drop(columns=["worst area"]))),
    Case("show an ensemble", "model", ("show", "--model-uri", "models:/campaign-rf/1"), 2,
         r"not a surrogate"),
    # ------------------------------------------------------------------ parameters
    Case("--alpha nan", "parameters", _explain("--alpha", "nan", data=GOOD), 2, r"alpha"),
    Case("negative --time-limit", "parameters", _explain("--time-limit", "-5", data=GOOD),
         2, r"time.limit"),
    Case("--depth 0", "parameters", _explain("--depth", "0", data=GOOD), 2, r"depth"),
    Case("--depth -1", "parameters", _explain("--depth", "-1", data=GOOD), 2, r"depth"),
    Case("--max-rows 0", "parameters", _explain("--max-rows", "0", data=GOOD), 2,
         r"max.rows"),
    Case("--gamma-percentile 150", "parameters",
         _explain("--gamma-percentile", "150", data=GOOD), 2, r"gamma"),
    Case("unknown --solver", "parameters", _explain("--solver", "cplex", data=GOOD), 2,
         r"cplex"),
    Case("--registered-name a/b", "parameters",
         _explain("--registered-name", "a/b", data=GOOD), 2, r"a/b"),
    Case("--registered-name with quotes", "parameters",
         _explain("--registered-name", "o'neil\"s", data=GOOD), 2, r"quote"),
    Case("three --class-names", "parameters",
         _explain("--class-names", "a,b,c", data=GOOD), 2, r"class names"),
    Case("bad --alias", "parameters", ("promote", "--model-uri", "models:/campaign-rf/1",
         "--alias", "v1"), 2, r"alias 'v1'"),
    # ------------------------------------------------------------------ URIs
    Case("URI without version", "uri", _explain(model="models:/campaign-rf", data=GOOD), 2,
         re.escape("models:/<name>/<version>")),
    Case("unknown alias", "uri", _explain(model="models:/campaign-rf@nosuch", data=GOOD), 2,
         r"nosuch"),
    Case("unknown version", "uri", _explain(model="models:/campaign-rf/99", data=GOOD), 2,
         r"campaign-rf/99.*not found"),
    Case("not a models: URI", "uri", _explain(model="runs:/abc/model", data=GOOD), 2,
         r"runs:/abc/model"),
    Case("quotes in model name", "uri", _explain(model="models:/o'neil\"s/1", data=GOOD), 2,
         r"not found|quote"),
    Case("gate without version", "uri", ("gate", "--model-uri", "models:/campaign-rf"), 2,
         re.escape("models:/<name>/<version>")),
    Case("show unknown alias", "uri",
         ("show", "--model-uri", "models:/campaign-rf-surrogate@nosuch"), 2, r"nosuch"),
    Case("gate an unexplained version", "uri", ("gate", "--model-uri", "models:/campaign-xgb/1"),
         2, r"no linked surrogate"),
    # ------------------------------------------------------------------ policy
    Case("oversize policy", "policy", _gate(), 2, r"larger than", prepare=_policy(_OVERSIZE)),
    Case("/dev/zero policy", "policy", _gate(policy="/dev/zero"), 2, r"not a regular file"),
    Case("directory policy", "policy", _gate(policy="{case}"), 2, r"directory"),
    Case("missing policy", "policy", _gate(policy="{case}/none.toml"), 2, r"none\.toml"),
    Case("malformed TOML", "policy", _gate(), 2, r"(?i)toml",
         prepare=_policy("[gates\nmin_fidelity = 0.9\n")),
    Case("non-UTF-8 policy", "policy", _gate(), 2, r"(?i)utf-8|toml|decode",
         prepare=_bytes(b"[gates]\n# caf\xe9\nmin_fidelity = 0.9\n", "policy.toml")),
    Case("unknown gate", "policy", _gate(), 2, r"unknown gates.*min_fidelty",
         prepare=_policy("[gates]\nmin_fidelty = 0.9\n")),
    Case("unknown top-level key", "policy", _gate(), 2, r"unknown top-level keys",
         prepare=_policy("min_fidelity = 0.9\n")),
    Case("wrong type", "policy", _gate(), 2, r"min_fidelity = 'high'",
         prepare=_policy('[gates]\nmin_fidelity = "high"\n')),
    Case("out of range", "policy", _gate(), 2, r"min_fidelity = 1\.5",
         prepare=_policy("[gates]\nmin_fidelity = 1.5\n")),
    Case("bad policy on promote", "policy", _gate(command="promote"), 2, r"max_features",
         prepare=_policy("[gates]\nmax_features = -1\n")),
    # ------------------------------------------------------------------ artifacts
    Case("edited surrogate.json (show)", "artifacts",
         ("show", "--model-uri", "models:/campaign-edited-surrogate/1"), 2, r"digest"),
    Case("edited surrogate.json (gate)", "artifacts", _gate("models:/campaign-edited/1"), 2,
         r"digest", "gate", _lenient_policy),
    Case("forged validation tag (gate)", "artifacts", _gate("models:/campaign-forged/1"), 1,
         r"FAIL\W+require_validation_pass", "gate", _lenient_policy),
    Case("forged validation tag (promote)", "artifacts",
         _gate("models:/campaign-forged/1", command="promote"), 1,
         r"FAIL\W+require_validation_pass", "gate", _lenient_policy),
    Case("fake surrogate linked by tags (gate)", "artifacts", _gate("models:/campaign-fake/1"),
         2, r"(?i)not a (miret|surrogate)|provenance", "gate", _lenient_policy),
    Case("fake surrogate linked by tags (promote)", "artifacts",
         _gate("models:/campaign-fake/1", command="promote"), 2,
         r"(?i)not a (miret|surrogate)|provenance", "gate", _lenient_policy),
    # ------------------------------------------------------------------ faults
    Case("closed port (explain)", "faults", _explain(
         "--tracking-uri", "http://127.0.0.1:{closed_port}", data=GOOD), 2, r"unreachable",
         subprocess=True),
    Case("closed port (show)", "faults", ("show", "--model-uri", "models:/campaign-rf-surrogate/1",
         "--tracking-uri", "http://127.0.0.1:{closed_port}"), 2, r"unreachable",
         subprocess=True),
    Case("closed port (gate)", "faults", ("gate", "--model-uri", "models:/campaign-rf/1",
         "--tracking-uri", "http://127.0.0.1:{closed_port}"), 2, r"unreachable",
         subprocess=True),
)
# fmt: on


# ---------------------------------------------------------------------- running
@dataclass(frozen=True)
class Outcome:
    """What one case did: exit code, output, store changes, whether artifact code ran."""

    exit_code: int
    output: str
    changes: list
    code_ran: bool

    def message(self) -> str:
        """The first error line of the output (or its last line)."""
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("error:")]
        return (errors or lines or [""])[0 if errors else -1]


def _subprocess(argv: list[str], campaign: Campaign, folder: Path) -> tuple[int, str]:
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": campaign.uri,
        "MLFLOW_REGISTRY_URI": campaign.uri,
        "MLFLOW_EXPERIMENT_ID": campaign.experiment_id,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "COLUMNS": "200",
    }
    done = subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def run_case(case: Case, campaign: Campaign) -> Outcome:
    """Run one case against the campaign's store, snapshotting the store around it."""
    from typer.testing import CliRunner

    from cli.app import app

    folder = campaign.root / "cases" / re.sub(r"\W+", "-", case.name).strip("-")
    folder.mkdir(parents=True, exist_ok=True)
    if case.prepare is not None:
        case.prepare(folder, campaign)
    places = {"case": str(folder), **campaign.places}
    argv = [re.sub(r"\{(\w+)\}", lambda m: places.get(m[1], m[0]), arg) for arg in case.argv]
    marker = Path(campaign.places[case.marker]) if case.marker else None
    if marker is not None:
        marker.unlink(missing_ok=True)
    before = StoreSnapshot.take(campaign.uri)
    with campaign.active():
        if case.subprocess:
            code, output = _subprocess(argv, campaign, folder)
        else:
            result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
            code, output = result.exit_code, result.output
    after = StoreSnapshot.take(campaign.uri)
    return Outcome(
        exit_code=code,
        output=output,
        changes=before.changes(after, case.records),
        code_ran=marker is not None and marker.exists(),
    )
