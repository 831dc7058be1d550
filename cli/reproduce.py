"""``govern reproduce``: fit a registered explanation again and say whether it matches
its evidence (no version or artifact is created; with a signing key, one verification
record: :mod:`flavors.trail.verification`)."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from miret_governance.cli import common
from miret_governance.cli.common import (
    EXIT_FAILED,
    Engine,
    JsonOutput,
    PolicyFile,
    SparkDataFile,
    Target,
    TestDataFile,
    TrackingUri,
    TrustPickle,
    connect,
    console,
    data_of,
    errors,
    exit_codes,
    import_model_readers,
    print_json,
)


@contextmanager
def _stdout_to_stderr():
    """Send what is written to file descriptor 1 meanwhile to stderr: a solver library
    may print from C (Gurobi's licence notice), and stdout must hold the JSON object
    alone (HiGHS's banner is kept out by ``solvers.new_highs`` already)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _number(value) -> str:
    return "-" if value is None else f"{value:.6g}"


def _print(result) -> None:
    """The comparison for people: verdict, tree digests, metrics, differing versions."""
    plain = {"highlight": False, "markup": False, "soft_wrap": True}
    verdict = "[bold green]IDENTICAL[/]" if result.identical else "[bold red]DIFFERENT[/]"
    console.print(
        f"{verdict}: {escape(result.surrogate_uri)} fitted again on data {result.data_digest}"
    )
    digests = result.tree_digest
    console.print(f"tree digest recorded   {digests['recorded']}", **plain)
    console.print(f"tree digest reproduced {digests['reproduced']}", **plain)
    table = Table("metric", "recorded", "reproduced", "")
    for name, metric in result.metrics.items():
        mark = "[green]=[/]" if metric["equal"] else "[red]≠[/]"
        table.add_row(
            escape(name), _number(metric["recorded"]), _number(metric["reproduced"]), mark
        )
    console.print(table)
    signer = result.signed_by
    console.print(
        f"evidence signed by key {signer['name']!r} ({signer['fingerprint'][:16]}...)", **plain
    )
    hit = result.time_limit_hit
    if hit["recorded"] or hit["reproduced"]:
        console.print(
            f"the time limit cut the fit short (recorded: {hit['recorded']}, now: "
            f"{hit['reproduced']}): a fit cut by seconds may differ on another run",
            **plain,
        )
    if result.versions_differ:
        console.print("versions that differ from the evidence:", **plain)
        for key, value in result.versions_differ.items():
            console.print(f"  {key}: {value['recorded']} -> {value['current']}", **plain)
    else:
        console.print("every recorded version is the one installed here", **plain)


def reproduce(
    model_uri: Annotated[
        str,
        typer.Option(
            "--model-uri",
            help="A surrogate version, or an explained ensemble version (its linked "
            "surrogate is used): models:/<name>/<version>, models:/<name>@<alias>.",
        ),
    ],
    data: SparkDataFile,
    test_data: TestDataFile = None,
    target: Target = None,
    as_json: JsonOutput = False,
    tracking_uri: TrackingUri = None,
    trust_pickle: TrustPickle = False,
    policy: PolicyFile = None,
    signing_key: common.SigningKeyOption = None,
    signing_certificate: common.SigningCertificateOption = None,
    certificate_chain: common.CertificateChainOption = None,
    no_record: common.NoRecord = False,
    engine: Engine = "pandas",
) -> None:
    """Fit a registered explanation again and say whether it is the same.

    The fit runs from the explanation's evidence; the same tree with the same headline
    metrics reproduces it.

    --data (and --test-data when the explanation had one) must be the explained files:
    their MLflow dataset digests must be the recorded ones. An explanation of Spark data
    is reproduced on the same table (--data spark:<table>, or the Parquet path with
    --engine spark): its row-set digest must be the recorded one; the same sample is
    collected again and the fidelity on the other rows counted again. The ensemble is loaded, the
    data prepared, the surrogate fitted and evaluated with the recorded request in this
    process; nothing is logged or registered but, with a signing key, a signed
    verification record saying identical or different and why (shown on the ensemble
    version's page; --no-record: nothing). Prints the tree
    digest and every headline metric, recorded and now, and the package versions that
    differ from the evidence. A reproduction that differs is a failed check. The evidence
    is read only once its signature verifies with a key the policy (--policy or
    GOVERN_POLICY) trusts for explain.

    --json prints {"command": "reproduce", "schema_version": 1, "identical": bool,
    "model_uri", "surrogate_uri", "data_digest", "tree_digest": {"recorded",
    "reproduced"}, "metrics": {name: {"recorded", "reproduced" (number or null),
    "equal": bool}}, "versions_differ": {key: {"recorded", "current"}} (python, the
    packages, platform, machine), "time_limit_hit": {"recorded", "reproduced"},
    "signed_by": {"name", "fingerprint"}}.
    """
    with exit_codes():
        import_model_readers()
        from miret_governance.flavors.read.reproduce import reproduce_explanation
        from miret_governance.flavors.store.reads import CommandClient
        from miret_governance.flavors.trail import verification
        from miret_governance.flavors.trust import signed_policy, trusted_keys

        parsed = signed_policy(policy) if policy is not None else None
        trusted = trusted_keys(parsed)
        chain = (signing_certificate, certificate_chain)
        key = None if no_record else common.load_signing_key(signing_key, *chain)
        connect(tracking_uri, fail_fast=False, read_only=True)
        with errors.status("fitting the surrogate again"), _stdout_to_stderr():
            result = reproduce_explanation(
                model_uri,
                data_of(data, engine),
                test_data,
                target=target,
                trust_pickle=trust_pickle,
                policy=trusted,
            )
    if as_json:
        print_json("reproduce", result.to_json())
    else:
        _print(result)
    client = CommandClient()
    common.record_verified(
        key,
        no_record,
        lambda key: verification.record_verification(
            client, parsed, key, verification.reproduced(client, result)
        ),
    )
    raise typer.Exit(0 if result.identical else EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Add ``reproduce`` to the ``govern`` app."""
    app.command("reproduce")(reproduce)
