"""The reviewer's HTML page and Markdown model card of a surrogate explanation.

Both are rendered with Jinja2 from ``governance/report/templates``. The HTML page is
self-contained: CSS and SVG figures are inlined and there is no external resource, so it
can be archived and opened anywhere (including the MLflow UI, whose artifact viewer shows
it in a frame sandboxed with ``allow-scripts``); its one script is the "Try an applicant"
panel's (:mod:`governance.report.applicant_model`), inline. ``govern inventory``'s page
(:func:`render_inventory`) is rendered the same way.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.measures.metrics import class_fidelity, fidelity_with_interval
from miret_governance.governance.miret.tree.conditions import glued
from miret_governance.governance.miret.tree.display import leaf_rules
from miret_governance.governance.report.figures import MAX_ROWS, OTHER, format_interval
from miret_governance.governance.report.formatting import (
    format_number,
    format_percent,
    markdown_text,
)
from miret_governance.governance.report.wording import (
    CHOSEN,
    glossary,
    solver_outcome,
    table_fidelity_text,
)

METRIC_ROWS = (
    ("Fidelity to the ensemble", "fidelity"),
    ("Accuracy of the surrogate", "accuracy_surrogate"),
    ("Accuracy of the ensemble", "accuracy_ensemble"),
    ("Proximity pairs in U(m)", "proximity_pairs"),
)
SPARSITY_ROWS = (
    ("Distinct features used", "n_features_used"),
    ("Distinct input columns used (a one-hot group counts once)", "n_columns_used"),
    ("Distinct encoded columns used (one per category)", "n_encoded_features_used"),
    ("Feature uses (multiset)", "n_feature_uses"),
    ("Effective depth", "effective_depth"),
)
SOLVER_ROWS = (
    ("Objective", "solver.objective"),
    ("Best bound", "solver.bound"),
    ("MIP gap", "solver.gap"),
    ("Solve time (s)", "solver.time_s"),
    ("Proved optimal", "solver.optimal"),
)
_SHOWN_AS = {
    "solver.gap": lambda v: f"{100 * v:.2f}%",
    "solver.optimal": lambda v: "yes" if v == 1 else "no",
}


@dataclass
class ReportContext:
    """Everything the page and the card show.

    Attributes
    ----------
    title : str
        What is explained, e.g. ``models:/credit-rf/3``.
    depth : int
    tree_kind : str
        What the returned tree is (:func:`governance.report.wording.tree_kind`).
    display : governance.miret.display.DisplayTree or None
        The pruned tree; its leaf rules are listed (else the ``rules`` text lines).
    rules : str
        One rule per line, raw units (shown when there is no ``display``).
    metrics : dict
        Keys of :func:`governance.metrics.surrogate_metrics` plus the solver metrics.
    parameters : dict
        Hyperparameters and settings of the run.
    provenance : dict
        Ensemble URI, data digest, solver and version, time, run id, ...
    validation : dict
        ``status`` ("passed"/"failed"/"not run") and ``summary`` (text).
    solve : dict
        The solve report (``SolveReport.to_dict()``): what the fit proved, in words.
    figures : dict
        Caption -> path of an SVG file to inline.
    tree_svg : pathlib.Path or None
        SVG of the surrogate tree.
    threshold_ranges : pandas.DataFrame or None
        VITE threshold ranges (columns ``position, feature, low, high, count``, optional
        ``low_raw, high_raw``).
    artifacts : list of str
        Files stored next to the report (for the model card).
    baseline : dict
        Depth-``D`` CART baseline on the same ensemble labels, e.g.
        ``{"train_fidelity": .., "test_fidelity": .., "n_features_used": ..}``.
    allowed_features : list of list of str
        Features MIRET may use at each level (from the VITE level frequencies).
    search : dict
        A hyperparameter search, when one chose the parameters: ``rule`` (text),
        ``chosen`` (name -> value), ``n_candidates`` and ``figure`` (an SVG path of
        validation fidelity against features, the chosen point marked).
    applicants : governance.miret.paths.Applicants or None
        Example rows (one per leaf) and every disagreement of the holdout, each with its
        path in raw units; ``applicants_source`` names their data file.
    confusion : pandas.DataFrame or None
        The test rows counted by the ensemble's class (index) and the surrogate's
        (columns), in the classes' order (:func:`governance.metrics.surrogate_confusion`):
        the fidelity per class is shown for every ``k``, the matrix itself for ``k > 2``.
        Classes are named as in ``display`` when it names as many.
    applicant : governance.report.applicant_model.ApplicantModel or None
        What the "Try an applicant" panel follows a typed row with (no panel without).
    """

    title: str
    depth: int
    rules: str
    metrics: dict
    parameters: dict
    provenance: dict
    validation: dict
    solve: dict = field(default_factory=dict)
    tree_kind: str = "MIRET tree"
    figures: dict = field(default_factory=dict)
    tree_svg: Path | None = None
    threshold_ranges: object = None
    artifacts: list = field(default_factory=list)
    display: object = None
    baseline: dict = field(default_factory=dict)
    allowed_features: list = field(default_factory=list)
    search: dict = field(default_factory=dict)
    applicants: object = None
    applicants_source: str = ""
    confusion: object = None
    applicant: object = None


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("miret_governance.governance.report", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html.j2",), default=False),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = format_number
    env.filters["md"] = markdown_text
    env.filters["pct"] = format_percent
    env.filters["glued"] = glued
    env.filters["fidelity"] = fidelity_with_interval
    env.filters["table_fidelity"] = table_fidelity_text
    return env


_XML_PROLOG = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_SVG_WIDTH = re.compile(r'\s*<svg\b[^>]*?\swidth="([0-9.]+)pt"')
SVG_SCALE = (0.85, 1.2)
"""Narrowest and widest an inlined figure is drawn, relative to its own size: text never
shrinks below 85% of its point size, 10 px for the figures' 9-point text (a narrow page
scrolls the figure sideways instead), nor grows beyond 120% on a wide one."""


def inline_svg(path) -> Markup:
    """An SVG file as markup to embed in HTML (prolog, doctype and metadata removed).

    A matplotlib SVG (width in points) gets a ``style`` that lets it follow the page's
    width within :data:`SVG_SCALE` of its own size.
    """
    text = Path(path).read_text(encoding="utf-8")
    text = _METADATA.sub("", _XML_PROLOG.sub("", text, count=1))
    if "<script" in text.lower():
        raise InvalidInputError(f"{path} contains a script; refusing to inline it")
    width = _SVG_WIDTH.match(text)
    if width:
        pixels = float(width.group(1)) * 4 / 3
        low, high = (round(pixels * scale) for scale in SVG_SCALE)
        text = text.replace("<svg", f'<svg style="min-width:{low}px;max-width:{high}px"', 1)
    return Markup(text)


def _metric_table(metrics: dict) -> list[dict]:
    rows = []
    for label, key in METRIC_ROWS:
        train, test = metrics.get(f"train_{key}"), metrics.get(f"test_{key}")
        if train is not None or test is not None:
            rows.append({"label": label, "train": train, "test": test})
    if "test_proximity_agreement" in metrics:
        rows.append(
            {
                "label": "Proximity agreement U (pairs kept together)",
                "train": None,
                "test": metrics["test_proximity_agreement"],
            }
        )
    return rows


def _rows(metrics: dict, spec) -> list[dict]:
    return [
        {"label": lbl, "key": key, "value": _SHOWN_AS.get(key, format_number)(metrics[key])}
        for lbl, key in spec
        if key in metrics
    ]


def _without_same_count(metrics: dict) -> dict:
    """``metrics`` without ``n_columns_used`` when it repeats ``n_features_used`` (no
    encoded categorical column among the features used)."""
    if metrics.get("n_columns_used") != metrics.get("n_features_used"):
        return metrics
    return {k: v for k, v in metrics.items() if k != "n_columns_used"}


WHOLE_MILP_NOT_RUN = "\u2013 (whole MILP not run)"
"""The gap shown when no whole-MILP solve gave a bound (the node MILPs only, or a phase
skipped): the logged ``solver.gap`` is then 1, what a ``max_gap`` gate reads as
nothing proven, not a measured gap."""


def _solver_rows(context: ReportContext) -> list[dict]:
    """The solver table: objective, bound, gap, time, proof; without a whole-MILP solve
    the gap says so instead of showing 100%."""
    rows = _rows(context.metrics, SOLVER_ROWS)
    if context.solve.get("global_milp", True):
        return rows
    return [
        {**row, "value": WHOLE_MILP_NOT_RUN} if row["key"] == "solver.gap" else row for row in rows
    ]


def _template_values(context: ReportContext) -> dict:
    ranges = context.threshold_ranges
    range_rows = [] if ranges is None else ranges.to_dict(orient="records")
    return {
        "c": context,
        "metric_rows": _metric_table(context.metrics),
        "sparsity_rows": _rows(_without_same_count(context.metrics), SPARSITY_ROWS),
        "solver_rows": _solver_rows(context),
        "range_rows": range_rows,
        "has_raw_ranges": bool(range_rows) and "low_raw" in range_rows[0],
        "vite_nodes": [] if ranges is None else vite_nodes(ranges, context.depth),
        "rule_lines": [line for line in context.rules.splitlines() if line.strip()],
        "leaf_rules": leaf_rules(context.display) if context.display is not None else [],
        "baseline_rows": _baseline_rows(context),
        "candidates": _candidate_rows(context.solve),
        "grid": _grid_rows(context.solve),
        "grid_text": _grid_text(context.solve),
        "outcome": solver_outcome(context.solve) if context.solve else None,
        "glossary": glossary(_sections(context)),
        **_class_tables(context),
    }


def _class_names(context: ReportContext) -> list[str]:
    """The confusion table's classes as the page names them: the display tree's class
    names when it names as many, else the labels as text."""
    labels = [str(label) for label in context.confusion.index]
    names = getattr(context.display, "class_names", ())
    return [str(name) for name in names] if len(names) == len(labels) else labels


def _class_tables(context: ReportContext) -> dict:
    """``class_rows`` (the fidelity per class) and ``confusion`` (names and rows of the
    matrix, None for two classes); empty rows without a confusion table."""
    if context.confusion is None:
        return {"class_rows": [], "confusion": None}
    names = _class_names(context)
    shares = class_fidelity(context.confusion)
    class_rows = [
        {
            "name": name,
            "rows": int(row.ensemble_rows),
            "agreeing": int(row.agreeing_rows),
            "fidelity": float(row.fidelity),
        }
        for name, row in zip(names, shares.itertuples(index=False), strict=True)
    ]
    counts = context.confusion.to_numpy()
    matrix = None
    if len(names) > 2:
        matrix = {
            "names": names,
            "rows": [
                {"name": name, "cells": [int(n) for n in row], "total": int(row.sum())}
                for name, row in zip(names, counts, strict=True)
            ],
            "totals": [int(n) for n in counts.sum(axis=0)],
            "n_rows": int(counts.sum()),
        }
    return {"class_rows": class_rows, "confusion": matrix}


def _sections(context: ReportContext) -> set:
    """The sections of :func:`governance.report.wording.glossary` the outputs show."""
    shown = {"fidelity", "solver", "parameters"}
    if "test_fidelity_ci_low" in context.metrics:
        shown.add("interval")
    if (context.display is not None and context.display.scores) or getattr(
        context.applicants, "scores", ()
    ):
        shown.add("scores")
    if context.baseline or context.allowed_features:
        shown.add("baseline")
    if context.threshold_ranges is not None or context.figures:
        shown.add("vite")
    if context.confusion is not None:
        shown |= {"classes", "confusion"} if len(context.confusion) > 2 else {"classes"}
    return shown


def vite_nodes(ranges, depth: int, max_rows: int = MAX_ROWS) -> list[dict]:
    """The VITE representative tree as text: per branch position of the first ``depth``
    levels, the features the trees split on there, most used first.

    Each node is a dict with ``position``, ``level``, ``parent`` and ``side`` (``"left"``
    for the ``<=`` branch), ``trees`` (splits at the node) and ``rows`` of ``feature``,
    ``trees``, ``share`` (weighted by tree weight, as the VITE figures) and
    ``thresholds`` (``[l, u]`` in raw units when ``ranges`` has them), most used first;
    beyond ``max_rows`` the least used features are summed into one row.
    """
    raw = "low_raw" in ranges.columns
    low, high = ("low_raw", "high_raw") if raw else ("low", "high")
    shown = ranges[ranges.position < 2**depth - 1]
    nodes = []
    for position, group in shown.groupby("position", sort=True):
        group = group.sort_values(["share", "count"], ascending=False, kind="stable")
        total = int(group["count"].sum())
        rows = [
            {
                "feature": str(row.feature),
                "trees": int(row.count),
                "share": row.share,
                "thresholds": format_interval(getattr(row, low), getattr(row, high)),
            }
            for row in group.itertuples(index=False)
        ]
        if len(rows) > max_rows:
            tail = rows[max_rows - 1 :]
            rows = rows[: max_rows - 1] + [
                {
                    "feature": f"{OTHER} ({len(tail)} features)",
                    "trees": sum(r["trees"] for r in tail),
                    "share": sum(r["share"] for r in tail),
                    "thresholds": "",
                }
            ]
        position = int(position)
        nodes.append(
            {
                "position": position,
                "level": int(math.log2(position + 1)),
                "parent": (position - 1) // 2 if position else None,
                "side": "left" if position % 2 else "right",
                "trees": total,
                "rows": rows,
            }
        )
    return nodes


def _candidate_rows(solve: dict) -> list[dict]:
    """The three candidate trees with their held-out fidelity and features, the returned
    one marked (empty when the fit chose none: paper mode or a tiny sample)."""
    held_out = solve.get("cv_fidelity") or {}
    features = solve.get("candidate_features") or {}
    return [
        {
            "name": CHOSEN[name],
            "held_out": value,
            "features": features.get(name),
            "returned": name == solve.get("chosen"),
        }
        for name, value in held_out.items()
    ]


def _grid_rows(solve: dict) -> list[dict]:
    """The depths and settings (alpha, ``m``) the fit tried because none was given
    (:mod:`governance.miret.grid`): each candidate's held-out fidelity and its mean
    number of features over the folds, the chosen setting's MIRET tree marked."""
    grid = solve.get("grid") or {}
    chosen = (grid.get("depth"), grid.get("alpha"), grid.get("proximity_threshold"))
    return [
        {
            "depth": row["depth"],
            "alpha": row["alpha"],
            "proximity_threshold": row.get("proximity_threshold"),
            "name": CHOSEN[row["candidate"]],
            "held_out": row["cv_fidelity"],
            "features": row["features"],
            "chosen": row["candidate"] == "miret"
            and (row["depth"], row["alpha"], row.get("proximity_threshold")) == chosen,
        }
        for row in grid.get("rows", [])
    ]


def _grid_text(solve: dict) -> str:
    """``chose depth 3, alpha 0.5, m 0.9 among depth 2 / 3, alpha 0.2 / 0.5 / 0.8, m 0.9 /
    1 (not given) on the same folds: <rule>``, naming only what was chosen (a report
    written before ``m`` was chosen has no ``proximity_thresholds``)."""
    grid = solve.get("grid") or {}
    if not grid:
        return ""
    labels = (("depth", "depth"), ("alpha", "alpha"), ("m", "proximity_threshold"))
    tried = [  # only what was chosen (a given value is its grid's only one)
        (label, grid[key], grid[f"{key}s"])
        for label, key in labels
        if len(grid.get(f"{key}s", [])) > 1
    ]
    chose = ", ".join(f"{label} {format_number(value)}" for label, value, _ in tried)
    among = ", ".join(
        f"{label} {' / '.join(format_number(option) for option in options)}"
        for label, _, options in tried
    )
    return f"chose {chose} among {among} (not given) on the same folds: {grid['rule']}"


def _baseline_rows(context: ReportContext) -> list[dict]:
    """MIRET next to the depth-D CART baseline, metric by metric."""
    keys = (
        ("Train fidelity", "train_fidelity"),
        ("Cross-validated fidelity (decides which tree is returned)", "cv_fidelity"),
        ("Test fidelity", "test_fidelity"),
        ("Distinct features used", "n_features_used"),
    )
    return [
        {"label": label, "miret": context.metrics.get(key), "cart": context.baseline[key]}
        for label, key in keys
        if key in context.baseline
    ]


def render_report(context: ReportContext) -> str:
    """The self-contained HTML page (inline CSS, SVG and the applicant panel's script, no
    external link)."""
    values = _template_values(context)
    applicant = context.applicant
    values["applicant_json"] = Markup(applicant.to_json()) if applicant is not None else None
    values["tree_svg"] = inline_svg(context.tree_svg) if context.tree_svg else None
    values["figures"] = [(caption, inline_svg(path)) for caption, path in context.figures.items()]
    figure = context.search.get("figure")
    values["search_svg"] = inline_svg(figure) if figure else None
    return _environment().get_template("report.html.j2").render(**values)


def render_inventory(document: dict) -> str:
    """The self-contained HTML page of ``govern inventory``'s JSON document (its
    ``to_json``): findings first, then one row per alias, readable at 870 px."""
    return _environment().get_template("inventory.html.j2").render(d=document)


def render_model_card(context: ReportContext) -> str:
    """The Markdown model card."""
    return _environment().get_template("model_card.md.j2").render(**_template_values(context))


def write_report(context: ReportContext, out_dir) -> tuple[Path, Path]:
    """Write ``report.html`` and ``model_card.md`` into ``out_dir``; return both paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    html = out_dir / "report.html"
    card = out_dir / "model_card.md"
    html.write_text(render_report(context), encoding="utf-8")
    card.write_text(render_model_card(context), encoding="utf-8")
    return html, card
