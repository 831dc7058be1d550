"""The fidelity guarantee: a surrogate is never clearly less faithful than CART.

The MIRET objective trades misfit against the sparsity penalty, and the MILP works on a
sample with proximity constraints, so its tree can agree less with the ensemble than the
depth-D CART tree a user would fit instead. After the fit, :func:`guarantee` measures on
all the rows given to ``fit`` (in chunks) the fidelity ``s`` of the MIRET tree and ``c``
of the unrestricted CART baseline. The rule:

* ``s >= c - FIDELITY_TOLERANCE``: the MIRET tree stays (on Wisconsin, depth 3, it
  gives up 1.5 points of train fidelity for 2 features and is more faithful than CART
  on the test rows).
* otherwise a fallback replaces it if it is more faithful than the MIRET tree, has
  fidelity at least ``c - FIDELITY_TOLERANCE`` and a MIRET objective on the sample no
  higher than the MIRET tree's, with every used feature penalized (``alpha / f_{d,j}``,
  ``f_{d,j}`` floored at the smallest positive level frequency for features outside
  ``J_gamma(d)``): the most faithful MILP-feasible CART seed tree if one qualifies (it
  respects ``J_gamma(d)`` and the proximity components), else the exact CART tree
  (the baseline's partition and labels, fidelity ``c``; it may use features outside
  ``J_gamma(d)`` and part proximity components).

So the fallback never overrides the sparsity trade-off ``alpha`` asks for: a MIRET tree
that loses fidelity for a larger penalty saving stays (as in the toy instances with a
proved optimum). It overrides what the objective does not price: the proximity
components and ``J_gamma(d)`` on a sample, which on large data can leave only poor trees
feasible.
"""

from __future__ import annotations

import numpy as np

from governance.arrays import scaled
from governance.miret.cart import cart_predict

FIDELITY_TOLERANCE = 0.02
CHUNK_ROWS = 50_000


def fidelities(trees, baseline, labels, tree_inputs, scaler):
    """Fidelity of each tree and of the CART ``baseline`` on all rows, in chunks.

    ``labels`` are the ensemble's predictions on ``tree_inputs``, the ensemble's inputs;
    ``scaler`` maps them into the trees' normalized space (None: they already are
    normalized).
    """
    n = tree_inputs.shape[0]
    agree = np.zeros(len(trees) + 1)
    for start in range(0, n, CHUNK_ROWS):
        block = tree_inputs[start : start + CHUNK_ROWS]
        labels_block = labels[start : start + CHUNK_ROWS]
        unit = np.clip(block if scaler is None else scaled(scaler, block), 0.0, 1.0)
        agree[:-1] += [np.sum(tree.predict(unit) == labels_block) for tree in trees]
        agree[-1] += np.sum(cart_predict(baseline, unit) == labels_block)
    return agree[:-1] / n, float(agree[-1] / n)


def priced_objective(tree, problem) -> float:
    """MIRET objective of ``tree`` on the sample with every used feature penalized."""
    frequency = problem.frequency
    floor = frequency[frequency > 0].min(initial=1.0)
    price = problem.alpha / np.maximum(frequency, floor)
    used = tree.coef != 0
    misfit = problem.objective(np.zeros_like(tree.coef), tree.apply(problem.X))
    return misfit + float((price[problem.node_level] * used).sum())


def guarantee(tree, fallbacks, baseline, labels, tree_inputs, scaler, problem):
    """``(tree, train_fidelity, cart_train_fidelity, note)`` after the rule above.

    ``fallbacks``: the feasible CART seed trees, then the exact CART tree (as returned
    by :func:`governance.miret.engine.fit_problem`); ``labels``: the ensemble's
    predictions on ``tree_inputs``; ``problem``: the fit's
    :class:`~governance.miret.problem.MiretProblem`; ``note`` is empty when the MIRET
    tree stays.
    """
    scores, cart = fidelities([tree, *fallbacks], baseline, labels, tree_inputs, scaler)
    own, floor = float(scores[0]), cart - FIDELITY_TOLERANCE
    if own >= floor or not fallbacks:
        return tree, own, cart, ""
    limit = priced_objective(tree, problem) + 1e-9
    qualified = [
        k
        for k, fallback in enumerate(fallbacks)
        if scores[k + 1] >= floor
        and scores[k + 1] > own
        and priced_objective(fallback, problem) <= limit
    ]
    if not qualified:
        return tree, own, cart, ""
    k = max(qualified, key=lambda k: (k < len(fallbacks) - 1, scores[k + 1], -k))
    kind = "exact CART tree" if k == len(fallbacks) - 1 else "MILP-feasible CART seed tree"
    note = (
        f"train fidelity {own:.4f} of the MIRET tree was more than {FIDELITY_TOLERANCE} "
        f"below CART's {cart:.4f}; returned the {kind} (train fidelity "
        f"{scores[k + 1]:.4f})"
    )
    return fallbacks[k], float(scores[k + 1]), cart, note
