"""Readers of each supported library's fitted trees into :class:`~governance.trees.Tree`
arrays: scikit-learn forests, gradient boosting and histogram gradient boosting, XGBoost
models and boosters (:mod:`governance.xgboost_booster`), LightGBM models and boosters
(through their text model, :mod:`governance.lightgbm_text`). A model with native
categorical features is read as its one-hot view (:mod:`governance.native_categories`)."""

from __future__ import annotations

import numpy as np

from miret_governance.governance.ensembles.encoding import EncodingError, encoding_of
from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.ensembles.native_categories import (
    hist_categories,
    hist_tree,
    native_view,
)
from miret_governance.governance.ensembles.native_predict import library_proba
from miret_governance.governance.ensembles.readers.lightgbm_text import (
    LightGBMText,
    read_lightgbm_text,
)
from miret_governance.governance.ensembles.readers.xgboost_booster import read_xgboost_booster
from miret_governance.governance.ensembles.trees import (
    LEFT_IF_LESS_EQUAL,
    MalformedModelError,
    Tree,
    UnsupportedModelError,
    check_split_features,
)


def qualified_name(model) -> str:
    return f"{type(model).__module__}.{type(model).__qualname__}"


def _sklearn_tree(estimator, value, n_classes: int = 2) -> Tree:
    """A scikit-learn tree: a forest's (``value`` None: class fractions of
    ``n_classes`` classes) or a gradient-boosting regression tree's (``value`` given)."""
    t = estimator.tree_
    n_classes = n_classes if value is None else 1
    if t.value.shape != (t.node_count, 1, n_classes) or list(t.n_classes) != [n_classes]:
        raise MalformedModelError(
            f"a tree stores values of shape {t.value.shape} for {t.node_count} nodes "
            f"(n_classes {list(t.n_classes)}); a single-output tree has ({t.node_count}, 1, "
            f"{n_classes})"
        )
    if value is None and n_classes > 2:
        # DecisionTreeClassifier.predict_proba divides each node's values by their sum
        fractions = t.value[:, 0, :]
        if not (np.isfinite(fractions).all() and (fractions >= 0).all()):
            raise MalformedModelError(
                "a tree stores class fractions that are negative or not finite"
            )
        normalizer = fractions.sum(axis=1)[:, None]
        normalizer[normalizer == 0.0] = 1.0
        value = fractions / normalizer
    elif value is None:
        # tree_.value holds per-node class fractions (weighted by bootstrap counts);
        # their mean over trees is RandomForestClassifier.predict_proba (scikit-learn
        # >= 1.4 no longer normalizes them, so they must sum to 1 for the binary view).
        fractions = t.value[:, 0, :]
        if not (
            np.isfinite(fractions).all()
            and (fractions >= 0).all()
            and np.allclose(fractions.sum(axis=1), 1.0, rtol=0, atol=1e-9)
        ):
            raise MalformedModelError(
                "a tree stores class fractions that are negative, not finite or do not sum to 1"
            )
        value = fractions[:, 1]
    leaf = t.children_left == -1  # scikit-learn's TREE_LEAF
    return Tree(
        feature=np.where(leaf, -1, t.feature),
        threshold=np.where(leaf, np.nan, t.threshold),
        left=t.children_left,
        right=t.children_right,
        value=value,
        missing_left=t.missing_go_to_left,
    )


def _check_classes(model, classes):
    """A fitted classifier of one output and at least two classes."""
    if classes is None:
        raise UnsupportedModelError(model, "it is not fitted (call fit first)")
    outputs = getattr(model, "n_outputs_", 1)
    if outputs != 1:
        raise UnsupportedModelError(
            model,
            f"it predicts {outputs} outputs (multi-output); only classifiers of one output "
            "are supported",
        )
    labels = np.asarray(classes)
    if labels.ndim != 1 or len(set(labels.tolist())) != labels.size:
        raise MalformedModelError(f"the class labels {labels.tolist()[:10]} are not distinct")
    if labels.size < 2:
        raise UnsupportedModelError(
            model, f"it has {labels.size} class; a classifier needs at least two"
        )


def _by_iteration(per_iteration: list, k: int) -> tuple:
    """Trees and their class indices from one list of trees per iteration (one tree for
    two classes, ``k`` otherwise), iteration by iteration."""
    width = 1 if k == 2 else k
    for trees in per_iteration:
        if len(trees) != width:
            raise MalformedModelError(
                f"an iteration of the model has {len(trees)} trees; a model of {k} classes has "
                f"{width} per iteration"
            )
    trees = tuple(tree for iteration in per_iteration for tree in iteration)
    return trees, np.tile(np.arange(width), len(per_iteration))


def _n_features(model) -> int:
    n_features = getattr(model, "n_features_in_", None)
    if not isinstance(n_features, (int, np.integer)) or n_features < 1:
        raise MalformedModelError(f"n_features_in_ is {n_features!r}, not a positive integer")
    return int(n_features)


def _feature_names(model, n_features):
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        return [str(n) for n in names]
    return [f"x{j}" for j in range(n_features)]


def _read_sklearn_forest(model) -> dict:
    classes = getattr(model, "classes_", None)
    _check_classes(model, classes)
    k = len(classes)
    n_features = _n_features(model)
    trees = []
    for est in model.estimators_:
        if est.n_outputs_ != 1 or list(np.atleast_1d(est.n_classes_)) != [k]:
            raise MalformedModelError(
                f"a tree of the forest has {est.n_outputs_} outputs and "
                f"{est.n_classes_} classes; the forest has one output and {k} classes"
            )
        trees.append(_sklearn_tree(est, None, k))
    check_split_features(trees, n_features)
    return {
        "trees": tuple(trees),
        "tree_weights": np.ones(len(trees)),
        "aggregation": "average",
        "base_margin": 0.0,
        "left_if": LEFT_IF_LESS_EQUAL,
        "classes": np.asarray(classes),
        "feature_names": _feature_names(model, n_features),
    }


def _check_constant_init(model) -> None:
    """A GradientBoosting ``init`` must predict one margin for every row: ``"zero"`` or
    the default prior (a ``DummyClassifier(strategy="prior")``)."""
    from sklearn.dummy import DummyClassifier

    init = model.init_
    if isinstance(init, str) and init == "zero":
        return
    if type(init) is DummyClassifier and init.strategy == "prior":
        return
    raise UnsupportedModelError(
        model,
        f"its init estimator {qualified_name(init)} predicts a different starting margin "
        "for each row, which the ensemble view cannot reproduce exactly; re-train with "
        "init=None (the default) or init='zero'",
    )


def _read_sklearn_boosting(model) -> dict:
    """GradientBoostingClassifier: ``estimators_`` of shape (n_iter, 1) for two classes,
    (n_iter, k) otherwise; the initial margin(s) are the model's own decision function
    less its trees' sum, on one row (the init estimator predicts one margin for all)."""
    classes = getattr(model, "classes_", None)
    _check_classes(model, classes)
    k = len(classes)
    n_features = _n_features(model)
    lr = float(model.learning_rate)
    if not np.isfinite(lr):
        raise MalformedModelError(f"the learning rate is {lr}")
    width = 1 if k == 2 else k
    if np.shape(model.estimators_) != (model.n_estimators_, width):
        raise MalformedModelError(
            f"estimators_ has shape {np.shape(model.estimators_)}; a model of {k} classes has "
            f"({model.n_estimators_}, {width})"
        )
    per_iteration = [
        [_sklearn_tree(est, lr * est.tree_.value[:, 0, 0]) for est in row]
        for row in model.estimators_
    ]
    trees, tree_class = _by_iteration(per_iteration, k)
    # every tree is checked before scikit-learn's own predict runs on it
    check_split_features(trees, n_features)
    _check_constant_init(model)
    probe = np.zeros((1, n_features))
    tree_sum = sum(np.array([est.predict(probe)[0] for est in row]) for row in model.estimators_)
    if getattr(model, "feature_names_in_", None) is not None:
        import pandas as pd

        probe = pd.DataFrame(probe, columns=model.feature_names_in_)
    base_margin = np.ravel(model.decision_function(probe)) - lr * tree_sum
    return {
        "trees": trees,
        "tree_class": tree_class,
        "tree_weights": None,
        "aggregation": "margin",
        "base_margin": float(base_margin[0]) if k == 2 else base_margin,
        "left_if": LEFT_IF_LESS_EQUAL,
        "classes": np.asarray(classes),
        "feature_names": _feature_names(model, n_features),
    }


def _read_sklearn_hist_boosting(model) -> dict:
    """HistGradientBoostingClassifier: each predictor's node records (leaf values carry
    the learning rate already) and the constant ``_baseline_prediction``; nothing of
    scikit-learn predicts here, so a crafted node never reaches its Cython code. Native
    categorical features (a ``_preprocessor``) come with their categories (``native``)."""
    classes = getattr(model, "classes_", None)
    _check_classes(model, classes)
    k = len(classes)
    n_features = _n_features(model)
    native, known = None, [None] * n_features
    if getattr(model, "_preprocessor", None) is not None:
        native, known = hist_categories(model)
    width = 1 if k == 2 else k
    baseline = np.asarray(model._baseline_prediction, dtype=np.float64)
    if baseline.shape != (1, width) or not np.isfinite(baseline).all():
        raise MalformedModelError(
            f"_baseline_prediction has shape {baseline.shape}; a model of {k} classes has "
            f"{width} finite value(s)"
        )
    trees, tree_class = _by_iteration(
        [
            [hist_tree(p.nodes, p.raw_left_cat_bitsets, known) for p in row]
            for row in model._predictors
        ],
        k,
    )
    check_split_features(trees, n_features)
    return {
        "trees": trees,
        "tree_class": tree_class,
        "tree_weights": None,
        "aggregation": "margin",
        "base_margin": float(baseline[0, 0]) if k == 2 else baseline[0],
        "left_if": LEFT_IF_LESS_EQUAL,
        "classes": np.asarray(classes),
        "feature_names": list(native.inputs) if native else _feature_names(model, n_features),
        "input_precision": "float64",
        "native": native,
    }


def read_estimator(model) -> dict:
    """Dispatch on the estimator type.

    Raises
    ------
    UnsupportedModelError
        A model of another kind, or unfitted.
    MalformedModelError
        A supported model whose stored trees or parameters are inconsistent (anything a
        crafted or corrupt file can hold), before any library code predicts with it.
    """
    try:
        return _read_estimator(model)
    except UnsupportedModelError:
        raise
    except (AttributeError, IndexError, KeyError, TypeError, ValueError, OverflowError) as exc:
        raise MalformedModelError(
            f"{qualified_name(model)} could not be read ({type(exc).__name__}: {exc})"
        ) from exc


def _read_estimator(model) -> dict:
    from sklearn.ensemble import (
        ExtraTreesClassifier,
        GradientBoostingClassifier,
        HistGradientBoostingClassifier,
        RandomForestClassifier,
    )

    if isinstance(model, (RandomForestClassifier, ExtraTreesClassifier)):
        if not hasattr(model, "estimators_"):
            raise UnsupportedModelError(model, "it is not fitted (call fit first)")
        return _read_sklearn_forest(model)
    if isinstance(model, GradientBoostingClassifier):
        if not hasattr(model, "estimators_"):
            raise UnsupportedModelError(model, "it is not fitted (call fit first)")
        return _read_sklearn_boosting(model)
    if isinstance(model, HistGradientBoostingClassifier):
        if not hasattr(model, "_predictors"):
            raise UnsupportedModelError(model, "it is not fitted (call fit first)")
        return _read_sklearn_hist_boosting(model)
    try:
        import xgboost
    except ImportError:  # pragma: no cover - xgboost is a dependency
        xgboost = None
    if xgboost is not None:
        if isinstance(model, xgboost.XGBClassifier):
            try:
                booster = model.get_booster()
            except (xgboost.core.XGBoostError, ValueError):  # NotFittedError is a ValueError
                raise UnsupportedModelError(model, "it is not fitted (call fit first)") from None
            classes = getattr(model, "classes_", None)
            _check_classes(model, classes)
            read = read_xgboost_booster(booster, model, classes)
            if getattr(model, "feature_names_in_", None) is not None and not read["native"]:
                read["feature_names"] = [str(n) for n in model.feature_names_in_]
            return read
        if isinstance(model, xgboost.Booster):
            return read_xgboost_booster(model)
    if isinstance(model, LightGBMText):
        return read_lightgbm_text(model)
    if type(model).__module__.startswith("lightgbm."):
        return _read_lightgbm(model)
    raise UnsupportedModelError(model, "it is not a supported tree ensemble classifier")


def _read_lightgbm(model) -> dict:
    """An in-memory ``lightgbm.Booster`` or ``LGBMClassifier``, through its text model
    (the same reader as a registered ``model.lgb``)."""
    import lightgbm

    if isinstance(model, lightgbm.LGBMClassifier):
        classes = getattr(model, "classes_", None) if model.__sklearn_is_fitted__() else None
        _check_classes(model, classes)
        names = getattr(model, "feature_names_in_", None)
        read = read_lightgbm_text(LightGBMText(model.booster_.model_to_string(), classes, names))
        if names is not None and read["native"] is None:
            read["feature_names"] = [str(n) for n in model.feature_names_in_]
        return read
    if isinstance(model, lightgbm.Booster):
        return read_lightgbm_text(LightGBMText(model.model_to_string()))
    raise UnsupportedModelError(model, "it is not a LightGBM classifier or Booster")


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
