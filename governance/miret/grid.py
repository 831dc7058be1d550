"""The depth and alpha a fit chooses when the user gave none, on the fit's own folds.

``MiretSurrogate(alpha=None)`` (the default) tries every alpha of :data:`ALPHA_GRID`
and ``depth=None`` every depth from :data:`MIN_DEPTH` to the default depth
(:func:`governance.miret.problem.default_depth`). Every procedure (the MIRET tree of a
(depth, alpha), the optimal univariate and CART trees of a depth) is fitted on the
folds of :func:`governance.miret.selection.folds` as the candidates are (seeds and
heuristic on work budgets, no solver phase; a challenger alpha's heuristic on
:data:`CHALLENGER_SHARE` of the budget, which keeps the grid's cost near one more
fit), so the choice never depends on the machine's speed, and is scored on the rows it
did not see (:func:`choose`):

* depth: each depth's best procedure; a deeper depth replaces a shallower one only
  when its best is :func:`governance.miret.selection.clearly_better` (more held-out
  rows right by more than one standard error of the paired difference), so the
  smaller depth wins ties;
* alpha at that depth: the paper's 0.5 unless other alphas are clearly better (by more
  than one standard error, or as good with fewer features on average over the folds);
  then the best of those (more held-out rows right, then fewer features, grid order).

Only the chosen (depth, alpha) is refitted with its solver phase;
:func:`governance.miret.selection.choose` then picks among its three candidates as when
the values are given. Explicit values are never overridden: a given depth or alpha is
its grid's only value. :func:`record` is what the solve report keeps (``grid``).
"""

from __future__ import annotations

import numpy as np

from miret_governance.governance.miret.problem import PAPER_DEFAULTS, default_depth
from miret_governance.governance.miret.selection import CANDIDATES, clearly_better

ALPHA_GRID = (0.2, 0.5, 0.8)
"""Alphas tried when none is given (the paper's 0.5 is the incumbent)."""
CHALLENGER_SHARE = 1 / 3
"""Share of the heuristic's work budget a challenger alpha gets in the folds."""
MIN_DEPTH = 2
"""Shallowest depth tried when no depth is given."""
RULE = (
    "every candidate fitted on 2 of 3 folds and scored on the third; a deeper tree only "
    "when its best candidate gets more held-out rows right by more than one standard "
    "error; alpha 0.5 unless another alpha gets more held-out rows right by more than "
    "one standard error (or as many with fewer features)"
)


def depths(depth, ensemble) -> tuple[int, ...]:
    """Depths tried: ``(depth,)`` when given, else ``MIN_DEPTH`` (the default depth
    when it is smaller) to the default depth."""
    if depth is not None:
        return (int(depth),)
    top = default_depth(ensemble)
    return tuple(range(min(MIN_DEPTH, top), top + 1))


def alphas(alpha) -> tuple[float, ...]:
    """Alphas tried: ``(alpha,)`` when given, else :data:`ALPHA_GRID`."""
    return ALPHA_GRID if alpha is None else (float(alpha),)


def budget_share(alpha, alphas) -> float:
    """The heuristic's work share of ``alpha``'s fold fits: 1 for the incumbent (the
    paper's alpha, or the only one), :data:`CHALLENGER_SHARE` for the others."""
    return 1.0 if alpha == incumbent(alphas) else CHALLENGER_SHARE


def incumbent(alphas) -> float:
    """The alpha kept unless another is clearly better: 0.5 when tried, else the first."""
    return PAPER_DEFAULTS["alpha"] if PAPER_DEFAULTS["alpha"] in alphas else alphas[0]


def cross_validated(X, y, splits, settings, fit_candidates) -> tuple[dict, dict]:
    """Held-out rows right and fold features of every procedure.

    Parameters
    ----------
    X, y : ndarray
        The sample (normalized inputs) and its ensemble labels.
    splits : list of (train, test)
        :func:`governance.miret.selection.folds`, shared by every procedure.
    settings : sequence of (depth, alpha)
    fit_candidates : callable
        ``fit_candidates(train, depth, alpha) -> {name: tree}``: the candidates
        (:data:`governance.miret.selection.CANDIDATES`) fitted on the rows ``train``.

    Returns
    -------
    right : dict
        ``{(name, depth, alpha): bool array over the sample's rows}``, the univariate
        and CART trees (which do not depend on alpha) under ``alpha=None``; empty
        without folds.
    features : dict
        The same keys: mean number of features of the procedure's fold trees.
    """
    right, counts = {}, {}
    for depth, alpha in settings:
        for fold, (train, test) in enumerate(splits):
            for name, tree in fit_candidates(train, depth, alpha).items():
                key = (name, depth, alpha if name == "miret" else None)
                hits = right.setdefault(key, np.zeros(len(y), dtype=bool))
                hits[test] = tree.predict(X[test]) == y[test]
                counts.setdefault(key, {})[fold] = len(tree.used_features())
    features = {key: float(np.mean(list(by_fold.values()))) for key, by_fold in counts.items()}
    return right, features


def _best(keys, right, features):
    """The key with the most held-out rows right, then fewer features, then first."""
    return max(keys, key=lambda key: (right[key].sum(), -features[key], -keys.index(key)))


def choose(right, features, depths, alphas) -> tuple[int, float]:
    """The ``(depth, alpha)`` of the rule above (without folds: the largest depth, 0.5)."""
    default = incumbent(alphas)
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
        for key in (("miret", depth, alpha) for alpha in alphas)
        if key != kept and clearly_better(right, features, key, kept)
    ]
    return depth, (_best(better, right, features)[2] if better else default)


def at(right, depth, alpha) -> dict:
    """The three candidates' held-out rows of one setting, by candidate name."""
    keys = {"miret": ("miret", depth, alpha), "univariate": ("univariate", depth, None)}
    keys["cart"] = ("cart", depth, None)
    return {name: right[keys[name]] for name in CANDIDATES if keys[name] in right}


def record(right, features, depths, alphas, chosen) -> dict:
    """What the solve report keeps: the grid tried, each procedure's held-out fidelity
    and features, and the chosen depth and alpha (empty when both were given)."""
    if len(depths) == 1 and len(alphas) == 1:
        return {}
    rows = [
        {
            "candidate": name,
            "depth": int(depth),
            "alpha": alpha,
            "cv_fidelity": float(hits.mean()),
            "features": features[(name, depth, alpha)],
        }
        for (name, depth, alpha), hits in right.items()
    ]
    return {
        "depths": [int(d) for d in depths],
        "alphas": [float(a) for a in alphas],
        "depth": int(chosen[0]),
        "alpha": float(chosen[1]),
        "rule": RULE
        if right
        else "no held-out folds (choice off or sample too small): the default depth, alpha 0.5",
        "rows": rows,
    }
