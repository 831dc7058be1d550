"""The stages of one explain run, in order; each takes the frozen :class:`ExplainRequest`.

:func:`record_request` -> :func:`validate` -> :func:`vite_artifacts` ->
:func:`fit_surrogate` -> :func:`evaluate` -> :func:`write_report` -> :func:`log_surrogate`.
They run inside the explain run that :func:`flavors.explain.explain_model_version`
opens; registration comes after them, so a failing stage registers nothing.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
from mlflow.entities import LoggedModelInput

from flavors import miret as miret_flavor
from flavors.errors import ValidationFailedError
from flavors.registry import (
    DATA_DIGEST_TAG,
    ENSEMBLE_URI_TAG,
    EVIDENCE_PARAM,
    EXPLAIN_DIGEST_TAG,
    SURROGATE_OF_TAG,
    VALIDATION_TAG,
)
from flavors.request import HYPERPARAMETERS, ExplainRequest
from flavors.search import SearchSummary, search_context
from governance.metrics import peak_memory_bytes

STAGES = (
    "load model",
    "load data",
    "validate",
    "VITE",
    "search",
    "solve",
    "metrics",
    "report",
    "log model",
    "register",
)
"""Stage names given to ``progress(stage, detail)``, in the order they run (``search``
only with a hyperparameter search)."""
REPORT_PARAMETERS = (
    *HYPERPARAMETERS,
    "solver",
    "time_limit",
    "seed",
    "target",
    "n_train",
    "n_test",
)
FIGURE_CAPTIONS = {
    "level_frequency": "VITE: level frequency of each feature in the ensemble",
    "vite_tree": "VITE: node frequency and threshold ranges of the ensemble",
}


def notify(progress, stage: str, detail: dict | None = None) -> None:
    """Tell ``progress`` (if any) that ``stage`` runs, with optional ``detail``."""
    if progress is not None:
        progress(stage, detail or {})


def log_params(params: dict) -> None:
    """Log params to the active run; a key the run already has with another value
    (``mlflow run`` logs the MLproject's raw parameters) is logged as ``<key>.resolved``."""
    logged = mlflow.get_run(mlflow.active_run().info.run_id).data.params
    values = {}
    for key, value in params.items():
        text = str(value)
        if key in logged and logged[key] != text:
            key = f"{key}.resolved"
        values[key] = text
    mlflow.log_params(values)


# ---------------------------------------------------------------------- stages
def record_request(request: ExplainRequest, datasets: dict) -> None:
    """Log the data sets and the ensemble as the run's inputs, the request as params."""
    with warnings.catch_warnings():  # integer-column schema hints of the label column
        warnings.simplefilter("ignore", UserWarning)
        for context, data in datasets.items():
            mlflow.log_input(data, context=context)
    if request.ensemble_model_id:
        mlflow.log_input(model=LoggedModelInput(model_id=request.ensemble_model_id))
    log_params(request.params())
    mlflow.set_tags(
        {
            ENSEMBLE_URI_TAG: request.ensemble_uri,
            DATA_DIGEST_TAG: request.data_digest,
            EXPLAIN_DIGEST_TAG: request.digest,
        }
    )


@dataclass(frozen=True)
class Validation:
    """Outcome of :func:`validate`: ``passed`` or ``failed``, one summary, the reports."""

    status: str
    summary: str
    paths: tuple


def validate(request: ExplainRequest, ensemble, frames: dict, run_id: str, out: Path):
    """Validate every input file; log and raise when one fails (unless allowed).

    Parameters
    ----------
    frames : dict
        Report file name (``validation.json``, ``validation_test.json``) -> data frame.

    Raises
    ------
    ValidationFailedError
        A file failed and ``allow_invalid`` is False, or it failed in a way that
        explaining anyway cannot survive (missing columns, nulls, infinities).
    """
    from governance.validation import raw_columns, validate_inputs

    target = request.target
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
        if not request.allow_invalid or not sound:
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
    return Validation(status, summary, tuple(paths))


@dataclass(frozen=True)
class ViteArtifacts:
    """Threshold ranges (a frame) and the figure files of :func:`vite_artifacts`."""

    ranges: object
    figures: tuple


def vite_artifacts(ensemble, out: Path) -> ViteArtifacts:
    """Write the VITE tables to ``out/vite`` and the heatmaps to ``out/figures``."""
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
    return ViteArtifacts(ranges, tuple(Path(p) for p in figures))


def fit_surrogate(request: ExplainRequest, ensemble, raw_train, progress=None):
    """Fit the MIRET surrogate of ``ensemble`` on ``raw_train`` (the ensemble's input
    units) within ``request.time_limit`` seconds; ``progress`` sees the solver's
    incumbent and bound."""
    from governance.miret import MiretSurrogate

    def on_solve(elapsed, incumbent, bound, gap):
        detail = {"elapsed": elapsed, "incumbent": incumbent, "bound": bound, "gap": gap}
        notify(progress, "solve", detail)

    surrogate = MiretSurrogate(ensemble, **request.estimator_params())
    return surrogate.fit(raw_train, progress=on_solve)


SOLVER_PREFIX = "solver."
"""Prefix of the solver's internals among the metrics; the headline metrics
(:data:`HEADLINE_METRICS`) carry no prefix."""
HEADLINE_METRICS = (
    "test_fidelity",
    "train_fidelity",
    "n_features_used",
    "baseline_cart_test_fidelity",
    "test_proximity_agreement",
)


def solver_metrics(report: dict) -> dict:
    """The solver's internals as ``solver.*`` metrics (``objective``, ``bound``, ``gap``
    are left out when the solver has no finite value for them)."""
    values = {
        "objective": report["objective"],
        "bound": report["bound"],
        "gap": report["gap"],
        "time_s": report["wall_time"],
        "optimal": 1.0 if report["status"] in ("optimal", "trivial") else 0.0,
        "time_limit_hit": float(bool(report["time_limit_hit"])),
        "nodes": report["nodes"],
        "n_binaries": report["n_binaries"],
        "n_constraints": report["n_constraints"],
    }
    return {
        f"{SOLVER_PREFIX}{k}": float(v)
        for k, v in values.items()
        if v is not None and math.isfinite(v)
    }


def tree_scaler(ensemble, surrogate):
    """The map from the ensemble's working space to the tree's: None when the ensemble
    has its own MinMaxScaler (same space), else the surrogate's learned scaler."""
    return None if ensemble.scaler is not None else surrogate.input_scaler_


def evaluate(request: ExplainRequest, ensemble, surrogate, X_train, X_test, data) -> dict:
    """Fidelity, accuracy, proximity and sparsity of the surrogate, and solver metrics."""
    from governance.metrics import surrogate_metrics

    metrics = surrogate_metrics(
        ensemble,
        surrogate.tree_,
        X_train,
        X_test,
        data.y_train,
        data.y_test,
        proximity_threshold=request.proximity_threshold,
        tree_scaler=tree_scaler(ensemble, surrogate),
    )
    metrics.update(solver_metrics(surrogate.solve_report_.to_dict()))
    metrics.update(baseline_metrics(surrogate, data))
    return metrics


def baseline_metrics(surrogate, data) -> dict:
    """Fidelity and feature count of the depth-D CART tree a user would fit instead
    (on the same ensemble labels), next to the surrogate's."""
    solve = surrogate.solve_report_
    metrics = {
        "baseline_cart_train_fidelity": float(solve.baseline_cart_train_fidelity),
        "baseline_cart_n_features": float(solve.baseline_cart_n_features),
    }
    if len(data.test):
        metrics["baseline_cart_test_fidelity"] = surrogate.baseline_fidelity(data.test)
    return metrics


def log_model_metrics(metrics: dict, model_id: str, datasets: dict) -> None:
    """Log ``metrics`` on the run and the logged model ``model_id``: ``test_*`` metrics
    linked to the ``testing`` data set (the ``training`` one for a holdout split), the
    others to the ``training`` data set."""
    testing = datasets.get("testing", datasets["training"])
    tested = {k: v for k, v in metrics.items() if k.startswith("test_")}
    trained = {k: v for k, v in metrics.items() if k not in tested}
    for values, data in ((trained, datasets["training"]), (tested, testing)):
        if values:
            mlflow.log_metrics(values, model_id=model_id, dataset=data)


@dataclass(frozen=True)
class Evidence:
    """What the report and the logged model say about one fitted surrogate.

    Attributes
    ----------
    validation : Validation
    vite : ViteArtifacts
    X_train : ndarray
        Training samples in normalized units.
    labels : ndarray or None
        Ground-truth training labels (None: the ensemble's predictions stand in).
    n_train, n_test : int
    metrics : dict
    rules : str
        The surrogate's rules in raw units.
    search : SearchSummary or None
        The hyperparameter search, when one chose the parameters.
    """

    validation: Validation
    vite: ViteArtifacts
    X_train: np.ndarray
    labels: np.ndarray | None
    n_train: int
    n_test: int
    metrics: dict
    rules: str
    search: SearchSummary | None = None

    def params(self, request: ExplainRequest) -> dict:
        """The request's run parameters with the sizes of the training and test sets (and
        the hyperparameters a search chose in place of the request's)."""
        chosen = self.search.chosen if self.search is not None else {}
        return {**request.params(), **chosen, "n_train": self.n_train, "n_test": self.n_test}


def write_report(
    request: ExplainRequest, run_id: str, ensemble, surrogate, evidence: Evidence, out: Path
) -> dict:
    """Write the tree figure, ``report.html`` and ``model_card.md`` to ``out``.

    Returns
    -------
    dict
        Artifact name -> path, for :func:`log_surrogate`.
    """
    from governance.miret.display import display_tree
    from governance.report.html import ReportContext, describe_stop
    from governance.report.html import write_report as render
    from governance.report.tree_figure import save_tree_figure

    tree, solve, validation = (
        surrogate.tree_,
        surrogate.solve_report_.to_dict(),
        evidence.validation,
    )
    label_source = "ground truth" if evidence.labels is not None else "ensemble"
    labels = evidence.labels
    if labels is None:
        labels = ensemble.predict(evidence.X_train)
    to_tree = tree_scaler(ensemble, surrogate)
    X_tree = evidence.X_train if to_tree is None else to_tree.transform(evidence.X_train)
    display = display_tree(
        tree, X_tree, labels, scaler=surrogate.input_scaler_, class_names=request.class_names
    )
    save_tree_figure(display, out / "figures", label_source)
    provenance = {
        "ensemble_uri": request.ensemble_uri,
        "ensemble_source": request.ensemble_source,
        "data": request.data,
        "data_digest": request.data_digest,
        "solver": f"{solve['solver']} {solve['solver_version']}",
        "solver_status": solve["status"],
        "solver_outcome": describe_stop(solve),
        "time_limit_s": request.time_limit,
        "seed": request.seed,
        "mlflow_run_id": run_id,
        "tracking_uri": mlflow.get_tracking_uri(),
        "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    if request.trust_pickle:
        provenance["trust_pickle"] = request.trust_pickle
    artifacts = {
        "vite": out / "vite",
        "figures": out / "figures",
        **{path.name: path for path in validation.paths},
    }
    params = evidence.params(request)
    context = ReportContext(
        title=request.ensemble_uri,
        depth=tree.depth,
        display=display,
        rules=evidence.rules,
        baseline={
            "train_fidelity": solve["baseline_cart_train_fidelity"],
            "test_fidelity": evidence.metrics.get("baseline_cart_test_fidelity"),
            "n_features_used": solve["baseline_cart_n_features"],
        },
        allowed_features=solve["allowed_features"],
        metrics=evidence.metrics,
        parameters={k: params[k] for k in REPORT_PARAMETERS},
        provenance=provenance,
        validation={"status": validation.status, "summary": validation.summary},
        label_source=label_source,
        figures={
            FIGURE_CAPTIONS.get(p.stem, p.stem.replace("_", " ")): p
            for p in sorted(evidence.vite.figures)
            if p.suffix == ".svg" and p.stem != "surrogate_tree"
        },
        tree_svg=out / "figures" / "surrogate_tree.svg",
        search=search_context(evidence.search),
        threshold_ranges=evidence.vite.ranges,
        artifacts=sorted(
            [
                "surrogate.json",
                "evidence.json",
                "report.html",
                "model_card.md",
                *(f"{k}/" if (out / k).is_dir() else k for k in artifacts),
            ]
        ),
    )
    html, card = render(context, out)
    return {**artifacts, "report.html": html, "model_card.md": card}


def evidence_record(request: ExplainRequest, solve: dict, evidence: Evidence) -> dict:
    """The provenance stored in the surrogate's ``evidence.json`` (keys documented in
    docs/architecture.md)."""
    return {
        "ensemble_uri": request.ensemble_uri,
        "ensemble_name": request.ensemble_name,
        "ensemble_version": request.ensemble_version,
        "ensemble_model_id": request.ensemble_model_id,
        "ensemble_source": request.ensemble_source,
        "data_digest": request.data_digest,
        "test_data_digest": request.test_data_digest,
        "explain_digest": request.digest,
        "run_id": mlflow.active_run().info.run_id,
        "parameters": evidence.params(request),
        "metrics": dict(evidence.metrics),
        "validation": {
            "status": evidence.validation.status,
            "summary": evidence.validation.summary,
        },
        "baseline_cart": {
            "train_fidelity": solve["baseline_cart_train_fidelity"],
            "test_fidelity": evidence.metrics.get("baseline_cart_test_fidelity"),
            "n_features_used": solve["baseline_cart_n_features"],
        },
        "solve": solve,
        "trust_pickle": request.trust_pickle,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def log_surrogate(
    request: ExplainRequest,
    surrogate,
    ensemble,
    artifacts: dict,
    input_example,
    evidence: Evidence,
    datasets: dict,
):
    """Log the surrogate with the ``miret`` flavor, its metrics on the logged model (by
    ``model_id``, each linked to the data set it was computed on, which fills the logged
    model's "Datasets used"), the run's peak memory and the solver's outcome as run tags.

    Returns
    -------
    mlflow.models.model.ModelInfo
    """
    solve = surrogate.solve_report_.to_dict()
    status = evidence.validation.status
    params = evidence.params(request)
    info = miret_flavor.log_model(
        surrogate,
        name="surrogate",
        artifacts=artifacts,
        input_example=input_example,
        evidence=evidence_record(request, solve, evidence),
        metadata={
            "ensemble_uri": request.ensemble_uri,
            "data_digest": request.data_digest,
            "explain_digest": request.digest,
            "validation": status,
            "solve": {k: v for k, v in solve.items() if isinstance(v, (str, int, float))},
        },
        params={k: str(v) for k, v in params.items()},
        tags={VALIDATION_TAG: status, SURROGATE_OF_TAG: request.ensemble_uri},
    )
    mlflow.log_param(EVIDENCE_PARAM, info.flavors[miret_flavor.FLAVOR_NAME]["evidence_digest"])
    log_model_metrics(evidence.metrics, info.model_id, datasets)
    # the run's own metric: fluent logging would attach it to the logged model too
    run_id = mlflow.active_run().info.run_id
    mlflow.MlflowClient().log_metric(run_id, "peak_memory_mb", peak_memory_bytes() / 2**20)
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
    return info
