"""Promotion gates in the MLflow registry: evaluate and record (promotion on top of them:
:mod:`flavors.promotion`).

A gate accepts only evidence nobody can set by hand. The surrogate version linked to an
ensemble version (tag ``governance.surrogate``) must be

0. signed, every file of its model directory (MLmodel included), by a key the policy
   trusts for ``explain`` (:mod:`flavors.trust`); when it is unsigned, signed by another
   key or altered since, nothing of it is believed and every gate fails with the reason
   (a FAIL gate run, exit code 1);
1. a ``miret`` model (the flavors in its MLmodel, not a tag);
2. carrying its own evidence manifest (``evidence.json`` inside the artifact, every file
   digest-verified) that names this very ensemble version (name, version, URI and the
   ensemble's logged-model id) and a data digest that the explain run that logged the
   surrogate recorded as its training input;
3. consistent with that evidence where it can be recomputed: the distinct features with
   nonzero coefficients in ``surrogate.json`` are ``metrics.n_features_used``, and the
   validation ``status`` agrees with its ``success``.

The policy (:mod:`governance.gates`) is then evaluated on the evidence's metrics and
stored validation result, never on tags or run metrics. Numeric gates are also decided
by MLflow's model-validation machinery (``mlflow.validate_evaluation_results`` with one
``MetricThreshold`` per gate: inclusive thresholds, a missing metric fails), and the two
verdicts must agree (tested at, above and below every threshold). A policy's drift gates
(``max_explanation_drift``, ``min_cross_fidelity``) compare the candidate with the
version holding its ``drift_against`` alias (:func:`flavors.diff.drift_results`); their
figures go into the gate report, the run and the signed decision record.

Every evaluation is a run of the ``governance-gates`` experiment named with its result,
policy and ensemble version (``PASS lenient v1a2b3c4d · wisconsin-rf v1``), tagged
``result`` (``PASS``/``FAIL``) and with the evidence digest, and holding
``gate_report.json``, ``gate_report.md`` and the signed decision record
(:mod:`flavors.decisions`). On the ensemble version, ``governance.last_gate``
is the last evaluation (what-if or not) and ``governance.promotion.<alias>`` the last
promotion decision for that alias; both versions' descriptions are rewritten.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import mlflow
from mlflow import MlflowClient
from mlflow.entities import LoggedModelInput, Metric, Param
from mlflow.utils.mlflow_tags import MLFLOW_USER

from miret_governance.flavors.errors import GateError
from miret_governance.flavors.evidence import EVIDENCE_FILE
from miret_governance.flavors.explain.context import file_name
from miret_governance.flavors.explain.faults import process_tags
from miret_governance.flavors.gates.diff import drift_results, log_drift
from miret_governance.flavors.gates.gate_evidence import (
    CheckedEvidence,
    checked_evidence,
    linked_surrogate,
    refused_evaluation,
)
from miret_governance.flavors.gates.recompute import (
    data_reference,
    recompute_fidelity,
    with_result,
)
from miret_governance.flavors.store.data_files import read_table
from miret_governance.flavors.store.inputs import load_digested_ensemble
from miret_governance.flavors.store.reads import CommandClient
from miret_governance.flavors.store.registry import (
    EVIDENCE_DIGEST_TAG,
    GATE_RUN_TAG,
    GATE_TAG,
    POLICY_RUN_TAG,
    RESULT_RUN_TAG,
    SURROGATE_TAG,
    model_id_of,
    resolve_model_version,
    set_version_tag,
    version_uri,
)
from miret_governance.flavors.trail.decisions import (
    GATE_EXPERIMENT,
    check_trail,
    decided_by,
    experiment_id,
    finish_with_record,
    mlflow_user,
    new_record,
)
from miret_governance.flavors.trail.descriptions import describe_versions
from miret_governance.flavors.trail.governed import ensemble_uri_of
from miret_governance.flavors.trust import default_signing_key, trusted_keys
from miret_governance.governance.data.spark.frames import on_spark, spark_frame
from miret_governance.governance.report.gate_markdown import gate_markdown
from miret_governance.governance.trust.gates import Evaluation, evaluate
from miret_governance.governance.trust.keyring import SignatureError
from miret_governance.governance.trust.policy import GATE_TABLE, Policy
from miret_governance.governance.trust.records import DataRef, GateRecord
from miret_governance.governance.trust.signers import SigningKey


# ---------------------------------------------------------------------- evaluation
def mlflow_verdict(metric: str, threshold, greater_is_better: bool, value) -> tuple[bool, str]:
    """One numeric gate checked by ``mlflow.validate_evaluation_results``.

    Parameters
    ----------
    metric : str
    threshold : int or float
    greater_is_better : bool
    value : float or None
        None when the metric was not logged (MLflow then reports it missing).

    Returns
    -------
    (passed, message)
        ``message`` is MLflow's failure message, or ``"passed"``.
    """
    from mlflow.models import MetricThreshold
    from mlflow.models.evaluation import EvaluationResult
    from mlflow.models.evaluation.validation import ModelValidationFailedException

    logging.getLogger("mlflow.models.evaluation.validation").setLevel(logging.WARNING)
    thresholds = {metric: MetricThreshold(threshold=threshold, greater_is_better=greater_is_better)}
    metrics = {} if value is None else {metric: float(value)}
    try:
        mlflow.validate_evaluation_results(thresholds, EvaluationResult(metrics, artifacts={}))
    except ModelValidationFailedException as failure:
        return False, failure.message
    return True, "passed"


def evaluate_gates(policy: Policy, evidence: dict) -> Evaluation:
    """:func:`governance.gates.evaluate` on stored evidence, with MLflow also deciding
    the numeric gates.

    Raises
    ------
    GateError
        If MLflow and :mod:`governance.gates` ever disagree on a gate (they must not).
    """
    evaluation = evaluate(policy, evidence)
    metrics = evidence["metrics"]
    for result in evaluation.results:
        spec = GATE_TABLE[result.name]
        if spec.value_type is bool:
            continue
        passed, message = mlflow_verdict(  # the metric that decided (min_class_fidelity: the worst)
            result.metric, result.threshold, spec.greater_is_better, metrics.get(result.metric)
        )
        if passed != result.passed:
            raise GateError(
                f"gate {result.name}: MLflow's MetricThreshold says {passed}, "
                f"governance.gates says {result.passed} ({message})"
            )
    return evaluation


# ---------------------------------------------------------------------- registry
@dataclass
class GateOutcome:
    """Outcome of :func:`gate_model_version`.

    Attributes
    ----------
    ensemble_uri, surrogate_uri : str
        ``models:/<name>/<version>`` of both versions.
    evaluation : Evaluation
        Its ``evidence_digest`` is the digest of the stored evidence evaluated.
    run_id, experiment_id : str
        The gate-report run.
    policy : str
        The policy's label, ``<name> v<digest8>``.
    time : str
        ISO 8601 UTC time of the evaluation.
    drift : dict or None
        The drift gates' figures against the version holding the policy's
        ``drift_against`` alias (:func:`flavors.diff.drift_results`); None when nothing
        was compared.
    data : governance.trust.records.DataRef or None
        The rows the gates measured on (``data``); None without data.
    """

    ensemble_uri: str
    surrogate_uri: str
    evaluation: Evaluation
    run_id: str
    experiment_id: str
    policy: str
    time: str
    drift: dict | None = None
    data: DataRef | None = None


@dataclass(frozen=True)
class _Gated:
    outcome: GateOutcome
    version: object
    surrogate: object
    checked: CheckedEvidence


def log_gate_markdown(
    client, run_id, evaluation, policy, ensemble_uri, surrogate_uri, now, approvals=None
) -> None:
    """Write (or write again, with a promotion's ``approvals``) the run's
    ``gate_report.md`` (:func:`governance.report.gate_markdown.gate_markdown`)."""
    markdown = gate_markdown(
        evaluation,
        ensemble_uri=ensemble_uri,
        surrogate_uri=surrogate_uri,
        policy=policy.label,
        source=file_name(policy.source),
        time=now,
        approvals=approvals,
    )
    client.log_text(run_id, markdown, "gate_report.md")


def _gate_report(evaluation, policy, checked, version, surrogate, now) -> dict:
    report = evaluation.to_json()
    evidence = checked.evidence
    report.update(
        ensemble_uri=version_uri(version),
        surrogate_uri=version_uri(surrogate),
        policy_name=policy.name,
        policy_label=policy.label,
        policy_source=file_name(policy.source),
        evidence={
            "source": f"{EVIDENCE_FILE} inside {version_uri(surrogate)} (digest-verified)",
            "ensemble": evidence.get("ensemble"),
            "data_digest": evidence.get("data_digest"),
            "explain_digest": evidence.get("explain_digest"),
            "features_used": list(checked.features),
        },
        time=now,
        authority="mlflow.validate_evaluation_results (numeric gates)",
    )
    return report


def evaluate_and_record(
    client: MlflowClient,
    model_uri: str,
    policy: Policy,
    data=None,
    target=None,
    decide_drift=None,
) -> _Gated:
    """Check the evidence, evaluate the policy (with ``data``, the fidelity recomputed:
    :mod:`flavors.recompute`), log the gate run, tag the version.

    ``decide_drift(version, checked) -> (results, figures)``, when given, decides the drift
    gates instead of :func:`flavors.diff.drift_results` on ``data`` (``promote`` without
    data: :func:`flavors.recorded_drift.recorded_drift`)."""
    version = resolve_model_version(client, model_uri)
    surrogate = linked_surrogate(client, version)
    ensemble_uri, surrogate_uri = version_uri(version), version_uri(surrogate)
    reference = rows = None
    try:
        checked = checked_evidence(client, version, surrogate, policy.keys, current=True)
        evaluation = evaluate_gates(policy, checked.evidence)
        if data is not None:
            rows = None if on_spark(data) else read_table(data)  # a file read once
            recomputed = recompute_fidelity(version, checked, data, target, rows)
            evaluation = with_result(evaluation, recomputed)
            reference = data_reference(data, rows)
        if decide_drift is None:
            drift_gates, drift = drift_results(
                client, version, checked, policy, data, reference, rows
            )
        else:
            drift_gates, drift = decide_drift(version, checked)
        for drift_gate in drift_gates:
            evaluation = with_result(evaluation, drift_gate)
    except SignatureError as error:  # unsigned, untrusted or altered: every gate fails
        checked, evaluation = refused_evaluation(policy, error)
        drift = None
    result = "PASS" if evaluation.all_passed else "FAIL"
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")

    experiment = experiment_id(client, GATE_EXPERIMENT)
    run = client.create_run(
        experiment,
        run_name=f"{result} {policy.label} · {version.name} v{version.version}",
        tags={
            RESULT_RUN_TAG: result,
            POLICY_RUN_TAG: policy.label,
            "governance.policy_digest": evaluation.policy_digest,
            "governance.policy_source": file_name(policy.source),
            EVIDENCE_DIGEST_TAG: checked.digest,
            "governance.ensemble_uri": ensemble_uri,
            "governance.surrogate_uri": surrogate_uri,
            "governance.requested_model_uri": model_uri,
            MLFLOW_USER: mlflow_user(client),
            **process_tags(),
        },
    )
    run_id = run.info.run_id
    try:
        ids = (model_id_of(version), model_id_of(surrogate))
        models = [LoggedModelInput(m) for m in ids if m]
        if models:
            client.log_inputs(run_id, models=models)
        # thresholds and figures in one request (a request is what costs on a server)
        stamp = int(time.time() * 1000)
        figures = {  # one entry a metric (two gates may read one figure)
            r.metric: float(r.value)
            for r in evaluation.results
            if isinstance(r.value, (int, float)) and not isinstance(r.value, bool)
        }
        metrics = [Metric(key, value, stamp, 0) for key, value in figures.items()]
        client.log_batch(
            run_id,
            metrics=[*metrics, Metric("gates_passed", float(evaluation.all_passed), stamp, 0)],
            params=[Param(f"gate.{name}", str(value)) for name, value in policy.gates.items()],
        )
        log_drift(client, run_id, drift, {m.key for m in metrics})
        client.log_dict(
            run_id,
            _gate_report(evaluation, policy, checked, version, surrogate, now)
            | {"drift": drift}
            | ({} if reference is None else {"data": reference.to_json()}),
            "gate_report.json",
        )
        log_gate_markdown(client, run_id, evaluation, policy, ensemble_uri, surrogate_uri, now)
    except Exception:
        client.set_terminated(run_id, "FAILED")
        raise
    set_version_tag(client, version.name, version.version, GATE_TAG, result)
    set_version_tag(client, version.name, version.version, GATE_RUN_TAG, run_id)
    outcome = GateOutcome(
        ensemble_uri=ensemble_uri,
        surrogate_uri=surrogate_uri,
        evaluation=evaluation,
        run_id=run_id,
        experiment_id=experiment,
        policy=policy.label,
        time=now,
        drift=drift,
        data=reference,
    )
    return _Gated(outcome, version, surrogate, checked)


def _describe(client: MlflowClient, gated: _Gated) -> None:
    describe_versions(
        client,
        gated.version,
        gated.surrogate,
        gated.checked.evidence,
        gated.checked.features,
        gated.checked.signer,
    )


def gate_model_version(
    model_uri: str,
    policy: Policy,
    client: MlflowClient | None = None,
    data=None,
    target: str | None = None,
    signing_key: SigningKey | None = None,
):
    """Evaluate a policy on an ensemble version's linked surrogate, and record it.

    A what-if evaluation: ``governance.last_gate`` and ``governance.last_gate.run`` are set on the
    ensemble version and the descriptions are rewritten; no alias or promotion status
    changes.

    Parameters
    ----------
    model_uri : str
        ``models:/<name>/<version>`` or ``models:/<name>@<alias>`` of the ensemble.
    policy : Policy
    client : MlflowClient, optional
    data : str, path, governance.data.spark.frames.DataSource or Spark DataFrame, optional
        Recompute the surrogate's fidelity on these rows (:mod:`flavors.recompute`): the
        gate ``recomputed_fidelity`` fails when it disagrees with the evidence; the
        signed record names them (``data``: identity, rows, row-set digest).
    target : str, optional
        Label column of ``data`` (default: the explanation's).
    signing_key : SigningKey, optional
        Signs the gate's decision record (default: ``GOVERN_SIGNING_KEY``,
        :func:`flavors.trust.default_signing_key`); without one
        the record is unsigned (tag ``governance.decision_signer = unsigned``) and never
        counts.

    Returns
    -------
    GateOutcome

    Raises
    ------
    GateError
        No linked surrogate, or its evidence fails :func:`checked_evidence`.
    flavors.trail.decisions.DecisionError
        The policy binds the signing key to users other than the one the server
        authenticated (nothing recorded).
    """
    client = client or CommandClient()
    key = signing_key or default_signing_key()
    by = decided_by(policy.keys, key, client)
    model_uri = ensemble_uri_of(client, model_uri, policy.keys, policy)
    check_trail(client, resolve_model_version(client, model_uri), policy.keys)
    gated = evaluate_and_record(client, model_uri, policy, data, target)
    evaluation = gated.outcome.evaluation
    record = new_record(
        GateRecord,
        gated.version,
        gated.surrogate,
        gated.checked,
        policy,
        by,
        result="PASS" if evaluation.all_passed else "FAIL",
        drift=gated.outcome.drift or None,
        data=gated.outcome.data,
    )
    finish_with_record(client, gated.outcome.run_id, record, key, policy.keys)
    _describe(client, gated)
    return gated.outcome


# ---------------------------------------------------------------------- validation
def validate_model_inputs(
    model_uri: str,
    data,
    target: str | None = None,
    mostly: float = 1.0,
    trust_pickle=False,
    policy=None,
):
    """Validate data against a registered ensemble's feature schema and input domain: a
    file read by :func:`flavors.data_files.read_table`, or Spark data (a Spark DataFrame,
    or a :class:`governance.data.spark.frames.DataSource`) validated in Spark with the
    same report (:mod:`governance.data.spark.validation`); labels checked by
    ``check_labels``; ``trust_pickle`` as in :func:`flavors.inputs.load_ensemble`. The
    ensemble's files are downloaded once: the evidence is checked against the digest of
    the files read (:func:`flavors.inputs.load_digested_ensemble`), with one
    :class:`flavors.store.reads.CommandClient` for the command's reads.

    The domain is the ensemble's own MinMaxScaler range when it has one; otherwise the
    range of the data its linked surrogate explained, read from the surrogate's verified
    evidence (signed by a key ``policy`` trusts: :func:`flavors.trust.trusted_keys`, by
    default the ``GOVERN_POLICY`` file); with neither, only the schema and finiteness are
    checked. Each column may miss values at most as often as in the explained data
    (its ``missing_share`` in that evidence) plus 5 points; without a recorded share
    (no linked surrogate, one explained before shares were recorded, or an ensemble with
    its own MinMaxScaler and no trust configured) no column may miss any.

    Returns
    -------
    governance.validation.ValidationReport
    """
    from miret_governance.governance.data.validation import model_columns, validate_inputs

    client = CommandClient()
    version = resolve_model_version(client, model_uri)
    ensemble, files_digest = load_digested_ensemble(version_uri(version), trust_pickle)
    training_range, training_missing, trusted = None, None, None
    if version.tags.get(SURROGATE_TAG):
        try:
            trusted = trusted_keys(policy)
        except SignatureError:  # no trust configured: the stricter check, unless needed
            if ensemble.scaler is None:
                raise
    if trusted is not None:
        surrogate = linked_surrogate(client, version)
        stored = checked_evidence(
            client, version, surrogate, trusted, files_digest=files_digest, current=True
        )
        if ensemble.scaler is None:
            training_range = _range_scaler(stored.evidence["input_range"], ensemble.feature_names)
        training_missing = stored.provenance.get("missing_share") or None
    frame = spark_frame(data) if on_spark(data) else read_table(data)
    used, ignored = model_columns(frame, ensemble, target)
    report = validate_inputs(
        used,
        ensemble,
        label=target,
        mostly=mostly,
        training_range=training_range,
        training_missing=training_missing,
    )
    report.ignored_columns = ignored
    return report


def _range_scaler(input_range: dict, features):
    """A MinMaxScaler whose data range is ``input_range`` (feature -> [min, max])."""
    import pandas as pd
    from sklearn.preprocessing import MinMaxScaler

    missing = [f for f in features if f not in input_range]
    if missing:
        raise GateError(
            f"the surrogate's evidence records no input range for {missing[:5]}; explain the "
            "ensemble version again to record it"
        )
    bounds = pd.DataFrame([[input_range[f][k] for f in features] for k in (0, 1)], columns=features)
    return MinMaxScaler().fit(bounds)
