"""Scoring a ``miret`` surrogate through pyfunc: :class:`MiretModelWrapper`, what
:func:`flavors.miret._load_pyfunc` returns once the model directory is verified."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from miret_governance.governance.errors import InvalidInputError

INPUT_SPACES = ("raw", "normalized")
"""``input_space`` of a surrogate: the ensemble's raw input units (mapped by the
surrogate's stored scaler) or the MILP's normalized working space."""


def check_input_space(input_space: str, surrogate) -> None:
    """``input_space`` is known, and ``"raw"`` only for a surrogate that has a scaler."""
    if input_space not in INPUT_SPACES:
        raise InvalidInputError(f"input_space must be one of {INPUT_SPACES}, got {input_space!r}")
    if input_space == "raw" and type(surrogate).__name__ != "MiretSurrogate":
        raise InvalidInputError(
            "input_space='raw' needs a MiretSurrogate (a SurrogateTree has no scaler)"
        )


class MiretModelWrapper:
    """pyfunc wrapper: class labels of the surrogate for raw or normalized input."""

    def __init__(self, surrogate, input_space: str):
        check_input_space(input_space, surrogate)
        self.surrogate = surrogate
        self.input_space = input_space
        self.feature_names = list(getattr(surrogate, "tree_", surrogate).feature_names)

    def get_raw_model(self):
        """The surrogate object."""
        return self.surrogate

    def _matrix(self, data) -> np.ndarray:
        if isinstance(data, pd.DataFrame):
            missing = [c for c in self.feature_names if c not in data.columns]
            if missing:
                if list(data.columns) == list(range(len(self.feature_names))):
                    return data.to_numpy(dtype=np.float64)
                raise InvalidInputError(f"input is missing feature columns: {', '.join(missing)}")
            return data[self.feature_names].to_numpy(dtype=np.float64)
        X = np.asarray(data, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.feature_names):
            raise InvalidInputError(
                f"expected {len(self.feature_names)} feature columns, got {X.shape}"
            )
        return X

    def predict(self, model_input, params: dict[str, Any] | None = None) -> np.ndarray:
        """Class labels of the surrogate.

        Parameters
        ----------
        model_input : DataFrame or array-like
            One column per feature (by name for a DataFrame), in ``self.input_space``.
        params : dict, optional
            Unused (the input space is a model config).
        """
        X = self._matrix(model_input)
        if self.input_space == "raw":  # a MiretSurrogate maps raw input with its own scaler
            return self.surrogate.predict(X)
        return getattr(self.surrogate, "tree_", self.surrogate).predict(X)
