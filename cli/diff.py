"""``govern diff``: what changed in how a model decides between two explained versions
(read-only: ``flavors.diff.diff_versions``)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

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

CHANGES_SHOWN = 15
"""Frequency changes printed (largest first); ``--json`` has all of them."""
VERSION_HELP = "An explained ensemble version: models:/<name>/<version> or models:/<name>@<alias>."
FromUri = Annotated[str, typer.Option("--from", help=f"The earlier version. {VERSION_HELP}")]
ToUri = Annotated[str, typer.Option("--to", help=f"The later version. {VERSION_HELP}")]


def _share(value: float) -> str:
    return f"{100 * value:.1f}%"


def _changes_lines(changes) -> list[str]:
    """What changed in the rules and features (a ``RuleChanges``), before the figures."""
    counts = {kind: changes.count(kind) for kind in ("moved", "added", "removed")}
    head = (
        f"what changed in the rules: {counts['moved']} with thresholds moved, "
        f"{counts['added']} added, {counts['removed']} removed, {changes.unchanged} unchanged"
    )
    if not any(counts.values()):
        head = f"what changed in the rules: nothing ({changes.unchanged} the same)"
    lines = [head]
    lines += [f"  moved:   {before}  ->  {after}" for before, after in changes.moved]
    lines += [f"  added:   {rule}" for rule in changes.added]
    lines += [f"  removed: {rule}" for rule in changes.removed]
    lines.append(
        f"features gained: {', '.join(changes.gained) or 'none'}; lost: "
        f"{', '.join(changes.lost) or 'none'}"
    )
    return lines


def _print(outcome) -> None:
    from miret_governance.governance.report.wording import DRIFT_NAME, DRIFT_SCALE

    drift, plain = outcome.drift, {"highlight": False, "markup": False, "soft_wrap": True}
    source, target = (outcome.to_json()[side] for side in ("from", "to"))
    console.print(
        f"[bold]{escape(source['ensemble_uri'])}[/] -> [bold]{escape(target['ensemble_uri'])}[/] "
        f"(surrogates {escape(source['surrogate_uri'])} -> {escape(target['surrogate_uri'])})"
    )
    for line in _changes_lines(drift.rule_changes()):
        console.print(line, **plain)
    console.print(
        f"{DRIFT_NAME[0].lower()}{DRIFT_NAME[1:]} {drift.distance:.3f} (explanation_drift: mean over levels of "
        f"the total variation between the VITE level frequencies; {DRIFT_SCALE})",
        **plain,
    )
    table = Table(title="VITE level frequency changes, largest first")
    table.add_column("Feature", overflow="fold")
    for column in ("Level", "From", "To", "Change"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in drift.changes.head(CHANGES_SHOWN).to_dict(orient="records"):
        table.add_row(
            Text(str(row["feature"])),
            str(row["level"]),
            _share(row["from"]),
            _share(row["to"]),
            f"{100 * row['change']:+.1f} pts",
        )
    console.print(table)
    if len(drift.changes) > CHANGES_SHOWN:
        console.print(f"({len(drift.changes) - CHANGES_SHOWN} smaller changes: --json)", **plain)
    console.print(
        f"features used by both surrogates: {', '.join(drift.shared) or 'none'}; only "
        f"before: {', '.join(drift.only_from) or 'none'}; only after: "
        f"{', '.join(drift.only_to) or 'none'} (overlap {drift.overlap:.3f}, Jaccard)",
        **plain,
    )
    rules = Table(title="Rules side by side (raw input units)")
    rules.add_column(Text(source["ensemble_uri"]), overflow="fold")
    rules.add_column(Text(target["ensemble_uri"]), overflow="fold")
    for before, after in drift.rules:
        rules.add_row(Text(before), Text(after))
    console.print(rules)
    cross = drift.cross_fidelity
    if cross is None:
        console.print(
            "cross-fidelity needs --data (rows with both versions' feature columns)", **plain
        )
        return
    console.print(
        f"cross-fidelity on {cross.rows} rows: {_share(cross.from_on_to / cross.rows)} "
        f"({cross.from_on_to}) of the earlier surrogate agree with the later ensemble, "
        f"{_share(cross.to_on_from / cross.rows)} ({cross.to_on_from}) of the later surrogate "
        f"with the earlier ensemble; the smaller, {cross.value:.3f}, is what "
        "min_cross_fidelity gates on",
        **plain,
    )


def diff(
    from_uri: FromUri,
    to_uri: ToUri,
    data: common.SparkCheckData = None,
    engine: common.Engine = "pandas",
    policy: PolicyFile = None,
    tracking_uri: TrackingUri = None,
    trust_pickle: Annotated[
        bool,
        typer.Option(
            "--trust-pickle",
            help="Also load scikit-learn ensembles stored as pickle (this runs code from "
            "the artifact: only for models you trust).",
        ),
    ] = False,
    as_json: JsonOutput = False,
) -> None:
    """Compare the explanations of two ensemble versions.

    The change in VITE level frequencies (per feature and level, and one distance), the overlap of the features
    the surrogates use, their rules side by side and, with --data (rows with both
    versions' feature columns in raw units: a pipeline that encodes categories takes its
    original columns, and a category not seen in training is refused by name; missing
    values follow each model's rule), cross-fidelity: each surrogate scored against the
    other version's ensemble; on Spark data (--data spark:<table>, or a path with
    --engine spark) counted in Spark, with the same result as on a file of the same rows. Both
    explanations are read only once their signature verifies with a key the policy
    (--policy or GOVERN_POLICY) trusts for explain. Read-only.

    --json prints {"command": "diff", "schema_version": 1, "from", "to": {"ensemble_uri",
    "surrogate_uri", "evidence_digest"}, "distance": float, "changes": list of {"feature",
    "level", "from", "to", "change"}, "features": {"shared", "only_from", "only_to",
    "overlap"}, "rules": {"from", "to"}, "rule_changes": {"added", "removed", "moved": list
    of [from, to], "unchanged", "gained", "lost"}, "cross_fidelity": null or {"rows",
    "from_surrogate_on_to_ensemble", "to_surrogate_on_from_ensemble", "value"}, "data":
    null or {"identity" (the file's path, spark:<table> or "<path> (spark)"), "rows",
    "digest" (row-set digest: the same rows give the same digest in any order and engine)}}.
    """
    with exit_codes():
        data = common.data_of(data, engine)
        if data is not None:
            common.import_model_readers()
        from miret_governance.flavors.gates.diff import diff_versions
        from miret_governance.flavors.trust import trusted_keys

        check_model_uri(from_uri)
        check_model_uri(to_uri)
        trusted = trusted_keys(policy)
        connect(tracking_uri, fail_fast=False, read_only=True)
        outcome = diff_versions(
            from_uri, to_uri, data=data, policy=trusted, trust_pickle=trust_pickle
        )
    if as_json:
        print_json("diff", outcome.to_json())
    else:
        _print(outcome)


def register(app: typer.Typer) -> None:
    """Add ``diff`` to the ``govern`` app."""
    app.command("diff")(diff)
