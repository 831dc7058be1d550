"""What changed between two explained ensemble versions (``govern diff``), and the
policy's drift gates against the version holding an alias (``govern gate``).

Each side is read as a gate reads it: the ensemble version's ``governance.surrogate``
link is followed (:func:`flavors.gate_evidence.linked_surrogate`) and the surrogate's
evidence is believed only after every check of
:func:`flavors.gate_evidence.checked_evidence` (its signature by a key the policy trusts
for ``explain`` first). The VITE level frequencies come from that verified directory
(``vite/level_frequency.json``), the rules from the verified ``surrogate.json``; for an
encoded model (a pipeline's ``ColumnTransformer``, native categorical columns) both in
its original columns and categories, as ``govern explain`` writes them, through the
encoding its evidence records (``provenance.encoding``). Both ensembles are loaded
without executing code, from the files their evidence pins
(:func:`flavors.gate_evidence.pinned_ensemble`): for cross-fidelity, and for the rules
of evidence written before the encoding was recorded. What is compared, and the
distance: :mod:`governance.drift`.

A policy with ``max_explanation_drift`` or ``min_cross_fidelity`` compares the candidate
with the version holding its ``drift_against`` alias (:func:`drift_results`): no holder,
and the drift gates pass ("no champion yet"); a holder whose explanation does not verify,
and they fail. The figures go into the gate report, the signed decision record and the
gate run (tags :data:`AGAINST_TAG`, :data:`ALIAS_TAG`, metrics
:func:`drift_metrics`), from which the candidate's page shows them
(:func:`flavors.descriptions.version_descriptions`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import RunTag

from miret_governance.flavors.errors import ExplainError, GateError
from miret_governance.flavors.gates.gate_evidence import (
    CheckedEvidence,
    checked_evidence,
    linked_surrogate,
    pinned_ensemble,
)
from miret_governance.flavors.gates.recompute import data_reference
from miret_governance.flavors.store.data_files import read_table
from miret_governance.flavors.store.registry import (
    SURROGATE_OF_TAG,
    resolve_model_version,
    version_uri,
)
from miret_governance.flavors.trail.decisions import alias_moved_by_hand
from miret_governance.flavors.trust import trusted_keys
from miret_governance.governance.data.spark.frames import on_spark, spark_frame
from miret_governance.governance.ensembles.encoding import (
    aggregate,
    encoding_of,
    recorded_encoding,
    surrogate_rules,
)
from miret_governance.governance.errors import GovernanceError
from miret_governance.governance.measures.drift import Drift, Explanation, compare, drift_gates
from miret_governance.governance.measures.rule_changes import RuleChanges
from miret_governance.governance.trust.keyring import SignatureError
from miret_governance.governance.trust.policy import DRIFT_GATES, Policy
from miret_governance.governance.trust.records import DataRef

AGAINST_TAG = "governance.drift.against"
"""Gate-run tag: the ensemble version the candidate was compared with."""
ALIAS_TAG = "governance.drift.alias"
"""Gate-run tag: the alias that version held (the policy's ``drift_against``)."""
CHANGES_TAG = "governance.drift.changes"
"""Gate-run tag: what changed in the rules and features
(:meth:`governance.measures.rule_changes.RuleChanges.to_json_text`)."""


class DiffError(GovernanceError):
    """A version that cannot be compared: not an explained ensemble version, or its
    explanation does not verify. Exit code 2."""


@dataclass(frozen=True)
class Side:
    """One explained version, verified.

    Attributes
    ----------
    version, surrogate : ModelVersion
        The ensemble version and its linked surrogate version.
    checked : flavors.gate_evidence.CheckedEvidence
    explanation : governance.drift.Explanation
        Without ensemble until one is loaded for cross-fidelity.
    """

    version: object
    surrogate: object
    checked: CheckedEvidence
    explanation: Explanation

    def with_ensemble(self, trust_pickle: bool = False) -> Side:
        """This side with its ensemble loaded safely (for cross-fidelity), and its rules
        in the original columns and categories when the ensemble's pipeline encodes them."""
        ensemble = pinned_ensemble(self.version, self.checked.evidence, trust_pickle)
        encoding = encoding_of(ensemble.preprocessor)
        rules = self.explanation.rules if encoding is None else _rules(self.checked, encoding)
        explanation = replace(self.explanation, ensemble=ensemble, rules=rules)
        return replace(self, explanation=explanation)


def _level_frequency(document, surrogate_uri: str, again: str) -> pd.DataFrame:
    """The verified ``vite/level_frequency.json`` as a frame (levels as int columns)."""
    try:
        return pd.DataFrame(
            document["data"],
            index=pd.Index(document["index"], name="feature"),
            columns=pd.Index([int(c) for c in document["columns"]], name="level"),
            dtype="float64",
        )
    except (KeyError, TypeError, ValueError) as error:
        problem = (
            "has no VITE level frequencies"
            if document is None
            else f"has unreadable VITE level frequencies ({error})"
        )
        raise DiffError(f"{surrogate_uri} {problem}; {again}") from None


def _rules(checked: CheckedEvidence, encoding=None) -> str:
    """The surrogate's rules text (:func:`governance.miret.display.rules_text` for a
    fitted MiretSurrogate), with the explanation's class names; with ``encoding`` (a
    :class:`governance.encoding.Encoding`) in original columns and categories."""
    surrogate = checked.surrogate
    if hasattr(surrogate, "leaf_counts_"):
        names = (checked.provenance.get("request") or {}).get("class_names")
        return surrogate_rules(surrogate, tuple(names) if names else None, encoding)
    return surrogate.rules()


def side_of(client: MlflowClient, version, trusted, checked: CheckedEvidence | None = None) -> Side:
    """An ensemble version's verified explanation (``checked``: its evidence, already
    checked by the caller).

    Raises
    ------
    DiffError
        A surrogate version, no linked surrogate, evidence that does not verify or
        without VITE level frequencies; each names the fix.
    """
    uri = version_uri(version)
    again = f"explain it again: govern explain --model-uri {uri} --data <file> --force"
    if SURROGATE_OF_TAG in version.tags:
        raise DiffError(
            f"{uri} is a surrogate version; compare the ensemble versions it explains "
            f"(here {version.tags[SURROGATE_OF_TAG]})"
        )
    try:
        surrogate = linked_surrogate(client, version)
        checked = checked or checked_evidence(client, version, surrogate, trusted, current=True)
    except (GateError, SignatureError) as error:
        raise DiffError(f"the explanation of {uri} cannot be used: {error}") from None
    surrogate_uri = version_uri(surrogate)
    encoding = recorded_encoding(checked.provenance)
    frequency = _level_frequency(checked.level_frequency, surrogate_uri, again)
    explanation = Explanation(
        name=uri,  # an encoded model's figures and rules in its original columns
        level_frequency=frequency if encoding is None else aggregate(frequency, encoding),
        features=checked.features,
        rules=_rules(checked, encoding),
        surrogate=checked.surrogate,
    )
    return Side(version, surrogate, checked, explanation)


def cross_measured(
    against: Explanation,
    candidate: Explanation,
    data,
    reference: DataRef | None = None,
    frame=None,
) -> tuple[Drift, DataRef]:
    """What changed from ``against`` to ``candidate`` (:func:`governance.drift.compare`)
    with the cross-fidelity on ``data``: a file read into pandas (``frame``, when the
    caller read it already), or Spark data counted in Spark
    (:func:`governance.data.spark.cross.spark_cross_fidelity`), equal on the same rows;
    and the reference to the rows (``reference``, when the caller has it)."""
    if on_spark(data):
        from miret_governance.governance.data.spark.cross import spark_cross_fidelity

        frame = spark_frame(data)
        cross = spark_cross_fidelity(frame, against, candidate)
        drift = replace(compare(against, candidate), cross_fidelity=cross)
    else:
        frame = read_table(data) if frame is None else frame
        drift = compare(against, candidate, frame)
    return drift, reference or data_reference(data, frame)


@dataclass(frozen=True)
class DiffOutcome:
    """Outcome of :func:`diff_versions`.

    Attributes
    ----------
    source, target : Side
        The ``--from`` and ``--to`` versions.
    drift : governance.drift.Drift
    data : governance.trust.records.DataRef or None
        The rows cross-fidelity was measured on; None without data.
    """

    source: Side
    target: Side
    drift: Drift
    data: DataRef | None

    def to_json(self) -> dict:
        """The ``--json`` object of ``govern diff`` (without ``command``)."""
        return {
            **self.drift.to_json(),
            "from": side_json(self.source),
            "to": side_json(self.target),
            "data": None if self.data is None else self.data.to_json(),
        }


def side_json(side: Side) -> dict:
    """``ensemble_uri``, ``surrogate_uri`` and ``evidence_digest`` of a side."""
    return {
        "ensemble_uri": version_uri(side.version),
        "surrogate_uri": version_uri(side.surrogate),
        "evidence_digest": side.checked.digest,
    }


def diff_versions(
    from_uri: str,
    to_uri: str,
    data=None,
    client: MlflowClient | None = None,
    policy=None,
    trust_pickle: bool = False,
) -> DiffOutcome:
    """What changed from the explained version ``from_uri`` to ``to_uri``.

    Parameters
    ----------
    from_uri, to_uri : str
        ``models:/<name>/<version>`` or ``models:/<name>@<alias>`` of ensemble versions.
    data : str, path, governance.data.spark.frames.DataSource or Spark DataFrame, optional
        Rows with both versions' feature columns (raw units; for a pipeline that encodes
        categories, its original columns with category strings; missing values allowed),
        a CSV or Parquet file or Spark data (counted in Spark): without it, no
        cross-fidelity.
    client : MlflowClient, optional
    policy : Policy, TrustedKeys or path, optional
        Whose keys verify the evidence (default: the ``GOVERN_POLICY`` file).
    trust_pickle : bool
        As in :func:`flavors.inputs.load_ensemble` (both ensembles are loaded: the rules
        of a pipeline that encodes categories name its original columns).

    Raises
    ------
    DiffError, ExplainError, governance.drift.DriftError
    governance.miret.missing.NoMissingRuleError
        Rows with a missing value, for a surrogate of format version 1.
    """
    trusted = trusted_keys(policy)
    client = client or MlflowClient()
    sides = []
    for flag, uri in (("--from", from_uri), ("--to", to_uri)):
        try:
            sides.append(side_of(client, resolve_model_version(client, uri), trusted))
        except DiffError as error:
            raise DiffError(f"{flag} {uri}: {error}") from None
    # the ensembles: the rules of an encoding pipeline in its original columns, and
    # cross-fidelity
    source, target = (side.with_ensemble(trust_pickle) for side in sides)
    if data is None:
        return DiffOutcome(source, target, compare(source.explanation, target.explanation), None)
    drift, reference = cross_measured(source.explanation, target.explanation, data)
    return DiffOutcome(source, target, drift, reference)


# ---------------------------------------------------------------------- the gates
def _holder(client: MlflowClient, name: str, alias: str):
    """The version holding ``alias``, None when none does."""
    try:
        return resolve_model_version(client, f"models:/{name}@{alias}")
    except ExplainError:  # not found (an unreachable registry is another error)
        return None


def failed_drift(policy: Policy, alias: str, reason: str) -> list:
    """Every drift gate of ``policy``, failed with ``reason``."""
    return [replace(r, passed=False, reason=reason) for r in drift_gates(policy.gates, None, alias)]


def drift_results(
    client: MlflowClient,
    version,
    checked: CheckedEvidence,
    policy: Policy,
    data=None,
    reference: DataRef | None = None,
    frame=None,
) -> tuple[list, dict | None]:
    """The policy's drift gates for ``version`` (whose evidence ``checked`` passed the
    gate's checks), against the version holding ``policy.drift_against``; cross-fidelity
    on ``data`` (a file, or Spark data: :func:`cross_measured`), whose ``reference`` and,
    for a file, rows (``frame``) the caller may already have.

    Returns
    -------
    (list of GateResult, dict or None)
        The verdicts (none when the policy sets no drift gate) and the figures:
        ``against`` (``alias``, ``ensemble_uri``, ``surrogate_uri``,
        ``evidence_digest``), ``explanation_drift``, ``feature_overlap``, ``features``
        (``shared``, ``only_against``, ``only_candidate``), ``cross_fidelity``
        (:meth:`governance.drift.CrossFidelity.to_json` or None), ``data``
        (:meth:`governance.trust.records.DataRef.to_json` or None) and ``rule_changes``
        (:func:`governance.measures.rule_changes.rule_changes`); None when nothing was
        compared.
    """
    if not set(policy.gates) & set(DRIFT_GATES):
        return [], None
    alias = policy.drift_against
    holder = _holder(client, version.name, alias)
    moved = alias_moved_by_hand(client, version.name, alias, holder, policy.keys)
    if moved:
        return failed_drift(policy, alias, moved), None
    if holder is None:
        return drift_gates(policy.gates, None, alias), None
    try:
        against = side_of(client, holder, policy.keys)
        candidate = side_of(client, version, policy.keys, checked)
    except DiffError as error:
        return failed_drift(policy, alias, f"cannot compare with @{alias}: {error}"), None
    recorded = None
    if data is None:
        drift = compare(against.explanation, candidate.explanation)
    else:
        against, candidate = against.with_ensemble(), candidate.with_ensemble()
        drift, measured = cross_measured(
            against.explanation, candidate.explanation, data, reference, frame
        )
        recorded = measured.to_json()
    figures = {
        "against": {"alias": alias, **side_json(against)},
        "explanation_drift": drift.distance,
        "feature_overlap": drift.overlap,
        "features": {
            "shared": list(drift.shared),
            "only_against": list(drift.only_from),
            "only_candidate": list(drift.only_to),
        },
        "cross_fidelity": None if drift.cross_fidelity is None else drift.cross_fidelity.to_json(),
        "data": recorded,
        "rule_changes": drift.rule_changes().to_json(),
    }
    return drift_gates(policy.gates, drift, alias), figures


def drift_metrics(figures: dict | None) -> dict:
    """The gate run's metrics of the figures: ``explanation_drift``, ``feature_overlap``
    and, with data, ``cross_fidelity`` (the smaller direction)."""
    if not figures:
        return {}
    metrics = {
        "explanation_drift": figures["explanation_drift"],
        "feature_overlap": figures["feature_overlap"],
    }
    if figures["cross_fidelity"] is not None:
        metrics["cross_fidelity"] = figures["cross_fidelity"]["value"]
    return metrics


def log_drift(client: MlflowClient, run_id: str, figures: dict | None, logged=()) -> None:
    """Tag the gate run with what it was compared with and log :func:`drift_metrics`
    (but those in ``logged``, the gate results' metrics, logged already)."""
    if not figures:
        return
    tags = {AGAINST_TAG: figures["against"]["ensemble_uri"], ALIAS_TAG: figures["against"]["alias"]}
    if figures.get("rule_changes") is not None:  # figures recorded before it was kept lack it
        changes = RuleChanges.from_json(figures["rule_changes"])
        tags[CHANGES_TAG] = changes.to_json_text()
    client.log_batch(run_id, tags=[RunTag(key, value) for key, value in tags.items()])
    for name, value in drift_metrics(figures).items():
        if name not in logged:
            client.log_metric(run_id, name, float(value))
