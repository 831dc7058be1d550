"""Any supported model read into an :class:`Ensemble`, through one table of libraries
(:data:`LIBRARIES`), each read by its own module: scikit-learn forests, gradient boosting
and histogram gradient boosting (:mod:`governance.readers.sklearn`), XGBoost models and
boosters (:mod:`governance.xgboost_booster`), LightGBM models and boosters (through their
text model, :mod:`governance.lightgbm_text`). A model with native categorical features
is read as its one-hot view (:mod:`governance.native_categories`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from miret_governance.governance.ensembles.encoding import EncodingError, encoding_of
from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.ensembles.native_categories import native_view
from miret_governance.governance.ensembles.native_predict import library_proba
from miret_governance.governance.ensembles.readers.lightgbm_text import LightGBMText, read_lightgbm
from miret_governance.governance.ensembles.readers.sklearn import (
    qualified_name,
    read_forest,
    read_gradient_boosting,
    read_hist_gradient_boosting,
)
from miret_governance.governance.ensembles.readers.xgboost_booster import read_xgboost
from miret_governance.governance.ensembles.trees import MalformedModelError, UnsupportedModelError


@dataclass(frozen=True)
class Library:
    """One supported library: the models it reads and how (one entry of :data:`LIBRARIES`).

    Attributes
    ----------
    name : str
        The model family, as the README names it.
    flavor : str
        The MLflow flavor its registered models are logged with (its safe loader is
        ``FLAVOR_LOADERS[flavor]`` in :mod:`flavors.store.inputs`).
    types : tuple of str
        The classes it reads, by dotted name: an instance of one (or of a subclass) is
        read; ``"package.*"`` takes every object whose class the package defines (the
        reader refuses what it cannot read, naming it).
    read : callable
        ``read(model) -> dict``, the keyword arguments of :class:`Ensemble` (its
        ``tree_weights`` may be None) and ``native`` (native categories, or None).
    """

    name: str
    flavor: str
    types: tuple
    read: Callable[[object], dict]

    def reads(self, model) -> bool:
        """Whether ``model`` is one of :attr:`types`; imports nothing (an object of a
        class from a module that is not imported cannot exist)."""
        return any(_is_a(model, name) for name in self.types)


def _is_a(model, name: str) -> bool:
    module_name, _, class_name = name.rpartition(".")
    if class_name == "*":
        return type(model).__module__.startswith(module_name + ".")
    cls = getattr(sys.modules.get(module_name), class_name, None)
    return isinstance(cls, type) and isinstance(model, cls)


LIBRARIES = (
    Library(
        "RandomForest and ExtraTrees",
        "sklearn",
        ("sklearn.ensemble.RandomForestClassifier", "sklearn.ensemble.ExtraTreesClassifier"),
        read_forest,
    ),
    Library(
        "GradientBoosting",
        "sklearn",
        ("sklearn.ensemble.GradientBoostingClassifier",),
        read_gradient_boosting,
    ),
    Library(
        "HistGradientBoosting",
        "sklearn",
        ("sklearn.ensemble.HistGradientBoostingClassifier",),
        read_hist_gradient_boosting,
    ),
    Library("XGBoost", "xgboost", ("xgboost.XGBClassifier", "xgboost.Booster"), read_xgboost),
    Library(
        "LightGBM",
        "lightgbm",
        (f"{LightGBMText.__module__}.LightGBMText", "lightgbm.*"),
        read_lightgbm,
    ),
)
"""Every supported library, in the order :func:`read_estimator` tries them: adding a
library is one module of ``readers/`` and one entry here."""


def library_of(model) -> Library:
    """The entry of :data:`LIBRARIES` that reads ``model``.

    Raises
    ------
    UnsupportedModelError
    """
    for library in LIBRARIES:
        if library.reads(model):
            return library
    raise UnsupportedModelError(model, "it is not a supported tree ensemble classifier")


def read_estimator(model) -> dict:
    """Read ``model`` with its entry of :data:`LIBRARIES`.

    Raises
    ------
    UnsupportedModelError
        A model of another kind, or unfitted.
    MalformedModelError
        A supported model whose stored trees or parameters are inconsistent (anything a
        crafted or corrupt file can hold), before any library code predicts with it.
    """
    try:
        return library_of(model).read(model)
    except UnsupportedModelError:
        raise
    except (AttributeError, IndexError, KeyError, TypeError, ValueError, OverflowError) as exc:
        raise MalformedModelError(
            f"{qualified_name(model)} could not be read ({type(exc).__name__}: {exc})"
        ) from exc


def read_ensemble(model, native: bool = False) -> Ensemble:
    """Read a fitted tree-ensemble classifier of ``k >= 2`` classes into an
    :class:`Ensemble`.

    Parameters
    ----------
    model : estimator
        A fitted RandomForestClassifier, ExtraTreesClassifier,
        GradientBoostingClassifier, HistGradientBoostingClassifier, XGBClassifier,
        ``xgboost.Booster`` (``binary:logistic``, ``multi:softprob``, ``multi:softmax``),
        LGBMClassifier or ``lightgbm.Booster`` (``binary``, ``multiclass``), a LightGBM
        text model (:class:`~governance.lightgbm_text.LightGBMText`), or a scikit-learn
        Pipeline whose last step is one of these. Behind a ``ColumnTransformer`` (:mod:`governance.encoding`) the
        view's features are the encoded columns; :meth:`Ensemble.transform` encodes raw
        rows as the pipeline does.
    native : bool
        Take probabilities and labels from the library's own predict, checked against
        the exact view (:mod:`governance.native_predict`): only for a model loaded
        without running code from its file (skops, a checked XGBoost file) or one the
        caller trusts; scikit-learn and XGBoost models without categorical splits.

    Returns
    -------
    Ensemble

    Raises
    ------
    UnsupportedModelError
        For any other model (regressor, multi-output, one-vs-rest, linear, unfitted, ...).
    """
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import MinMaxScaler

    preprocessor = scaler = None
    final = model
    if isinstance(model, Pipeline):
        final = model.steps[-1][1]
        if len(model.steps) > 1:
            preprocessor = model[:-1]
            before = model.steps[-2][1]
            if isinstance(before, MinMaxScaler):
                scaler = before
    read = read_estimator(final)
    library = library_proba(final, read) if native else None
    native = read.pop("native", None)
    if native is not None:
        if preprocessor is not None:
            raise UnsupportedModelError(
                model,
                "it has native categorical features behind other Pipeline steps; log the "
                "model on its own, or encode the categories in the Pipeline instead",
            )
        read = native_view(read, native)
        preprocessor = read.pop("preprocessor")
    # A lone MinMaxScaler keeps the columns, so the pipeline's input names still apply.
    keeps_columns = preprocessor is None or (scaler is not None and len(model.steps) == 2)
    if getattr(model, "feature_names_in_", None) is not None and keeps_columns:
        read["feature_names"] = [str(n) for n in model.feature_names_in_]
    try:
        encoding = None if preprocessor is None else encoding_of(preprocessor)
    except EncodingError as exc:
        raise UnsupportedModelError(model, str(exc)) from None
    if encoding is not None:  # the ensemble's inputs are the encoded columns
        if len(encoding.names) != len(read["feature_names"]):
            raise MalformedModelError(
                f"the ColumnTransformer makes {len(encoding.names)} columns, the ensemble "
                f"takes {len(read['feature_names'])}"
            )
        read["feature_names"] = list(encoding.names)
    weights = read.pop("tree_weights")
    return Ensemble(
        tree_weights=np.ones(len(read["trees"])) if weights is None else weights,
        preprocessor=preprocessor,
        scaler=scaler,
        source=qualified_name(model if final is model else final),
        native_proba=library,
        **read,
    )
