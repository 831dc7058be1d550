"""A test certificate authority: a root, an intermediate, and leaf certificates for
signing keys (EC P-256), written as PEM files, made with ``cryptography`` in
milliseconds.

A bank's CA issues people and services certificates for the keys they sign with
(docs/deployment.md); the tests issue theirs here. The CA's own validity starts
:data:`CA_BACKDATE` before now, so a leaf backdated for an "expired" or "not yet valid"
case is still inside its issuers' windows and fails for its own reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_BACKDATE = timedelta(days=3650)
"""How long before now the root and intermediate became valid."""
CA_LIFETIME = timedelta(days=2 * 3650)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example Bank"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_usage(certifies: bool) -> x509.KeyUsage:
    """A CA's key usage (signs certificates and CRLs) or a leaf's (digital signatures)."""
    flags = dict.fromkeys(
        ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement"), False
    )
    return x509.KeyUsage(
        digital_signature=not certifies,
        key_cert_sign=certifies,
        crl_sign=certifies,
        encipher_only=False,
        decipher_only=False,
        **flags,
    )


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def write_private_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    """``key`` as an unencrypted PKCS#8 PEM file at ``path``."""
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


@dataclass(frozen=True)
class Issued:
    """A leaf certificate and where its files are.

    Attributes
    ----------
    certificate : x509.Certificate
    certificate_path : Path
        The leaf, PEM.
    key_path : Path or None
        Its private key, PEM (None when the key lives in a token).
    """

    certificate: x509.Certificate
    certificate_path: Path
    key_path: Path | None

    @property
    def serial(self) -> int:
        return self.certificate.serial_number

    @property
    def fingerprint(self) -> str:
        """sha256 (hex) of the certificate's DER."""
        return self.certificate.fingerprint(hashes.SHA256()).hex()


class TestCA:
    """A root and an intermediate CA in ``folder``: ``root.pem``, ``intermediate.pem``.

    Parameters
    ----------
    folder : Path
    name : str
        Distinguishes two CAs (a certificate "outside the CA" comes from another one).
    """

    __test__ = False  # not a pytest class

    def __init__(self, folder: Path, name: str = "Example Bank") -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        now = datetime.now(timezone.utc)
        start, end = now - CA_BACKDATE, now - CA_BACKDATE + CA_LIFETIME
        self.root_key = ec.generate_private_key(ec.SECP256R1())
        self.root = self._ca(f"{name} Root CA", self.root_key, None, 1, start, end)
        self.intermediate_key = ec.generate_private_key(ec.SECP256R1())
        self.intermediate = self._ca(
            f"{name} Signing CA", self.intermediate_key, self.root, 0, start, end
        )
        self.root_path = self.folder / "root.pem"
        self.root_path.write_bytes(_pem(self.root))
        self.intermediate_path = self.folder / "intermediate.pem"
        self.intermediate_path.write_bytes(_pem(self.intermediate))

    def _ca(self, common_name, key, issuer, path_length, start, end) -> x509.Certificate:
        subject = _name(common_name)
        issuer_name = issuer.subject if issuer is not None else subject
        signer = self.root_key if issuer is not None else key
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
            .add_extension(_key_usage(certifies=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        )
        if issuer is not None:
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), False
            )
        return builder.sign(signer, hashes.SHA256())

    def issue(
        self,
        name: str,
        identity: str,
        public_key=None,
        not_before: datetime | None = None,
        not_after: datetime | None = None,
    ) -> Issued:
        """A code-signing leaf for ``identity`` (an e-mail address, or a URI such as
        ``spiffe://bank.example/ci``: its subject alternative name, and its common name),
        signed by the intermediate, written as ``<name>.crt.pem``; with a new private key
        (``<name>.key.pem``) unless ``public_key`` (a token's key) is given.

        Valid from an hour ago for a year unless ``not_before``/``not_after`` say otherwise.
        """
        key = None
        if public_key is None:
            key = ec.generate_private_key(ec.SECP256R1())
            public_key = key.public_key()
        now = datetime.now(timezone.utc)
        alternative = (
            x509.RFC822Name(identity)
            if "@" in identity
            else x509.UniformResourceIdentifier(identity)
        )
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(identity))
            .issuer_name(self.intermediate.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before or now - timedelta(hours=1))
            .not_valid_after(not_after or now + timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(certifies=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False)
            .add_extension(x509.SubjectAlternativeName([alternative]), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    self.intermediate_key.public_key()
                ),
                False,
            )
            .sign(self.intermediate_key, hashes.SHA256())
        )
        certificate_path = self.folder / f"{name}.crt.pem"
        certificate_path.write_bytes(_pem(certificate))
        key_path = write_private_key(key, self.folder / f"{name}.key.pem") if key else None
        return Issued(certificate, certificate_path, key_path)


def certified_key(issued: Issued, ca: TestCA):
    """``issued``'s private key file with its certificate and the intermediate, loaded as
    the product's :class:`governance.trust.signers.SigningKey` (as ``--signing-key``,
    ``--signing-certificate`` and ``--certificate-chain`` give them)."""
    from miret_governance.governance.trust.signers import SigningKey

    return SigningKey.load(
        str(issued.key_path),
        certificate=str(issued.certificate_path),
        chain=str(ca.intermediate_path),
    )


def sign_with(key, path: Path, signature: Path) -> Path:
    """A bundle of ``path`` (a file, or a directory but the signature in it) signed with
    ``key`` (:func:`governance.trust.signers.sign_path`) at ``signature``."""
    from miret_governance.governance.trust.signers import sign_path

    ignored = (Path(signature),) if Path(path).is_dir() else ()
    sign_path(Path(path), key, Path(signature), ignored)
    return Path(signature)
