"""Readers of each supported library's fitted trees into :class:`~governance.ensemble.Tree`
arrays: scikit-learn forests and gradient boosting, XGBoost models and boosters."""

from __future__ import annotations

import json

import numpy as np
from miret_governance.governance.ensemble import (
    LEFT_IF_LESS,
    LEFT_IF_LESS_EQUAL,
    Ensemble,
    Tree,
    UnsupportedModelError,
)


def qualified_name(model) -> str:
    return f"{type(model).__module__}.{type(model).__qualname__}"


def _sklearn_tree(estimator, value) -> Tree:
    t = estimator.tree_
    leaf = t.children_left < 0
    return Tree(
        feature=np.where(leaf, -1, t.feature),
        threshold=np.where(leaf, np.nan, t.threshold),
        left=t.children_left,
        right=t.children_right,
        value=value,
    )


def _check_binary(model, classes):
    if classes is None:
        raise UnsupportedModelError(model, "it is not fitted (call fit first)")
    if len(classes) != 2:
        raise UnsupportedModelError(
            model, f"it has {len(classes)} classes; only binary classifiers are supported"
        )


def _feature_names(model, n_features):
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        return [str(n) for n in names]
    return [f"x{j}" for j in range(n_features)]


def _read_sklearn_forest(model) -> dict:
    classes = getattr(model, "classes_", None)
    _check_binary(model, classes)
    trees = []
    for est in model.estimators_:
        # tree_.value holds per-node class fractions (weighted by bootstrap counts);
        # their mean over trees is RandomForestClassifier.predict_proba.
        fractions = est.tree_.value[:, 0, :]
        positive = fractions[:, 1] / fractions.sum(axis=1)
        trees.append(_sklearn_tree(est, positive))
    return {
        "trees": tuple(trees),
        "tree_weights": np.ones(len(trees)),
        "aggregation": "average",
        "base_margin": 0.0,
        "left_if": LEFT_IF_LESS_EQUAL,
        "classes": np.asarray(classes),
        "feature_names": _feature_names(model, model.n_features_in_),
    }


def _read_sklearn_boosting(model) -> dict:
    classes = getattr(model, "classes_", None)
    _check_binary(model, classes)
    lr = model.learning_rate
    trees = [_sklearn_tree(est[0], lr * est[0].tree_.value[:, 0, 0]) for est in model.estimators_]
    probe = np.zeros((1, model.n_features_in_))
    tree_sum = sum(est[0].predict(probe)[0] for est in model.estimators_)
    if getattr(model, "feature_names_in_", None) is not None:
        import pandas as pd

        probe = pd.DataFrame(probe, columns=model.feature_names_in_)
    base_margin = float(model.decision_function(probe)[0] - lr * tree_sum)
    return {
        "trees": tuple(trees),
        "tree_weights": None,
        "aggregation": "margin",
        "base_margin": base_margin,
        "left_if": LEFT_IF_LESS_EQUAL,
        "classes": np.asarray(classes),
        "feature_names": _feature_names(model, model.n_features_in_),
    }


def _logit(p: float) -> float:
    return float(np.log(p / (1.0 - p)))


def _read_xgboost_booster(booster, model=None, classes=None) -> dict:
    owner = model if model is not None else booster
    config = json.loads(booster.save_config())
    learner = config["learner"]
    objective = learner["objective"]["name"]
    if objective != "binary:logistic":
        raise UnsupportedModelError(
            owner, f"objective is {objective!r}; only 'binary:logistic' is supported"
        )
    booster_kind = learner["gradient_booster"]["name"]
    if booster_kind != "gbtree":
        raise UnsupportedModelError(owner, f"booster is {booster_kind!r}; only 'gbtree' is")
    raw = json.loads(bytes(booster.save_raw(raw_format="json")))
    dump = raw["learner"]["gradient_booster"]["model"]
    base_score = raw["learner"]["learner_model_param"]["base_score"]
    base_score = float(str(base_score).strip("[]").split(",")[0])
    trees = []
    for t in dump["trees"]:
        left = np.asarray(t["left_children"], dtype=np.int64)
        right = np.asarray(t["right_children"], dtype=np.int64)
        leaf = left < 0
        conditions = np.asarray(t["split_conditions"], dtype=np.float32).astype(np.float64)
        trees.append(
            Tree(
                feature=np.where(leaf, -1, np.asarray(t["split_indices"], dtype=np.int64)),
                threshold=np.where(leaf, np.nan, conditions),
                left=left,
                right=right,
                value=np.where(leaf, conditions, 0.0),  # a leaf's value sits in split_conditions
            )
        )
    n_features = int(raw["learner"]["learner_model_param"]["num_feature"])
    names = booster.feature_names or [f"x{j}" for j in range(n_features)]
    return {
        "trees": tuple(trees),
        "tree_weights": None,
        "aggregation": "margin",
        "base_margin": _logit(base_score),
        "left_if": LEFT_IF_LESS,
        "classes": np.asarray(classes if classes is not None else (0, 1)),
        "feature_names": list(names),
    }


def read_estimator(model) -> dict:
    """Dispatch on the estimator type; raises UnsupportedModelError."""
    from sklearn.ensemble import (
        ExtraTreesClassifier,
        GradientBoostingClassifier,
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
            _check_binary(model, classes)
            read = _read_xgboost_booster(booster, model, classes)
            if getattr(model, "feature_names_in_", None) is not None:
                read["feature_names"] = [str(n) for n in model.feature_names_in_]
            return read
        if isinstance(model, xgboost.Booster):
            return _read_xgboost_booster(model)
    raise UnsupportedModelError(model, "it is not a supported tree ensemble classifier")


def read_ensemble(model) -> Ensemble:
    """Read a fitted binary tree-ensemble classifier into an :class:`Ensemble`.

    Parameters
    ----------
    model : estimator
        A fitted RandomForestClassifier, ExtraTreesClassifier,
        GradientBoostingClassifier, XGBClassifier, ``xgboost.Booster`` with
        ``objective='binary:logistic'``, or a scikit-learn Pipeline whose last step is
        one of these.

    Returns
    -------
    Ensemble

    Raises
    ------
    UnsupportedModelError
        For any other model (regressor, multiclass, linear, unfitted, ...).
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
    # A lone MinMaxScaler keeps the columns, so the pipeline's input names still apply.
    keeps_columns = preprocessor is None or (scaler is not None and len(model.steps) == 2)
    if getattr(model, "feature_names_in_", None) is not None and keeps_columns:
        read["feature_names"] = [str(n) for n in model.feature_names_in_]
    weights = read.pop("tree_weights")
    return Ensemble(
        tree_weights=np.ones(len(read["trees"])) if weights is None else weights,
        preprocessor=preprocessor,
        scaler=scaler,
        source=qualified_name(model if final is model else final),
        **read,
    )
