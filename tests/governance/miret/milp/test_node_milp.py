"""One node's MILP: against the whole MILP where they coincide, feasibility, and the
size beyond which HiGHS is not given it."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier

from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.miret.fit.engine import constant_tree, heuristic_tree, seed_trees
from miret_governance.governance.miret.fit.estimator import MiretSurrogate
from miret_governance.governance.miret.heuristics.local_search import TreeSearch
from miret_governance.governance.miret.milp import node_milp
from miret_governance.governance.miret.milp.feasibility import check_feasible
from miret_governance.governance.miret.milp.formulation import build_model
from miret_governance.governance.miret.milp.node_milp import node_model, reoptimize
from miret_governance.governance.miret.problem.problem import build_problem
from miret_governance.governance.miret.solvers.gurobi import gurobi_license
from miret_governance.governance.miret.solvers.table import solve, worth_solving

PARAMS = MiretSurrogate(solver="highs").get_params()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(4)
    X = rng.random((60, 3))
    y = (X[:, 0] + 0.6 * X[:, 1] > 0.8).astype(int)
    forest = RandomForestClassifier(10, max_depth=2, random_state=0).fit(X, y)
    return X, read_ensemble(forest)


@pytest.mark.parametrize("formulation", ["miret", "basic"])
def test_a_depth_one_tree_is_one_node_so_both_milps_agree(data, formulation):
    X, ensemble = data
    problem = build_problem(X, ensemble, depth=1, gamma_percentile=0, formulation=formulation)
    tree, statuses, _ = reoptimize(problem, constant_tree(problem, 1), PARAMS, work_per_node=50)
    whole = solve(build_model(problem), solver="highs", time_limit=60, work_limit=50)
    assert statuses == {0: "optimal"} and whole.status == "optimal"
    assert tree.objective(problem) == pytest.approx(whole.objective, abs=1e-6)
    # a row may sit at epsilon up to rounding (1e-16), as in the whole MILP's solutions
    assert check_feasible(tree, problem, epsilon=problem.epsilon - 1e-9, tolerance=1e-6) == []


def test_node_milps_never_worsen_a_tree_and_keep_it_feasible(data):
    X, ensemble = data
    problem = build_problem(X, ensemble, depth=2, gamma_percentile=0)
    _, _, seeds = seed_trees(problem, random_state=0)
    start, _ = heuristic_tree(problem, seeds, 0, 1e6, 30)
    tree, statuses, work = reoptimize(problem, start, PARAMS)
    assert tree.objective(problem) <= start.objective(problem) + 1e-9
    assert set(statuses) == {0, 1, 2} and work > 0
    # no work budget: no node model is built or solved, the tree is kept
    kept, unsolved, none = reoptimize(problem, start, PARAMS, budget=0.0)
    assert unsolved == dict.fromkeys(range(3), "no_budget") and none == 0.0
    assert np.array_equal(kept.coef, start.coef)
    # a row may sit at epsilon up to rounding (1e-16), as in the whole MILP's solutions
    assert check_feasible(tree, problem, epsilon=problem.epsilon - 1e-9, tolerance=1e-6) == []


def test_node_model_prices_the_current_split(data):
    X, ensemble = data
    problem = build_problem(X, ensemble, depth=2, gamma_percentile=0)
    _, _, seeds = seed_trees(problem, random_state=0)
    tree = seeds[0]
    search = TreeSearch(problem, np.random.default_rng(0), math.inf)
    search.set_tree(tree.coef, tree.intercept)
    for t in range(problem.n_branch):
        model = node_model(search, t)
        if model is None:
            continue
        # the current split is a feasible solution whose misfit part is the weight of the
        # rows of t that the tree gets wrong (rows that fare alike on both sides aside)
        start = model.start
        assert np.all(model.A @ start >= model.row_lower - 1e-9)
        assert np.all(model.A @ start <= model.row_upper + 1e-9)
        k = model.columns.size
        misfit = model.c[2 * k + 1 :] @ start[2 * k + 1 :] + model.objective_constant
        reach = np.zeros(problem.n_samples, dtype=bool)
        leaves = tree.apply(problem.X)
        wrong = tree.leaf_class_of(leaves) != problem.y
        nodes = np.arange(problem.n_samples) * 0
        for _ in range(int(np.log2(t + 1))):
            values = np.einsum("ij,ij->i", problem.X, tree.coef[nodes]) + tree.intercept[nodes]
            nodes = 2 * nodes + 1 + (values > 0)
        reach = nodes == t
        assert misfit <= float(problem.weight[reach & wrong].sum()) + 1e-9


def test_highs_is_given_node_milps_up_to_its_size_limit():
    limit = node_milp.NODE_MILP_BINARIES
    small = SimpleNamespace(n_binaries=limit, n_vars=10**6, n_rows=10**6)
    large = SimpleNamespace(n_binaries=limit + 1, n_vars=10**6, n_rows=10**6)
    assert worth_solving(small, "highs", limit) and not worth_solving(large, "highs", limit)
    assert worth_solving(large, "gurobi", limit)  # asked for: Gurobi solves it (or says why not)
    # auto sends a model this size to HiGHS under a size-limited or no licence
    assert worth_solving(large, "auto", limit) == (gurobi_license() == "full")


def test_a_node_milp_too_large_for_highs_is_not_solved(data, monkeypatch):
    X, ensemble = data
    problem = build_problem(X, ensemble, depth=2, gamma_percentile=0)
    _, _, seeds = seed_trees(problem, random_state=0)
    start, _ = heuristic_tree(problem, seeds, 0, 1e6, 30)
    search = TreeSearch(problem, np.random.default_rng(0), math.inf)
    search.set_tree(start.coef, start.intercept, start.leaf_class)
    root = node_model(search, 0).n_binaries
    children = [node_model(search, t) for t in (1, 2)]
    sizes = [model.n_binaries for model in children if model is not None]
    assert sizes and max(sizes) < root  # the root sees every row, so its MILP is larger
    monkeypatch.setattr(node_milp, "NODE_MILP_BINARIES", root - 1)
    solved = []

    def recording_solve(model, **options):
        solved.append(model.n_binaries)
        return solve(model, **options)

    monkeypatch.setattr(node_milp, "solve", recording_solve)
    tree, statuses, _ = reoptimize(problem, start, PARAMS)
    assert statuses[0] == "too_large"
    assert solved and max(solved) <= root - 1  # the children were solved, the root not
    np.testing.assert_array_equal(tree.coef[0], start.coef[0])
    assert tree.intercept[0] == start.intercept[0]
    assert tree.objective(problem) <= start.objective(problem) + 1e-9
