"""What a reviewer reads first (:func:`headline_lines`), and rich tables of a surrogate's
metrics and of MIRET next to its CART baseline (technical details)."""

from __future__ import annotations

import math

from rich.markup import escape
from rich.table import Table

BASELINE_ROWS = (
    ("test fidelity", "test_fidelity", "baseline_cart_test_fidelity"),
    ("train fidelity", "train_fidelity", "baseline_cart_train_fidelity"),
    ("features used", "n_features_used", "baseline_cart_n_features"),
)


def number(value) -> str:
    """A metric value as shown: ``-`` for NaN, integers without decimals, else 4 digits."""
    value = float(value)
    if math.isnan(value):
        return "-"
    if value.is_integer():
        return str(int(value))
    return f"{value:.4g}"


def _percent(value) -> str:
    return "-" if value is None or math.isnan(float(value)) else f"{100 * float(value):.1f}%"


def headline_lines(metrics: dict, validation: str | None) -> list[str]:
    """Test fidelity with its 95% interval next to the plain tree (CART), features used
    and the input validation, one line each.

    Examples
    --------
    >>> headline_lines({"test_fidelity": 0.95, "baseline_cart_test_fidelity": 0.9,
    ...                 "n_features_used": 3.0, "baseline_cart_n_features": 4.0}, "passed")
    ['fidelity on test rows: 95.0%; plain tree (CART) 90.0%', 'features used: 3; plain tree (CART) 4', 'input validation: passed']
    """
    from miret_governance.governance.measures.metrics import fidelity_with_interval

    cart = metrics.get("baseline_cart_test_fidelity")
    lines = []
    if fidelity_with_interval(metrics):
        lines.append(
            f"fidelity on test rows: {fidelity_with_interval(metrics)}; plain tree (CART) "
            f"{_percent(cart)}"
        )
    if "n_features_used" in metrics:
        cart_features = metrics.get("baseline_cart_n_features")
        lines.append(
            f"features used: {number(metrics['n_features_used'])}; plain tree (CART) "
            f"{'-' if cart_features is None else number(cart_features)}"
        )
    if validation:
        lines.append(f"input validation: {validation}")
    return lines


def metrics_table(metrics: dict, title: str = "Metrics") -> Table:
    """A rich table of metrics: the headline ones, the details, the rest (``solver.*``
    last), in :mod:`governance.metrics`' order."""
    from miret_governance.governance.measures.metrics import DETAIL_METRICS, HEADLINE_METRICS

    order = HEADLINE_METRICS + DETAIL_METRICS
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rest = sorted(set(metrics) - set(order), key=lambda k: (k.startswith("solver."), k))
    keys = [k for k in order if k in metrics] + rest
    for key in keys:
        table.add_row(escape(key), number(metrics[key]))
    return table


def baseline_table(metrics: dict) -> Table | None:
    """MIRET next to the depth-D CART tree fitted on the same ensemble labels."""
    rows = [row for row in BASELINE_ROWS if row[1] in metrics and row[2] in metrics]
    if not rows:
        return None
    table = Table(
        title="MIRET vs the CART baseline (same labels, same depth)", title_justify="left"
    )
    for name, justify in (("", "left"), ("MIRET", "right"), ("CART", "right")):
        table.add_column(name, justify=justify)
    for label, ours, cart in rows:
        table.add_row(label, number(metrics[ours]), number(metrics[cart]))
    return table
