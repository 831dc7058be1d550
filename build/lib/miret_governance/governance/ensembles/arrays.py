"""Array helpers shared by the ensemble view and the surrogate tree, and a MinMaxScaler as
plain numbers (the surrogate's JSON)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from miret_governance.governance.errors import InvalidInputError

PREDICT_CHUNK_ROWS = 50_000
"""Rows routed at once when an ensemble's trees are evaluated on data."""


def read_only_array(array, dtype) -> np.ndarray:
    """A read-only copy of ``array`` with the given dtype."""
    out = np.array(array, dtype=dtype, copy=True)
    out.setflags(write=False)
    return out


def feature_matrix(
    X, feature_names, *, finite: bool = True, min_rows: int = 1, allow_nan: bool = False
) -> np.ndarray:
    """``X`` as a 2-D float array with one column per name of ``feature_names``.

    A DataFrame holding every name is reordered to that order; one without them is
    refused unless the names are the generic ``x0, x1, ...`` of a model fitted on
    unnamed arrays (then columns are taken by position).

    Parameters
    ----------
    X : array-like or DataFrame of shape (n, p)
    feature_names : sequence of str
    finite : bool
        Refuse NaN and infinite values.
    allow_nan : bool
        With ``finite``, accept NaN (a missing value) and refuse only infinite values.
    min_rows : int
        Fewest rows accepted.

    Raises
    ------
    ValueError
        Missing columns, wrong shape, no rows, or (``finite``) non-finite values.
    """
    names = [str(n) for n in feature_names]
    columns = getattr(X, "columns", None)
    if columns is not None:
        missing = [n for n in names if n not in {str(c) for c in columns}]
        if not missing:
            X = X[names]
        elif names != [f"x{j}" for j in range(len(names))]:
            raise InvalidInputError(
                f"X lacks the columns {missing[:5]}; pass the features the model was "
                f"trained on ({', '.join(names[:5])}{' ...' if len(names) > 5 else ''})"
            )
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != len(names):
        raise InvalidInputError(
            f"X must be a 2-D array with {len(names)} columns "
            f"({', '.join(names[:5])}{' ...' if len(names) > 5 else ''}), got shape {X.shape}"
        )
    if X.shape[0] < min_rows:
        raise InvalidInputError(f"X has {X.shape[0]} rows; pass at least {min_rows}")
    if finite and allow_nan and np.isinf(X).any():
        rows = np.flatnonzero(np.isinf(X).any(axis=1))
        raise InvalidInputError(
            f"X has infinite values (rows {rows[:5].tolist()}); replace them by finite "
            "values (or by NaN for a missing value)"
        )
    if finite and not allow_nan and not np.all(np.isfinite(X)):
        rows = np.flatnonzero(~np.isfinite(X).all(axis=1))
        raise InvalidInputError(
            f"X has NaN or infinite values (rows {rows[:5].tolist()}); impute or drop them first"
        )
    return X


def scaled(transformer, X) -> np.ndarray:
    """``transformer.transform(X)`` as a dense float64 array; a matrix is given the column
    names the transformer was fitted with (no scikit-learn feature-name warning)."""
    names = getattr(transformer, "feature_names_in_", None)
    if names is not None and not hasattr(X, "columns"):
        X = pd.DataFrame(X, columns=names)
    out = transformer.transform(X)
    return np.asarray(out.toarray() if hasattr(out, "toarray") else out, dtype=np.float64)


_SCALER_FIELDS = ("min_", "scale_", "data_min_", "data_max_", "data_range_")


def scaler_to_dict(scaler) -> dict:
    """A fitted MinMaxScaler as plain numbers."""
    out = {name: np.asarray(getattr(scaler, name)).tolist() for name in _SCALER_FIELDS}
    out["feature_range"] = list(scaler.feature_range)
    out["n_samples_seen_"] = int(scaler.n_samples_seen_)
    return out


def scaler_from_dict(data: dict):
    """The MinMaxScaler written by :func:`scaler_to_dict` (no refit)."""
    from sklearn.preprocessing import MinMaxScaler  # lazy: read-only commands need no sklearn

    scaler = MinMaxScaler(feature_range=tuple(data["feature_range"]))
    for name in _SCALER_FIELDS:
        setattr(scaler, name, np.asarray(data[name], dtype=np.float64))
    scaler.n_features_in_ = scaler.min_.size
    scaler.n_samples_seen_ = int(data["n_samples_seen_"])
    return scaler
