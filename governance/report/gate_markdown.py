"""``gate_report.md``: a gate evaluation for people, legible at 870 px (MLflow's artifact
viewer).

The verdict is the first line; the table has three short columns (gate, result, the
value against its threshold); the reasons, which can be long, follow as a list (a failed
gate's with what its figure measures and what to do), then the digests that identify the
policy and the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass

from miret_governance.governance.trust.gates import format_value


@dataclass(frozen=True)
class ApprovalRow:
    """One reviewer's latest signed decision that a promotion counted."""

    reviewer: str
    decision: str
    time: str
    comment: str


@dataclass(frozen=True)
class ApprovalsSection:
    """The approvals a promotion to ``alias`` needed and what they said (``reason``:
    the promotion's words; ``rows``: the :class:`ApprovalRow` it counted)."""

    alias: str
    needed: int
    reason: str
    rows: tuple = ()


def verdict(evaluation) -> str:
    """``PASSED: all 4 gates pass`` or ``FAILED: 2 of 5 gates fail``."""
    failed = [r.name for r in evaluation.results if not r.passed]
    if evaluation.all_passed:
        return f"PASSED: all {len(evaluation.results)} gates pass"
    return f"FAILED: {len(failed)} of {len(evaluation.results)} gates fail"


def gate_markdown(
    evaluation,
    *,
    ensemble_uri: str = "",
    surrogate_uri: str = "",
    policy: str = "",
    source: str = "",
    time: str = "",
    approvals: ApprovalsSection | None = None,
) -> str:
    """The Markdown report of a :class:`governance.gates.Evaluation`.

    Parameters
    ----------
    evaluation : governance.gates.Evaluation
    ensemble_uri, surrogate_uri : str
        What was gated and whose evidence was read.
    policy, source : str
        The policy's label (``<name> v<digest8>``) and its file name.
    time : str
        When it was evaluated (ISO 8601).
    approvals : ApprovalsSection, optional
        A promotion's approvals, shown after the reasons.

    Returns
    -------
    str
        The verdict as the first line (a heading), the failed gates, the context, a
        three-column table, the reasons as a list (a failed gate's advice below it) and
        the digests.
    """
    # Lazily: the page's module imports matplotlib, which a gate never needs.
    from miret_governance.governance.report.formatting import markdown_text

    lines = [f"# Gates {verdict(evaluation)}", ""]
    failed = [r.name for r in evaluation.results if not r.passed]
    if failed:
        lines += [f"Failed: {', '.join(failed)}.", ""]
    context = []
    if ensemble_uri:
        context.append(f"Ensemble {markdown_text(ensemble_uri)}")
    if surrogate_uri:
        context.append(f"surrogate {markdown_text(surrogate_uri)} (its stored evidence)")
    if policy:
        named = f" ({markdown_text(source)})" if source else ""
        context.append(f"policy {markdown_text(policy)}{named}")
    if time:
        context.append(f"evaluated {markdown_text(time)}")
    if context:
        lines += ["; ".join(context) + ".", ""]
    lines += ["| Gate | Result | Value (threshold) |", "|---|---|---|"]
    for r in evaluation.results:
        result = "pass" if r.passed else "**FAIL**"
        value = f"{format_value(r.value)} (needs {r.comparison} {format_value(r.threshold)})"
        lines.append(f"| {r.name} | {result} | {markdown_text(value)} |")
    lines += ["", "## Reasons", ""]
    for r in evaluation.results:
        word = "pass" if r.passed else "FAIL"
        lines.append(f"- {word} **{r.name}** ({r.metric}): {markdown_text(r.reason)}")
        if r.advice:
            lines.append(f"  - {markdown_text(r.advice)}")
    if approvals is not None:
        lines += _approval_lines(approvals, markdown_text)
    lines += ["", f"Policy digest: `{evaluation.policy_digest}`"]
    if evaluation.evidence_digest:
        lines += ["", f"Evidence digest: `{evaluation.evidence_digest}`"]
    return "\n".join(lines) + "\n"


def _approval_lines(section: ApprovalsSection, text) -> list:
    lines = [
        "",
        f"## Approvals for @{text(section.alias)}",
        "",
        f"{section.needed} needed: {text(section.reason)}.",
    ]
    if section.rows:
        lines += ["", "| Reviewer | Decision | When | Comment |", "|---|---|---|---|"]
        lines += [
            f"| {text(r.reviewer)} | {text(r.decision)} | {text(r.time)} | {text(r.comment)} |"
            for r in section.rows
        ]
    return lines
