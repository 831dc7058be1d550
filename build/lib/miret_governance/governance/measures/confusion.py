"""Per-class figures of a surrogate against its ensemble, for k >= 2 classes.

A :func:`confusion` table counts rows by the ensemble's label (rows) and the
surrogate's (columns); a class's fidelity is its diagonal cell over its row: the share
of the rows the ensemble gives the class that the surrogate gives it too. Metric keys
name the class through :func:`class_metric_name`.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from miret_governance.governance.errors import InvalidInputError

CLASS_FIDELITY_PREFIX = "test_fidelity"
"""Per-class test fidelity is logged as ``class_metric_name(CLASS_FIDELITY_PREFIX, c)``."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def class_metric_name(prefix: str, label) -> str:
    """The metric key of one class: ``f"{prefix}_class_{safe}"``, where ``safe`` is
    ``str(label)`` with every character outside ``[A-Za-z0-9_.-]`` replaced by ``_``.

    Examples
    --------
    >>> class_metric_name("test_fidelity", "grade A")
    'test_fidelity_class_grade_A'
    >>> class_metric_name("test_fidelity", 2)
    'test_fidelity_class_2'
    """
    return f"{prefix}_class_{_UNSAFE.sub('_', str(label))}"


def _class_index(labels, classes: np.ndarray, what: str) -> np.ndarray:
    """Index in ``classes`` of every label, or ValueError naming labels outside them."""
    match = np.asarray(labels)[:, None] == classes[None, :]
    outside = ~match.any(axis=1)
    if outside.any():
        found = pd.unique(np.asarray(labels)[outside])[:5].tolist()
        raise InvalidInputError(
            f"{what} labels {found} are not among the classes {classes.tolist()}; give the "
            "ensemble's classes"
        )
    return match.argmax(axis=1)


def confusion_counts(ensemble_labels, surrogate_labels, classes: np.ndarray) -> np.ndarray:
    """The ``k x k`` counts of :func:`confusion` as an array (``classes`` an ndarray)."""
    counts = np.zeros((len(classes), len(classes)), dtype=np.int64)
    rows = _class_index(ensemble_labels, classes, "ensemble")
    columns = _class_index(surrogate_labels, classes, "surrogate")
    np.add.at(counts, (rows, columns), 1)
    return counts


def confusion_frame(counts: np.ndarray, classes) -> pd.DataFrame:
    """``k x k`` counts as the :func:`confusion` table (index ``ensemble``, columns
    ``surrogate``)."""
    return pd.DataFrame(
        counts,
        index=pd.Index(list(classes), name="ensemble"),
        columns=pd.Index(list(classes), name="surrogate"),
    )


def confusion(ensemble_labels, surrogate_labels, classes) -> pd.DataFrame:
    """Rows counted by the ensemble's label (index) and the surrogate's (columns).

    Parameters
    ----------
    ensemble_labels, surrogate_labels : array-like of shape (n,)
    classes : array-like of shape (k,)
        The ensemble's classes, in their order; every label must be one of them.

    Returns
    -------
    DataFrame
        ``k x k`` integer counts; the diagonal holds the rows where both agree.

    Examples
    --------
    >>> confusion(["a", "b", "b"], ["a", "a", "b"], ["a", "b"]).to_numpy().tolist()
    [[1, 0], [1, 1]]
    """
    a, b = np.asarray(ensemble_labels), np.asarray(surrogate_labels)
    if a.shape != b.shape or a.ndim != 1:
        raise InvalidInputError(
            f"expected two 1-D label arrays of equal length, got {a.shape} and {b.shape}"
        )
    classes = np.asarray(classes)
    return confusion_frame(confusion_counts(a, b, classes), classes)


def class_fidelity(table: pd.DataFrame) -> pd.DataFrame:
    """Per class, from a :func:`confusion` table: the rows the ensemble gives the class,
    those the surrogate also gives it, and their share (NaN without rows).

    Returns
    -------
    DataFrame
        Columns ``class``, ``ensemble_rows``, ``agreeing_rows``, ``fidelity``, one row
        per class in the table's order.
    """
    counts = table.to_numpy()
    rows = counts.sum(axis=1)
    agreeing = np.diag(counts)
    shares = np.where(rows > 0, agreeing / np.maximum(rows, 1), np.nan)
    return pd.DataFrame(
        {
            "class": list(table.index),
            "ensemble_rows": rows.astype(np.int64),
            "agreeing_rows": agreeing.astype(np.int64),
            "fidelity": shares,
        }
    )


def class_fidelity_metrics(table: pd.DataFrame, prefix: str = CLASS_FIDELITY_PREFIX) -> dict:
    """``{class_metric_name(prefix, c): fidelity}`` for every class of a :func:`confusion`
    table that the ensemble gives to at least one row."""
    metrics, named = {}, {}
    for row in class_fidelity(table).itertuples(index=False):
        key = class_metric_name(prefix, row[0])
        if key in named:
            raise InvalidInputError(
                f"classes {named[key]!r} and {row[0]!r} both give the metric name {key}; "
                "rename one of them (letters, digits, '_', '.' and '-' are kept)"
            )
        named[key] = row[0]
        if row.ensemble_rows > 0:
            metrics[key] = float(row.fidelity)
    return metrics
