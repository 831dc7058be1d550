"""A fitted :class:`~governance.miret.estimator.MiretSurrogate` as plain JSON, and the
digest of its tree.

What the flavor's ``surrogate.json`` holds (:func:`to_dict`, read back by
:func:`restore` without a refit) and what says two fits are the same tree
(:func:`tree_digest`), apart from fitting.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from miret_governance.governance.ensembles.arrays import scaler_from_dict, scaler_to_dict
from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.miret.fit.solve_report import SolveReport
from miret_governance.governance.miret.tree.tree import SurrogateTree

FORMAT = "miret-surrogate"
FORMAT_VERSION = 3
READABLE_VERSIONS = (2, 3)  # version 2 stalled on seconds (stall_time) with solver threads


LEGACY_ALPHA_GRID = (0.2, 0.5, 0.8)
"""The alphas a fit chose among before ``alpha_grid`` existed (``LEGACY_PARAMS``): a
document or request without it was fitted with them. Here, not in ``grid``: reading a
document imports no scikit-learn."""


def _check_is_fitted(estimator) -> None:
    from sklearn.utils.validation import check_is_fitted  # lazy: readers need no sklearn

    check_is_fitted(estimator, "tree_")


def to_dict(estimator) -> dict:
    """Plain JSON: parameters (without the ensemble), tree, scaler, report, baseline."""
    _check_is_fitted(estimator)
    params = estimator.get_params(deep=False)
    params.pop("ensemble")
    params["alpha_grid"] = [float(a) for a in params["alpha_grid"]]  # a tuple by default
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "params": params,
        "tree": estimator.tree_.to_dict(),
        "input_scaler": scaler_to_dict(estimator.input_scaler_),
        "solve_report": estimator.solve_report_.to_dict(),
        "baseline": estimator.baseline_,
        "leaf_counts": estimator.leaf_counts_.tolist(),
        "problem": estimator.problem_,
        "n_rows_seen": estimator.n_rows_seen_,
        "n_rows_used": estimator.n_rows_used_,
        "feature_names_in": [str(n) for n in estimator.feature_names_in_],
        "classes": estimator.classes_.tolist(),
    }


def tree_digest(estimator) -> str:
    """sha256 of the canonical JSON of what decides the predictions and the rules: the
    tree's depth, coefficients, intercepts, leaf classes, feature names and
    ``missing_left``, and the normalization of ``input_scaler_``. Two fits with one
    digest are the same tree, bit for bit.
    """
    _check_is_fitted(estimator)
    tree = estimator.tree_.identity()
    scaler = scaler_to_dict(estimator.input_scaler_)
    del scaler["n_samples_seen_"]
    text = json.dumps(
        {"tree": tree, "input_scaler": scaler},
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=False,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def read_tree(data: dict) -> SurrogateTree:
    """The tree of a :func:`to_dict` document, once its format is checked: all that a
    reader of the fitted figures needs, without scikit-learn (:func:`restore` builds
    the estimator and its scaler).

    Raises
    ------
    ValueError
        Not a document of a readable format version, or an invalid tree.
    """
    if data.get("format") != FORMAT or data.get("format_version") not in READABLE_VERSIONS:
        raise InvalidInputError(
            f"not a {FORMAT} document of version {' or '.join(map(str, READABLE_VERSIONS))}"
            f" (format={data.get('format')!r}, version {data.get('format_version')!r})"
        )
    return SurrogateTree.from_dict(data["tree"])


def restore(estimator, data: dict):
    """``estimator`` (unfitted, its ensemble set) with the parameters and fitted state of
    a :func:`to_dict` document.

    Raises
    ------
    ValueError
        Not a document of a readable format version.
    """
    tree = read_tree(data)
    params = dict(data["params"])
    if data["format_version"] == 2:  # its seconds of stall become units of work
        params["stall_work"] = params.pop("stall_time", None)
        params["threads"] = params.get("threads") or 1
    # a tuple as given to the estimator; a document from before alpha_grid: the old grid
    params["alpha_grid"] = tuple(params.get("alpha_grid", LEGACY_ALPHA_GRID))
    estimator.set_params(**params)
    estimator.tree_ = tree
    estimator.input_scaler_ = scaler_from_dict(data["input_scaler"])
    estimator.solve_report_ = SolveReport.from_dict(data["solve_report"])
    estimator.baseline_ = dict(data["baseline"])
    estimator.leaf_counts_ = np.asarray(data["leaf_counts"], dtype=np.int64)
    estimator.problem_ = dict(data["problem"])
    chosen = estimator.solve_report_.grid
    estimator.depth_ = int(chosen.get("depth", estimator.problem_["depth"]))
    estimator.alpha_ = float(chosen.get("alpha", params["alpha"]))
    given = params["proximity_threshold"]  # documents without a choice of m give it
    estimator.proximity_threshold_ = float(chosen.get("proximity_threshold", given))
    estimator.n_rows_seen_ = int(data["n_rows_seen"])
    estimator.n_rows_used_ = int(data["n_rows_used"])
    estimator.feature_names_in_ = np.asarray(data["feature_names_in"], dtype=object)
    estimator.n_features_in_ = len(estimator.feature_names_in_)
    estimator.classes_ = np.asarray(data["classes"])
    estimator.selected_features_ = np.asarray(estimator.tree_.used_features(), dtype=np.int64)
    return estimator
