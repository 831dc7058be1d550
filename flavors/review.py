"""What a reviewer reads back: a surrogate version, its ensemble and their review status
(``govern show``)."""

from __future__ import annotations

from mlflow import MlflowClient

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.registry import (
    SURROGATE_OF_TAG,
    SURROGATE_TAG,
    describe_surrogate,
    resolve_model_version,
    version_uri,
)

REVIEW_TAG_PREFIXES = ("governance.last_gate", "governance.promotion")
"""Tags of the ensemble version that record gate evaluations and promotion decisions."""


def describe_for_review(model_uri: str, client: MlflowClient | None = None) -> dict:
    """What ``govern show`` prints: the surrogate of ``model_uri`` and its ensemble.

    ``model_uri`` names either a surrogate version or an explained ensemble version
    (its ``governance.surrogate`` link is followed).

    Returns
    -------
    dict
        :func:`flavors.registry.describe_surrogate`'s keys plus ``ensemble``: ``uri``,
        ``aliases``, ``description`` and ``status`` (the gate and promotion tags).

    Raises
    ------
    ExplainError
        The version is neither a surrogate nor an explained ensemble.
    """
    client = client or MlflowClient()
    version = resolve_model_version(client, model_uri)
    if SURROGATE_OF_TAG in version.tags:
        summary = describe_surrogate(version_uri(version), client)
        ensemble = resolve_model_version(client, version.tags[SURROGATE_OF_TAG])
    elif SURROGATE_TAG in version.tags:
        ensemble = version
        summary = describe_surrogate(version.tags[SURROGATE_TAG], client)
    else:
        raise ExplainError(
            f"{version_uri(version)} is not a surrogate and has no linked surrogate (no "
            f"{SURROGATE_TAG} tag): explain it first with `govern explain --model-uri "
            f"{version_uri(version)} --data <file>`"
        )
    summary["ensemble"] = {
        "uri": version_uri(ensemble),
        "aliases": sorted(ensemble.aliases or []),
        "description": ensemble.description or "",
        "status": {
            k: v for k, v in sorted(ensemble.tags.items()) if k.startswith(REVIEW_TAG_PREFIXES)
        },
    }
    return summary
