"""``govern policy sign | verify | check``: the model-risk function's signature on a
policy (:mod:`governance.trust.policy_signature`), and the gates an explain's settings
cannot meet (:mod:`governance.trust.attainable`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from miret_governance.cli import common
from miret_governance.cli.common import (
    DEFAULTS,
    ENSEMBLE_DEPTH,
    EXIT_FAILED,
    console,
    existing_file,
    exit_codes,
    fail,
)

policy_app = typer.Typer(
    name="policy",
    help="Sign and verify a policy (the model-risk function); check explain can meet its gates.",
    no_args_is_help=True,
)
PolicyPath = Annotated[
    Path,
    typer.Option(
        "--policy",
        help="TOML policy file; its signature is <file>.sig beside it.",
        metavar="FILE",
        callback=common.policy_file,  # warns of gates explain's defaults cannot meet
    ),
]
PLAIN = {"highlight": False, "markup": False, "soft_wrap": True}


def sign(
    policy: PolicyPath,
    signing_key: common.SigningKeyOption = None,
    signing_certificate: common.SigningCertificateOption = None,
    certificate_chain: common.CertificateChainOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing signature of the policy.")
    ] = False,
) -> None:
    """Sign a policy's content (its gates, approvals, roles and the fingerprints of the
    keys it trusts: what its digest covers) into <policy file>.sig.

    Sign with a key the deployment's policy trust file trusts for policy (may_sign =
    ["policy"]); an existing signature is replaced only with --force (exit code 2).
    """
    with exit_codes():
        from miret_governance.governance.trust.policy import load_policy
        from miret_governance.governance.trust.policy_signature import sign_policy

        key = common.load_signing_key(signing_key, signing_certificate, certificate_chain)
        if key is None:
            raise fail("govern policy sign needs --signing-key (the key that signs policies)")
        parsed = load_policy(policy)
        written = sign_policy(parsed, key, overwrite=force)
    console.print(
        f"signed policy {parsed.label} (digest {parsed.digest}) with key "
        f"{key.fingerprint[:16]}: {written}",
        **PLAIN,
    )


def verify(policy: PolicyPath, policy_trust: common.PolicyTrustFile = None) -> None:
    """Check that a policy is signed, by a key the policy trust file trusts for policy,
    and unchanged since (exit code 2 otherwise)."""
    with exit_codes():
        from miret_governance.governance.trust.policy_signature import (
            POLICY_TRUST_ENV,
            checked_policy,
        )

        if policy_trust is None:
            raise fail(
                f"govern policy verify needs --policy-trust (or {POLICY_TRUST_ENV}): the file "
                "naming the keys trusted to sign policies"
            )
        parsed = checked_policy(policy, policy_trust, required=True)
    console.print(
        f"policy {parsed.label} (digest {parsed.digest}) is signed by {parsed.signer.name} "
        f"(key {parsed.signer.fingerprint[:16]}), trusted for policy by {policy_trust}",
        **PLAIN,
    )


def check(
    policy: Annotated[
        Path,
        typer.Argument(help="TOML policy file.", metavar="POLICY", callback=existing_file),
    ],
    depth: common.Depth = str(ENSEMBLE_DEPTH),
    solver: common.Solver = DEFAULTS["solver"],
    max_rows: Annotated[
        int,
        typer.Option("--max-rows", min=2, help="The explain's --max-rows (its training sample)."),
    ] = DEFAULTS["max_rows"],
    test_rows: Annotated[
        int | None,
        typer.Option(
            "--test-rows",
            min=1,
            help="Rows of the explain's test set (its --test-data file), when known: checks "
            "that min_fidelity_lower_bound can be met.",
        ),
    ] = None,
) -> None:
    """Check that an explain with these settings can meet every gate of a policy.

    The settings are explain's defaults unless given. Exit code 1 with one line per gate
    they cannot meet, saying why and what to change (e.g. max_gap below 1 needs the whole
    MILP, which HiGHS is given only on small samples); 0 when every gate can be met; 2
    for a policy that cannot be read. Every command that reads a policy warns of the same
    gates, for explain's defaults.
    """
    with exit_codes():
        from miret_governance.governance.miret.solvers.table import SOLVER_CHOICES
        from miret_governance.governance.trust.attainable import ExplainSettings, unattainable
        from miret_governance.governance.trust.policy import load_policy

        if solver not in SOLVER_CHOICES:
            raise fail(f"--solver {solver!r}: give one of {', '.join(SOLVER_CHOICES)}")
        parsed = load_policy(policy)
        settings = ExplainSettings(solver, depth, max_rows, test_rows)
        found = unattainable(parsed, settings)
    for item in found:
        console.print(f"policy {parsed.label}: {item.line}", **PLAIN)
    if found:
        raise typer.Exit(EXIT_FAILED)
    console.print(f"policy {parsed.label}: every gate can be met with these settings", **PLAIN)


def register(app: typer.Typer) -> None:
    """Add the ``policy`` group (``govern policy sign | verify | check``) to the ``govern``
    app."""
    policy_app.command("sign")(sign)
    policy_app.command("verify")(verify)
    policy_app.command("check")(check)
    app.add_typer(policy_app)
