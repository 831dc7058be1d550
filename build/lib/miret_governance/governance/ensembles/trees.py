"""One tree of an ensemble as node arrays, checked when built, and the refusals of a
model that cannot be read.

Node arrays of a tree are indexed by a tree-local node id (0 is the root). Each node of
the first :data:`POSITION_LEVELS` levels also has a *position* in the complete binary tree
(breadth-first, root 0, children of ``t`` at ``2t+1`` and ``2t+2``), as in the paper;
deeper nodes (trees grown with ``max_depth=None``) have position ``-1``, since their
positions would overflow 64-bit integers and VITE only needs the first levels.

A :class:`Tree` refuses arrays no library writes (children outside the tree, a node
reached twice, a negative index other than the leaf marker ``-1``, non-finite values),
and :func:`check_split_features` a split on a feature the model does not have: the
readers build and check every tree before any library code predicts with it.

A *categorical* node (LightGBM's, HistGradientBoosting's and XGBoost's native
categorical splits) reads its feature as a whole category code and sends the codes of
its set left; see :class:`Tree` for how a missing, negative or unknown code goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from miret_governance.governance.ensembles.arrays import read_only_array
from miret_governance.governance.errors import GovernanceError

SUPPORTED_MODELS = (
    "sklearn.ensemble.RandomForestClassifier",
    "sklearn.ensemble.ExtraTreesClassifier",
    "sklearn.ensemble.GradientBoostingClassifier",
    "sklearn.ensemble.HistGradientBoostingClassifier (numerical and native categorical features)",
    "xgboost.XGBClassifier (numerical and native categorical features)",
    (
        "xgboost.Booster (objective='binary:logistic', 'multi:softprob' or 'multi:softmax'; "
        "numerical and native categorical features)"
    ),
    (
        "lightgbm.LGBMClassifier, lightgbm.Booster (objective='binary' or 'multiclass'; "
        "a text model file; numerical and native categorical features)"
    ),
    "sklearn.pipeline.Pipeline ending in one of the above",
)
"""Models read, each a classifier of one output with k >= 2 classes."""

MAX_CATEGORY_CODE = (1 << 16) - 1
"""Largest category code a categorical split may name (LightGBM and scikit-learn number a
column's categories from 0; 65,536 categories bound the routing tables)."""

UNKNOWN_RIGHT, UNKNOWN_LEFT, UNKNOWN_MISSING = 0, 1, 2
"""Where a categorical node sends a value that is no known code (``category_unknown``)."""

POSITION_LEVELS = 62
"""Nodes at levels ``0..POSITION_LEVELS`` get a breadth-first position (< 2**63)."""

LEFT_IF_LESS_EQUAL = "<="
LEFT_IF_LESS = "<"


class UnsupportedModelError(GovernanceError, TypeError):
    """Raised when a model cannot be read as a fitted tree-ensemble classifier.

    Exit code 2. Also a TypeError, as scikit-learn raises for an estimator argument of
    the wrong kind (``MiretSurrogate.fit(..., ensemble=...)``).
    """

    def __init__(self, model, reason: str):
        name = (
            model
            if isinstance(model, str)
            else f"{type(model).__module__}.{type(model).__qualname__}"
        )
        supported = "\n  - ".join(SUPPORTED_MODELS)
        super().__init__(
            f"Unsupported model {name}: {reason}.\nSupported models (fitted, one output, "
            f"k >= 2 classes):\n  - {supported}"
        )


class MalformedModelError(UnsupportedModelError, ValueError):
    """A model whose stored trees are inconsistent (indices out of range, cycles,
    non-finite values): refused before any library code runs on it.

    Exit code 2.
    """

    def __init__(self, reason: str):
        Exception.__init__(
            self,
            f"the model file is malformed: {reason}. It was not written by the library "
            "that claims it, or it was altered; re-train or re-log the model",
        )


def _node_ints(values, what: str) -> np.ndarray:
    """Node indices as read-only int64, refusing values that are not whole numbers."""
    array = np.asarray(values)
    if array.dtype.kind not in "iuf" or array.ndim != 1:
        raise MalformedModelError(f"the {what} of a tree are not a list of node indices")
    if array.size and array.dtype.kind in "uf":
        whole = np.isfinite(array) & (array == np.round(array)) & (np.abs(array) <= 2**53)
        if not whole.all():
            raise MalformedModelError(f"the {what} of a tree are not integer node indices")
    return read_only_array(array, np.int64)


@dataclass(frozen=True)
class Tree:
    """Arrays of one tree, indexed by tree-local node id (root is 0).

    Attributes
    ----------
    feature : ndarray of int
        Split feature of each node, ``-1`` at leaves.
    threshold : ndarray of float
        Split threshold of each node (``nan`` at leaves), in the ensemble's input units.
    left, right : ndarray of int
        Child node ids, ``-1`` at leaves.
    value : ndarray of float, shape (n_nodes,) or (n_nodes, k)
        Leaf output: positive-class fraction for binary averaging ensembles, the ``k``
        class fractions (one row per node) for averaging ensembles of ``k > 2`` classes,
        additive margin for boosted ones (learning rate included). Defined at every node.
    missing_left : ndarray of bool, optional
        Where a split sends a missing value (NaN): left where True. Default: right at
        every node (what ``x <= threshold`` gives for NaN).
    category_left : tuple, optional
        One entry per node: None for a numeric split or a leaf, else the category codes
        (whole numbers ``0..MAX_CATEGORY_CODE``) a categorical split sends left; the
        node's ``threshold`` is then unused (NaN). A value ``x`` is read as the code
        ``trunc(x)``.
    category_known : tuple, optional
        One entry per node, set only at categorical nodes: None when every code is known,
        else the codes the node knows. A known code outside ``category_left`` goes right;
        a NaN follows ``missing_left``.
    category_unknown : ndarray of int, optional
        Where a categorical node sends a value that is no known code (a negative value,
        an unknown code): :data:`UNKNOWN_RIGHT`, :data:`UNKNOWN_LEFT` or
        :data:`UNKNOWN_MISSING` (``missing_left``). Default: right where every code is
        known, else missing. LightGBM: every code known, NaN right, ``trunc(x) < 0``
        right. HistGradientBoosting: known codes, ``x < 0`` and unknown codes missing.
        XGBoost: the listed categories (known) go right, nothing left, ``x < 0`` and
        unknown codes left.
    depth : ndarray of int
        Level of each node (root 0).
    position : ndarray of int
        Breadth-first position in the complete binary tree (children ``2t+1``,
        ``2t+2``) for nodes at depth ``<= POSITION_LEVELS``, ``-1`` below.
    """

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    missing_left: np.ndarray | None = None
    category_left: tuple | None = None
    category_known: tuple | None = None
    category_unknown: np.ndarray | None = None
    depth: np.ndarray = field(init=False)
    position: np.ndarray = field(init=False)

    def __post_init__(self):
        feature = _node_ints(self.feature, "feature")
        left = _node_ints(self.left, "left children")
        right = _node_ints(self.right, "right children")
        threshold = np.asarray(self.threshold, dtype=np.float64)
        value = np.asarray(self.value, dtype=np.float64)
        n = feature.shape[0]
        if n == 0:
            raise MalformedModelError("a tree has no nodes")
        missing_left = np.zeros(n, dtype=bool)
        if self.missing_left is not None:
            missing_left = np.asarray(self.missing_left)
            if missing_left.dtype != bool and not np.isin(missing_left, (0, 1)).all():
                raise MalformedModelError("a missing-value direction is not 0 or 1")
            missing_left = missing_left.astype(bool)
        shapes = {a.shape for a in (feature, left, right, threshold, missing_left)}
        shapes.add(value.shape[:1] if value.ndim == 2 and value.shape[1] > 2 else value.shape)
        if shapes != {(n,)}:
            raise MalformedModelError(
                f"a tree's node arrays have shapes {sorted(shapes)}; every array needs one "
                f"entry per node ({n})"
            )
        # -1 marks a leaf in every library; any other negative index is corrupt (the
        # libraries would follow it out of the node array)
        is_leaf = left == -1
        if np.any(is_leaf != (right == -1)) or np.any(is_leaf != (feature == -1)):
            raise MalformedModelError(
                "a node is a leaf exactly when feature, left and right are -1"
            )
        if np.any(feature[~is_leaf] < 0):
            raise MalformedModelError("a split uses a negative feature index")
        split = ~is_leaf
        children = np.concatenate([left[split], right[split]])
        if children.size and children.min() == 0:
            raise MalformedModelError(
                "a child index points back to the root (node 0): the nodes form a cycle"
            )
        if children.size and (children.min() < 0 or children.max() >= n):
            raise MalformedModelError(
                f"a child index lies outside the tree's {n} nodes (found "
                f"{int(children.min() if children.min() < 0 else children.max())})"
            )
        left_codes, known_codes = _categories(self.category_left, self.category_known, split)
        categorical = np.array([codes is not None for codes in left_codes], dtype=bool)
        # an infinite threshold is legitimate: scikit-learn splits missing values from
        # all others with threshold inf
        if np.isnan(threshold[split & ~categorical]).any():
            raise MalformedModelError("a split threshold is NaN")
        threshold = np.where(categorical, np.nan, threshold)
        if not np.isfinite(value).all():
            raise MalformedModelError("a node value is NaN or infinite")
        depth = np.zeros(n, dtype=np.int64)
        position = np.zeros(n, dtype=np.int64)
        level = 0
        seen = np.zeros(n, dtype=bool)
        seen[0] = True
        frontier = np.array([0])
        while frontier.size:
            frontier = frontier[~is_leaf[frontier]]
            children = np.concatenate([left[frontier], right[frontier]])
            if np.any(seen[children]):
                raise MalformedModelError("a node is reached twice (the nodes form no tree)")
            seen[children] = True
            level += 1
            depth[children] = level
            if level <= POSITION_LEVELS:
                position[children] = np.concatenate(
                    [2 * position[frontier] + 1, 2 * position[frontier] + 2]
                )
            else:
                position[children] = -1
            frontier = children
        if not seen.all():
            raise MalformedModelError("some nodes are unreachable from the root")
        object.__setattr__(self, "feature", feature)
        object.__setattr__(self, "left", left)
        object.__setattr__(self, "right", right)
        object.__setattr__(self, "threshold", read_only_array(threshold, np.float64))
        object.__setattr__(self, "value", read_only_array(value, np.float64))
        object.__setattr__(self, "missing_left", read_only_array(missing_left & split, bool))
        object.__setattr__(self, "category_left", left_codes)
        object.__setattr__(self, "category_known", known_codes)
        unknown = _unknown_sides(self.category_unknown, left_codes, known_codes)
        object.__setattr__(self, "category_unknown", read_only_array(unknown, np.int64))
        object.__setattr__(self, "depth", read_only_array(depth, np.int64))
        object.__setattr__(self, "position", read_only_array(position, np.int64))

    @property
    def n_nodes(self) -> int:
        return int(self.feature.shape[0])

    @property
    def is_split(self) -> np.ndarray:
        """Boolean mask of the nodes that apply a split."""
        return self.feature >= 0

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())

    @property
    def is_categorical(self) -> np.ndarray:
        """Boolean mask of the nodes that apply a categorical split."""
        return np.array([codes is not None for codes in self.category_left], dtype=bool)


def _codes(values, what: str) -> np.ndarray:
    """One node's category codes: distinct whole numbers ``0..MAX_CATEGORY_CODE``,
    sorted and read-only."""
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iuf"):
        raise MalformedModelError(f"the {what} of a categorical split are not a list of codes")
    if array.size and not (
        np.isfinite(array).all()
        and (array == np.round(array)).all()
        and (array >= 0).all()
        and (array <= MAX_CATEGORY_CODE).all()
    ):
        raise MalformedModelError(
            f"the {what} of a categorical split are not whole numbers 0 to {MAX_CATEGORY_CODE}"
        )
    codes = np.unique(array.astype(np.int64))
    if codes.size != array.size:
        raise MalformedModelError(f"the {what} of a categorical split repeat a code")
    return read_only_array(codes, np.int64)


def _unknown_sides(given, left: tuple, known: tuple) -> np.ndarray:
    """``category_unknown`` checked, or its default; 0 at every other node."""
    categorical = np.array([codes is not None for codes in left], dtype=bool)
    default = np.where([codes is None for codes in known], UNKNOWN_RIGHT, UNKNOWN_MISSING)
    if given is None:
        return np.where(categorical, default, UNKNOWN_RIGHT)
    sides = np.asarray(given)
    if sides.shape != categorical.shape or not np.isin(sides, (0, 1, 2)).all():
        raise MalformedModelError("a tree's unknown-category directions are not 0, 1 or 2")
    return np.where(categorical, sides, UNKNOWN_RIGHT)


def _categories(category_left, category_known, split: np.ndarray) -> tuple:
    """Both per-node code lists checked: entries only at split nodes, known codes only
    at categorical ones, the codes sent left among the known ones."""
    n = split.size
    left = (None,) * n if category_left is None else tuple(category_left)
    known = (None,) * n if category_known is None else tuple(category_known)
    if len(left) != n or len(known) != n:
        raise MalformedModelError(
            f"a tree's category sets have {len(left)} and {len(known)} entries; every node "
            f"needs one ({n})"
        )
    left = tuple(None if c is None else _codes(c, "categories sent left") for c in left)
    known = tuple(None if c is None else _codes(c, "known categories") for c in known)
    for node in range(n):
        if left[node] is not None and not split[node]:
            raise MalformedModelError(f"leaf {node} carries a category set")
        if known[node] is None:
            continue
        if left[node] is None:
            raise MalformedModelError(f"node {node} knows categories but splits no category set")
        if np.setdiff1d(left[node], known[node]).size:
            raise MalformedModelError(f"node {node} sends categories left that it does not know")
    return left, known


def check_split_features(trees, n_features: int) -> None:
    """Refuse a split on a feature index outside ``0 .. n_features - 1``.

    Raises
    ------
    MalformedModelError
    """
    for number, tree in enumerate(trees):
        highest = int(tree.feature.max(initial=-1))
        if highest >= n_features:
            raise MalformedModelError(
                f"tree {number} splits on feature index {highest}, but the model has "
                f"{n_features} features"
            )
