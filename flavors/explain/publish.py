"""Publishing one explained surrogate: the report, the evidence record and the logged
model.

The last two stages of an explain run (:mod:`flavors.stages` runs the first ones):
:func:`write_report` renders the tree figure, ``report.html`` and ``model_card.md``;
:func:`log_surrogate` logs the surrogate with the ``miret`` flavor, its
:func:`evidence_record` as the digest-verified ``evidence.json``, the whole model
directory signed with the explain's key, and its metrics on the logged model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import mlflow

from miret_governance.flavors import miret as miret_flavor
from miret_governance.flavors.evidence import FLAVORS_CODE
from miret_governance.flavors.explain import context as run_context
from miret_governance.flavors.explain.defaults import DEPTH_CHOSEN
from miret_governance.flavors.explain.fit_params import HYPERPARAMETERS
from miret_governance.flavors.explain.request import ExplainRequest
from miret_governance.flavors.explain.search_runs import SearchSummary, search_context
from miret_governance.flavors.explain.stages import Validation, log_params, measured
from miret_governance.flavors.explain.vite_artifacts import CLASS_FOLDER_PREFIX, ViteArtifacts
from miret_governance.flavors.store.registry import EVIDENCE_PARAM, SURROGATE_OF_TAG, VALIDATION_TAG
from miret_governance.governance.measures.metrics import measured_on_test_rows, peak_memory_bytes
from miret_governance.governance.miret.solvers.table import solver_package
from miret_governance.governance.trust.environment import GUROBI, environment

REPORT_PARAMETERS = (
    *HYPERPARAMETERS,
    DEPTH_CHOSEN,
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
    "level_frequency_by_column": "VITE: level frequency of each original column "
    "(a one-hot group summed)",
}


def log_model_metrics(metrics: dict, model_id: str, datasets: dict) -> None:
    """Log ``metrics`` on the run and the logged model ``model_id``: those measured on
    the test rows (:func:`governance.metrics.measured_on_test_rows`) linked to the
    ``testing`` data set (the test file, or the holdout's rows:
    :func:`flavors.context.record_holdout`), the others to the ``training`` data set."""
    testing = datasets.get("testing", datasets["training"])
    tested = {k: v for k, v in metrics.items() if measured_on_test_rows(k)}
    trained = {k: v for k, v in metrics.items() if k not in tested}
    for values, data in ((trained, datasets["training"]), (tested, testing)):
        if values:
            mlflow.log_metrics(values, model_id=model_id, dataset=data)


def chosen_by_fit(request: ExplainRequest, solve: dict, depth: int | None = None) -> dict:
    """The hyperparameters the request left open (None) with the values the fit chose on
    held-out folds (``solve["grid"]``, :mod:`governance.miret.grid`); a depth left open
    (``auto``) keeps its name for the request's word, the fitted ``depth`` is
    :data:`~flavors.explain.defaults.DEPTH_CHOSEN`."""
    grid = solve.get("grid") or {}
    chosen = ("alpha", "proximity_threshold")
    values = {k: grid[k] for k in chosen if request.fit[k] is None and k in grid}
    if request.fit.depth is None and depth is not None:
        values[DEPTH_CHOSEN] = int(depth)
    return values


@dataclass(frozen=True)
class Evidence:
    """What the report and the logged model say about one fitted surrogate.

    Attributes
    ----------
    validation : Validation
    vite : ViteArtifacts
    n_train, n_test : int
    depth : int
        The fitted tree's depth (``MiretSurrogate.depth_``): the request's, or the one
        chosen on held-out folds for a request of ``--depth auto``.
    metrics : dict
    rules : str
        The surrogate's rules in raw units.
    search : SearchSummary or None
        The hyperparameter search, when one chose the parameters.
    input_range : dict
        Feature -> ``[min, max]`` over the explained data (training and test rows, raw
        units): the domain ``govern validate`` checks new data against.
    missing_share : dict
        Input column -> share of the explained data file's rows missing it: the
        reference of ``govern validate``'s missing-value check.
    test_rows : pandas.DataFrame or None
        The test rows (raw units; index: their row numbers in the data file): the
        report's example rows and disagreements (:func:`holdout_applicants`).
    confusion : pandas.DataFrame or None
        Test rows by the ensemble's class (index) and the surrogate's (columns): the
        report's fidelity per class and, for more than two classes, confusion matrix.
    """

    validation: Validation
    vite: ViteArtifacts
    n_train: int
    n_test: int
    depth: int
    metrics: dict
    rules: str
    search: SearchSummary | None = None
    input_range: dict | None = None
    missing_share: dict | None = None
    test_rows: object = None
    confusion: object = None

    def params(self, request: ExplainRequest, solve: dict | None = None) -> dict:
        """The request's run parameters with the sizes of the training and test sets (and
        the hyperparameters a search chose in place of the request's, or the fit chose
        for those the request left open: :func:`chosen_by_fit` of ``solve``)."""
        chosen = self.search.chosen if self.search is not None else {}
        chosen = {**chosen, **chosen_by_fit(request, solve or {}, self.depth)}
        return {**request.params(), **chosen, "n_train": self.n_train, "n_test": self.n_test}

    def baseline(self, solve: dict) -> dict:
        """Fidelity and feature count of the depth-D CART baseline (``solve``: the
        surrogate's solve report as a dict)."""
        return {
            "train_fidelity": solve["baseline_cart_train_fidelity"],
            "cv_fidelity": measured(solve.get("baseline_cart_cv_fidelity")),
            "test_fidelity": self.metrics.get("baseline_cart_test_fidelity"),
            "n_features_used": int(  # original columns of an encoded model (metrics)
                self.metrics.get("baseline_cart_n_features", solve["baseline_cart_n_features"])
            ),
        }


def write_report(
    request: ExplainRequest, run_id: str, ensemble, surrogate, evidence: Evidence, out: Path
) -> dict:
    """Write the tree figure, ``report.html`` and ``model_card.md`` to ``out``.

    Returns
    -------
    dict
        Artifact name -> path, for :func:`log_surrogate`.
    """
    from miret_governance.governance.ensembles.encoding import surrogate_display
    from miret_governance.governance.report.applicant_model import applicant_model
    from miret_governance.governance.report.html import ReportContext
    from miret_governance.governance.report.html import write_report as render
    from miret_governance.governance.report.tree_figure import save_tree_figure
    from miret_governance.governance.report.wording import describe_stop, tree_kind

    tree, solve, validation = (
        surrogate.tree_,
        surrogate.solve_report_.to_dict(),
        evidence.validation,
    )
    # purity by the ensemble's labels; conditions in original columns and categories
    display = surrogate_display(surrogate, request.class_names, ensemble.encoding)
    kind = tree_kind(surrogate)
    save_tree_figure(display, out / "figures", kind)
    provenance = {
        "ensemble_uri": request.ensemble_uri,
        "ensemble_source": request.ensemble_source,
        "data": request.data,
        "data_digest": request.data_digest,
        # "solver none, status not_run" read as if nothing was solved: the node MILPs
        # and the heuristic are in solver_outcome
        "whole_milp": f"{solve['solver']} {solve['solver_version']}, {solve['status']}"
        if solve["status"] != "not_run"
        else "not run",
        "solver_outcome": describe_stop(solve),
        "time_limit_s": request.fit.time_limit,
        "seed": request.seed,
        "mlflow_run_id": run_id,
        "tracking_uri": run_context.portable_uri(mlflow.get_tracking_uri()),
        "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    if request.trust_pickle:
        provenance["trust_pickle"] = request.trust_pickle
    (out / "rules.txt").write_text(evidence.rules + "\n", encoding="utf-8")
    artifacts = {
        "rules.txt": out / "rules.txt",
        "vite": out / "vite",
        "figures": out / "figures",
        **{path.name: path for path in validation.paths},
    }
    applicants = holdout_applicants(request, ensemble, surrogate, evidence.test_rows)
    if applicants is not None:
        artifacts["disagreements.csv"] = out / "disagreements.csv"
        applicants.disagreement_table().to_csv(artifacts["disagreements.csv"], index=False)
    params = evidence.params(request, solve)
    context = ReportContext(
        title=request.ensemble_uri,
        tree_kind=kind,
        depth=tree.depth,
        display=display,
        rules=evidence.rules,
        baseline=evidence.baseline(solve),
        allowed_features=_original_names(solve["allowed_features"], ensemble.encoding),
        metrics=evidence.metrics,
        parameters={k: params[k] for k in REPORT_PARAMETERS if k in params},
        provenance=provenance,
        validation={"status": validation.status, "summary": validation.summary},
        solve=solve,
        figures={
            _figure_caption(p): p
            for p in sorted(evidence.vite.figures)
            if p.suffix == ".svg" and p.stem != "surrogate_tree"
        },
        tree_svg=out / "figures" / "surrogate_tree.svg",
        search=search_context(evidence.search),
        applicants=applicants,
        applicants_source=Path(request.test_data or request.data).name,
        threshold_ranges=evidence.vite.ranges,
        confusion=evidence.confusion,
        applicant=applicant_model(surrogate, ensemble, request.class_names),
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


def _original_names(levels: list, encoding) -> list:
    """The features allowed per level as original input columns (each once) when the
    ensemble encodes its inputs."""
    if encoding is None:
        return levels
    from miret_governance.governance.ensembles.encoding import original_features

    described = encoding.described()
    return [list(original_features(described, names)) for names in levels]


def _figure_caption(path: Path) -> str:
    """A figure's caption; one class's VITE figures (``figures/class_<label>/``) say so."""
    caption = FIGURE_CAPTIONS.get(path.stem, path.stem.replace("_", " "))
    if path.parent.name.startswith(CLASS_FOLDER_PREFIX):
        return f"{caption}, trees of class {path.parent.name[len(CLASS_FOLDER_PREFIX) :]}"
    return caption


def holdout_applicants(request: ExplainRequest, ensemble, surrogate, test_rows):
    """The example rows and every disagreement of the test rows
    (:func:`governance.miret.paths.applicants`, with the request's class names); None
    without test rows."""
    from miret_governance.governance.miret.tree.paths import applicants

    if test_rows is None or not len(test_rows):
        return None
    labels = ensemble.predict(ensemble.transform(test_rows))
    return applicants(
        surrogate.tree_,
        test_rows,
        labels,
        scaler=surrogate.input_scaler_,
        class_names=request.class_names,
        encoding=ensemble.encoding,
    )


def evidence_record(request: ExplainRequest, surrogate, evidence: Evidence, encoding=None) -> dict:
    """The provenance stored in the surrogate's ``evidence.json`` (keys documented in
    docs/architecture.md): with the request (:meth:`ExplainRequest.record`), the tree's
    digest and the software versions, ``govern reproduce`` can fit it again and compare;
    with the ensemble's ``encoding`` (a pipeline's or native categorical columns) its
    :meth:`~governance.encoding.Encoding.described` columns as ``encoding``."""
    solve = surrogate.solve_report_.to_dict()
    record = {
        "ensemble_uri": request.ensemble_uri,
        "ensemble_name": request.ensemble_name,
        "ensemble_version": request.ensemble_version,
        "ensemble_model_id": request.ensemble_model_id,
        "ensemble_source": request.ensemble_source,
        "ensemble_files_digest": request.ensemble_files_digest,
        "data_digest": request.data_digest,
        "test_data_digest": request.test_data_digest,
        "explain_digest": request.digest,
        "request": request.record(),
        "tree_digest": surrogate.tree_digest(),
        "environment": environment(
            gurobi=solver_package(solve["solver"]) == GUROBI, code=FLAVORS_CODE
        ),
        "run_id": mlflow.active_run().info.run_id,
        "parameters": evidence.params(request, solve),
        "metrics": dict(evidence.metrics),
        "validation": {
            "status": evidence.validation.status,
            "summary": evidence.validation.summary,
        },
        "baseline_cart": evidence.baseline(solve),
        "input_range": evidence.input_range or {},
        "missing_share": evidence.missing_share or {},
        "solve": solve,
        "trust_pickle": request.trust_pickle,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if encoding is not None:  # written only when set: other evidence keeps its bytes
        record["encoding"] = [column.to_json() for column in encoding.described()]
    return record


def log_surrogate(
    request: ExplainRequest,
    surrogate,
    ensemble,
    artifacts: dict,
    input_example,
    evidence: Evidence,
    datasets: dict,
    signing_key=None,
):
    """Log the surrogate with the ``miret`` flavor, signed with ``signing_key`` (a
    ``governance.trust.signers.SigningKey``; unsigned without one), its metrics on the logged model (by
    ``model_id``, each linked to the data set it was computed on, which fills the logged
    model's "Datasets used"), the run's peak memory and the solver's outcome as run tags.

    Returns
    -------
    mlflow.models.model.ModelInfo
    """
    solve = surrogate.solve_report_.to_dict()
    status = evidence.validation.status
    params = evidence.params(request, solve)
    info = miret_flavor.log_model(
        surrogate,
        name=run_context.logged_model_name(request.ensemble_name, request.ensemble_version),
        artifacts=artifacts,
        input_example=input_example,
        evidence=evidence_record(request, surrogate, evidence, ensemble.encoding),
        metadata={
            "ensemble_uri": request.ensemble_uri,
            "data_digest": request.data_digest,
            "explain_digest": request.digest,
            "validation": status,
            "solve": {k: v for k, v in solve.items() if isinstance(v, (str, int, float))},
        },
        params={k: str(v) for k, v in params.items()},
        tags={
            VALIDATION_TAG: status,
            SURROGATE_OF_TAG: request.ensemble_uri,
            run_context.DESCRIPTION_TAG: run_context.model_description(
                request, evidence, solve, ensemble
            ),
            **run_context.source_tags(),
        },
        signing_key=signing_key,
    )
    mlflow.log_param(EVIDENCE_PARAM, info.flavors[miret_flavor.FLAVOR_NAME]["evidence_digest"])
    # "<name>.resolved" beside an MLproject's ""
    log_params(chosen_by_fit(request, solve, evidence.depth))
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
