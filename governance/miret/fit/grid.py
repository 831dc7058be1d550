"""The depth, alpha and proximity threshold a fit chooses when the user gave none, on
the fit's own folds.

``MiretSurrogate(alpha=None, proximity_threshold=None)`` (the defaults) tries the
settings ``(alpha, m)`` of :func:`settings`: every alpha of ``alpha_grid`` (default
:data:`ALPHA_GRID`) at the paper's ``m`` 0.9, and the paper's alpha at ``m`` 1.0
(:data:`PROXIMITY_GRID`); and ``depth=None`` every depth from :data:`MIN_DEPTH` to the
default depth (:func:`governance.miret.problem.default_depth`). Every procedure (the MIRET tree of a
(depth, setting), the optimal univariate and CART trees of a depth) is fitted on the
folds of :func:`governance.miret.selection.folds` as the candidates are (seeds and
heuristic on work budgets, no solver phase; with several settings every setting's
heuristic on :data:`GRID_SHARE` of the budget, so they compete on equal budgets and the
grid costs little more than one fit), so the choice never depends on the machine's
speed, and is scored on the rows it did not see (:func:`choose`):

* depth: each depth's best procedure; a deeper depth replaces a shallower one only
  when its best is :func:`governance.miret.selection.clearly_better` (more held-out
  rows right by more than one standard error of the paired difference), so the
  smaller depth wins ties;
* setting at that depth: the paper's (alpha 0.5, m 0.9) unless other settings are
  clearly better (by more than one standard error, or as good with fewer features on
  average over the folds); then the best of those (more held-out rows right, then
  fewer features, grid order).

Only the chosen (depth, setting) is refitted with its solver phase;
:func:`governance.miret.selection.choose` then picks among its three candidates as when
the values are given. Explicit values are never overridden: a given depth, alpha or
``m`` is its grid's only value. :func:`record` is what the solve report keeps
(``grid``).
"""

from __future__ import annotations

import numpy as np

from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.miret.fit.selection import CANDIDATES, clearly_better
from miret_governance.governance.miret.problem.problem import PAPER_DEFAULTS, default_depth

ALPHA_GRID = (0.2, 0.5)
"""Alphas tried when none is given (``MiretSurrogate(alpha_grid=...)``'s default; the
paper's 0.5 is the incumbent). Not 0.8 (tried until evidence recorded ``alpha_grid``,
``LEGACY_PARAMS``): over five splits of the 19 examples, unseen and holdout datasets, RF
and XGBoost, dropping it raised mean test fidelity by 0.11 +- 0.05 points at depths 3
and 4 (0.02 +- 0.04 at depth 2), with 0.08 more features and 15% less CPU a fit."""
PROXIMITY_GRID = (0.9, 1.0)
"""Proximity thresholds ``m`` tried when none is given, both of the paper's grid (its
default 0.9 is the incumbent). On thousands of rows the pairs at 0.9 chain into
components that nearly every split would cut, so only nearly constant MIRET trees are
feasible (a 10-tree forest of ``x0 + x1 > 1`` on 2,000 rows: 0.77 held-out fidelity at
0.9, 0.93 at 1.0); pairs at 1.0 are rows the ensemble never separates."""
GRID_SHARE = 1 / 3
"""Share of the heuristic's work budget of each setting's fold fits when several are
tried. On the example datasets (RF and XGBoost, depth 2 to 4) it gave the same mean test
fidelity as the incumbent on the whole budget and challengers on a third (RF: equal at
every depth; XGBoost: +0.37 and -0.38 points at depths 3 and 4), in 3-22% less fit time."""
MIN_DEPTH = 2
"""Shallowest depth tried when no depth is given."""
RULE = (
    "every candidate fitted on 2 of 3 folds and scored on the third; a deeper tree only "
    "when its best candidate gets more held-out rows right by more than one standard "
    "error; alpha 0.5 and m 0.9 unless another setting gets more held-out rows right by "
    "more than one standard error (or as many with fewer features)"
)


def depths(depth, ensemble) -> tuple[int, ...]:
    """Depths tried: ``(depth,)`` when given, else ``MIN_DEPTH`` (the default depth
    when it is smaller) to the default depth."""
    if depth is not None:
        return (int(depth),)
    top = default_depth(ensemble)
    return tuple(range(min(MIN_DEPTH, top), top + 1))


def checked_alpha_grid(alpha_grid) -> tuple[float, ...]:
    """``alpha_grid`` as a tuple of floats; InvalidInputError unless it is one or more
    non-negative numbers (alpha's own range)."""
    try:
        alphas = tuple(float(a) for a in np.asarray(alpha_grid, dtype=float).reshape(-1))
    except (TypeError, ValueError):
        alphas = ()
    if not alphas or not all(np.isfinite(a) and a >= 0 for a in alphas):
        raise InvalidInputError(
            f"alpha_grid must be one or more non-negative numbers, got {alpha_grid!r}; for "
            f"example alpha_grid={ALPHA_GRID}, or give alpha itself"
        )
    return alphas


def settings(alpha, proximity_threshold, alpha_grid=ALPHA_GRID) -> tuple[tuple[float, float], ...]:
    """``(alpha, m)`` settings tried: every alpha (``(alpha,)`` when given, else
    ``alpha_grid``) at the first ``m`` (``(m,)`` when given, else
    :data:`PROXIMITY_GRID`), then the incumbent alpha at each other ``m``."""
    alphas = checked_alpha_grid(alpha_grid) if alpha is None else (float(alpha),)
    thresholds = PROXIMITY_GRID if proximity_threshold is None else (float(proximity_threshold),)
    first = [(a, thresholds[0]) for a in alphas]
    return tuple(first + [(_kept_alpha(alphas), m) for m in thresholds[1:]])


def _kept_alpha(alphas) -> float:
    """The paper's alpha when among ``alphas``, else the first."""
    return PAPER_DEFAULTS["alpha"] if PAPER_DEFAULTS["alpha"] in alphas else alphas[0]


def incumbent(tried) -> tuple[float, float]:
    """The setting kept unless another is clearly better: the paper's alpha (else the
    first alpha) at the first ``m`` of :func:`settings`."""
    alphas = [alpha for alpha, _ in tried]
    return tried[alphas.index(_kept_alpha(alphas))]


def budget_share(tried) -> float:
    """The heuristic's work share of the fold fits among the settings ``tried``:
    :data:`GRID_SHARE` for several, 1 for one (the folds then measure the final fit's
    procedure)."""
    return GRID_SHARE if len(tried) > 1 else 1.0


def cross_validated(X, y, splits, tried, fit_candidates) -> tuple[dict, dict]:
    """Held-out rows right and fold features of every procedure.

    Parameters
    ----------
    X, y : ndarray
        The sample (normalized inputs) and its ensemble labels.
    splits : list of (train, test)
        :func:`governance.miret.selection.folds`, shared by every procedure.
    tried : sequence of (depth, setting)
        ``setting`` an ``(alpha, m)`` of :func:`settings`.
    fit_candidates : callable
        ``fit_candidates(train, depth, setting) -> {name: tree}``: the candidates
        (:data:`governance.miret.selection.CANDIDATES`) fitted on the rows ``train``.

    Returns
    -------
    right : dict
        ``{(name, depth, setting): bool array over the sample's rows}``, the univariate
        and CART trees (which depend on neither alpha nor m) under ``setting=None``;
        empty without folds.
    features : dict
        The same keys: mean number of features of the procedure's fold trees.
    """
    right, counts = {}, {}
    for depth, setting in tried:
        for fold, (train, test) in enumerate(splits):
            for name, tree in fit_candidates(train, depth, setting).items():
                key = (name, depth, setting if name == "miret" else None)
                hits = right.setdefault(key, np.zeros(len(y), dtype=bool))
                hits[test] = tree.predict(X[test]) == y[test]
                counts.setdefault(key, {})[fold] = len(tree.used_features())
    features = {key: float(np.mean(list(by_fold.values()))) for key, by_fold in counts.items()}
    return right, features


def _best(keys, right, features):
    """The key with the most held-out rows right, then fewer features, then first."""
    return max(keys, key=lambda key: (right[key].sum(), -features[key], -keys.index(key)))


def choose(right, features, depths, tried) -> tuple[int, tuple[float, float]]:
    """The ``(depth, setting)`` of the rule above (without folds: the largest depth and
    the incumbent setting)."""
    default = incumbent(tried)
    if not right:
        return depths[-1], default

    def best_at(depth):
        return _best([key for key in right if key[1] == depth], right, features)

    depth = depths[0]
    for deeper in depths[1:]:
        if clearly_better(right, features, best_at(deeper), best_at(depth), sparser_counts=False):
            depth = deeper
    kept = ("miret", depth, default)
    better = [
        key
        for key in (("miret", depth, setting) for setting in tried)
        if key != kept and clearly_better(right, features, key, kept)
    ]
    return depth, (_best(better, right, features)[2] if better else default)


def at(right, depth, setting) -> dict:
    """The three candidates' held-out rows of one (depth, setting), by candidate name."""
    keys = {"miret": ("miret", depth, setting), "univariate": ("univariate", depth, None)}
    keys["cart"] = ("cart", depth, None)
    return {name: right[keys[name]] for name in CANDIDATES if keys[name] in right}


def record(right, features, depths, tried, chosen) -> dict:
    """What the solve report keeps: the grid tried, each procedure's held-out fidelity
    and features, and the chosen depth, alpha and ``m`` (empty when all were given)."""
    if len(depths) == 1 and len(tried) == 1:
        return {}
    rows = []
    for (name, depth, setting), hits in right.items():
        alpha, threshold = setting if setting is not None else (None, None)
        rows.append(
            {
                "candidate": name,
                "depth": int(depth),
                "alpha": alpha,
                "proximity_threshold": threshold,
                "cv_fidelity": float(hits.mean()),
                "features": features[(name, depth, setting)],
            }
        )
    return {
        "depths": [int(d) for d in depths],
        "alphas": sorted({float(alpha) for alpha, _ in tried}),
        "proximity_thresholds": sorted({float(m) for _, m in tried}),
        "depth": int(chosen[0]),
        "alpha": float(chosen[1][0]),
        "proximity_threshold": float(chosen[1][1]),
        "rule": RULE
        if right
        else "no held-out folds (choice off or sample too small): the default depth, "
        "alpha 0.5 and m 0.9 (or the values given)",
        "rows": rows,
    }
