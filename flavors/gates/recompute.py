"""The gate's own measurement: the surrogate's fidelity to the ensemble recomputed on data.

``govern gate --data FILE`` does not only read the evidence: it loads the ensemble
safely, from files whose digest is the one the evidence pins
(:func:`flavors.gate_evidence.pinned_ensemble`), takes the
surrogate the gate read from its verified, signed model directory
(:attr:`flavors.gate_evidence.CheckedEvidence.surrogate`: one read, so the surrogate
measured is the one whose evidence was checked), and measures again how often the
surrogate reproduces the ensemble's labels (:func:`recompute_fidelity`). The outcome is one
more gate result, ``recomputed_fidelity`` (its entry in
:data:`governance.policy.GATE_TABLE`, of kind ``recomputed``, compares with ``==``), so
a disagreement fails the gate (exit 1, recorded) instead of raising.

- **The explain run's own data** (the file's MLflow dataset digest is the recorded
  ``data_digest``, or ``test_data_digest`` for an explanation with a test file): the
  holdout split is rebuilt from the request record in the provenance
  (:func:`flavors.stages.prepare`: same test share, seed, stratification and clipping),
  and the stored ``train_fidelity`` and ``test_fidelity`` (only the split the file
  holds, with a test file) must be reproduced exactly, as counts of agreeing rows over
  rows.
- **Other data**: every row of the file is scored, and the recomputed fidelity's 95%
  Wilson interval (:func:`governance.metrics.wilson_interval`) must overlap the stored
  test fidelity's interval: the two measurements may differ only as much as sampling
  allows. With 114 stored test rows all agreeing (0.967-1), 200 new rows pass down to
  189 agreeing (0.904-0.969) and fail from 188 (0.898-0.965) down. A file of fewer rows
  than the explanation's ``min_test_rows`` is refused (exit 2, nothing recorded): its
  interval is too wide to contradict anything.
- **A Spark table or path** (:mod:`governance.data.spark`): as other data, the rows
  counted by ``mapInPandas`` tasks running the same readers and predictions
  (:func:`governance.data.spark.predict.agreement`); the reason names the table.

Whatever the engine, the signed gate record names the rows (:func:`data_reference`): their
identity, count and order-independent row-set digest
(:func:`governance.data.tables.row_set_digest`, in Spark
:func:`governance.data.spark.measures.row_set_digest`: the same for the same rows).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.explain import stages
from miret_governance.flavors.explain.request import MIN_TEST_ROWS, ExplainRequest
from miret_governance.flavors.gates.gate_evidence import pinned_ensemble
from miret_governance.flavors.store.data_files import (
    digest_like,
    feature_inputs,
    missing_features,
    read_table,
)
from miret_governance.governance.data.spark.frames import on_spark, source_name, spark_frame
from miret_governance.governance.data.spark.predict import agreeing
from miret_governance.governance.data.tables import row_set_digest
from miret_governance.governance.measures.metrics import wilson_interval
from miret_governance.governance.trust.gates import Evaluation, GateResult
from miret_governance.governance.trust.policy import GATE_TABLE, RECOMPUTED_FIDELITY
from miret_governance.governance.trust.records import DataRef

GATE_NAME = RECOMPUTED_FIDELITY
METRIC = GATE_TABLE[GATE_NAME].metric
"""The stored figure the gate measures again (``test_fidelity``)."""
EXACT = "reproduced exactly"
OVERLAP = "95% intervals overlap"


def with_result(evaluation: Evaluation, result: GateResult) -> Evaluation:
    """``evaluation`` with ``result`` appended (and failed when it failed)."""
    return replace(
        evaluation,
        results=[*evaluation.results, result],
        all_passed=evaluation.all_passed and result.passed,
    )


def _failed(reason: str, threshold: str = EXACT) -> GateResult:
    return GateResult(GATE_NAME, METRIC, threshold, None, False, reason)


def recompute_fidelity(
    ensemble_version, checked, data, target: str | None = None, frame=None
) -> GateResult:
    """Measure the surrogate's fidelity to the ensemble again on ``data`` and compare it
    with the checked evidence (the module docstring says how).

    Parameters
    ----------
    ensemble_version : ModelVersion
        The ensemble version the gate evaluates.
    checked : flavors.gate_evidence.CheckedEvidence
        Its linked surrogate and evidence, after every check of the gate.
    data : str, path, governance.data.spark.frames.DataSource or Spark DataFrame
        CSV or Parquet file, or Spark data, with the ensemble's feature columns.
    target : str, optional
        Label column to leave out (default: the explanation's, when the file has it).
    frame : pandas.DataFrame, optional
        The file's rows, when the caller read them already (a file only).

    Returns
    -------
    GateResult
        ``recomputed_fidelity``; ``value`` holds the recomputed fidelities.

    Raises
    ------
    ExplainError
        The file cannot be read or lacks the ensemble's feature columns, or the
        ensemble cannot be loaded.
    """
    provenance, evidence = checked.provenance, checked.evidence
    record = provenance.get("request")
    if not isinstance(record, dict):
        return _failed("the evidence records no request, so nothing can be recomputed")
    if on_spark(data):
        return _on_spark(ensemble_version, checked, data, record)
    frame = read_table(data) if frame is None else frame
    if target is None and record["target"] in frame.columns:
        target = record["target"]
    ensemble, tree, tree_scaler = _models(ensemble_version, checked)
    stored = evidence["metrics"]
    digest = digest_like(frame, data, target, record["data_digest"])
    if digest in (record["data_digest"], record["test_data_digest"]) and target == (
        record["target"] or None
    ):
        return _exact(record, digest, ensemble, tree, tree_scaler, frame, data, stored)
    X = feature_inputs(ensemble, frame, data)
    _check_rows(len(X), int(record.get("min_test_rows", MIN_TEST_ROWS)), Path(data).name)
    return _overlap(agreeing(ensemble, tree, tree_scaler, X), len(X), stored)


def _models(ensemble_version, checked) -> tuple:
    """The pinned ensemble, the surrogate's tree and the scaler in front of the tree."""
    ensemble = pinned_ensemble(ensemble_version, checked.evidence)
    surrogate = checked.surrogate
    tree = getattr(surrogate, "tree_", surrogate)
    tree_scaler = None if ensemble.scaler is not None else getattr(surrogate, "input_scaler_", None)
    return ensemble, tree, tree_scaler


def _on_spark(ensemble_version, checked, data, record) -> GateResult:
    """Other data, on Spark: every row counted in Spark, the interval compared."""
    from miret_governance.governance.data.spark.predict import agreement
    from miret_governance.governance.data.validation import raw_columns

    frame, name = spark_frame(data), source_name(data)
    ensemble, tree, tree_scaler = _models(ensemble_version, checked)
    missing = missing_features(frame.columns, raw_columns(ensemble), name)
    if missing is not None:
        raise missing
    counted = agreement(frame, ensemble, tree, tree_scaler, name)
    if counted.problem is not None:
        raise ExplainError(counted.problem)
    _check_rows(counted.rows, int(record.get("min_test_rows", MIN_TEST_ROWS)), name)
    result = _overlap(counted.agreeing, counted.rows, checked.evidence["metrics"])
    return replace(result, reason=f"{name}: {result.reason}")


def data_reference(data, frame=None) -> DataRef:
    """The reference the records keep of ``data`` (a file, Spark data or a Spark
    DataFrame; ``frame``: its rows when the caller read them already): identity, row
    count and row-set digest, the digest counted in Spark for Spark data."""
    if on_spark(data):
        from miret_governance.governance.data.spark.measures import row_set

        frame = spark_frame(data) if frame is None else frame
        return DataRef(source_name(data), *row_set(frame))
    frame = read_table(data) if frame is None else frame
    return DataRef(str(data), len(frame), row_set_digest(frame))


def _check_rows(rows: int, minimum: int, name: str) -> None:
    """Refuse rows too few to check a fidelity: fewer than ``minimum`` (the
    explanation's ``min_test_rows``; 5 rows gave a 95% interval wide enough to overlap
    any stored one, so the gate passed on nothing)."""
    if rows >= minimum:
        return
    raise ExplainError(
        f"{name} has too few rows to check the fidelity: {rows}, fewer than "
        f"the {minimum} the explanation measured per class (20 agreeing rows of 20 give a "
        "95% interval of 0.84-1); give a file with more rows. Nothing was recorded"
    )


def _exact(record, digest, ensemble, tree, tree_scaler, frame, data, stored) -> GateResult:
    """The explanation's own split rebuilt; the stored fidelities reproduced exactly."""

    def share(X) -> float:
        return agreeing(ensemble, tree, tree_scaler, X) / len(X)

    recomputed = {}
    if digest == record["test_data_digest"]:  # the explanation's test file
        recomputed["test_fidelity"] = share(feature_inputs(ensemble, frame, data))
    else:
        request = ExplainRequest.from_record(record, data=str(Path(data).resolve()))
        test_frame = frame if record["test_data_digest"] else None
        prepared = stages.prepare(request, ensemble, frame, test_frame)
        recomputed["train_fidelity"] = share(prepared.X_train)
        if test_frame is None:
            recomputed["test_fidelity"] = share(prepared.X_test)
    differ = {k: (stored.get(k), v) for k, v in recomputed.items() if stored.get(k) != v}
    reason = (
        "the explain run's data: "
        + ", ".join(f"{k} {v!r}" for k, v in recomputed.items())
        + " as stored"
        if not differ
        else "the explain run's data gives "
        + ", ".join(f"{k} {new!r}, the evidence says {old!r}" for k, (old, new) in differ.items())
    )
    metric = ", ".join(recomputed)
    return GateResult(GATE_NAME, metric, EXACT, recomputed, not differ, reason)


def _overlap(agreeing: int, rows: int, stored: dict) -> GateResult:
    """Other data: the recomputed interval must overlap the stored test interval."""
    if rows < 1:
        return _failed("the file has no rows", OVERLAP)
    low, high = wilson_interval(agreeing, rows)
    stored_low, stored_high = (
        stored.get("test_fidelity_ci_low"),
        stored.get("test_fidelity_ci_high"),
    )
    if stored_low is None or stored_high is None:
        return _failed("the evidence has no test fidelity interval to compare with", OVERLAP)
    passed = low <= stored_high and stored_low <= high
    fidelity = agreeing / rows
    reason = (
        f"{agreeing} of {rows} rows agree: {fidelity:.4f} (95% {low:.3f}-{high:.3f}); stored "
        f"test fidelity {stored.get('test_fidelity')!r} (95% {stored_low:.3f}-"
        f"{stored_high:.3f}): {'intervals overlap' if passed else 'intervals do not overlap'}"
    )
    return GateResult(GATE_NAME, METRIC, OVERLAP, fidelity, passed, reason)
