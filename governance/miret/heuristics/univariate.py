"""The optimal univariate tree of depth D on guessed thresholds: a seed and a candidate.

What a user gets from GOSDT or STreeD with threshold guessing: the ensemble's labels
pick candidate thresholds (:func:`guessed_thresholds`, the stumps of a 40-round
gradient-boosted reference and GOSDT's column elimination, its documented guessing),
and among the trees of depth
at most D that split on ``x_j <= theta`` for those thresholds, :func:`optimal_tree` finds
one with the fewest misfit rows (ties: fewest splits), for any number ``k >= 2`` of
classes: a leaf's misfit is its rows minus its largest class count (its class is that
class, the lowest index on a tie). The tree has the plain-array form
of :func:`governance.miret.cart.cart_arrays`, so it seeds the heuristic
(:func:`governance.miret.cart.seed_tree`) and stands as a candidate
(:func:`governance.miret.cart.exact_tree`).

Own dynamic program rather than a dependency: pystreed needs scikit-survival and its
solvers, gosdt's ``predict`` no longer runs with the scikit-learn the product pins, and
for D <= 4 on at most ``GUESS_ROUNDS`` thresholds this one is exact and fast: a depth-2
subtree is solved for every pair of root and child threshold at once from products of
the 0/1 matrix (the joint counts of each class), and deeper trees recurse on
the root's two sides with a memo keyed by the conditions leading to a subset
(conditions commute, so ``f`` then ``g`` and ``g`` then ``f`` share one entry).
``tests/governance/miret/heuristics/test_univariate.py`` checks it against enumeration of every
tree.

The guessing's references are boosted by :func:`boosted_stumps`, the steps of
``GradientBoostingClassifier(n_estimators=40, max_depth=1).fit`` written out with
scikit-learn's own tree builder, loss and initial prediction (private API:
``sklearn.tree._tree``, ``_splitter``, ``_criterion``, ``sklearn._loss`` and
``sklearn.ensemble._gb._init_raw_predictions``, pinned by ``constraints.txt``): a fit
guesses thresholds on each held-out fold and on its sample, each guessing boosts one
reference per eliminated split, and the estimator's input and sample-weight checks of
every stump (one regression tree per stage and class) took two thirds of the guessing's
time (profiled on six holdout and unseen fits, D 2-4: 4.7 of 13.6 s in the guessing).
A unit test checks that the stumps, feature importances and predictions are the
estimator's, bit for bit, so that an upgrade that changes them fails there.
"""

from __future__ import annotations

import numpy as np
from sklearn._loss.loss import HalfBinomialLoss, HalfMultinomialLoss
from sklearn.dummy import DummyClassifier
from sklearn.ensemble._gb import _init_raw_predictions
from sklearn.tree._criterion import MSE
from sklearn.tree._splitter import BestSplitter
from sklearn.tree._tree import TREE_LEAF, DepthFirstTreeBuilder, Tree
from sklearn.utils import check_random_state

GUESS_ROUNDS, GUESS_RATE = 40, 0.1  # GOSDT's guessing reference: 40 stumps, rate 0.1
SPLIT_COST = 1  # cost of a split; misfits weigh MISFIT_COST, so errors always dominate
MISFIT_COST = 1 << 8  # > number of splits of any tree of depth <= 7


def guessed_thresholds(X, labels, random_state=0) -> tuple[np.ndarray, np.ndarray]:
    """``(features, thresholds)`` of GOSDT's threshold guessing: the stumps of a
    gradient-boosted reference fitted on ``labels`` give candidate splits (unique, sorted),
    then column elimination drops the least important split while a reference refitted
    on the remaining splits scores no worse on ``labels`` (the last one dropped comes
    back), as ``gosdt.ThresholdGuessBinarizer`` does. ``X`` must be finite (the
    problem's complete rows); the references are :class:`BoostedStumps`."""
    if np.unique(labels).size < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    stumps = BoostedStumps(X, labels, random_state)
    pairs = sorted(
        {
            (int(tree.feature[0]), float(tree.threshold[0]))
            for tree in stumps.trees
            if tree.node_count > 1
        }
    )
    if not pairs:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    features = np.array([j for j, _ in pairs], dtype=np.int64)
    thresholds = np.array([t for _, t in pairs])
    keep = list(range(len(pairs)))
    Z = (X[:, features] <= thresholds).astype(np.float64)
    model = BoostedStumps(Z, labels, random_state)
    base, score, last = model.score(), np.inf, None
    for _ in range(len(pairs) - 1):
        if score < base:
            break
        weakest = int(np.argmin(model.feature_importances()))
        last = keep.pop(weakest)
        Z = np.delete(Z, weakest, axis=1)
        model = BoostedStumps(Z, labels, random_state)
        score = model.score()
    if last is not None:
        keep.append(last)
    keep.sort()
    return features[keep], thresholds[keep]


class BoostedStumps:
    """``GradientBoostingClassifier(n_estimators=GUESS_ROUNDS, max_depth=1,
    random_state=random_state).fit(X, labels)`` on finite ``X`` with labels of at least
    two classes: its regression stumps (``trees``, ``sklearn.tree._tree.Tree``, stage by
    stage and class by class) and its raw predictions on ``X`` (``raw``), bit for bit.

    Each stage is the estimator's ``_fit_stage``: the negative gradient of the log loss,
    one stump per class (``n_classes > 2``, else one) built by the depth-first builder on
    squared error with the features in the order drawn from the one random state, each
    leaf then set to its Newton step (``_update_terminal_regions``; with unit sample
    weights ``np.average`` is the leaf's sum over its count, the same sums) and the raw
    predictions moved by ``GUESS_RATE`` times it."""

    def __init__(self, X, labels, random_state):
        X32 = np.asarray(X, dtype=np.float32)  # the estimator's input dtype
        n, p = X32.shape
        self.n_features = p
        self.classes, encoded = np.unique(labels, return_inverse=True)
        self.y = encoded.astype(np.float64)
        k = self.classes.size
        weight = np.ones(n)
        if k == 2:
            loss = HalfBinomialLoss(sample_weight=weight)
        else:
            loss = HalfMultinomialLoss(sample_weight=weight, n_classes=k)
        prior = DummyClassifier(strategy="prior").fit(X32, self.y)
        self.raw = _init_raw_predictions(X32, prior, loss, True)
        rng = check_random_state(random_state)
        self.trees = []
        for _ in range(GUESS_ROUNDS):
            gradient = -loss.gradient(y_true=self.y, raw_prediction=self.raw, sample_weight=None)
            gradient = gradient.reshape((-1, 1)) if gradient.ndim == 1 else gradient
            for c in range(1 if k == 2 else k):
                target = self.y if k == 2 else np.array(self.y == c, dtype=np.float64)
                tree = Tree(p, np.ones(1, dtype=np.intp), 1)
                splitter = BestSplitter(MSE(1, n), p, 1, 0.0, rng, None)
                builder = DepthFirstTreeBuilder(splitter, 2, 1, 0.0, 1, 0.0)
                negative = np.ascontiguousarray(gradient[:, c])
                builder.build(tree, X32, negative.reshape((-1, 1)), weight, None)
                regions = tree.apply(X32)
                for leaf in np.nonzero(tree.children_left == TREE_LEAF)[0]:
                    rows = np.nonzero(regions == leaf)[0]
                    step = negative.take(rows)
                    probability = target.take(rows) - step
                    numerator = step.sum() / rows.size
                    if k > 2:
                        numerator *= (k - 1) / k
                    denominator = (probability * (1 - probability)).sum() / rows.size
                    small = abs(denominator) < 1e-150
                    tree.value[leaf, 0, 0] = 0.0 if small else numerator / denominator
                self.raw[:, c] += GUESS_RATE * tree.value[:, 0, 0].take(regions, axis=0)
                self.trees.append(tree)

    def feature_importances(self) -> np.ndarray:
        """The estimator's ``feature_importances_``."""
        found = [
            tree.compute_feature_importances(normalize=False)
            for tree in self.trees
            if tree.node_count > 1
        ]
        if not found:
            return np.zeros(self.n_features)
        mean = np.mean(found, axis=0, dtype=np.float64)
        return mean / np.sum(mean)

    def score(self) -> float:
        """The estimator's ``score(X, labels)`` (accuracy on the rows it was fitted on)."""
        raw = self.raw
        predicted = (raw[:, 0] >= 0).astype(int) if raw.shape[1] == 1 else np.argmax(raw, axis=1)
        return float(np.mean(predicted == self.y))


class _Solver:
    """Depth-bounded optimal trees of ``Z`` (rows x thresholds, True: goes left) for the
    class indices ``y`` of ``n_classes`` classes."""

    def __init__(self, Z, y, n_classes):
        self.Z, self.y, self.n_classes = Z, np.asarray(y, dtype=np.int64), n_classes
        self.Zf = Z.astype(np.float32)
        self.onehot = (self.y[:, None] == np.arange(n_classes)[None, :]).astype(np.float32)
        self.memo = {}

    def leaf(self, rows):
        counts = np.bincount(self.y[rows], minlength=self.n_classes)
        label = int(np.argmax(counts))
        return MISFIT_COST * int(rows.size - counts[label]), ("leaf", label)

    def depth2(self, rows):
        """The best tree of depth <= 2 on ``rows`` (all root/child pairs at once)."""
        Z, onehot = self.Zf[rows], self.onehot[rows]
        both = Z.T @ Z  # rows going left at f and at g
        # rows of each class going left at f and at g: (k, F, F)
        both_c = np.stack([Z.T @ (Z * onehot[:, [c]]) for c in range(self.n_classes)])
        left = np.diag(both)
        left_c = np.einsum("cff->cf", both_c)
        n, n_c = rows.size, onehot.sum(axis=0)

        def misfit(count, counts):
            """Rows minus the largest class count (exact: counts are small integers)."""
            return count - counts.max(axis=0)

        # left branch of root f (rows going left at f), split by g or a leaf
        in_left = misfit(both, both_c) + misfit(left[:, None] - both, left_c[:, :, None] - both_c)
        # right branch of root f (rows going right at f)
        right_g = left[None, :] - both  # right at f, left at g
        right_g_c = left_c[:, None, :] - both_c
        rest = n - left[:, None] - left[None, :] + both
        rest_c = n_c[:, None, None] - left_c[:, :, None] - left_c[:, None, :] + both_c
        in_right = misfit(right_g, right_g_c) + misfit(rest, rest_c)
        leaf_left = misfit(left, left_c)
        leaf_right = misfit(n - left, n_c[:, None] - left_c)
        # cost of each side: a split (misfit, +1 split) or a leaf; equal misfit keeps the leaf
        cost_left = np.minimum(MISFIT_COST * in_left + SPLIT_COST, MISFIT_COST * leaf_left[:, None])
        cost_right = np.minimum(
            MISFIT_COST * in_right + SPLIT_COST, MISFIT_COST * leaf_right[:, None]
        )
        best_left, best_right = cost_left.min(axis=1), cost_right.min(axis=1)
        total = best_left + best_right + SPLIT_COST
        total[(left == 0) | (left == n)] = np.inf  # a root that does not split the rows
        f = int(np.argmin(total))
        best = self.leaf(rows)
        if total[f] >= best[0]:
            return best
        sides = []
        for cost, leaf_cost, mask in (
            (cost_left[f], MISFIT_COST * leaf_left[f], self.Z[rows, f]),
            (cost_right[f], MISFIT_COST * leaf_right[f], ~self.Z[rows, f]),
        ):
            g = int(np.argmin(cost))
            side = rows[mask]
            if cost[g] < leaf_cost:
                split = self.Z[side, g]
                sides.append(("split", g, self.leaf(side[split])[1], self.leaf(side[~split])[1]))
            else:
                sides.append(self.leaf(side)[1])
        return round(float(total[f])), ("split", f, sides[0], sides[1])

    def solve(self, rows, depth, conditions=frozenset()):
        key = (conditions, depth)
        if key in self.memo:
            return self.memo[key]
        best = self.leaf(rows)
        if depth >= 1 and best[0] > 0:
            if depth <= 2:
                found = self.depth2(rows) if depth == 2 else self._depth1(rows)
                best = min(best, found, key=lambda item: item[0])
            else:
                for f in range(self.Z.shape[1]):
                    mask = self.Z[rows, f]
                    if mask.all() or not mask.any() or (f, True) in conditions:
                        continue
                    low = self.solve(rows[mask], depth - 1, conditions | {(f, True)})
                    if low[0] + SPLIT_COST >= best[0]:
                        continue
                    high = self.solve(rows[~mask], depth - 1, conditions | {(f, False)})
                    cost = low[0] + high[0] + SPLIT_COST
                    if cost < best[0]:
                        best = (cost, ("split", f, low[1], high[1]))
        self.memo[key] = best
        return best

    def _depth1(self, rows):
        Z, onehot = self.Zf[rows], self.onehot[rows]
        left, left_c = Z.sum(axis=0), onehot.T @ Z  # (F,), (k, F)
        n, n_c = rows.size, onehot.sum(axis=0)
        cost = left - left_c.max(axis=0)
        cost = cost + ((n - left) - (n_c[:, None] - left_c).max(axis=0))
        f = int(np.argmin(cost))
        if left[f] in (0, n):
            return self.leaf(rows)
        mask = self.Z[rows, f]
        found = ("split", f, self.leaf(rows[mask])[1], self.leaf(rows[~mask])[1])
        return int(MISFIT_COST * cost[f]) + SPLIT_COST, found


def optimal_tree(X, labels, depth, features, thresholds, classes) -> dict:
    """The optimal tree of depth <= ``depth`` on the splits ``x_features <= thresholds``,
    in the plain-array form of :func:`governance.miret.cart.cart_arrays`.

    Parameters
    ----------
    X : ndarray of shape (n, p)
    labels : ndarray of shape (n,)
        Values of ``classes``.
    depth : int
    features, thresholds : ndarray
        The candidate splits (:func:`guessed_thresholds`).
    classes : ndarray of shape (k,)

    Returns
    -------
    dict
        ``feature``, ``threshold``, ``left``, ``right`` and ``label`` lists (node 0 the
        root, -1 children at leaves), plus ``misfit``: rows the tree gets wrong.
    """
    classes = np.asarray(classes)
    y = np.argmax(np.asarray(labels)[:, None] == classes[None, :], axis=1)
    Z = np.asarray(X)[:, features] <= thresholds[None, :]
    cost, node = _Solver(Z, y, classes.size).solve(np.arange(y.size), depth)
    arrays = {"feature": [], "threshold": [], "left": [], "right": [], "label": []}

    def write(item) -> int:
        k = len(arrays["feature"])
        for column in arrays.values():
            column.append(-1)
        if item[0] == "leaf":
            label = classes[item[1]]
            arrays["label"][k] = label.item() if hasattr(label, "item") else label
            arrays["threshold"][k] = -2.0
            return k
        column = item[1]
        arrays["feature"][k] = int(features[column])
        arrays["threshold"][k] = float(thresholds[column])
        arrays["left"][k] = write(item[2] if isinstance(item[2], tuple) else ("leaf", item[2]))
        arrays["right"][k] = write(item[3] if isinstance(item[3], tuple) else ("leaf", item[3]))
        arrays["label"][k] = arrays["label"][arrays["left"][k]]  # used when no row reaches it
        return k

    write(node)
    arrays["misfit"] = int(cost // MISFIT_COST)
    return arrays
