"""The keys and certificate authorities a policy trusts, each for some purposes.

Private keys and signing are :mod:`governance.trust.signers`; verifying a signature,
:mod:`governance.trust.signing`. A policy names the public keys it trusts and what each
may sign (:data:`PURPOSES`)::

    [keys.ci]
    public_key = "keys/ci.pub"      # relative to the policy file, or the PEM text
    may_sign = ["explain", "decide"]
    users = ["ci"]                  # optional: the MLflow users who may sign with it

A key with ``users`` is **bound** to them: a record it signs counts only when it names,
as the user the tracking server authenticated when it was written (``server_user`` of
:class:`governance.trust.records.DecidedBy`), one of them (:meth:`PublicKey.allows`); a
key without ``users`` may be used by anyone who holds it, as before.

A key or a whole authority may have a validity window, and the policy a revocation list
(a key by fingerprint, a certificate by its authority and serial)::

    [keys.ci]
    ...
    valid_from = 2026-01-01T00:00:00Z   # optional TOML offset date-times
    valid_until = 2027-06-30T00:00:00Z
    [authorities.bank]                  # the organisation's CA instead of raw keys
    certificates = ["ca/root.pem", "ca/intermediate.pem"]  # self-signed ones are roots
    explain = ["spiffe://bank.example/ci/governance"]      # identity patterns per purpose
    approve = ["*@risk.example.com"]
    [[revoked]]
    fingerprint = "<sha256 of the key's PEM SubjectPublicKeyInfo>"  # or authority + serial
    revoked_at = 2026-11-01T00:00:00Z
    reason = "laptop stolen"            # optional

A signature counts when it was made inside its key's (and its certificate's and
authority's) window and before any revocation of it, at the time the signed content
itself states (a record's ``time``, the evidence's ``provenance.created``, a lock's
``taken_ms``): evidence signed before a key was rotated out or revoked stays valid.
A certificate's identity is its subject alternative names (e-mail, URI, DNS), else its
common name; a pattern matches it whole (``fnmatch``, ``*`` any characters), and the
identity that matched is who signed (:class:`Signer`). A policy's own trust may not name
the purpose ``policy``: a policy cannot vouch for itself.

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
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from miret_governance.governance.errors import GovernanceError
from miret_governance.governance.trust import certificates as x509s

PURPOSES = {
    "explain": "the evidence of an explanation (a surrogate's model directory)",
    "decide": "gate and promotion decisions",
    "approve": "a reviewer's approval or rejection",
    "policy": "a policy (the model-risk function's; trusted by a deployment's policy trust "
    "file, never by the policy itself)",
}
POLICY_PURPOSE = "policy"
ANY_PURPOSE = "any"
"""What a verification record is signed for: no policy names it (a policy's purposes are
:data:`PURPOSES`); :meth:`TrustedKeys.trusting_any` trusts for it every key and
certificate identity the policy trusts for some purpose but ``policy``."""
CLOCK_SKEW_SECONDS = 300
"""How far (5 minutes) a time a signer wrote may be from a time the store recorded (a
record's run start, a lock's creation) or from this host's clock: clocks differ."""
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


def _iso(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Window:
    """When a key or an authority is trusted: from ``valid_from`` (inclusive) until
    ``valid_until`` (exclusive); an open end when None."""

    valid_from: datetime | None = None
    valid_until: datetime | None = None

    def __bool__(self) -> bool:
        return self.valid_from is not None or self.valid_until is not None

    def contains(self, at: datetime) -> bool:
        return (self.valid_from is None or self.valid_from <= at) and (
            self.valid_until is None or at < self.valid_until
        )

    def __str__(self) -> str:
        start = f"from {_iso(self.valid_from)}" if self.valid_from else ""
        end = f"until {_iso(self.valid_until)}" if self.valid_until else ""
        return " ".join(p for p in (start, end) if p) or "always"

    def to_json(self) -> dict:
        """The set ends as ISO 8601 UTC text (nothing when open: digests unchanged)."""
        return {
            name: _iso(value)
            for name, value in (("valid_from", self.valid_from), ("valid_until", self.valid_until))
            if value is not None
        }


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
    window : Window
        When it is trusted (always, by default).
    """

    name: str
    pem: bytes
    may_sign: tuple
    users: tuple = ()
    window: Window = Window()

    @property
    def fingerprint(self) -> str:
        """sha256 (hex) of :attr:`pem`."""
        return hashlib.sha256(self.pem).hexdigest()

    def allows(self, user: str | None) -> bool:
        """Whether ``user`` (the user the tracking server authenticated; None: a store
        that cannot say) may sign with this key: any user when it is bound to none."""
        return not self.users or user in self.users

    @classmethod
    def parse(
        cls, name: str, text: bytes, may_sign, source: str, users: tuple = (), window=Window()
    ) -> PublicKey:
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
        return cls(name, public_pem(key), tuple(may_sign), tuple(users), window)


@dataclass(frozen=True)
class Authority:
    """A certificate authority a policy trusts (``[authorities.<name>]``).

    Attributes
    ----------
    name : str
    certificates : tuple of x509.Certificate
        The roots (self-signed) and the intermediates a leaf must chain through.
    patterns : tuple of (str, tuple of str)
        Purpose -> the identity patterns trusted for it (a purpose not listed: none).
    window : Window
    """

    name: str
    certificates: tuple
    patterns: tuple
    window: Window = Window()

    def patterns_for(self, purpose: str) -> tuple:
        return dict(self.patterns).get(purpose, ())

    @property
    def roots(self) -> list:
        return [c for c in self.certificates if x509s.is_root(c)]

    @property
    def intermediates(self) -> list:
        return [c for c in self.certificates if not x509s.is_root(c)]

    def to_json(self) -> dict:
        return {
            "certificates": [x509s.sha256(c) for c in self.certificates],
            "identities": {purpose: list(patterns) for purpose, patterns in self.patterns},
        } | self.window.to_json()


@dataclass(frozen=True)
class Revocation:
    """A ``[[revoked]]`` entry: a key (``fingerprint``) or a certificate (``authority``
    and ``serial``) revoked at ``revoked_at``."""

    revoked_at: datetime
    fingerprint: str | None = None
    authority: str | None = None
    serial: int | None = None
    reason: str = ""

    def matches(self, signer: Signer) -> bool:
        if self.fingerprint is not None:
            return self.fingerprint == signer.fingerprint
        return (
            signer.authority == self.authority
            and signer.serial is not None
            and int(signer.serial, 16) == self.serial
        )

    def to_json(self) -> dict:
        which = (
            {"fingerprint": self.fingerprint}
            if self.fingerprint is not None
            else {"authority": self.authority, "serial": x509s.serial_text(self.serial)}
        )
        return (
            which
            | {"revoked_at": _iso(self.revoked_at)}
            | ({"reason": self.reason} if self.reason else {})
        )


@dataclass(frozen=True)
class Signer:
    """Who signed: the trusted key's name (for a certificate, its identity) and the
    fingerprint of the public key; for a certificate also the identity that matched,
    its authority and serial (written only when set)."""

    name: str
    fingerprint: str
    identity: str | None = None
    authority: str | None = None
    serial: str | None = None

    def to_json(self) -> dict:
        extras = {"identity": self.identity, "authority": self.authority, "serial": self.serial}
        return {"name": self.name, "fingerprint": self.fingerprint} | {
            k: v for k, v in extras.items() if v is not None
        }

    def describe(self) -> str:
        """The key, or the certificate's identity and serial, for messages."""
        if self.authority is None:
            return f"key {self.name!r}"
        return f"certificate {self.identity} (serial {self.serial}, authority {self.authority!r})"


@dataclass(frozen=True)
class TrustedKeys:
    """What a policy trusts to sign: public keys and certificate authorities, each for
    some :data:`PURPOSES`, and the revocations."""

    keys: tuple = ()
    authorities: tuple = ()
    revoked: tuple = ()

    def __bool__(self) -> bool:
        return bool(self.keys or self.authorities or self.revoked)

    def to_json(self) -> dict:
        """What a policy digest covers: name -> {fingerprint, may_sign, users when bound,
        the window when set}; with authorities or revocations, ``{"keys": that,
        "authorities": ..., "revoked": ...}`` (a policy without them keeps its digest)."""
        keys = {
            k.name: {"fingerprint": k.fingerprint, "may_sign": sorted(k.may_sign)}
            | ({"users": list(k.users)} if k.users else {})
            | k.window.to_json()
            for k in self.keys
        }
        if not self.authorities and not self.revoked:
            return keys
        return (
            {"keys": keys}
            | (
                {"authorities": {a.name: a.to_json() for a in self.authorities}}
                if self.authorities
                else {}
            )
            | ({"revoked": [r.to_json() for r in self.revoked]} if self.revoked else {})
        )

    def trusting_any(self) -> TrustedKeys:
        """These keys and authorities, each also trusted for :data:`ANY_PURPOSE` (its
        windows and the revocations unchanged) when trusted for some purpose but
        ``policy``: who may sign a verification record."""

        def some(purposes) -> bool:
            return any(p != POLICY_PURPOSE for p in purposes)

        keys = tuple(
            replace(k, may_sign=(*k.may_sign, ANY_PURPOSE)) if some(k.may_sign) else k
            for k in self.keys
        )
        authorities = []
        for authority in self.authorities:
            patterns = tuple(
                p for use, ps in authority.patterns if use != POLICY_PURPOSE for p in ps
            )
            if patterns:
                authority = replace(
                    authority, patterns=(*authority.patterns, (ANY_PURPOSE, patterns))
                )
            authorities.append(authority)
        return TrustedKeys(keys, tuple(authorities), self.revoked)

    def names(self, purpose: str) -> list[str]:
        return [k.name for k in self.keys if purpose in k.may_sign]

    def authorities_for(self, purpose: str) -> list[str]:
        """The authorities trusting some identities for ``purpose``."""
        return [a.name for a in self.authorities if a.patterns_for(purpose)]

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
        authorities = self.authorities_for(purpose)
        if authorities:  # certificates of these CAs are, not this bare key
            trusted += f"; certificates of authority {', '.join(authorities)}"
        raise SignatureError(
            f"{what} is signed by key {fingerprint[:16]}..., which the policy does not "
            f"trust for {purpose} (trusted for {purpose}: {trusted}); add its public "
            "key under [keys.<name>] in the policy, or sign with a trusted key"
        )

    def check_signer(self, signer: Signer, signed_at: datetime | None, what: str) -> None:
        """Refuse ``signer`` when ``signed_at`` is outside its key's or authority's window,
        or at or after a revocation of it (the time part of :func:`verify_path`, for
        callers that learn the signed time once the signature verified).

        Raises
        ------
        SignatureError
            Naming the key (or identity and serial), the window or the revocation time,
            and the signed time; or no signed time where the policy bounds the signer.
        """
        if signer.authority is not None:
            authority = next(a for a in self.authorities if a.name == signer.authority)
            window, bounded = authority.window, f"authority {authority.name!r}"
        else:
            key = self.with_fingerprint(signer.fingerprint)
            window, bounded = (key.window if key else Window()), f"key {signer.name!r}"
        revocations = [r for r in self.revoked if r.matches(signer)]
        if signed_at is None:
            if window or revocations:
                raise SignatureError(
                    f"{what} states no time it was signed, and the policy trusts "
                    f"{signer.describe()} only for a time (window or revocation): sign it "
                    "again with a key the policy trusts now"
                )
            return
        if not window.contains(signed_at):
            raise SignatureError(
                f"{what} was signed at {_iso(signed_at)} by {signer.describe()}, outside the "
                f"window of {bounded} ({window}): sign it again with a key the policy "
                "trusts now"
            )
        for revocation in sorted(revocations, key=lambda r: r.revoked_at):
            if revocation.revoked_at <= signed_at:
                why = f" ({revocation.reason})" if revocation.reason else ""
                raise SignatureError(
                    f"{what} was signed at {_iso(signed_at)} by {signer.describe()}, which "
                    f"was revoked at {_iso(revocation.revoked_at)}{why}: sign it again with "
                    "a key the policy trusts now"
                )

    def certified(self, certificates, purpose: str, what: str, at: datetime | None):
        """The authority that trusts the leaf of ``certificates`` (leaf first, then its
        chain) for ``purpose`` at ``at``, and who signed (the identity that matched).

        Raises
        ------
        SignatureError
            No signed time, no authority it chains to, an identity the authority does not
            trust for ``purpose``, or a leaf outside its validity at ``at``.
        """
        leaf, chain = certificates[0], certificates[1:]
        serial = x509s.serial_text(leaf.serial_number)
        named = (
            f"certificate {', '.join(x509s.identities(leaf)) or '(no identity)'} (serial {serial})"
        )
        if at is None:
            raise SignatureError(
                f"{what} is signed with {named} and states no time it was signed: a "
                "certificate is trusted only within its validity"
            )
        start, end = leaf.not_valid_before_utc, leaf.not_valid_after_utc
        problems = []
        for authority in self.authorities:
            patterns = authority.patterns_for(purpose)
            if not patterns:
                continue
            try:  # from this CA, at the signed time (else when the leaf was valid: refused next)
                x509s.verify_chain(
                    leaf, chain, authority.roots, authority.intermediates, min(max(at, start), end)
                )
            except x509s.CertificateError as error:
                problems.append(f"not from authority {authority.name!r} ({error})")
                continue
            if not start <= at <= end:
                raise SignatureError(
                    f"{what} was signed at {_iso(at)} with {named} of authority "
                    f"{authority.name!r}, valid from {_iso(start)} until {_iso(end)}: sign it "
                    "again with a current certificate"
                )
            identity = x509s.matching_identity(leaf, patterns)
            if identity is None:
                problems.append(
                    f"authority {authority.name!r} trusts for {purpose} only {', '.join(patterns)}"
                )
                continue
            signer = Signer(identity, x509s.key_fingerprint(leaf), identity, authority.name, serial)
            return authority, signer
        trusting = ", ".join(self.authorities_for(purpose)) or "none"
        raise SignatureError(
            f"{what} is signed with {named}, issued by {leaf.issuer.rfc4514_string()}, which "
            f"the policy does not trust for {purpose} (authorities trusted for {purpose}: "
            f"{trusting}{'; ' if problems else ''}{'; '.join(problems)}): sign with a "
            "certificate the policy's CA issued for an identity it trusts for "
            f"{purpose}, or add the CA under [authorities.<name>]"
        )

    def signer_for(self, key, purpose: str, what: str, at: datetime) -> Signer:
        """Who signs with ``key`` (a :class:`governance.trust.signers.SigningKey`): the
        policy's name of its public key, or its certificate's identity; refused when the
        policy does not trust it for ``purpose`` at ``at`` (before anything is signed).

        Raises
        ------
        SignatureError
        """
        certificates = key.certificates
        named = self.with_fingerprint(key.fingerprint)
        if certificates and (named is None or purpose not in named.may_sign):
            from cryptography import x509

            loaded = [x509.load_der_x509_certificate(c) for c in certificates]
            signer = self.certified(loaded, purpose, what, at)[1]
        else:
            signer = Signer(self.key_for(key.fingerprint, purpose, what).name, key.fingerprint)
        self.check_signer(signer, at, what)
        return signer


def _when(value, where: str, name: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise SignatureError(
            f"{where}: {name} = {value!r}; give a TOML date-time with an offset, e.g. "
            f"{name} = 2027-01-01T00:00:00Z"
        )
    return value


def _window(entry: dict, where: str) -> Window:
    window = Window(
        _when(entry.get("valid_from"), where, "valid_from"),
        _when(entry.get("valid_until"), where, "valid_until"),
    )
    if window.valid_from and window.valid_until and window.valid_from >= window.valid_until:
        raise SignatureError(f"{where}: valid_from must be before valid_until")
    return window


def parse_trust(data, base_dir: Path | None, source: str, purposes=None) -> TrustedKeys:
    """What a policy (or a policy trust file) trusts: its ``[keys.<name>]``,
    ``[authorities.<name>]`` and ``[[revoked]]`` (module docstring).

    Parameters
    ----------
    data : dict
        The parsed TOML (other top-level entries are not read here).
    base_dir : path or None
        Where relative key and certificate paths start (the file's folder).
    source : str
        Named in messages.
    purposes : collection of str, optional
        The purposes an entry may name (default: every purpose but ``policy``: a
        policy cannot vouch for itself).

    Raises
    ------
    SignatureError
        An entry of the wrong shape, an unknown or forbidden purpose, an unreadable key
        or certificate file, a key model-signing cannot use, a key listed twice, a
        window that is not a date-time with an offset, or a revocation naming nothing
        the policy knows.
    """
    allowed = [p for p in PURPOSES if p != POLICY_PURPOSE] if purposes is None else list(purposes)
    keys = _parse_keys(data.get("keys", {}), base_dir, source, allowed)
    authorities = _parse_authorities(data.get("authorities", {}), base_dir, source, allowed)
    revoked = _parse_revoked(data.get("revoked", []), authorities, source)
    return TrustedKeys(keys, authorities, revoked)


def _refuse_purposes(purposes, allowed, where: str, name: str) -> None:
    if not isinstance(purposes, list) or not purposes or not set(purposes) <= set(PURPOSES):
        raise SignatureError(
            f"{where}: {name} = {purposes!r}; use a non-empty list of {', '.join(allowed)}"
        )
    if POLICY_PURPOSE in purposes and POLICY_PURPOSE not in allowed:
        raise SignatureError(
            f"{where}: a policy cannot trust a key to sign policies (it would vouch for "
            "itself); remove policy from it and trust the policy signer in the "
            "deployment's policy trust file (--policy-trust)"
        )
    if not set(purposes) <= set(allowed):
        raise SignatureError(
            f"{where}: {name} = {purposes!r}; use a non-empty list of {', '.join(allowed)}"
        )


def _parse_keys(table, base_dir, source: str, allowed) -> tuple:
    if not isinstance(table, dict):
        raise SignatureError(f"{source}: [keys] must hold one [keys.<name>] table per key")
    fields_ = {"public_key", "may_sign", "users", "valid_from", "valid_until"}
    keys = {}
    for name, entry in table.items():
        where = f"{source} [keys.{name}]"
        if not isinstance(entry, dict) or not ({"public_key", "may_sign"} <= set(entry) <= fields_):
            raise SignatureError(
                f"{where} must have public_key (a path or PEM text), may_sign (a list of "
                f"{', '.join(allowed)}) and optionally users (the MLflow users who may sign "
                "with it), valid_from and valid_until, nothing else"
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
        _refuse_purposes(purposes, allowed, where, "may_sign")
        if not isinstance(entry["public_key"], str):
            raise SignatureError(f"{where}: public_key must be a path or PEM text")
        data, origin = read_key(
            entry["public_key"], f"[keys.{name}] public_key of {source}", base_dir
        )
        window = _window(entry, where)
        key = PublicKey.parse(str(name), data, purposes, origin, tuple(sorted(users)), window)
        twin = keys.get(key.fingerprint)
        if twin is not None:
            both = sorted({*twin.may_sign, *key.may_sign}, key=list(PURPOSES).index)
            raise SignatureError(
                f"{source}: [keys.{twin.name}] and [keys.{name}] list the same public key; a "
                "key is listed once, with every purpose it may sign in its may_sign list: "
                f"keep one of the two tables, with may_sign = {json.dumps(both)}"
            )
        keys[key.fingerprint] = key
    return tuple(keys.values())


def _parse_authorities(table, base_dir, source: str, allowed) -> tuple:
    if not isinstance(table, dict):
        raise SignatureError(
            f"{source}: [authorities] must hold one [authorities.<name>] table per CA"
        )
    authorities = []
    for name, entry in table.items():
        where = f"{source} [authorities.{name}]"
        shape = f"{where} must have certificates (a list of PEM files or PEM texts, the root included), identity patterns per purpose ({' = [...], '.join(allowed)} = [...]) and optionally valid_from and valid_until, nothing else"
        if not isinstance(entry, dict) or not isinstance(entry.get("certificates"), list):
            raise SignatureError(shape)
        unknown = set(entry) - {"certificates", "valid_from", "valid_until"} - set(PURPOSES)
        if unknown or not entry["certificates"]:
            raise SignatureError(shape)
        patterns = []
        for purpose in PURPOSES:
            if purpose in entry:
                listed = entry[purpose]
                _refuse_purposes([purpose], allowed, where, purpose)
                if (
                    not isinstance(listed, list)
                    or not listed
                    or not all(isinstance(p, str) and p.strip() for p in listed)
                ):
                    raise SignatureError(
                        f"{where}: {purpose} = {listed!r}; give a non-empty list of identity "
                        'patterns, e.g. ["*@risk.example.com"] (or leave it out)'
                    )
                patterns.append((purpose, tuple(listed)))
        certificates = []
        for index, value in enumerate(entry["certificates"]):
            if not isinstance(value, str):
                raise SignatureError(shape)
            text, origin = read_key(value, f"certificate {index + 1} of {where}", base_dir)
            try:
                certificates += x509s.load_certificates(text)
            except x509s.CertificateError as error:
                raise SignatureError(f"{origin} is not a PEM certificate: {error}") from None
        authority = Authority(
            str(name), tuple(certificates), tuple(patterns), _window(entry, where)
        )
        if not authority.roots:
            raise SignatureError(
                f"{where}: certificates holds no root (a self-signed certificate); add the "
                "CA's root certificate"
            )
        authorities.append(authority)
    return tuple(authorities)


def _parse_revoked(entries, authorities, source: str) -> tuple:
    shape = (
        f"{source}: each [[revoked]] needs fingerprint (a key's sha256 hex) or authority "
        'and serial (hex, e.g. "0x1f3a"), revoked_at (a date-time with an offset) and '
        "optionally reason, nothing else"
    )
    if not isinstance(entries, list):
        raise SignatureError(shape)
    revoked = []
    for entry in entries:
        if not isinstance(entry, dict) or "revoked_at" not in entry:
            raise SignatureError(shape)
        which = set(entry) - {"revoked_at", "reason"}
        if which not in ({"fingerprint"}, {"authority", "serial"}):
            raise SignatureError(shape)
        at = _when(entry["revoked_at"], f"{source} [[revoked]]", "revoked_at")
        reason = entry.get("reason", "")
        if not isinstance(reason, str):
            raise SignatureError(shape)
        if "fingerprint" in entry:
            fingerprint = entry["fingerprint"]
            if not isinstance(fingerprint, str) or not re.fullmatch(r"[0-9a-f]{64}", fingerprint):
                raise SignatureError(
                    f"{source} [[revoked]]: fingerprint {str(fingerprint)[:80]!r} is not a "
                    "sha256 in lower-case hex (govern keygen prints a key's fingerprint)"
                )
            revoked.append(Revocation(at, fingerprint=fingerprint, reason=reason))
            continue
        authority, serial = entry["authority"], entry["serial"]
        if authority not in [a.name for a in authorities]:
            raise SignatureError(
                f"{source} [[revoked]]: authority = {authority!r} names no "
                "[authorities.<name>] of this policy"
            )
        try:
            number = int(serial, 16)
        except (TypeError, ValueError):
            raise SignatureError(
                f"{source} [[revoked]]: serial = {serial!r}; give the certificate's serial "
                'in hex, e.g. "0x1f3a"'
            ) from None
        revoked.append(Revocation(at, authority=authority, serial=number, reason=reason))
    return tuple(revoked)
