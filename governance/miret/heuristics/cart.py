"""The depth-D CART baseline and its conversion into a MIRET-feasible seed tree.

The baseline is what a user would fit instead: scikit-learn's DecisionTreeClassifier of
depth ``D`` on the ensemble's labels (normalized inputs). Its univariate split
``x_j <= theta`` becomes the hyperplane ``a_t . x + b_t <= 0`` with ``a_t = +-e_j``
placed in the middle of the data gap (``b_t >= 0`` above the last level, so the high
side may go left; the CART children are then swapped). Two classes keep the paper's
fixed leaf classes: a CART leaf above level ``D`` becomes dummy splits (``a_t = 0``;
``b_t = 0`` routes left towards an odd, class-0 leaf, ``b_t = 1`` right towards an even,
class-1 leaf), and a last-level split sends its class-0 child left. With more than two
classes the leaves take the CART's classes: a CART leaf above level ``D`` is padded to
depth ``D`` by dummy splits that route left (``b_t = 0``), every leaf below it getting
its class, and the seed is then relabelled to the weighted majority of its leaves
(:meth:`governance.miret.search_state.SearchState.relabel`). A split that the MILP forbids
(feature outside ``J_gamma(d)``, gap below epsilon, or a proximity component cut in
two) is replaced by the heuristic's greedy subtree, so every seed is feasible and equals
the CART tree's partition wherever the CART tree is feasible itself.
:func:`exact_tree` writes the CART tree itself as a surrogate tree, feasible or not (the
estimator's fidelity guarantee falls back to it).
"""

from __future__ import annotations

import numpy as np
from sklearn.tree import DecisionTreeClassifier

from miret_governance.governance.miret.heuristics.kernels import components_broken
from miret_governance.governance.miret.problem.layout import leaves_below, node_level
from miret_governance.governance.miret.tree.tree import SurrogateTree


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


def _dummy_subtree(search, t, c, out, leaves):
    """Route every sample reaching ``t`` to a leaf of class ``c`` by dummy splits: the
    leftmost (class 0) or rightmost (class 1) leaf below ``t`` with the fixed two-class
    leaves, else the leftmost, every leaf below ``t`` taking class ``c``."""
    right = search.fixed_classes and c == 1
    b = 1.0 if right else 0.0
    node = t
    while node < search.n_branch:
        out[node] = (np.zeros(search.p), b)
        node = 2 * node + 1 + int(right)
    if not search.fixed_classes:
        leaves[list(leaves_below(t, search.n_branch))] = c


def _place(search, arrays, k, t, idx, out, leaves):
    """Write the MIRET nodes of CART node ``k`` placed at node ``t`` into ``out`` (and,
    with more than two classes, the classes of the leaves into ``leaves``)."""
    if t >= search.n_branch:
        if not search.fixed_classes:
            leaves[t - search.n_branch] = search.label_index[arrays["label"][k]]
        return
    if arrays["left"][k] < 0 or idx.size == 0:
        _dummy_subtree(search, t, search.label_index[arrays["label"][k]], out, leaves)
        return
    j = arrays["feature"][k]
    level = int(search.level[t])
    column = search.X32[idx, j]
    low = column <= arrays["threshold"][k]
    children = (arrays["left"][k], arrays["right"][k])
    if low.all() or not low.any():  # one side empty: a dummy split, then that child
        out[t] = (np.zeros(search.p), 0.0)
        child = children[0] if low.all() else children[1]
        _place(search, arrays, child, 2 * t + 1, idx, out, leaves)
        if not search.fixed_classes:  # the empty right side: the class of the left one
            c = search.label_index[arrays["label"][child]]
            leaves[list(leaves_below(2 * t + 2, search.n_branch))] = c
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
        if level == search.depth - 1 and search.fixed_classes:  # class 0 must go left
            labels = [search.label_index[arrays["label"][c]] for c in children]
            if labels[0] == labels[1]:
                _dummy_subtree(search, t, labels[0], out, leaves)
                return
            options = options[:1] if labels[0] == 0 else options[1:]
        for direction, s_left, s_right, left_mask, order in options:
            found = search.realize(direction, s_left, s_right, level, idx, left_mask)
            if found is not None:
                low, children = left_mask, order
                break
    if found is None:
        search.grow(t, idx, False, out)
        return
    out[t] = found
    _place(search, arrays, children[0], 2 * t + 1, idx[low], out, leaves)
    _place(search, arrays, children[1], 2 * t + 2, idx[~low], out, leaves)


def seed_tree(search, arrays, problem) -> SurrogateTree:
    """The MIRET-feasible tree of a CART (see the module docstring)."""
    search.X32 = search.X.astype(np.float32)
    search.label_index = {c: i for i, c in enumerate(problem.classes)}
    search.fixed_classes = problem.n_classes == 2
    out, leaves = {}, search.leaf_class.copy()
    _place(search, arrays, 0, 0, np.arange(search.n), out, leaves)
    search.set_tree(*search.tree_arrays(out), leaves)
    search.ensure_split()
    search.relabel()
    return SurrogateTree(
        search.coef,
        search.intercept,
        problem.depth,
        problem.feature_names,
        problem.classes,
        leaf_class=search.leaf_class,
    )


def exact_tree(arrays, problem) -> SurrogateTree:
    """The CART tree of ``arrays`` as a surrogate tree with the same labels everywhere.

    ``x_j <= theta`` becomes ``a_t = e_j, b_t = -theta`` (or ``-e_j, theta`` with the
    children swapped where the fixed leaf classes need it); CART leaves above level
    ``D`` become dummy splits. The tree ignores ``J_gamma(d)``, the epsilon gap and the
    proximity components, so it need not be MILP-feasible. With more than two classes
    the leaves take the CART's classes (a CART leaf above level ``D`` routes left, every
    leaf below it taking its class).
    """
    n_branch, p = problem.n_branch, problem.n_features
    coef, intercept = np.zeros((n_branch, p)), np.zeros(n_branch)
    index = {c: i for i, c in enumerate(problem.classes)}
    if problem.n_classes > 2:
        leaf_class = np.zeros(2**problem.depth, dtype=np.int64)

        def place_free(k, t):
            if t >= n_branch or arrays["left"][k] < 0:
                leaf_class[list(leaves_below(t, n_branch))] = index[arrays["label"][k]]
                return
            coef[t, arrays["feature"][k]], intercept[t] = 1.0, -arrays["threshold"][k]
            place_free(arrays["left"][k], 2 * t + 1)
            place_free(arrays["right"][k], 2 * t + 2)

        place_free(0, 0)
        return SurrogateTree(
            coef, intercept, problem.depth, problem.feature_names, problem.classes, None, leaf_class
        )
    sign = {problem.classes[0]: -1, problem.classes[1]: 1}
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
