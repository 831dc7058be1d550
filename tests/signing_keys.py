"""Key pairs of the test session: the CI key every test's explain signs with
(``GOVERN_SIGNING_KEY``, set by conftest for the whole session, subprocesses included),
approver keys, the ``[keys]`` TOML (or dict) a test policy needs to trust them, and the
session policy ``GOVERN_POLICY`` names (trusting the CI key)."""

import atexit
import os
import shutil
import tempfile
from functools import cache
from pathlib import Path

from miret_governance.flavors.trust import POLICY_ENV
from miret_governance.governance.trust.signers import SIGNING_KEY_ENV, SigningKey, generate_key_pair

KEY_FOLDER = Path(tempfile.mkdtemp(prefix="govern-test-keys-"))
atexit.register(shutil.rmtree, KEY_FOLDER, ignore_errors=True)
CI_KEY = "test-ci"


@cache
def key_pair(name: str) -> tuple[Path, Path]:
    """(private, public) PEM paths of the session's key ``name``."""
    return generate_key_pair(KEY_FOLDER / name)


def use_ci_key() -> None:
    """Sign as the CI job does: ``GOVERN_SIGNING_KEY`` names the session's CI key."""
    os.environ[SIGNING_KEY_ENV] = str(key_pair(CI_KEY)[0])


def ci_key() -> SigningKey:
    """The session's CI key as a loaded :class:`SigningKey`: what the tests' explains
    sign with (:func:`use_ci_key`), for a test that signs or checks a fingerprint itself."""
    return SigningKey.load(key_pair(CI_KEY)[0], source=SIGNING_KEY_ENV)


def keys_table(ci: tuple = ("explain", "decide"), approvers: tuple = ()) -> dict:
    """:func:`keys_toml` as the ``keys`` entry of a policy dict (``parse_policy``)."""
    table = {CI_KEY: {"public_key": str(key_pair(CI_KEY)[1]), "may_sign": list(ci)}} if ci else {}
    for name in approvers:
        table[name] = {"public_key": str(key_pair(name)[1]), "may_sign": ["approve"]}
    return table


def trusting(policy: dict) -> dict:
    """A policy dict (``{"gates": ...}``) that also trusts the CI key for explain and decide."""
    return {**policy, "keys": keys_table()}


def use_session_policy() -> Path:
    """``GOVERN_POLICY``: a policy with the built-in gates that trusts the CI key, as a
    reader (the flavor's loader, ``show``, ``reproduce``) of the session's evidence needs."""
    path = KEY_FOLDER / "default.toml"
    if not path.exists():
        path.write_text(
            "[gates]\nmin_fidelity = 0.9\nmax_features = 5\nrequire_validation_pass = true\n"
            + keys_toml()
        )
    os.environ[POLICY_ENV] = str(path)
    return path


def keys_toml(ci: tuple = ("explain", "decide"), approvers: tuple = ()) -> str:
    """The ``[keys.*]`` tables trusting the CI key for ``ci`` and each approver key."""
    tables = []
    if ci:
        tables.append((CI_KEY, ci))
    tables += [(name, ("approve",)) for name in approvers]
    return "".join(
        f'\n[keys.{name}]\npublic_key = "{key_pair(name)[1]}"\nmay_sign = {list(purposes)!r}\n'.replace(
            "'", '"'
        )
        for name, purposes in tables
    )


def four_eyes_toml(prod_approvals: int | None = 1) -> str:
    """The four-eyes policy of the trail tests: ``min_fidelity = 0.9``, the CI key trusted
    for explain and decide, alice for approve only, and @prod needing ``prod_approvals``
    approvals (None: no ``[approvals]`` table)."""
    text = 'name = "four-eyes"\n[gates]\nmin_fidelity = 0.9\n' + keys_toml(approvers=("alice",))
    return text if prod_approvals is None else text + f"\n[approvals]\nprod = {prod_approvals}\n"
