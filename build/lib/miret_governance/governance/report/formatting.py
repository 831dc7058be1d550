"""Numbers, shares and text for people, as the reviewer page, the model card, the gate
report, the run's descriptions and the rules in words show them: one format for each, so
the same value reads the same everywhere (a missing value is an en dash). The heatmap
cells keep their own whole percentages (:func:`governance.report.figures.format_percent`)
and split thresholds their significant digits (:mod:`governance.miret.conditions`).
"""

from __future__ import annotations

import math
import re

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|])")


def markdown_text(value) -> str:
    """Text safe inside Markdown and its table cells.

    ``&``, ``<`` and ``>`` become HTML entities (no raw HTML such as ``<script>``),
    Markdown's markup characters and the table pipe are backslash-escaped, and line
    breaks become spaces (a row stays one row).
    """
    text = value if isinstance(value, str) else format_number(value)
    text = " ".join(text.split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def format_percent(value) -> str:
    """A share for people, ``95.3%`` (``–`` when missing)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "\u2013"
    return f"{100 * float(value):.1f}%"


def format_number(value, digits: int = 4) -> str:
    """Numbers for people: integers as integers, fractions with ``digits`` significant."""
    if value is None:
        return "\u2013"
    if isinstance(value, str):
        return value
    value = float(value)
    if math.isnan(value):
        return "\u2013"
    if math.isinf(value):
        return "\u221e" if value > 0 else "\u2212\u221e"
    if value.is_integer() and abs(value) < 1e12:
        return str(int(value))
    return f"{value:.{digits}g}"
