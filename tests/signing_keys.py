"""Key pairs of the test session: the CI key every test's explain signs with
(``GOVERN_SIGNING_KEY``, set by conftest for the whole session, subprocesses included),
approver keys, and the ``[keys]`` TOML a test policy needs to trust them."""

import atexit
import os
import shutil
import tempfile
from functools import cache
from pathlib import Path

from miret_governance.governance.signing import SIGNING_KEY_ENV, generate_key_pair

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
