"""The drift gates of ``govern promote`` without data, on the figures of a signed gate
record.

``min_cross_fidelity`` needs rows: ``govern gate --data`` (or ``promote --data``) measures
it (:func:`flavors.diff.drift_results`). ``promote`` without data takes the figures of the
latest gate decision record (:mod:`flavors.decisions`) that verifies with a key the policy
trusts for ``decide`` and names

- this ensemble version (URI and logged-model id) on the evidence its surrogate holds now,
- the version holding the policy's ``drift_against`` alias now: its ensemble and
  surrogate URIs and the digest of its current verified evidence,
- a cross-fidelity,

and decides the drift gates on them with the promoting policy's thresholds
(:func:`governance.drift.drift_gates`). Run tags only say which runs to read; the signed
record decides. Without such a record the promotion is refused before anything is
recorded, naming both ways: ``--data``, or ``govern gate --data`` first.
"""

from __future__ import annotations

import pandas as pd
from mlflow import MlflowClient

from miret_governance.flavors.errors import ExplainError, GateError
from miret_governance.flavors.gates.diff import drift_results, failed_drift
from miret_governance.flavors.gates.gate_evidence import (
    CheckedEvidence,
    checked_evidence,
    linked_surrogate,
)
from miret_governance.flavors.store.registry import resolve_model_version, version_uri
from miret_governance.flavors.trail.decisions import (
    GATE_EXPERIMENT,
    DecisionError,
    alias_moved_by_hand,
    decision_runs,
    pinned,
    read_all,
)
from miret_governance.governance.measures.drift import CrossFidelity, Drift, drift_gates
from miret_governance.governance.trust.keyring import SignatureError
from miret_governance.governance.trust.policy import Policy
from miret_governance.governance.trust.records import GateRecord


def _as_drift(figures: dict, candidate_uri: str) -> Drift:
    """A gate record's drift figures (:func:`flavors.diff.drift_results`) as the Drift the
    gates read (the record keeps the figures, not the per-level changes or the rules)."""
    cross, features = figures["cross_fidelity"], figures["features"]
    rows = int(cross["rows"])
    return Drift(
        source=figures["against"]["ensemble_uri"],
        target=candidate_uri,
        distance=float(figures["explanation_drift"]),
        changes=pd.DataFrame(columns=["feature", "level", "from", "to", "change"]),
        shared=tuple(features["shared"]),
        only_from=tuple(features["only_against"]),
        only_to=tuple(features["only_candidate"]),
        overlap=float(figures["feature_overlap"]),
        rules=[],
        cross_fidelity=CrossFidelity(
            rows,
            round(cross["from_surrogate_on_to_ensemble"] * rows),
            round(cross["to_surrogate_on_from_ensemble"] * rows),
        ),
    )


def _recorded_figures(client, version, digest: str, against: dict, trusted) -> dict | None:
    """The drift figures of the latest gate record that a key ``trusted`` for ``decide``
    signed on ``version`` with evidence ``digest``, against exactly ``against`` (alias,
    ensemble and surrogate URIs, evidence digest), with cross-fidelity; None when none."""
    runs = decision_runs(client, GATE_EXPERIMENT, version_uri(version))
    for decision in reversed(read_all(client, runs, trusted, version.name)):  # newest first
        record = decision.record
        if (
            decision.valid
            and isinstance(record, GateRecord)
            and record.ensemble == pinned(version)
            and record.evidence.digest == digest
            and (record.drift or {}).get("against") == against
            and record.drift.get("cross_fidelity") is not None
        ):
            return {**record.drift, "decision_run": decision.run_id}
    return None


def recorded_drift(client: MlflowClient, policy: Policy, version, checked: CheckedEvidence):
    """The drift gates of ``promote`` without data, on recorded figures.

    The figures of the latest gate decision record that verifies with ``policy``'s keys
    and names this version on its ``checked`` evidence and the version holding
    ``policy.drift_against`` on that version's current verified evidence, with
    cross-fidelity (``govern gate --data`` records them); the gates are decided on them
    with this policy's thresholds. The figures keep ``decision_run``, the gate run they
    come from. No holder, a holder the latest signed promotion did not put there, or a
    holder whose explanation does not verify: as :func:`flavors.diff.drift_results` (the
    gates pass, or fail).

    Returns
    -------
    (list of GateResult, dict or None)
        As :func:`flavors.diff.drift_results`.

    Raises
    ------
    DecisionError
        No such record: pass data, or run ``govern gate --data`` first.
    """
    alias = policy.drift_against
    try:
        holder = resolve_model_version(client, f"models:/{version.name}@{alias}")
    except ExplainError:  # no version holds it (an unreachable registry is another error)
        return drift_results(client, version, checked, policy)
    moved = alias_moved_by_hand(client, version.name, alias, holder, policy.keys)
    if moved:
        return failed_drift(policy, alias, moved), None
    try:
        surrogate = linked_surrogate(client, holder)
        digest = checked_evidence(client, holder, surrogate, policy.keys, current=True).digest
    except (GateError, SignatureError):  # the comparison fails, with the reason
        return drift_results(client, version, checked, policy)
    against = {
        "alias": alias,
        "ensemble_uri": version_uri(holder),
        "surrogate_uri": version_uri(surrogate),
        "evidence_digest": digest,
    }
    figures = _recorded_figures(client, version, checked.digest, against, policy.keys)
    if figures is None:
        uri = version_uri(version)
        raise DecisionError(
            f"min_cross_fidelity needs the cross-fidelity of {uri} against "
            f"{against['ensemble_uri']} (@{alias}), measured on rows, and no signed gate "
            "decision on the current evidence of both records it: pass --data <file>, or run "
            f"govern gate --model-uri {uri} --data <file> first; nothing was recorded"
        )
    return drift_gates(policy.gates, _as_drift(figures, version_uri(version)), alias), figures
