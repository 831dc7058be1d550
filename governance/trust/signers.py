"""Who signs: a private key in a PEM file or in a PKCS#11 token (a hardware security
module), with the certificate the organisation's CA issued for it or without, and
signing a path with it.

The key is given to the job that signs, never to the people who register models:
``--signing-key`` or :data:`SIGNING_KEY_ENV` holds a PEM file's path (or the PEM text
itself; a password in :data:`SIGNING_KEY_PASSWORD_ENV`) or a PKCS#11 URI naming a key
that never leaves its token::

    pkcs11:token=<token label>;object=<key label>?module-path=/usr/lib/softhsm/libsofthsm2.so

The token's user PIN comes from :data:`PKCS11_PIN_ENV` or the file
:data:`PKCS11_PIN_FILE_ENV` names (read without its trailing newline), never from the
URI: a ``pin-value`` there would end up in shell history and CI logs, so it is refused,
and so is ``pin-source`` (model-signing reads that file verbatim, newline included, which
the token takes for a wrong PIN). The URI is never shown: messages name the token and the
key. A certificate (:data:`SIGNING_CERTIFICATE_ENV`) and its chain of intermediate CA
certificates (:data:`CERTIFICATE_CHAIN_ENV`, PEM, several in one file) make the
signature a certificate bundle, checked against the policy's ``[authorities]``; a
certificate for another key is refused before anything is signed.

This module defines those names but reads no environment: the edges do
(``cli.common.load_signing_key``, ``flavors.trust.default_signing_key``) and pass
:meth:`SigningKey.load` the values. What a signature is trusted for, and checking it,
is :mod:`governance.trust.signing`.

model-signing's private API, and why: a token key is read, checked and signed with
through ``model_signing._signing.sign_pkcs11.Signer`` (its URI parser and login, the code
that signs), set as the ``Config``'s ``_signer``: 1.1.1 offers no public way to load a
token key without signing, nor to close the token session once signed (while it lives,
another login is refused). Certificate bundles are written by :func:`_certified`, a
subclass of model-signing's key signers (file or token) whose verification material is
the certificate chain: in 1.1.1 ``use_pkcs11_certificate_signer`` writes bundles that do
not load (no ``tlogEntries``; raw DER where base64 belongs) and ``use_certificate_signer``
takes no key password.
``tests/governance/trust/test_signing_keys.py`` fails once either is fixed upstream, or
the private API changes, so that this can go.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from miret_governance.governance.trust import certificates as x509s
from miret_governance.governance.trust.keyring import (
    PublicKey,
    SignatureError,
    TrustedKeys,
    check_curve,
    public_pem,
    read_key,
)

PKCS11_PIN_ENV = "GOVERN_PKCS11_PIN"
PKCS11_PIN_FILE_ENV = "GOVERN_PKCS11_PIN_FILE"
SIGNING_CERTIFICATE_ENV = "GOVERN_SIGNING_CERTIFICATE"
CERTIFICATE_CHAIN_ENV = "GOVERN_CERTIFICATE_CHAIN"
CERTIFICATE_OPTIONS = ("--signing-certificate", "--certificate-chain")
"""Where a certificate and its chain come from, for messages (the edges pass the
environment variables' names instead when the values are theirs)."""
PKCS11_PREFIX = "pkcs11:"
_PIN_HELP = (
    f"set {PKCS11_PIN_ENV} to the token's user PIN, or {PKCS11_PIN_FILE_ENV} to a file holding it"
)
_URI_FORM = (
    "pkcs11:token=<token label>;object=<key label>?module-path=<the vendor's PKCS#11 "
    "module, e.g. /usr/lib/softhsm/libsofthsm2.so>"
)

SIGNING_KEY_ENV = "GOVERN_SIGNING_KEY"
SIGNING_KEY_PASSWORD_ENV = "GOVERN_SIGNING_KEY_PASSWORD"


@dataclass(frozen=True)
class _FileKey:
    """A PEM private key (possibly encrypted with ``password``)."""

    pem: bytes = field(repr=False)
    password: bytes | None = field(repr=False)
    source: str

    @classmethod
    def load(cls, value: str, password, pin, pin_file, source: str) -> _FileKey:
        pem, origin = read_key(value, source)
        return cls(pem, password.encode() if password else None, origin)

    def public_key(self):
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization

        try:
            key = serialization.load_pem_private_key(self.pem, self.password)
        except (ValueError, TypeError, UnsupportedAlgorithm) as error:
            raise SignatureError(
                f"the signing key from {self.source} cannot be loaded ({error}); give the "
                f"PEM private key govern keygen wrote, and its password in "
                f"{SIGNING_KEY_PASSWORD_ENV} if it has one"
            ) from error
        check_curve(key.public_key(), f"the signing key from {self.source}")
        return key.public_key()

    @contextlib.contextmanager
    def signing(self, config, certificates: tuple):
        """``config`` signing with this key (model-signing reads it from a path: a private
        temporary file, removed once read)."""
        from model_signing._signing import sign_ec_key

        with tempfile.TemporaryDirectory(prefix="govern-key-") as tmp:
            path = Path(tmp, "key.pem")
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(self.pem)
            if certificates:
                config._signer = _certified(sign_ec_key.Signer)(certificates, path, self.password)
            else:
                config.use_elliptic_key_signer(private_key=path, password=self.password)
        yield config


@dataclass(frozen=True)
class _TokenKey:
    """A key in a PKCS#11 token: its URI with the PIN added (in memory only, never shown)."""

    uri: str = field(repr=False)
    source: str

    @classmethod
    def load(cls, value: str, password, pin, pin_file, source: str) -> _TokenKey:
        from model_signing._signing.pkcs11uri import Pkcs11URI

        uri = Pkcs11URI()
        try:
            uri.parse(value)
            uri.get_keyid_and_label()
        except ValueError as error:  # the parser's messages name attributes, not values
            raise SignatureError(
                f"the PKCS#11 URI of {source} cannot be used ({error}); write it as {_URI_FORM}"
            ) from None
        for attribute, why in (
            ("pin-value", "it would end up in shell history and CI logs"),
            ("pin-source", "model-signing reads that file with its newline"),
        ):
            if uri.get_query_attribute(attribute) is not None:
                raise SignatureError(
                    f"the PKCS#11 URI of {source} holds the PIN ({attribute}): {why}; remove "
                    f"it and {_PIN_HELP}"
                )
        key = uri.get_path_attribute("object") or f"id {uri.get_path_attribute('id', True)}"
        where = f"{source} (token {uri.get_path_attribute('token')!r}, key {key!r})"
        module = uri.get_query_attribute("module-path")
        if module is None and uri.get_query_attribute("module-name") is None:
            raise SignatureError(
                f"the PKCS#11 URI of {where} names no module: add ?module-path=<the vendor's "
                "PKCS#11 module> (SoftHSM2: /usr/lib/softhsm/libsofthsm2.so)"
            )
        if module is not None and not Path(module).exists():
            raise SignatureError(
                f"the PKCS#11 module {module} of {where} does not exist: install it "
                "(SoftHSM2: apt-get install softhsm2; make services does) or correct module-path"
            )
        uri.add_query_attribute("pin-value", _pin(pin, pin_file, where), pctencode=True)
        return cls(uri.format(), where)

    def public_key(self):
        from model_signing._signing import sign_pkcs11

        with self._session(sign_pkcs11.Signer) as signer:
            key = signer.public_key()
        check_curve(key, f"the token key of {self.source}")
        return key

    @contextlib.contextmanager
    def signing(self, config, certificates: tuple):
        """``config`` signing with this key, logged in to its token until it is done."""
        from model_signing._signing import sign_pkcs11

        if certificates:
            session = self._session(_certified(sign_pkcs11.Signer), certificates)
        else:
            session = self._session(sign_pkcs11.Signer)
        with session as signer:
            config._signer = signer
            yield config

    @contextlib.contextmanager
    def _session(self, signer_class, *arguments):
        """A ``signer_class`` (model-signing's token signer) logged in, logged out after."""
        import PyKCS11

        problem = None
        try:
            signer = signer_class(*arguments, self.uri)
        except (PyKCS11.PyKCS11Error, ValueError) as error:
            problem = self._problem(error)
        if problem is not None:  # raised here: the failed login's session is closed by now
            raise SignatureError(problem)
        try:
            yield signer
        finally:  # while this session lives, another login to the token is refused
            signer.session.closeSession()
            signer.session = None

    def _problem(self, error) -> str:
        """What went wrong logging in to the token, and the fix."""
        import PyKCS11

        code, text = getattr(error, "value", None), str(error).strip()
        if code == PyKCS11.CKR_PIN_INCORRECT:
            return f"the PIN of {self.source} is wrong (CKR_PIN_INCORRECT): {_PIN_HELP}"
        if code == PyKCS11.CKR_PIN_LOCKED:
            return (
                f"the user PIN of {self.source} is locked (CKR_PIN_LOCKED): the token's "
                "security officer must unlock it"
            )
        if code == -1:  # PyKCS11: the library did not load
            return (
                f"the PKCS#11 module of {self.source} cannot be loaded ({text}): "
                "module-path must name the vendor's PKCS#11 library (.so)"
            )
        if text.startswith("Could not find a token"):
            return (
                f"the module of {self.source} has no such token: correct token= (the "
                "token's label) in the URI (SoftHSM2 finds its tokens through SOFTHSM2_CONF)"
            )
        if text.startswith("Could not find any object"):
            return (
                f"the token of {self.source} holds no such key: correct object= (the key's "
                "label) or id= in the URI (pkcs11-tool --list-objects lists them)"
            )
        return (
            f"the token key of {self.source} cannot be used ({text}): it must be an EC key "
            "on P-256, P-384 or P-521, with its public key object on the token"
        )


def _pin(pin: str | None, pin_file: str | None, where: str) -> str:
    """The PIN given, or read from ``pin_file`` without its trailing newline."""
    if pin and pin_file:
        raise SignatureError(
            f"both {PKCS11_PIN_ENV} and {PKCS11_PIN_FILE_ENV} are set for {where}: set one"
        )
    if pin_file:
        try:
            pin = Path(pin_file).read_text().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or "not text"
            raise SignatureError(
                f"{PKCS11_PIN_FILE_ENV} names {pin_file}, which cannot be read ({reason}): "
                "give the file holding the token's user PIN"
            ) from None
    if not pin:
        raise SignatureError(f"the token key of {where} needs the token's PIN: {_PIN_HELP}")
    return pin


KEY_SOURCES = {PKCS11_PREFIX: _TokenKey, "": _FileKey}
"""How a signing key value is read, by its prefix (the first that matches)."""


@functools.cache
def _certified(signer_class):
    """``signer_class`` (one of model-signing's key signers) writing the certificate
    chain as the bundle's verification material: what ``use_certificate_signer`` writes
    (base64 DER, leaf first, no transparency log entries), for any key (module docstring).
    """
    from sigstore_models.bundle import v1 as bundle_pb
    from sigstore_models.common import v1 as common_pb

    class Certified(signer_class):
        def __init__(self, certificates: tuple, *arguments):
            super().__init__(*arguments)
            self.certificates = certificates

        def _get_verification_material(self):
            chain = [
                common_pb.X509Certificate(raw_bytes=base64.b64encode(der))
                for der in self.certificates
            ]
            return bundle_pb.VerificationMaterial(
                x509_certificate_chain=common_pb.X509CertificateChain(certificates=chain),
                tlog_entries=[],
            )

    return Certified


def _load_certificates(certificate, chain, public_key, where, sources) -> tuple:
    """DER of the certificate (checked to be ``public_key``'s) and of its chain (checked
    to hold its issuer), leaf first.

    Raises
    ------
    SignatureError
    """
    from cryptography.hazmat.primitives import serialization

    if certificate is None:
        if chain is not None:
            raise SignatureError(
                f"{sources[1]} is given without {sources[0]}: give the certificate your CA "
                "issued for the signing key too, or neither"
            )
        return ()
    loaded = []
    for value, source, several in ((certificate, sources[0], False), (chain, sources[1], True)):
        if value is None:
            continue
        pem, origin = read_key(str(value), source)
        try:
            found = x509s.load_certificates(pem)
        except x509s.CertificateError as error:
            raise SignatureError(f"{origin}: {error}; give the PEM file your CA issued") from None
        if not several and len(found) != 1:
            raise SignatureError(
                f"{origin} holds {len(found)} certificates: give the signing certificate alone "
                f"there, and its intermediate CA certificates in {sources[1]}"
            )
        loaded.append((found, origin))
    (leaf,), leaf_origin = loaded[0]
    if leaf.public_key() != public_key:
        raise SignatureError(
            f"the certificate {leaf.subject.rfc4514_string()!r} of {leaf_origin} is not for "
            f"the key of {where}: give the certificate your CA issued for that key"
        )
    issuers = loaded[1][0] if len(loaded) > 1 else []
    if issuers and not any(_issued(issuer, leaf) for issuer in issuers):
        raise SignatureError(
            f"{loaded[1][1]} does not hold {leaf.issuer.rfc4514_string()!r}, the CA that "
            f"issued {leaf_origin}: give your CA's intermediate certificates"
        )
    return tuple(c.public_bytes(serialization.Encoding.DER) for c in (leaf, *issuers))


def _issued(issuer, certificate) -> bool:
    from cryptography.exceptions import InvalidSignature

    try:
        certificate.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


@dataclass(frozen=True)
class SigningKey:
    """A private key that signs, in a file or a token, and the certificates that name it
    (never stored, logged or printed).

    Attributes
    ----------
    holder : _FileKey or _TokenKey
        Where the private key is (:data:`KEY_SOURCES`).
    public : bytes
        Its public half, PEM SubjectPublicKeyInfo.
    certificates : tuple of bytes
        DER: the certificate the CA issued for the key, then its chain; empty for a raw
        key.
    """

    holder: _FileKey | _TokenKey = field(repr=False)
    public: bytes = field(repr=False)
    certificates: tuple = field(default=(), repr=False)

    def __repr__(self) -> str:
        return f"SigningKey(source={self.source!r})"

    @property
    def source(self) -> str:
        """Where it came from, for messages: the option or environment variable, and the
        file's path or the token and key labels."""
        return self.holder.source

    @classmethod
    def load(
        cls,
        value: str | os.PathLike,
        password: str | None = None,
        source: str = "the value argument",
        certificate: str | os.PathLike | None = None,
        chain: str | os.PathLike | None = None,
        pin: str | None = None,
        *,
        pin_file: str | os.PathLike | None = None,
        certificate_sources: tuple = CERTIFICATE_OPTIONS,
    ) -> SigningKey:
        """A key from a PEM file or text, or a ``pkcs11:`` URI (:data:`KEY_SOURCES`),
        checked by loading it (a token key: by logging in), with the certificate and
        chain (each a PEM path or text) checked to name it.

        ``source`` names where ``value`` came from (``--signing-key``,
        :data:`SIGNING_KEY_ENV`), ``certificate_sources`` where the certificate and chain
        did, in messages, which never show a key, a PIN or a password. ``pin`` or
        ``pin_file`` (read without its trailing newline): a token's user PIN.

        Raises
        ------
        SignatureError
        """
        value = str(value)
        kind = next(kind for prefix, kind in KEY_SOURCES.items() if value.startswith(prefix))
        holder = kind.load(value, password, pin, pin_file and str(pin_file), source)
        public_key = holder.public_key()
        certificates = _load_certificates(
            certificate, chain, public_key, holder.source, certificate_sources
        )
        return cls(holder, public_pem(public_key), certificates)

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the public half (:attr:`PublicKey.fingerprint`)."""
        return hashlib.sha256(self.public).hexdigest()

    def trusted_for(self, purpose: str | tuple, name: str = "this job's key") -> TrustedKeys:
        """Trust in this key's public half alone, for ``purpose`` (one, or a tuple of
        them: what a job that signs believes of its own earlier output)."""
        purposes = (purpose,) if isinstance(purpose, str) else tuple(purpose)
        return TrustedKeys((PublicKey(name, self.public, purposes),))


def generate_key_pair(out: str | os.PathLike, password: str | None = None) -> tuple[Path, Path]:
    """Write a new P-256 key pair: ``<out>.pem`` (private, mode 0600) and ``<out>.pub``.

    Raises
    ------
    SignatureError
        Either file exists already (keys are never overwritten).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private_path, public_path = Path(f"{out}.pem"), Path(f"{out}.pub")
    existing = [str(p) for p in (private_path, public_path) if p.exists()]
    if existing:
        raise SignatureError(
            f"{', '.join(existing)} exists already; keys are never overwritten: choose "
            "another --out or remove the old pair deliberately"
        )
    key = ec.generate_private_key(ec.SECP256R1())
    encryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    private_path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
            )
        )
    public_path.write_bytes(public_pem(key.public_key()))
    return private_path, public_path


def _hashing(ignored):
    from model_signing import hashing

    return hashing.Config().set_ignored_paths(paths=list(ignored), ignore_git_paths=False)


def sign_path(path, key: SigningKey, signature_path, ignored=()) -> str:
    """Sign a file, or a directory with every file in it but ``ignored``, with the key
    and its certificates when it has some; the key's fingerprint.

    ``signature_path`` receives the bundle; inside a directory it must be ``ignored``.
    """
    from model_signing import signing

    with key.holder.signing(signing.Config(), key.certificates) as config:
        if Path(path).is_dir():
            config.set_hashing_config(_hashing(ignored))
        config.sign(Path(path), Path(signature_path))
    return key.fingerprint
