"""Plain words for the reviewer: the solver's outcome and the glossary.

- :func:`solver_outcome`: what the fit proved and what it did not, for people, with
  the solver's technical status beside it; :func:`describe_stop` says it in one line
  (``govern show``, the report's provenance).
- :func:`tree_kind`: what the returned tree is (MIRET, optimal univariate or CART).
- :func:`glossary`: every term the reviewer page and the model card show, explained.
- :func:`table_fidelity_text`: the fidelity on every row of a Spark table beyond the
  explained sample.
- :func:`gate_verdict`: a gate's result for the alias and policy it was evaluated for;
  :data:`DRIFT_NAME`: what the ``explanation_drift`` figure is called on every page.
"""

from __future__ import annotations

import math

import numpy as np

from miret_governance.governance.data.spark.sample import (
    TABLE_FIDELITY,
    TABLE_FIDELITY_CI,
    TABLE_ROWS,
)
from miret_governance.governance.miret.solvers.gurobi import GUROBI_SIZE_LIMIT
from miret_governance.governance.miret.solvers.solve_result import GLOBAL_MILP_BINARIES
from miret_governance.governance.miret.tree.conditions import CONVENTION_NOTE

TECHNICAL = {
    "optimal": "proved optimal",
    "gap_limit": "reached the requested gap",
    "stalled": "stalled",
    "work_limit": "used its work budget",
    "time_limit": "hit the time limit",
    "node_milps": "whole MILP not run, each split solved as its own MILP",
    "not_started": "MILP not started",
    "behind_on_folds": "MILP phase skipped: the MIRET tree was behind on held-out folds",
    "no_milp_budget": "MILP phase skipped: it was given no work (milp_share 0)",
}
"""The solver's stop reasons (:class:`governance.miret.report.SolveReport`) in words."""

DRIFT_NAME = "Change in the ensembles' feature use (VITE)"
"""The display name of the ``explanation_drift`` metric (the key stays: policies name it)."""
DRIFT_SCALE = "0 the same share of splits on each feature at each depth, 1 nothing in common"
"""The scale of :data:`DRIFT_NAME`."""
CHOSEN = {"univariate": "optimal univariate tree", "cart": "CART tree", "miret": "MIRET tree"}
"""The candidates of :mod:`governance.miret.selection` in words."""


def tree_kind(surrogate) -> str:
    """What a fitted surrogate's tree is, for titles: the candidate the fit returned
    (:data:`CHOSEN`) and, for a MIRET tree, whether a split combines features."""
    chosen = getattr(getattr(surrogate, "solve_report_", None), "chosen", None) or "miret"
    if chosen != "miret":
        return CHOSEN.get(chosen, f"{chosen} tree")
    oblique = bool(((np.asarray(surrogate.tree_.coef) != 0).sum(axis=1) > 1).any())
    return "MIRET tree with oblique splits" if oblique else "MIRET tree, one feature per split"


def _percent(value) -> str:
    if value is None or not math.isfinite(float(value)):
        return "-"
    return f"{100 * float(value):.1f}%"


def table_fidelity_text(metrics) -> str:
    """The fidelity on the rows of a Spark table beyond the explained sample, with its
    95% interval and row count (``""`` when the explanation has none).

    Examples
    --------
    >>> table_fidelity_text({"table_fidelity": 0.975, "table_fidelity_ci_low": 0.97,
    ...                      "table_fidelity_ci_high": 0.98, "table_rows": 12000.0})
    '97.5% (95% CI 97.0-98.0%, n=12,000 rows beyond the sample)'
    """
    if TABLE_FIDELITY not in metrics:
        return ""
    low, high = (metrics[k] for k in TABLE_FIDELITY_CI)
    return (
        f"{_percent(metrics[TABLE_FIDELITY])} (95% CI {100 * low:.1f}-{100 * high:.1f}%, "
        f"n={int(metrics[TABLE_ROWS]):,} rows beyond the sample)"
    )


def _number(value) -> str:
    return "-" if value is None or not math.isfinite(float(value)) else f"{float(value):.4g}"


def _not_solved(solve: dict) -> str:
    """Why the whole MILP was not attempted, in a parenthesis ("" when unknown)."""
    why = solve.get("whole_milp_skipped")
    size = (
        f"{solve.get('n_variables')} variables, {solve.get('n_constraints')} constraints, "
        f"{solve.get('n_binaries')} binaries"
    )
    return {
        "licence_size": f" ({size}: over the size-limited Gurobi license's "
        f"{GUROBI_SIZE_LIMIT:,} and the {GLOBAL_MILP_BINARIES} binaries HiGHS is given)",
        "too_large": f" ({size}: over the {GLOBAL_MILP_BINARIES} binaries HiGHS is given; "
        "with a full Gurobi license it would be solved)",
        "no_budget": " (the MILP phase's work budget was spent)",
    }.get(why, "")


def _whole_milp(solve: dict) -> str:
    """`` The whole MILP improved the heuristic's objective from X to Y.`` (or did not),
    when it ran and the report says where it started."""
    start, found = solve.get("whole_milp_start"), solve.get("solver_objective")
    if not solve.get("global_milp") or start is None:
        return ""
    if found is not None and float(found) < float(start) - 1e-9:
        return (
            f" The whole MILP improved the heuristic's objective from {_number(start)} to "
            f"{_number(found)}."
        )
    return f" The whole MILP did not improve the heuristic's objective ({_number(start)})."


def _milp_share(solve: dict) -> str:
    """`` The MILP phase cost N% of ...``: its counted work against the rest of the
    fit's (empty for reports without those figures)."""
    spent, before = solve.get("milp_work"), solve.get("fit_work")
    if spent is None or before is None or not float(before) > 0:
        return ""
    return (
        f" The MILPs counted {_percent(float(spent) / float(before))} of the work the rest "
        "of the fit counted."
    )


def solver_outcome(solve: dict) -> dict:
    """What the fit proved about its tree, from a solve report's ``to_dict()`` (or the
    subset a model's metadata keeps).

    Returns
    -------
    dict
        ``headline`` (a few words), ``proved`` (bool: the tree is proved optimal, or
        within the requested gap), ``proven`` and ``not_proven`` (sentences, ``""`` when
        there is nothing to say) and ``technical`` (the solver's status, time and gap).
    """
    reason = solve.get("stop_reason") or solve.get("status") or "unknown"
    seconds = solve.get("wall_time")
    after = f" after {float(seconds):.1f} s" if seconds is not None else ""
    gap = solve.get("gap")
    skipped = ("optimal", "node_milps", "behind_on_folds", "no_milp_budget")
    meaningful = gap is not None and reason not in skipped
    shown = f", gap {_percent(gap)}" if meaningful else ""
    technical = f"solver: {TECHNICAL.get(reason, reason)}{after}{shown}"
    measured = (
        "The fidelity, accuracy and rules shown are measured on the data for this very "
        "tree; they do not depend on the proof."
    )
    if reason == "trivial":
        outcome = {
            "headline": "no solve needed",
            "proved": True,
            "proven": "The ensemble predicts one class on these rows: the tree is one leaf.",
            "not_proven": "",
        }
        technical = "solver: not run (the ensemble predicts one class)"
    elif reason in ("optimal", "gap_limit"):
        within = "" if reason == "optimal" else f" by more than {_percent(gap)}"
        outcome = {
            "headline": "proved optimal" if reason == "optimal" else "proved near-optimal",
            "proved": True,
            "proven": f"No tree of this depth scores better on the MIRET objective{within} "
            "on the fit rows (fewer disagreements with the ensemble, fewer features).",
            "not_proven": "How the tree does on new rows: that is measured (the test "
            "fidelity), not proven.",
        }
    else:
        bounded = gap is not None and float(gap) < 1
        if reason == "behind_on_folds":
            proven = (
                "No MILP was solved: on held-out rows the MIRET procedure got fewer rows "
                "right than the tree returned, so solving could not change the result."
            )
        elif reason == "no_milp_budget":
            proven = "No MILP was solved: the fit gave its MILP phase no work (milp_share 0)."
        elif reason == "node_milps":
            statuses = (solve.get("node_statuses") or {}).values()
            decided = [status for status in statuses if status != "nothing_to_decide"]
            optimal = sum(status == "optimal" for status in decided)
            unsolved = "".join(
                f"; {count} {'was' if count == 1 else 'were'} {why} and kept the split the "
                "search found"
                for count, why in (
                    (
                        sum(status == "too_large" for status in decided),
                        "too large to solve within the budget",
                    ),
                    (
                        sum(status == "no_budget" for status in decided),
                        "left when the work budget was spent",
                    ),
                )
                if count
            )
            proven = (
                f"{optimal} of {len(decided)} splits are proven the best at their node given "
                f"the rest of the tree (each node solved as its own MILP{unsolved}); the "
                f"whole tree was not solved as one MILP{_not_solved(solve)}."
            )
        elif bounded:
            proven = (
                f"No tree of this depth can score below {_number(solve.get('bound'))} on "
                f"the MIRET objective (the solver's proven bound); this tree scores "
                f"{_number(solve.get('objective'))}."
            )
        else:
            proven = "No bound on the best possible tree was proven."
        gap_text = f" before closing the gap of {_percent(gap)} between the two" if bounded else ""
        outcome = {
            "headline": "best tree found, optimality not proven",
            "proved": False,
            "proven": proven,
            "not_proven": "Whether a better-scoring tree exists: the search stopped"
            f"{gap_text}. {measured}",
        }
    if reason not in ("trivial", "behind_on_folds", "no_milp_budget"):
        outcome["proven"] += _whole_milp(solve) + _milp_share(solve)
    if solve.get("time_limit_hit"):  # the only stop on seconds, not on counted work
        cut = "" if reason == "time_limit" else "; the time limit cut the warm start short"
        technical += f"{cut}, so a re-run may give another tree"
    if solve.get("fallback"):  # another candidate than the MIRET tree was returned
        chosen = CHOSEN.get(solve.get("chosen"), "another tree")
        outcome["proven"] = (
            f"The tree shown is the {chosen}, chosen on held-out rows ({solve['fallback']}). "
            f"About the MIRET tree it was compared with: {outcome['proven']}"
        )
        technical += f"; returned the {chosen}"
    return {**outcome, "technical": technical}


def gate_verdict(result: str, policy: str, alias: str | None = None) -> str:
    """A gate's result for what it was evaluated for, never the version's verdict.

    Examples
    --------
    >>> gate_verdict("FAIL", "strict v1a2b3c4d", "prod")
    'gate for @prod under strict v1a2b3c4d: FAIL'
    >>> gate_verdict("PASS", "lenient v5e6f7a8b")
    'what-if gate (no alias) under lenient v5e6f7a8b: PASS'
    """
    target = f"gate for @{alias}" if alias else "what-if gate (no alias)"
    return f"{target} under {policy}: {result}"


def describe_stop(solve: dict) -> str:
    """The outcome in one line: ``best tree found, optimality not proven (solver:
    stalled after 6.3 s, gap 91.0%)``."""
    outcome = solver_outcome(solve)
    return f"{outcome['headline']} ({outcome['technical']})"


_TERMS = (
    (
        "Fidelity",
        "fidelity",
        (
            "Share of rows on which the surrogate gives the same class "
            "as the ensemble (not the true label). Train: the rows the tree was fitted on; test: "
            "held-out rows."
        ),
    ),
    (
        "95% interval",
        "interval",
        (
            "Wilson interval of the test fidelity: with 95% "
            "confidence, the fidelity on data like the test rows lies in it. Fewer test rows "
            "give a wider interval."
        ),
    ),
    ("Accuracy", "fidelity", ("Share of rows on which a model's class equals the true label.")),
    (
        "Fidelity per class",
        "classes",
        (
            "Of the test rows the ensemble gives a class, the share the surrogate gives it "
            "too. A low value names a class the rules describe poorly, however high the "
            "overall fidelity."
        ),
    ),
    (
        "Confusion matrix",
        "confusion",
        (
            "Test rows counted by the ensemble's class (row) and the surrogate's "
            "(column): the diagonal holds the rows where they agree, any other cell the "
            "rows the surrogate gives another class than the ensemble."
        ),
    ),
    (
        "Proximity pairs U(m)",
        "fidelity",
        (
            "Pairs of rows that at least a share m of the "
            "ensemble's trees put in one leaf: rows the ensemble treats alike."
        ),
    ),
    (
        "Proximity agreement",
        "fidelity",
        ("Share of the pairs in U(m) that the surrogate also puts in one leaf."),
    ),
    (
        "Purity",
        "always",
        (
            "Share of a leaf's fit rows to which the ensemble gives the "
            "leaf's class: the leaf's agreement with the ensemble (one meaning in the CLI, the "
            "figure, this page and the model card)."
        ),
    ),
    ("yes / no", "always", f"The branches of a split: {CONVENTION_NOTE}."),
    (
        "Score S<node>",
        "scores",
        (
            "A split of more than three terms: the score is the sum "
            "of the terms in its table (weight times the feature's raw value); the contribution "
            "column gives each term's range over the training data, so the largest ranges "
            "matter most."
        ),
    ),
    ("Raw units", "always", "The ensemble's own input units (before any scaling)."),
    (
        "Depth D, effective depth",
        "always",
        (
            "D: the levels the MILP may use; effective "
            "depth: the splits on the longest path once splits that separate no training rows "
            "are removed."
        ),
    ),
    (
        "Feature uses",
        "always",
        ("Nonzero weights summed over all splits (a feature used in two splits counts twice)."),
    ),
    (
        "MIRET objective",
        "solver",
        (
            "What the solver minimises: weighted disagreements "
            "with the ensemble plus a penalty for each feature a split uses (weight alpha, "
            "lower for features the ensemble uses often)."
        ),
    ),
    (
        "Best bound",
        "solver",
        ("A value of the objective no tree of this depth can beat, proven by the solver."),
    ),
    (
        "MIP gap",
        "solver",
        (
            "(objective - bound) / objective: how much better than the "
            "tree shown the best tree could at most score. 0% means proved optimal; it says "
            "nothing about fidelity, which is measured."
        ),
    ),
    (
        "CART baseline",
        "baseline",
        (
            "A plain decision tree of the same depth fitted by "
            "scikit-learn on the ensemble's labels: what one gets without MIRET."
        ),
    ),
    (
        "Guarantee floor",
        "baseline",
        (
            "The CART baseline's cross-validated fidelity (each "
            "fit row predicted by a CART fitted without it). A MIRET tree clearly less "
            "faithful than this floor on the fit rows is replaced by the CART tree."
        ),
    ),
    (
        "alpha",
        "parameters",
        ("Weight of the sparsity penalty: higher alpha, fewer features, possibly lower fidelity."),
    ),
    (
        "h (gamma_percentile)",
        "parameters",
        (
            "A level may use the features whose VITE "
            "level frequency exceeds the h-th percentile of that level's frequencies, and "
            "always its most frequent feature (0: every feature the ensemble uses there)."
        ),
    ),
    (
        "m (proximity_threshold)",
        "parameters",
        ("The share of trees that defines U(m); above 1, no pair is kept together."),
    ),
    (
        "epsilon",
        "parameters",
        (
            "The small margin that models the strict inequality of a "
            "right branch in normalized units: a row goes right only when its value exceeds "
            "the threshold by at least epsilon."
        ),
    ),
    (
        "VITE level frequency",
        "vite",
        (
            "For each feature and depth level, the share of "
            "the ensemble's splits at that level that use the feature."
        ),
    ),
    (
        "VITE node frequency",
        "vite",
        (
            "For each position of the representative tree "
            "(node 0 the root, node t's children 2t+1 on the <= side and 2t+2), the share of "
            "the trees' splits there that use each feature."
        ),
    ),
    (
        "Threshold range [l, u]",
        "vite",
        (
            "The lowest and highest threshold the trees use "
            "for a feature at a position, in raw units."
        ),
    ),
    (
        "Allowed features per level",
        "baseline",
        (
            "The features the MILP may use at each "
            "level, chosen from the VITE level frequencies with h."
        ),
    ),
    (
        "Input validation",
        "always",
        (
            "Great Expectations checks that the data's columns, "
            "types and ranges are those the ensemble expects."
        ),
    ),
)


def glossary(shown: set) -> list[tuple[str, str]]:
    """(term, meaning) of every term in a section that is ``shown``.

    Parameters
    ----------
    shown : set of str
        Sections on the page: ``"fidelity"``, ``"interval"``, ``"scores"``,
        ``"solver"``, ``"baseline"``, ``"parameters"``, ``"vite"``, ``"classes"`` (the
        fidelity per class), ``"confusion"`` (the confusion matrix); terms of
        ``"always"`` are always listed.
    """
    return [(term, text) for term, section, text in _TERMS if section in shown | {"always"}]
