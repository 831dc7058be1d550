"""scikit-learn's tree ensembles read into :class:`~governance.trees.Tree` arrays:
RandomForest and ExtraTrees, GradientBoosting and HistGradientBoosting (its native
categorical features come with their categories, :mod:`governance.native_categories`);
and the checks of a fitted scikit-learn-API classifier, which XGBoost's and LightGBM's
classifiers share."""

from __future__ import annotations

import numpy as np

from miret_governance.governance.ensembles.native_categories import hist_categories, hist_tree
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


def check_classes(model, classes):
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
    check_classes(model, classes)
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
    check_classes(model, classes)
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
    check_classes(model, classes)
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


def read_forest(model) -> dict:
    """A RandomForestClassifier or ExtraTreesClassifier."""
    if not hasattr(model, "estimators_"):
        raise UnsupportedModelError(model, "it is not fitted (call fit first)")
    return _read_sklearn_forest(model)


def read_gradient_boosting(model) -> dict:
    """A GradientBoostingClassifier."""
    if not hasattr(model, "estimators_"):
        raise UnsupportedModelError(model, "it is not fitted (call fit first)")
    return _read_sklearn_boosting(model)


def read_hist_gradient_boosting(model) -> dict:
    """A HistGradientBoostingClassifier."""
    if not hasattr(model, "_predictors"):
        raise UnsupportedModelError(model, "it is not fitted (call fit first)")
    return _read_sklearn_hist_boosting(model)
