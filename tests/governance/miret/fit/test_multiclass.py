"""MIRET with k > 2 classes: fixed-leaf-class MILP, k-class DP, relabelling, persistence,
heuristics and an end-to-end fit."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from sklearn.datasets import load_wine
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split

from miret_governance.governance.miret.fit.engine import centered, constant_tree, relabelled
from miret_governance.governance.miret.fit.selection import folds
from miret_governance.governance.miret.heuristics.cart import (
    cart_arrays,
    cart_predict,
    exact_tree,
    fit_cart,
)
from miret_governance.governance.miret.heuristics.heuristic import warm_start
from miret_governance.governance.miret.heuristics.local_search import TreeSearch
from miret_governance.governance.miret.heuristics.univariate import optimal_tree
from miret_governance.governance.miret.milp.feasibility import check_feasible
from miret_governance.governance.miret.milp.formulation import build_model
from miret_governance.governance.miret.milp.node_milp import reoptimize
from miret_governance.governance.miret.problem.layout import majority_classes
from miret_governance.governance.miret.problem.problem import MiretProblem
from miret_governance.governance.miret.solvers.table import solve
from miret_governance.governance.miret.tree.missing import missing_directions
from miret_governance.governance.miret.tree.tree import SurrogateTree

CLASSES = np.array(["low", "mid", "high"])


def problem_of(X, y, weight, depth, leaf_class=None, component=None, formulation="miret"):
    """A three-class MiretProblem built by hand: every feature allowed, f = 0.5 (penalty
    ``alpha / f = 0.2`` per coefficient with alpha 0.1)."""
    X = np.asarray(X, dtype=np.float64)
    n, p = X.shape
    problem = MiretProblem(
        X=X,
        y=np.asarray(y, dtype=np.int64),
        weight=np.asarray(weight, dtype=np.float64),
        frequency=np.full((depth, p), 0.5),
        allowed=np.ones((depth, p), dtype=bool),
        component=np.arange(n) if component is None else np.asarray(component),
        depth=depth,
        alpha=0.1,
        epsilon=1e-3,
        formulation=formulation,
        feature_names=tuple(f"x{j}" for j in range(p)),
        classes=CLASSES,
    )
    return problem if leaf_class is None else problem.with_leaf_class(leaf_class)


# rows 0, 1 are class 0, row 2 class 1, rows 3, 4 class 2 (one feature)
X1 = [[0.1], [0.3], [0.5], [0.7], [0.9]]
Y1 = [0, 0, 1, 2, 2]
W1 = [1.0, 0.9, 0.8, 0.7, 0.6]


def brute_force(problem) -> float:
    """Cheapest depth-D tree on the only feature with the problem's fixed leaf classes:
    every node is a constant routing or a threshold (either direction) between two
    consecutive values, which covers every partition a hyperplane can make."""
    x = problem.X[:, 0]
    values = np.unique(x)
    cuts = (values[:-1] + values[1:]) / 2
    options = [("const", False), ("const", True)]
    options += [("up", c) for c in cuts] + [("down", c) for c in cuts]
    T, penalty = problem.n_branch, problem.penalty[problem.node_level, 0]
    best = np.inf
    for tree in itertools.product(options, repeat=T):
        node = np.zeros(x.size, dtype=int)
        for _ in range(problem.depth):
            right = np.array(
                [
                    s if k == "const" else (xi > s if k == "up" else xi < s)
                    for (k, s), xi in zip([tree[t] for t in node], x, strict=True)
                ]
            )
            node = 2 * node + 1 + right
        leaf = node - T
        if any(len(set(leaf[problem.component == c])) > 1 for c in set(problem.component)):
            continue
        misfit = problem.weight[problem.leaf_classes[leaf] != problem.y].sum()
        splits = [t for t in range(T) if tree[t][0] != "const"]
        cost = misfit + sum(penalty[t] for t in splits)
        if not splits and problem.formulation == "miret":
            cost += penalty.min()  # s = 1 with a = 0 somewhere
        best = min(best, cost)
    return float(best)


@pytest.mark.parametrize("formulation", ["miret", "basic"])
@pytest.mark.parametrize(
    ("leaf_class", "component", "expected"),
    [
        # root x <= 0.6, node 1 x <= 0.4, node 2 constant: no misfit, two splits
        ([0, 1, 2, 0], None, 0.4),
        # rows 1 and 2 share a leaf: one split, row 2 (0.8) misfit
        ([0, 1, 2, 0], [0, 1, 1, 2, 3], 1.0),
        # no class-0 leaf: rows 0, 1 misfit (1.9) whatever the splits
        ([2, 2, 1, 2], None, 2.1),
    ],
)
def test_milp_with_fixed_leaf_classes_matches_brute_force(
    formulation, leaf_class, component, expected
):
    problem = problem_of(X1, Y1, W1, 2, leaf_class, component, formulation)
    assert brute_force(problem) == pytest.approx(expected)
    for reductions in (True, False):
        model = build_model(problem, reductions=reductions)
        result = solve(model, solver="highs", time_limit=30, mip_gap=0)
        assert result.status == "optimal"
        assert result.objective == pytest.approx(expected, abs=1e-6)
        coef, intercept, leaves = model.decode(result.x)
        solved = SurrogateTree(coef, intercept, 2, classes=CLASSES, leaf_class=leaf_class)
        tree = centered(solved, problem.epsilon)  # the solver's rows sit on the gap's edges
        np.testing.assert_array_equal(tree.apply(problem.X), leaves)
        assert tree.objective(problem) == pytest.approx(expected, abs=1e-6)


def test_fidelity_cost_is_the_misfit_weight_and_no_symmetry_breaking():
    problem = problem_of(X1, Y1, W1, 2, [0, 1, 2, 0])
    model = build_model(problem)
    # z cost p^i ([c_l != y^i] - 1/2) plus the constant 1/2 sum p^i = 2.0
    np.testing.assert_array_equal(model.c[model.z_index[0]], [-0.5, 0.5, 0.5, -0.5])
    np.testing.assert_array_equal(model.c[model.z_index[2]], [0.4, -0.4, 0.4, 0.4])
    assert model.objective_constant == 2.0
    # b_t >= 0 above the last level only with two classes
    assert not problem.symmetry_breaking
    np.testing.assert_array_equal(model.col_lower[model.b_index], [-1.0, -1.0, -1.0])
    with pytest.raises(ValueError, match="3 classes has no default leaf classes"):
        build_model(problem_of(X1, Y1, W1, 2))
    with pytest.raises(ValueError, match=r"4 class indices in 0..2"):
        problem.with_leaf_class([0, 1, 3, 0])


# ---------------------------------------------------------------------- k-class DP
def enumerated(Z, y, rows, depth, k):
    """``(misfit, splits)`` of the best tree of depth <= ``depth``: every split tried."""
    best = (int(rows.size - np.bincount(y[rows], minlength=k).max(initial=0)), 0)
    if depth == 0 or best[0] == 0:
        return best
    for column in range(Z.shape[1]):
        left = Z[rows, column]
        if left.all() or not left.any():
            continue
        low = enumerated(Z, y, rows[left], depth - 1, k)
        high = enumerated(Z, y, rows[~left], depth - 1, k)
        best = min(best, (low[0] + high[0], low[1] + high[1] + 1))
    return best


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_k_class_optimal_tree_matches_enumeration(seed, depth):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 4, size=(40, 3)).astype(float)
    score = X[:, 0] + X[:, 1] * (X[:, 2] > 1) + rng.normal(0, 1, 40)
    y = np.digitize(score, [1.5, 3.5])  # three classes
    features = np.array([0, 0, 1, 1, 2, 2])
    thresholds = np.array([0.5, 2.5, 1.5, 2.5, 0.5, 1.5])
    arrays = optimal_tree(X, y, depth, features, thresholds, np.array([0, 1, 2]))
    expected = enumerated(X[:, features] <= thresholds, y, np.arange(40), depth, 3)
    assert (arrays["misfit"], sum(child >= 0 for child in arrays["left"])) == expected
    assert int(np.sum(cart_predict(arrays, X) != y)) == expected[0]


def test_k_class_optimal_tree_hand_case():
    # x in 0..5, class = x // 2: depth 2 with thresholds 1.5 and 3.5 fits exactly
    X = np.repeat(np.arange(6.0), 2)[:, None]
    y = (X[:, 0] // 2).astype(int)
    features, thresholds = np.array([0, 0]), np.array([1.5, 3.5])
    assert optimal_tree(X, y, 1, features, thresholds, np.array([0, 1, 2]))["misfit"] == 4
    arrays = optimal_tree(X, y, 2, features, thresholds, np.array([0, 1, 2]))
    assert arrays["misfit"] == 0
    assert cart_predict(arrays, X).tolist() == y.tolist()


# ---------------------------------------------------------------------- relabelling
def test_majority_relabelling_by_weight_keeps_ties_and_empty_leaves():
    leaf = np.array([0, 0, 1, 1, 1, 3, 2, 2])
    y = np.array([2, 1, 0, 0, 2, 1, 0, 2])
    weight = np.array([0.5, 0.6, 0.3, 0.3, 0.7, 1.0, 0.4, 0.4])
    # leaf 0: class 1 (0.6) over 2 (0.5); leaf 1: class 2 (0.7) over 0 (0.6); leaf 2:
    # 0 and 2 tie at 0.4, the current class 2 stays; leaf 3: class 1
    relabel = majority_classes(leaf, y, weight, np.array([0, 0, 2, 0]))
    assert relabel.tolist() == [1, 2, 2, 1]
    assert majority_classes(leaf, y, weight, np.array([1, 1, 1, 1])).tolist() == [1, 2, 0, 1]
    empty = majority_classes(np.array([0, 0]), np.array([1, 1]), np.ones(2), np.array([0, 2]))
    assert empty.tolist() == [1, 2]


def test_relabelling_a_tree_never_raises_its_objective():
    problem = problem_of(X1, Y1, W1, 2, [0, 1, 2, 0])
    # root x <= 0.6 (a = 1, b = -0.6), node 1 x <= 0.4, node 2 constant left (leaf 2)
    tree = SurrogateTree(
        [[1.0], [1.0], [0.0]], [-0.6, -0.4, 0.0], 2, classes=CLASSES, leaf_class=[1, 2, 0, 0]
    )
    # rows 0, 1 in leaf 0 (class 1), row 2 in leaf 1 (class 2), rows 3, 4 in leaf 2 (0)
    assert tree.objective(problem) == pytest.approx(1.0 + 0.9 + 0.8 + 0.7 + 0.6 + 0.4)
    better = relabelled(tree, problem)
    assert better.leaf_class.tolist() == [0, 1, 2, 0]
    assert better.objective(problem) == pytest.approx(0.4)
    search = TreeSearch(problem, np.random.default_rng(0), np.inf)
    search.set_tree(tree.coef, tree.intercept, tree.leaf_class)
    assert search.relabel() and search.leaf_class.tolist() == [0, 1, 2, 0]
    assert search.objective() == pytest.approx(0.4)
    assert not search.relabel()


# ---------------------------------------------------------------------- tree and JSON
def test_three_class_tree_predicts_its_leaf_classes_and_round_trips():
    tree = SurrogateTree(
        [[1.0], [1.0], [0.0]], [-0.6, -0.4, 0.0], 2, ["x"], CLASSES, None, [0, 1, 2, 2]
    )
    assert tree.predict(np.array(X1)).tolist() == ["low", "low", "mid", "high", "high"]
    assert tree.leaf_class_of([3, 4, 5, 6]).tolist() == [0, 1, 2, 2]
    data = json.loads(json.dumps(tree.to_dict()))
    assert data["format_version"] == 3 and data["leaf_class"] == [0, 1, 2, 2]
    back = SurrogateTree.from_dict(data)
    assert back.leaf_class.tolist() == [0, 1, 2, 2] and back.classes.tolist() == CLASSES.tolist()
    assert back.predict(np.array(X1)).tolist() == tree.predict(np.array(X1)).tolist()
    assert not back.default_leaf_class
    with pytest.raises(ValueError, match="3 classes needs leaf_class"):
        SurrogateTree([[1.0]], [0.0], 1, classes=CLASSES)


def test_version_2_documents_read_with_the_alternating_classes():
    version2 = {
        "format": "miret-surrogate-tree",
        "format_version": 2,
        "depth": 1,
        "feature_names": ["x"],
        "classes": ["no", "yes"],
        "coef": [[1.0]],
        "intercept": [-0.5],
        "missing_left": [True],
    }
    tree = SurrogateTree.from_dict(version2)
    assert tree.leaf_class.tolist() == [0, 1] and tree.default_leaf_class
    assert tree.predict(np.array([[0.2], [0.8], [np.nan]])).tolist() == ["no", "yes", "no"]
    assert tree.to_dict()["leaf_class"] == [0, 1]


# ---------------------------------------------------------------------- heuristics
def test_warm_start_fits_three_bands_exactly_with_majority_leaves():
    x = np.linspace(0.0, 1.0, 31)
    y = np.digitize(x, [0.3, 0.65])  # classes 0, 1, 2 in bands
    problem = problem_of(x[:, None], y, np.ones(31), 2)
    tree, info = warm_start(problem, random_state=0)
    assert info["fidelity"] == 1.0
    assert check_feasible(tree, problem) == []
    assert sorted(set(tree.predict(problem.X))) == ["high", "low", "mid"]
    # every leaf holds its weighted majority (a fit with no misfit)
    leaves = tree.apply(problem.X) - problem.n_branch
    assert np.array_equal(
        majority_classes(leaves, y, np.ones(31), tree.leaf_class), tree.leaf_class
    )
    assert info["objective"] == pytest.approx(tree.objective(problem))


def test_depth_three_search_and_node_milps_keep_feasible_majority_trees():
    rng = np.random.default_rng(5)
    X = rng.uniform(size=(60, 2))
    y = np.digitize(X[:, 0] + 0.5 * X[:, 1], [0.5, 1.0])  # oblique bands, three classes
    problem = problem_of(X, y, rng.uniform(0.4, 1.0, 60), 3)
    tree, info = warm_start(problem, random_state=0, work_budget=2e6)
    assert check_feasible(tree, problem) == []
    assert info["objective"] == pytest.approx(tree.objective(problem))
    leaves = tree.apply(problem.X) - problem.n_branch
    majority = majority_classes(leaves, problem.y, problem.weight, tree.leaf_class)
    assert np.array_equal(majority, tree.leaf_class)
    params = {"solver": "highs", "time_limit": 10.0, "threads": 1, "random_state": 0}
    better, statuses, _ = reoptimize(problem, tree, params)
    assert set(statuses) == set(range(7))
    # a row may sit at epsilon up to rounding (1e-16), as in the whole MILP's solutions
    assert check_feasible(better, problem, epsilon=problem.epsilon - 1e-9, tolerance=1e-6) == []
    assert better.objective(problem) <= tree.objective(problem) + 1e-12


def test_constant_tree_of_a_single_class():
    problem = problem_of(X1, [2] * 5, W1, 2)
    tree = constant_tree(problem, 2)
    assert tree.predict(problem.X).tolist() == ["high"] * 5
    assert tree.objective(problem) == 0.0 and tree.leaf_class.tolist() == [2, 2, 2, 2]


def test_exact_cart_tree_pads_a_shallow_leaf_with_its_class():
    # class 0 below 0.5 (pure), classes 1 and 2 split at 0.75 above: CART stops at depth 1
    # on the left, so both leaves under node 1 take class 0
    x = np.array([0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9])
    y = np.array([0, 0, 0, 0, 1, 1, 2, 2])
    problem = problem_of(x[:, None], y, np.ones(8), 2)
    cart, columns = fit_cart(problem.X, CLASSES[y], 2)
    arrays = cart_arrays(cart, columns)
    tree = exact_tree(arrays, problem)
    assert tree.leaf_class.tolist() == [0, 0, 1, 2]
    assert tree.predict(problem.X).tolist() == cart_predict(arrays, problem.X).tolist()


def test_missing_values_go_where_their_majority_label_is_answered():
    # depth 1 on x0: leaf classes high (left) and low (right)
    tree = SurrogateTree([[1.0, 0.0]], [-0.5], 1, ["a", "b"], CLASSES, None, [2, 0])
    nan = np.nan
    X = np.array([[0.2, 0.1], [0.8, 0.1], [nan, 0.1], [nan, 0.2], [nan, 0.3]])
    sides = np.zeros(2)
    # NaN rows labelled high, high, mid: left (class high) agrees with two of them
    labels = np.array(["high", "low", "high", "high", "mid"])
    assert missing_directions(tree, X, labels, sides).tolist() == [True]
    # low, low, mid: right (class low) agrees with two
    labels = np.array(["high", "low", "low", "low", "mid"])
    assert missing_directions(tree, X, labels, sides).tolist() == [False]
    # all mid: no side answers mid, a tie; no ensemble push; one row each side: left
    labels = np.array(["high", "low", "mid", "mid", "mid"])
    assert missing_directions(tree, X, labels, sides).tolist() == [True]


def test_stratified_folds_for_three_classes():
    y = np.repeat([0, 1, 2], [12, 10, 11])
    splits = folds(y)
    assert len(splits) == 3
    for train, test in splits:
        assert np.bincount(y[test], minlength=3).min() >= 3
    assert folds(np.repeat([0, 1, 2], [20, 20, 1])) == []
    assert folds(np.zeros(40, dtype=int)) == []


# ---------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    X_train, X_test, y_train, _ = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    forest = RandomForestClassifier(50, max_depth=4, random_state=0).fit(X_train, y_train)
    return X_train, X_test, forest


def test_three_class_fit_is_at_least_as_faithful_as_cart(wine):
    from miret_governance.governance.miret.fit.estimator import MiretSurrogate

    X_train, X_test, forest = wine
    surrogate = MiretSurrogate(forest, depth=2, time_limit=60, random_state=0).fit(X_train)
    labels = forest.predict(X_test)
    hits = int(np.sum(surrogate.predict(X_test) == labels))
    cart_hits = round(surrogate.baseline_fidelity(X_test, labels) * labels.size)
    # measured: 47 of the 54 test rows against CART's 46 (work-counted, deterministic)
    assert (hits, cart_hits, labels.size) == (47, 46, 54)
    assert surrogate.solve_report_.chosen == "miret"
    assert surrogate.classes_.tolist() == [0, 1, 2]
    assert surrogate.leaf_counts_.shape == (4, 3)
    assert surrogate.leaf_counts_.sum() == X_train.shape[0]
    proba = surrogate.predict_proba(X_test)
    assert proba.shape == (54, 3) and np.allclose(proba.sum(axis=1), 1.0)
    restored = MiretSurrogate.from_dict(json.loads(json.dumps(surrogate.to_dict())))
    assert restored.tree_digest() == surrogate.tree_digest()
    assert restored.predict(X_test).tolist() == surrogate.predict(X_test).tolist()
    assert len(surrogate.display().leaves()) >= 3
