"""``govern keygen``: make the key pair that signs evidence and decisions."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from miret_governance.cli.common import console, exit_codes, fail


def keygen(
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Path prefix of the pair: writes <out>.pem (private, mode 0600) and "
            "<out>.pub (public).",
            metavar="PATH",
        ),
    ],
    password_env: Annotated[
        str | None,
        typer.Option(
            "--password-env",
            help="Name of an environment variable holding a password to encrypt the "
            "private key with (give it to the signing job as GOVERN_SIGNING_KEY_PASSWORD).",
            metavar="VAR",
        ),
    ] = None,
) -> None:
    """Make an elliptic-curve (P-256) key pair for OpenSSF model-signing.

    Existing files are never overwritten (exit code 2).

    Give the private key to the CI job that runs explain, gate and promote only
    (--signing-key or GOVERN_SIGNING_KEY); name the public key in each policy's
    \\[keys.<name>] table with what it may sign (explain, decide, approve).
    """
    with exit_codes():
        from miret_governance.governance.trust.keyring import PublicKey
        from miret_governance.governance.trust.signers import generate_key_pair

        password = None
        if password_env is not None:
            password = os.environ.get(password_env)
            if not password:
                raise fail(
                    f"--password-env {password_env}: the environment variable is unset or "
                    "empty; export the password in it, or leave out --password-env"
                )
        private, public = generate_key_pair(out, password)
        fingerprint = PublicKey.parse("new", public.read_bytes(), (), str(public)).fingerprint
    plain = {"highlight": False, "markup": False, "soft_wrap": True}
    console.print(f"private key: {private} (keep it secret: the signing job only)", **plain)
    console.print(f"public key:  {public} (name it in a policy's [keys.<name>])", **plain)
    console.print(f"fingerprint: {fingerprint}", **plain)


def register(app: typer.Typer) -> None:
    """Add ``keygen`` to the ``govern`` app."""
    app.command("keygen")(keygen)
