"""What :func:`flavors.explain.explain_model_version` returns: :class:`ExplainResult`,
for a surrogate it registered or one it reused (:func:`reused_result`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import mlflow

from miret_governance.flavors.explain import reuse
from miret_governance.flavors.store.registry import (
    describe_surrogate,
    link_surrogate,
    model_id_of,
    version_uri,
)
from miret_governance.flavors.trail import links
from miret_governance.flavors.trail.supersede import Superseded


@dataclass
class ExplainResult:
    """Outcome of :func:`flavors.explain.explain_model_version`.

    Attributes
    ----------
    surrogate_uri : str
        ``models:/<name>-surrogate/<version>``.
    registered_name, version : str
    ensemble_uri : str
        ``models:/<name>/<version>`` (an alias is resolved to its version).
    run_id, model_id : str
        The explain run and the surrogate's logged model.
    metrics : dict
    rules : str
        One line per branch node, raw units.
    reused : bool
        True when an existing surrogate version was returned (found before solving, or
        registered meanwhile by a concurrent explain of the same request).
    validation : str
        ``passed`` or ``failed``.
    solve : dict
        The solver report.
    tracking_uri : str
    seconds : float
        Wall time of the call.
    recovered_runs : list of str
        Runs of this ensemble version left RUNNING by a killed process, ended as KILLED.
    recovery_notes : list of str
        What cleaning up after them did, in sentences (runs ended, versions they
        registered deleted, links repaired: :class:`flavors.faults.Recovery`).
    signed_by : str
        Fingerprint of the key that signed the surrogate ("" when it is unsigned).
    parameters : dict
        The explain run's parameters: those the surrogate was fitted with (with a
        search, the chosen ones; :func:`flavors.context.chosen_text` says which).
    superseded : flavors.trail.supersede.Superseded or None
        The promotions and approvals that stopped counting when the new surrogate was
        linked (``supersede=True``); None when none did.
    """

    surrogate_uri: str
    registered_name: str
    version: str
    ensemble_uri: str
    run_id: str
    model_id: str
    metrics: dict
    rules: str
    reused: bool
    validation: str
    solve: dict = field(default_factory=dict)
    tracking_uri: str = ""
    seconds: float = 0.0
    recovered_runs: list = field(default_factory=list)
    signed_by: str = ""
    recovery_notes: list = field(default_factory=list)
    parameters: dict = field(default_factory=dict)
    superseded: Superseded | None = None


def reused_result(
    client, ensemble_version, existing, request, started, recovered, key, superseded=None
):
    """The result for an existing surrogate version, verified with ``key``, which the
    ensemble version now links, with a signed link record (so ``govern gate`` evaluates
    exactly the version reported, :mod:`flavors.links`); ``superseded``: what linking it
    made stop counting."""
    link_surrogate(client, ensemble_version, existing)
    links.record_link(client, ensemble_version, existing, key)
    summary = describe_surrogate(version_uri(existing), reuse.own_trust(key), client)
    return ExplainResult(
        surrogate_uri=summary["uri"],
        registered_name=existing.name,
        version=str(existing.version),
        ensemble_uri=request.ensemble_uri,
        run_id=existing.run_id or "",
        model_id=model_id_of(existing) or "",
        metrics=summary["metrics"],
        rules=summary["rules"],
        reused=True,
        validation=summary["validation"] or "",
        solve=summary["solve"],
        tracking_uri=mlflow.get_tracking_uri(),
        seconds=time.time() - started,
        recovered_runs=recovered.runs,
        recovery_notes=recovered.notes(),
        signed_by=summary["signer"].fingerprint,
        parameters=summary["parameters"],
        superseded=superseded,
    )
