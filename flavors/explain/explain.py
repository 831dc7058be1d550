"""Explain a registered tree ensemble: VITE, a MIRET surrogate, and a linked model version.

:func:`explain_model_version` does everything in one MLflow run: it records the ensemble
and the data as the run's inputs, validates the data, computes the VITE quantities and
figures, solves the MIRET surrogate, logs it with the ``miret`` flavor (metrics attached
to the logged model by ``model_id``), registers it as a version of ``<name>-surrogate``
and links the two versions with tags. Registration comes last, so a failure leaves no
version and no tag behind. The stages themselves live in :mod:`flavors.stages` and
:mod:`flavors.publish`.
"""

from __future__ import annotations

import getpass
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import mlflow
import pandas as pd
from mlflow import MlflowClient

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.explain import context, faults, publish, reuse, spark_table, stages
from miret_governance.flavors.explain.defaults import SAMPLE_ROWS
from miret_governance.flavors.explain.fit_params import FitParams, check_parameters
from miret_governance.flavors.explain.outcome import ExplainResult, reused_result
from miret_governance.flavors.explain.request import (
    MIN_TEST_ROWS,
    ExplainRequest,
    SearchSettings,
    check_class_names,
    check_search,
)
from miret_governance.flavors.explain.search_runs import log_search, search_surrogate
from miret_governance.flavors.explain.validation_worker import ValidationWorker
from miret_governance.flavors.explain.vite_artifacts import vite_artifacts
from miret_governance.flavors.store.data_files import dataset, read_data
from miret_governance.flavors.store.inputs import load_pinned_ensemble
from miret_governance.flavors.store.registry import (
    EVIDENCE_DIGEST_TAG,
    EXPLAIN_DIGEST_TAG,
    SURROGATE_SUFFIX,
    SURROGATE_TAG,
    TRUST_PICKLE_TAG,
    VALIDATION_TAG,
    check_registered_name,
    check_tracking_server,
    model_id_of,
    register_surrogate,
    resolve_model_version,
    version_uri,
)
from miret_governance.flavors.trail import links
from miret_governance.flavors.trail.decisions import LINK_EXPERIMENT, decision_runs, end_killed_runs
from miret_governance.flavors.trail.supersede import (
    SUPERSEDED_TAG,
    check_supersede,
    supersede_trust,
)
from miret_governance.flavors.trust import UnsignedEvidenceWarning, default_signing_key
from miret_governance.governance.data.spark.frames import on_spark
from miret_governance.governance.data.validation import missing_shares, raw_columns
from miret_governance.governance.ensembles.encoding import surrogate_rules
from miret_governance.governance.trust.signers import SigningKey

BACKGROUND_FIT_CELLS = 2_000_000
"""Inputs of at most this many cells (rows times features) are validated in a child
process (:class:`flavors.validation_worker.ValidationWorker`) while this one fits the
surrogate (:class:`flavors.stages.BackgroundFit`); larger ones are validated here and
fitted after, so that no two copies of the data are held at once. A search always runs
after validation: MLflow ties its child runs to the calling thread."""


def explain_model_version(
    model_uri: str,
    data,
    target: str | None = None,
    test_data=None,
    depth: int | str | None = None,
    alpha: float | None = None,
    gamma_percentile: float | None = None,
    proximity_threshold: float | None = None,
    max_rows: int | None = None,
    generated_rows: float | None = None,
    solver: str | None = None,
    time_limit: float | None = None,
    seed: int | None = None,
    registered_name: str | None = None,
    force: bool = False,
    allow_invalid: bool = False,
    class_names=None,
    test_size: float = 0.2,
    min_test_rows: int = MIN_TEST_ROWS,
    search: SearchSettings | None = None,
    trust_pickle: bool = False,
    progress=None,
    params: FitParams | None = None,
    signing_key: SigningKey | None = None,
    supersede: bool = False,
    policy=None,
    sample_rows: int = SAMPLE_ROWS,
) -> ExplainResult:
    """Explain a registered ensemble version with VITE and a MIRET surrogate.

    Parameters
    ----------
    model_uri : str
        ``models:/<name>/<version>`` or ``models:/<name>@<alias>`` of a scikit-learn or
        XGBoost or LightGBM tree-ensemble classifier (or a Pipeline ending in one).
    data : str, path, governance.data.spark.frames.DataSource or Spark DataFrame
        CSV or Parquet file with the ensemble's feature columns (raw units), or Spark
        data: then the explain runs on a deterministic sample of about ``sample_rows``
        rows collected to pandas (:mod:`governance.data.spark.sample`) and the
        fidelity on every other row is counted in Spark (``table_fidelity`` and its
        interval, ``table_rows``).
    target : str, optional
        Label column; without it the ensemble's own labels stand in.
    test_data : str or path, optional
        A separate test set; otherwise a stratified holdout of ``test_size`` is drawn
        with ``seed`` (stratified by label, or by the ensemble's prediction).
    depth, alpha, gamma_percentile, proximity_threshold, max_rows, solver, time_limit, seed
        MIRET hyperparameters; ``None`` takes ``MiretSurrogate().get_params()``'s
        default, and depth defaults to the ensemble's depth, at most 4; ``depth="auto"``
        (``FitParams(depth=None)``) lets the fit choose it on held-out folds. ``max_rows``
        bounds the sample the MILP works on; metrics use every row. ``time_limit`` is the
        budget in seconds of the whole fit (problem, warm start and solver); ``seed``
        seeds the holdout split, the heuristic and the solver.
    generated_rows : float, optional
        Rows generated and labelled by the ensemble added to the fit sample, as a
        multiple of its rows (:mod:`governance.miret.problem.augment`; default 0: none);
        every metric and fidelity is on real rows only.
    params : FitParams, optional
        The estimator's parameters as one object, instead of the keywords above (not
        both).
    registered_name : str, optional
        Registered model of the surrogate (default ``<name>-surrogate``).
    force : bool
        Solve again even if an identical request was already registered.
    supersede : bool
        Link a new surrogate even when the evidence linked now carries a promotion or an
        approval (they stop counting: :mod:`flavors.trail.supersede`); without it such
        an explain is refused before anything is written.
    policy : Policy, TrustedKeys, str or path, optional
        Whose promotions and approvals count for that check (default: the
        ``GOVERN_POLICY`` file, else ``signing_key``'s own).
    allow_invalid : bool
        Go on when validation fails (tagged ``governance.validation=failed``).
    class_names : sequence of str, optional
        Names of the ensemble's classes (in ``classes_`` order) for the reviewer's tree.
    test_size : float
    min_test_rows : int
        Fewest test rows per class (as the ensemble predicts them) to explain at all
        (default :data:`flavors.request.MIN_TEST_ROWS`); lower it only knowingly: the
        value is recorded as a run param and in the evidence.
    search : SearchSettings, optional
        Choose alpha, h and m by cross-validation (``MiretSearchCV``) before the final
        fit; every candidate is logged as a nested child run of the explain run.
    trust_pickle : bool
        Load a scikit-learn ensemble stored as pickle/cloudpickle (this runs code from
        the artifact; refused otherwise). Recorded as ``governance.trust_pickle`` (user
        and UTC time) on the run and the surrogate version, and in the report.
    signing_key : governance.trust.signers.SigningKey, optional
        Signs the surrogate's model directory (default: the key ``GOVERN_SIGNING_KEY``
        names). Without one the evidence is unsigned (an :class:`UnsignedEvidenceWarning`):
        no gate passes it and nothing earlier is reused. Only a version whose evidence
        this key signed, naming this very request, is reused (:mod:`flavors.reuse`).
    sample_rows : int
        About how many rows of Spark data to explain (default
        :data:`~flavors.explain.defaults.SAMPLE_ROWS`; every row of a smaller table).
    progress : callable, optional
        ``progress(stage, detail)``: ``stage`` is one of :data:`flavors.stages.STAGES`;
        during the solve ``detail`` has ``elapsed``, ``incumbent``, ``bound`` and ``gap``;
        ``search`` has ``candidates`` and ``folds``.

    Returns
    -------
    ExplainResult

    Raises
    ------
    ExplainError
        Bad URI, name or parameter (or both ``params`` and hyperparameter keywords),
        unsupported or pickled model, bad data or too few test rows per class (nothing
        is registered). Parameters and names are checked before anything is read.
    ValidationFailedError
        The data failed validation and ``allow_invalid`` is False.
    SupersedeError
        A new surrogate would make promotions or approvals stop counting and
        ``supersede`` is False (nothing is written).
    """
    started = time.time()
    keywords = {
        "depth": depth,
        "alpha": alpha,
        "gamma_percentile": gamma_percentile,
        "proximity_threshold": proximity_threshold,
        "max_rows": max_rows,
        "generated_rows": generated_rows,
        "solver": solver,
        "time_limit": time_limit,
        "seed": seed,
    }
    if params is not None and any(v is not None for v in keywords.values()):
        passed = sorted(k for k, v in keywords.items() if v is not None)
        raise ExplainError(
            f"pass the estimator's parameters either as params= or as keywords, not both "
            f"(got params and {passed}); put them in params.replace(...)"
        )
    if params is None:
        params = {"random_state": keywords.pop("seed"), **keywords}
    fit = check_parameters(params, test_size if test_data is None else None)
    min_test_rows = stages.check_min_test_rows(min_test_rows)
    sample_rows = spark_table.check_sample_rows(sample_rows)
    if registered_name is not None:
        check_registered_name(registered_name)
    signing_key = signing_key or default_signing_key()
    if signing_key is None:
        warnings.warn(reuse.UNSIGNED_WARNING, UnsignedEvidenceWarning, stacklevel=2)
    trusted = supersede_trust(policy, signing_key)
    check_tracking_server()
    with ExitStack() as cleanup:
        client = MlflowClient()
        stages.notify(progress, "load model")
        version = resolve_model_version(client, model_uri)
        superseded = None
        if force:  # before anything expensive is read
            superseded = check_supersede(client, version, trusted, supersede, forced=True)
        ensemble, files_digest = load_pinned_ensemble(version_uri(version), trust_pickle)

        stages.notify(progress, "load data")
        table = table_sample = None
        if on_spark(data):
            table, frame, table_sample = spark_table.read_sample(
                data, ensemble, target, sample_rows
            )
            data = table_sample.identity
            datasets = {"training": dataset(frame, data, target, name=context.file_name(data))}
        else:
            frame = read_data(data, target)
            datasets = {"training": dataset(frame, data, target)}
        test_frame = read_data(test_data, target) if test_data is not None else None
        if test_frame is not None:
            datasets["testing"] = dataset(test_frame, test_data, target)

        if search is not None:
            check_search(search)
        request = ExplainRequest(
            model_uri=model_uri,
            ensemble_name=version.name,
            ensemble_version=str(version.version),
            ensemble_source=ensemble.source,
            ensemble_model_id=model_id_of(version) or "",
            data=context.file_name(data),
            data_digest=datasets["training"].digest,
            test_data=context.file_name(test_data) if test_frame is not None else "",
            test_data_digest=datasets["testing"].digest if test_frame is not None else "",
            target=target or "",
            test_size=test_size if test_frame is None else None,
            registered_name=check_registered_name(
                registered_name or f"{version.name}{SURROGATE_SUFFIX}"
            ),
            fit=fit.for_ensemble(ensemble),
            allow_invalid=bool(allow_invalid),
            class_names=check_class_names(
                context.linked_class_names(client, version) if class_names is None else class_names,
                ensemble,
            ),
            search=search,
            trust_pickle=_trust_record() if trust_pickle else "",
            min_test_rows=min_test_rows,
            ensemble_files_digest=files_digest,
            data_source=table_sample,
        )
        experiment_id = context.explain_experiment(client, version)
        recovered = faults.recover_killed_runs(client, experiment_id, request.ensemble_uri)
        end_killed_runs(  # link records a killed explain was writing
            client, decision_runs(client, LINK_EXPERIMENT, request.ensemble_uri)
        )
        if not force:
            existing = reuse.find_reusable(client, request, signing_key)
            if existing is None or version_uri(existing) != version.tags.get(SURROGATE_TAG):
                superseded = check_supersede(client, version, trusted, supersede, forced=False)
            if existing is not None:
                return reused_result(
                    client, version, existing, request, started, recovered, signing_key, superseded
                )

        faults.check_removable(client, request.registered_name)
        # Great Expectations is imported in its child while this process starts the run
        # and fits; not before the reuse check: a reused explain validates nothing
        worker = cleanup.enter_context(ValidationWorker())
        run_tags = {**faults.process_tags(), **context.source_tags()}
        if request.trust_pickle:
            run_tags[TRUST_PICKLE_TAG] = request.trust_pickle
        if superseded is not None:
            run_tags[SUPERSEDED_TAG] = superseded.tag()
        run = mlflow.start_run(
            experiment_id=experiment_id,
            run_name=f"explain {version.name} v{version.version}",
            tags=run_tags,
            description=context.started_description(request),
        )
        with faults.guarded_run(client, run):
            stages.record_request(request, datasets)
            info, evidence, solve = _explain_in_run(
                request,
                run.info.run_id,
                ensemble,
                frame,
                test_frame,
                datasets,
                progress,
                worker,
                signing_key,
                table,
            )
            stages.notify(progress, "register")
            tags = {
                VALIDATION_TAG: evidence.validation.status,
                EXPLAIN_DIGEST_TAG: request.digest,
                EVIDENCE_DIGEST_TAG: info.flavors["miret"]["evidence_digest"],
            }
            if request.trust_pickle:
                tags[TRUST_PICKLE_TAG] = request.trust_pickle
            if superseded is not None:
                tags[SUPERSEDED_TAG] = superseded.tag()
            registered, linked = register_surrogate(
                client,
                info.model_uri,
                request.registered_name,
                version,
                tags,
                deduplicate=None
                if force or signing_key is None
                else reuse.verified_for(request, reuse.own_trust(signing_key)),
                after_link=lambda winner: links.record_link(client, version, winner, signing_key),
            )
            if linked is not registered:  # a concurrent explain registered the same request
                mlflow.set_tag("governance.duplicate_of", version_uri(linked))
                faults.discard_logged_models(client, run)
                mlflow.end_run()
                return reused_result(
                    client, version, linked, request, started, recovered, signing_key, superseded
                )
            reuse.describe_new_version(
                client,
                version,
                registered,
                signing_key,
                evidence,
                tags[EVIDENCE_DIGEST_TAG],
                request.ensemble_files_digest,
            )
            description = context.run_description(
                request, evidence, solve, ensemble, info.name, registered
            )
            mlflow.set_tag(context.DESCRIPTION_TAG, description)
        mlflow.end_run()
        return ExplainResult(
            surrogate_uri=version_uri(registered),
            registered_name=request.registered_name,
            version=str(registered.version),
            ensemble_uri=request.ensemble_uri,
            run_id=run.info.run_id,
            model_id=info.model_id,
            metrics=evidence.metrics,
            rules=evidence.rules,
            reused=False,
            validation=evidence.validation.status,
            solve=solve,
            tracking_uri=mlflow.get_tracking_uri(),
            seconds=time.time() - started,
            recovered_runs=recovered.runs,
            recovery_notes=recovered.notes(),
            signed_by=signing_key.fingerprint if signing_key is not None else "",
            parameters=evidence.params(request, solve),
            superseded=superseded,
        )


def _trust_record() -> str:
    """Who trusted a pickled model, and when (UTC)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return f"{user} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"


def _explain_in_run(
    request: ExplainRequest,
    run_id: str,
    ensemble,
    frame,
    test_frame,
    datasets,
    progress,
    worker,
    signing_key,
    table=None,
):
    """Every stage from validation to the logged model, in a temporary folder.

    Small inputs are validated in ``worker``'s process while this one fits the
    surrogate in a background thread; the fit counts once the validation has passed.
    With ``table`` (the Spark DataFrame ``frame`` was sampled from) the fidelity on its
    other rows is counted in Spark and added to the metrics.
    """
    loaded = ensemble
    cells = (len(frame) + (0 if test_frame is None else len(test_frame))) * ensemble.n_features
    inputs = [c for c in raw_columns(ensemble) if c in frame.columns]  # govern validate's
    missing_share = missing_shares(frame, inputs)  # reference, as validation's here
    background = None
    if cells > BACKGROUND_FIT_CELLS:
        worker.close()  # validated here: its copy of the data would double the memory
        worker = None
    elif request.search is None:
        background = stages.BackgroundFit(request, ensemble, frame, test_frame, progress)
    with faults.temporary_folder() as tmp, ThreadPoolExecutor(max_workers=1) as figures:
        out = Path(tmp)
        vite_done = None
        if background is not None:  # drawn as soon as the data is prepared, not after validation
            vite_done = figures.submit(_vite_when_prepared, background, out)
        stages.notify(progress, "validate")
        frames = {"validation.json": frame}
        if test_frame is not None:
            frames["validation_test.json"] = test_frame
        validation = stages.validate(request, ensemble, frames, run_id, out, worker)

        if background is not None:
            prepared = background.prepared()
        else:
            prepared = stages.prepare(request, ensemble, frame, test_frame)
        data, ensemble = prepared.data, prepared.ensemble
        stages.log_params({"n_train": len(data.train), "n_test": len(data.test)})
        datasets = context.record_holdout(request, data, datasets)

        # the VITE figures are drawn while the solver runs (it releases the GIL)
        if vite_done is None:
            vite_done = figures.submit(vite_artifacts, ensemble, out)
        search = None
        if background is not None:
            surrogate = background.surrogate()
        elif request.search is None:
            stages.notify(progress, "solve")
            surrogate = stages.fit_surrogate(request, ensemble, prepared.raw_train, progress)
        else:
            fitted = search_surrogate(request, ensemble, prepared.raw_train, progress)
            surrogate, search = fitted.best_estimator_, log_search(fitted, out)
        stages.notify(progress, "VITE")
        vite = vite_done.result()

        stages.notify(progress, "metrics")
        metrics = stages.evaluate(ensemble, surrogate, prepared.X_train, prepared.X_test, data)
        if table is not None:
            metrics.update(spark_table.table_metrics(table, request.data_source, loaded, surrogate))
        evidence = publish.Evidence(
            validation=validation,
            vite=vite,
            n_train=len(data.train),
            n_test=len(data.test),
            depth=int(surrogate.depth_),
            metrics=metrics,
            rules=surrogate_rules(surrogate, request.class_names, ensemble.encoding),
            search=search,
            input_range=_input_range(data, ensemble.feature_names),
            missing_share=missing_share,
            test_rows=data.test,
            confusion=stages.test_confusion(ensemble, surrogate, prepared.X_test),
        )

        stages.notify(progress, "report")
        artifacts = publish.write_report(request, run_id, ensemble, surrogate, evidence, out)

        stages.notify(progress, "log model")
        info = publish.log_surrogate(
            request,
            surrogate,
            ensemble,
            artifacts,
            data.train.head(5),
            evidence,
            datasets,
            signing_key,
        )
    return info, evidence, surrogate.solve_report_.to_dict()


def _vite_when_prepared(background, out: Path):
    """The VITE artifacts of the prepared ensemble (boosted trees are weighed by the
    training split, so the figures wait for :meth:`stages.BackgroundFit.prepared`)."""
    return vite_artifacts(background.prepared().ensemble, out)


def _input_range(data, names) -> dict:
    """Feature -> ``[min, max]`` over the training and test rows (raw units)."""
    rows = pd.concat([data.train, data.test])[list(names)]
    return {n: [float(lo), float(hi)] for n, lo, hi in zip(names, rows.min(), rows.max())}
