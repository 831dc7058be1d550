"""MiretSurrogate as a scikit-learn estimator, and MiretSearchCV's selection rule."""

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.miret import MiretSearchCV, MiretSurrogate
from miret_governance.governance.miret.fit.search_cv import SELECTION_RULE, select_candidate


@pytest.fixture(scope="module")
def raw_forest():
    X, y = load_breast_cancer(return_X_y=True)
    rows = np.random.default_rng(1).choice(len(X), 120, replace=False)
    X, y = X[rows][:, :6], y[rows]
    forest = RandomForestClassifier(10, max_depth=2, max_features=None, random_state=0)
    return X, forest.fit(X, y)


def fast(forest, **params):
    return MiretSurrogate(forest, depth=2, solver="highs", time_limit=5, **params)


def test_parameters_are_keyword_only_and_validated(raw_forest):
    X, forest = raw_forest
    with pytest.raises(TypeError):
        MiretSurrogate(forest, 2)
    for bad in ({"alpha": -1}, {"alpha": float("nan")}, {"formulation": "x"}, {"max_rows": 1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            fast(forest, **bad).fit(X)
    with pytest.raises(ValueError, match="ensemble's predictions"):
        fast(forest).fit(X, 1 - forest.predict(X))
    with pytest.raises(ValueError, match="needs ensemble"):
        MiretSurrogate().fit(X)


def test_clone_get_params_and_cross_val_score(raw_forest):
    X, forest = raw_forest
    surrogate = fast(forest, alpha=0.3)
    copy = clone(surrogate)
    assert copy.get_params(deep=False) == surrogate.get_params(deep=False)
    assert copy.ensemble is forest  # the fitted ensemble is shared, not refitted
    scores = cross_val_score(surrogate, X, forest.predict(X), cv=3)
    assert scores.shape == (3,) and np.all((scores > 0.5) & (scores <= 1))
    again = cross_val_score(surrogate, X, cv=3)  # labels from the ensemble
    assert again.shape == (3,)


def test_grid_search_cv_works_unchanged(raw_forest):
    X, forest = raw_forest
    search = GridSearchCV(fast(forest), {"alpha": [0.2, 5.0]}, cv=2).fit(X, forest.predict(X))
    assert search.best_params_["alpha"] in (0.2, 5.0)
    assert 0 <= search.best_estimator_.score(X) <= 1


def test_raw_input_through_the_scaler(raw_forest):
    X, forest = raw_forest
    surrogate = fast(forest).fit(X)
    scaler = surrogate.input_scaler_
    np.testing.assert_array_equal(
        surrogate.predict(X), surrogate.tree_.predict(scaler.transform(X))
    )
    assert surrogate.score(X) == pytest.approx(np.mean(surrogate.predict(X) == forest.predict(X)))
    proba = surrogate.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    leaves = surrogate.apply(X)
    for leaf in np.unique(leaves):  # leaf shares of the fit labels
        labels = forest.predict(X)[leaves == leaf]
        assert proba[leaves == leaf][0, 1] == pytest.approx(np.mean(labels == forest.classes_[1]))
    # a pipeline's own MinMaxScaler is the input scaler: raw input either way
    pipeline = make_pipeline(
        MinMaxScaler(), RandomForestClassifier(10, max_depth=2, random_state=0)
    )
    pipeline.fit(X, forest.predict(X))
    scaled = fast(pipeline).fit(X)
    assert scaled.input_scaler_ is pipeline[0]
    assert scaled.score(X) == pytest.approx(np.mean(scaled.predict(X) == pipeline.predict(X)))
    assert 0 <= scaled.solve_report_.gap <= 1


def test_selection_rule_on_hand_made_results():
    results = {
        "mean_test_fidelity": [0.950, 0.945, 0.930, 0.942, 0.949],
        "mean_test_n_features": [5.0, 3.0, 1.0, 3.0, 3.0],
    }
    # within 0.01 of 0.95: candidates 0, 1, 3, 4; fewest features 3 -> {1, 3, 4};
    # highest fidelity among them: 4
    assert select_candidate(results, 0.01) == 4
    assert select_candidate(results, 0.03) == 2
    assert select_candidate(results, 0.0) == 0
    assert "fewest features" in SELECTION_RULE


def _tiny_search(forest, **options):
    return MiretSearchCV(
        fast(forest),
        param_grid={"alpha": [0.05, 3.0], "proximity_threshold": [1.0]},
        cv=2,
        **{"search_time_limit": 3, **options},
    )


def test_search_picks_by_the_rule_and_refits_with_the_full_limit(raw_forest):
    X, forest = raw_forest
    search = _tiny_search(forest).fit(X)
    assert search.best_index_ == select_candidate(search.cv_results_, 0.01)
    assert search.best_params_ == search.cv_results_["params"][search.best_index_]
    assert search.best_estimator_.time_limit == 5
    assert search.best_estimator_.alpha == search.best_params_["alpha"]
    assert "0.01" in search.selection_rule_
    # work-counted stops: no candidate hit its cap, and a second search agrees exactly
    assert search.reproducible_
    np.testing.assert_array_equal(search.cv_results_["mean_test_time_limit_hit"], 0.0)
    again = _tiny_search(forest).fit(X)
    for key in ("mean_test_fidelity", "mean_test_n_features"):
        np.testing.assert_array_equal(again.cv_results_[key], search.cv_results_[key])


def test_a_search_cut_by_its_time_limit_says_it_may_not_repeat(raw_forest):
    X, forest = raw_forest
    search = _tiny_search(forest, search_time_limit=1e-3).fit(X)
    # every candidate has a fold cut short (a fit that skips its MILP phase, its MIRET
    # tree behind on held-out rows, and ends its tiny heuristic on work is not)
    assert np.all(search.cv_results_["mean_test_time_limit_hit"] > 0)
    assert not search.reproducible_


def test_ray_backend_gives_the_same_choice(raw_forest):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]')")
    X, forest = raw_forest
    local = _tiny_search(forest).fit(X)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = _tiny_search(forest, backend="ray", n_jobs=2).fit(X)
    finally:
        ray.shutdown()
    assert remote.best_params_ == local.best_params_
    np.testing.assert_allclose(
        remote.cv_results_["mean_test_fidelity"], local.cv_results_["mean_test_fidelity"]
    )


def test_a_pipeline_fitted_on_a_frame_takes_frames_and_matrices_without_warnings(raw_forest):
    X, forest = raw_forest
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    pipeline = make_pipeline(MinMaxScaler(), RandomForestClassifier(10, max_depth=2))
    pipeline.fit(frame, forest.predict(X))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "X does not have valid feature names"
        surrogate = fast(pipeline).fit(frame)
        np.testing.assert_array_equal(surrogate.predict(frame), surrogate.predict(X))
        assert surrogate.score(frame) == surrogate.score(X)
