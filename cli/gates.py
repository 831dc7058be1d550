"""``govern validate | gate | promote | pipeline``: thin commands over ``flavors.gating``.

Exit codes as for every command (``govern --help``): 0 everything passed, 1 a gate or
the validation failed, 2 an error (bad URI, unreadable file, invalid policy, no linked
surrogate, unreachable server).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from miret_governance.cli import common
from miret_governance.cli.common import (
    EXIT_FAILED,
    DataFile,
    JsonOutput,
    ModelUri,
    PolicyFile,
    Target,
    check_model_uri,
    connect,
    console,
    exit_codes,
    print_json,
)


def _policy_and_connect(
    model_uri: str,
    policy: Path | None,
    policy_trust: Path | None,
    require_signed: bool,
    tracking_uri: str | None,
    fail_fast: bool = True,
):
    """Check the model URI and read the gate policy, its signature checked
    (:func:`cli.common.load_checked_policy`, before any network call), then connect to
    the server."""
    check_model_uri(model_uri)
    parsed = common.load_checked_policy(policy, policy_trust, require_signed)
    connect(tracking_uri, fail_fast=fail_fast)
    return parsed


def _digest_words(digest: str | None) -> str:
    """The evidence digest in short, or that the evidence did not verify."""
    return f"digest {digest[:16]}" if digest else "evidence not verified"


def print_gates(outcome) -> None:
    """The gate table of a GateOutcome, each failed gate's reason and advice, and where it
    was recorded."""
    from miret_governance.governance.trust.gates import format_value

    evaluation = outcome.evaluation
    table = Table(
        title=escape(f"Gates for {outcome.ensemble_uri} (surrogate {outcome.surrogate_uri})"),
        caption=f"policy digest {evaluation.policy_digest[:16]}",
    )
    for column in ("Gate", "Metric"):
        table.add_column(column, overflow="fold")
    table.add_column("Threshold", justify="right", no_wrap=True)
    table.add_column("Value", justify="right", overflow="fold")
    table.add_column("Result", no_wrap=True)
    for r in evaluation.results:
        table.add_row(
            escape(r.name),
            escape(r.metric),
            escape(f"{r.comparison} {format_value(r.threshold)}"),
            escape(format_value(r.value)),
            "[green]pass[/]" if r.passed else "[red]FAIL[/]",
        )
    console.print(table)
    for r in evaluation.results:
        if not r.passed:
            console.print(
                f"[red]FAIL[/] {escape(f'{r.name}: {r.reason}')}", highlight=False, soft_wrap=True
            )
            if r.advice:
                console.print(f"  {escape(r.advice)}", highlight=False, soft_wrap=True)
    verdict = "[green]all gates passed[/]" if evaluation.all_passed else "[red]a gate failed[/]"
    console.print(
        f"{verdict} under policy {escape(outcome.policy)}, on the evidence stored in "
        f"{escape(outcome.surrogate_uri)} "
        f"({_digest_words(evaluation.evidence_digest)}); "
        f"recorded as tag governance.last_gate on {escape(outcome.ensemble_uri)}, in both versions' "
        f"descriptions and in run {outcome.run_id} (experiment governance-gates, artifacts "
        "gate_report.json / .md)",
        highlight=False,
        soft_wrap=True,
    )


def gates_json(outcome) -> dict:
    """The ``--json`` object of ``govern gate`` (without ``command``/``schema_version``)."""
    evaluation = outcome.evaluation.to_json()
    return {
        "passed": evaluation["all_passed"],
        "exit_code": 0 if evaluation["all_passed"] else EXIT_FAILED,
        "ensemble_uri": outcome.ensemble_uri,
        "surrogate_uri": outcome.surrogate_uri,
        "policy": outcome.policy,
        "policy_digest": evaluation["policy_digest"],
        "evidence_digest": evaluation["evidence_digest"],
        "run_id": outcome.run_id,
        "time": outcome.time,
        "data": None if outcome.data is None else outcome.data.to_json(),
        "gates": [
            {key: r[key] for key in ("name", "metric", "comparison", "threshold", "value")}
            | {"passed": r["passed"], "reason": r["reason"], "advice": r["advice"]}
            for r in evaluation["results"]
        ],
    }


def validate(
    model_uri: ModelUri,
    data: common.SparkData,
    target: Target = None,
    mostly: Annotated[
        float,
        typer.Option(
            "--mostly", min=0.0, max=1.0, help="Fraction of rows that must pass (scoring data)."
        ),
    ] = 1.0,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write GE's JSON result to this file.")
    ] = None,
    tracking_uri: common.TrackingUri = None,
    trust_pickle: common.TrustPickle = False,
    policy: PolicyFile = None,
    engine: common.Engine = "pandas",
    as_json: JsonOutput = False,
) -> None:
    """Validate data against an ensemble's feature schema with Great Expectations.

    --data spark:<table> (or a Parquet path with --engine spark) validates in Spark with
    GE's Spark engine: the same expectations, failures and counts as on a file of the
    same rows.

    Without a MinMaxScaler in the ensemble, the input range is the one its linked
    surrogate explained, read from evidence whose signature verifies with a key the
    policy (--policy or GOVERN_POLICY) trusts for explain. From the same evidence (read
    whenever trust is configured), each column may miss values at most as often as in
    the explained data plus 5 points, and none where the explained data had none;
    without it no column may miss any.

    --json prints {"command": "validate", "schema_version": 1, "passed": bool,
    "exit_code": 0 or 1, "model_uri", "data": path (or spark:<table>, or "<path> (spark)"),
    "rows": int, "mostly": float,
    "expectations": {"evaluated": int, "successful": int}, "failures": list of
    {"expectation", "column" (or null), "message"}, "report": path or null}.
    """
    with exit_codes():
        common.import_model_readers()
        from miret_governance.flavors.gates.gating import validate_model_inputs

        check_model_uri(model_uri)
        source = common.data_of(data, engine)
        connect(tracking_uri, read_only=True)
        result = validate_model_inputs(
            model_uri,
            source,
            target=target or None,
            mostly=mostly,
            trust_pickle=trust_pickle,
            policy=policy,
        )
        if report is not None:
            report.write_text(json.dumps(result.to_json(), indent=1, default=str))
    code = 0 if result.success else EXIT_FAILED
    if as_json:
        stats = result.to_json()["statistics"]
        print_json(
            "validate",
            {
                "passed": bool(result.success),
                "exit_code": code,
                "model_uri": model_uri,
                "data": getattr(source, "identity", str(source)),
                "rows": result.n_rows,
                "mostly": mostly,
                "expectations": {
                    "evaluated": stats["evaluated_expectations"],
                    "successful": stats["successful_expectations"],
                },
                "failures": [
                    {"expectation": f.expectation, "column": f.column, "message": f.message}
                    for f in result.failures
                ],
                "report": None if report is None else str(report),
            },
        )
    else:
        console.print(result.summary(), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def gate(
    model_uri: ModelUri,
    policy: PolicyFile = None,
    policy_trust: common.PolicyTrustFile = None,
    require_signed_policy: common.RequireSignedPolicy = False,
    data: common.SparkCheckData = None,
    engine: common.Engine = "pandas",
    target: Target = None,
    signing_key: common.SigningKeyOption = None,
    signing_certificate: common.SigningCertificateOption = None,
    certificate_chain: common.CertificateChainOption = None,
    tracking_uri: common.TrackingUri = None,
    as_json: JsonOutput = False,
) -> None:
    """Evaluate the promotion gates on the ensemble version's linked surrogate.

    The decision record (decision/record.json on the gate run) is signed with
    --signing-key; without one it is recorded unsigned, as a what-if that never counts.

    With --data the surrogate's fidelity to the ensemble is measured again on that file
    (gate recomputed_fidelity): on the explain run's own data the stored train and test
    fidelity must be reproduced exactly; on other data the 95% Wilson intervals of the
    new and the stored test fidelity must overlap. On Spark data (--data spark:<table>, or a
    path with --engine spark) every row is counted in Spark and compared likewise, as is a
    policy's min_cross_fidelity. The signed record names the rows (identity, count and
    row-set digest).

    --json prints {"command": "gate", "schema_version": 1, "passed": bool, "exit_code":
    0 or 1, "ensemble_uri", "surrogate_uri", "policy" (name v<digest8>), "policy_digest",
    "evidence_digest", "run_id" (the gate run), "time" (UTC, ISO 8601), "data" (null, or
    with --data {"identity", "rows", "digest"}: the rows' row-set digest, as the signed
    record names them), "gates": list of
    {"name", "metric", "comparison", "threshold", "value" (null when missing), "passed",
    "reason", "advice" (a failed gate's figure in plain words and what to do, else null)}}.
    """
    with exit_codes():
        data = common.data_of(data, engine)
        if data is not None:
            common.import_model_readers()
        from miret_governance.flavors.gates.gating import gate_model_version

        key = common.load_signing_key(signing_key, signing_certificate, certificate_chain)
        parsed = _policy_and_connect(
            model_uri, policy, policy_trust, require_signed_policy, tracking_uri
        )
        outcome = gate_model_version(
            model_uri, parsed, data=data, target=target or None, signing_key=key
        )
    if as_json:
        print_json("gate", gates_json(outcome))
    else:
        print_gates(outcome)
        _print_data(outcome.data)
    raise typer.Exit(0 if outcome.evaluation.all_passed else EXIT_FAILED)


def _print_data(reference) -> None:
    """The rows the gates measured on, as the signed record names them (one line)."""
    if reference is not None:
        console.print(
            f"measured on {reference.identity}: {reference.rows} rows, row-set digest "
            f"{reference.digest} (in the signed decision record)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


def promote(
    model_uri: ModelUri,
    alias: Annotated[str, typer.Option("--alias", help="Alias to set when every gate passes.")],
    policy: PolicyFile = None,
    policy_trust: common.PolicyTrustFile = None,
    require_signed_policy: common.RequireSignedPolicy = False,
    data: common.SparkCheckData = None,
    engine: common.Engine = "pandas",
    signing_key: common.SigningKeyOption = None,
    signing_certificate: common.SigningCertificateOption = None,
    certificate_chain: common.CertificateChainOption = None,
    expect_holder: Annotated[
        str | None,
        typer.Option(
            "--expect-holder",
            metavar="VERSION|none",
            help="The version you expect to hold the alias now (none: no version); the "
            "promotion is refused (exit 2, nothing recorded) if it holds another. Default: "
            "the holder when the command starts.",
        ),
    ] = None,
    tracking_uri: common.TrackingUri = None,
) -> None:
    """Set an alias on the ensemble version only if every gate passes.

    When the policy's \\[approvals] names the alias, enough trusted approvers must also
    have approved the current evidence with govern approve.

    Compare-and-set: of two concurrent promotions to one alias exactly one succeeds; the
    other exits 2 naming it and records nothing. The decision is signed with
    --signing-key (required: trusted by the policy for decide) and recorded on the gate
    run as decision/record.json.

    With --data the gates measure on those rows as govern gate --data does (the
    recomputed fidelity, and the cross-fidelity of a policy's min_cross_fidelity), Spark
    data (--data spark:<table>, or a path with --engine spark) counted in Spark.
    Without it, min_cross_fidelity is decided on the figures of the latest signed gate
    decision on the current evidence of this version and of the alias holder it is
    compared with; with none, exit 2: pass --data, or run govern gate --data first.
    """
    with exit_codes():
        data = common.data_of(data, engine)
        if data is not None:
            common.import_model_readers()
        from miret_governance.flavors.trail.promotion import check_alias, promote_model_version

        check_alias(alias)
        if expect_holder is not None and expect_holder != "none" and not expect_holder.isdigit():
            raise common.fail(f"--expect-holder {expect_holder!r}: give a version number or none")
        key = common.load_signing_key(signing_key, signing_certificate, certificate_chain)
        parsed = _policy_and_connect(
            model_uri, policy, policy_trust, require_signed_policy, tracking_uri
        )
        outcome = promote_model_version(
            model_uri, alias, parsed, signing_key=key, expected_holder=expect_holder, data=data
        )
    print_gates(outcome.gate)
    _print_data(outcome.gate.data)
    where = escape(f"tag governance.promotion.{alias} on {outcome.gate.ensemble_uri}")
    if outcome.promoted:
        console.print(
            f"[green]promoted[/]: {escape(f'@{alias} -> {outcome.gate.ensemble_uri}')} ({where})",
            highlight=False,
            soft_wrap=True,
        )
        if outcome.governed:
            console.print(
                f"[green]governed[/]: {escape(f'@{alias} -> {outcome.governed}')} (what serving reads)",
                highlight=False,
                soft_wrap=True,
            )
    else:
        now = f"version {outcome.alias_version}" if outcome.alias_version else "no version"
        console.print(
            f"[red]refused[/]: {escape(f'@{alias} stays on {now}: {outcome.reason}')} ({where})",
            highlight=False,
            soft_wrap=True,
        )
    raise typer.Exit(0 if outcome.promoted else EXIT_FAILED)


def pipeline(
    model_uri: ModelUri,
    data: DataFile,
    target: Target = None,
    policy: PolicyFile = None,
    policy_trust: common.PolicyTrustFile = None,
    require_signed_policy: common.RequireSignedPolicy = False,
    time_limit: common.TimeLimit = common.DEFAULTS["time_limit"],
    solver: common.Solver = common.DEFAULTS["solver"],
    seed: common.Seed = common.DEFAULTS["random_state"],
    min_test_rows: common.MinTestRows = common.MIN_TEST_ROWS,
    tracking_uri: common.TrackingUri = None,
    trust_pickle: common.TrustPickle = False,
    supersede: common.SupersedeOption = False,
) -> None:
    """Validate the data, explain the ensemble version, then evaluate the gates.

    The surrogate's fidelity is recomputed on the data and must reproduce the evidence
    exactly."""
    target = target or None
    with exit_codes():
        common.import_model_readers()
        from miret_governance.flavors.explain.explain import explain_model_version
        from miret_governance.flavors.gates.gating import gate_model_version, validate_model_inputs

        parsed = _policy_and_connect(
            model_uri, policy, policy_trust, require_signed_policy, tracking_uri, fail_fast=False
        )
        console.rule("1/3 validate")
        report = validate_model_inputs(model_uri, data, target=target, trust_pickle=trust_pickle)
        console.print(report.summary(), highlight=False, soft_wrap=True)
        if not report.success:
            raise typer.Exit(EXIT_FAILED)
        console.rule("2/3 explain")
        explained = explain_model_version(
            model_uri,
            str(data),
            target=target,
            solver=solver,
            time_limit=time_limit,
            seed=seed,
            min_test_rows=min_test_rows,
            trust_pickle=trust_pickle,
            supersede=supersede,
            policy=parsed if policy is not None else None,  # else the key's own trust
        )
        console.print(
            f"surrogate {explained.surrogate_uri} (run {explained.run_id}"
            f"{', reused' if explained.reused else ''})",
            highlight=False,
            soft_wrap=True,
        )
        console.rule("3/3 gate")
        outcome = gate_model_version(model_uri, parsed, data=data, target=target)
    print_gates(outcome)
    raise typer.Exit(0 if outcome.evaluation.all_passed else EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Add the validate, gate, promote and pipeline commands to the ``govern`` app."""
    app.command()(validate)
    app.command()(gate)
    app.command()(promote)
    app.command()(pipeline)
