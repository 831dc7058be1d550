"""The depth-D CART baseline and its conversion into a MIRET-feasible seed tree.

The baseline is what a user would fit instead: scikit-learn's DecisionTreeClassifier of
depth ``D`` on the ensemble's labels (normalized inputs). Its univariate split
``x_j <= theta`` becomes the hyperplane ``a_t . x + b_t <= 0`` with ``a_t = +-e_j``
placed in the middle of the data gap (``b_t >= 0`` above the last level, so the high
side may go left; the CART children are then swapped). A CART leaf above level ``D``
becomes dummy splits (``a_t = 0``; ``b_t = 0`` routes left towards an odd, class ``-1``
leaf, ``b_t = 1`` right towards an even, ``+1`` leaf). A split that the MILP forbids
(feature outside ``J_gamma(d)``, gap below epsilon, or a proximity component cut in
two) is replaced by the heuristic's greedy subtree, so every seed is feasible and equals
the CART tree's partition wherever the CART tree is feasible itself.
:func:`exact_tree` writes the CART tree itself as a surrogate tree, feasible or not (the
estimator's fidelity guarantee falls back to it).
"""

from __future__ import annotations

import numpy as np
from sklearn.tree import DecisionTreeClassifier

from miret_governance.governance.miret.feasibility import components_broken
from miret_governance.governance.miret.layout import node_level
from miret_governance.governance.miret.tree import SurrogateTree


def fit_cart(X, y, depth, features=None, random_state=0):
    """Depth-``depth`` CART on ``y`` using only the columns ``features`` (all if None).

    Returns the fitted DecisionTreeClassifier and the column indices it saw.
    """
    columns = np.arange(X.shape[1]) if features is None else np.asarray(features)
    tree = DecisionTreeClassifier(max_depth=depth, random_state=random_state)
    return tree.fit(X[:, columns], y), columns


def cart_arrays(cart, columns) -> dict:
    """Plain arrays of a fitted CART (feature indices into the full X, -1 at leaves)."""
    inner = cart.tree_
    feature = np.where(inner.children_left >= 0, columns[np.maximum(inner.feature, 0)], -1)
    return {
        "feature": feature.tolist(),
        "threshold": inner.threshold.tolist(),
        "left": inner.children_left.tolist(),
        "right": inner.children_right.tolist(),
        "label": cart.classes_[inner.value[:, 0].argmax(axis=1)].tolist(),
    }


def cart_predict(arrays: dict, X) -> np.ndarray:
    """Labels of :func:`cart_arrays` on ``X`` (scikit-learn's float32 routing)."""
    X = np.asarray(X, dtype=np.float32)
    feature = np.asarray(arrays["feature"])
    threshold = np.asarray(arrays["threshold"])
    left, right = np.asarray(arrays["left"]), np.asarray(arrays["right"])
    node = np.zeros(X.shape[0], dtype=np.int64)
    rows = np.arange(X.shape[0])
    while True:
        inner = left[node] >= 0
        if not inner.any():
            return np.asarray(arrays["label"])[node]
        j = np.maximum(feature[node], 0)
        go_left = X[rows, j] <= threshold[node]
        node = np.where(inner, np.where(go_left, left[node], right[node]), node)


def _dummy_subtree(search, t, sign, out):
    """Route every sample reaching ``t`` to a leaf of class ``sign`` by dummy splits."""
    b = 1.0 if sign > 0 else 0.0
    node = t
    while node < search.n_branch:
        out[node] = (np.zeros(search.p), b)
        node = 2 * node + 1 + int(b > 0)


def _place(search, arrays, k, t, idx, out):
    """Write the MIRET nodes of CART node ``k`` placed at node ``t`` into ``out``."""
    if t >= search.n_branch:
        return
    if arrays["left"][k] < 0 or idx.size == 0:
        _dummy_subtree(search, t, search.label_sign[arrays["label"][k]], out)
        return
    j = arrays["feature"][k]
    level = int(search.level[t])
    column = search.X32[idx, j]
    low = column <= arrays["threshold"][k]
    children = (arrays["left"][k], arrays["right"][k])
    if low.all() or not low.any():  # one side empty: a dummy split, then that child
        out[t] = (np.zeros(search.p), 0.0)
        _place(search, arrays, children[0] if low.all() else children[1], 2 * t + 1, idx, out)
        return
    groups = np.unique(search.comp[idx], return_inverse=True)[1]
    cut = components_broken(groups, low.astype(np.int64), np.zeros(idx.size, dtype=bool))
    found = None
    if search.allowed[level, j] and not cut.any():
        x = search.X[idx, j]
        lo, hi = x[low].max(), x[~low].min()
        unit = np.zeros(search.p)
        unit[j] = 1.0
        options = [(unit, lo, hi, low, children), (-unit, -hi, -lo, ~low, children[::-1])]
        if level == search.depth - 1:  # leaf classes are fixed: class -1 must go left
            signs = [search.label_sign[arrays["label"][c]] for c in children]
            if signs[0] == signs[1]:
                _dummy_subtree(search, t, signs[0], out)
                return
            options = options[:1] if signs[0] < 0 else options[1:]
        for direction, s_left, s_right, left_mask, order in options:
            found = search.realize(direction, s_left, s_right, level, idx, left_mask)
            if found is not None:
                low, children = left_mask, order
                break
    if found is None:
        search.grow(t, idx, False, out)
        return
    out[t] = found
    _place(search, arrays, children[0], 2 * t + 1, idx[low], out)
    _place(search, arrays, children[1], 2 * t + 2, idx[~low], out)


def seed_tree(search, arrays, problem) -> SurrogateTree:
    """The MIRET-feasible tree of a CART (see the module docstring)."""
    search.X32 = search.X.astype(np.float32)
    search.label_sign = {problem.classes[0]: -1, problem.classes[1]: 1}
    out = {}
    _place(search, arrays, 0, 0, np.arange(search.n), out)
    search.set_tree(*search.tree_arrays(out))
    search.ensure_split()
    return SurrogateTree(
        search.coef, search.intercept, problem.depth, problem.feature_names, problem.classes
    )


def exact_tree(arrays, problem) -> SurrogateTree:
    """The CART tree of ``arrays`` as a surrogate tree with the same labels everywhere.

    ``x_j <= theta`` becomes ``a_t = e_j, b_t = -theta`` (or ``-e_j, theta`` with the
    children swapped where the fixed leaf classes need it); CART leaves above level
    ``D`` become dummy splits. The tree ignores ``J_gamma(d)``, the epsilon gap and the
    proximity components, so it need not be MILP-feasible.
    """
    n_branch, p = problem.n_branch, problem.n_features
    sign = {problem.classes[0]: -1, problem.classes[1]: 1}
    coef, intercept = np.zeros((n_branch, p)), np.zeros(n_branch)
    level = node_level(np.arange(n_branch))

    def leaf_sign_of(k):
        """The class sign of CART node ``k`` if its whole subtree predicts one class."""
        if arrays["left"][k] < 0:
            return sign[arrays["label"][k]]
        signs = {leaf_sign_of(arrays["left"][k]), leaf_sign_of(arrays["right"][k])}
        return signs.pop() if len(signs) == 1 and None not in signs else None

    def place(k, t):
        if t >= n_branch:
            return
        constant = leaf_sign_of(k)
        if constant is not None:  # dummy splits down to a leaf of that class
            while t < n_branch:
                intercept[t] = 1.0 if constant > 0 else 0.0
                t = 2 * t + 1 + int(constant > 0)
            return
        j, theta = arrays["feature"][k], arrays["threshold"][k]
        low, high = arrays["left"][k], arrays["right"][k]
        if level[t] == problem.depth - 1 and leaf_sign_of(low) > 0:
            coef[t, j], intercept[t] = -1.0, theta  # the high side goes left (class -1)
            low, high = high, low
        else:
            coef[t, j], intercept[t] = 1.0, -theta
        place(low, 2 * t + 1)
        place(high, 2 * t + 2)

    place(0, 0)
    return SurrogateTree(coef, intercept, problem.depth, problem.feature_names, problem.classes)
