"""An XGBoost ``gbtree`` Booster read into :class:`~governance.trees.Tree` arrays.

Objectives read: ``binary:logistic`` (one margin, ``logit(base_score)`` to start) and
``multi:softprob`` / ``multi:softmax`` (``num_class = k > 2``; each tree adds to the margin
of its class in ``tree_info``, the ``base_score`` vector starts the margins, and
probabilities are their softmax). Trees with vector leaves (``multi_output_tree``),
several outputs (``num_target > 1``) and every other objective are refused by name.

Categorical splits (``split_type`` 1, ``enable_categorical=True``): the node's listed
categories (``categories`` from ``categories_segments``/``categories_sizes``) go right,
every other code, ``x < 0`` included, goes left, and a NaN follows ``default_left``. The
category names XGBoost keeps (``cats``: per feature the training categories in code
order) make the model's one-hot view (:mod:`governance.native_categories`).
"""

from __future__ import annotations

import itertools
import json

import numpy as np

from miret_governance.governance.ensembles.native_categories import NativeCategories
from miret_governance.governance.ensembles.readers.sklearn import check_classes
from miret_governance.governance.ensembles.trees import (
    LEFT_IF_LESS,
    UNKNOWN_LEFT,
    MalformedModelError,
    Tree,
    UnsupportedModelError,
    check_split_features,
)


def _logit(p: float) -> float:
    if not 0.0 < p < 1.0:
        raise MalformedModelError(f"base_score {p} of a logistic model is not in (0, 1)")
    return float(np.log(p / (1.0 - p)))


XGBOOST_OBJECTIVES = ("binary:logistic", "multi:softprob", "multi:softmax")


def _xgboost_classes(owner, learner_param: dict, objective: str) -> int:
    """The number of classes of a classification objective (one output only)."""
    if int(learner_param.get("num_target", 1)) != 1:
        raise UnsupportedModelError(
            owner,
            f"it has num_target={learner_param['num_target']} (multi-output); only one "
            "output is supported",
        )
    if objective == "binary:logistic":
        return 2
    k = int(learner_param.get("num_class", 0))
    if k == 2:
        raise UnsupportedModelError(
            owner,
            f"objective {objective!r} with 2 classes (two softmax margins) is not read; "
            "re-train it with 'binary:logistic', the same model for two classes",
        )
    if k < 2:
        raise MalformedModelError(f"objective {objective!r} with num_class={k}")
    return k


def _xgboost_base_margin(base_score, objective: str, k: int):
    """The initial margin(s): ``logit(base_score)`` for ``binary:logistic``; the
    ``base_score`` vector itself for the softmax objectives (XGBoost adds it to the
    margins untransformed)."""
    scores = np.array(str(base_score).strip("[]").split(","), dtype=np.float64)
    if k == 2:
        return _logit(float(scores[0]))
    if scores.size == 1:
        scores = np.repeat(scores, k)
    if scores.shape != (k,):
        raise MalformedModelError(f"base_score has {scores.size} values for {k} classes")
    return scores


def read_xgboost_booster(booster, model=None, classes=None) -> dict:
    """The read of :func:`governance.readers.read_estimator` for an XGBoost Booster.

    Parameters
    ----------
    booster : xgboost.Booster
    model : XGBClassifier, optional
        The classifier owning ``booster``, named in refusals.
    classes : array-like, optional
        The class labels (default ``0 .. k-1``, as a Booster predicts).

    Raises
    ------
    UnsupportedModelError
        Another objective or booster, vector leaves, several outputs.
    MalformedModelError
    """
    owner = model if model is not None else booster
    config = json.loads(booster.save_config())
    learner = config["learner"]
    objective = learner["objective"]["name"]
    if objective not in XGBOOST_OBJECTIVES:
        raise UnsupportedModelError(
            owner,
            f"objective is {objective!r}; only {', '.join(map(repr, XGBOOST_OBJECTIVES))} "
            "are supported",
        )
    booster_kind = learner["gradient_booster"]["name"]
    if booster_kind != "gbtree":
        raise UnsupportedModelError(owner, f"booster is {booster_kind!r}; only 'gbtree' is")
    raw = json.loads(bytes(booster.save_raw(raw_format="json")))
    dump = raw["learner"]["gradient_booster"]["model"]
    learner_param = raw["learner"]["learner_model_param"]
    k = _xgboost_classes(owner, learner_param, objective)
    base_margin = _xgboost_base_margin(learner_param["base_score"], objective, k)
    tree_class = np.asarray(dump["tree_info"], dtype=np.int64)
    if tree_class.shape != (len(dump["trees"]),):
        raise MalformedModelError("tree_info does not give one class per tree")
    trees = []
    for t in dump["trees"]:
        if int(t["tree_param"].get("size_leaf_vector", 1)) > 1:
            raise UnsupportedModelError(
                owner,
                "its trees have vector leaves (multi_strategy='multi_output_tree'); only "
                "one_output_per_tree is supported",
            )
        left = np.asarray(t["left_children"], dtype=np.int64)
        right = np.asarray(t["right_children"], dtype=np.int64)
        leaf = left == -1  # XGBoost's kInvalidNodeId
        conditions = np.asarray(t["split_conditions"], dtype=np.float32).astype(np.float64)
        known = _category_sets(t, left.size, f"tree {len(trees)}")
        categorical = np.array([codes is not None for codes in known], dtype=bool)
        trees.append(
            Tree(
                feature=np.where(leaf, -1, np.asarray(t["split_indices"], dtype=np.int64)),
                threshold=np.where(leaf | categorical, np.nan, conditions),
                left=left,
                right=right,
                value=np.where(leaf, conditions, 0.0),  # a leaf's value sits in split_conditions
                missing_left=np.asarray(t["default_left"], dtype=np.int64),
                category_left=tuple(np.zeros(0) if c else None for c in categorical),
                category_known=known,
                category_unknown=np.where(categorical, UNKNOWN_LEFT, 0),
            )
        )
    n_features = int(raw["learner"]["learner_model_param"]["num_feature"])
    if n_features < 1:
        raise MalformedModelError(f"num_feature is {n_features}")
    check_split_features(trees, n_features)
    names = booster.feature_names or [f"x{j}" for j in range(n_features)]
    native = _native(dump.get("cats"), list(names), booster.feature_types)
    return {
        "trees": tuple(trees),
        "tree_class": tree_class,
        "tree_weights": None,
        "aggregation": "margin",
        "base_margin": base_margin,
        "left_if": LEFT_IF_LESS,
        "classes": np.asarray(classes if classes is not None else np.arange(k)),
        "feature_names": list(names),
        "native": native,
    }


def _category_sets(tree: dict, n_nodes: int, what: str) -> tuple:
    """The categories each categorical node sends right (None at numeric nodes)."""
    split_type = np.asarray(tree.get("split_type", [0] * n_nodes), dtype=np.int64)
    nodes = np.flatnonzero(split_type == 1)
    if split_type.shape != (n_nodes,) or not np.isin(split_type, (0, 1)).all():
        raise MalformedModelError(f"{what} has split types other than 0 and 1")
    sets = [None] * n_nodes
    if nodes.size == 0:
        return tuple(sets)
    listed = np.asarray(tree.get("categories", []), dtype=np.int64)
    columns = [
        np.asarray(tree.get(key, []), dtype=np.int64)
        for key in ("categories_nodes", "categories_segments", "categories_sizes")
    ]
    if any(c.shape != nodes.shape for c in columns) or np.any(columns[0] != nodes):
        raise MalformedModelError(f"{what}: categories_nodes disagree with its split types")
    for node, start, size in zip(*columns, strict=True):
        if start < 0 or size < 1 or start + size > listed.size:
            raise MalformedModelError(f"{what}: a category segment lies outside categories")
        sets[node] = listed[start : start + size]
    return tuple(sets)


def _native(cats, names: list, feature_types):
    """The categories XGBoost keeps (``cats``), as :class:`NativeCategories`; None when it
    keeps none (then categorical splits read codes)."""
    encodings = (cats or {}).get("enc") or []
    if not any(e.get("values") for e in encodings if isinstance(e, dict)):
        return None
    if len(encodings) != len(names):
        raise MalformedModelError(
            f"cats lists {len(encodings)} features, the model has {len(names)}"
        )
    categories = {}
    for name, kind, encoded in zip(
        names, feature_types or ["c"] * len(names), encodings, strict=True
    ):
        values = encoded.get("values", []) if isinstance(encoded, dict) else None
        if not isinstance(values, list):
            raise MalformedModelError(f"the categories of {name!r} are not a list")
        if values and kind != "c":
            raise MalformedModelError(f"{name!r} lists categories but is not categorical")
        offsets = encoded.get("offsets")
        if values and offsets is not None:  # strings: UTF-8 bytes cut at the offsets
            data = bytes(values)
            if offsets[:1] != [0] or offsets[-1] != len(data) or offsets != sorted(offsets):
                raise MalformedModelError(f"the category offsets of {name!r} do not cut its bytes")
            values = [data[a:b].decode("utf-8") for a, b in itertools.pairwise(offsets)]
        if values:
            categories[name] = tuple(values)
    return NativeCategories(tuple(names), categories, np.asarray(names, dtype=object), "XGBoost")


def read_xgboost(model) -> dict:
    """An XGBClassifier or an ``xgboost.Booster`` (the XGBoost entry of
    :data:`governance.readers.reading.LIBRARIES`)."""
    import xgboost

    if isinstance(model, xgboost.Booster):
        return read_xgboost_booster(model)
    try:
        booster = model.get_booster()
    except (xgboost.core.XGBoostError, ValueError):  # NotFittedError is a ValueError
        raise UnsupportedModelError(model, "it is not fitted (call fit first)") from None
    classes = getattr(model, "classes_", None)
    check_classes(model, classes)
    read = read_xgboost_booster(booster, model, classes)
    if getattr(model, "feature_names_in_", None) is not None and not read["native"]:
        read["feature_names"] = [str(n) for n in model.feature_names_in_]
    return read
