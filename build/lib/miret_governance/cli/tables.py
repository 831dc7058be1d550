"""Rich tables of a surrogate's metrics and of MIRET next to its CART baseline."""

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
