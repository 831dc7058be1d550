"""MIRET engine: no empty level, CART seeds, stall rule, sampling, reproducibility."""

import multiprocessing
import time
from dataclasses import replace

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.miret import MiretSurrogate, build_problem
from miret_governance.governance.miret.fit import fitting
from miret_governance.governance.miret.fit.engine import candidate_arrays, seed_trees
from miret_governance.governance.miret.fit.estimator import LEGACY_PARAMS
from miret_governance.governance.miret.heuristics.cart import cart_predict
from miret_governance.governance.miret.heuristics.heuristic import warm_start
from miret_governance.governance.miret.milp.formulation import build_model, encode
from miret_governance.governance.miret.problem.sampling import (
    SIGNATURE_TREES,
    quotas,
    sample_rows,
    samples,
    strata,
)
from miret_governance.governance.miret.solvers.highs import HIGHS_CHECK_SCALE, highs_check_work
from miret_governance.governance.miret.solvers.solve_result import PROVED_GAP, StallRule
from miret_governance.governance.miret.solvers.table import solve


@pytest.fixture(scope="module")
def wisconsin():
    X, y = load_breast_cancer(return_X_y=True)
    rows = np.random.default_rng(0).choice(len(X), 200, replace=False)
    X, y = X[rows], y[rows]
    forest = RandomForestClassifier(30, max_depth=3, max_features=None, random_state=0)
    return X, forest.fit(X, y)


@pytest.fixture(scope="module")
def dominant_root():
    """Every tree splits its root on x0 (the paper's strict rule empties level 0)."""
    rng = np.random.default_rng(3)
    X = rng.random((300, 4))
    y = (X[:, 0] > 0.5).astype(int) ^ (rng.random(300) < 0.1) * (X[:, 1] > 0.5)
    forest = RandomForestClassifier(20, max_depth=2, max_features=None, random_state=0)
    return X, forest.fit(X, y)


def test_dominant_root_keeps_its_root_feature(dominant_root):
    X, forest = dominant_root
    ensemble = read_ensemble(forest)
    assert {int(tree.feature[0]) for tree in ensemble.trees} == {0}
    problem = build_problem(X, ensemble, gamma_percentile=100 / 3)
    frequency = problem.frequency[0]
    # root frequencies: a single positive value, its percentile equals it, f > gamma is empty
    assert np.count_nonzero(frequency) == 1 and frequency[0] > 0
    assert problem.allowed_features[0] == ["x0"]
    surrogate = MiretSurrogate(forest, solver="highs", time_limit=20).fit(X)
    assert surrogate.solve_report_.allowed_features[0] == ["x0"]
    assert surrogate.tree_.coef[0, 0] != 0
    report = surrogate.solve_report_
    assert report.objective <= report.cart_seed_objective + 1e-9


def test_cart_seeded_fit_is_never_worse_than_the_cart_tree(wisconsin):
    X, forest = wisconsin
    surrogate = MiretSurrogate(forest, depth=2, solver="highs", time_limit=20).fit(X)
    report = surrogate.solve_report_
    problem = build_problem(X, read_ensemble(forest), depth=2, scaler=surrogate.input_scaler_)
    baseline, _, seeds = seed_trees(problem, random_state=0)
    for seed in seeds:
        assert report.objective <= seed.objective(problem) + 1e-9
    # where the CART tree is MILP-feasible (no proximity constraint, every feature
    # allowed) its seed reproduces the CART partition exactly
    free = replace(
        problem,
        allowed=np.ones_like(problem.allowed),
        frequency=np.ones_like(problem.frequency),
        component=np.arange(problem.n_samples),
    )
    free_baseline, _, free_seeds = seed_trees(free, random_state=0)
    np.testing.assert_array_equal(
        free_seeds[0].predict(free.X), cart_predict(free_baseline, free.X)
    )
    labels = problem.classes[(problem.y == 1).astype(int)]
    assert report.baseline_cart_train_fidelity == pytest.approx(
        np.mean(cart_predict(baseline, problem.X) == labels)
    )
    assert surrogate.baseline_fidelity(X) == pytest.approx(report.baseline_cart_train_fidelity)
    heuristic_only, _ = warm_start(problem, seeds=seeds)
    assert heuristic_only.objective(problem) <= min(s.objective(problem) for s in seeds) + 1e-9


def test_stall_rule_counts_work_not_seconds():
    rule = StallRule(stall_work=2.0, work_limit=None, progress=None)
    assert not rule.update(0.0, 10.0, 1.0)
    assert not rule.update(1.5, 10.0, 1.0)
    assert not rule.update(2.5, 9.0, 1.0)  # incumbent moved at 2.5: the window restarts
    assert not rule.update(4.0, 9.0, 1.0 + 1e-9)  # below the tolerance: no move
    assert rule.update(4.5, 9.0, 1.0)
    assert rule.outcome == "stalled"
    budget = StallRule(stall_work=None, work_limit=3.0, progress=None)
    assert not budget.update(2.9, 10.0, 1.0 - 1.0)
    assert budget.update(3.0, 8.0, 2.0) and budget.outcome == "work_limit"


def _start_and_model(wisconsin):
    X, forest = wisconsin
    problem = build_problem(X, read_ensemble(forest), scaler=MinMaxScaler().fit(X))
    tree, _ = warm_start(problem)
    model = build_model(problem)
    return encode(tree.coef, tree.intercept, tree.apply(problem.X), model), model


def test_solver_run_without_progress_ends_stalled_or_proved(wisconsin):
    """Any correct solver either proves the optimum or, without moving for ``stall_work``
    units, ends stalled with counted work; the first check past the budget stops it."""
    start, model = _start_and_model(wisconsin)
    result = solve(model, solver="highs", time_limit=300, stall_work=0.2, start=start)
    assert result.status in ("stalled", "optimal")
    if result.status == "stalled":
        assert 0.2 <= result.work < 300
    else:
        assert result.gap <= PROVED_GAP
    assert result.objective <= model.objective(start) + 1e-9
    # a budget of one limit check: stopped on work (the root relaxation's bound is far
    # below the start's objective, so no solver proves the optimum before its first check)
    first = solve(model, solver="highs", time_limit=300, work_limit=highs_check_work(model))
    assert first.status == "work_limit" and first.work >= highs_check_work(model)


def test_check_weight_follows_the_model_size(wisconsin):
    _, model = _start_and_model(wisconsin)
    assert (model.n_rows, model.n_vars, model.nnz) == (3621, 859, 37118)
    assert HIGHS_CHECK_SCALE == 5e6
    # (3621 + 859) * 37118 ** 0.25 / 5e6: a check of this model is about 3 ms of one core
    assert highs_check_work(model) == pytest.approx(0.0124367, rel=1e-5)


def _busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_solver_stops_at_the_same_work_under_load(wisconsin):
    """One thread, work-counted stops: the same outcome, work, nodes, objective, bound
    and solution with two processes competing for the cores. Whether this solver proves
    the optimum within the budget or not, both runs must agree on everything."""
    start, model = _start_and_model(wisconsin)
    kwargs = {"solver": "highs", "time_limit": 300, "work_limit": 1.0, "start": start}
    quiet = solve(model, **kwargs)
    context = multiprocessing.get_context("spawn")
    burners = [context.Process(target=_busy, args=(30,)) for _ in range(2)]
    for burner in burners:
        burner.start()
    try:
        loaded = solve(model, **kwargs)
    finally:
        for burner in burners:
            burner.terminate()
    assert quiet.status == loaded.status
    assert (quiet.work, quiet.nodes, quiet.objective, quiet.bound) == (
        loaded.work,
        loaded.nodes,
        loaded.objective,
        loaded.bound,
    )
    np.testing.assert_array_equal(quiet.x, loaded.x)
    checks = quiet.work / highs_check_work(model)  # work is counted in whole limit checks
    assert checks == pytest.approx(round(checks), abs=1e-6)
    if quiet.status == "work_limit":  # stopped once the budget was spent
        assert quiet.work >= 1.0
    else:
        assert quiet.status == "optimal" and quiet.gap <= PROVED_GAP and quiet.work < 1.0


def test_same_seed_gives_the_same_tree(wisconsin):
    X, forest = wisconsin
    problem = build_problem(X, read_ensemble(forest), scaler=MinMaxScaler().fit(X))
    first, info = warm_start(problem, random_state=4)
    again, info_again = warm_start(problem, random_state=4)
    np.testing.assert_array_equal(first.coef, again.coef)
    np.testing.assert_array_equal(first.intercept, again.intercept)
    assert info["work"] == info_again["work"] and not info["time_limit_hit"]
    small = warm_start(problem, random_state=4, work_budget=1.0)[1]
    assert small["work"] < info["work"]  # the budget is counted in work


def test_sample_draws_rows_in_proportion_to_label_and_leaf_strata(wisconsin):
    X, forest = wisconsin
    ensemble = read_ensemble(forest)
    labels = ensemble.predict(X)
    rows = sample_rows(ensemble, X, labels, 60, random_state=1)
    assert rows.size == 60 and np.unique(rows).size == 60
    stratum = strata(ensemble, X, labels)
    sizes = np.bincount(stratum)
    taken = np.bincount(stratum[rows], minlength=sizes.size)
    # every stratum (label x leaves of the first trees) gets its share, within one row
    assert np.all(np.abs(taken - sizes * 60 / len(X)) < 1)
    for label in np.unique(labels):  # one label per stratum
        assert (
            np.unique(stratum[labels == label]).size + np.unique(stratum[labels != label]).size
            == sizes.size
        )
    leaves = ensemble.apply(X)[:, :SIGNATURE_TREES]  # one leaf signature per stratum
    np.testing.assert_array_equal(ensemble.apply(X, first_trees=SIGNATURE_TREES), leaves)
    keys = np.unique(np.column_stack([stratum, leaves]), axis=0)
    assert keys.shape[0] == sizes.size
    np.testing.assert_array_equal(quotas(np.array([5, 3, 2]), 5), [3, 1, 1])
    np.testing.assert_array_equal(rows, sample_rows(ensemble, X, labels, 60, random_state=1))
    assert not np.array_equal(rows, sample_rows(ensemble, X, labels, 60, random_state=2))
    np.testing.assert_array_equal(sample_rows(ensemble, X, labels, 500), np.arange(len(X)))
    # several sizes from one stratification: each is the sample of its size
    small, large, every = samples(ensemble, X, labels, (60, 120, None), random_state=1)
    np.testing.assert_array_equal(small, rows)
    np.testing.assert_array_equal(large, sample_rows(ensemble, X, labels, 120, random_state=1))
    np.testing.assert_array_equal(every, np.arange(len(X)))


def test_max_rows_fits_on_the_sample(wisconsin):
    X, forest = wisconsin
    surrogate = MiretSurrogate(forest, depth=2, max_rows=80, time_limit=10).fit(X)
    assert surrogate.n_rows_seen_ == 200 and surrogate.n_rows_used_ == 80
    assert surrogate.problem_["n_samples"] == 80


def test_returned_cart_and_univariate_trees_use_every_row_up_to_candidate_rows(
    wisconsin, monkeypatch
):
    """The MILP sees 80 rows; the CART and univariate candidates (the fall-backs) all 200
    (at most CANDIDATE_ROWS: with 120 they are refitted on a 120-row sample)."""
    X, forest = wisconsin
    ensemble = read_ensemble(forest)
    unit, labels = MinMaxScaler().fit_transform(X), ensemble.predict(X)
    surrogate = MiretSurrogate(
        forest, depth=2, alpha=0.5, max_rows=80, time_limit=5, **LEGACY_PARAMS
    )
    surrogate.fit(X)
    on_all, _ = candidate_arrays(unit, labels, 2, np.asarray(ensemble.classes), 0)
    assert surrogate.baseline_ == on_all
    monkeypatch.setattr(fitting, "CANDIDATE_ROWS", 120)
    surrogate = MiretSurrogate(
        forest, depth=2, alpha=0.5, max_rows=80, time_limit=5, **LEGACY_PARAMS
    )
    surrogate.fit(X)
    rows = sample_rows(ensemble, X, labels, 120, 0)
    on_sample, _ = candidate_arrays(unit[rows], labels[rows], 2, np.asarray(ensemble.classes), 0)
    assert surrogate.baseline_ == on_sample != on_all
