"""``govern show``: a surrogate's rules, metrics and CART baseline, and the gate and
promotion status of its ensemble (read-only)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from miret_governance.cli import common
from miret_governance.cli.common import (
    JsonOutput,
    PolicyFile,
    TrackingUri,
    check_model_uri,
    connect,
    console,
    exit_codes,
    print_json,
)
from miret_governance.cli.tables import baseline_table, metrics_table


def _json(summary: dict) -> dict:
    ensemble = summary["ensemble"]
    gate = ensemble["last_gate"]
    return {
        "surrogate_uri": summary["uri"],
        "surrogate_model_id": summary["model_id"],
        "ensemble_uri": ensemble["uri"],
        "aliases": ensemble["aliases"],
        "status": ensemble["status"],
        "last_gate": gate.to_json() if gate is not None else None,
        "validation": summary["validation"],
        "rules": summary["rules"],
        "metrics": summary["metrics"],
        "solve": summary["solve"],
        "signed_by": summary["signer"].to_json(),
        "approvals": summary["ensemble"]["approvals"],
    }


def _decisions(ensemble: dict) -> list[str]:
    """The ensemble's decisions in words: each alias's promotion, the last gate for what
    it was evaluated (when it is not one of them), the approvals."""
    from miret_governance.governance.report.wording import gate_verdict

    status, gate, lines = ensemble["status"], ensemble["last_gate"], []
    verdict = gate_verdict(gate.result, gate.policy, gate.alias) if gate is not None else ""
    promotion_runs = set()
    for key, value in status.items():
        alias = key[len("governance.promotion.") :]
        if key.startswith("governance.promotion.") and not alias.endswith(".run"):
            run_id = status.get(f"{key}.run")
            last = gate is not None and run_id == gate.run_id
            lines.append(f"promotion @{alias}: {value}" + (f" ({verdict})" if last else ""))
            promotion_runs.add(run_id)
    if gate is not None and gate.run_id not in promotion_runs:
        lines.append(verdict)
    for a in ensemble["approvals"]:
        who = f"key {a['signed_by']['name']}" if a["signed_by"] else f"not counted: {a['problem']}"
        basis = "" if a["current"] else f" [on superseded evidence of {a['surrogate_uri']}]"
        lines.append(
            f"approval @{a['alias']}: {a['decision']} by {who}, user {a['mlflow_user']}, "
            f"{a['time']}{basis}: {a['comment']}"
        )
    return lines


def _print(summary: dict) -> None:
    """What a reviewer decides on first (fidelity with its interval against the plain
    tree, features, validation, signature, decisions), the rules, then the technical
    details (how the tree was found, every metric)."""
    from miret_governance.cli.tables import headline_lines
    from miret_governance.governance.report.wording import describe_stop

    ensemble = summary["ensemble"]
    plain = {"highlight": False, "markup": False, "soft_wrap": True}
    console.print(f"[bold]{escape(summary['uri'])}[/] explains [bold]{escape(ensemble['uri'])}[/]")
    for line in headline_lines(summary["metrics"], summary["validation"]):
        console.print(line, **plain)
    signer = summary["signer"]
    console.print(
        f"evidence signed by key {signer.name!r} ({signer.fingerprint[:16]}...), trusted by "
        "the policy for explain",
        **plain,
    )
    console.print(
        "\n[bold]Decisions[/] on "
        + escape(ensemble["uri"])
        + " (its tags, which are not signed: govern audit checks them against the signed "
        "decision records)"
    )
    aliases = ", ".join(f"@{a}" for a in ensemble["aliases"]) or "none"
    console.print(f"  aliases: {aliases}", **plain)
    for line in _decisions(ensemble):
        console.print(f"  {line}", **plain)
    if not ensemble["status"]:
        console.print(
            f"  no gate evaluated yet (govern gate --model-uri {ensemble['uri']})", **plain
        )
    console.print("\n[bold]Rules[/] (raw input units)")
    console.print(summary["rules"], **plain)
    console.print("\n[bold]Technical details[/]")
    if summary["solve"]:
        console.print(f"how the tree was found: {describe_stop(summary['solve'])}", **plain)
    console.print(metrics_table(summary["metrics"]))
    baseline = baseline_table(summary["metrics"])
    if baseline is not None:
        console.print(baseline)


def show(
    model_uri: Annotated[
        str,
        typer.Option(
            "--model-uri",
            help="An explained ensemble version (its linked surrogate is shown) or a "
            "surrogate version: models:/<name>/<version>, models:/<name>@<alias>.",
        ),
    ],
    tracking_uri: TrackingUri = None,
    policy: PolicyFile = None,
    as_json: JsonOutput = False,
    signing_key: common.SigningKeyOption = None,
    signing_certificate: common.SigningCertificateOption = None,
    certificate_chain: common.CertificateChainOption = None,
    no_record: common.NoRecord = False,
) -> None:
    """Print a surrogate's rules, metrics, CART baseline and its ensemble's gate status.

    Shown once the surrogate's signature verifies with a key the policy (--policy or
    GOVERN_POLICY) trusts for explain; the status is the ensemble's gate and promotion
    status. With a signing key it records a signed verification record (shown on the
    ensemble version's page; --no-record: nothing); it never creates a store.

    --json prints {"command": "show", "schema_version": 1, "surrogate_uri",
    "surrogate_model_id", "ensemble_uri", "aliases": list of str, "status": {tag: value}
    (the ensemble's governance.last_gate* and governance.promotion.* tags, not signed:
    govern audit checks them), "last_gate": {"result", "policy", "alias" (null: a
    what-if gate), "run_id"} or null (the last gate, whatever alias it was for: not the
    version's verdict), "validation": "passed", "failed" or null (from the signed
    evidence, like "metrics"), "rules": str (raw input units), "metrics": {name: number
    or null}, "solve": the solver report, "signed_by": {"name", "fingerprint"} (the
    trusted key that signed the surrogate), "approvals": list of {"run_id", "alias",
    "decision", "comment", "signed_by" (null when not trusted), "problem", "mlflow_user",
    "time", "surrogate_uri", "current" (made on the surrogate linked now)}}.
    """
    with exit_codes():
        from miret_governance.flavors.read.review import describe_for_review
        from miret_governance.flavors.store.reads import CommandClient
        from miret_governance.flavors.trail import verification
        from miret_governance.flavors.trust import signed_policy, trusted_keys

        check_model_uri(model_uri)
        parsed = signed_policy(policy) if policy is not None else None
        trusted = trusted_keys(parsed)
        chain = (signing_certificate, certificate_chain)
        key = None if no_record else common.load_signing_key(signing_key, *chain)
        connect(tracking_uri, fail_fast=False, read_only=True)
        client = CommandClient()
        summary = describe_for_review(model_uri, client, policy=trusted)
    if as_json:
        print_json("show", _json(summary))
    else:
        _print(summary)
    common.record_verified(
        key,
        no_record,
        lambda key: verification.record_verification(
            client, parsed, key, verification.shown(client, summary)
        ),
    )


def register(app: typer.Typer) -> None:
    """Add ``show`` to the ``govern`` app."""
    app.command("show")(show)
