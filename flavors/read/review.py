"""What a reviewer reads back: a surrogate version, its ensemble and their review status
(``govern show``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.gates.gate_evidence import check_explains
from miret_governance.flavors.store.reads import CommandClient
from miret_governance.flavors.store.registry import (
    EXPLAIN_FIRST,
    GATE_RUN_TAG,
    GATE_TAG,
    POLICY_RUN_TAG,
    RESULT_RUN_TAG,
    describe_surrogate,
    gate_alias,
    linked_versions,
    version_uri,
)
from miret_governance.flavors.trail.decisions import (
    APPROVAL_EXPERIMENT,
    GATE_EXPERIMENT,
    LINK_EXPERIMENT,
    VERIFICATION_EXPERIMENT,
    approvals_of,
    decision_runs_in,
)
from miret_governance.flavors.trail.governed import ensemble_uri_of
from miret_governance.flavors.trail.links import check_presented
from miret_governance.flavors.trust import trusted_keys

REVIEW_TAG_PREFIXES = ("governance.last_gate", "governance.promotion")
"""Tags of the ensemble version that record gate evaluations and promotion decisions."""


@dataclass(frozen=True)
class LastGate:
    """The ensemble version's last gate evaluation, for what it was evaluated.

    Attributes
    ----------
    result : str
        ``PASS`` or ``FAIL``.
    policy : str
        The policy's label (``unknown policy`` when the gate run cannot be read).
    alias : str or None
        The alias it was a promotion to; None for a what-if gate.
    run_id : str
    """

    result: str
    policy: str
    alias: str | None
    run_id: str

    def to_json(self) -> dict:
        return asdict(self)


def last_gate(client: MlflowClient, ensemble) -> LastGate | None:
    """The last gate of ``ensemble`` from its tags and its gate run's (None: no gate yet)."""
    result, run_id = ensemble.tags.get(GATE_TAG), ensemble.tags.get(GATE_RUN_TAG) or ""
    if not result:
        return None
    try:
        tags = client.get_run(run_id).data.tags if run_id else {}
    except MlflowException:
        tags = {}
    policy = tags.get(POLICY_RUN_TAG, "unknown policy")
    return LastGate(tags.get(RESULT_RUN_TAG) or result, policy, gate_alias(tags), run_id)


def describe_for_review(model_uri: str, client: MlflowClient | None = None, policy=None) -> dict:
    """What ``govern show`` prints: the surrogate of ``model_uri`` and its ensemble.

    ``model_uri`` names either a surrogate version or an explained ensemble version
    (its ``governance.surrogate`` link is followed), or a governed version, shown as the
    ensemble version it was promoted from once its files verify
    (:func:`flavors.trail.governed.verified_governed`). Nothing of the surrogate is shown
    unless its signature verifies with a key ``policy`` trusts for ``explain``.

    Parameters
    ----------
    model_uri : str
    client : MlflowClient, optional
    policy : Policy, TrustedKeys or path, optional
        Default: the policy file ``GOVERN_POLICY`` names.

    Returns
    -------
    dict
        :func:`flavors.registry.describe_surrogate`'s keys (``signer`` included) plus
        ``ensemble``: ``uri``, ``aliases``, ``description``, ``status`` (the gate and
        promotion tags), ``last_gate`` (:class:`LastGate` or None) and ``approvals``
        (:func:`flavors.decisions.approvals_of`).

    Raises
    ------
    ExplainError
        The version is neither a surrogate nor an explained ensemble.
    GateError
        The surrogate's signed evidence names another ensemble version than the one
        linked (:func:`flavors.gate_evidence.check_explains`), or the link tag was moved
        by hand since the latest signed link (:func:`flavors.links.check_presented`).
    governance.trust.keyring.SignatureError
        No trust configured, or the surrogate is unsigned, signed by an untrusted key or
        altered since it was signed.
    """
    trusted = trusted_keys(policy)
    client = client or CommandClient()
    try:
        ensemble, surrogate_uri = linked_versions(client, model_uri, EXPLAIN_FIRST)
    except ExplainError:  # a governed version links no surrogate: its source does
        source_uri = ensemble_uri_of(client, model_uri, trusted)
        if source_uri == model_uri:
            raise
        model_uri = source_uri
        ensemble, surrogate_uri = linked_versions(client, model_uri, EXPLAIN_FIRST)
    summary = describe_surrogate(surrogate_uri, trusted, client)
    check_explains(summary["uri"], summary["provenance"], ensemble)
    # the link, approval, gate and verification runs of the version, in one search per
    # filter (the gate and verification runs for show's verification record)
    reviewed = (LINK_EXPERIMENT, APPROVAL_EXPERIMENT, GATE_EXPERIMENT, VERIFICATION_EXPERIMENT)
    decision_runs_in(client, reviewed, version_uri(ensemble))
    check_presented(client, model_uri, ensemble, trusted)
    summary["ensemble"] = {
        "uri": version_uri(ensemble),
        "aliases": sorted(ensemble.aliases or []),
        "description": ensemble.description or "",
        "status": {
            k: v for k, v in sorted(ensemble.tags.items()) if k.startswith(REVIEW_TAG_PREFIXES)
        },
        "last_gate": last_gate(client, ensemble),
        "approvals": approvals_of(client, ensemble, trusted, summary["uri"]),
    }
    return summary
