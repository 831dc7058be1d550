"""X.509 certificates of signers: loading, identities, and the chain checked at a time.

A policy may trust an organisation's certificate authority (``[authorities.<name>]``,
:mod:`governance.trust.signing`) instead of raw public keys. model-signing checks that a
bundle's leaf chains to the CA files it is given and that its signature holds, but not the
leaf's validity at the signed time, its identity, which intermediates it went through nor
revocation (its store's time is the leaf's own notBefore, so an expired leaf verifies). This
module does what the product adds, with ``cryptography``'s ``x509`` and
``x509.verification``: it writes no cryptography of its own.

The end-entity policy of the chain check is relaxed (``ExtensionPolicy.permit_all``):
the default client verifier requires the TLS ``clientAuth`` usage, which a code-signing
certificate does not have; model-signing checks the leaf's key usage (digitalSignature or
codeSigning) itself. CA certificates are checked with the Web PKI defaults.

Functions raise :class:`CertificateError` with a message; :mod:`governance.trust.signing`
puts the policy table or the record in front of it.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
from datetime import datetime
from pathlib import Path

from miret_governance.governance.errors import GovernanceError


class CertificateError(GovernanceError):
    """A certificate that does not load or does not chain (caught by
    :mod:`governance.trust.signing`, which raises its ``SignatureError``). Exit code 2."""


def load_certificates(data: bytes) -> list:
    """The PEM certificates in ``data`` (one or more).

    Raises
    ------
    CertificateError
        No PEM certificate, or one that does not parse.
    """
    from cryptography import x509

    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise CertificateError("it holds no PEM certificate (no -----BEGIN CERTIFICATE----- line)")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as error:
        raise CertificateError(str(error)) from None


def pem(certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return certificate.public_bytes(serialization.Encoding.PEM)


def sha256(certificate) -> str:
    """sha256 (hex) of a certificate's DER: how a policy digest names it."""
    from cryptography.hazmat.primitives import hashes

    return certificate.fingerprint(hashes.SHA256()).hex()


def key_fingerprint(certificate) -> str:
    """sha256 (hex) of the PEM SubjectPublicKeyInfo of the certified key: the
    fingerprint raw keys have (:attr:`governance.trust.keyring.PublicKey.fingerprint`)."""
    from cryptography.hazmat.primitives import serialization

    spki = certificate.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(spki).hexdigest()


def serial_text(serial: int) -> str:
    """A serial number as records and policies write it: ``0x`` and lower-case hex."""
    return f"{serial:#x}"


def is_root(certificate) -> bool:
    """Whether ``certificate`` is self-issued (a root of trust)."""
    return certificate.issuer == certificate.subject


def identities(certificate) -> tuple[str, ...]:
    """The identities of a certificate: its subject alternative names (e-mail, URI,
    DNS), else its subject's common name(s)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        names = None
    if names is not None:
        values = [
            value
            for kind in (x509.RFC822Name, x509.UniformResourceIdentifier, x509.DNSName)
            for value in names.get_values_for_type(kind)
        ]
        if values:
            return tuple(values)
    return tuple(
        str(a.value) for a in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    )


def matching_identity(certificate, patterns) -> str | None:
    """The first identity of ``certificate`` that a pattern matches (``fnmatchcase``
    over the whole value, ``*`` any characters), or None."""
    return next(
        (i for i in identities(certificate) if any(fnmatch.fnmatchcase(i, p) for p in patterns)),
        None,
    )


def bundle_certificates(signature_path) -> tuple | None:
    """The certificates of a model-signing bundle, leaf first (None: a key bundle).

    Raises
    ------
    ValueError
        Not model-signing's JSON, or a certificate that does not parse.
    """
    from cryptography import x509

    with open(signature_path, "rb") as handle:
        bundle = json.loads(handle.read(1 << 20))
    chain = bundle["verificationMaterial"].get("x509CertificateChain")
    if chain is None:
        return None
    return tuple(
        x509.load_der_x509_certificate(base64.b64decode(c["rawBytes"]))
        for c in chain["certificates"]
    )


def verify_chain(leaf, intermediates, roots, allowed, at: datetime) -> None:
    """Check that ``leaf`` chains to one of ``roots`` at time ``at`` (every certificate
    of the chain valid then), through ``intermediates``; when ``allowed`` (the
    authority's intermediates) is not empty, only through those.

    Raises
    ------
    CertificateError
        Why the chain does not hold.
    """
    from cryptography.x509 import verification as xv

    verifier = (
        xv.PolicyBuilder()
        .store(xv.Store(list(roots)))
        .time(at)
        .extension_policies(
            ca_policy=xv.ExtensionPolicy.webpki_defaults_ca(),
            ee_policy=xv.ExtensionPolicy.permit_all(),
        )
        .build_client_verifier()
    )
    try:
        verified = verifier.verify(leaf, [*intermediates, *allowed])
    except xv.VerificationError as error:
        raise CertificateError(str(error)) from None
    through = [c for c in verified.chain[1:] if not is_root(c)]
    if allowed and any(c not in allowed for c in through):
        names = ", ".join(c.subject.rfc4514_string() for c in through if c not in allowed)
        raise CertificateError(
            f"it was issued through {names}, an intermediate the policy does not list"
        )


def write_pem(certificates, folder: Path) -> list[Path]:
    """``certificates`` as PEM files in ``folder`` (model-signing reads CA files)."""
    paths = []
    for index, certificate in enumerate(certificates):
        path = Path(folder, f"ca-{index}.pem")
        path.write_bytes(pem(certificate))
        paths.append(path)
    return paths
