"""MiretSurrogate: fit flow, edge cases, persistence and sklearn conventions."""

import json

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import NotFittedError

from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.ensembles.trees import UnsupportedModelError
from miret_governance.governance.miret import MiretSurrogate, SolveReport, build_problem
from miret_governance.governance.miret.fit import engine as engine_module
from miret_governance.governance.miret.fit.estimator import LEGACY_PARAMS
from miret_governance.governance.miret.milp import node_milp as node_milp_module
from miret_governance.governance.miret.milp.formulation import build_model, encode
from miret_governance.governance.miret.solvers.gurobi import gurobi_license

SMALL_OPTIMUM = 1.8388888888888  # proved optimal by both solvers (test_miret_solver)


@pytest.fixture(scope="module")
def fitted(small_forest):
    X, forest = small_forest
    return MiretSurrogate(
        forest,
        gamma_percentile=0,
        solver="highs",
        time_limit=20,
        cart_guarantee=False,
        milp_share=None,  # the MILP reaches its optimum
    ).fit(X)


def test_fit_reaches_the_proved_optimum(small_forest, fitted):
    X, forest = small_forest
    report = fitted.solve_report_
    assert report.status == "optimal" and report.solver == "highs"
    assert report.objective == pytest.approx(SMALL_OPTIMUM, abs=1e-6)
    assert report.gap <= 1e-6
    assert report.warm_start_feasible
    assert report.warm_start_objective >= report.objective - 1e-9
    assert report.incumbent_source in ("heuristic", "solver")
    problem = build_problem(X, read_ensemble(forest), gamma_percentile=0)
    assert problem.objective(fitted.tree_.coef, fitted.apply(X)) == pytest.approx(report.objective)
    np.testing.assert_array_equal(fitted.classes_, forest.classes_)
    assert fitted.n_features_in_ == 3
    assert fitted.problem_["n_samples"] == 30
    np.testing.assert_array_equal(
        fitted.selected_features_, np.flatnonzero((fitted.tree_.coef != 0).any(axis=0))
    )
    assert set(np.unique(fitted.predict(X))) <= set(forest.classes_)


def test_cart_guarantee_keeps_the_optimum_within_cart_cross_validated_fidelity(
    small_forest, fitted
):
    # the proved optimum uses 1 feature and misses 1 of 30 samples; CART uses 2 and
    # misses none on its own rows, but 3 of 30 when each row is predicted out of fold
    X, forest = small_forest
    assert fitted.score(X) == pytest.approx(29 / 30) and fitted.selected_features_.size == 1
    guarded = MiretSurrogate(
        forest, gamma_percentile=0, solver="highs", time_limit=20, **LEGACY_PARAMS
    ).fit(X)
    report = guarded.solve_report_
    assert report.baseline_cart_train_fidelity == 1.0
    assert report.baseline_cart_cv_fidelity == pytest.approx(27 / 30)
    assert report.fallback == "" and report.objective == pytest.approx(SMALL_OPTIMUM, abs=1e-6)
    np.testing.assert_array_equal(guarded.tree_.coef, fitted.tree_.coef)


def test_predict_reproduces_the_solver_assignment(small_forest):
    X, forest = small_forest
    surrogate = MiretSurrogate(
        forest,
        gamma_percentile=0,
        solver="highs",
        time_limit=20,
        warm_start=False,
        cart_guarantee=False,
        milp_share=None,
    ).fit(X)
    report = surrogate.solve_report_
    assert report.incumbent_source in ("solver", "seed", "node_milp")
    # the tree's own assignment (un-centered: b + eps/2) is an optimal MILP solution
    problem = build_problem(X, read_ensemble(forest), gamma_percentile=0)
    model = build_model(problem)
    tree = surrogate.tree_
    x = encode(tree.coef, tree.intercept + problem.epsilon / 2, surrogate.apply(X), model)
    assert model.is_feasible(x)
    assert model.objective(x) == pytest.approx(SMALL_OPTIMUM, abs=1e-6)
    sign = np.where(surrogate.apply(X) % 2 == 1, 0, 1)
    np.testing.assert_array_equal(surrogate.predict(X), forest.classes_[sign])
    # proximity components share a leaf
    for c in range(problem.n_components):
        assert len(set(surrogate.apply(X)[problem.component == c])) == 1


@pytest.mark.skipif(gurobi_license() == "unavailable", reason="gurobipy has no working license")
def test_gurobi_fit_agrees(small_forest):
    X, forest = small_forest
    surrogate = MiretSurrogate(forest, gamma_percentile=0, solver="gurobi", time_limit=20).fit(X)
    assert surrogate.solve_report_.solver == "gurobi"
    assert surrogate.solve_report_.objective == pytest.approx(SMALL_OPTIMUM, abs=1e-6)


def test_basic_formulation_and_unreduced_model_agree(small_forest):
    X, forest = small_forest
    for params in ({"formulation": "basic"}, {"reductions": False}):
        surrogate = MiretSurrogate(
            forest, gamma_percentile=0, solver="highs", time_limit=20, milp_share=None, **params
        )
        report = surrogate.fit(X).solve_report_
        assert report.status == "optimal"
        assert report.objective == pytest.approx(SMALL_OPTIMUM, abs=1e-6)


def test_excluded_features_have_zero_coefficients(small_forest):
    X, forest = small_forest
    surrogate = MiretSurrogate(
        forest, gamma_percentile=50, solver="highs", time_limit=20, cart_guarantee=False
    ).fit(X)
    problem = build_problem(X, read_ensemble(forest), gamma_percentile=50)
    assert not problem.allowed.all()
    assert np.all(surrogate.tree_.coef[~problem.allowed[problem.node_level]] == 0)


def test_json_round_trip_predicts_identically(fitted, small_forest):
    X, _ = small_forest
    document = json.loads(json.dumps(fitted.to_dict()))
    restored = MiretSurrogate.from_dict(document)
    grid = np.random.default_rng(5).random((200, 3)) * 1.2 - 0.1
    np.testing.assert_array_equal(restored.predict(grid), fitted.predict(grid))
    np.testing.assert_array_equal(restored.apply(X), fitted.apply(X))
    assert restored.get_params() == {**fitted.get_params(deep=False), "ensemble": None}
    assert restored.rules() == fitted.rules()
    assert restored.solve_report_.to_dict() == fitted.solve_report_.to_dict()
    np.testing.assert_array_equal(restored.selected_features_, fitted.selected_features_)
    assert isinstance(restored.solve_report_, SolveReport)
    assert restored.decision_path(X[0]) == fitted.decision_path(X[0])


def test_a_version_2_document_still_loads(fitted, small_forest):
    """Surrogates logged before the solver stopped on work keep loading."""
    X, _ = small_forest
    document = json.loads(json.dumps(fitted.to_dict()))
    document["format_version"] = 2
    document["params"]["stall_time"] = document["params"].pop("stall_work")
    document["params"]["threads"] = None
    for key in ("stall_work", "solver_work"):
        del document["solve_report"][key]
    restored = MiretSurrogate.from_dict(document)
    np.testing.assert_array_equal(restored.predict(X), fitted.predict(X))
    assert restored.threads == 1 and restored.stall_work == fitted.stall_work
    assert np.isnan(restored.solve_report_.solver_work)
    document["format_version"] = 1
    with pytest.raises(ValueError, match="version 2 or 3"):
        MiretSurrogate.from_dict(document)


def test_sklearn_conventions(small_forest):
    X, _ = small_forest
    surrogate = MiretSurrogate(alpha=0.3)
    assert clone(surrogate).get_params()["alpha"] == 0.3
    assert surrogate.set_params(depth=1).depth == 1
    with pytest.raises(NotFittedError):
        surrogate.predict(X)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda X: np.where(np.eye(*X.shape, dtype=bool), np.inf, X), "infinite"),
        (lambda X: np.full_like(X, np.nan), "every row of X has a missing value"),
        (  # mutually exclusive gaps (QA): the columns are named, and what to do
            lambda X: np.where(np.arange(X.shape[1]) == np.arange(len(X))[:, None] % 2, np.nan, X),
            (
                r"every row of X has a missing value \(most often: '\w+' 50%, '\w+' 50%\); "
                r".* give data with some complete rows, or fill in \(impute\) those columns"
            ),
        ),
        (lambda X: np.hstack([X, X]), "3 columns"),
    ],
)
def test_bad_input_is_refused(small_forest, bad, message):
    X, forest = small_forest
    with pytest.raises(ValueError, match=message):
        MiretSurrogate(forest, time_limit=5).fit(bad(X))


def test_unfitted_model_is_refused(small_forest):
    X, _ = small_forest
    with pytest.raises(UnsupportedModelError, match="not fitted"):
        MiretSurrogate(RandomForestClassifier(), time_limit=5).fit(X)


def test_one_class_ensemble_gives_the_trivial_tree():
    # every leaf of the single stump predicts the positive class
    stump = {
        "feature": [0, -1, -1],
        "threshold": [0.5, np.nan, np.nan],
        "left": [1, -1, -1],
        "right": [2, -1, -1],
        "value": [1.0, 0.9, 1.0],
    }
    ensemble = Ensemble.from_arrays([stump], n_features=2, classes=("no", "yes"))
    X = np.random.default_rng(2).random((9, 2))
    surrogate = MiretSurrogate(ensemble, time_limit=5).fit(X)
    report = surrogate.solve_report_
    assert report.status == "trivial" and report.solver == "none"
    assert report.objective == 0.0
    assert list(surrogate.predict(X)) == ["yes"] * 9
    assert surrogate.selected_features_.size == 0


def test_duplicates_ties_and_fewer_samples_than_leaves():
    # samples on a coarse grid: duplicated rows and values exactly on the forest's
    # thresholds; 7 samples for the 8 leaves of depth 3
    X = np.array([[0, 0], [0, 0], [0.5, 0.5], [0.5, 1], [1, 0.5], [1, 1], [0.5, 0]], float)
    forest = RandomForestClassifier(5, max_depth=3, random_state=0, bootstrap=False)
    forest.fit(X, [0, 0, 1, 1, 0, 1, 0])
    ensemble = read_ensemble(forest)
    assert ensemble.max_depth == 3
    surrogate = MiretSurrogate(
        forest, alpha=0.01, gamma_percentile=0, solver="highs", time_limit=10, milp_share=None
    )
    report = surrogate.fit(X).solve_report_
    assert report.status == "optimal"
    problem = build_problem(X, ensemble, alpha=0.01, gamma_percentile=0)
    leaves = surrogate.apply(X)
    assert leaves[0] == leaves[1]
    assert problem.objective(surrogate.tree_.coef, leaves) == pytest.approx(report.objective)
    np.testing.assert_array_equal(surrogate.predict(X), forest.predict(X))  # fits exactly


def test_time_limit_before_any_solver_progress_returns_the_cart_seed(small_forest, monkeypatch):
    X, forest = small_forest
    real_solve = engine_module.solve

    def starved(model, **options):
        return real_solve(model, **{**options, "time_limit": 0.0})

    monkeypatch.setattr(engine_module, "solve", starved)
    monkeypatch.setattr(node_milp_module, "solve", starved)
    surrogate = MiretSurrogate(
        forest,
        gamma_percentile=0,
        solver="highs",
        warm_start=False,
        time_limit=5,
        cart_guarantee=False,
        milp_share=None,
    )
    surrogate.fit(X)
    report = surrogate.solve_report_
    assert report.status.startswith("time_limit") and report.stop_reason == "time_limit"
    assert report.incumbent_source == "seed"
    assert report.objective == pytest.approx(report.cart_seed_objective)
    assert report.objective >= SMALL_OPTIMUM - 1e-9


def test_progress_is_reported(small_forest):
    X, forest = small_forest
    seen = []
    MiretSurrogate(forest, gamma_percentile=0, solver="highs", time_limit=10).fit(
        X, progress=lambda *values: seen.append(values)
    )
    assert seen and len(seen[-1]) == 4
    assert seen[-1][1] == pytest.approx(SMALL_OPTIMUM, abs=1e-6)


def test_pipeline_input_outside_the_scaler_range_is_clipped_as_explain_does(breast_cancer):
    """A pipeline whose scaler saw 300 rows, fitted on all 569 (12 beyond that range):
    the surrogate is the one fitted on the rows clipped to the scaler's range."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler

    X, y = breast_cancer
    X = X.to_numpy()
    pipeline = make_pipeline(
        MinMaxScaler(), RandomForestClassifier(10, max_depth=3, random_state=0)
    ).fit(X[:300], y[:300])
    scaler = pipeline[0]
    assert ((X < scaler.data_min_) | (X > scaler.data_max_)).any(axis=1).sum() == 12
    params = {"depth": 2, "time_limit": 20, "random_state": 0}
    raw = MiretSurrogate(pipeline, **params).fit(X)
    clipped = MiretSurrogate(pipeline, **params).fit(np.clip(X, scaler.data_min_, scaler.data_max_))
    assert raw.tree_digest() == clipped.tree_digest()
    np.testing.assert_array_equal(raw.predict(X), clipped.predict(X))
