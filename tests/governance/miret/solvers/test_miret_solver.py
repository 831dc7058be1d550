"""MIRET problem, sparse formulation and solver backends (HiGHS, Gurobi)."""

import itertools
import time
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.miret.fit.engine import fit_problem
from miret_governance.governance.miret.fit.estimator import MiretSurrogate
from miret_governance.governance.miret.milp.formulation import build_model, encode
from miret_governance.governance.miret.problem.layout import alternating_classes, subtree_leaves
from miret_governance.governance.miret.problem.problem import MiretProblem, build_problem
from miret_governance.governance.miret.solvers.gurobi import gurobi_license
from miret_governance.governance.miret.solvers.table import solve
from miret_governance.governance.report.wording import solver_outcome

needs_gurobi = pytest.mark.skipif(
    gurobi_license() == "unavailable", reason="gurobipy has no working license here"
)


@pytest.fixture(scope="module")
def small(small_forest):
    """30 samples, 3 features, a 10-tree depth-2 forest (normalized data) as an Ensemble."""
    X, forest = small_forest
    return X, read_ensemble(forest)


@pytest.fixture(scope="module")
def wisconsin():
    X, y = load_breast_cancer(return_X_y=True)
    X = MinMaxScaler().fit_transform(X)
    forest = RandomForestClassifier(100, max_depth=3, max_features=None, random_state=0).fit(X, y)
    return X, read_ensemble(forest)


def hand_problem(X, y, weight, allowed, component=None, formulation="miret", depth=1, f=None):
    """A MiretProblem built directly (independent of any ensemble)."""
    X = np.asarray(X, dtype=float)
    allowed = np.asarray(allowed, dtype=bool)
    frequency = np.where(allowed, 0.5, 0.0) if f is None else np.asarray(f, dtype=float)
    n = X.shape[0]
    return MiretProblem(
        X=X,
        y=np.asarray(y),
        weight=np.asarray(weight, dtype=float),
        frequency=frequency,
        allowed=allowed,
        component=np.arange(n) if component is None else np.asarray(component),
        depth=depth,
        alpha=0.1,
        epsilon=1e-3,
        formulation=formulation,
        feature_names=tuple(f"x{j}" for j in range(X.shape[1])),
        classes=np.array([0, 1]),
    )


def optimum(problem, solver="highs", reductions=True):
    model = build_model(problem, reductions=reductions)
    result = solve(model, solver=solver, time_limit=30, mip_gap=0)
    assert result.status == "optimal"
    return model, result


# ---------------------------------------------------------------------- problem
def stump_forest():
    """4 depth-2 trees on 4 features with known 'nodes' level frequencies."""

    def tree(root, child):
        # root splits on `root`; its left child splits on `child`; the rest are leaves
        return {
            "feature": [root, child, -1, -1, -1],
            "threshold": [0.5, 0.3, np.nan, np.nan, np.nan],
            "left": [1, 3, -1, -1, -1],
            "right": [2, 4, -1, -1, -1],
            "value": [0.5, 0.5, 1.0, 0.0, 1.0],
        }

    return Ensemble.from_arrays([tree(0, 1), tree(0, 1), tree(1, 2), tree(2, 1)], n_features=4)


def test_frequency_thresholds_follow_the_paper():
    ensemble = stump_forest()
    X = np.random.default_rng(1).random((12, 4))
    problem = build_problem(X, ensemble, gamma_percentile=100 / 3)
    # level 0: 2/4, 1/4, 1/4, 0; level 1 (|E| 2^1 = 8 nodes): 3/8, 1/8, 0, 0
    np.testing.assert_allclose(problem.frequency, [[0.5, 0.25, 0.25, 0], [0, 0.375, 0.125, 0]])
    # gamma_0 = 33rd percentile of {.25, .25, .5} = .25; gamma_1 of {.125, .375} = 0.2083
    np.testing.assert_array_equal(
        problem.allowed, [[True, False, False, False], [False, True, False, False]]
    )
    everything = build_problem(X, ensemble, gamma_percentile=0)
    np.testing.assert_array_equal(everything.allowed, everything.frequency > 0)
    np.testing.assert_allclose(problem.penalty[0], [0.5 / 0.5, 0, 0, 0])
    # h = 100 keeps only each level's most frequent feature (never an empty level)
    top = build_problem(X, ensemble, gamma_percentile=100)
    np.testing.assert_array_equal(top.allowed, [[1, 0, 0, 0], [0, 1, 0, 0]])
    assert top.allowed_features == [["x0"], ["x1"]]


def test_problem_labels_weights_and_components(small):
    X, ensemble = small
    problem = build_problem(X, ensemble, proximity_threshold=0.9)
    positive = ensemble.predict(X) == ensemble.classes[1]
    np.testing.assert_array_equal(problem.y, np.where(positive, 1, 0))
    np.testing.assert_allclose(problem.weight, ensemble.predict_proba(X).max(axis=1))
    leaves = ensemble.apply(X)
    same = (leaves[:, None, :] == leaves[None, :, :]).mean(axis=2) >= 0.9
    joined = problem.component[:, None] == problem.component[None, :]
    assert np.all(joined[same])  # every close pair shares a component
    alone = build_problem(X, ensemble, proximity_threshold=1.01)
    np.testing.assert_array_equal(alone.component, np.arange(30))


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda X: np.where(np.eye(*X.shape, dtype=bool), np.nan, X), "NaN"),
        (lambda X: np.where(np.eye(*X.shape, dtype=bool), 1.5, X), r"\[0, 1\]"),
        (lambda X: X[:, :2], "3 columns"),
    ],
)
def test_bad_input_is_refused_clearly(small, bad, message):
    X, ensemble = small
    with pytest.raises(ValueError, match=message):
        build_problem(bad(X), ensemble)


def test_depth_and_tolerance(small):
    X, ensemble = small
    with pytest.raises(ValueError, match="ensemble's depth 2"):
        build_problem(X, ensemble, depth=3)
    assert build_problem(X, ensemble, depth=1).frequency.shape == (1, 3)
    nudged = X.copy()
    nudged[0, 0] = -1e-12
    assert build_problem(nudged, ensemble).X.min() == 0.0


# ---------------------------------------------------------------------- formulation
def test_subtree_leaves_and_classes():
    left, right = subtree_leaves(2)
    np.testing.assert_array_equal(left, [[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]])
    np.testing.assert_array_equal(right, [[0, 0, 1, 1], [0, 1, 0, 0], [0, 0, 0, 1]])
    np.testing.assert_array_equal(alternating_classes(2), [0, 1, 0, 1])


def test_model_sizes_match_the_paper(small):
    X, ensemble = small
    problem = build_problem(X, ensemble, gamma_percentile=0, proximity_threshold=1.01)
    n, p, T, L = 30, 3, 3, 4
    basic = build_model(
        build_problem(
            X, ensemble, gamma_percentile=0, proximity_threshold=1.01, formulation="basic"
        ),
        reductions=False,
    )
    # a, b, s, z; routing 2|I||T_B|, assignment |I|, sparsity 2|T_B||J|
    assert basic.n_vars == T * p + T + T * p + n * L
    assert basic.n_rows == 2 * n * T + n + 2 * T * p
    improved = build_model(problem, reductions=False)
    # + q_L, q_R; root assignment |I|, parenting 2|I||T_B^f|, linking 2|I||T_B|, one split
    assert improved.n_vars == basic.n_vars + 2 * n * T
    assert improved.n_rows == 2 * n * T + n + 2 * n * 1 + 2 * n * T + 1 + 2 * T * p
    assert improved.n_binaries == T * p + n * L + 2 * n * T


def test_big_m_per_sample_is_valid_and_smaller(small):
    X, ensemble = small
    problem = build_problem(X, ensemble, gamma_percentile=50, proximity_threshold=1.01)
    model = build_model(problem)
    n, T = 30, 3
    # rows: left routing (sample, node), then right routing (sample, node)
    big_l = model.row_upper[: n * T].reshape(n, T)
    expected = (X @ problem.allowed.T.astype(float) + 1.0)[:, problem.node_level]
    np.testing.assert_allclose(big_l, expected)
    np.testing.assert_allclose(model.row_lower[n * T : 2 * n * T].reshape(n, T), -expected)
    assert np.all(big_l <= problem.n_features + 1)  # never looser than the paper's |J| + 1
    # the extreme admissible hyperplane (a = 1 on allowed features, b = 1) reaches M_L
    a = problem.allowed[problem.node_level].astype(float)
    np.testing.assert_allclose(X @ a.T + 1.0, expected)


def test_reductions_drop_fixed_variables_and_merge_components(small):
    X, ensemble = small
    problem = build_problem(X, ensemble, gamma_percentile=50, proximity_threshold=0.9)
    reduced, full = build_model(problem), build_model(problem, reductions=False)
    allowed = int(problem.allowed[problem.node_level].sum())
    assert (reduced.a_index >= 0).sum() == allowed
    assert (full.a_index >= 0).sum() == 3 * 3
    assert reduced.z_index.shape == (problem.n_components, 4)
    assert full.z_index.shape == (30, 4)
    assert reduced.n_vars < full.n_vars and reduced.n_rows < full.n_rows


@pytest.mark.parametrize("formulation", ["miret", "basic"])
def test_reduced_and_unreduced_models_have_the_same_optimum(small, formulation):
    X, ensemble = small
    problem = build_problem(X, ensemble, gamma_percentile=0, formulation=formulation)
    _, reduced = optimum(problem)
    _, full = optimum(problem, reductions=False)
    assert reduced.objective == pytest.approx(full.objective, abs=1e-6)


def test_basic_and_improved_formulations_have_the_same_optimum(small):
    # Here the optimal b-MIRET tree splits, so "at least one split" and b_t >= 0
    # (symmetry breaking) do not change the optimum.
    X, ensemble = small
    values = [
        optimum(build_problem(X, ensemble, gamma_percentile=0, formulation=f))[1].objective
        for f in ("miret", "basic")
    ]
    assert values[0] == pytest.approx(values[1], abs=1e-6)
    assert values[0] == pytest.approx(1.8388888888888, abs=1e-6)


@needs_gurobi
@pytest.mark.parametrize("formulation", ["miret", "basic"])
def test_highs_and_gurobi_agree(small, formulation):
    X, ensemble = small
    problem = build_problem(X, ensemble, gamma_percentile=0, formulation=formulation)
    _, highs = optimum(problem, "highs")
    _, gurobi = optimum(problem, "gurobi")
    assert gurobi.solver == "gurobi" and highs.solver == "highs"
    assert highs.objective == pytest.approx(gurobi.objective, abs=1e-6)


def brute_force_univariate(problem):
    """Exhaustive search over all depth-D trees on the only feature (x in [0, 1]).

    With one feature an oblique split is a threshold in one direction or a constant
    routing; thresholds between consecutive distinct values cover every partition.
    """
    x = problem.X[:, 0]
    values = np.unique(x)
    cuts = (values[:-1] + values[1:]) / 2
    options = [("const", -1), ("const", 1)]
    options += [("up", c) for c in cuts] + [("down", c) for c in cuts]
    T = 2**problem.depth - 1
    level = problem.node_level
    penalty = problem.penalty[:, 0]
    best = np.inf
    for tree in itertools.product(options, repeat=T):
        node = np.zeros(x.size, dtype=int)
        for _ in range(problem.depth):
            kinds = [tree[t] for t in node]
            right = np.array(
                [
                    (s == 1) if k == "const" else (xi > s if k == "up" else xi < s)
                    for (k, s), xi in zip(kinds, x)
                ]
            )
            node = 2 * node + 1 + right
        leaves = node
        if any(len(set(leaves[problem.component == c])) > 1 for c in set(problem.component)):
            continue
        predicted = np.where(leaves % 2 == 1, 0, 1)
        misfit = problem.weight[predicted != problem.y].sum()
        splits = [t for t in range(T) if tree[t][0] != "const"]
        cost = misfit + sum(penalty[level[t]] for t in splits)
        if not splits and problem.formulation == "miret":
            cost += penalty[problem.allowed[:, 0]].min()  # s = 1 with a = 0 somewhere
        best = min(best, cost)
    return best


@pytest.mark.parametrize("formulation", ["miret", "basic"])
@pytest.mark.parametrize("depth", [1, 2])
def test_milp_matches_exhaustive_search_on_one_feature(formulation, depth):
    x = np.array([[0.05], [0.2], [0.35], [0.5], [0.7], [0.95]])
    y = np.array([1, 0, 0, 1, 1, 0])
    weight = np.array([0.9, 0.6, 0.8, 0.7, 0.55, 0.95])
    allowed = np.ones((depth, 1), dtype=bool)
    for component in (None, [0, 1, 1, 2, 3, 4]):
        problem = hand_problem(x, y, weight, allowed, component, formulation, depth)
        expected = brute_force_univariate(problem)
        for reductions in (True, False):
            _, result = optimum(problem, reductions=reductions)
            assert result.objective == pytest.approx(expected, abs=1e-6)


def test_excluded_features_get_no_coefficient_and_components_share_a_leaf(small):
    X, ensemble = small
    problem = build_problem(X, ensemble, gamma_percentile=50, proximity_threshold=0.8)
    assert problem.n_components < 30
    for reductions in (True, False):
        model, result = optimum(problem, reductions=reductions)
        coef, intercept, leaves = model.decode(result.x)
        assert np.all(coef[~problem.allowed[problem.node_level]] == 0)
        for c in range(problem.n_components):
            assert len(set(leaves[problem.component == c])) == 1
        # the solver's assignment is the routing of its hyperplanes (within epsilon)
        values = X @ coef.T + intercept
        node = np.zeros(30, dtype=int)
        for _ in range(2):
            v = values[np.arange(30), node]
            assert np.all((v <= 1e-6) | (v >= problem.epsilon - 1e-6))
            node = 2 * node + 1 + (v > problem.epsilon / 2)
        np.testing.assert_array_equal(node, leaves)


def test_empty_level_means_dummy_splits_there():
    rng = np.random.default_rng(3)
    X = rng.random((10, 2))
    y = np.where(X[:, 0] > 0.5, 1, 0)
    allowed = np.array([[True, True], [False, False]])
    problem = hand_problem(X, y, np.ones(10), allowed, depth=2)
    model, result = optimum(problem)
    coef, _, _ = model.decode(result.x)
    assert np.all(coef[1:] == 0)
    assert result.objective == pytest.approx(0.1 / 0.5)  # one split on x0 fits exactly


def test_no_allowed_feature_anywhere():
    X = np.random.default_rng(4).random((8, 2))
    y = np.array([1, 0, 1, 1, 0, 1, 1, 1])
    problem = hand_problem(X, y, np.ones(8), np.zeros((2, 2), dtype=bool), depth=2)
    with pytest.raises(ValueError, match="lower gamma_percentile"):
        build_model(problem)
    basic = hand_problem(X, y, np.ones(8), np.zeros((2, 2), bool), formulation="basic", depth=2)
    assert optimum(basic)[1].objective == pytest.approx(2.0)  # constant +1 tree


def test_fewer_samples_than_leaves_and_duplicates():
    X = np.array([[0.5, 0.5], [0.5, 0.5], [0.2, 0.9]])
    allowed = np.ones((3, 2), bool)
    problem = hand_problem(X, [1, 1, 0], [0.8, 0.8, 0.6], allowed, [0, 0, 1], depth=3)
    model, result = optimum(problem)
    # identical samples (one proximity component) share z and their routing rows
    assert model.z_index.shape == (2, 8)
    assert model.A.shape[0] == 2 * 2 * 7 + 2 + 2 * 2 * 3 + 2 * 2 * 7 + 1 + 2 * 7 * 2
    assert result.objective == pytest.approx(0.1 / 0.5)


def test_encode_checks_feasibility(small):
    X, ensemble = small
    problem = build_problem(X, ensemble, gamma_percentile=0, proximity_threshold=1.01)
    model, result = optimum(problem)
    coef, intercept, leaves = model.decode(result.x)
    x = encode(coef, intercept, leaves, model)
    assert model.is_feasible(x, tolerance=1e-6)
    assert model.objective(x) == pytest.approx(result.objective, abs=1e-6)
    # a hyperplane that leaves a sample inside the open epsilon gap is infeasible
    values = X @ coef[0] + intercept[0]
    shifted = intercept.copy()
    shifted[0] -= values[np.argmax(values > 0)] - problem.epsilon / 2
    assert not model.is_feasible(encode(coef, shifted, leaves, model))


def test_time_limit_is_honoured(wisconsin):
    X, ensemble = wisconsin
    model = build_model(build_problem(X, ensemble))
    seen = []
    begin = time.perf_counter()
    result = solve(model, solver="highs", time_limit=2.0, progress=lambda *a: seen.append(a))
    elapsed = time.perf_counter() - begin
    assert elapsed < 20  # without the limit this solve runs for minutes (no tight timing)
    assert result.status in ("time_limit", "time_limit_no_incumbent")
    assert seen and seen[-1][0] == pytest.approx(result.wall_time)
    quick = solve(model, solver="highs", time_limit=1e-3)
    assert quick.status == "time_limit_no_incumbent" and quick.x is None


@needs_gurobi
def test_gurobi_size_limit_falls_back_to_highs(wisconsin):
    if gurobi_license() != "size-limited":
        pytest.skip("the Gurobi license here is not size-limited")
    X, ensemble = wisconsin
    model = build_model(build_problem(X, ensemble))
    assert model.n_vars > 2000
    with pytest.warns(RuntimeWarning, match="size-limited"):
        result = solve(model, solver="gurobi", time_limit=0.5)
    assert result.solver == "highs"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert solve(model, solver="auto", time_limit=0.5).solver == "highs"


@needs_gurobi
def test_the_whole_milp_runs_on_gurobi_where_the_license_takes_it(small):
    """The fit's whole-MILP path on Gurobi (a model within the size-limited license),
    checked against an independent HiGHS solve of the same model."""
    X, ensemble = small
    problem = build_problem(X, ensemble, depth=2, gamma_percentile=0)
    params = MiretSurrogate(solver="gurobi", mip_gap=0.0, milp_share=None).get_params()
    _, report, _, _ = fit_problem(problem, params, time.perf_counter())
    assert (report.solver, report.status, report.whole_milp_skipped) == ("gurobi", "optimal", "")
    assert report.solver_objective == pytest.approx(optimum(problem)[1].objective, abs=1e-9)
    assert report.whole_milp_start == pytest.approx(report.solver_objective, abs=1e-9)
    start = f"{report.whole_milp_start:.4g}"
    assert (
        f"The whole MILP did not improve the heuristic's objective ({start})."
        in (solver_outcome(report.to_dict())["proven"])
    )


@needs_gurobi
def test_a_whole_milp_over_the_size_limited_license_is_not_attempted(wisconsin):
    if gurobi_license() != "size-limited":
        pytest.skip("the Gurobi license here is not size-limited")
    X, ensemble = wisconsin
    problem = build_problem(X, ensemble, depth=2)
    params = MiretSurrogate(solver="gurobi", warm_start=False, milp_share=None).get_params()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither tried on Gurobi nor handed to HiGHS
        _, report, _, _ = fit_problem(problem, params, time.perf_counter())
    assert (report.global_milp, report.whole_milp_skipped) == (False, "licence_size")
    assert (report.n_variables, report.n_binaries) == (1055, 1026)
    assert solver_outcome(report.to_dict())["proven"].endswith(
        "the whole tree was not solved as one MILP (1055 variables, 4367 constraints, 1026 "
        "binaries: over the size-limited Gurobi license's 2,000 and the 400 binaries HiGHS "
        "is given)."
    )


def test_dataframe_columns_are_matched_by_name(small):
    import pandas as pd

    X, ensemble = small
    frame = pd.DataFrame(X, columns=["x0", "x1", "x2"])[["x2", "x0", "x1"]]
    np.testing.assert_array_equal(build_problem(frame, ensemble).X, X)
    named = pd.DataFrame(X, columns=["a", "b", "c"])  # unnamed ensemble: by position
    np.testing.assert_array_equal(build_problem(named, ensemble).X, X)


def test_highs_prints_nothing_to_standard_output():
    """HiGHS's C++ banner (printed by the first Highs of a process) never reaches the
    process's standard output, which may carry a command's JSON."""
    import subprocess
    import sys

    code = (
        "import highspy\n"
        "from miret_governance.governance.miret.solvers.highs import new_highs\n"
        "new_highs(); new_highs()\n"
        "highspy.Highs()\n"  # after the first: HiGHS prints its banner only once
        "print('done')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout == "done\n"
    bare = subprocess.run(
        [sys.executable, "-c", "import highspy; highspy.Highs()"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Running HiGHS" in bare.stdout  # what new_highs keeps out


def test_one_table_of_solvers_and_its_auto_choice(wisconsin):
    """Every solver name a fit accepts is an entry of the one table (or "auto"); "auto"
    picks Gurobi only when its probe says the license fits the model."""
    from miret_governance.governance.miret.fit.estimator import MiretSurrogate
    from miret_governance.governance.miret.solvers.gurobi import gurobi_fits
    from miret_governance.governance.miret.solvers.table import (
        SOLVER_CHOICES,
        SOLVERS,
        backend,
        solver_package,
    )

    assert SOLVER_CHOICES == ("auto", "highs", "gurobi")
    constraint = MiretSurrogate._parameter_constraints["solver"][0]
    assert constraint.options == set(SOLVER_CHOICES)
    X, ensemble = wisconsin
    model = build_model(build_problem(X, ensemble))
    assert all(backend(model, name) is entry for name, entry in SOLVERS.items())
    assert backend(model, "auto").name == ("gurobi" if gurobi_fits(model) else "highs")
    assert (solver_package("highs"), solver_package("gurobi"), solver_package("none")) == (
        "highspy",
        "gurobipy",
        None,
    )
    with pytest.raises(InvalidInputError, match="solver must be one of"):
        backend(model, "cplex")
