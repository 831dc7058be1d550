"""Fidelity, accuracy, proximity agreement and sparsity of a surrogate tree.

Definitions follow the paper's Results section: fidelity and accuracy are the fractions
of samples on which two labelings agree; the proximity agreement ``U`` is the fraction of
the ensemble's proximity pairs ``U_TE(m)`` that the surrogate puts in the same leaf.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from miret_governance.governance.ensembles.arrays import scaled
from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.measures.confusion import (
    class_fidelity,
    class_fidelity_metrics,
    class_metric_name,
    confusion,
    confusion_counts,
    confusion_frame,
)

__all__ = [  # the per-class figures of governance.confusion are re-exported
    "CHUNK_ROWS",
    "DETAIL_METRICS",
    "HEADLINE_METRICS",
    "PROXIMITY_ROWS",
    "Z_95",
    "accuracy",
    "class_fidelity",
    "class_fidelity_metrics",
    "class_metric_name",
    "column_count",
    "confusion",
    "effective_depth",
    "feature_counts",
    "fidelity",
    "fidelity_with_interval",
    "measured_on_test_rows",
    "peak_memory_bytes",
    "proximity_agreement",
    "surrogate_confusion",
    "surrogate_metrics",
    "wilson_interval",
]

HEADLINE_METRICS = (
    "test_fidelity",
    "train_fidelity",
    "n_features_used",
    "baseline_cart_test_fidelity",
    "test_proximity_agreement",
)
"""The metrics a reviewer reads first (short names, no prefix); the solver's internals
are ``solver.*``."""
DETAIL_METRICS = (
    "test_fidelity_ci_low",
    "test_fidelity_ci_high",
    "n_test_rows",
    "test_fidelity_missing_rows",
    "n_test_missing_rows",
    "cv_fidelity",
    "baseline_cart_train_fidelity",
    "baseline_cart_cv_fidelity",
    "baseline_cart_n_features",
    "train_accuracy_surrogate",
    "test_accuracy_surrogate",
    "train_accuracy_ensemble",
    "test_accuracy_ensemble",
    "train_proximity_pairs",
    "test_proximity_pairs",
    "n_columns_used",
    "n_encoded_features_used",
    "n_feature_uses",
    "effective_depth",
)
"""The other metrics of :func:`surrogate_metrics` and the CART baseline, in the order
they are shown after the headline ones."""
Z_95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""
CHUNK_ROWS = 100_000
"""Rows scored at a time: bounds memory to one chunk of rows x trees leaf ids."""
PROXIMITY_ROWS = 5_000
"""Largest sample on which proximity pairs (quadratic in the rows) are counted."""


def _agreement(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.ndim != 1:
        raise InvalidInputError(
            f"expected two 1-D label arrays of equal length, got {a.shape} and {b.shape}"
        )
    if a.size == 0:
        raise InvalidInputError("cannot score an empty set of samples")
    return float(np.mean(a == b))


def wilson_interval(agreeing: int, rows: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default).

    Unlike the normal approximation it stays inside ``[0, 1]`` and is honest for few rows
    or a proportion near 1, which is where surrogate fidelities sit: 86 of 86 agreeing
    rows give ``(0.957, 1.0)``, not ``(1.0, 1.0)``.

    Parameters
    ----------
    agreeing : int
        Rows on which surrogate and ensemble agree.
    rows : int
        Rows scored, at least 1.
    z : float
        Normal quantile of the interval's confidence.

    Returns
    -------
    (float, float)
        Lower and upper end.
    """
    if rows < 1 or not 0 <= agreeing <= rows:
        raise InvalidInputError(f"need 0 <= agreeing <= rows and rows >= 1, got {agreeing}/{rows}")
    share = agreeing / rows
    center = (share + z * z / (2 * rows)) / (1 + z * z / rows)
    half = z / (1 + z * z / rows) * np.sqrt(share * (1 - share) / rows + z * z / (4 * rows**2))
    low = 0.0 if agreeing == 0 else max(0.0, float(center - half))
    return low, 1.0 if agreeing == rows else min(1.0, float(center + half))


def fidelity_with_interval(metrics) -> str:
    """Test fidelity for people, with its 95% Wilson interval and the rows it rests on.

    Percentages are rounded to one decimal (the raw values stay in the metrics).

    Parameters
    ----------
    metrics : mapping
        Metrics of :func:`surrogate_metrics` (``test_fidelity``, ``test_fidelity_ci_low``,
        ``test_fidelity_ci_high``, ``n_test_rows``).

    Returns
    -------
    str
        ``""`` without a finite test fidelity; the bare percentage when the interval
        is not recorded.

    Examples
    --------
    >>> low, high = wilson_interval(84, 86)
    >>> fidelity_with_interval(
    ...     {"test_fidelity": 84 / 86, "test_fidelity_ci_low": low,
    ...      "test_fidelity_ci_high": high, "n_test_rows": 86.0})
    '97.7% (95% CI 91.9-99.4%, n=86)'
    """
    value = metrics.get("test_fidelity")
    if value is None or not np.isfinite(value):
        return ""
    text = f"{100 * value:.1f}%"
    if "test_fidelity_ci_low" not in metrics or "n_test_rows" not in metrics:
        return text
    low, high = metrics["test_fidelity_ci_low"], metrics["test_fidelity_ci_high"]
    return f"{text} (95% CI {100 * low:.1f}-{100 * high:.1f}%, n={int(metrics['n_test_rows'])})"


def measured_on_test_rows(name: str) -> bool:
    """Whether metric ``name`` is computed on the test rows (``test_*``,
    ``baseline_cart_test_fidelity``, ``n_test_rows``), not on the training rows."""
    return "test" in name.replace(".", "_").split("_")


def surrogate_confusion(
    ensemble, tree, X, *, tree_scaler=None, chunk_rows: int = CHUNK_ROWS
) -> pd.DataFrame:
    """The :func:`confusion` table of the surrogate against the ensemble on rows ``X``
    (the ensemble's working space, as in :func:`surrogate_metrics`), counted in chunks
    of ``chunk_rows`` rows, over ``ensemble.classes``."""
    X = np.asarray(X, dtype=np.float64)
    classes = np.asarray(ensemble.classes)
    counts = np.zeros((len(classes), len(classes)), dtype=np.int64)
    for rows in _chunks(X.shape[0], int(chunk_rows)):
        part = X[rows]
        labels = tree.predict(part if tree_scaler is None else scaled(tree_scaler, part))
        counts += confusion_counts(ensemble.predict(part), labels, classes)
    return confusion_frame(counts, classes)


def fidelity(ensemble_labels, surrogate_labels) -> float:
    """Fraction of samples where the surrogate reproduces the ensemble's label."""
    return _agreement(ensemble_labels, surrogate_labels)


def accuracy(y_true, predicted) -> float:
    """Fraction of samples whose predicted label equals the ground truth."""
    return _agreement(y_true, predicted)


def proximity_agreement(pairs, leaves) -> tuple[float, int]:
    """Share of the ensemble's proximity pairs that share a surrogate leaf.

    Parameters
    ----------
    pairs : scipy.sparse matrix of shape (n, n)
        Upper-triangular pairs ``(i, k)``, ``i < k``, with ``m_ik >= m``
        (:func:`governance.vite.proximity_pairs`).
    leaves : array of shape (n,)
        Surrogate leaf of each sample.

    Returns
    -------
    (fraction, n_pairs)
        ``fraction`` is ``nan`` when there is no pair (the paper's "-").
    """
    coo = pairs.tocoo()
    n_pairs = int(coo.nnz)
    if n_pairs == 0:
        return float("nan"), 0
    leaves = np.asarray(leaves)
    return float(np.mean(leaves[coo.row] == leaves[coo.col])), n_pairs


def feature_counts(tree) -> tuple[int, int]:
    """Distinct features used by a surrogate tree, and their multiset count (uses)."""
    used = np.asarray(tree.coef) != 0
    return int(used.any(axis=0).sum()), int(used.sum())


def column_count(tree, encoding=None) -> int:
    """Distinct input columns a surrogate tree reads: with ``encoding`` (a pipeline's
    :class:`governance.encoding.Encoding`, whose columns are the tree's features) an
    encoded column counts as its original column, so the one-hot columns of one
    categorical column count once; without, its distinct features."""
    used = np.flatnonzero((np.asarray(tree.coef) != 0).any(axis=0))
    return int(used.size) if encoding is None else encoding.original_count(used)


def _chunks(n: int, chunk_rows: int):
    for start in range(0, n, chunk_rows):
        yield slice(start, min(start + chunk_rows, n))


def _reached_sides(tree, X, chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per branch node: whether some sample of ``X`` goes left, and whether one goes right."""
    left = np.zeros(tree.n_branch_nodes, dtype=bool)
    right = np.zeros(tree.n_branch_nodes, dtype=bool)
    for rows in _chunks(X.shape[0], chunk_rows):
        sides = np.asarray(tree.branch_sides(X[rows]))
        left |= (sides == 0).any(axis=0)
        right |= (sides == 1).any(axis=0)
    return left, right


def effective_depth(tree, X, chunk_rows: int = CHUNK_ROWS) -> int:
    """Depth of the tree counting only splits that separate the samples of ``X``.

    A branch node is effective when the samples reaching it go to both sides; dummy
    nodes (everything to one side, as in the paper's Cleveland tree) do not count.
    ``X`` is read in chunks of ``chunk_rows`` rows.
    """
    X = np.asarray(X, dtype=np.float64)
    left, right = _reached_sides(tree, X, chunk_rows)
    effective = left & right
    deepest = 0
    for rows in _chunks(X.shape[0], chunk_rows):
        sides = np.asarray(tree.branch_sides(X[rows]))
        reached_effective = (sides >= 0) & effective[None, :]
        deepest = max(deepest, int(reached_effective.sum(axis=1).max(initial=0)))
    return deepest


def peak_memory_bytes() -> int:
    """Peak resident memory of this process so far, in bytes (``ru_maxrss``)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # kilobytes on Linux


def _proximity_sample(n: int, max_rows: int, random_state) -> np.ndarray:
    if n <= max_rows:
        return np.arange(n)
    return np.sort(np.random.default_rng(random_state).choice(n, size=max_rows, replace=False))


def surrogate_metrics(
    ensemble,
    tree,
    X_train,
    X_test=None,
    y_train=None,
    y_test=None,
    proximity_threshold: float = 0.9,
    *,
    tree_scaler=None,
    chunk_rows: int = CHUNK_ROWS,
    proximity_rows: int = PROXIMITY_ROWS,
    random_state=0,
) -> dict[str, float]:
    """All metrics of a surrogate against its ensemble, keyed as the flavor logs them.

    Fidelity and accuracy are counted on every row, in chunks of ``chunk_rows`` rows,
    so memory stays bounded (one chunk of ``rows x trees`` leaves at a time) for
    millions of rows. Proximity pairs grow quadratically with the rows, so the
    proximity agreement is computed on a uniform random sample of at most
    ``proximity_rows`` rows of each split (all rows when there are fewer); the number of
    rows used is reported as ``*_proximity_rows``.

    Parameters
    ----------
    ensemble : governance.ensemble.Ensemble
    tree : governance.miret.tree.SurrogateTree
    X_train, X_test : array-like
        Inputs in the ensemble's working space (after its own preprocessing).
    y_train, y_test : array-like, optional
        Ground-truth labels in the ensemble's class labels.
    proximity_threshold : float
        ``m`` of the proximity pairs ``U_TE(m)``.
    tree_scaler : fitted MinMaxScaler, optional
        Maps the ensemble's working space to the tree's normalized space (the
        surrogate's ``input_scaler_`` when the ensemble has no scaler of its own).
    chunk_rows : int
        Rows per chunk for fidelity, accuracy and effective depth.
    proximity_rows : int
        Largest sample of rows on which proximity pairs are computed.
    random_state : int or None
        Seed of the proximity sample.

    Returns
    -------
    dict
        ``train_fidelity``, ``train_proximity_pairs``, ``train_proximity_rows``,
        ``n_features_used`` and ``n_columns_used`` (both :func:`column_count`: a
        pipeline's or a native categorical column counts once), ``n_feature_uses``,
        with an ``ensemble.encoding`` ``n_encoded_features_used`` (distinct encoded
        columns), ``effective_depth``; with test data
        ``test_fidelity`` with its 95% Wilson interval ``test_fidelity_ci_low`` /
        ``test_fidelity_ci_high`` and ``n_test_rows``, ``test_proximity_pairs``,
        ``test_proximity_rows`` and (when
        pairs exist) ``test_proximity_agreement``; with test rows that miss a value (at
        least one NaN) ``test_fidelity_missing_rows``, the fidelity on those rows alone,
        and ``n_test_missing_rows``; with test data, for every class the ensemble gives
        to a test row, its fidelity (the share of those rows the surrogate gives the
        same class) under :func:`class_metric_name` ``("test_fidelity", class)``; with
        labels the ``*_accuracy_surrogate`` and ``*_accuracy_ensemble`` keys.
    """
    from miret_governance.governance.measures.vite import proximity_pairs

    if int(chunk_rows) < 1 or int(proximity_rows) < 2:
        raise InvalidInputError("chunk_rows must be >= 1 and proximity_rows >= 2")

    def to_tree(X):
        return X if tree_scaler is None else scaled(tree_scaler, X)

    classes = np.asarray(ensemble.classes)
    metrics: dict[str, float] = {}
    splits = {"train": (X_train, y_train), "test": (X_test, y_test)}
    for split, (X, y) in splits.items():
        if X is None:
            continue
        X = np.asarray(X, dtype=np.float64)
        if X.shape[0] == 0:
            raise InvalidInputError(f"cannot score an empty set of samples ({split})")
        y = None if y is None else np.asarray(y)
        if y is not None and y.shape != (X.shape[0],):
            raise InvalidInputError(f"y_{split} has shape {y.shape}; expected ({X.shape[0]},)")
        agree = correct_surrogate = correct_ensemble = agree_missing = n_missing = 0
        counts = np.zeros((len(classes), len(classes)), dtype=np.int64)
        for rows in _chunks(X.shape[0], int(chunk_rows)):
            ensemble_labels = ensemble.predict(X[rows])
            surrogate_labels = tree.predict(to_tree(X[rows]))
            if split == "test":
                counts += confusion_counts(ensemble_labels, surrogate_labels, classes)
            agree += int(np.sum(ensemble_labels == surrogate_labels))
            incomplete = np.isnan(X[rows]).any(axis=1)
            agree_missing += int(np.sum((ensemble_labels == surrogate_labels) & incomplete))
            n_missing += int(incomplete.sum())
            if y is not None:
                correct_surrogate += int(np.sum(y[rows] == surrogate_labels))
                correct_ensemble += int(np.sum(y[rows] == ensemble_labels))
        metrics[f"{split}_fidelity"] = agree / X.shape[0]
        if split == "test":
            low, high = wilson_interval(agree, X.shape[0])
            metrics.update(
                test_fidelity_ci_low=low, test_fidelity_ci_high=high, n_test_rows=float(X.shape[0])
            )
            if n_missing:
                metrics["test_fidelity_missing_rows"] = agree_missing / n_missing
                metrics["n_test_missing_rows"] = float(n_missing)
            metrics.update(class_fidelity_metrics(confusion_frame(counts, classes)))
        if y is not None:
            metrics[f"{split}_accuracy_surrogate"] = correct_surrogate / X.shape[0]
            metrics[f"{split}_accuracy_ensemble"] = correct_ensemble / X.shape[0]
        sample = X[_proximity_sample(X.shape[0], int(proximity_rows), random_state)]
        agreement, n_pairs = float("nan"), 0  # a threshold above 1 asks for no pairs
        if proximity_threshold <= 1:
            agreement, n_pairs = proximity_agreement(
                proximity_pairs(ensemble, sample, proximity_threshold),
                tree.apply(to_tree(sample)),
            )
        metrics[f"{split}_proximity_pairs"] = float(n_pairs)
        metrics[f"{split}_proximity_rows"] = float(sample.shape[0])
        if split == "test" and n_pairs:
            metrics["test_proximity_agreement"] = agreement
    distinct, uses = feature_counts(tree)
    encoding = getattr(ensemble, "encoding", None)
    metrics["n_features_used"] = float(column_count(tree, encoding))
    metrics["n_columns_used"] = metrics["n_features_used"]
    if encoding is not None:
        metrics["n_encoded_features_used"] = float(distinct)
    metrics["n_feature_uses"] = float(uses)
    metrics["effective_depth"] = float(
        effective_depth(tree, to_tree(np.asarray(X_train, dtype=np.float64)), int(chunk_rows))
    )
    return metrics
