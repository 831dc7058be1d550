"""Rows generated around the fit sample and labelled by the ensemble (``generated_rows``).

The ensemble can label any point, so the fit need not learn from its training rows
alone. :func:`generated_rows` draws new rows next to the ensemble's split thresholds:

- **How many**: ``round(share * n)`` for a sample of ``n`` real rows, at most
  ``max_rows - n`` (the problem never grows past ``max_rows`` rows: where the sample is
  already ``max_rows`` real rows, none are generated).
- **Drawn how** (scheme ``"threshold"``, the estimator's): each generated row is a copy
  of a real sample row (drawn uniformly with replacement) in which one or two features
  (equally likely) cross the nearest ensemble threshold of that feature, up or down at
  random (the other way when no threshold or observed value lies that way), to the
  nearest value the sample holds on the other side. Features are drawn in proportion to
  how many of the ensemble's splits use them. So every generated value is one the data
  holds (whole numbers stay whole), and the row lies in a cell of the ensemble's
  partition next to a real row's, where the ensemble's label may change.
- Scheme ``"leaf"`` (TREPAN-style, measured beside it in
  ``examples/benchmarks/generated_rows.py``): a depth-``LEAF_DEPTH`` CART is fitted on
  the sample's ensemble labels; a generated row copies a random real row and replaces
  each movable feature by that feature's value in another row of the same CART leaf,
  drawn independently per feature (the leaf's empirical marginals).
- Movable features: the numeric ones the ensemble splits on; a native categorical
  column or a one-hot/ordinal column of a pipeline's encoding keeps the copied row's
  value, so a generated row is never an impossible category combination.
- **Reproducible**: one ``numpy.random.default_rng(random_state)`` draws everything.

Generated rows are labelled by the ensemble like every fit row and join the final fit's
problem only: held-out folds, fidelities, leaf counts and every figure a record carries
are on real rows.
"""

from __future__ import annotations

import numpy as np
from sklearn.tree import DecisionTreeClassifier

from miret_governance.governance.ensembles.trees import LEFT_IF_LESS

SCHEMES = ("threshold", "leaf")
SCHEME = "threshold"
"""The scheme the estimator uses (the benchmark sets it to compare them)."""
LEAF_DEPTH = 4
"""Depth of the CART whose leaves give the ``"leaf"`` scheme's marginals."""


def generated_count(share: float, n: int, max_rows: int | None) -> int:
    """Rows to generate for a sample of ``n`` real rows (module docstring)."""
    count = round(share * n)
    return count if max_rows is None else max(0, min(count, max_rows - n))


def movable_features(ensemble) -> np.ndarray:
    """Numeric features the ensemble splits on, each with its number of splits
    (shape ``(p,)``; 0: never moved)."""
    counts = np.zeros(ensemble.n_features, dtype=np.float64)
    for tree in ensemble.trees:
        numeric = tree.is_split & ~tree.is_categorical
        np.add.at(counts, tree.feature[numeric], 1.0)
    for start, width in ensemble.category_groups:
        counts[start : start + width] = 0.0
    if ensemble.encoding is not None:
        kinds = np.array([column.kind for column in ensemble.encoding.columns])
        counts[kinds != "numeric"] = 0.0
    return counts


def split_thresholds(ensemble, feature: int) -> np.ndarray:
    """Sorted distinct finite thresholds of the ensemble's numeric splits on ``feature``."""
    found = [
        tree.threshold[(tree.feature == feature) & ~tree.is_categorical] for tree in ensemble.trees
    ]
    values = np.concatenate(found) if found else np.empty(0)
    return np.unique(values[np.isfinite(values)])


def generated_rows(
    ensemble, X, share, max_rows=None, random_state=0, scheme="threshold"
) -> np.ndarray:
    """New rows (shape ``(count, p)``, :func:`generated_count`) around the complete
    rows ``X`` (the ensemble's inputs), drawn by ``scheme`` (module docstring)."""
    count = generated_count(share, X.shape[0], max_rows)
    weights = movable_features(ensemble)
    if count == 0 or not weights.any():
        return np.empty((0, X.shape[1]), dtype=X.dtype)
    rng = np.random.default_rng(random_state)
    source = rng.integers(0, X.shape[0], size=count)
    if scheme == "leaf":
        return _leaf_rows(ensemble, X, source, weights > 0, rng)
    return _threshold_rows(ensemble, X, source, weights, rng)


def _threshold_rows(ensemble, X, source, weights, rng) -> np.ndarray:
    """Copies of ``X[source]`` with one or two features across a nearby threshold."""
    count = source.size
    out = X[source].copy()
    moves = rng.integers(1, 3, size=count)  # one or two features per row
    single = np.count_nonzero(weights) == 1
    if single:
        chosen = np.full((count, 2), np.argmax(weights))
    else:
        p = weights / weights.sum()
        chosen = np.stack([rng.choice(weights.size, 2, replace=False, p=p) for _ in range(count)])
    up = rng.random((count, 2)) < 0.5
    strict = ensemble.left_if == LEFT_IF_LESS  # XGBoost: x < t goes left
    for slot in range(1 if single else 2):
        active = moves > slot
        for feature in np.unique(chosen[active, slot]):
            rows = np.flatnonzero(active & (chosen[:, slot] == feature))
            thresholds = split_thresholds(ensemble, feature)
            observed = np.unique(X[:, feature])
            out[rows, feature] = _crossed(
                out[rows, feature], up[rows, slot], thresholds, observed, strict
            )
    return out


def _crossed(values, up, thresholds, observed, strict) -> np.ndarray:
    """Each value moved across its nearest threshold (``up`` or down, else the other
    way) to the nearest ``observed`` value beyond it; unchanged when neither way has one."""
    side = "right" if strict else "left"  # the first threshold a value is left of
    above = np.searchsorted(thresholds, values, side=side)
    # up: cross thresholds[above]; the nearest observed value on its right side
    t_up = thresholds[np.minimum(above, thresholds.size - 1)]
    v_up_at = np.searchsorted(observed, t_up, side="left" if strict else "right")
    can_up = (above < thresholds.size) & (v_up_at < observed.size)
    # down: cross thresholds[above - 1]; the nearest observed value on its left side
    t_down = thresholds[np.maximum(above - 1, 0)]
    v_down_at = np.searchsorted(observed, t_down, side="left" if strict else "right") - 1
    can_down = (above > 0) & (v_down_at >= 0)
    go_up = np.where(up, can_up, can_up & ~can_down)
    go_down = ~go_up & can_down
    moved = values.copy()
    moved[go_up] = observed[v_up_at[go_up]]
    moved[go_down] = observed[v_down_at[go_down]]
    return moved


def _leaf_rows(ensemble, X, source, movable, rng) -> np.ndarray:
    """Copies of ``X[source]`` whose movable features come from random rows of the
    same leaf of a CART fitted on the ensemble's labels of ``X``."""
    cart = DecisionTreeClassifier(max_depth=LEAF_DEPTH, random_state=0)
    leaf = cart.fit(X, ensemble.predict(X)).apply(X)
    out = X[source].copy()
    order = np.argsort(leaf, kind="stable")
    first = np.searchsorted(leaf[order], leaf[source])
    size = np.searchsorted(leaf[order], leaf[source], side="right") - first
    for feature in np.flatnonzero(movable):
        donor = order[first + (rng.random(source.size) * size).astype(np.int64)]
        out[:, feature] = X[donor, feature]
    return out


def with_generated_rows(ensemble, inputs, labels, rows, share, max_rows, random_state):
    """``(inputs, labels, sample)``: the fit's inputs and ensemble labels with the
    :func:`generated_rows` of ``inputs[rows]`` appended (the same arrays when none are
    generated) and the sample's positions in them, the real ``rows`` first."""
    extra = generated_rows(ensemble, inputs[rows], share, max_rows, random_state, SCHEME)
    if not extra.shape[0]:
        return inputs, labels, rows
    added = np.arange(inputs.shape[0], inputs.shape[0] + extra.shape[0])
    inputs = np.concatenate([inputs, extra])
    labels = np.concatenate([labels, ensemble.predict(extra)])
    return inputs, labels, np.concatenate([rows, added])
