"""The data of one MIRET instance, derived from a tree ensemble and normalized samples.

Everything the MILP needs is computed once here (paper, section "Incorporating
TE-driven information"):

* ``y``: the ensemble's labels ``F_TE(x^i)`` as class indices ``0 .. k-1`` into
  ``classes`` (two classes: ``0`` is the paper's ``-1``, ``1`` its ``+1``);
* ``weight``: the class probability ``p^i`` (:func:`governance.vite.class_probability`);
* ``frequency``: the level frequency ``f_{d,j}`` with the ``|E| 2^d`` denominator
  (eq. ``miret_frequency``);
* ``allowed``: ``J_gamma(d) = {j : f_{d,j} > gamma_d}`` (eq. ``def:gamma_d``), where
  ``gamma_d`` is the ``h``-th percentile of the positive frequencies of level ``d``
  (section "Hyperparameters setting"; ``h = 0`` means ``gamma_d = 0``). Deviation from
  the paper: the most frequent feature(s) of a level with any positive frequency are
  always allowed. When every tree splits its root on one feature the positive root
  frequencies are the single value ``f``, its percentile is ``f`` and the strict rule
  ``f > gamma_d`` would leave the root with no feature at all (a dummy split);
  keeping the level's maximum never empties a level the ensemble uses;
* ``component``: components of the proximity pairs ``U_TE(m)`` (eq. ``proxiset``),
  bounded in size (:func:`governance.miret.components.bounded_components`). The
  proximity constraints ``z_i = z_k`` (eq. ``cons:prox``) are transitive, so all samples
  of a component
  must share a leaf. Deviation from the paper: its instances had a few hundred rows;
  on a larger sample the pairs chain (``i~k``, ``k~l``, ... each close, the ends not)
  and the closure merges most rows into a few components, which leaves only
  nearly constant trees feasible (2000 rows of a 30-feature forest: 179 components,
  surrogate fidelity 0.50 against CART's 0.82). Pairs are therefore joined in
  decreasing proximity and a join that would make a component larger than
  :func:`~governance.miret.components.component_cap` rows is refused; those pairs are
  dropped (counted in :meth:`MiretProblem.summary`). Where no component reaches the cap the components
  are exactly the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from miret_governance.governance.ensembles.arrays import feature_matrix, scaled
from miret_governance.governance.errors import InvalidInputError, InvalidTypeError
from miret_governance.governance.miret.problem.components import bounded_components, component_cap
from miret_governance.governance.miret.problem.layout import alternating_classes, node_level

FORMULATIONS = ("miret", "basic")
BOUND_TOLERANCE = 1e-9


@dataclass(frozen=True)
class MiretProblem:
    """One MIRET instance.

    Attributes
    ----------
    X : ndarray of shape (n, p)
        Normalized samples in ``[0, 1]``.
    y : ndarray of shape (n,), int
        Ensemble labels as class indices ``0 .. k-1`` into ``classes``.
    weight : ndarray of shape (n,)
        Class probability ``p^i`` (misfit cost of sample ``i``).
    frequency : ndarray of shape (D, p)
        Level frequency ``f_{d,j}`` (``|E| 2^d`` denominator).
    allowed : ndarray of shape (D, p), bool
        ``J_gamma(d)``: the features a split at level ``d`` may use.
    component : ndarray of shape (n,), int
        Proximity component ids ``0..C-1``; equal ids must share a leaf.
    depth : int
    alpha : float
    epsilon : float
    formulation : {"miret", "basic"}
    feature_names : tuple of str
    classes : ndarray of shape (k,)
        The ensemble's labels, ``k >= 2``.
    n_pairs : int
        Pairs of ``U_TE(m)`` in the sample.
    n_pairs_dropped : int
        Pairs left out of the components by the size cap (their samples may part).
    component_cap : int
        Largest component size allowed (0: no proximity constraint).
    leaf_class : ndarray of shape (2^D,), int, optional
        Fixed class index ``c_l`` of every leaf for the MILP (:attr:`leaf_classes`);
        None: the paper's alternating classes (two classes only).
    """

    X: np.ndarray
    y: np.ndarray
    weight: np.ndarray
    frequency: np.ndarray
    allowed: np.ndarray
    component: np.ndarray
    depth: int
    alpha: float
    epsilon: float
    formulation: str
    feature_names: tuple
    classes: np.ndarray
    n_pairs: int = 0
    n_pairs_dropped: int = 0
    component_cap: int = 0
    leaf_class: np.ndarray | None = None

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def leaf_classes(self) -> np.ndarray:
        """Class index ``c_l`` of every leaf, left to right: ``leaf_class`` when set, else
        the paper's alternating classes (odd leaf 0, even leaf 1) of a two-class problem.

        Raises
        ------
        ValueError
            More than two classes and no ``leaf_class`` (set it with
            :meth:`with_leaf_class`, e.g. from a warm start's tree).
        """
        if self.leaf_class is not None:
            return self.leaf_class
        if self.n_classes != 2:
            raise InvalidInputError(
                f"a problem with {self.n_classes} classes has no default leaf classes; give "
                "them with problem.with_leaf_class(tree.leaf_class) (e.g. the warm start's)"
            )
        return alternating_classes(self.depth)

    @property
    def symmetry_breaking(self) -> bool:
        """Whether improved MIRET's ``b_t >= 0`` above the last level applies. It negates
        a node's hyperplane and exchanges its two subtrees, which maps the alternating
        two-class leaf classes onto themselves but would exchange fixed leaf classes of
        more than two classes, so it is used with two classes only."""
        return self.formulation == "miret" and self.n_classes == 2

    def with_leaf_class(self, leaf_class) -> MiretProblem:
        """The same problem with the leaf classes ``c_l`` fixed to ``leaf_class``."""
        leaf_class = np.array(leaf_class, dtype=np.int64)
        if (
            leaf_class.shape != (2**self.depth,)
            or not ((leaf_class >= 0) & (leaf_class < self.n_classes)).all()
        ):
            raise InvalidInputError(
                f"leaf_class must hold {2**self.depth} class indices in 0..{self.n_classes - 1}"
                f", got {leaf_class.tolist()!r}"
            )
        leaf_class.setflags(write=False)
        return replace(self, leaf_class=leaf_class)

    @property
    def n_branch(self) -> int:
        """Number of branch nodes ``2^D - 1``."""
        return 2**self.depth - 1

    @property
    def n_components(self) -> int:
        return int(self.component.max()) + 1 if self.component.size else 0

    @property
    def node_level(self) -> np.ndarray:
        """Level of each branch node ``t`` (:func:`governance.miret.tree.node_level`)."""
        return node_level(np.arange(self.n_branch))

    @property
    def allowed_features(self) -> list:
        """Names of the features of ``J_gamma(d)``, one list per level ``d``."""
        return [[self.feature_names[j] for j in np.flatnonzero(row)] for row in self.allowed]

    @property
    def penalty(self) -> np.ndarray:
        """``alpha / f_{d,j}`` where ``j`` is allowed at level ``d``, else 0; shape (D, p)."""
        out = np.zeros_like(self.frequency)
        out[self.allowed] = self.alpha / self.frequency[self.allowed]
        return out

    def objective(self, coef, leaves, leaf_class=None) -> float:
        """MIRET objective of a tree given its coefficients and the leaves of the samples.

        ``sum_i p^i [c_leaf(i) != y_i] + sum_t sum_j penalty[level(t), j] [a_tj != 0]``.

        Parameters
        ----------
        coef : array of shape (2^D - 1, p)
            Split coefficients ``a_t``.
        leaves : array of shape (n,)
            Leaf position (``2^D - 1 .. 2^{D+1} - 2``) of every sample.
        leaf_class : array of shape (2^D,), optional
            The tree's leaf classes ``c_l``; default :attr:`leaf_classes`.
        """
        coef = np.asarray(coef, dtype=np.float64)
        leaf_class = self.leaf_classes if leaf_class is None else np.asarray(leaf_class)
        predicted = leaf_class[np.asarray(leaves, dtype=np.int64) - self.n_branch]
        misfit = float(self.weight[predicted != self.y].sum())
        used = coef != 0
        return misfit + float((self.penalty[self.node_level] * used).sum())

    def summary(self) -> dict:
        """Sizes of the instance (plain ints, for reports)."""
        return {
            "n_samples": self.n_samples,
            "n_features": self.n_features,
            "depth": int(self.depth),
            "n_components": self.n_components,
            "largest_component": int(np.bincount(self.component).max(initial=0)),
            "component_cap": int(self.component_cap),
            "n_proximity_pairs": int(self.n_pairs),
            "n_proximity_pairs_kept": int(self.n_pairs - self.n_pairs_dropped),
            "n_proximity_pairs_dropped": int(self.n_pairs_dropped),
            "n_allowed_per_level": [int(v) for v in self.allowed.sum(axis=1)],
            "allowed_features": self.allowed_features,
            "n_positive": int((self.y == 1).sum()),
            "class_counts": [int(v) for v in np.bincount(self.y, minlength=self.n_classes)],
        }


DEFAULT_MAX_DEPTH = 4
"""Deepest surrogate fitted when no depth is asked for (the paper's depths are 2 to 4)."""
PAPER_DEFAULTS = {
    "alpha": 0.5,
    "gamma_percentile": 100 / 3,
    "proximity_threshold": 0.9,
    "epsilon": 1e-3,
    "formulation": "miret",
}
"""The paper's hyperparameters, the defaults of :func:`build_problem` and of
``MiretSurrogate``, whose ``get_params()`` every other layer reads."""


def default_depth(ensemble) -> int:
    """Surrogate depth when none is given: the ensemble's depth, at most
    :data:`DEFAULT_MAX_DEPTH` (a forest grown with ``max_depth=None`` is explained at 4)."""
    return int(min(ensemble.max_depth, DEFAULT_MAX_DEPTH))


def class_index(labels, classes) -> np.ndarray:
    """Index into ``classes`` of every label (int64); labels outside ``classes`` raise."""
    labels, classes = np.asarray(labels), np.asarray(classes)
    match = labels[:, None] == classes[None, :]
    if not match.any(axis=1).all():
        raise InvalidInputError(
            f"labels {np.unique(labels[~match.any(axis=1)]).tolist()!r} are not among the "
            f"classes {classes.tolist()!r}"
        )
    return np.argmax(match, axis=1).astype(np.int64)


def check_unit_data(X, n_features: int, feature_names=None) -> np.ndarray:
    """Validate normalized input and return it as a float array clipped into [0, 1].

    Parameters
    ----------
    X : array-like or DataFrame of shape (n, p)
        A DataFrame with the ensemble's column names is reordered to that order.
    n_features : int
    feature_names : sequence of str, optional

    Raises
    ------
    ValueError
        Wrong shape or columns, non-finite values, or values outside ``[0, 1]``.
    """
    names = feature_names if feature_names is not None else [f"x{j}" for j in range(n_features)]
    X = np.array(feature_matrix(X, names), dtype=np.float64)
    low, high = X.min(), X.max()
    if low < -BOUND_TOLERANCE or high > 1 + BOUND_TOLERANCE:
        raise InvalidInputError(
            f"X must be normalized into [0, 1] (found values from {low:g} to {high:g}); "
            "scale it with the MinMaxScaler fitted on the training data (ensemble.transform)"
        )
    return np.clip(X, 0.0, 1.0)


def allowed_features(frequency: np.ndarray, gamma_percentile: float) -> np.ndarray:
    """``J_gamma(d)`` of every level, never empty on a level with a positive frequency.

    ``f_{d,j} > gamma_d`` (paper) or ``f_{d,j} = max_j f_{d,j} > 0`` (the level's most
    frequent features; see the module docstring for why).
    """
    strict = frequency > _thresholds(frequency, gamma_percentile)[:, None]
    top = frequency.max(axis=1, keepdims=True)
    return strict | ((frequency == top) & (top > 0))


def _thresholds(frequency: np.ndarray, gamma_percentile: float) -> np.ndarray:
    """``gamma_d``: the h-th percentile (linear) of the positive frequencies of level d."""
    gamma = np.zeros(frequency.shape[0])
    if gamma_percentile == 0:
        return gamma
    for d, row in enumerate(frequency):
        positive = row[row > 0]
        if positive.size:
            gamma[d] = np.percentile(positive, gamma_percentile)
    return gamma


def build_problem(X, ensemble, depth=None, scaler=None, **hyperparameters) -> MiretProblem:
    """Compute a MIRET instance from an ensemble and samples.

    Parameters
    ----------
    X : array-like of shape (n, p)
        Samples in the units the ensemble's trees split on (after its preprocessing).
        Without ``scaler`` they must be normalized into ``[0, 1]``.
    ensemble : governance.ensemble.Ensemble
    depth : int, optional
        Depth ``D`` of the surrogate; default :func:`default_depth`. A smaller depth uses
        the frequencies of the ensemble's first ``D`` levels; a larger one is refused
        (the ensemble has no frequencies for deeper levels).
    scaler : fitted MinMaxScaler, optional
        Maps ``X`` into the MILP's normalized space (clipped into ``[0, 1]``); the
        ensemble's labels, probabilities and proximities are computed on ``X`` itself.
    **hyperparameters
        Any of :data:`PAPER_DEFAULTS` (the others keep the paper's values):
    alpha : float
        Weight of the sparsity penalty.
    gamma_percentile : float
        ``h`` in ``[0, 100]``; ``0`` allows every feature the ensemble uses at a level.
    proximity_threshold : float
        ``m`` in ``(0, 1]``: pairs with proximity ``>= m`` share a leaf; a value above 1
        means no proximity constraint.
    epsilon : float
        Gap that models the strict inequality of a right branch.
    formulation : {"miret", "basic"}
        Improved MIRET or b-MIRET.
    """
    from miret_governance.governance.measures import vite

    unknown = sorted(set(hyperparameters) - set(PAPER_DEFAULTS))
    if unknown:
        raise InvalidTypeError(
            f"unknown MIRET hyperparameters {unknown}; known: {sorted(PAPER_DEFAULTS)}"
        )
    chosen = {**PAPER_DEFAULTS, **hyperparameters}
    alpha, gamma_percentile, epsilon = (
        chosen["alpha"],
        chosen["gamma_percentile"],
        chosen["epsilon"],
    )
    proximity_threshold, formulation = chosen["proximity_threshold"], chosen["formulation"]

    if formulation not in FORMULATIONS:
        raise InvalidInputError(f"formulation must be one of {FORMULATIONS}, got {formulation!r}")
    if not 0 <= gamma_percentile <= 100:
        raise InvalidInputError(f"gamma_percentile must be in [0, 100], got {gamma_percentile}")
    if alpha < 0:
        raise InvalidInputError(f"alpha must be non-negative, got {alpha}")
    if not 0 < epsilon < 1:
        raise InvalidInputError(f"epsilon must be in (0, 1), got {epsilon}")
    ens_depth = ensemble.max_depth
    depth = default_depth(ensemble) if depth is None else int(depth)
    if ens_depth < 1:
        raise InvalidInputError("the ensemble's trees have no split; there is nothing to explain")
    if not 1 <= depth <= ens_depth:
        raise InvalidInputError(
            f"depth must be between 1 and the ensemble's depth {ens_depth}, got {depth}; "
            "level frequencies are only known for the ensemble's levels"
        )
    if scaler is None:
        X = check_unit_data(X, ensemble.n_features, ensemble.feature_names)
        unit = X
    else:
        X = np.asarray(X, dtype=np.float64)
        unit = np.clip(scaled(scaler, X), 0.0, 1.0)
    ensemble = ensemble.weighted_by_data(X)

    classes = np.asarray(ensemble.classes)
    y = class_index(ensemble.predict(X), classes)
    weight = np.asarray(vite.class_probability(ensemble, X), dtype=np.float64)
    levels = vite.level_frequency(ensemble, denominator="nodes")
    frequency = levels.loc[list(ensemble.feature_names), list(range(depth))].to_numpy(float).T
    allowed = allowed_features(frequency, gamma_percentile)
    n_pairs = dropped = cap = 0
    if proximity_threshold > 1:  # no pair can reach it: every sample is its own component
        component = np.arange(X.shape[0], dtype=np.int64)
    else:
        pairs = vite.proximity_pairs(ensemble, X, proximity_threshold)
        cap = component_cap(X.shape[0], depth)
        component, dropped = bounded_components(X.shape[0], pairs, cap)
        n_pairs = int(pairs.nnz)

    for array in (unit, y, weight, frequency, allowed, component):
        array.setflags(write=False)
    return MiretProblem(
        X=unit,
        y=y,
        weight=weight,
        frequency=frequency,
        allowed=allowed,
        component=component,
        depth=depth,
        alpha=float(alpha),
        epsilon=float(epsilon),
        formulation=formulation,
        feature_names=tuple(ensemble.feature_names),
        classes=classes,
        n_pairs=n_pairs,
        n_pairs_dropped=dropped,
        component_cap=cap,
    )
