"""Signatures on evidence and decisions, with keys a policy trusts for a purpose.

What ``govern explain`` produces (a surrogate's model directory) and what ``gate``,
``promote`` and ``approve`` decide (one JSON record each) are signed with OpenSSF
model-signing: a Sigstore bundle holding a DSSE envelope whose in-toto statement lists
the sha256 of every file, signed with an elliptic-curve private key
(``model_signing.signing.Config().use_elliptic_key_signer``). No cryptography is
written here: this module loads keys, names them, and maps the library's answers to
messages.

Private keys and signing are :mod:`governance.trust.signers`. A policy names the public
keys it trusts and what each may sign (:data:`PURPOSES`)::

    [keys.ci]
    public_key = "keys/ci.pub"      # relative to the policy file, or the PEM text
    may_sign = ["explain", "decide"]
    users = ["ci"]                  # optional: the MLflow users who may sign with it

A key with ``users`` is **bound** to them: a record it signs counts only when it names,
as the user the tracking server authenticated when it was written (``server_user`` of
:class:`governance.trust.records.DecidedBy`), one of them (:meth:`PublicKey.allows`); a
key without ``users`` may be used by anyone who holds it, as before.

A key is identified by its fingerprint, the sha256 of its PEM SubjectPublicKeyInfo (the
``hint`` model-signing writes into every bundle), and named by the policy, once: a key
is listed under one name, with every purpose it may sign.

No message shows a key's value: messages name where it came from (the option, the
environment variable, the policy's table) and show a path only once it names an
existing file. A key file is read only when it is a regular file of at most
:data:`MAX_KEY_FILE_BYTES` (a device or a FIFO is refused before it is opened).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from miret_governance.governance.errors import GovernanceError

SIGNATURE_FILE = "model.sig"
"""The bundle inside a signed model directory (model-signing's default name)."""
UNSIGNED_FILES = (SIGNATURE_FILE, "registered_model_meta")
"""Files of a model directory outside the signature: the bundle itself and the metadata
MLflow writes when a registered version is downloaded (never read)."""
PURPOSES = {
    "explain": "the evidence of an explanation (a surrogate's model directory)",
    "decide": "gate and promotion decisions",
    "approve": "a reviewer's approval or rejection",
    "policy": "a policy (trusted by a deployment's policy trust file, never by a policy)",
}
SIGNING_KEY_ENV = "GOVERN_SIGNING_KEY"
SIGNING_KEY_PASSWORD_ENV = "GOVERN_SIGNING_KEY_PASSWORD"
MAX_KEY_FILE_BYTES = 16 * 1024
"""Largest key file read; a PEM key is a few hundred bytes."""
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class SignatureError(GovernanceError):
    """Evidence or a decision that is unsigned, signed by a key the policy does not trust
    for the purpose, or whose files do not match their signature. Exit code 2."""


def public_pem(public_key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def check_curve(public_key, source: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    if not isinstance(public_key, ec.EllipticCurvePublicKey) or public_key.curve.name not in (
        "secp256r1",
        "secp384r1",
        "secp521r1",
    ):
        raise SignatureError(
            f"{source} is not an elliptic-curve key on P-256, P-384 or P-521, which "
            "model-signing requires; make one with: govern keygen --out <name>"
        )


def read_key(value: str, source: str, base_dir: Path | None = None) -> tuple[bytes, str]:
    """The PEM a key value holds (text with a ``-----BEGIN`` line) or names (a path,
    relative to ``base_dir`` when given), and where it came from, for messages.

    A path must name a regular file of at most :data:`MAX_KEY_FILE_BYTES`, checked with
    ``os.stat`` before it is opened. Messages name ``source`` (e.g. ``--signing-key``)
    and never show the value unless it names an existing file.

    Raises
    ------
    SignatureError
    """
    if "-----BEGIN" in value:
        return value.encode(), source
    path = Path(value) if base_dir is None else Path(base_dir, value)
    try:
        info, reason = os.stat(path), None
    except (OSError, ValueError) as error:  # ValueError: a NUL character
        reason = getattr(error, "strerror", None) or "not a valid path"
    if reason is not None:  # raised here, without the error naming the value as context
        raise SignatureError(
            f"the value of {source} ({len(value)} characters) is not a path to an existing "
            f"file ({reason}) and is not PEM text (no -----BEGIN line): give a path or the "
            "whole PEM text"
        )
    if not stat.S_ISREG(info.st_mode):
        kind = next(
            (kind for test, kind in _FILE_KINDS if test(info.st_mode)), "not a regular file"
        )
        raise SignatureError(
            f"{source} names {path}, which is {kind}: give the key file govern keygen wrote"
        )
    too_large = SignatureError(
        f"{source} names {path}, which is larger than {MAX_KEY_FILE_BYTES // 1024} KiB: "
        "a PEM key is a few hundred bytes; give the key file govern keygen wrote"
    )
    if info.st_size > MAX_KEY_FILE_BYTES:
        raise too_large
    try:  # non-blocking, bounded: a FIFO or device swapped in since the stat cannot hang it
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(descriptor, "rb") as handle:
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as error:
        raise SignatureError(
            f"{source} names {path}, which cannot be read ({error.strerror})"
        ) from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise too_large
    return data, f"{source} ({path})"


@dataclass(frozen=True)
class PublicKey:
    """A public key a policy trusts.

    Attributes
    ----------
    name : str
        The policy's name for the key (who signs with it).
    pem : bytes
        PEM SubjectPublicKeyInfo.
    may_sign : tuple of str
        The :data:`PURPOSES` it is trusted for.
    users : tuple of str
        The MLflow users bound to it (module docstring); empty: anyone holding it.
    """

    name: str
    pem: bytes
    may_sign: tuple
    users: tuple = ()

    @property
    def fingerprint(self) -> str:
        """sha256 (hex) of :attr:`pem`."""
        return hashlib.sha256(self.pem).hexdigest()

    def allows(self, user: str | None) -> bool:
        """Whether ``user`` (the user the tracking server authenticated; None: a store
        that cannot say) may sign with this key: any user when it is bound to none."""
        return not self.users or user in self.users

    @classmethod
    def parse(cls, name: str, text: bytes, may_sign, source: str, users: tuple = ()) -> PublicKey:
        """A key from PEM text (normalized), checked to be an EC key model-signing accepts.

        Raises
        ------
        SignatureError
        """
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization

        try:
            key = serialization.load_pem_public_key(text)
        except (ValueError, UnsupportedAlgorithm) as error:
            raise SignatureError(
                f"{source} is not a PEM public key ({error}); give the .pub file "
                "govern keygen wrote"
            ) from error
        check_curve(key, source)
        return cls(name, public_pem(key), tuple(may_sign), tuple(users))


@dataclass(frozen=True)
class Signer:
    """Who signed: the trusted key's name and fingerprint."""

    name: str
    fingerprint: str

    def to_json(self) -> dict:
        return {"name": self.name, "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class TrustedKeys:
    """The public keys a policy trusts, each for some :data:`PURPOSES`."""

    keys: tuple = ()

    def to_json(self) -> dict:
        """Name -> {fingerprint, may_sign, and users when bound}: what a policy digest
        covers (a key bound to no user keeps the digest it always had)."""
        return {
            k.name: {"fingerprint": k.fingerprint, "may_sign": sorted(k.may_sign)}
            | ({"users": list(k.users)} if k.users else {})
            for k in self.keys
        }

    def names(self, purpose: str) -> list[str]:
        return [k.name for k in self.keys if purpose in k.may_sign]

    def with_fingerprint(self, fingerprint: str | None) -> PublicKey | None:
        """The trusted key with ``fingerprint`` (None when the policy names none)."""
        return next((k for k in self.keys if k.fingerprint == fingerprint), None)

    def key_for(self, fingerprint: str, purpose: str, what: str) -> PublicKey:
        """The trusted key with ``fingerprint``, if it may sign ``purpose``.

        Raises
        ------
        SignatureError
            No such key, or one not trusted for ``purpose``.
        """
        for key in self.keys:
            if key.fingerprint == fingerprint:
                if purpose not in key.may_sign:
                    raise SignatureError(
                        f"{what} is signed by key {key.name!r}, which the policy trusts "
                        f"to sign {', '.join(key.may_sign) or 'nothing'}, not {purpose}"
                    )
                return key
        trusted = ", ".join(self.names(purpose)) or "none"
        raise SignatureError(
            f"{what} is signed by key {fingerprint[:16]}..., which the policy does not "
            f"trust for {purpose} (trusted for {purpose}: {trusted}); add its public "
            "key under [keys.<name>] in the policy, or sign with a trusted key"
        )


def parse_trust(table, base_dir: Path | None, source: str) -> TrustedKeys:
    """The ``[keys.<name>]`` tables of a policy.

    Raises
    ------
    SignatureError
        A key that is not a table with ``public_key``, ``may_sign`` and optionally
        ``users``, an unknown purpose, users that are not a non-empty list of distinct
        names, an unreadable key file, a key model-signing cannot use, or one key listed
        under two names.
    """
    if not isinstance(table, dict):
        raise SignatureError(f"{source}: [keys] must hold one [keys.<name>] table per key")
    keys = {}
    for name, entry in table.items():
        where = f"{source} [keys.{name}]"
        if not isinstance(entry, dict) or not (
            {"public_key", "may_sign"} <= set(entry) <= {"public_key", "may_sign", "users"}
        ):
            raise SignatureError(
                f"{where} must have public_key (a path or PEM text), may_sign (a list of "
                f"{', '.join(PURPOSES)}) and optionally users (the MLflow users who may sign "
                "with it), nothing else"
            )
        users = entry.get("users", [])
        if (
            not isinstance(users, list)
            or ("users" in entry and not users)
            or not all(isinstance(u, str) and re.fullmatch(r"\S{1,255}", u) for u in users)
            or len(set(users)) != len(users)
        ):
            raise SignatureError(
                f"{where}: users = {users!r}; give the MLflow user names who may sign with "
                'this key, each once, e.g. users = ["reviewer"] (or leave users out)'
            )
        purposes = entry["may_sign"]
        if not isinstance(purposes, list) or not purposes or not set(purposes) <= set(PURPOSES):
            raise SignatureError(
                f"{where}: may_sign = {purposes!r}; use a non-empty list of {', '.join(PURPOSES)}"
            )
        if not isinstance(entry["public_key"], str):
            raise SignatureError(f"{where}: public_key must be a path or PEM text")
        data, origin = read_key(
            entry["public_key"], f"[keys.{name}] public_key of {source}", base_dir
        )
        key = PublicKey.parse(str(name), data, purposes, origin, tuple(sorted(users)))
        twin = keys.get(key.fingerprint)
        if twin is not None:
            both = sorted({*twin.may_sign, *key.may_sign}, key=list(PURPOSES).index)
            raise SignatureError(
                f"{source}: [keys.{twin.name}] and [keys.{name}] list the same public key; a "
                "key is listed once, with every purpose it may sign in its may_sign list: "
                f"keep one of the two tables, with may_sign = {json.dumps(both)}"
            )
        keys[key.fingerprint] = key
    return TrustedKeys(tuple(keys.values()))


def signed_by(signature_path) -> str:
    """The key fingerprint a bundle names (not yet verified).

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


def verify_path(path, signature_path, trusted: TrustedKeys, purpose: str, what: str) -> Signer:
    """Verify a file or directory against its bundle with a key trusted for ``purpose``.

    Every file of a directory must be covered, unchanged, except the paths the signed
    statement itself lists as ignored.

    Returns
    -------
    Signer

    Raises
    ------
    SignatureError
        Unsigned, signed by an untrusted key or one not trusted for ``purpose``, or files
        that differ from the signed statement.
    """
    from model_signing import verifying

    if not Path(signature_path).is_file():
        raise SignatureError(
            f"{what} is unsigned (no {Path(signature_path).name}): it was not produced by a "
            f"job holding a trusted signing key ({SIGNING_KEY_ENV}), or its signature was "
            "deleted from the store since"
        )
    key = trusted.key_for(signed_by(signature_path), purpose, what)
    with tempfile.TemporaryDirectory(prefix="govern-pub-") as tmp:
        public = Path(tmp, "key.pub")
        public.write_bytes(key.pem)
        config = verifying.Config().use_elliptic_key_verifier(public_key=public)
        try:
            config.verify(Path(path), Path(signature_path))
        except Exception as error:  # the library raises ValueError and others
            raise SignatureError(
                f"{what} does not match its signature by key {key.name!r} "
                f"({_differences(str(error))}): it was altered after it was signed"
            ) from error
    return Signer(key.name, key.fingerprint)


def _differences(message: str) -> str:
    """model-signing's mismatch message in short: edited, added and missing files."""
    edited = [
        "the file" if name == "." else name
        for name in re.findall(r"Hash mismatch for \\?'([^'\\]*)\\?'", message)
    ]
    parts = [f"edited: {', '.join(edited[:5])}"] if edited else []
    parts += re.findall(r"(?:Extra|Missing) files (?:found )?in [^:]*: [^\]\"]*", message)
    return "; ".join(parts) or message[:300]
