"""Which gates of a policy an explain with given settings cannot meet, said before any run.

A gate can be out of reach whatever the data: ``max_gap`` reads the whole MILP's proven
gap (``solver.gap``), which is 1 when the whole MILP does not run
(:mod:`governance.miret.fit.engine`): HiGHS is given it only up to
:data:`governance.miret.solvers.solve_result.GLOBAL_MILP_BINARIES` binaries, and ``solver="auto"``
takes Gurobi only when a licence for the model's size starts here
(:mod:`governance.miret.solvers.table`); the improved formulation has ``3 * 2^D - 2``
binary variables for each group of sample rows the ensemble treats as alike
(:mod:`governance.miret.milp.formulation`), so a size limit is a number of rows. And
``min_fidelity_lower_bound`` reads the lower end of a 95% Wilson interval, which is below
1 on any number of rows and below the threshold on too few
(:func:`governance.measures.metrics.wilson_interval`).

:func:`unattainable` returns one :class:`Unattainable` per such gate: ``govern policy
check`` exits 1 on them, and every command that reads a policy prints them as warnings
(``cli.common``) with explain's default settings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from miret_governance.governance.trust.gates import format_value
from miret_governance.governance.trust.policy import Policy


@dataclass(frozen=True)
class ExplainSettings:
    """The explain settings a policy's gates depend on.

    Attributes
    ----------
    solver : str
        ``--solver``: ``auto``, ``highs`` or ``gurobi``.
    depth : int or None
        ``--depth``: 1 to 8, 0 the ensemble's depth (at most 4), None chosen on folds.
    max_rows : int
        ``--max-rows``: the largest training sample the MILP works on.
    test_rows : int or None
        Rows of the test set, when known.
    """

    solver: str
    depth: int | None
    max_rows: int
    test_rows: int | None = None


@dataclass(frozen=True)
class Unattainable:
    """A gate the settings cannot meet.

    Attributes
    ----------
    gate : str
        The policy key, e.g. ``max_gap``.
    threshold : float
        The policy's threshold.
    why : str
        Why the settings cannot meet it, in plain words.
    fix : str
        What to change: the settings, or (the risk function) the policy.
    """

    gate: str
    threshold: object
    why: str
    fix: str

    @property
    def line(self) -> str:
        """``max_gap = 0.01 cannot be met: <why>; <fix>``: one line for people."""
        threshold = format_value(self.threshold)
        return f"{self.gate} = {threshold} cannot be met: {self.why}; {self.fix}"


def unattainable(
    policy: Policy, settings: ExplainSettings, licence: Callable[[], str] | None = None
) -> list[Unattainable]:
    """The gates of ``policy`` an explain with ``settings`` cannot meet, in the policy's
    order (empty when every gate can be met).

    ``licence()`` says which Gurobi licence explain finds here: ``"full"``,
    ``"size-limited"`` or ``"unavailable"`` (default
    :func:`governance.miret.solvers.gurobi.gurobi_license`, probed only for a ``max_gap``
    gate below 1)."""
    checks = {"max_gap": partial(_gap, licence=licence), "min_fidelity_lower_bound": _lower_bound}
    found = (
        checks[name](name, value, settings)
        for name, value in policy.gates.items()
        if name in checks
    )
    return [item for item in found if item is not None]


def binaries_per_row(depth: int) -> int:
    """Binary variables of the improved MIRET MILP per group of alike sample rows at
    ``depth`` (``z``: one per leaf, ``q``: two per branch node)."""
    return 3 * 2**depth - 2


def _gap(name: str, threshold: float, settings: ExplainSettings, licence: Callable[[], str] | None):
    # Lazily: the solver modules import numpy, which a policy without max_gap never needs.
    from miret_governance.governance.miret.solvers.gurobi import GUROBI_SIZE_LIMIT, gurobi_license
    from miret_governance.governance.miret.solvers.solve_result import GLOBAL_MILP_BINARIES

    if threshold >= 1:  # the gap is at most 1
        return None
    found = (licence or gurobi_license)() if settings.solver != "highs" else "unavailable"
    if found == "full":
        return None
    depth = settings.depth or 1  # the ensemble's or chosen on folds: 1 at least
    limited = found == "size-limited"
    capacity, unit = (
        (GUROBI_SIZE_LIMIT, "variables") if limited else (GLOBAL_MILP_BINARIES, "binaries")
    )
    rows = capacity // binaries_per_row(depth)
    if settings.max_rows <= rows:
        return None
    size = f"{capacity} {unit} (about {rows} training rows at depth {depth}, fewer when deeper)"
    more = f"--max-rows {settings.max_rows} allows more"
    if settings.solver == "gurobi":
        why = (
            f"without a full Gurobi licence here, --solver gurobi hands a whole MILP of more "
            f"than {size} to HiGHS, which typically stalls on it at gaps of 70-95%, and {more}"
        )
    else:
        who = "Gurobi's size-limited licence here takes" if limited else "HiGHS is given"
        why = f"solver.gap is 1 unless the whole MILP runs, and {who} it only up to {size}"
        why = f"{why}; {more}"
    fix = (
        "explain where a full Gurobi licence is installed (--solver auto or gurobi), or the "
        "risk function drops max_gap from the policy"
    )
    return Unattainable(name, threshold, why, fix)


def _lower_bound(name: str, threshold: float, settings: ExplainSettings):
    if threshold >= 1:
        why = "the lower end of a 95% interval is below 1 on any number of test rows"
        return Unattainable(name, threshold, why, "the risk function sets a threshold below 1")
    from miret_governance.governance.measures.metrics import wilson_interval

    rows, needed = settings.test_rows, rows_for_lower_bound(threshold)
    if rows is None or rows >= needed:
        return None
    best = format_value(wilson_interval(rows, rows)[0])
    return Unattainable(
        name,
        threshold,
        f"{rows} test rows prove at most {best} even when every row agrees",
        f"explain with at least {needed} test rows (--test-data), or the risk function sets "
        "a lower threshold",
    )


def rows_for_lower_bound(threshold: float) -> int:
    """Fewest test rows whose 95% Wilson interval, every row agreeing, starts at or
    above ``threshold`` (below 1): ``n / (n + z^2) >= threshold``."""
    from miret_governance.governance.measures.metrics import Z_95, wilson_interval

    rows = max(1, math.ceil(Z_95**2 * threshold / (1 - threshold)))
    while wilson_interval(rows, rows)[0] < threshold:  # rounding at the boundary
        rows += 1
    return rows
