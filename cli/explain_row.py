"""``govern explain-row``: the surrogate's path for given rows, in raw units, with the
surrogate's and the ensemble's answers (read-only)."""

from __future__ import annotations

from typing import Annotated

import typer
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
    import_model_readers,
    print_json,
)
from miret_governance.governance.data.spark import ROW_LIMIT


def _print(explained) -> None:
    from miret_governance.governance.miret.tree.paths import path_scores

    plain = {"highlight": False, "markup": False, "soft_wrap": True}
    signer = explained.signer
    console.print(
        f"{explained.surrogate_uri} explains {explained.ensemble_uri} (evidence signed by "
        f"key {signer.name!r}, trusted by the policy for explain); rules in raw input units",
        **plain,
    )
    for score in path_scores(explained.paths):
        console.print(score.text(), **plain)
    for path in explained.paths:
        verdict = (
            Text("agree", style="green") if path.agrees else Text("DISAGREE", style="bold red")
        )
        console.print(
            Text.assemble(
                f"\nrow {path.row}: surrogate {path.surrogate}, ensemble {path.ensemble}: ",
                verdict,
            ),
            soft_wrap=True,
        )
        for step in path.steps:
            console.print(
                f"  node {step.node}: {step.condition}? {step.answer} (row: {step.value_text})",
                **plain,
            )
        console.print(f"  leaf {path.leaf}: {path.surrogate}", **plain)
    n = len(explained.paths)
    console.print(
        f"\n{explained.n_disagree} of {n} row{'s' if n != 1 else ''}: surrogate and ensemble "
        "disagree",
        **plain,
    )


def explain_row(
    model_uri: Annotated[
        str,
        typer.Option(
            "--model-uri",
            help="An explained ensemble version (its linked surrogate is followed) or a "
            "surrogate version: models:/<name>/<version>, models:/<name>@<alias>.",
        ),
    ],
    data: common.SparkDataFile,
    engine: common.Engine = "pandas",
    where: Annotated[
        str | None,
        typer.Option(
            "--where",
            help="Spark data only: a Spark SQL condition selecting the rows to explain, "
            'e.g. "id = 42" (default: every row).',
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            min=1,
            help="Spark data only: the most rows explained; more selected exits 2 naming "
            "their count.",
        ),
    ] = ROW_LIMIT,
    tracking_uri: TrackingUri = None,
    policy: PolicyFile = None,
    as_json: JsonOutput = False,
) -> None:
    """Follow each row of --data through the surrogate and compare with the ensemble.

    Every split on a row's path in raw input units and which side the row took, the
    leaf, the surrogate's and the ensemble's answers, and whether they agree. The
    surrogate is read once its signature
    verifies with a key the policy (--policy or GOVERN_POLICY) trusts for explain; the
    ensemble is loaded without running code from it. Read-only: never creates a store.
    A disagreement is an answer, not a failure (exit code 0). For a pipeline whose
    ColumnTransformer encodes categories, --data holds its original columns (category
    strings) and the paths name them; a category not seen in training exits 2, naming
    the column, the value and the categories seen. A missing value follows each model's
    rule for one (refused, exit 2, only by a surrogate written before such rules).

    On Spark data (--data spark:<table>, or a path with --engine spark) --where selects the
    rows in Spark and at most --limit are collected; they are numbered in the order of
    their row hashes (the same rows in that order as a file give the same answers).

    --json prints {"command": "explain-row", "schema_version": 1, "surrogate_uri",
    "ensemble_uri", "signed_by": {"name", "fingerprint"}, "n_rows", "n_disagree",
    "rows": list of {"row" (its number in the file, first data row 0; Spark: in row-hash
    order), "steps": list of
    {"node", "condition" (the yes branch, raw units), "answer" ("yes" or "no"), "holds"
    (the condition that held), "value" (the row's value of its left side; null where a
    missing feature or category leaves it undefined), "terms" (list of [feature, weight],
    raw units), "category" (a split on a categorical column: the row's category, its
    original value; else null)}, "leaf", "surrogate", "ensemble" (class names), "agrees"}}.
    """
    with exit_codes():
        data = common.data_of(data, engine)
        import_model_readers()
        from miret_governance.flavors.read.applicant import explain_rows
        from miret_governance.flavors.trust import trusted_keys

        check_model_uri(model_uri)
        trusted = trusted_keys(policy)
        connect(tracking_uri, fail_fast=False, read_only=True)
        explained = explain_rows(model_uri, data, policy=trusted, where=where, limit=limit)
    if as_json:
        print_json(
            "explain-row",
            {
                "surrogate_uri": explained.surrogate_uri,
                "ensemble_uri": explained.ensemble_uri,
                "signed_by": explained.signer.to_json(),
                "n_rows": len(explained.paths),
                "n_disagree": explained.n_disagree,
                "rows": [path.to_dict() for path in explained.paths],
            },
        )
    else:
        _print(explained)


def register(app: typer.Typer) -> None:
    """Add ``explain-row`` to the ``govern`` app."""
    app.command("explain-row")(explain_row)
