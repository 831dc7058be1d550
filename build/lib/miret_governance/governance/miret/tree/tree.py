"""The fitted MIRET surrogate: a complete oblique binary tree of fixed depth ``D``.

Nodes are numbered breadth-first as in the paper: branch nodes ``0 .. 2^D-2`` (level of
``t`` is ``floor(log2(t+1))``, children ``2t+1`` and ``2t+2``) and leaves
``2^D-1 .. 2^{D+1}-2``. Leaf ``l`` (left to right) predicts ``classes[leaf_class[l]]``;
a two-class tree defaults to the paper's fixed classes: an odd leaf predicts
``classes[0]`` (the paper's ``-1``), an even leaf ``classes[1]`` (``+1``). A tree of
``k > 2`` classes names its leaf classes. A sample goes left at node ``t`` exactly when
``a_t . x + b_t <= 0``.

Missing values: a row's value at node ``t`` is *undefined* when a feature with a nonzero
coefficient ``a_{t,j}`` is missing (NaN); a missing feature whose coefficient is zero is
ignored. Such a row goes left exactly when ``missing_left[t]``. The fit learns
``missing_left`` (:func:`governance.miret.missing.missing_directions`); a tree without it
(format version 1, written before missing values were supported) refuses NaN.

All hyperplane values are computed the same way everywhere (elementwise products summed
along the contiguous feature axis), so :meth:`SurrogateTree.apply`,
:meth:`SurrogateTree.branch_sides`, :meth:`SurrogateTree.decision_path` and the feasibility
checks of :mod:`governance.miret.feasibility` agree bit for bit.
"""

from __future__ import annotations

import numpy as np

from miret_governance.governance.ensembles.arrays import feature_matrix, read_only_array
from miret_governance.governance.errors import InvalidInputError, InvalidTypeError
from miret_governance.governance.miret.problem.layout import alternating_classes, hyperplane_values
from miret_governance.governance.miret.tree.tree_rules import complete_rules, rule_table

FORMAT = "miret-surrogate-tree"
FORMAT_VERSION = 3
# version 1 has no missing_left (it refuses NaN); versions 1 and 2 have no leaf_class
# (two classes, the paper's alternating leaf classes)
READABLE_VERSIONS = (1, 2, 3)


class SurrogateTree:
    """A complete oblique decision tree of depth ``D`` with one class per leaf.

    Parameters
    ----------
    coef : array-like of shape (2**depth - 1, n_features)
        Hyperplane coefficients ``a_t`` of the branch nodes, breadth-first.
    intercept : array-like of shape (2**depth - 1,)
        Hyperplane intercepts ``b_t``.
    depth : int
        Depth ``D`` (number of branch levels), at least 1.
    feature_names : sequence of str, optional
        Defaults to ``x0, x1, ...``.
    classes : sequence of k >= 2 labels, optional
        The ensemble's labels.
    missing_left : array-like of bool of shape (2**depth - 1,), optional
        Side of a row whose value at a branch node is undefined (a NaN in a feature
        with a nonzero coefficient): left when True. None: NaN is refused.
    leaf_class : array-like of int of shape (2**depth,), optional
        Class index (into ``classes``) of every leaf, left to right. Default (two
        classes only): the paper's alternating classes, odd leaf 0, even leaf 1.

    Attributes
    ----------
    coef, intercept : ndarray (read-only)
    depth : int
    feature_names : tuple of str
    classes : ndarray (read-only)
    missing_left : ndarray of bool (read-only) or None
    leaf_class : ndarray of int (read-only)
    """

    def __init__(
        self,
        coef,
        intercept,
        depth,
        feature_names=None,
        classes=(-1, 1),
        missing_left=None,
        leaf_class=None,
    ):
        if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
            raise InvalidInputError(f"depth must be an integer >= 1, got {depth!r}")
        depth = int(depth)
        n_branch = 2**depth - 1
        coef = np.asarray(coef, dtype=np.float64)
        intercept = np.asarray(intercept, dtype=np.float64)
        if coef.ndim != 2 or coef.shape[0] != n_branch:
            raise InvalidInputError(
                f"coef must have shape (2**depth - 1, n_features) = ({n_branch}, p) for "
                f"depth {depth}, got {coef.shape}"
            )
        if intercept.shape != (n_branch,):
            raise InvalidInputError(
                f"intercept must have shape ({n_branch},) for depth {depth}, got {intercept.shape}"
            )
        if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(intercept))):
            raise InvalidInputError("coef and intercept must be finite (no nan or inf)")
        n_features = coef.shape[1]
        if feature_names is None:
            feature_names = tuple(f"x{j}" for j in range(n_features))
        feature_names = tuple(str(name) for name in feature_names)
        if len(feature_names) != n_features:
            raise InvalidInputError(
                f"feature_names has {len(feature_names)} names but coef has {n_features} columns"
            )
        classes = np.array(classes)
        if classes.ndim != 1 or classes.size < 2:
            raise InvalidInputError(
                f"classes must hold at least two labels, got {classes.tolist()!r}"
            )
        classes.setflags(write=False)
        if leaf_class is None:
            if classes.size != 2:
                raise InvalidInputError(
                    f"a tree of {classes.size} classes needs leaf_class (the class index of "
                    f"each of its {2**depth} leaves)"
                )
            leaf_class = alternating_classes(depth)
        leaf_class = np.asarray(leaf_class)
        if (
            leaf_class.shape != (2**depth,)
            or not np.issubdtype(leaf_class.dtype, np.integer)
            or not ((leaf_class >= 0) & (leaf_class < classes.size)).all()
        ):
            raise InvalidInputError(
                f"leaf_class must hold {2**depth} class indices in 0..{classes.size - 1} (one "
                f"per leaf of a depth-{depth} tree), got {leaf_class.tolist()!r}"
            )
        self._leaf_class = read_only_array(leaf_class, np.int64)
        if missing_left is not None:
            missing_left = np.asarray(missing_left)
            if missing_left.shape != (n_branch,) or missing_left.dtype != bool:
                raise InvalidInputError(
                    f"missing_left must hold {n_branch} booleans (one per branch node), got "
                    f"{missing_left.tolist()!r}"
                )
            missing_left = read_only_array(missing_left, bool)
        self._missing_left = missing_left
        self._coef = read_only_array(coef, np.float64)
        self._intercept = read_only_array(intercept, np.float64)
        self._depth = depth
        self._feature_names = feature_names
        self._classes = classes

    # ------------------------------------------------------------------ properties
    @property
    def coef(self) -> np.ndarray:
        return self._coef

    @property
    def intercept(self) -> np.ndarray:
        return self._intercept

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def feature_names(self) -> tuple:
        return self._feature_names

    @property
    def classes(self) -> np.ndarray:
        return self._classes

    @property
    def missing_left(self) -> np.ndarray | None:
        return self._missing_left

    @property
    def leaf_class(self) -> np.ndarray:
        """Class index of every leaf, left to right (shape ``(2**depth,)``)."""
        return self._leaf_class

    @property
    def default_leaf_class(self) -> bool:
        """Whether the leaf classes are the paper's alternating two-class default."""
        return self._classes.size == 2 and np.array_equal(
            self._leaf_class, alternating_classes(self._depth)
        )

    def with_leaf_class(self, leaf_class) -> SurrogateTree:
        """The same tree with other leaf classes."""
        return self._replaced(leaf_class=leaf_class)

    def with_missing_left(self, missing_left) -> SurrogateTree:
        """The same tree with the given rule for undefined values (see the module)."""
        return self._replaced(missing_left=missing_left)

    def _replaced(self, **changes) -> SurrogateTree:
        arguments = {
            "coef": self._coef,
            "intercept": self._intercept,
            "depth": self._depth,
            "feature_names": self._feature_names,
            "classes": self._classes,
            "missing_left": self._missing_left,
            "leaf_class": self._leaf_class,
        }
        return SurrogateTree(**{**arguments, **changes})

    @property
    def n_features(self) -> int:
        return self._coef.shape[1]

    @property
    def n_branch_nodes(self) -> int:
        return self._coef.shape[0]

    @property
    def n_leaves(self) -> int:
        return 2**self._depth

    def __repr__(self) -> str:
        return (
            f"SurrogateTree(depth={self.depth}, n_features={self.n_features}, "
            f"n_feature_uses={self.n_feature_uses()}, classes={self.classes.tolist()!r})"
        )

    # ------------------------------------------------------------------ routing
    def walk(self, X):
        """Nodes visited and hyperplane values (NaN where undefined), level by level:
        two (n, D) arrays."""
        nodes, values, _ = self.route(X)
        return nodes, values

    def route(self, X):
        """Nodes visited, hyperplane values (NaN where undefined) and sides taken (True:
        right), level by level: three (n, D) arrays."""
        X = feature_matrix(X, self.feature_names, min_rows=0, allow_nan=True)
        missing = np.isnan(X)
        has_missing = bool(missing.any())
        if has_missing:
            if self._missing_left is None:
                raise InvalidInputError(
                    "X has missing values (NaN) but this surrogate has no rule for them (it "
                    "was written before missing values were supported); impute them, or "
                    "explain the ensemble again"
                )
            X = np.where(missing, 0.0, X)
        X = np.ascontiguousarray(X)
        n = X.shape[0]
        nodes = np.zeros((n, self.depth), dtype=np.int64)
        values = np.zeros((n, self.depth))
        right = np.zeros((n, self.depth), dtype=bool)
        node = np.zeros(n, dtype=np.int64)
        for level in range(self.depth):
            value = hyperplane_values(X, self._coef[node], self._intercept[node])
            goes_right = value > 0
            if has_missing:
                undefined = (missing & (self._coef[node] != 0)).any(axis=1)
                value[undefined] = np.nan
                goes_right[undefined] = ~self._missing_left[node[undefined]]
            nodes[:, level], values[:, level], right[:, level] = node, value, goes_right
            node = 2 * node + 1 + goes_right
        return nodes, values, right

    def apply(self, X) -> np.ndarray:
        """Breadth-first leaf position (``2^D-1 .. 2^{D+1}-2``) reached by each row of ``X``."""
        nodes, _, right = self.route(X)
        return 2 * nodes[:, -1] + 1 + right[:, -1]

    def leaf_class_of(self, positions) -> np.ndarray:
        """Class index of leaf positions (``2^D-1 .. 2^{D+1}-2``)."""
        positions = np.asarray(positions, dtype=np.int64)
        first, last = 2**self.depth - 1, 2 ** (self.depth + 1) - 2
        if positions.size and (positions.min() < first or positions.max() > last):
            raise InvalidInputError(
                f"leaf positions of a depth-{self.depth} tree are {first}..{last}"
            )
        return self._leaf_class[positions - first]

    def predict(self, X) -> np.ndarray:
        """The label of each row's leaf: ``classes[leaf_class[leaf]]``."""
        return self._classes[self.leaf_class_of(self.apply(X))]

    def branch_sides(self, X) -> np.ndarray:
        """Side taken at every branch node: (n, 2^D-1) int8, -1 not reached, 0 left, 1 right."""
        nodes, _, right = self.route(X)
        sides = np.full((nodes.shape[0], self.n_branch_nodes), -1, dtype=np.int8)
        rows = np.arange(nodes.shape[0])[:, None]
        sides[rows, nodes] = right.astype(np.int8)
        return sides

    def decision_path(self, x) -> list:
        """Path of one sample: list of ``(node, a.x + b, "left"|"right")``, root first;
        the value is NaN where a missing feature leaves it undefined."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 1:
            raise InvalidInputError(
                f"decision_path takes one sample (1-D array), got shape {x.shape}"
            )
        nodes, values, right = self.route(x[None, :])
        return [
            (int(t), float(v), "right" if r else "left")
            for t, v, r in zip(nodes[0], values[0], right[0], strict=True)
        ]

    # ------------------------------------------------------------------ sparsity
    def used_features(self) -> list:
        """Sorted indices of the features with a nonzero coefficient at some node."""
        return [int(j) for j in np.flatnonzero((self._coef != 0).any(axis=0))]

    def n_feature_uses(self) -> int:
        """Multiset count of feature uses: number of nonzero ``a_{t,j}``."""
        return int(np.count_nonzero(self._coef))

    def objective(self, problem) -> float:
        """MIRET objective of this tree on ``problem`` (:meth:`MiretProblem.objective`)."""
        if self.depth != problem.depth:
            raise InvalidInputError(
                f"tree depth {self.depth} differs from the problem's depth {problem.depth}"
            )
        return problem.objective(self._coef, self.apply(problem.X), self._leaf_class)

    # ------------------------------------------------------------------ rules
    def rule_table(self, feature_names=None, scaler=None) -> list:
        """Every branch node's split as records: :func:`governance.miret.tree_rules.rule_table`."""
        return rule_table(self, feature_names, scaler)

    def rules(self, feature_names=None, scaler=None) -> str:
        """Rules of the complete tree: :func:`governance.miret.tree_rules.complete_rules`."""
        return complete_rules(self, feature_names, scaler)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        """Plain-JSON representation (lists, floats at full precision, strings), format
        version 3: ``missing_left`` is None for a tree that refuses NaN."""
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "depth": self.depth,
            "feature_names": list(self.feature_names),
            "classes": self._classes.tolist(),
            "coef": [[float(v) for v in row] for row in self._coef],
            "intercept": [float(v) for v in self._intercept],
            "missing_left": None
            if self._missing_left is None
            else [bool(v) for v in self._missing_left],
            "leaf_class": [int(v) for v in self._leaf_class],
        }

    def identity(self) -> dict:
        """What decides the predictions: :meth:`to_dict` without the format keys, and
        without a null ``missing_left`` or the default two-class ``leaf_class``, so a
        tree that format version 1 or 2 could hold has the same identity as before
        (``MiretSurrogate.tree_digest`` hashes it)."""
        omit = {"format", "format_version"}
        omit |= {"missing_left"} if self._missing_left is None else set()
        omit |= {"leaf_class"} if self.default_leaf_class else set()
        return {k: v for k, v in self.to_dict().items() if k not in omit}

    @classmethod
    def from_dict(cls, data) -> SurrogateTree:
        """Rebuild a tree from :meth:`to_dict` output, validating it with clear errors."""
        if not isinstance(data, dict):
            raise InvalidTypeError(
                f"expected a dict from SurrogateTree.to_dict(), got {type(data)}"
            )
        missing = [
            key
            for key in (
                "format",
                "format_version",
                "depth",
                "feature_names",
                "classes",
                "coef",
                "intercept",
            )
            if key not in data
        ]
        if missing:
            raise InvalidInputError(f"surrogate tree dict is missing keys {missing}")
        if data["format"] != FORMAT:
            raise InvalidInputError(
                f"not a surrogate tree: format is {data['format']!r}, not {FORMAT!r}"
            )
        if data["format_version"] not in READABLE_VERSIONS:
            raise InvalidInputError(
                f"unsupported surrogate tree format_version {data['format_version']!r}; this "
                f"version of the package reads versions {READABLE_VERSIONS}"
            )
        version = data["format_version"]
        missing_left = data.get("missing_left") if version >= 2 else None
        if (version == 2 or missing_left is not None) and (
            not isinstance(missing_left, list) or any(not isinstance(v, bool) for v in missing_left)
        ):
            raise InvalidInputError(
                "missing_left must be a list of booleans (one per branch node) in format "
                f"version {version}"
            )
        leaf_class = data.get("leaf_class") if version >= 3 else None
        if version >= 3 and (
            not isinstance(leaf_class, list)
            or any(isinstance(v, bool) or not isinstance(v, int) for v in leaf_class)
        ):
            raise InvalidInputError(
                "leaf_class must be a list of class indices (one per leaf) in format version 3"
            )
        depth = data["depth"]
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise InvalidInputError(f"depth must be an integer >= 1, got {depth!r}")
        n_branch, n_features = 2**depth - 1, len(data["feature_names"])
        coef = data["coef"]
        if (
            not isinstance(coef, list)
            or len(coef) != n_branch
            or any(not isinstance(row, list) or len(row) != n_features for row in coef)
        ):
            raise InvalidInputError(
                f"coef must be {n_branch} lists (one per branch node of a depth-{depth} tree) "
                f"of {n_features} numbers (one per feature name)"
            )
        if not isinstance(data["intercept"], list) or len(data["intercept"]) != n_branch:
            raise InvalidInputError(
                f"intercept must be a list of {n_branch} numbers for depth {depth}"
            )
        try:
            coef_array = np.array(coef, dtype=np.float64).reshape(n_branch, n_features)
            intercept_array = np.array(data["intercept"], dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise InvalidInputError(f"coef and intercept must hold numbers only: {error}") from None
        if missing_left is not None and len(missing_left) != n_branch:
            raise InvalidInputError(f"missing_left must hold {n_branch} booleans for depth {depth}")
        return cls(
            coef_array,
            intercept_array,
            depth,
            data["feature_names"],
            data["classes"],
            None if missing_left is None else np.array(missing_left, dtype=bool),
            None if leaf_class is None else np.array(leaf_class, dtype=np.int64),
        )
