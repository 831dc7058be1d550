"""MIRET on larger data: bounded proximity components and the fidelity guarantee."""

import numpy as np
import pytest
from scipy import sparse
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.miret import MiretSurrogate
from miret_governance.governance.miret import guarantee as guarantee_module
from miret_governance.governance.miret.cart import cart_predict, exact_tree
from miret_governance.governance.miret.engine import cart_baselines, constant_tree
from miret_governance.governance.miret.guarantee import (
    FIDELITY_TOLERANCE,
    cart_out_of_fold,
    fidelities,
    guarantee,
)
from miret_governance.governance.miret.problem import (
    MIN_COMPONENT_CAP,
    bounded_components,
    build_problem,
    component_cap,
)
from miret_governance.governance.readers import read_ensemble


def pairs(n, triples):
    rows, cols, values = zip(*triples)
    return sparse.coo_matrix((values, (rows, cols)), shape=(n, n))


def test_components_join_closest_pairs_first_up_to_the_cap():
    # chain 0-1-2-3 plus 4-5: 2-3 is closest, then 0-1 and 1-2 tie (index order), 4-5
    chain = pairs(6, [(1, 2, 0.95), (0, 1, 0.95), (2, 3, 0.99), (4, 5, 0.9)])
    component, dropped = bounded_components(6, chain, cap=2)
    np.testing.assert_array_equal(component, [0, 0, 1, 1, 2, 2])
    assert dropped == 1  # 1-2 would make a component of 4
    component, dropped = bounded_components(6, chain, cap=3)
    np.testing.assert_array_equal(component, [0, 0, 1, 1, 2, 2])
    assert dropped == 1
    component, dropped = bounded_components(6, chain, cap=4)
    np.testing.assert_array_equal(component, [0, 0, 0, 0, 1, 1])
    assert dropped == 0
    # equal proximities join in index order: 0-1, 1-2 (3 rows); 2-3 would make 4
    flat = pairs(4, [(2, 3, 0.9), (1, 2, 0.9), (0, 1, 0.9)])
    component, dropped = bounded_components(4, flat, cap=3)
    np.testing.assert_array_equal(component, [0, 0, 0, 1])
    assert dropped == 1
    assert component_cap(100, 3) == MIN_COMPONENT_CAP
    assert component_cap(2000, 3) == 125


def greedy_components(n, matrix, cap):
    """Reference: the capped union-find over every pair, closest first, in plain Python."""
    coo = matrix.tocoo()
    triples = sorted(zip(-coo.data, coo.row.tolist(), coo.col.tolist()))
    members = {i: {i} for i in range(n)}
    for _, i, k in triples:
        if members[i] is not members[k] and len(members[i]) + len(members[k]) <= cap:
            union = members[i] | members[k]
            for j in union:
                members[j] = union
    firsts = sorted({min(group) for group in members.values()})
    ids = {first: c for c, first in enumerate(firsts)}
    return np.array([ids[min(members[i])] for i in range(n)])


@pytest.mark.parametrize("cap", [2, 5, 40, 1000])
def test_components_equal_the_plain_union_find(cap):
    rng = np.random.default_rng(cap)
    n = 300
    rows = rng.integers(0, n, 900)
    cols = np.minimum(n - 1, rows + rng.integers(1, 12, 900))  # local chains and clusters
    keep = rows < cols
    values = np.round(rng.uniform(0.85, 1.0, keep.sum()), 2)  # many ties
    matrix = sparse.coo_matrix((values, (rows[keep], cols[keep])), shape=(n, n)).tocsr()
    matrix.sum_duplicates()
    component, dropped = bounded_components(n, matrix, cap)
    expected = greedy_components(n, matrix, cap)
    np.testing.assert_array_equal(component, expected)
    coo = matrix.tocoo()
    assert dropped == int(np.sum(expected[coo.row] != expected[coo.col]))
    assert np.bincount(component).max() <= cap


@pytest.fixture(scope="module")
def synthetic():
    X, y = make_classification(6000, 20, n_informative=8, random_state=0)
    forest = RandomForestClassifier(
        30, max_depth=3, max_features=None, random_state=0, n_jobs=1
    ).fit(X[:2000], y[:2000])
    return X, forest


def test_large_fit_caps_components_and_is_as_faithful_as_cart(synthetic):
    X, forest = synthetic
    surrogate = MiretSurrogate(forest, depth=3, max_rows=1200, time_limit=4).fit(X)
    summary, report = surrogate.problem_, surrogate.solve_report_
    assert summary["component_cap"] == 1200 // 16
    assert summary["largest_component"] <= summary["component_cap"]
    assert summary["n_proximity_pairs_dropped"] > 0
    assert (
        summary["n_proximity_pairs_kept"] + summary["n_proximity_pairs_dropped"]
        == summary["n_proximity_pairs"]
    )
    assert report.train_fidelity == pytest.approx(surrogate.score(X))
    labels = forest.predict(X)
    cart = np.mean(
        cart_predict(surrogate.baseline_, surrogate.input_scaler_.transform(X)) == labels
    )
    assert report.baseline_cart_train_fidelity == pytest.approx(cart)
    assert report.train_fidelity >= cart - FIDELITY_TOLERANCE
    assert (report.incumbent_source == "cart") == bool(report.fallback)


def test_exact_cart_tree_reproduces_the_cart_labels(synthetic):
    X, forest = synthetic
    problem = build_problem(
        X[:500], read_ensemble(forest), depth=3, scaler=MinMaxScaler().fit(X[:500])
    )
    baseline, _ = cart_baselines(problem, random_state=0)
    tree = exact_tree(baseline, problem)
    np.testing.assert_array_equal(tree.predict(problem.X), cart_predict(baseline, problem.X))


def test_guarantee_replaces_a_tree_below_cart_even_when_alpha_prefers_it(synthetic):
    # the shape of XGBoost Wisconsin D=4 seed 2: the best feasible tree was constant
    X, forest = synthetic
    X = X[:500]
    scaler = MinMaxScaler().fit(X)
    problem = build_problem(X, read_ensemble(forest), depth=2, alpha=1000.0, scaler=scaler)
    baseline, seeds = cart_baselines(problem, random_state=0)
    fallbacks = [*seeds, exact_tree(baseline, problem)]
    majority = 1 if problem.y.mean() >= 0.5 else -1
    constant = constant_tree(problem, majority)
    labels, rows = forest.predict(X), np.arange(500)
    out_of_fold = cart_out_of_fold(problem)
    # alpha makes any split dearer than misclassifying every minority sample
    assert constant.objective(problem) < min(tree.objective(problem) for tree in fallbacks)
    tree, own, cart, reference, note = guarantee(
        constant, fallbacks, baseline, labels, X, scaler, rows, out_of_fold
    )
    assert np.mean(constant.predict(problem.X) == labels) < reference - FIDELITY_TOLERANCE
    assert reference == pytest.approx(np.mean(out_of_fold == labels)) and reference < cart
    assert own >= reference - FIDELITY_TOLERANCE
    assert own == np.mean(tree.predict(problem.X) == labels)
    assert tree is not constant and "below CART's cross-validated" in note
    # a tree at or above the floor stays, whatever its objective
    kept = guarantee(fallbacks[-1], seeds, baseline, labels, X, scaler, rows, out_of_fold)
    assert kept[0] is fallbacks[-1] and kept[1] == pytest.approx(cart) and kept[4] == ""


def test_cross_validated_reference_replaces_only_the_sample_rows(synthetic, monkeypatch):
    X, forest = synthetic
    X = X[:700]
    scaler = MinMaxScaler().fit(X)
    rows = np.arange(0, 700, 3)  # the fit sample: every third row
    problem = build_problem(X[rows], read_ensemble(forest), depth=3, scaler=scaler)
    baseline, _ = cart_baselines(problem, random_state=0)
    out_of_fold = cart_out_of_fold(problem)
    labels = forest.predict(X)
    monkeypatch.setattr(guarantee_module, "CHUNK_ROWS", 64)  # rows span chunk borders
    _, cart, reference = fidelities([], baseline, labels, X, scaler, rows, out_of_fold)
    expected = cart_predict(baseline, np.clip(scaler.transform(X), 0, 1))
    assert cart == pytest.approx(np.mean(expected == labels))
    expected[rows] = out_of_fold
    assert reference == pytest.approx(np.mean(expected == labels)) and reference < cart


def test_cross_validated_reference_keeps_labels_a_constant_cart_never_predicts():
    constant_cart = {"feature": [-1], "threshold": [-2.0], "left": [-1], "right": [-1]}
    constant_cart["label"] = ["no"]
    labels = np.array(["no", "yes", "yes", "no"])
    X = np.linspace(0, 1, 4)[:, None]
    out_of_fold = np.array(["yes", "no"])  # rows 1 and 2, predicted without them
    _, cart, reference = fidelities(
        [], constant_cart, labels, X, None, np.array([1, 2]), out_of_fold
    )
    assert cart == 0.5 and reference == 0.75
