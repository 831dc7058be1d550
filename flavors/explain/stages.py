"""The stages of one explain run, in order; each takes the frozen :class:`ExplainRequest`.

:func:`record_request` -> :func:`validate` -> :func:`prepare` -> :func:`~flavors.vite_artifacts.vite_artifacts` ->
:func:`fit_surrogate` -> :func:`evaluate`, then :mod:`flavors.publish`'s
:func:`~flavors.publish.write_report` -> :func:`~flavors.publish.log_surrogate`.
:func:`prepare` and :func:`fit_surrogate` usually run while :func:`validate` does
(:class:`BackgroundFit`); their result counts only once the validation has passed.
They run inside the explain run that :func:`flavors.explain.explain_model_version`
opens; registration comes after them, so a failing stage registers nothing.
"""

from __future__ import annotations

import json
import math
import threading
import warnings
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
from mlflow.entities import LoggedModelInput

from miret_governance.flavors.errors import ExplainError, ValidationFailedError
from miret_governance.flavors.explain.faults import check_interrupted
from miret_governance.flavors.explain.request import ExplainRequest
from miret_governance.flavors.explain.validation_worker import validate_frames
from miret_governance.flavors.store.registry import (
    DATA_DIGEST_TAG,
    ENSEMBLE_URI_TAG,
    EXPLAIN_DIGEST_TAG,
    VALIDATION_TAG,
    retried_after_insert_race,
)

STAGES = (
    "load model",
    "load data",
    "validate",
    "search",
    "solve",
    "VITE",
    "metrics",
    "report",
    "log model",
    "register",
)
"""Stage names given to ``progress(stage, detail)``, in the order they run (``search``
only with a hyperparameter search; the VITE figures are drawn during the solve and
reported when it ends)."""


def notify(progress, stage: str, detail: dict | None = None) -> None:
    """Tell ``progress`` (if any) that ``stage`` runs, with optional ``detail``; first
    raise a signal the explain received but lost (:func:`flavors.faults.check_interrupted`)."""
    check_interrupted()
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


def log_dataset(data, context: str) -> None:
    """``mlflow.log_input`` of a dataset. When a concurrent run inserted the same dataset
    first, logging again links the dataset that run created
    (:func:`flavors.registry.retried_after_insert_race`)."""
    retried_after_insert_race(mlflow.log_input, data, context=context)


# ---------------------------------------------------------------------- stages
def record_request(request: ExplainRequest, datasets: dict) -> None:
    """Log the data sets and the ensemble as the run's inputs, the request as params."""
    with warnings.catch_warnings():  # integer-column schema hints of the label column
        warnings.simplefilter("ignore", UserWarning)
        for context, data in datasets.items():
            log_dataset(data, context)
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


def validate(request: ExplainRequest, ensemble, frames: dict, run_id: str, out: Path, worker=None):
    """Validate every input file; log and raise when one fails (unless allowed).

    Parameters
    ----------
    frames : dict
        Report file name (``validation.json``, ``validation_test.json``) -> data frame.
    worker : flavors.validation_worker.ValidationWorker, optional
        Validates in its child process; without it, or when it cannot, this process
        validates.

    Raises
    ------
    ValidationFailedError
        A file failed and ``allow_invalid`` is False, or it failed in a way that
        explaining anyway cannot survive (missing columns, infinities).
    """
    outcomes = worker.validate(frames, ensemble, request.target) if worker else None
    if outcomes is None:
        outcomes = validate_frames(frames, ensemble, request.target)
    paths = []
    for name, outcome in outcomes.items():
        path = out / name
        path.write_text(json.dumps(outcome["results"], indent=1, default=str))
        paths.append(path)
    success = all(outcome["success"] for outcome in outcomes.values())
    status = "passed" if success else "failed"
    summary = "\n".join(
        f"{name}: {outcome['summary']}" if len(outcomes) > 1 else outcome["summary"]
        for name, outcome in outcomes.items()
    )
    mlflow.set_tag(VALIDATION_TAG, status)
    if not success:
        for path in paths:
            mlflow.log_artifact(str(path))
        sound = all(outcome["sound"] for outcome in outcomes.values())
        if not request.allow_invalid or not sound:
            why = (
                ""
                if sound
                else (
                    " (columns are missing or mistyped, or values are infinite, so "
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


@dataclass
class Prepared:
    """The data of one explain run, ready for the fit.

    ``data`` is the :class:`flavors.data_files.Holdout` (raw units); ``raw_train`` its
    training rows as fitted (clipped to the ensemble scaler's range, see
    :func:`prepare`); ``X_train``/``X_test`` the normalized rows (``X_test`` None
    without test rows); ``ensemble`` the ensemble weighted by ``X_train``. Behind a
    pipeline's ``ColumnTransformer`` all of them are in the encoded space
    (``ensemble.encoding`` set, :mod:`governance.encoding`).
    """

    data: object
    raw_train: object
    X_train: np.ndarray
    X_test: np.ndarray | None
    ensemble: object


def prepare(request: ExplainRequest, ensemble, frame, test_frame) -> Prepared:
    """Split the data (:func:`flavors.data_files.holdout`), normalize it and weight the
    ensemble by the training rows.

    Training rows outside the range of the ensemble's MinMaxScaler are clipped to it:
    validated inputs lie in that range (up to the validation's round-off tolerance), and
    out-of-range inputs explained with ``allow_invalid`` act like the range's bounds.
    An ensemble behind a ``ColumnTransformer`` is explained in its encoded space: the
    frames are encoded first and the ensemble becomes its encoded view.

    Raises
    ------
    ExplainError
        Fewer test rows of a class than ``request.min_test_rows`` (:func:`check_test_rows`),
        or a category not seen in training.
    """
    from miret_governance.flavors.store.data_files import encoded_inputs, holdout

    ensemble, frame, test_frame = encoded_inputs(request, ensemble, frame, test_frame)
    data = holdout(request, ensemble, frame, test_frame)
    check_test_rows(request, ensemble, data.test)
    raw_train, scaler = data.train, ensemble.scaler
    if scaler is not None:
        low, high = scaler.data_min_, scaler.data_max_
        if (raw_train.lt(low, axis=1) | raw_train.gt(high, axis=1)).to_numpy().any():
            raw_train = raw_train.clip(low, high, axis=1)
    X_train = ensemble.transform(raw_train)
    X_test = ensemble.transform(data.test) if len(data.test) else None
    return Prepared(data, raw_train, X_train, X_test, ensemble.weighted_by_data(X_train))


def check_min_test_rows(value) -> int:
    """``--min-test-rows`` / ``min_test_rows``, checked before any work: a whole number
    of rows, at least 0 (0: no minimum).

    Raises
    ------
    ExplainError
        Not a whole number, or negative.
    """
    if isinstance(value, bool) or not float(value).is_integer() or value < 0:
        raise ExplainError(
            f"min_test_rows must be a whole number of rows per class, at least 0, got {value!r}"
        )
    return int(value)


def check_test_rows(request: ExplainRequest, ensemble, test) -> None:
    """Refuse test rows too few to measure fidelity: fewer than ``request.min_test_rows``
    rows of a class as the ensemble predicts them (fidelity is agreement with those
    predictions), before anything is fitted.

    Raises
    ------
    ExplainError
        Naming the counts, the minimum, and how to give more rows or lower it.
    """
    predicted = ensemble.predict(ensemble.transform(test)) if len(test) else np.array([])
    counts = {c: int(np.sum(predicted == c)) for c in np.asarray(ensemble.classes).tolist()}
    if min(counts.values()) >= request.min_test_rows:
        return
    shown = ", ".join(f"{n} of class {c!r}" for c, n in counts.items())
    more = "pass a larger --test-data file" if request.test_data else "give more rows"
    raise ExplainError(
        f"the test rows are too few to measure fidelity: {shown} as the ensemble predicts "
        f"them, fewer than {request.min_test_rows} per class (20 of 20 agreeing rows give a "
        f"95% interval of 0.84-1); {more}, or lower the minimum explicitly with "
        "--min-test-rows N (recorded with the evidence). Nothing was registered"
    )


class BackgroundFit:
    """:func:`prepare` and :func:`fit_surrogate` in a daemon thread, started before the
    inputs are validated.

    Great Expectations spends seconds importing and running Python while HiGHS, which
    releases the GIL, solves; validating first and fitting after added both. The solve's
    progress is held back until :meth:`surrogate` reports the ``solve`` stage. When
    validation fails the caller stops waiting, and the thread, which writes nothing,
    ends with its fit.
    """

    def __init__(self, request: ExplainRequest, ensemble, frame, test_frame, progress=None):
        self._progress, self._held, self._reporting = progress, None, False
        self._lock = threading.Lock()
        self._prepared, self._fitted = Future(), Future()
        threading.Thread(
            target=self._run,
            args=(request, ensemble, frame, test_frame),
            name="miret-fit",
            daemon=True,
        ).start()

    def _run(self, request, ensemble, frame, test_frame) -> None:
        try:
            prepared = prepare(request, ensemble, frame, test_frame)
            self._prepared.set_result(prepared)
            surrogate = fit_surrogate(request, prepared.ensemble, prepared.raw_train, self._report)
            self._fitted.set_result(surrogate)
        except BaseException as exc:  # noqa: BLE001 - raised again in the waiting caller
            if not self._prepared.done():
                self._prepared.set_exception(exc)
            self._fitted.set_exception(exc)

    def _report(self, stage: str, detail: dict) -> None:
        with self._lock:
            if self._reporting:
                notify(self._progress, stage, detail)
            else:
                self._held = (stage, detail)

    def prepared(self) -> Prepared:
        """The prepared data (waits for it; raises what preparing raised)."""
        return _interruptible_result(self._prepared)

    def surrogate(self):
        """The fitted surrogate (waits for it; raises what the fit raised), after
        reporting the ``solve`` stage and the latest progress held back."""
        with self._lock:
            self._reporting = True
            notify(self._progress, "solve")
            if self._held is not None:
                notify(self._progress, *self._held)
        return _interruptible_result(self._fitted)


def _interruptible_result(future: Future):
    """``future.result()``, waiting in slices: a lock wait ends only for a signal this
    thread receives, and SIGINT may go to the fit's thread (Ctrl-C would then wait for
    the whole fit)."""
    while not future.done():
        wait([future], timeout=0.25)
        check_interrupted()
    return future.result()


def fit_surrogate(request: ExplainRequest, ensemble, raw_train, progress=None):
    """Fit ``MiretSurrogate(ensemble, **request.fit)`` on ``raw_train`` (the ensemble's
    input units) within ``request.fit.time_limit`` seconds; ``progress`` sees the
    solver's incumbent and bound."""
    from miret_governance.governance.miret import MiretSurrogate

    surrogate = MiretSurrogate(ensemble, **request.fit)
    return surrogate.fit(raw_train, progress=solve_progress(progress))


def solve_progress(progress):
    """The solver's ``(elapsed, incumbent, bound, gap)`` callback that reports them to
    ``progress`` (if any) as the ``"solve"`` stage's detail."""

    def on_solve(elapsed, incumbent, bound, gap):
        detail = {"elapsed": elapsed, "incumbent": incumbent, "bound": bound, "gap": gap}
        notify(progress, "solve", detail)

    return on_solve


SOLVER_PREFIX = "solver."
"""Prefix of the solver's internals among the metrics; the headline metrics
(:data:`governance.metrics.HEADLINE_METRICS`) carry no prefix."""


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
        "work": report["solver_work"],
        "nodes": report["nodes"],
        "n_binaries": report["n_binaries"],
        "n_constraints": report["n_constraints"],
    }
    return {f"{SOLVER_PREFIX}{k}": float(v) for k, v in values.items() if measured(v) is not None}


def measured(value):
    """``value``, or None where it was not measured (None or NaN: e.g. CART's held-out
    fidelity without fall-backs)."""
    return value if value is not None and math.isfinite(value) else None


def tree_scaler(ensemble, surrogate):
    """The map from the ensemble's working space to the tree's: None when the ensemble
    has its own MinMaxScaler (same space), else the surrogate's learned scaler."""
    return None if ensemble.scaler is not None else surrogate.input_scaler_


def evaluate(ensemble, surrogate, X_train, X_test, data) -> dict:
    """Fidelity, accuracy, proximity (at the surrogate's own threshold ``m``) and
    sparsity of the surrogate, and solver metrics."""
    from miret_governance.governance.measures.metrics import surrogate_metrics

    metrics = surrogate_metrics(
        ensemble,
        surrogate.tree_,
        X_train,
        X_test,
        data.y_train,
        data.y_test,
        proximity_threshold=surrogate.proximity_threshold_,
        tree_scaler=tree_scaler(ensemble, surrogate),
    )
    metrics.update(solver_metrics(surrogate.solve_report_.to_dict()))
    metrics.update(baseline_metrics(surrogate, data, ensemble.encoding))
    return metrics


def test_confusion(ensemble, surrogate, X_test):
    """Test rows counted by the ensemble's class against the surrogate's
    (:func:`governance.metrics.surrogate_confusion`); None without test rows."""
    from miret_governance.governance.measures.metrics import surrogate_confusion

    if X_test is None or not len(X_test):
        return None
    return surrogate_confusion(
        ensemble, surrogate.tree_, X_test, tree_scaler=tree_scaler(ensemble, surrogate)
    )


def baseline_metrics(surrogate, data, encoding=None) -> dict:
    """Fidelity and feature count of the depth-D CART tree a user would fit instead
    (on the same ensemble labels), next to the surrogate's, and the cross-validated
    fidelity of both (``cv_fidelity``: of the candidate the fit returned,
    :mod:`governance.miret.selection`; left out when the fit made no folds, and CART's
    when CART did not compete on them). With the
    ensemble's ``encoding`` the CART tree's features count as their original columns,
    as the surrogate's ``n_features_used`` does."""
    solve = surrogate.solve_report_
    n_features = solve.baseline_cart_n_features
    if encoding is not None:
        n_features = encoding.original_count({j for j in surrogate.baseline_["feature"] if j >= 0})
    metrics = {
        "baseline_cart_train_fidelity": float(solve.baseline_cart_train_fidelity),
        "baseline_cart_n_features": float(n_features),
    }
    if measured(solve.baseline_cart_cv_fidelity) is not None:  # only with fall-backs
        metrics["baseline_cart_cv_fidelity"] = float(solve.baseline_cart_cv_fidelity)
    if solve.chosen in solve.cv_fidelity:
        metrics["cv_fidelity"] = float(solve.cv_fidelity[solve.chosen])
    if len(data.test):
        metrics["baseline_cart_test_fidelity"] = surrogate.baseline_fidelity(data.test)
    return metrics
