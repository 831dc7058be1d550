"""Explain a registered tree ensemble: VITE, a MIRET surrogate, and a linked model version.

:func:`explain_model_version` does everything in one MLflow run: it records the ensemble
and the data as the run's inputs, validates the data, computes the VITE quantities and
figures, solves the MIRET surrogate, logs it with the ``miret`` flavor (metrics attached
to the logged model by ``model_id``), registers it as a version of ``<name>-surrogate``
and links the two versions with tags. Registration comes last, so a failure leaves no
version and no tag behind.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import LoggedModelInput
from mlflow.exceptions import MlflowException
from mlflow.models import Model

from flavors import miret as miret_flavor

SURROGATE_OF_TAG = "governance.surrogate_of"
SURROGATE_TAG = "governance.surrogate"
VALIDATION_TAG = "governance.validation"
EXPLAIN_DIGEST_TAG = "governance.explain_digest"
SURROGATE_SUFFIX = "-surrogate"
SKOPS_TRUSTED_TYPES = ("sklearn.tree._tree.Tree",)
"""Types trusted when reading a scikit-learn model saved with skops, beyond skops' own
defaults. The list is ours, not the model's: a model cannot widen it."""

STAGES = (
    "load model",
    "load data",
    "validate",
    "VITE",
    "solve",
    "metrics",
    "report",
    "log model",
    "register",
)
SOLVER_METRICS = ("objective", "bound", "mip_gap", "solve_time_s", "solve_optimal")


class ExplainError(Exception):
    """A request that cannot be explained (bad URI, unsupported model, bad data)."""


class ValidationFailedError(ExplainError):
    """The input data failed validation; nothing was registered."""

    def __init__(self, message: str, run_id: str | None = None, summary: str = ""):
        super().__init__(message)
        self.run_id = run_id
        self.summary = summary


@dataclass
class ExplainResult:
    """Outcome of :func:`explain_model_version`.

    Attributes
    ----------
    surrogate_uri : str
        ``models:/<name>-surrogate/<version>``.
    registered_name, version : str
    ensemble_uri : str
        ``models:/<name>/<version>`` (an alias is resolved to its version).
    run_id, model_id : str
        The explain run and the surrogate's logged model.
    metrics : dict
    rules : str
        One line per branch node, raw units.
    reused : bool
        True when an existing surrogate version was returned.
    validation : str
        ``passed`` or ``failed``.
    solve : dict
        The solver report.
    tracking_uri : str
    seconds : float
        Wall time of the call.
    """

    surrogate_uri: str
    registered_name: str
    version: str
    ensemble_uri: str
    run_id: str
    model_id: str
    metrics: dict
    rules: str
    reused: bool
    validation: str
    solve: dict = field(default_factory=dict)
    tracking_uri: str = ""
    seconds: float = 0.0


# ---------------------------------------------------------------------- inputs
def parse_registry_uri(model_uri: str) -> tuple[str, str | None, str | None]:
    """``models:/name/version`` or ``models:/name@alias`` -> (name, version, alias)."""
    prefix = "models:/"
    if not isinstance(model_uri, str) or not model_uri.startswith(prefix):
        raise ExplainError(
            f"model URI {model_uri!r} is not a registered model version; use "
            "models:/<name>/<version> or models:/<name>@<alias>"
        )
    rest = model_uri[len(prefix) :].strip("/")
    if "@" in rest and "/" not in rest:
        name, alias = rest.split("@", 1)
        if name and alias:
            return name, None, alias
    elif rest.count("/") == 1:
        name, version = rest.split("/")
        if name and version.isdigit():
            return name, version, None
    raise ExplainError(
        f"model URI {model_uri!r} is not of the form models:/<name>/<version> or "
        "models:/<name>@<alias> (a version number or an alias is required)"
    )


def model_id_of(version) -> str | None:
    """The LoggedModel id of a registry version (the SQL registry keeps it in ``source``)."""
    if getattr(version, "model_id", None):
        return version.model_id
    source = version.source or ""
    if source.startswith("models:/m-") and "/" not in source[len("models:/") :]:
        return source[len("models:/") :]
    return None


def resolve_model_version(client: MlflowClient, model_uri: str):
    """The registry ModelVersion of ``model_uri`` (clear error when it does not exist)."""
    name, version, alias = parse_registry_uri(model_uri)
    try:
        if alias is not None:
            return client.get_model_version_by_alias(name, alias)
        return client.get_model_version(name, version)
    except MlflowException as exc:
        raise ExplainError(
            f"{model_uri} was not found in the registry at {mlflow.get_registry_uri()}: "
            f"{exc.message}. List versions with `mlflow models` or the MLflow UI."
        ) from exc


def _load_sklearn(local: str, conf: dict):
    path = os.path.join(local, conf["pickled_model"])
    if conf.get("serialization_format") == "skops":
        import skops.io

        untrusted = set(skops.io.get_untrusted_types(file=path)) - set(SKOPS_TRUSTED_TYPES)
        if untrusted:
            raise ExplainError(
                f"the scikit-learn model contains types that are not trusted for loading: "
                f"{', '.join(sorted(untrusted))}; only tree ensembles are supported"
            )
        return skops.io.load(path, trusted=list(SKOPS_TRUSTED_TYPES))
    try:
        return mlflow.sklearn.load_model(local)
    except MlflowException as exc:
        raise ExplainError(
            f"the scikit-learn model is stored as {conf.get('serialization_format')!r}, "
            f"which executes code when loaded: {exc.message} Re-log it with "
            "serialization_format='skops' (the default) to explain it safely."
        ) from exc


def load_ensemble(model_uri: str):
    """Load a registered model with its own MLflow flavor and read it as an Ensemble.

    Returns
    -------
    (Ensemble, object)
        The uniform view and the loaded model.
    """
    from governance.ensemble import UnsupportedModelError, read_ensemble

    try:
        local = mlflow.artifacts.download_artifacts(artifact_uri=model_uri)
    except MlflowException as exc:
        raise ExplainError(f"cannot download {model_uri}: {exc.message}") from exc
    flavors = Model.load(local).flavors
    if "xgboost" in flavors:
        model = mlflow.xgboost.load_model(local)
    elif "sklearn" in flavors:
        model = _load_sklearn(local, flavors["sklearn"])
    else:
        raise ExplainError(
            f"{model_uri} has flavors {sorted(flavors)}; explain supports models logged "
            "with mlflow.sklearn or mlflow.xgboost"
        )
    try:
        return read_ensemble(model), model
    except UnsupportedModelError as exc:
        raise ExplainError(f"{model_uri}: {exc}") from exc


def read_table(path) -> pd.DataFrame:
    """Read a CSV or Parquet file (by extension)."""
    path = Path(path)
    if not path.is_file():
        raise ExplainError(f"data file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return pd.read_csv(path)
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path)
    raise ExplainError(f"data file {path} must be .csv or .parquet, not {suffix or 'no suffix'}")


def _split_features(frame: pd.DataFrame, ensemble, target, source) -> tuple:
    """Feature frame in the ensemble's column order, and the labels (or None)."""
    y = None
    if target:
        if target not in frame.columns:
            raise ExplainError(
                f"{source} has no label column {target!r} (columns: "
                f"{', '.join(map(str, frame.columns[:8]))}...); pass --target with one of them"
            )
        by_text = {str(c): c for c in ensemble.classes}
        labels = frame[target]
        bad = sorted({str(v) for v in pd.unique(labels)} - set(by_text))
        if bad:
            raise ExplainError(
                f"label column {target!r} of {source} has values {bad[:5]} that are not the "
                f"ensemble's classes {list(ensemble.classes)}"
            )
        y = np.array([by_text[str(v)] for v in labels])
        frame = frame.drop(columns=[target])
    names = list(ensemble.feature_names)
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise ExplainError(
            f"{source} lacks the ensemble's feature columns {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}; it must have the columns the model was "
            "trained on"
        )
    return frame[names], y


def _split(features, y, ensemble, test_size, seed):
    from sklearn.model_selection import train_test_split

    strata = y if y is not None else ensemble.predict(ensemble.transform(features))
    _, counts = np.unique(np.asarray(strata).astype(str), return_counts=True)
    stratify = strata if counts.min() >= 2 and len(counts) > 1 else None
    index = np.arange(len(features))
    train, test = train_test_split(index, test_size=test_size, random_state=seed, stratify=stratify)
    return np.sort(train), np.sort(test)


def _dataset(frame: pd.DataFrame, source, name: str, target):
    with warnings.catch_warnings():  # source-type ambiguity and integer-column hints
        warnings.simplefilter("ignore", UserWarning)
        return mlflow.data.from_pandas(
            frame, source=str(Path(source).resolve()), name=name, targets=target or None
        )


def _explain_digest(values: dict) -> str:
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _find_existing(client: MlflowClient, registered_name: str, ensemble_uri: str, digest: str):
    try:
        versions = client.search_model_versions(f"name = '{registered_name}'")
    except MlflowException:
        return None
    matches = [
        v
        for v in versions
        if v.tags.get(SURROGATE_OF_TAG) == ensemble_uri and v.tags.get(EXPLAIN_DIGEST_TAG) == digest
    ]
    return max(matches, key=lambda v: int(v.version)) if matches else None


# ---------------------------------------------------------------------- helpers
def _surrogate_defaults() -> dict:
    from governance.miret import MiretSurrogate

    signature = inspect.signature(MiretSurrogate.__init__)
    return {
        name: p.default
        for name, p in signature.parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def _solver_metrics(report: dict) -> dict:
    """The contract's solver metrics (``objective``, ``bound``, ``mip_gap`` are left out
    when the solver has no finite value for them)."""
    values = {
        "objective": report["objective"],
        "bound": report["bound"],
        "mip_gap": report["gap"],
        "solve_time_s": report["wall_time"],
        "solve_optimal": 1.0 if report["status"] in ("optimal", "trivial") else 0.0,
    }
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(v)}


def _vite_artifacts(ensemble, out: Path) -> dict:
    from governance import vite
    from governance.report.figures import save_vite_figures

    vite_dir = out / "vite"
    vite_dir.mkdir(parents=True)
    levels = vite.level_frequency(ensemble)
    levels.to_csv(vite_dir / "level_frequency.csv", index_label="feature")
    levels.to_json(vite_dir / "level_frequency.json", orient="split", indent=1)
    vite.node_frequency(ensemble).to_csv(vite_dir / "node_frequency.csv", index_label="position")
    ranges = vite.threshold_ranges(ensemble)
    ranges.to_csv(vite_dir / "threshold_ranges.csv", index=False)
    figures = save_vite_figures(ensemble, out / "figures")
    return {"ranges": ranges, "figures": [Path(p) for p in figures]}


def _figure_captions(paths) -> dict:
    captions = {
        "level_frequency": "VITE: level frequency of each feature in the ensemble",
        "vite_tree": "VITE: node frequency and threshold ranges of the ensemble",
    }
    return {
        captions.get(p.stem, p.stem.replace("_", " ")): p
        for p in sorted(paths)
        if p.suffix == ".svg" and p.stem != "surrogate_tree"
    }


def _notify(progress, stage: str, detail: dict | None = None) -> None:
    if progress is not None:
        progress(stage, detail or {})


# ---------------------------------------------------------------------- explain
def explain_model_version(
    model_uri: str,
    data,
    target: str | None = None,
    test_data=None,
    depth: int | None = None,
    alpha: float | None = None,
    gamma_percentile: float | None = None,
    proximity_threshold: float | None = None,
    solver: str = "auto",
    time_limit: float = 60,
    seed: int = 0,
    registered_name: str | None = None,
    force: bool = False,
    allow_invalid: bool = False,
    test_size: float = 0.2,
    progress=None,
) -> ExplainResult:
    """Explain a registered ensemble version with VITE and a MIRET surrogate.

    Parameters
    ----------
    model_uri : str
        ``models:/<name>/<version>`` or ``models:/<name>@<alias>`` of a scikit-learn or
        XGBoost binary tree ensemble (or a Pipeline ending in one).
    data : str or path
        CSV or Parquet file with the ensemble's feature columns (raw units).
    target : str, optional
        Label column; without it the ensemble's own labels stand in.
    test_data : str or path, optional
        A separate test set; otherwise a stratified holdout of ``test_size`` is drawn
        with ``seed`` (stratified by label, or by the ensemble's prediction).
    depth, alpha, gamma_percentile, proximity_threshold
        MIRET hyperparameters (``None``: the estimator's defaults; depth defaults to the
        ensemble's depth).
    solver : {"auto", "highs", "gurobi"}
    time_limit : float
        Solver time limit in seconds.
    seed : int
    registered_name : str, optional
        Registered model of the surrogate (default ``<name>-surrogate``).
    force : bool
        Solve again even if an identical request was already registered.
    allow_invalid : bool
        Go on when validation fails (tagged ``governance.validation=failed``).
    test_size : float
    progress : callable, optional
        ``progress(stage, detail)``: ``stage`` is one of :data:`STAGES`; during the solve
        ``detail`` has ``elapsed``, ``incumbent``, ``bound`` and ``gap``.

    Returns
    -------
    ExplainResult

    Raises
    ------
    ExplainError
        Bad URI, unsupported model, bad data (nothing is registered).
    ValidationFailedError
        The data failed validation and ``allow_invalid`` is False.
    """
    started = time.time()
    client = MlflowClient()
    _notify(progress, "load model")
    version = resolve_model_version(client, model_uri)
    ensemble_uri = f"models:/{version.name}/{version.version}"
    ensemble, _ = load_ensemble(ensemble_uri)
    if ensemble.preprocessor is not None and (
        ensemble.scaler is None or len(ensemble.preprocessor.steps) != 1
    ):
        raise ExplainError(
            f"{ensemble_uri} preprocesses its input with {ensemble.preprocessor}; only a "
            "single MinMaxScaler in front of the ensemble can be stored without pickle"
        )
    registered_name = registered_name or f"{version.name}{SURROGATE_SUFFIX}"

    _notify(progress, "load data")
    frame = _read_checked(data, target)
    test_frame = _read_checked(test_data, target) if test_data is not None else None
    if test_frame is None and not 0 < test_size < 1:
        raise ExplainError(f"test_size must be in (0, 1), got {test_size}")
    datasets = {"training": _dataset(frame, data, Path(data).stem, target)}
    if test_frame is not None:
        datasets["testing"] = _dataset(test_frame, test_data, Path(test_data).stem, target)

    defaults = _surrogate_defaults()
    hyper = {
        "depth": int(depth if depth is not None else ensemble.max_depth),
        "alpha": alpha if alpha is not None else defaults["alpha"],
        "gamma_percentile": gamma_percentile
        if gamma_percentile is not None
        else defaults["gamma_percentile"],
        "proximity_threshold": proximity_threshold
        if proximity_threshold is not None
        else defaults["proximity_threshold"],
        "epsilon": defaults["epsilon"],
        "formulation": defaults["formulation"],
    }
    if not 1 <= hyper["depth"] <= ensemble.max_depth:
        raise ExplainError(
            f"depth must be between 1 and the ensemble's depth {ensemble.max_depth}, got "
            f"{hyper['depth']}"
        )
    if float(time_limit) <= 0:
        raise ExplainError(f"time_limit must be positive seconds, got {time_limit}")
    request = {
        "ensemble_uri": ensemble_uri,
        "data_digest": datasets["training"].digest,
        "test_data_digest": datasets["testing"].digest if "testing" in datasets else None,
        "target": target or "",
        "test_size": test_size if test_frame is None else None,
        "solver": solver,
        "time_limit": float(time_limit),
        "seed": int(seed),
        "allow_invalid": bool(allow_invalid),
        **hyper,
    }
    digest = _explain_digest(request)
    if not force:
        existing = _find_existing(client, registered_name, ensemble_uri, digest)
        if existing is not None:
            return _reused_result(client, existing, ensemble_uri, started)

    with mlflow.start_run(run_name=f"explain {version.name} v{version.version}") as run:
        return _explain_in_run(
            client=client,
            run=run,
            version=version,
            ensemble=ensemble,
            model_uri=model_uri,
            data=data,
            test_data=test_data,
            frame=frame,
            test_frame=test_frame,
            target=target,
            datasets=datasets,
            hyper=hyper,
            request=request,
            digest=digest,
            registered_name=registered_name,
            allow_invalid=allow_invalid,
            progress=progress,
            started=started,
        )


def _read_checked(path, target) -> pd.DataFrame:
    frame = read_table(path)
    if target and target not in frame.columns:
        raise ExplainError(
            f"{path} has no label column {target!r} (columns: "
            f"{', '.join(map(str, frame.columns[:8]))}...); pass --target with one of them"
        )
    if len(frame) < 2:
        raise ExplainError(f"{path} has {len(frame)} rows; need at least 2")
    return frame


def _log_params(run_id: str, params: dict) -> None:
    """Log params; a key the run already has with another value (``mlflow run`` logs the
    MLproject's raw parameters) is logged as ``<key>.resolved``."""
    logged = mlflow.get_run(run_id).data.params
    values = {}
    for key, value in params.items():
        text = str(value)
        if key in logged and logged[key] != text:
            key = f"{key}.resolved"
        values[key] = text
    mlflow.log_params(values)


def _validate(ensemble, frames: dict, target, run_id, allow_invalid, out: Path):
    """Validate every input file; log and raise when one fails (unless allowed)."""
    from governance.validation import raw_columns, validate_inputs

    wanted = raw_columns(ensemble) + ([target] if target else [])
    reports, paths = {}, []
    for name, frame in frames.items():
        report = validate_inputs(
            frame[[c for c in wanted if c in frame.columns]], ensemble, label=target or None
        )
        path = out / name
        path.write_text(json.dumps(report.to_json(), indent=1, default=str))
        reports[name], paths = report, paths + [path]
    success = all(r.success for r in reports.values())
    status = "passed" if success else "failed"
    summary = "\n".join(
        f"{name}: {r.summary()}" if len(reports) > 1 else r.summary() for name, r in reports.items()
    )
    mlflow.set_tag(VALIDATION_TAG, status)
    if not success:
        for path in paths:
            mlflow.log_artifact(str(path))
        sound = all(
            r.frame is not None and r.normalized is not None and np.isfinite(r.normalized).all()
            for r in reports.values()
        )
        if not allow_invalid or not sound:
            why = (
                ""
                if sound
                else (
                    " (columns are missing or mistyped, or values are null or infinite, so "
                    "--allow-invalid cannot help)"
                )
            )
            raise ValidationFailedError(
                f"input validation failed{why}; nothing was registered. See "
                f"validation.json of run {run_id}"
                f"{'' if not sound else ' or pass --allow-invalid to explain anyway'}:"
                f"\n{summary}",
                run_id=run_id,
                summary=summary,
            )
    return status, summary, paths


def _explain_in_run(
    *,
    client,
    run,
    version,
    ensemble,
    model_uri,
    data,
    test_data,
    frame,
    test_frame,
    target,
    datasets,
    hyper,
    request,
    digest,
    registered_name,
    allow_invalid,
    progress,
    started,
) -> ExplainResult:
    from governance.metrics import surrogate_metrics
    from governance.miret import MiretSurrogate
    from governance.report.html import ReportContext, write_report
    from governance.report.tree_figure import save_tree_figure, tree_diagram

    run_id = run.info.run_id
    ensemble_uri = request["ensemble_uri"]
    with warnings.catch_warnings():  # integer-column schema hints of the label column
        warnings.simplefilter("ignore", UserWarning)
        for context, dataset in datasets.items():
            mlflow.log_input(dataset, context=context)
    ensemble_model_id = model_id_of(version)
    if ensemble_model_id:
        mlflow.log_input(model=LoggedModelInput(model_id=ensemble_model_id))
    params = {
        "ensemble_uri": ensemble_uri,
        "ensemble_model_id": ensemble_model_id or "",
        "ensemble_source": ensemble.source,
        "requested_model_uri": model_uri,
        "data": str(Path(data).resolve()),
        "data_digest": request["data_digest"],
        "test_data": str(Path(test_data).resolve()) if test_data is not None else "",
        "test_data_digest": request["test_data_digest"] or "",
        "target": target or "",
        "test_size": request["test_size"] if request["test_size"] is not None else "",
        "solver": request["solver"],
        "time_limit": request["time_limit"],
        "seed": request["seed"],
        "registered_name": registered_name,
        "explain_digest": digest,
        **hyper,
    }
    _log_params(run_id, params)
    mlflow.set_tags(
        {
            "governance.ensemble_uri": ensemble_uri,
            "governance.data_digest": request["data_digest"],
            EXPLAIN_DIGEST_TAG: digest,
        }
    )

    with tempfile.TemporaryDirectory(prefix="explain-") as tmp:
        out = Path(tmp)
        _notify(progress, "validate")
        frames = {"validation.json": frame}
        if test_frame is not None:
            frames["validation_test.json"] = test_frame
        validation, validation_summary, validation_paths = _validate(
            ensemble, frames, target, run_id, allow_invalid, out
        )

        features, y = _split_features(frame, ensemble, target, data)
        if test_frame is not None:
            train_features, y_train = features, y
            test_features, y_test = _split_features(test_frame, ensemble, target, test_data)
        else:
            train_idx, test_idx = _split(
                features, y, ensemble, request["test_size"], request["seed"]
            )
            train_features, test_features = features.iloc[train_idx], features.iloc[test_idx]
            y_train = None if y is None else y[train_idx]
            y_test = None if y is None else y[test_idx]
        _log_params(run_id, {"n_train": len(train_features), "n_test": len(test_features)})
        params.update(n_train=len(train_features), n_test=len(test_features))

        X_train = ensemble.transform(train_features)
        if validation == "failed":  # allow_invalid: out-of-range values act like the bounds
            X_train = np.clip(X_train, 0.0, 1.0)
        X_test = ensemble.transform(test_features) if len(test_features) else None
        ensemble = ensemble.weighted_by_data(X_train)

        _notify(progress, "VITE")
        vite_out = _vite_artifacts(ensemble, out)

        _notify(progress, "solve")

        def on_solve(elapsed, incumbent, bound, gap):
            _notify(
                progress,
                "solve",
                {"elapsed": elapsed, "incumbent": incumbent, "bound": bound, "gap": gap},
            )

        surrogate = MiretSurrogate(
            depth=hyper["depth"],
            alpha=hyper["alpha"],
            gamma_percentile=hyper["gamma_percentile"],
            proximity_threshold=hyper["proximity_threshold"],
            epsilon=hyper["epsilon"],
            formulation=hyper["formulation"],
            solver=request["solver"],
            time_limit=request["time_limit"],
            random_state=request["seed"],
        ).fit(X_train, ensemble, progress=on_solve)
        tree = surrogate.tree_
        solve = surrogate.solve_report_.to_dict()

        _notify(progress, "metrics")
        metrics = surrogate_metrics(
            ensemble,
            tree,
            X_train,
            X_test,
            y_train,
            y_test,
            proximity_threshold=hyper["proximity_threshold"],
        )
        metrics.update(_solver_metrics(solve))
        rules = tree.rules(scaler=ensemble.scaler)

        _notify(progress, "report")
        labels = y_train if y_train is not None else ensemble.predict(X_train)
        nodes = tree_diagram(tree, X_train, labels, scaler=ensemble.scaler)
        label_source = "ground truth" if y_train is not None else "ensemble"
        save_tree_figure(nodes, tree.depth, out / "figures", label_source)
        provenance = {
            "ensemble_uri": ensemble_uri,
            "ensemble_source": ensemble.source,
            "data": params["data"],
            "data_digest": request["data_digest"],
            "solver": f"{solve['solver']} {solve['solver_version']}",
            "solver_status": solve["status"],
            "time_limit_s": request["time_limit"],
            "seed": request["seed"],
            "mlflow_run_id": run_id,
            "tracking_uri": mlflow.get_tracking_uri(),
            "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
        artifacts = {
            "vite": out / "vite",
            "figures": out / "figures",
            **{path.name: path for path in validation_paths},
        }
        context = ReportContext(
            title=ensemble_uri,
            depth=tree.depth,
            nodes=nodes,
            rules=rules,
            metrics=metrics,
            parameters={
                k: params[k]
                for k in (
                    "depth",
                    "alpha",
                    "gamma_percentile",
                    "proximity_threshold",
                    "epsilon",
                    "formulation",
                    "solver",
                    "time_limit",
                    "seed",
                    "target",
                    "n_train",
                    "n_test",
                )
            },
            provenance=provenance,
            validation={"status": validation, "summary": validation_summary},
            label_source=label_source,
            figures=_figure_captions(vite_out["figures"]),
            tree_svg=out / "figures" / "surrogate_tree.svg",
            threshold_ranges=vite_out["ranges"],
            artifacts=sorted(
                [
                    "surrogate.json",
                    "preprocessing.json",
                    "report.html",
                    "model_card.md",
                    *(f"{k}/" if (out / k).is_dir() else k for k in artifacts),
                ]
            ),
        )
        html, card = write_report(context, out)
        artifacts.update({"report.html": html, "model_card.md": card})

        _notify(progress, "log model")
        info = miret_flavor.log_model(
            surrogate,
            name="surrogate",
            preprocessing=ensemble.scaler,
            artifacts=artifacts,
            input_example=train_features.head(5),
            metadata={
                "ensemble_uri": ensemble_uri,
                "data_digest": request["data_digest"],
                "explain_digest": digest,
                "validation": validation,
                "solve": {k: v for k, v in solve.items() if isinstance(v, (str, int, float))},
            },
            params={k: str(v) for k, v in params.items()},
            tags={VALIDATION_TAG: validation, SURROGATE_OF_TAG: ensemble_uri},
        )
    mlflow.log_metrics(metrics, model_id=info.model_id)
    mlflow.set_tags(
        {
            "governance.solver": solve["solver"],
            "governance.solver_version": solve["solver_version"],
            "governance.mip_status": solve["status"],
            "governance.objective": repr(solve["objective"]),
            "governance.bound": repr(solve["bound"]),
            "governance.gap": repr(solve["gap"]),
            "governance.incumbent_source": solve.get("incumbent_source", ""),
        }
    )

    _notify(progress, "register")
    registered = _register(
        client, info.model_uri, registered_name, ensemble_uri, version, validation, digest
    )
    return ExplainResult(
        surrogate_uri=f"models:/{registered_name}/{registered.version}",
        registered_name=registered_name,
        version=str(registered.version),
        ensemble_uri=ensemble_uri,
        run_id=run_id,
        model_id=info.model_id,
        metrics=metrics,
        rules=rules,
        reused=False,
        validation=validation,
        solve=solve,
        tracking_uri=mlflow.get_tracking_uri(),
        seconds=time.time() - started,
    )


def _register(client, logged_uri, registered_name, ensemble_uri, version, validation, digest):
    """Register the surrogate, then tag the ensemble; undo the version if linking fails."""
    registered = mlflow.register_model(
        logged_uri,
        registered_name,
        tags={
            SURROGATE_OF_TAG: ensemble_uri,
            VALIDATION_TAG: validation,
            EXPLAIN_DIGEST_TAG: digest,
        },
    )
    surrogate_uri = f"models:/{registered_name}/{registered.version}"
    try:
        client.set_model_version_tag(version.name, version.version, SURROGATE_TAG, surrogate_uri)
    except Exception:
        client.delete_model_version(registered_name, registered.version)
        raise
    return registered


def _reused_result(client, existing, ensemble_uri, started) -> ExplainResult:
    summary = describe_surrogate(f"models:/{existing.name}/{existing.version}", client)
    return ExplainResult(
        surrogate_uri=summary["uri"],
        registered_name=existing.name,
        version=str(existing.version),
        ensemble_uri=ensemble_uri,
        run_id=existing.run_id or "",
        model_id=model_id_of(existing) or "",
        metrics=summary["metrics"],
        rules=summary["rules"],
        reused=True,
        validation=existing.tags.get(VALIDATION_TAG, ""),
        solve=summary["solve"],
        tracking_uri=mlflow.get_tracking_uri(),
        seconds=time.time() - started,
    )


def describe_surrogate(model_uri: str, client: MlflowClient | None = None) -> dict:
    """Rules, metrics and links of a registered surrogate version.

    Returns
    -------
    dict
        ``uri``, ``rules`` (raw units), ``metrics`` (of the logged model), ``tags``
        (of the model version), ``solve`` (from the model's metadata), ``model_id``.
    """
    client = client or MlflowClient()
    version = resolve_model_version(client, model_uri)
    uri = f"models:/{version.name}/{version.version}"
    with tempfile.TemporaryDirectory(prefix="surrogate-") as tmp:
        try:
            local = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=tmp)
        except MlflowException as exc:
            raise ExplainError(f"cannot download {uri}: {exc.message}") from exc
        mlmodel = Model.load(local)
        if miret_flavor.FLAVOR_NAME not in mlmodel.flavors:
            raise ExplainError(f"{uri} is not a surrogate (flavors: {sorted(mlmodel.flavors)})")
        surrogate, scaler, _ = miret_flavor._read_local(local)
    tree = getattr(surrogate, "tree_", surrogate)
    metrics, model_id = {}, model_id_of(version)
    if model_id:
        metrics = {m.key: m.value for m in client.get_logged_model(model_id).metrics or []}
    return {
        "uri": uri,
        "rules": tree.rules(scaler=scaler),
        "metrics": metrics,
        "tags": dict(version.tags),
        "solve": (mlmodel.metadata or {}).get("solve", {}),
        "model_id": model_id or "",
    }
