"""Explain's own defaults and the words of ``--depth``, defined once, light to import.

``govern --help`` (:mod:`cli.common`), :class:`flavors.explain.fit_params.FitParams` and
:class:`flavors.explain.request.ExplainRequest` read them from here; this module imports
nothing heavy (no scikit-learn, MLflow or solver), so the help stays fast. The
MLproject repeats them as literals (YAML cannot import), tested equal.

A surrogate depth is asked for in one of three ways: a whole number from 1 to
:data:`MAX_DEPTH`; :data:`ENSEMBLE_DEPTH` (the default), the ensemble's depth, at most 4;
or :data:`AUTO_DEPTH`, ``MiretSurrogate(depth=None)``'s depth chosen on held-out folds
(``None`` in Python, ``auto`` on the command line, in run parameters and the MLproject).
"""

from __future__ import annotations

import re

from miret_governance.governance.errors import InvalidInputError

MAX_DEPTH = 8
"""Deepest surrogate explain fits (2^8 leaves is beyond what a reviewer can read)."""
ENSEMBLE_DEPTH = 0
"""The depth explain fits unless given one: the ensemble's depth, at most 4
(:func:`governance.miret.problem.problem.default_depth`), resolved to that int by
:meth:`FitParams.for_ensemble` before the request is built, so it gives the same tree
as that explicit depth. The default of ``FitParams``, ``govern explain --depth`` and the
MLproject's ``depth``."""
AUTO_DEPTH = "auto"
"""The word for ``depth=None``: the estimator chooses the depth on held-out folds
(:func:`governance.miret.fit.grid.depths`). A request records it as the run parameter
``depth`` = ``auto``, and the depth chosen as :data:`DEPTH_CHOSEN`."""
DEPTH_CHOSEN = "depth_chosen"
"""Run parameter (and evidence ``parameters`` key) of the depth the fit chose for a
request of :data:`AUTO_DEPTH`."""
DEPTH_CHOICES = (
    f"a whole number from 1 to {MAX_DEPTH}, {ENSEMBLE_DEPTH} (the ensemble's depth, at "
    f"most 4) or {AUTO_DEPTH} (chosen on held-out folds)"
)
"""The accepted values of ``--depth``, for its help and its error message."""
MIN_TEST_ROWS = 20
"""Fewest test rows per class (as the ensemble predicts them) explain accepts by default:
20 rows that all agree give a 95% Wilson interval of 0.839-1, so a class the surrogate
gets wrong one time in six can still be told apart; fewer rows say almost nothing."""

SAMPLE_ROWS = 100_000
"""About how many rows of a Spark table explain fits on (``--sample-rows``): the rows
whose hash falls under a threshold (:mod:`governance.data.spark.sample`); the fidelity
is then counted on every other row of the table in Spark."""


def parse_depth(text: str) -> int | None:
    """``--depth``'s text as a depth: an int from 0 (:data:`ENSEMBLE_DEPTH`) to
    :data:`MAX_DEPTH`, or None for :data:`AUTO_DEPTH`.

    Raises
    ------
    InvalidInputError
        Anything else (``2.5``, ``-1``, ``9``, ``deep``), naming the accepted values.

    Examples
    --------
    >>> parse_depth("3"), parse_depth("auto"), parse_depth("0")
    (3, None, 0)
    """
    word = str(text).strip().lower()
    if word == AUTO_DEPTH:
        return None
    if re.fullmatch(r"[0-9]+", word) and int(word) <= MAX_DEPTH:
        return int(word)
    raise InvalidInputError(f"--depth must be {DEPTH_CHOICES}; got {text!r}")
