"""A signed policy: the model-risk function signs it, a deployment trusts who may.

``govern policy sign`` signs a policy's canonical content (:attr:`Policy.content`, what
its digest hashes: the gates, approvals, roles and the *fingerprints* of the keys it
trusts, so a key file swapped under the same path changes it) with OpenSSF
model-signing, as evidence and decisions are signed, into ``<policy file>.sig``
(:func:`signature_path`). A name or a comment of the file is outside the digest and the
signature alike.

A policy cannot vouch for itself: the keys that may sign policies (purpose ``policy``)
are named by a deployment's **policy trust file**, kept outside the repository data
scientists commit to (e.g. in the CI runner's configuration)::

    [keys.risk]
    public_key = "keys/risk.pub"     # relative to this file, or the PEM text
    may_sign = ["policy"]
    [authorities.bank]               # or the organisation's CA (governance.trust.signing)
    certificates = ["ca/root.pem"]
    policy = ["*@risk.example.com"]

:func:`checked_policy` loads a policy and, given a trust file, verifies its signature
(a signature that does not verify always refuses); with the deployment's requirement
(``--require-signed-policy``, :data:`REQUIRE_SIGNED_POLICY_ENV`) an unsigned policy is
refused too. A policy states no time it was signed: a certificate that signed it must be
valid, and not revoked, when it is used (sign it again before the certificate expires).
The verified :class:`Signer` travels on :attr:`Policy.signer` into every
decision record (``policy.signer``). The environment is read at the edges only
(``cli.common``, :mod:`flavors.trust`); :func:`requirement` parses its value.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from miret_governance.governance.trust.keyring import (
    POLICY_PURPOSE,
    SignatureError,
    Signer,
    TrustedKeys,
    parse_trust,
)
from miret_governance.governance.trust.policy import (
    POLICY_ENV,
    Policy,
    PolicyError,
    load_policy,
    read_toml,
)
from miret_governance.governance.trust.signers import SigningKey, sign_path
from miret_governance.governance.trust.signing import signed_by, verify_path

POLICY_TRUST_ENV = "GOVERN_POLICY_TRUST"
"""The environment variable naming the deployment's policy trust file."""
REQUIRE_SIGNED_POLICY_ENV = "GOVERN_REQUIRE_SIGNED_POLICY"
"""The deployment setting (``1`` or ``true``) that refuses an unsigned policy."""
SIGNATURE_SUFFIX = ".sig"
_TRUST_TABLES = ("keys", "authorities", "revoked")
_YES, _NO = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class PolicyTrust:
    """The keys a deployment trusts to sign policies, and the file that names them."""

    keys: TrustedKeys
    source: str


def signature_path(policy: Policy) -> Path:
    """``<policy file>.sig``: where a policy's signature lives.

    Raises
    ------
    PolicyError
        The built-in defaults, which have no file to sign.
    """
    if policy.source == Policy(gates={}).source:
        raise PolicyError(
            "no policy file was given (the built-in defaults cannot be signed): give "
            f"--policy or {POLICY_ENV}"
        )
    return Path(f"{policy.source}{SIGNATURE_SUFFIX}")


def requirement(value: str | None, source: str = REQUIRE_SIGNED_POLICY_ENV) -> bool:
    """Whether a setting's text (``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/
    ``off``/empty) requires a signed policy.

    Raises
    ------
    PolicyError
        Any other text: a misspelt requirement must not silently mean none.
    """
    text = (value or "").strip().lower()
    if text not in _YES + _NO:
        raise PolicyError(
            f"{source} = {value!r} is not a yes or no: set it to 1 to require a signed "
            "policy, or to 0 (or unset it)"
        )
    return text in _YES


def load_policy_trust(path) -> PolicyTrust:
    """The deployment's policy trust file: ``[keys.<name>]`` and
    ``[authorities.<name>]`` tables (:func:`parse_trust`) trusted for ``policy`` only, at
    least one, and ``[[revoked]]``.

    Raises
    ------
    PolicyError
        An unreadable file, other top-level keys, an entry :func:`parse_trust` refuses
        (one trusted for another purpose among them), or no entry.
    """
    path = Path(path)
    what = f"policy trust file {path}"
    data = read_toml(path, "policy trust file", '[keys.<name>] tables with may_sign = ["policy"]')
    extra = sorted(set(data) - set(_TRUST_TABLES))
    try:
        if extra:
            raise SignatureError(
                f"{what}: unknown top-level keys {extra}; it holds only [keys.<name>] and "
                "[authorities.<name>] tables trusted for policy, and [[revoked]]"
            )
        keys = parse_trust(data, path.parent, what, purposes=(POLICY_PURPOSE,))
    except SignatureError as error:
        raise PolicyError(str(error)) from error
    if not keys.names(POLICY_PURPOSE) and not keys.authorities_for(POLICY_PURPOSE):
        raise PolicyError(
            f"{what} trusts no one for policy: add a [keys.<name>] table with the public key "
            'of whoever signs policies and may_sign = ["policy"], or an [authorities.<name>] '
            "table with policy = [their certificate identities]"
        )
    return PolicyTrust(keys, str(path))


def sign_policy(policy: Policy, key: SigningKey, overwrite: bool = False) -> Path:
    """Sign ``policy`` (loaded from its file) into :func:`signature_path`; that path.

    The bundle is written whole or not at all.

    Raises
    ------
    SignatureError
        A signature exists already and ``overwrite`` is false.
    """
    target = signature_path(policy)
    if target.exists() and not overwrite:
        raise SignatureError(
            f"{target} exists already; signatures are not replaced by default: give --force "
            "to sign this policy again"
        )
    with tempfile.TemporaryDirectory(prefix="govern-policy-") as tmp:
        content, bundle = Path(tmp, "policy.json"), Path(tmp, "policy.sig")
        content.write_bytes(policy.content)
        sign_path(content, key, bundle)
        partial = target.with_name(f".{target.name}.partial")
        partial.write_bytes(bundle.read_bytes())
    os.replace(partial, target)
    return target


def verify_policy(policy: Policy, trust: PolicyTrust) -> Signer:
    """Who signed ``policy``: its signature verified with a key ``trust`` trusts for
    ``policy``.

    Raises
    ------
    SignatureError
        Unsigned, signed by a key the trust file does not trust for ``policy``, or a
        policy that changed since it was signed.
    """
    what = f"policy {policy.source}"
    signature = signature_path(policy)
    if not signature.is_file():
        raise SignatureError(
            f"{what} is unsigned (no {signature.name}) and the deployment requires a signed "
            "policy: have whoever the policy trust file "
            f"{trust.source} trusts for policy sign it (govern policy sign --policy "
            f"{policy.source} --signing-key <their key>)"
        )
    try:
        fingerprint = signed_by(signature)
    except SignatureError:  # not a raw-key bundle: verify_path says what it is
        fingerprint = None
    if fingerprint is not None and trust.keys.with_fingerprint(fingerprint) is None:
        raise SignatureError(
            f"{what} is signed by key {fingerprint[:16]}..., which the policy trust file "
            f"{trust.source} does not trust (trusted for policy: "
            f"{', '.join(trust.keys.names(POLICY_PURPOSE))}): have it signed by one of those, or "
            'add the signer\'s public key to that file with may_sign = ["policy"]'
        )
    with tempfile.TemporaryDirectory(prefix="govern-policy-") as tmp:
        content = Path(tmp, "policy.json")
        content.write_bytes(policy.content)
        try:  # a policy states no signing time: a certificate must be valid now
            return verify_path(
                content, signature, trust.keys, POLICY_PURPOSE, what, datetime.now(timezone.utc)
            )
        except SignatureError as error:
            raise SignatureError(
                f"{error}; use the policy as it was signed, or have it reviewed and signed "
                f"again by a signer {trust.source} trusts (govern policy sign)"
            ) from None


def checked_policy(path=None, trust_path=None, required: bool = False) -> Policy:
    """The policy at ``path`` (None: the built-in defaults), its signature checked.

    Given ``trust_path`` (a policy trust file), a signed policy is verified and carries
    its :attr:`Policy.signer`; an unsigned one is refused only when ``required``, which
    needs ``trust_path``. Without either, the policy is loaded as it is.

    Raises
    ------
    PolicyError
        The policy or the trust file cannot be read, or a requirement without a trust
        file or a policy file.
    SignatureError
        A signature that does not verify, or (``required``) none.
    """
    policy = load_policy(path)
    if required and trust_path is None:
        raise PolicyError(
            "a signed policy is required (--require-signed-policy or "
            f"{REQUIRE_SIGNED_POLICY_ENV}) but no policy trust file names who may sign "
            f"one: give --policy-trust or set {POLICY_TRUST_ENV}"
        )
    if trust_path is None:
        return policy
    trust = load_policy_trust(trust_path)
    if not required and (path is None or not signature_path(policy).is_file()):
        return policy
    return dataclasses.replace(policy, signer=verify_policy(policy, trust))
