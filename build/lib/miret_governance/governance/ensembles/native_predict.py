"""Class probabilities through the library's own compiled predict, checked against the
exact ensemble view.

:class:`~governance.ensemble.Ensemble` re-implements each library's routing exactly, in
NumPy: that is what VITE, ``apply`` and proximities need, but it routes every row
through every tree level by level and is several times slower than the library's own
predict, with memory growing with ``rows x trees``. Where the caller holds the library's
fitted object and has loaded it safely (:func:`governance.readers.read_ensemble` with
``native=True``: a model the user passed in, a skops file or a checked XGBoost file,
never an untrusted pickle), :class:`LibraryProba` gives the view's
:meth:`~governance.ensemble.Ensemble.predict_proba` (hence its labels) from the library:
scikit-learn's forests, extra trees, gradient boosting and histogram gradient boosting
(``predict_proba``), and an XGBoost Booster (``inplace_predict``, all its trees).
LightGBM is never called: its models are read without LightGBM, by design. Native
categorical features and categorical splits always take the exact path.

The check: every call compares the library's probabilities with the exact view's on a
deterministic sample of at most :data:`CHECK_ROWS` rows, evenly spaced over the input
(all rows of a smaller input), and falls back to the exact view with a
:class:`NativePredictionWarning` when any sampled probability differs by more than
:data:`TOLERANCE` (labels, the argmax, then differ only where two classes tie within it)
or the library raises. A full check would route every row the exact way too, costing
more than the library's predict saves; the sample costs ``CHECK_ROWS`` exact rows per
call (1% of 100,000 rows) and catches a predict that differs from the trees read (a
tree changed after reading, another precision, rows passed in the wrong units), which
disagrees on many rows, not on one. The per-family equality on every row is proven by the tests
(``tests/governance/ensembles/test_native_predict.py``).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import softmax

from miret_governance.governance.ensembles.arrays import PREDICT_CHUNK_ROWS
from miret_governance.governance.errors import InvalidInputError

CHECK_ROWS = 1024
"""Rows of each input on which the library's probabilities are checked."""
TOLERANCE = 1e-6
"""Largest difference accepted between the library's and the exact view's probabilities
(XGBoost adds its margins in float32: about 1e-7)."""
SKLEARN_CLASSES = (
    "sklearn.ensemble._forest.RandomForestClassifier",
    "sklearn.ensemble._forest.ExtraTreesClassifier",
    "sklearn.ensemble._gb.GradientBoostingClassifier",
    "sklearn.ensemble._hist_gradient_boosting.gradient_boosting.HistGradientBoostingClassifier",
)
"""scikit-learn classes whose own ``predict_proba`` is used (exactly these, never a
subclass, which could predict differently)."""


class NativePredictionWarning(UserWarning):
    """The library's own predict disagreed with the exact view, which is used instead."""


@dataclass(frozen=True)
class LibraryProba:
    """The library's class probabilities of rows in the ensemble view's units.

    Attributes
    ----------
    model : object
        The fitted scikit-learn estimator (the Pipeline's last step) or XGBoost Booster.
    kind : {"sklearn", "xgboost-probability", "xgboost-margin"}
        How it predicts: ``predict_proba``; a Booster's probabilities (``binary:logistic``,
        one column, or ``multi:softprob``); a Booster's margins, whose softmax is the
        probability (``multi:softmax`` predicts labels only).
    columns : tuple of str or None
        The estimator's ``feature_names_in_``: rows are passed as a DataFrame with these
        names, as it was fitted.
    accepts_nan : bool
        The library predicts rows with missing values (GradientBoostingClassifier
        refuses them: its views route them the exact way).
    """

    model: object
    kind: str
    columns: tuple | None = None
    accepts_nan: bool = True

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """Probabilities of ``X`` (n, p), shape (n, k), float64."""
        if self.kind == "sklearn":
            if self.columns is not None:
                import pandas as pd

                X = pd.DataFrame(X, columns=list(self.columns), copy=False)
            return np.asarray(self.model.predict_proba(X), dtype=np.float64)
        kind = "margin" if self.kind == "xgboost-margin" else "value"
        out = np.asarray(
            self.model.inplace_predict(X, predict_type=kind, validate_features=False),
            dtype=np.float64,
        )
        if self.kind == "xgboost-margin":
            return softmax(out, axis=1)
        return np.column_stack([1.0 - out, out]) if out.ndim == 1 else out


def library_proba(model, ensemble_read: dict) -> LibraryProba | None:
    """The :class:`LibraryProba` of a fitted final estimator, or None where the exact
    view must be used (another library or class, native categories, categorical splits).

    Parameters
    ----------
    model : object
        The estimator the view was read from (a Pipeline's last step).
    ensemble_read : dict
        The reader's fields (``trees``, ``native``), to refuse categorical models.
    """
    if ensemble_read.get("native") is not None:
        return None
    if any(tree.is_categorical.any() for tree in ensemble_read["trees"]):
        return None
    name = f"{type(model).__module__}.{type(model).__qualname__}"
    if name in SKLEARN_CLASSES:
        names = getattr(model, "feature_names_in_", None)
        names = None if names is None else tuple(map(str, names))
        return LibraryProba(model, "sklearn", names, name != SKLEARN_CLASSES[2])
    if name == "xgboost.sklearn.XGBClassifier":
        model = model.get_booster()
    elif name != "xgboost.core.Booster":
        return None
    objective = json.loads(model.save_config())["learner"]["objective"]["name"]
    kind = "xgboost-margin" if objective == "multi:softmax" else "xgboost-probability"
    return LibraryProba(model, kind)


def check_rows(n_rows: int) -> np.ndarray:
    """The rows checked: all of them up to :data:`CHECK_ROWS`, else that many evenly
    spaced from the first to the last."""
    if n_rows <= CHECK_ROWS:
        return np.arange(n_rows)
    return np.unique(np.linspace(0, n_rows - 1, CHECK_ROWS).round().astype(np.int64))


def checked_library_proba(native, exact, X: np.ndarray, n_classes: int, source: str):
    """The library's probabilities of ``X`` in chunks, or None (with a warning) when
    they disagree with the exact view's on the :func:`check_rows` sample; the exact
    view's of input with missing values a library does not predict.

    Parameters
    ----------
    native : LibraryProba
        The library's probabilities of a chunk of rows.
    exact : callable
        The exact view's probabilities of rows.
    X : ndarray of shape (n, p)
    n_classes : int
    source : str
        The model's class, named in the warning.

    Returns
    -------
    ndarray of shape (n, k) or None
    """
    if not native.accepts_nan and np.isnan(X).any():
        return exact(X)
    proba = np.empty((X.shape[0], n_classes), dtype=np.float64)
    try:
        for start in range(0, X.shape[0], PREDICT_CHUNK_ROWS):
            chunk = native(np.ascontiguousarray(X[start : start + PREDICT_CHUNK_ROWS]))
            if chunk.shape != (min(PREDICT_CHUNK_ROWS, X.shape[0] - start), n_classes):
                raise InvalidInputError(f"probabilities of shape {chunk.shape}")
            proba[start : start + PREDICT_CHUNK_ROWS] = chunk
    except Exception as exc:  # noqa: BLE001 - any failure of the library: use the exact view
        _warn(source, f"its predict failed ({type(exc).__name__}: {exc})")
        return None
    rows = check_rows(X.shape[0])
    gap = np.abs(proba[rows] - exact(X[rows]))
    gap = np.where(np.isnan(gap), np.inf, gap)  # a NaN probability disagrees
    if gap.size and gap.max() > TOLERANCE:
        row = int(rows[gap.max(axis=1).argmax()])
        _warn(source, f"its probabilities differ by up to {gap.max():.3g} (row {row})")
        return None
    return proba


def _warn(source: str, problem: str) -> None:
    warnings.warn(
        f"the library's own predict of {source} disagrees with the exact ensemble view: "
        f"{problem}; the exact view's probabilities and labels are used instead",
        NativePredictionWarning,
        stacklevel=4,
    )
