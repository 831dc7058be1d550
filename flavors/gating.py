"""Promotion gates in the MLflow registry: evaluate, record, promote.

The gates of a policy (:mod:`governance.gates`) are checked against the metrics of the
surrogate version linked to an ensemble version (tag ``governance.surrogate``). Numeric
gates are decided by MLflow's own model-validation machinery: each becomes a
``mlflow.models.MetricThreshold`` checked by ``mlflow.validate_evaluation_results``. Its
threshold check is inclusive (``value >= threshold`` when greater is better, ``<=``
otherwise) and a missing metric fails, exactly as :func:`governance.gates.evaluate`
decides, so the two verdicts agree (tested at, above and below every threshold).

Every evaluation is recorded twice: as a run of the ``governance-gates`` experiment
(``gate_report.json`` and ``gate_report.md`` artifacts, the metrics seen, the policy as
params) and as ``governance.gate.*`` tags on the ensemble version. A promotion sets the
alias only when every gate passes and tags the version with
``governance.promotion.<alias> = promoted|refused``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timezone

import mlflow
from mlflow import MlflowClient
from mlflow.entities import LoggedModelInput
from mlflow.exceptions import MlflowException

from flavors.errors import GateError
from flavors.inputs import load_ensemble, read_table
from flavors.registry import (
    SURROGATE_OF_TAG,
    SURROGATE_TAG,
    model_id_of,
    parse_registry_uri,
    resolve_model_version,
    version_uri,
)
from governance.gates import GATES, Evaluation, Policy, evaluate

GATE_EXPERIMENT = "governance-gates"
GATE_STATUS_TAG = "governance.gate.status"
GATE_DIGEST_TAG = "governance.gate.policy_digest"
GATE_TIME_TAG = "governance.gate.time"
GATE_RUN_TAG = "governance.gate.run_id"
PROMOTION_TAG = "governance.promotion.{alias}"
_ALIAS = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


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


def evaluate_gates(policy: Policy, metrics: dict, tags: dict) -> Evaluation:
    """:func:`governance.gates.evaluate`, with MLflow deciding the numeric gates.

    Raises
    ------
    GateError
        If MLflow and :mod:`governance.gates` ever disagree on a gate (they must not).
    """
    evaluation = evaluate(policy, metrics, tags)
    for result in evaluation.results:
        spec = GATES[result.name]
        if spec.kind is bool:
            continue
        passed, message = mlflow_verdict(
            spec.metric, result.threshold, spec.greater_is_better, metrics.get(spec.metric)
        )
        if passed != result.passed:
            raise GateError(
                f"gate {result.name}: MLflow's MetricThreshold says {passed}, "
                f"governance.gates says {result.passed} ({message})"
            )
    return evaluation


# ---------------------------------------------------------------------- registry
def linked_surrogate(client: MlflowClient, version):
    """The surrogate ModelVersion linked to an ensemble version by tag.

    Raises
    ------
    GateError
        No ``governance.surrogate`` tag, a dangling link, or a link that does not point
        back (``governance.surrogate_of``).
    """
    ensemble_uri = version_uri(version)
    link = version.tags.get(SURROGATE_TAG)
    if not link:
        raise GateError(
            f"{ensemble_uri} has no linked surrogate (tag {SURROGATE_TAG}); explain it "
            f"first: govern explain --model-uri {ensemble_uri} --data <file>"
        )
    try:
        surrogate = resolve_model_version(client, link)
    except Exception as error:
        raise GateError(f"{ensemble_uri} links to {link}, which cannot be read: {error}") from error
    back = surrogate.tags.get(SURROGATE_OF_TAG)
    if back != ensemble_uri:
        raise GateError(
            f"{link} is tagged {SURROGATE_OF_TAG}={back!r}, not {ensemble_uri}: the link is "
            "inconsistent; explain the ensemble version again"
        )
    return surrogate


def surrogate_evidence(client: MlflowClient, surrogate) -> tuple[dict, dict, str]:
    """Metrics and tags of a surrogate version.

    Metrics come from the surrogate's logged model (by ``model_id``; latest value per
    key), falling back to its run's metrics for keys the model lacks. Tags are the
    version's, falling back to the run's.

    Returns
    -------
    (metrics, tags, source)
        ``source`` says where the metrics were read.
    """
    run_metrics, model_metrics, tags = {}, {}, {}
    if surrogate.run_id:
        run = client.get_run(surrogate.run_id)
        run_metrics = dict(run.data.metrics)
        tags.update(run.data.tags)
    model_id = model_id_of(surrogate)
    if model_id:
        logged = client.get_logged_model(model_id)
        for metric in sorted(logged.metrics or [], key=lambda m: (m.step, m.timestamp)):
            model_metrics[metric.key] = metric.value
    tags.update(surrogate.tags)
    sources = [f"logged model {model_id}"] if model_metrics else []
    fallback = sorted(set(run_metrics) - set(model_metrics))
    if fallback:
        keys = f" for {', '.join(fallback)}" if model_metrics else ""
        sources.append(f"run {surrogate.run_id}{keys}")
    metrics = {**run_metrics, **model_metrics}
    return metrics, tags, "; ".join(sources) or "nothing"


@dataclass
class GateOutcome:
    """Outcome of :func:`gate_model_version`.

    Attributes
    ----------
    ensemble_uri, surrogate_uri : str
        ``models:/<name>/<version>`` of both versions.
    evaluation : Evaluation
    run_id, experiment_id : str
        The gate-report run.
    metrics_source : str
    time : str
        ISO 8601 UTC time of the evaluation.
    """

    ensemble_uri: str
    surrogate_uri: str
    evaluation: Evaluation
    run_id: str
    experiment_id: str
    metrics_source: str
    time: str


def _experiment_id(client: MlflowClient) -> str:
    experiment = client.get_experiment_by_name(GATE_EXPERIMENT)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(GATE_EXPERIMENT)
    except MlflowException:  # created concurrently
        return client.get_experiment_by_name(GATE_EXPERIMENT).experiment_id


def gate_model_version(model_uri: str, policy: Policy, client: MlflowClient | None = None):
    """Evaluate a policy on an ensemble version's linked surrogate, and record it.

    Parameters
    ----------
    model_uri : str
        ``models:/<name>/<version>`` or ``models:/<name>@<alias>`` of the ensemble.
    policy : Policy
    client : MlflowClient, optional

    Returns
    -------
    GateOutcome
    """
    client = client or MlflowClient()
    version = resolve_model_version(client, model_uri)
    surrogate = linked_surrogate(client, version)
    ensemble_uri = version_uri(version)
    surrogate_uri = version_uri(surrogate)
    metrics, tags, source = surrogate_evidence(client, surrogate)
    evaluation = evaluate_gates(policy, metrics, tags)
    status = "passed" if evaluation.all_passed else "failed"
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")

    experiment_id = _experiment_id(client)
    run = client.create_run(
        experiment_id,
        run_name=f"gate {version.name} v{version.version}",
        tags={
            "governance.ensemble_uri": ensemble_uri,
            "governance.surrogate_uri": surrogate_uri,
            "governance.requested_model_uri": model_uri,
            "governance.policy_source": policy.source,
            "governance.metrics_source": source,
            GATE_STATUS_TAG: status,
            GATE_DIGEST_TAG: evaluation.policy_digest,
            GATE_TIME_TAG: now,
        },
    )
    run_id = run.info.run_id
    try:
        ids = (model_id_of(version), model_id_of(surrogate))
        models = [LoggedModelInput(m) for m in ids if m]
        if models:
            client.log_inputs(run_id, models=models)
        for name, threshold in policy.gates.items():
            client.log_param(run_id, f"gate.{name}", threshold)
        for result in evaluation.results:
            if isinstance(result.value, float):
                client.log_metric(run_id, result.metric, result.value)
        client.log_metric(run_id, "gates_passed", float(evaluation.all_passed))
        report = evaluation.to_json()
        report.update(
            ensemble_uri=ensemble_uri,
            surrogate_uri=surrogate_uri,
            policy_source=policy.source,
            metrics_source=source,
            time=now,
            authority="mlflow.validate_evaluation_results (numeric gates)",
        )
        client.log_dict(run_id, report, "gate_report.json")
        header = (
            f"Ensemble `{ensemble_uri}`, surrogate `{surrogate_uri}`, policy "
            f"`{policy.source}`, evaluated {now}.\n\n"
        )
        client.log_text(run_id, header + evaluation.to_markdown(), "gate_report.md")
    except Exception:
        client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, "FINISHED")

    for key, value in {
        GATE_STATUS_TAG: status,
        GATE_DIGEST_TAG: evaluation.policy_digest,
        GATE_TIME_TAG: now,
        GATE_RUN_TAG: run_id,
    }.items():
        client.set_model_version_tag(version.name, version.version, key, value)
    return GateOutcome(
        ensemble_uri=ensemble_uri,
        surrogate_uri=surrogate_uri,
        evaluation=evaluation,
        run_id=run_id,
        experiment_id=experiment_id,
        metrics_source=source,
        time=now,
    )


@dataclass
class PromotionOutcome:
    """Outcome of :func:`promote_model_version`.

    Attributes
    ----------
    gate : GateOutcome
    alias : str
    promoted : bool
    alias_version : str or None
        Version the alias points to afterwards (None when it points nowhere).
    """

    gate: GateOutcome
    alias: str
    promoted: bool
    alias_version: str | None


def _alias_version(client: MlflowClient, name: str, alias: str) -> str | None:
    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def promote_model_version(
    model_uri: str, alias: str, policy: Policy, client: MlflowClient | None = None
) -> PromotionOutcome:
    """Run the gates and set ``alias`` on the version only when all of them pass.

    A refusal leaves the alias where it was. Both outcomes are tagged on the version:
    ``governance.promotion.<alias>`` (``promoted``/``refused``) with ``.policy_digest``,
    ``.time`` and ``.run_id`` companions, and on the gate-report run.

    Raises
    ------
    GateError
        An alias MLflow would reject (checked before anything is recorded).
    """
    if not _ALIAS.match(alias) or alias.lower() == "latest" or re.match(r"^v\d+$", alias):
        raise GateError(
            f"alias {alias!r} is not valid: use letters, digits, '_' and '-', starting "
            "with a letter, and not 'latest' or 'v<number>'"
        )
    client = client or MlflowClient()
    outcome = gate_model_version(model_uri, policy, client)
    name, number, _ = parse_registry_uri(outcome.ensemble_uri)
    promoted = outcome.evaluation.all_passed
    if promoted:
        client.set_registered_model_alias(name, alias, number)
    status = "promoted" if promoted else "refused"
    tag = PROMOTION_TAG.format(alias=alias)
    for key, value in {
        tag: status,
        f"{tag}.policy_digest": outcome.evaluation.policy_digest,
        f"{tag}.time": outcome.time,
        f"{tag}.run_id": outcome.run_id,
    }.items():
        client.set_model_version_tag(name, number, key, value)
    client.set_tag(outcome.run_id, tag, status)
    return PromotionOutcome(
        gate=outcome,
        alias=alias,
        promoted=promoted,
        alias_version=_alias_version(client, name, alias),
    )


# ---------------------------------------------------------------------- validation
def validate_model_inputs(
    model_uri: str, data, target: str | None = None, mostly: float = 1.0, trust_pickle=False
):
    """Validate a data file against a registered ensemble's feature schema (the data is
    read by :func:`flavors.inputs.read_table`, labels checked by ``check_labels``;
    ``trust_pickle`` as in :func:`flavors.inputs.load_ensemble`).

    Returns
    -------
    governance.validation.ValidationReport
    """
    from governance.validation import validate_inputs

    ensemble, _ = load_ensemble(model_uri, trust_pickle)
    return validate_inputs(read_table(data), ensemble, label=target, mostly=mostly)
