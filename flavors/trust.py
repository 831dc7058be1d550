"""The signature of a ``miret`` model directory, and the keys trusted to check it.

:func:`flavors.miret.save_model` signs the whole model directory (MLmodel,
``evidence.json``, ``surrogate.json``, the report, ``vite/``, ``figures/``: every file but
:data:`governance.trust.signing.UNSIGNED_FILES`) for the purpose ``explain``; every reader
verifies it (:func:`verify_model_signature`) before it reads anything else, at the time
its evidence says it was made (a key rotated out or revoked since still verifies it). Trust comes
from a policy's ``[keys.<name>]`` tables: a :class:`governance.policy.Policy`, a policy
file, or the file the environment variable :data:`POLICY_ENV` names
(:func:`trusted_keys`); a policy file is checked against its signature as the
deployment's environment says (:func:`signed_policy`). A :class:`Policy` given is taken
as its caller checked it (``checked_policy``): its ``signer`` is what decisions record.

The environment is read here, once for the flavors: :func:`default_policy_path` and
:func:`default_signing_key` are the documented defaults of every library entry point
given no policy or key (``mlflow.pyfunc.load_model`` passes none); the CLI reads the same
variables as its options' defaults. Their names are defined once:
:data:`governance.policy.POLICY_ENV`, :data:`governance.trust.signers.SIGNING_KEY_ENV`, and the
token PIN's and certificates' in :mod:`governance.trust.signers`.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from miret_governance.flavors.evidence import EVIDENCE_FILE
from miret_governance.governance.trust.keyring import SignatureError, Signer, TrustedKeys
from miret_governance.governance.trust.policy import POLICY_ENV, Policy
from miret_governance.governance.trust.policy_signature import (
    POLICY_TRUST_ENV,
    REQUIRE_SIGNED_POLICY_ENV,
    checked_policy,
    requirement,
)
from miret_governance.governance.trust.signers import (
    CERTIFICATE_CHAIN_ENV,
    PKCS11_PIN_ENV,
    PKCS11_PIN_FILE_ENV,
    SIGNING_CERTIFICATE_ENV,
    SIGNING_KEY_ENV,
    SIGNING_KEY_PASSWORD_ENV,
    SigningKey,
    sign_path,
)
from miret_governance.governance.trust.signing import SIGNATURE_FILE, UNSIGNED_FILES, verify_path

PURPOSE = "explain"
OWN_KEY_NAME = "this explain's signing key"
"""The name a command gives the key it was handed when no policy names it (explain's reuse
and supersede checks trust their own key): pages say so instead of printing it as a name."""


class UnsignedEvidenceWarning(UserWarning):
    """An explanation made without a signing key: its evidence is unsigned, no gate
    passes it and no reader here trusts it."""


def default_policy_path() -> Path | None:
    """The policy file :data:`POLICY_ENV` names (None when it is unset): what a reader
    trusts when given no policy."""
    value = os.environ.get(POLICY_ENV, "").strip()
    return Path(value) if value else None


def default_signing_key() -> SigningKey | None:
    """The key :data:`SIGNING_KEY_ENV` holds or names (a PEM file, its text, or a
    ``pkcs11:`` URI), with the password of :data:`SIGNING_KEY_PASSWORD_ENV`, the token PIN
    of :data:`PKCS11_PIN_ENV` or :data:`PKCS11_PIN_FILE_ENV`, and the certificates of
    :data:`SIGNING_CERTIFICATE_ENV` and :data:`CERTIFICATE_CHAIN_ENV` (None when it is
    unset): what a job signs with when given no key.

    Raises
    ------
    SignatureError
        An unreadable file, a key that does not load (wrong password or PIN, unknown token
        or key) or is not EC, a certificate for another key.
    """
    value = os.environ.get(SIGNING_KEY_ENV, "").strip()
    if not value:
        return None
    return SigningKey.load(
        value,
        os.environ.get(SIGNING_KEY_PASSWORD_ENV) or None,
        SIGNING_KEY_ENV,
        os.environ.get(SIGNING_CERTIFICATE_ENV) or None,
        os.environ.get(CERTIFICATE_CHAIN_ENV) or None,
        os.environ.get(PKCS11_PIN_ENV) or None,
        pin_file=os.environ.get(PKCS11_PIN_FILE_ENV) or None,
        certificate_sources=(SIGNING_CERTIFICATE_ENV, CERTIFICATE_CHAIN_ENV),
    )


def trusted_keys(policy=None) -> TrustedKeys:
    """The keys a reader trusts: those of ``policy``, else of the :data:`POLICY_ENV` file.

    Parameters
    ----------
    policy : Policy, TrustedKeys, str or path, optional
        A policy, its trusted keys, or the path of a policy file.

    Raises
    ------
    SignatureError
        No policy given and :data:`POLICY_ENV` unset.
    governance.policy.PolicyError
        The policy file cannot be read.
    """
    if isinstance(policy, TrustedKeys):
        return policy
    if isinstance(policy, Policy):
        return policy.keys
    if policy is None:
        policy = default_policy_path()
        if policy is None:
            raise SignatureError(
                "no trusted keys to verify a miret surrogate's signature: pass policy=<policy "
                f"file> (govern: --policy) or set {POLICY_ENV} to a policy file whose "
                '[keys.<name>] table trusts the key that signs evidence (may_sign = ["explain"])'
            )
    return signed_policy(Path(policy)).keys


def signed_policy(path: Path) -> Policy:
    """The policy file at ``path``, its signature checked as the deployment's
    environment says: verified with the :data:`POLICY_TRUST_ENV` file when it names one,
    required when :data:`REQUIRE_SIGNED_POLICY_ENV` is set
    (:func:`governance.trust.policy_signature.checked_policy`).

    Raises
    ------
    governance.policy.PolicyError
    SignatureError
    """
    trust = os.environ.get(POLICY_TRUST_ENV, "").strip()
    required = requirement(os.environ.get(REQUIRE_SIGNED_POLICY_ENV))
    return checked_policy(path, Path(trust) if trust else None, required)


def sign_model_dir(path, key: SigningKey) -> str:
    """Sign every file of a model directory but :data:`UNSIGNED_FILES` into
    :data:`SIGNATURE_FILE`; the key's fingerprint."""
    return sign_path(path, key, Path(path, SIGNATURE_FILE), UNSIGNED_FILES)


def evidence_signed_at(model_dir) -> datetime | None:
    """The time the evidence of a model directory says it was made
    (``provenance.created``, ISO 8601 UTC), None when it states none.

    Read before the signature is checked, and only passed to :func:`verify_path`, which
    trusts it once the signature verified the file it came from; nothing else is read.
    """
    try:
        manifest = json.loads(Path(model_dir, EVIDENCE_FILE).read_bytes())
        return datetime.fromisoformat(manifest["provenance"]["created"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def verify_model_signature(model_dir, trusted: TrustedKeys, what: str | None = None) -> Signer:
    """Check that a model directory is signed, by a key or certificate ``trusted`` for
    ``explain`` when it was signed (:func:`evidence_signed_at`), and unchanged since (no
    file edited, added or removed).

    Raises
    ------
    SignatureError
    """
    what = what or f"the surrogate in {model_dir}"
    signature = Path(model_dir, SIGNATURE_FILE)
    signed_at = evidence_signed_at(model_dir)
    return verify_path(model_dir, signature, trusted, PURPOSE, what, signed_at)
