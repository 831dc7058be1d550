"""The fitted MIRET surrogate: a complete oblique binary tree of fixed depth ``D``.

Nodes are numbered breadth-first as in the paper: branch nodes ``0 .. 2^D-2`` (level of
``t`` is ``floor(log2(t+1))``, children ``2t+1`` and ``2t+2``) and leaves
``2^D-1 .. 2^{D+1}-2``. Leaf classes are fixed: an odd leaf predicts ``-1``
(``classes[0]``), an even leaf ``+1`` (``classes[1]``). A sample goes left at node ``t``
exactly when ``a_t . x + b_t <= 0``.

All hyperplane values are computed the same way everywhere (elementwise products summed
along the contiguous feature axis), so :meth:`SurrogateTree.apply`,
:meth:`SurrogateTree.branch_sides`, :meth:`SurrogateTree.decision_path` and the feasibility
checks of :mod:`governance.miret.feasibility` agree bit for bit.
"""

from __future__ import annotations

import numpy as np

from governance.ensemble import read_only_array

FORMAT = "miret-surrogate-tree"
FORMAT_VERSION = 1
_SIGNIFICANT = 4


def node_level(node) -> np.ndarray:
    """Level of breadth-first node ids (root 0): ``floor(log2(t + 1))``."""
    node = np.asarray(node, dtype=np.int64)
    return np.floor(np.log2(node + 1) + 1e-12).astype(np.int64)


def leaf_sign(positions) -> np.ndarray:
    """Fixed class sign of leaf positions: ``-1`` for odd leaves, ``+1`` for even ones."""
    return np.where(np.asarray(positions, dtype=np.int64) % 2 == 1, -1, 1)


def hyperplane_values(X, coef, intercept) -> np.ndarray:
    """Row-wise ``coef[i] . X[i] + intercept[i]`` with one fixed summation order.

    Parameters
    ----------
    X : ndarray of shape (n, p)
    coef : ndarray of shape (n, p) or (p,)
    intercept : ndarray of shape (n,) or float
    """
    return np.multiply(X, coef).sum(axis=1) + intercept


def _fmt(value: float) -> str:
    """A number with a few significant digits, without exponent noise for zero."""
    if value == 0:
        return "0"
    return f"{value:.{_SIGNIFICANT}g}"


def _linear_text(terms, rhs: float) -> str:
    parts = []
    for k, (name, coef) in enumerate(terms):
        magnitude = _fmt(abs(coef))
        term = name if magnitude == "1" else f"{magnitude}·{name}"
        if k == 0:
            parts.append(f"-{term}" if coef < 0 else term)
        else:
            parts.append(f"{'-' if coef < 0 else '+'} {term}")
    return f"{' '.join(parts)} <= {_fmt(rhs + 0.0)}"


def _univariate_text(terms, rhs: float) -> str | None:
    """``c·x <= r`` solved for ``x`` (``x <= r/c`` or ``x >= r/c``); None otherwise."""
    if len(terms) != 1 or terms[0][1] == 1:
        return None
    name, coef = terms[0]
    return f"{name} {'<=' if coef > 0 else '>='} {_fmt(rhs / coef + 0.0)}"


class SurrogateTree:
    """A complete oblique decision tree of depth ``D`` with the paper's fixed leaf classes.

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
    classes : sequence of two labels, optional
        The ensemble's labels; ``classes[1]`` is the class of even leaves (``+1``).

    Attributes
    ----------
    coef, intercept : ndarray (read-only)
    depth : int
    feature_names : tuple of str
    classes : ndarray (read-only)
    """

    def __init__(self, coef, intercept, depth, feature_names=None, classes=(-1, 1)):
        if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
            raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
        depth = int(depth)
        n_branch = 2**depth - 1
        coef = np.asarray(coef, dtype=np.float64)
        intercept = np.asarray(intercept, dtype=np.float64)
        if coef.ndim != 2 or coef.shape[0] != n_branch:
            raise ValueError(
                f"coef must have shape (2**depth - 1, n_features) = ({n_branch}, p) for "
                f"depth {depth}, got {coef.shape}"
            )
        if intercept.shape != (n_branch,):
            raise ValueError(
                f"intercept must have shape ({n_branch},) for depth {depth}, got {intercept.shape}"
            )
        if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(intercept))):
            raise ValueError("coef and intercept must be finite (no nan or inf)")
        n_features = coef.shape[1]
        if feature_names is None:
            feature_names = tuple(f"x{j}" for j in range(n_features))
        feature_names = tuple(str(name) for name in feature_names)
        if len(feature_names) != n_features:
            raise ValueError(
                f"feature_names has {len(feature_names)} names but coef has {n_features} columns"
            )
        classes = np.array(classes)
        if classes.shape != (2,):
            raise ValueError(f"classes must hold exactly two labels, got {classes.tolist()!r}")
        classes.setflags(write=False)
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
    def _check_X(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(
                f"X must be a 2-D array with {self.n_features} columns (the tree's features), "
                f"got shape {X.shape}"
            )
        if not np.all(np.isfinite(X)):
            raise ValueError("X contains nan or inf; impute or drop those rows first")
        return np.ascontiguousarray(X)

    def walk(self, X):
        """Nodes visited and hyperplane values, level by level: two (n, D) arrays."""
        X = self._check_X(X)
        n = X.shape[0]
        nodes = np.zeros((n, self.depth), dtype=np.int64)
        values = np.zeros((n, self.depth))
        node = np.zeros(n, dtype=np.int64)
        for level in range(self.depth):
            value = hyperplane_values(X, self._coef[node], self._intercept[node])
            nodes[:, level] = node
            values[:, level] = value
            node = 2 * node + 1 + (value > 0)
        return nodes, values

    def apply(self, X) -> np.ndarray:
        """Breadth-first leaf position (``2^D-1 .. 2^{D+1}-2``) reached by each row of ``X``."""
        nodes, values = self.walk(X)
        return 2 * nodes[:, -1] + 1 + (values[:, -1] > 0)

    def leaf_sign(self, positions) -> np.ndarray:
        """Class sign of leaf positions: ``-1`` for odd leaves, ``+1`` for even ones."""
        positions = np.asarray(positions, dtype=np.int64)
        first, last = 2**self.depth - 1, 2 ** (self.depth + 1) - 2
        if positions.size and (positions.min() < first or positions.max() > last):
            raise ValueError(f"leaf positions of a depth-{self.depth} tree are {first}..{last}")
        return leaf_sign(positions)

    def predict(self, X) -> np.ndarray:
        """The ensemble's own labels: ``classes[1]`` on even leaves, ``classes[0]`` on odd."""
        return self._classes[(self.leaf_sign(self.apply(X)) > 0).astype(np.int64)]

    def branch_sides(self, X) -> np.ndarray:
        """Side taken at every branch node: (n, 2^D-1) int8, -1 not reached, 0 left, 1 right."""
        nodes, values = self.walk(X)
        sides = np.full((nodes.shape[0], self.n_branch_nodes), -1, dtype=np.int8)
        rows = np.arange(nodes.shape[0])[:, None]
        sides[rows, nodes] = (values > 0).astype(np.int8)
        return sides

    def decision_path(self, x) -> list:
        """Path of one sample: list of ``(node, a.x + b, "left"|"right")``, root first."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 1:
            raise ValueError(f"decision_path takes one sample (1-D array), got shape {x.shape}")
        nodes, values = self.walk(x[None, :])
        return [
            (int(t), float(v), "right" if v > 0 else "left")
            for t, v in zip(nodes[0], values[0], strict=True)
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
            raise ValueError(
                f"tree depth {self.depth} differs from the problem's depth {problem.depth}"
            )
        return problem.objective(self._coef, self.apply(problem.X))

    # ------------------------------------------------------------------ rules
    def _raw_hyperplanes(self, scaler):
        if scaler is None:
            return self._coef, self._intercept
        scale = np.asarray(getattr(scaler, "scale_", None), dtype=np.float64)
        shift = np.asarray(getattr(scaler, "min_", None), dtype=np.float64)
        if scale.shape != (self.n_features,) or shift.shape != (self.n_features,):
            raise ValueError(
                f"scaler must be a fitted MinMaxScaler over the tree's {self.n_features} "
                f"features (scale_ and min_ of that length)"
            )
        # a . (x * scale_ + min_) + b = (a * scale_) . x + (b + a . min_)
        return self._coef * scale, self._intercept + self._coef @ shift

    def rule_table(self, feature_names=None, scaler=None) -> list:
        """The split of every branch node, breadth-first, as plain records.

        Parameters
        ----------
        feature_names : sequence of str, optional
            Defaults to the tree's feature names.
        scaler : fitted sklearn.preprocessing.MinMaxScaler, optional
            When given, splits are expressed in raw (unscaled) units:
            ``(a * scale_) . x + (b + a . min_) <= 0``.

        Returns
        -------
        list of dict
            Keys ``node``, ``level``, ``terms`` (list of ``(name, coef)`` for nonzero
            coefficients, full precision), ``intercept``, ``left``, ``right`` (child ids),
            ``last_level`` (children are leaves), ``text`` (rounded, human-readable) and
            ``univariate`` (a one-feature split solved for the feature, e.g.
            ``x3 >= 0.25``, else None).
        """
        names = self.feature_names if feature_names is None else tuple(map(str, feature_names))
        if len(names) != self.n_features:
            raise ValueError(
                f"feature_names has {len(names)} names but the tree has {self.n_features} features"
            )
        coef, intercept = self._raw_hyperplanes(scaler)
        table = []
        for t in range(self.n_branch_nodes):
            nonzero = np.flatnonzero(self._coef[t])
            terms = [(names[j], float(coef[t, j])) for j in nonzero]
            b = float(intercept[t])
            univariate = _univariate_text(terms, -b)
            if terms:
                text = _linear_text(terms, -b)
            else:
                side = "left" if self._intercept[t] <= 0 else "right"
                text = f"(no split: all samples go {side})"
            table.append(
                {
                    "node": t,
                    "level": int(node_level(t)),
                    "terms": terms,
                    "intercept": b,
                    "left": 2 * t + 1,
                    "right": 2 * t + 2,
                    "last_level": bool(node_level(t) == self.depth - 1),
                    "text": text,
                    "univariate": univariate,
                }
            )
        return table

    def rules(self, feature_names=None, scaler=None) -> str:
        """Human-readable rules, one line per branch node in breadth-first order.

        A split reads ``node t (level d): if <a.x <= -b> then <left> else <right>``; the
        children of a last-level node are leaves, shown with their class label. A node
        without coefficients reads ``(no split: all samples go left|right) -> <child>``.
        Coefficients are rounded to 4 significant digits; :meth:`rule_table` has them at
        full precision and explains ``scaler``.
        """
        lines = []
        for row in self.rule_table(feature_names, scaler):
            children = []
            for side, child in enumerate((row["left"], row["right"])):
                if row["last_level"]:
                    children.append(f"leaf {child} (class {self._classes[side]})")
                else:
                    children.append(f"node {child}")
            head = f"node {row['node']} (level {row['level']}): "
            if row["terms"]:
                condition = row["text"]
                if row["univariate"]:
                    condition += f" (i.e. {row['univariate']})"
                lines.append(f"{head}if {condition} then {children[0]} else {children[1]}")
            else:
                side = 0 if self._intercept[row["node"]] <= 0 else 1
                lines.append(f"{head}{row['text']} -> {children[side]}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        """Plain-JSON representation (lists, floats at full precision, strings)."""
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "depth": self.depth,
            "feature_names": list(self.feature_names),
            "classes": self._classes.tolist(),
            "coef": [[float(v) for v in row] for row in self._coef],
            "intercept": [float(v) for v in self._intercept],
        }

    @classmethod
    def from_dict(cls, data) -> SurrogateTree:
        """Rebuild a tree from :meth:`to_dict` output, validating it with clear errors."""
        if not isinstance(data, dict):
            raise TypeError(f"expected a dict from SurrogateTree.to_dict(), got {type(data)}")
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
            raise ValueError(f"surrogate tree dict is missing keys {missing}")
        if data["format"] != FORMAT:
            raise ValueError(f"not a surrogate tree: format is {data['format']!r}, not {FORMAT!r}")
        if data["format_version"] != FORMAT_VERSION:
            raise ValueError(
                f"unsupported surrogate tree format_version {data['format_version']!r}; this "
                f"version of the package reads version {FORMAT_VERSION}"
            )
        depth = data["depth"]
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
        n_branch, n_features = 2**depth - 1, len(data["feature_names"])
        coef = data["coef"]
        if (
            not isinstance(coef, list)
            or len(coef) != n_branch
            or any(not isinstance(row, list) or len(row) != n_features for row in coef)
        ):
            raise ValueError(
                f"coef must be {n_branch} lists (one per branch node of a depth-{depth} tree) "
                f"of {n_features} numbers (one per feature name)"
            )
        if not isinstance(data["intercept"], list) or len(data["intercept"]) != n_branch:
            raise ValueError(f"intercept must be a list of {n_branch} numbers for depth {depth}")
        try:
            coef_array = np.array(coef, dtype=np.float64).reshape(n_branch, n_features)
            intercept_array = np.array(data["intercept"], dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise ValueError(f"coef and intercept must hold numbers only: {error}") from None
        return cls(coef_array, intercept_array, depth, data["feature_names"], data["classes"])
