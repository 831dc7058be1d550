"""MIRET on larger data: bounded proximity components, the choice on held-out rows."""

import numpy as np
import pytest
from scipy import sparse
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.miret import MiretSurrogate
from miret_governance.governance.miret.fit.engine import seed_trees
from miret_governance.governance.miret.fit.estimator import LEGACY_PARAMS
from miret_governance.governance.miret.heuristics.cart import cart_predict, exact_tree
from miret_governance.governance.miret.problem.components import (
    MIN_COMPONENT_CAP,
    bounded_components,
    component_cap,
)
from miret_governance.governance.miret.problem.problem import build_problem


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
    surrogate = MiretSurrogate(forest, depth=3, max_rows=1200, time_limit=4, **LEGACY_PARAMS)
    surrogate.fit(X)
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
    # chosen on held-out rows: never below the better seed's held-out fidelity
    cv = report.cv_fidelity
    assert set(cv) == {"miret", "univariate", "cart"}
    assert cv[report.chosen] >= min(cv["univariate"], cv["cart"])
    assert (report.chosen != "miret") == bool(report.fallback)


def test_exact_cart_tree_reproduces_the_cart_labels(synthetic):
    X, forest = synthetic
    problem = build_problem(
        X[:500], read_ensemble(forest), depth=3, scaler=MinMaxScaler().fit(X[:500])
    )
    baseline, _, _ = seed_trees(problem, random_state=0)
    tree = exact_tree(baseline, problem)
    np.testing.assert_array_equal(tree.predict(problem.X), cart_predict(baseline, problem.X))
