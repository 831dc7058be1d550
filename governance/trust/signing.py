"""Verifying signatures on evidence and decisions, with keys a policy trusts for a purpose.

What ``govern explain`` produces (a surrogate's model directory) and what ``gate``,
``promote`` and ``approve`` decide (one JSON record each) are signed with OpenSSF
model-signing: a Sigstore bundle holding a DSSE envelope whose in-toto statement lists
the sha256 of every file, signed with an elliptic-curve private key
(``model_signing.signing.Config().use_elliptic_key_signer``). No cryptography is
written here: this module checks a bundle with the library and maps its answers to
messages.

What a policy trusts, for which purposes and when, is :mod:`governance.trust.keyring`;
private keys and signing are :mod:`governance.trust.signers`.
"""

from __future__ import annotations

import json
import re
import tempfile
from datetime import datetime
from pathlib import Path

from miret_governance.governance.trust import certificates as x509s
from miret_governance.governance.trust.keyring import (
    SignatureError,
    Signer,
    TrustedKeys,
)
from miret_governance.governance.trust.signers import SIGNING_KEY_ENV

SIGNATURE_FILE = "model.sig"
"""The bundle inside a signed model directory (model-signing's default name)."""

UNSIGNED_FILES = (SIGNATURE_FILE, "registered_model_meta")
"""Files of a model directory outside the signature: the bundle itself and the metadata
MLflow writes when a registered version is downloaded (never read)."""


def signed_by(signature_path) -> str:
    """The key fingerprint a key bundle names (not yet verified).

    Raises
    ------
    SignatureError
        No bundle, or one that is not model-signing's JSON.
    """
    try:
        with open(signature_path, "rb") as handle:
            bundle = json.loads(handle.read(1 << 20))
        hint = bundle["verificationMaterial"]["publicKey"]["hint"]
    except FileNotFoundError as error:
        raise SignatureError(f"{Path(signature_path).name} is missing: unsigned") from error
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SignatureError(
            f"{Path(signature_path).name} is not a model-signing bundle ({error!r})"
        ) from error
    if not isinstance(hint, str) or len(hint) != 64:
        raise SignatureError(f"{Path(signature_path).name} names no key fingerprint")
    return hint


def _certificates(signature_path) -> tuple | None:
    """The certificates a bundle carries, leaf first (None: a key bundle)."""
    try:
        return x509s.bundle_certificates(signature_path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise SignatureError(
            f"{Path(signature_path).name} is not a model-signing bundle ({error!r})"
        ) from error


def _key_bundle(signature_path, fingerprint: str, folder: Path) -> Path:
    """A copy of a certificate bundle whose verification material names the leaf's
    public key instead (what a key bundle holds: the DSSE signature is over the payload
    alone), for the key verifier, which reads no certificates (model-signing 1.1.1)."""
    bundle = json.loads(Path(signature_path).read_bytes())
    bundle["verificationMaterial"] = {"publicKey": {"hint": fingerprint}, "tlogEntries": []}
    copy = Path(folder, "key-bundle.sig")
    copy.write_text(json.dumps(bundle))
    return copy


def verify_path(
    path,
    signature_path,
    trusted: TrustedKeys,
    purpose: str,
    what: str,
    signed_at: datetime | None = None,
) -> Signer:
    """Verify a file or directory against its bundle, signed by a key or a certificate
    ``trusted`` for ``purpose`` at ``signed_at`` (the time the signed content states).

    A key bundle is checked with the raw key its hint names. A certificate bundle is
    checked with a raw key equal to its leaf's when the policy lists one for
    ``purpose`` (its public key alone), else with the authority whose chain, window and identity patterns trust
    its leaf at ``signed_at`` (:meth:`TrustedKeys.certified`; model-signing's certificate
    verifier is given that authority's certificates, never an empty list, which would
    trust public web CAs). Every file of a directory must be covered, unchanged, except
    the paths the signed statement itself lists as ignored.

    Returns
    -------
    Signer

    Raises
    ------
    SignatureError
        Unsigned, signed by an untrusted key or certificate, or one not trusted for
        ``purpose`` or not at ``signed_at`` (:meth:`TrustedKeys.check_signer`), or files
        that differ from the signed statement.
    """
    from model_signing import verifying

    if not Path(signature_path).is_file():
        raise SignatureError(
            f"{what} is unsigned (no {Path(signature_path).name}): it was not produced by a "
            f"job holding a trusted signing key ({SIGNING_KEY_ENV}), or its signature was "
            "deleted from the store since"
        )
    certificates = _certificates(signature_path)
    fingerprint = (
        x509s.key_fingerprint(certificates[0]) if certificates else signed_by(signature_path)
    )
    named = trusted.with_fingerprint(fingerprint)
    authority = None
    if certificates and (named is None or purpose not in named.may_sign):
        authority, signer = trusted.certified(certificates, purpose, what, signed_at)
    else:
        key = trusted.key_for(fingerprint, purpose, what)
        signer = Signer(key.name, key.fingerprint)
    trusted.check_signer(signer, signed_at, what)
    with tempfile.TemporaryDirectory(prefix="govern-pub-") as tmp:
        if authority is not None:
            files = x509s.write_pem(authority.certificates, Path(tmp))
            config = verifying.Config().use_certificate_verifier(certificate_chain=files)
        else:
            public = Path(tmp, "key.pub")
            public.write_bytes(named.pem)
            config = verifying.Config().use_elliptic_key_verifier(public_key=public)
            if certificates:  # the key alone: its bundle without the certificates
                signature_path = _key_bundle(signature_path, named.fingerprint, Path(tmp))
        try:
            config.verify(Path(path), Path(signature_path))
        except Exception as error:  # the library raises ValueError and others
            raise SignatureError(
                f"{what} does not match its signature by {signer.describe()} "
                f"({_differences(str(error))}): it was altered after it was signed"
            ) from error
    return signer


def _differences(message: str) -> str:
    """model-signing's mismatch message in short: edited, added and missing files."""
    edited = [
        "the file" if name == "." else name
        for name in re.findall(r"Hash mismatch for \\?'([^'\\]*)\\?'", message)
    ]
    parts = [f"edited: {', '.join(edited[:5])}"] if edited else []
    parts += re.findall(r"(?:Extra|Missing) files (?:found )?in [^:]*: [^\]\"]*", message)
    return "; ".join(parts) or message[:300]
