"""An XGBoost ``gbtree`` Booster read into :class:`~governance.trees.Tree` arrays.

Objectives read: ``binary:logistic`` (one margin, ``logit(base_score)`` to start) and
``multi:softprob`` / ``multi:softmax`` (``num_class = k > 2``; each tree adds to the margin
of its class in ``tree_info``, the ``base_score`` vector starts the margins, and
probabilities are their softmax). Trees with vector leaves (``multi_output_tree``),
several outputs (``num_target > 1``) and every other objective are refused by name.
"""

from __future__ import annotations

import json

import numpy as np

from miret_governance.governance.trees import (
    LEFT_IF_LESS,
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
        trees.append(
            Tree(
                feature=np.where(leaf, -1, np.asarray(t["split_indices"], dtype=np.int64)),
                threshold=np.where(leaf, np.nan, conditions),
                left=left,
                right=right,
                value=np.where(leaf, conditions, 0.0),  # a leaf's value sits in split_conditions
                missing_left=np.asarray(t["default_left"], dtype=np.int64),
            )
        )
    n_features = int(raw["learner"]["learner_model_param"]["num_feature"])
    if n_features < 1:
        raise MalformedModelError(f"num_feature is {n_features}")
    check_split_features(trees, n_features)
    names = booster.feature_names or [f"x{j}" for j in range(n_features)]
    return {
        "trees": tuple(trees),
        "tree_class": tree_class,
        "tree_weights": None,
        "aggregation": "margin",
        "base_margin": base_margin,
        "left_if": LEFT_IF_LESS,
        "classes": np.asarray(classes if classes is not None else np.arange(k)),
        "feature_names": list(names),
    }
