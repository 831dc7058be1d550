"""A promotion policy's evaluation against a surrogate's metrics (the policy itself:
:mod:`governance.policy`).

Gates are best evaluated on *evidence*: the metrics and validation result stored inside
the surrogate artifact (see :func:`evaluate`), not on tags anyone with write access can
set. Each evaluation records the sha256 digest of that evidence. A value exactly at its
threshold passes (``>=`` for ``min_*``, ``<=`` for ``max_*``), as MLflow's
``MetricThreshold`` does. A missing or NaN metric fails its gate. ``min_class_fidelity``
reads every per-class test fidelity (``test_fidelity_class_*``): the worst class decides,
and its metric is the one the result names.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from miret_governance.governance.errors import InvalidTypeError
from miret_governance.governance.trust.policy import (
    CLASS_FIDELITY_METRICS,
    GATE_TABLE,
    GATES,
    Policy,
    canonical_digest,
)


@dataclass
class GateResult:
    """The verdict of one gate.

    Attributes
    ----------
    name : str
        Policy key, e.g. ``min_fidelity``.
    metric : str
        Metric (or tag) checked, e.g. ``test_fidelity``.
    threshold : float, int or str
        ``"passed"`` for ``require_validation_pass``.
    value : float, str or None
        Observed value; None when missing.
    passed : bool
    reason : str
    """

    name: str
    metric: str
    threshold: object
    value: object
    passed: bool
    reason: str

    @property
    def comparison(self) -> str:
        """``>=``, ``<=`` or ``==`` (validation, recomputation): the gate table's
        :attr:`governance.policy.GateSpec.comparison`."""
        return GATE_TABLE[self.name].comparison

    @property
    def advice(self) -> str | None:
        """For a gate that failed on a figure: what the figure measures and what to do,
        in plain words, from the gate table (:attr:`governance.trust.policy.GateSpec.meaning`
        and ``remedy``). None when it passed or had no figure (the reason says why:
        unsigned evidence, a metric not logged). Shown by the CLI and the gate report,
        never written into a signed record."""
        if self.passed or self.value is None or self.value != self.value:  # NaN
            return None
        spec = GATE_TABLE[self.name]
        return f"It measures {spec.meaning}. To meet it, {spec.remedy}."


@dataclass
class Evaluation:
    """All gate verdicts of one policy on one surrogate.

    Attributes
    ----------
    all_passed : bool
    results : list of GateResult
    policy_digest : str
    policy : dict
        The gates evaluated (thresholds, defaults included).
    evidence_digest : str or None
        :func:`governance.policy.canonical_digest` of the evidence evaluated (None
        when evaluated on loose metrics and tags).
    """

    all_passed: bool
    results: list
    policy_digest: str
    policy: dict = field(default_factory=dict)
    evidence_digest: str | None = None

    def to_json(self) -> dict:
        """A JSON-serializable dict (NaN values become None); each result with its
        ``comparison`` and ``advice`` (None unless it failed on a figure)."""
        results = []
        for result in self.results:
            row = asdict(result)
            row["comparison"] = result.comparison
            row["advice"] = result.advice
            if isinstance(row["value"], float) and not math.isfinite(row["value"]):
                row["value"] = None
            results.append(row)
        return {
            "all_passed": self.all_passed,
            "policy_digest": self.policy_digest,
            "policy": dict(self.policy),
            "evidence_digest": self.evidence_digest,
            "results": results,
        }


def format_value(value) -> str:
    """A threshold or metric value for tables (``-`` when missing)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, dict):  # several figures, e.g. recomputed train and test fidelity
        return ", ".join(f"{key} {format_value(item)}" for key, item in value.items())
    return str(value)


def evaluate(policy: Policy, evidence: dict) -> Evaluation:
    """Check each gate of ``policy`` against a surrogate's stored evidence.

    Parameters
    ----------
    policy : Policy
    evidence : dict
        The surrogate artifact's own evidence: ``{"metrics": {...}, "validation":
        {"success": bool, ...}, ...}`` with the metric names of
        :func:`governance.metrics.surrogate_metrics` and the solver's (``solver.gap``);
        other keys (provenance) are digested but not read, and its ``digest``, when
        given, is the one recorded. Validation passes only when ``validation.success`` is
        ``True``.

    Returns
    -------
    Evaluation
        With ``evidence_digest`` set.
    """
    if not isinstance(evidence, dict) or not isinstance(evidence.get("metrics"), dict):
        raise InvalidTypeError("evidence must be a dict with a 'metrics' dict")
    validation = evidence.get("validation")
    status = None
    if validation:
        passed = isinstance(validation, dict) and validation.get("success") is True
        status = "passed" if passed else "failed"
    results = [
        _gate(name, threshold, evidence["metrics"], status)
        for name, threshold in policy.gates.items()
        if name in GATES  # the evidence kind of the gate table
    ]
    return Evaluation(
        all_passed=all(r.passed for r in results),
        results=results,
        policy_digest=policy.digest,
        policy=dict(policy.gates),
        evidence_digest=evidence.get("digest") or canonical_digest(evidence),
    )


def _gate(name: str, threshold, metrics: dict, validation: str | None) -> GateResult:
    spec = GATE_TABLE[name]
    if spec.value_type is bool:
        passed = validation == "passed"
        reason = (
            "the inputs passed validation"
            if passed
            else f"the stored validation result is {validation!r}, not 'passed'"
            if validation is not None
            else "no validation result in the evidence (was the surrogate validated?)"
        )
        return GateResult(name, spec.metric, "passed", validation, passed, reason)
    if spec.metric == CLASS_FIDELITY_METRICS:
        return _class_gate(name, threshold, metrics)
    value = metrics.get(spec.metric)
    if value is None:
        return GateResult(
            name, spec.metric, threshold, None, False, f"metric {spec.metric} was not logged"
        )
    value = float(value)
    if math.isnan(value):
        return GateResult(name, spec.metric, threshold, value, False, f"{spec.metric} is NaN")
    op = spec.comparison
    passed = value >= threshold if spec.greater_is_better else value <= threshold
    verdict = "meets" if passed else "does not meet"
    shown, limit = readable_pair(value, threshold)
    reason = f"{spec.metric} = {shown} {verdict} {op} {limit}"
    return GateResult(name, spec.metric, threshold, value, passed, reason)


def _class_gate(name: str, threshold: float, metrics: dict) -> GateResult:
    """``min_class_fidelity``: the worst class's test fidelity decides; its metric and
    value are the result's (a NaN counts as the worst)."""
    prefix = CLASS_FIDELITY_METRICS.rstrip("*")
    values = {key: float(value) for key, value in metrics.items() if key.startswith(prefix)}
    if not values:
        reason = (
            f"the evidence has no per-class fidelity ({CLASS_FIDELITY_METRICS}): it predates "
            "per-class fidelity; re-run `govern explain` to record it"
        )
        return GateResult(name, CLASS_FIDELITY_METRICS, threshold, None, False, reason)
    worst = min(values, key=lambda key: -math.inf if math.isnan(values[key]) else values[key])
    value, label = values[worst], worst[len(prefix) :]
    if math.isnan(value):
        return GateResult(name, worst, threshold, value, False, f"{worst} (class {label}) is NaN")
    passed = value >= threshold
    shown, limit = readable_pair(value, threshold)
    reason = (
        f"worst of {len(values)} classes: {label}, {worst} = {shown} "
        f"{'meets' if passed else 'does not meet'} >= {limit}"
    )
    return GateResult(name, worst, threshold, value, passed, reason)


def readable_pair(value: float, threshold: float) -> tuple[str, str]:
    """``value`` and ``threshold`` for people: 4 significant digits, or 10 where 4 would
    show them equal (the raw values stay in the gate report's JSON and the metrics)."""
    for digits in (4, 10):
        shown, limit = f"{value:.{digits}g}", f"{threshold:.{digits}g}"
        if shown != limit or value == threshold:
            break
    return shown, limit
