"""One uniform, immutable view of a fitted binary tree ensemble.

Every supported library (scikit-learn forests and gradient boosting, XGBoost) is read
into the same arrays per tree, so that VITE and MIRET never look at library objects.

Each tree is a :class:`governance.trees.Tree` (node arrays, checked when built).
Routing follows each library's own threshold convention: scikit-learn sends
``x <= threshold`` left, XGBoost sends ``x < threshold`` left, and both compare in single
precision, so :meth:`Ensemble.apply` reproduces the library's ``apply`` exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from miret_governance.governance.arrays import (
    PREDICT_CHUNK_ROWS,
    feature_matrix,
    read_only_array,
    scaled,
)
from miret_governance.governance.tree_weights import boosting_tree_weights
from miret_governance.governance.trees import (
    LEFT_IF_LESS,
    LEFT_IF_LESS_EQUAL,
    MalformedModelError,
    Tree,
    check_split_features,
)


@dataclass(frozen=True)
class Ensemble:
    """Uniform view of a fitted binary tree ensemble.

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
        ``"average"``: positive-class probability is the mean of the trees' leaf values.
        ``"margin"``: it is ``sigmoid(base_margin + sum of leaf values)``.
    base_margin : float
        Initial margin of a boosted ensemble (0 for averaging ensembles).
    left_if : {"<=", "<"}
        Threshold convention: a sample goes left when ``x <= threshold`` (scikit-learn)
        or ``x < threshold`` (XGBoost).
    feature_names : tuple of str
    classes : ndarray
        The two class labels; ``classes[1]`` is the positive class.
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

    def __post_init__(self):
        if not self.trees:
            raise ValueError("an ensemble needs at least one tree")
        if self.aggregation not in ("average", "margin"):
            raise ValueError("aggregation must be 'average' or 'margin'")
        if self.left_if not in (LEFT_IF_LESS_EQUAL, LEFT_IF_LESS):
            raise ValueError("left_if must be '<=' or '<'")
        if self.input_precision not in ("float32", "float64"):
            raise ValueError("input_precision must be 'float32' or 'float64'")
        weights = read_only_array(self.tree_weights, np.float64)
        if weights.shape != (len(self.trees),) or np.any(weights < 0) or weights.sum() <= 0:
            raise ValueError("tree_weights must be one non-negative weight per tree, not all 0")
        classes = np.asarray(self.classes)
        if classes.shape != (2,):
            raise ValueError("an ensemble here is a binary classifier: give two classes")
        check_split_features(self.trees, len(self.feature_names))
        if not np.isfinite(self.base_margin):
            raise MalformedModelError(f"the initial margin is {self.base_margin}")
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
    ) -> Ensemble:
        """Build an ensemble from plain arrays (for tests and hand-made examples).

        Parameters
        ----------
        trees : sequence of Tree or of dict
            Each dict has ``feature``, ``threshold``, ``left``, ``right`` and optionally
            ``value`` (default 0 everywhere).
        n_features : int, optional
            Needed when ``feature_names`` is not given.
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
                )
            built.append(tree)
        if feature_names is None:
            if n_features is None:
                raise ValueError("give n_features or feature_names")
            feature_names = [f"x{j}" for j in range(n_features)]
        weights = np.ones(len(built)) if tree_weights is None else tree_weights
        return cls(
            trees=tuple(built),
            tree_weights=weights,
            aggregation=aggregation,
            base_margin=float(base_margin),
            left_if=left_if,
            feature_names=tuple(feature_names),
            classes=np.asarray(classes),
        )

    # ------------------------------------------------------------------ properties
    @property
    def n_trees(self) -> int:
        return len(self.trees)

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

    def _padded(self):
        """Node arrays of all trees padded into (n_trees, max_nodes) matrices."""
        cached = self.__dict__.get("_padded_cache")
        if cached is not None:
            return cached
        width = max(tree.n_nodes for tree in self.trees)
        feature = np.full((self.n_trees, width), -1, dtype=np.int64)
        threshold = np.zeros((self.n_trees, width))
        left = np.zeros((self.n_trees, width), dtype=np.int64)
        right = np.zeros((self.n_trees, width), dtype=np.int64)
        value = np.zeros((self.n_trees, width))
        position = np.zeros((self.n_trees, width), dtype=np.int64)
        missing_left = np.zeros((self.n_trees, width), dtype=bool)
        for e, tree in enumerate(self.trees):
            n = tree.n_nodes
            split = tree.is_split
            feature[e, :n] = tree.feature
            threshold[e, :n] = np.where(split, tree.threshold, 0.0)
            # A leaf points to itself, so routing for D steps is a no-op once there.
            left[e, :n] = np.where(split, tree.left, np.arange(n))
            right[e, :n] = np.where(split, tree.right, np.arange(n))
            value[e, :n] = tree.value
            position[e, :n] = tree.position
            missing_left[e, :n] = tree.missing_left
        if self.left_if == LEFT_IF_LESS:  # XGBoost compares float32 to float32
            threshold = threshold.astype(np.float32).astype(np.float64)
        cached = (feature, threshold, left, right, value, position, missing_left)
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
        kept = slice(0, first_trees)
        padded = self._padded()
        feature, threshold, left, right = (array[kept] for array in padded[:4])
        missing_left = padded[6][kept]
        has_missing = bool(np.isnan(X).any())
        tree_index = np.arange(feature.shape[0])[None, :]
        node = np.zeros((X.shape[0], feature.shape[0]), dtype=np.int64)
        rows = np.arange(X.shape[0])[:, None]
        for _ in range(self.max_depth):
            f = feature[tree_index, node]
            x = X[rows, np.maximum(f, 0)]
            thr = threshold[tree_index, node]
            go_left = x <= thr if self.left_if == LEFT_IF_LESS_EQUAL else x < thr
            if has_missing:  # a NaN follows its node's missing-value direction
                go_left = np.where(np.isnan(x), missing_left[tree_index, node], go_left)
            node = np.where(go_left, left[tree_index, node], right[tree_index, node])
        return node

    def apply_positions(self, X) -> np.ndarray:
        """Breadth-first position of the leaf reached by each sample in each tree.

        Leaves deeper than :data:`governance.trees.POSITION_LEVELS` have position ``-1``.
        """
        node = self.apply(X)
        position = self._padded()[5]
        return position[np.arange(self.n_trees)[None, :], node]

    def leaf_values(self, X) -> np.ndarray:
        """Value of the leaf reached by each sample in each tree, shape (n, n_trees)."""
        return self._padded()[4][np.arange(self.n_trees)[None, :], self.apply(X)]

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, shape (n_samples, 2), columns in ``classes`` order.

        Rows are routed in chunks of :data:`PREDICT_CHUNK_ROWS`, so memory stays bounded
        by one chunk's ``rows x trees`` leaves however many rows there are.
        """
        X = feature_matrix(X, self.feature_names, finite=False, min_rows=0)
        positive = np.empty(X.shape[0], dtype=np.float64)
        for start in range(0, X.shape[0], PREDICT_CHUNK_ROWS):
            leaf_value = self.leaf_values(X[start : start + PREDICT_CHUNK_ROWS])
            if self.aggregation == "average":
                positive[start : start + PREDICT_CHUNK_ROWS] = leaf_value.mean(axis=1)
            else:
                margin = self.base_margin + leaf_value.sum(axis=1)
                positive[start : start + PREDICT_CHUNK_ROWS] = expit(margin)
        return np.column_stack([1.0 - positive, positive])

    def predict(self, X) -> np.ndarray:
        """Class labels; ties (probability exactly 0.5) go to ``classes[0]``."""
        return self.classes[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]

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
        return Ensemble(
            trees=self.trees,
            tree_weights=tree_weights,
            aggregation=self.aggregation,
            base_margin=self.base_margin,
            left_if=self.left_if,
            feature_names=self.feature_names,
            classes=self.classes,
            preprocessor=self.preprocessor,
            scaler=self.scaler,
            encoding=self.encoding,
            source=self.source,
            input_precision=self.input_precision,
        )
