"""Who signs: a private key that signs evidence and decisions, and signing a path.

The private key is given to the job that signs, never to the people who register
models: a PEM file named by ``--signing-key`` or :data:`SIGNING_KEY_ENV` (a path, or
the PEM text itself), with an optional password in :data:`SIGNING_KEY_PASSWORD_ENV`.
This module defines those names but reads no environment: the edges do
(``cli.common.load_signing_key``, ``flavors.trust.default_signing_key``) and pass
:meth:`SigningKey.load` the values. What a signature is trusted for, and checking it,
is :mod:`governance.trust.signing`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from miret_governance.governance.trust.signing import (
    SIGNING_KEY_PASSWORD_ENV,
    PublicKey,
    SignatureError,
    TrustedKeys,
    check_curve,
    public_pem,
    read_key,
)


@dataclass(frozen=True)
class SigningKey:
    """A private key that signs (never stored, logged or printed).

    Attributes
    ----------
    pem : bytes
        The PEM private key (possibly encrypted).
    password : bytes or None
    source : str
        Where it came from, for messages: the option or environment variable, and the
        file's path when it named one.
    """

    pem: bytes
    password: bytes | None
    source: str

    def __repr__(self) -> str:
        return f"SigningKey(source={self.source!r})"

    @classmethod
    def load(
        cls,
        path_or_pem: str | os.PathLike,
        password: str | None = None,
        source: str = "the path_or_pem argument",
    ) -> SigningKey:
        """A key from a PEM file or PEM text (:func:`read_key`), checked by loading it.

        ``source`` names where ``path_or_pem`` came from (``--signing-key``,
        :data:`SIGNING_KEY_ENV`) in messages, which never show the key or its password.

        Raises
        ------
        SignatureError
        """
        pem, origin = read_key(str(path_or_pem), source)
        key = cls(pem, password.encode() if password else None, origin)
        key.fingerprint  # noqa: B018 -- loads and checks it
        return key

    def _private_key(self):
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
        return key

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the public half (:attr:`PublicKey.fingerprint`)."""
        return hashlib.sha256(public_pem(self._private_key().public_key())).hexdigest()

    def trusted_for(self, purpose: str, name: str = "this job's key") -> TrustedKeys:
        """Trust in this key's public half alone, for ``purpose`` (what a job that signs
        believes of its own earlier output)."""
        pem = public_pem(self._private_key().public_key())
        return TrustedKeys((PublicKey(name, pem, (purpose,)),))

    @contextlib.contextmanager
    def _file(self):
        """The PEM in a private temporary file (model-signing reads keys from paths)."""
        with tempfile.TemporaryDirectory(prefix="govern-key-") as tmp:
            path = Path(tmp, "key.pem")
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(self.pem)
            yield path


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
    """Sign a file, or a directory with every file in it but ``ignored``; the key's
    fingerprint.

    ``signature_path`` receives the bundle; inside a directory it must be ``ignored``.
    """
    from model_signing import signing

    with key._file() as key_file:
        config = signing.Config().use_elliptic_key_signer(
            private_key=key_file, password=key.password
        )
        if Path(path).is_dir():
            config.set_hashing_config(_hashing(ignored))
        config.sign(Path(path), Path(signature_path))
    return key.fingerprint
