"""Which earlier surrogate version an explain may return instead of solving again, and
what it writes on the version pages of a new one.

Tags only narrow the search (``governance.surrogate_of`` and ``governance.explain_digest``
can be written by anyone with registry access). A candidate is reused only when its
model downloads, its signature verifies with the key of this very explain (trust in
that key's public half alone, for ``explain``) and its verified evidence names this
request: the explain digest, the ensemble version (name, version and logged-model id)
and the data digest. Without a signing key nothing is reused: the new surrogate would be
unsigned, and an earlier one cannot be told from a forgery.
"""

from __future__ import annotations

import logging
import tempfile

from mlflow.exceptions import MlflowException

from miret_governance.flavors import miret as miret_flavor
from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.gates.gate_evidence import checked_evidence
from miret_governance.flavors.store.registry import download_model, find_surrogate, version_uri
from miret_governance.flavors.trail.descriptions import describe_versions
from miret_governance.flavors.trust import OWN_KEY_NAME, PURPOSE
from miret_governance.governance.trust.keyring import TrustedKeys
from miret_governance.governance.trust.signers import SigningKey

logger = logging.getLogger(__name__)
UNSIGNED_WARNING = (
    "no signing key (--signing-key or GOVERN_SIGNING_KEY): the surrogate's evidence will be "
    "unsigned, no gate will pass it and no earlier explanation is reused; give the CI "
    "job's key to sign it"
)


def own_trust(key: SigningKey) -> TrustedKeys:
    """Trust in the public half of this explain's key alone, for ``explain``."""
    return key.trusted_for(PURPOSE, OWN_KEY_NAME)


def names_request(evidence: dict, request) -> bool:
    """Whether a verified manifest's provenance names ``request`` (an
    :class:`flavors.request.ExplainRequest`): its explain digest, ensemble version and
    data digest."""
    provenance = evidence.get("provenance") or {}
    expected = {
        "explain_digest": request.digest,
        "ensemble_name": request.ensemble_name,
        "ensemble_version": str(request.ensemble_version),
        "ensemble_model_id": request.ensemble_model_id or "",
        "data_digest": request.data_digest,
    }
    return all(str(provenance.get(k) or "") == str(v) for k, v in expected.items())


def verified_for(request, trusted: TrustedKeys):
    """A predicate on surrogate versions: the version's model downloads, its signature
    verifies with ``trusted`` and its evidence names ``request`` (:func:`names_request`).
    A refused candidate is logged with the reason."""

    def accept(version) -> bool:
        uri = version_uri(version)
        try:
            with tempfile.TemporaryDirectory(prefix="reuse-") as tmp:
                local = download_model(uri, tmp)
                evidence = miret_flavor.verify_model_dir(local, trusted, uri)
        except (GovernanceError, MlflowException, OSError, ValueError, KeyError) as error:
            logger.warning("%s carries this request's tags but is not reused: %s", uri, error)
            return False
        if not names_request(evidence, request):
            logger.warning(
                "%s carries this request's tags but its signed evidence names another "
                "request, ensemble version or data: not reused",
                uri,
            )
            return False
        return True

    return accept


def find_reusable(client, request, key: SigningKey | None):
    """The newest surrogate version this explain may return for ``request`` (None: solve).

    Parameters
    ----------
    client : MlflowClient
    request : flavors.request.ExplainRequest
    key : SigningKey or None
        This explain's signing key; None reuses nothing.
    """
    if key is None:
        return None
    accept = verified_for(request, own_trust(key))
    return find_surrogate(
        client, request.registered_name, request.ensemble_uri, request.digest, accept
    )


def describe_new_version(
    client, ensemble_version, registered, key, evidence, digest, files_digest
) -> None:
    """Write both version pages after an explain registered ``registered``: from its
    stored evidence checked as a gate checks it (signature by this explain's ``key``
    first; ``files_digest``: of the ensemble's files as this explain read them, so they
    are not downloaded again), or, for an unsigned explanation, from the figures of this
    run (``evidence``: a :class:`flavors.publish.Evidence`; ``digest``: of its
    ``evidence.json``)."""
    if key is not None:
        checked = checked_evidence(
            client, ensemble_version, registered, own_trust(key), files_digest=files_digest
        )
        describe_versions(
            client,
            ensemble_version,
            registered,
            checked.evidence,
            checked.features,
            checked.signer,
        )
        return
    status = evidence.validation.status
    view = {
        "metrics": dict(evidence.metrics),
        "validation": {"status": status, "success": status == "passed"},
        "digest": digest,
    }
    describe_versions(client, ensemble_version, registered, view)
