"""One uniform, immutable view of a fitted tree-ensemble classifier of ``k >= 2`` classes.

Every supported library (scikit-learn forests and gradient boosting, XGBoost, LightGBM)
is read into the same arrays per tree, so that VITE and MIRET never look at library
objects.

Two classes: a forest's trees hold the positive-class fraction of each node, a boosted
ensemble's trees add to one margin (probability ``sigmoid(margin)``). ``k > 2`` classes:
a forest's trees hold the ``k`` class fractions of each node (``Tree.value`` of shape
``(n_nodes, k)``), and a boosted ensemble has one tree per class per iteration, each
adding to its class's margin (``tree_class``), probabilities the softmax of the ``k``
margins, as scikit-learn, XGBoost (``multi:softprob``) and LightGBM (``multiclass``)
compute them.

Each tree is a :class:`governance.trees.Tree` (node arrays, checked when built).
Routing follows each library's own threshold convention: scikit-learn sends
``x <= threshold`` left, XGBoost sends ``x < threshold`` left, and both compare in single
precision, so :meth:`Ensemble.apply` reproduces the library's ``apply`` exactly. Native
categorical splits follow their library's rules too (:mod:`governance.categories`).
A view read with ``native=True`` takes its probabilities and labels from the library's
own compiled predict, checked against this exact routing
(:mod:`governance.native_predict`); ``apply``, leaf values and VITE are always exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np
from scipy.special import expit, softmax

from miret_governance.governance.ensembles.arrays import (
    PREDICT_CHUNK_ROWS,
    feature_matrix,
    read_only_array,
    scaled,
)
from miret_governance.governance.ensembles.categories import check_groups, code_matrix
from miret_governance.governance.ensembles.native_predict import checked_library_proba
from miret_governance.governance.ensembles.routing import PaddedNodes, padded_nodes, route
from miret_governance.governance.ensembles.tree_weights import boosting_tree_weights
from miret_governance.governance.ensembles.trees import (
    LEFT_IF_LESS,
    LEFT_IF_LESS_EQUAL,
    MalformedModelError,
    Tree,
    check_split_features,
)
from miret_governance.governance.errors import InvalidInputError


@dataclass(frozen=True)
class Ensemble:
    """Uniform view of a fitted tree-ensemble classifier of ``k >= 2`` classes.

    Attributes
    ----------
    trees : tuple of Tree
    tree_weights : ndarray of float
        ``w^e`` of the paper: 1 for averaging ensembles; uniform for a boosted ensemble
        read without data, and the contribution weights of
        :func:`~governance.tree_weights.boosting_tree_weights`
        (summing to 1) after :meth:`weighted_by_data`. Every weighted quantity in
        :mod:`governance.vite` is invariant to the scale of the weights.
    aggregation : {"average", "margin"}
        ``"average"``: class probabilities are the mean of the trees' leaf values (the
        positive-class fraction for two classes, the ``k`` fractions otherwise).
        ``"margin"``: the positive-class probability is ``sigmoid(base_margin + sum of
        leaf values)`` for two classes; for ``k > 2`` the probabilities are the softmax
        of the margins ``base_margin[c] + sum of the leaf values of class c's trees``.
    base_margin : float or ndarray of shape (k,)
        Initial margin of a boosted ensemble (0 for averaging ensembles); one per class
        (an array) for a margin ensemble of ``k > 2`` classes.
    left_if : {"<=", "<"}
        Threshold convention: a sample goes left when ``x <= threshold`` (scikit-learn)
        or ``x < threshold`` (XGBoost).
    feature_names : tuple of str
    classes : ndarray of shape (k,)
        The class labels, ``k >= 2``, in the order of :meth:`predict_proba`'s columns;
        for two classes ``classes[1]`` is the positive class.
    preprocessor : object or None
        The fitted Pipeline steps before the ensemble (a scikit-learn transformer).
    scaler : MinMaxScaler or None
        The MinMaxScaler right before the ensemble, if any: thresholds are in its output
        (normalized) units and can be mapped back to raw units with it.
    encoding : governance.encoding.Encoding or None
        Set on the view of a pipeline's encoded space
        (:func:`~governance.encoding.encoded_view`): the original column and category
        of each feature.
    source : str
        Qualified class name of the model that was read.
    input_precision : {"float32", "float64"}
        The precision the library compares inputs in: scikit-learn's trees and XGBoost
        round inputs to float32 first; HistGradientBoosting and LightGBM compare float64.
    tree_class : ndarray of int, shape (n_trees,), optional
        Index (into ``classes``) of the class whose margin each tree adds to: iteration by
        iteration ``0, 1, ..., k-1`` for a margin ensemble of ``k > 2`` classes; all 0
        (the default) for two classes and for averaging ensembles.
    category_groups : tuple of (int, int)
        One-hot groups ``(start, width)`` of native categorical columns
        (:mod:`governance.native_categories`): the trees split on a group's first feature,
        read as the group's code (:func:`~governance.categories.code_matrix`).
    native_proba : callable or None
        The library's own probabilities of rows in this view's units
        (:class:`~governance.native_predict.LibraryProba`), used by
        :meth:`predict_proba` once checked; None: the exact routing only.
    """

    trees: tuple
    tree_weights: np.ndarray
    aggregation: str
    base_margin: float
    left_if: str
    feature_names: tuple
    classes: np.ndarray
    preprocessor: object = None
    scaler: object = None
    encoding: object = None
    source: str = "arrays"
    input_precision: str = "float32"
    tree_class: np.ndarray | None = None
    category_groups: tuple = ()
    native_proba: object = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if not self.trees:
            raise InvalidInputError("an ensemble needs at least one tree")
        if self.aggregation not in ("average", "margin"):
            raise InvalidInputError("aggregation must be 'average' or 'margin'")
        if self.left_if not in (LEFT_IF_LESS_EQUAL, LEFT_IF_LESS):
            raise InvalidInputError("left_if must be '<=' or '<'")
        if self.input_precision not in ("float32", "float64"):
            raise InvalidInputError("input_precision must be 'float32' or 'float64'")
        weights = read_only_array(self.tree_weights, np.float64)
        if weights.shape != (len(self.trees),) or np.any(weights < 0) or weights.sum() <= 0:
            raise InvalidInputError(
                "tree_weights must be one non-negative weight per tree, not all 0"
            )
        classes = np.asarray(self.classes)
        if classes.ndim != 1 or len(set(classes.tolist())) != classes.size or classes.size < 2:
            raise InvalidInputError(
                f"classes must be k >= 2 distinct labels, one per class; got {classes.tolist()}"
            )
        check_split_features(self.trees, len(self.feature_names))
        k = classes.size
        multi_margin = self.aggregation == "margin" and k > 2
        object.__setattr__(self, "base_margin", _base_margin(self.base_margin, k, multi_margin))
        object.__setattr__(self, "tree_class", _tree_class(self.tree_class, self, k, multi_margin))
        value_width = k if self.aggregation == "average" and k > 2 else None
        for number, tree in enumerate(self.trees):
            if (tree.value.shape[1:] or (None,))[0] != value_width:
                needed = "(n_nodes,)" if value_width is None else f"(n_nodes, {k})"
                raise MalformedModelError(
                    f"tree {number} stores node values of shape {tree.value.shape}; this "
                    f"{self.aggregation} ensemble of {k} classes needs {needed}"
                )
        groups = check_groups(self.category_groups, len(self.feature_names))
        object.__setattr__(self, "category_groups", groups)
        object.__setattr__(self, "trees", tuple(self.trees))
        object.__setattr__(self, "tree_weights", weights)
        object.__setattr__(self, "feature_names", tuple(str(n) for n in self.feature_names))
        classes = classes.copy()
        classes.setflags(write=False)
        object.__setattr__(self, "classes", classes)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        trees,
        n_features=None,
        feature_names=None,
        tree_weights=None,
        aggregation="average",
        base_margin=0.0,
        left_if=LEFT_IF_LESS_EQUAL,
        classes=(0, 1),
        tree_class=None,
    ) -> Ensemble:
        """Build an ensemble from plain arrays (for tests and hand-made examples).

        Parameters
        ----------
        trees : sequence of Tree or of dict
            Each dict has ``feature``, ``threshold``, ``left``, ``right`` and optionally
            ``value`` (default 0 everywhere; rows of ``k`` class fractions for an
            averaging ensemble of ``k > 2`` classes), ``missing_left``,
            ``category_left`` and ``category_known`` (:class:`~governance.trees.Tree`).
        n_features : int, optional
            Needed when ``feature_names`` is not given.
        base_margin : float or sequence of k floats
        tree_class : sequence of int, optional
            The class index of each tree of a margin ensemble of ``k > 2`` classes.
        """
        built = []
        for tree in trees:
            if not isinstance(tree, Tree):
                n = len(tree["feature"])
                tree = Tree(
                    feature=tree["feature"],
                    threshold=tree.get("threshold", np.full(n, np.nan)),
                    left=tree["left"],
                    right=tree["right"],
                    value=tree.get("value", np.zeros(n)),
                    **{k: tree.get(k) for k in ("missing_left", "category_left", "category_known")},
                )
            built.append(tree)
        if feature_names is None:
            if n_features is None:
                raise InvalidInputError("give n_features or feature_names")
            feature_names = [f"x{j}" for j in range(n_features)]
        weights = np.ones(len(built)) if tree_weights is None else tree_weights
        return cls(
            trees=tuple(built),
            tree_weights=weights,
            aggregation=aggregation,
            base_margin=base_margin,
            left_if=left_if,
            feature_names=tuple(feature_names),
            classes=np.asarray(classes),
            tree_class=tree_class,
        )

    # ------------------------------------------------------------------ properties
    @property
    def n_trees(self) -> int:
        return len(self.trees)

    @property
    def n_classes(self) -> int:
        """Number of classes ``k``."""
        return int(self.classes.size)

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    @property
    def max_depth(self) -> int:
        """Maximum depth ``D`` over the trees (levels of splits are ``0..D-1``)."""
        return max(tree.max_depth for tree in self.trees)

    # ------------------------------------------------------------------ prediction
    def transform(self, X_raw) -> np.ndarray:
        """Apply the preprocessing steps (if any) to raw input, as the model would."""
        if self.preprocessor is None:
            return np.asarray(X_raw, dtype=np.float64)
        return scaled(self.preprocessor, X_raw)

    def __getstate__(self):
        """The fields only: the routing cache stays out of a pickle, so pickling a view
        (for the validation worker) never races a thread that is filling the cache."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def _padded(self) -> PaddedNodes:
        """The trees' node arrays padded into matrices (:func:`governance.routing.
        padded_nodes`), built once per view."""
        cached = self.__dict__.get("_padded_cache")
        if cached is None:
            cached = padded_nodes(self.trees, self.left_if)
            object.__setattr__(self, "_padded_cache", cached)
        return cached

    def apply(self, X, first_trees=None) -> np.ndarray:
        """Leaf node id (tree-local) reached by each sample in each tree.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input in the ensemble's own units (after any preprocessing).
        first_trees : int, optional
            Route through the first ``first_trees`` trees only (default all).

        Returns
        -------
        ndarray of shape (n_samples, n_trees) or (n_samples, first_trees)
        """
        X = feature_matrix(X, self.feature_names, finite=False, min_rows=0)
        if self.input_precision == "float32":
            X = X.astype(np.float32).astype(np.float64)
        X = code_matrix(X, self.category_groups)
        return route(self._padded(), X, self.left_if, self.max_depth, first_trees)

    def apply_positions(self, X) -> np.ndarray:
        """Breadth-first position of the leaf reached by each sample in each tree.

        Leaves deeper than :data:`governance.trees.POSITION_LEVELS` have position ``-1``.
        """
        node = self.apply(X)
        position = self._padded().position
        return position[np.arange(self.n_trees)[None, :], node]

    def leaf_values(self, X) -> np.ndarray:
        """Value of the leaf reached by each sample in each tree: shape (n, n_trees), or
        (n, n_trees, k) for an averaging ensemble of ``k > 2`` classes."""
        return self._padded().value[np.arange(self.n_trees)[None, :], self.apply(X)]

    def margins(self, leaf_value) -> np.ndarray:
        """Margins of a ``k > 2`` margin ensemble from :meth:`leaf_values`: shape (n, k),
        ``base_margin[c]`` plus the leaf values of class ``c``'s trees."""
        margin = np.tile(self.base_margin, (leaf_value.shape[0], 1))
        for c in range(self.n_classes):
            margin[:, c] += leaf_value[:, self.tree_class == c].sum(axis=1)
        return margin

    def _probabilities(self, X) -> np.ndarray:
        """Class probabilities of one chunk of rows."""
        if self.aggregation == "average" and self.n_classes > 2:
            # tree by tree, then divided, as scikit-learn's forests sum (so the same ties),
            # holding one tree's (n, k) fractions at a time
            value, node = self._padded().value, self.apply(X)
            total = np.zeros((X.shape[0], self.n_classes))
            for e in range(self.n_trees):
                total += value[e, node[:, e]]
            return total / self.n_trees
        leaf_value = self.leaf_values(X)
        if self.n_classes > 2:
            return softmax(self.margins(leaf_value), axis=1)
        if self.aggregation == "average":
            positive = leaf_value.mean(axis=1)
        else:
            positive = expit(self.base_margin + leaf_value.sum(axis=1))
        return np.column_stack([1.0 - positive, positive])

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, shape (n_samples, k), columns in ``classes`` order.

        With ``native_proba``, the library's own, checked on a sample of rows
        (:func:`~governance.native_predict.checked_library_proba`; after a disagreement
        this view keeps to the exact routing). Rows are routed in chunks of
        :data:`PREDICT_CHUNK_ROWS`, so memory stays bounded by one chunk's
        ``rows x trees`` leaves however many rows there are (a forest of ``k > 2``
        classes adds one tree's ``rows x k`` fractions at a time).
        """
        X = feature_matrix(X, self.feature_names, finite=False, min_rows=0)
        if self.native_proba is not None and not self.__dict__.get("_native_refused"):
            proba = checked_library_proba(
                self.native_proba, self.exact_proba, X, self.n_classes, self.source
            )
            if proba is not None:
                return proba
            object.__setattr__(self, "_native_refused", True)
        return self.exact_proba(X)

    def exact_proba(self, X) -> np.ndarray:
        """:meth:`predict_proba` by this view's own routing of every row."""
        X = feature_matrix(X, self.feature_names, finite=False, min_rows=0)
        proba = np.empty((X.shape[0], self.n_classes), dtype=np.float64)
        for start in range(0, X.shape[0], PREDICT_CHUNK_ROWS):
            rows = X[start : start + PREDICT_CHUNK_ROWS]
            proba[start : start + PREDICT_CHUNK_ROWS] = self._probabilities(rows)
        return proba

    def predict(self, X) -> np.ndarray:
        """Class labels, ``classes[argmax of predict_proba]``; a tie goes to the first
        of the tied classes (two classes: probability exactly 0.5 goes to ``classes[0]``)."""
        return self.classes[self.predict_proba(X).argmax(axis=1)]

    def for_class(self, c: int) -> Ensemble | None:
        """The trees that build class ``c``'s margin, as an ensemble view (for VITE per
        class) of a margin ensemble of ``k > 2`` classes; None for any other ensemble,
        whose every tree serves all classes.

        Parameters
        ----------
        c : int
            Class index into ``classes``.

        Returns
        -------
        Ensemble or None
            The same view restricted to the trees with ``tree_class == c`` and their
            weights (uniform when all of them are 0).
        """
        if self.aggregation != "margin" or self.n_classes == 2:
            return None
        if not 0 <= int(c) < self.n_classes:
            raise InvalidInputError(f"class index {c} is not in 0..{self.n_classes - 1}")
        kept = np.flatnonzero(self.tree_class == int(c))
        if kept.size == 0:
            raise InvalidInputError(f"no tree builds the margin of class {self.classes[int(c)]!r}")
        weights = self.tree_weights[kept]
        return replace(
            self,
            native_proba=None,  # the library predicts with all the trees
            trees=tuple(self.trees[e] for e in kept),
            tree_weights=weights if weights.sum() > 0 else np.ones(kept.size),
            tree_class=self.tree_class[kept],
        )

    def weighted_by_data(self, X) -> Ensemble:
        """A copy whose boosted-tree weights come from data
        (:func:`~governance.tree_weights.boosting_tree_weights`).

        Averaging ensembles keep weight 1 per tree; a boosted view read without data
        has uniform weights until this is called.
        """
        if self.aggregation == "average":
            return self
        return self.with_tree_weights(boosting_tree_weights(self, X))

    def with_tree_weights(self, tree_weights) -> Ensemble:
        """A copy of this view with other tree weights ``w^e``."""
        return replace(self, tree_weights=tree_weights)


def _base_margin(base_margin, k: int, multi_margin: bool):
    """The initial margin checked: k finite numbers (read-only) for a margin ensemble of
    ``k > 2`` classes (one number is taken for every class), else one float."""
    margin = np.asarray(base_margin, dtype=np.float64)
    if multi_margin:
        margin = np.broadcast_to(margin, (k,)) if margin.ndim == 0 else margin
        if margin.shape != (k,):
            raise InvalidInputError(
                f"base_margin has shape {margin.shape}; give one per class ({k})"
            )
    elif margin.ndim != 0:
        raise InvalidInputError("base_margin is one number unless the ensemble has k > 2 margins")
    if not np.isfinite(margin).all():
        raise MalformedModelError(f"the initial margin is {margin.tolist()}")
    return read_only_array(margin, np.float64) if multi_margin else float(margin)


def _tree_class(tree_class, ensemble: Ensemble, k: int, multi_margin: bool) -> np.ndarray:
    """Each tree's class index checked: ``0..k-1`` for a margin ensemble of ``k > 2``
    classes, all 0 otherwise."""
    n_trees = len(ensemble.trees)
    if tree_class is None:
        if multi_margin:
            raise InvalidInputError(f"a margin ensemble of {k} classes needs tree_class")
        tree_class = np.zeros(n_trees, dtype=np.int64)
    tree_class = np.asarray(tree_class)
    if tree_class.shape != (n_trees,) or tree_class.dtype.kind not in "iu":
        raise InvalidInputError(f"tree_class must be one integer per tree ({n_trees})")
    highest = k - 1 if multi_margin else 0
    outside = (tree_class < 0) | (tree_class > highest)
    if outside.any():
        raise MalformedModelError(
            f"tree {int(np.argmax(outside))} builds class index {int(tree_class[outside][0])}; "
            f"this ensemble's trees build class indices 0..{highest}"
        )
    return read_only_array(tree_class, np.int64)
