import numpy as np
import pytest

from miret_governance.governance.miret.heuristics.heuristic import warm_start
from miret_governance.governance.miret.milp.feasibility import check_feasible
from miret_governance.governance.miret.problem.problem import MiretProblem
from miret_governance.governance.miret.tree.tree import SurrogateTree


def make_problem(
    X,
    y,
    depth,
    weight=None,
    frequency=None,
    allowed=None,
    component=None,
    alpha=0.1,
    formulation="miret",
):
    X = np.asarray(X, dtype=np.float64)
    n, p = X.shape
    frequency = np.full((depth, p), 0.5) if frequency is None else np.asarray(frequency, float)
    return MiretProblem(
        X=X,
        y=np.asarray(y, dtype=np.int64),
        weight=np.ones(n) if weight is None else np.asarray(weight, float),
        frequency=frequency,
        allowed=frequency > 0 if allowed is None else np.asarray(allowed, bool),
        component=np.arange(n) if component is None else np.asarray(component),
        depth=depth,
        alpha=alpha,
        epsilon=1e-3,
        formulation=formulation,
        feature_names=tuple(f"x{j}" for j in range(p)),
        classes=np.array(["neg", "pos"]),
    )


def fit(problem):
    tree, info = warm_start(problem, random_state=0)
    assert check_feasible(tree, problem) == []
    assert info["objective"] <= info["greedy_objective"] + 1e-12
    assert info["objective"] == pytest.approx(tree.objective(problem))
    assert info["objective"] == pytest.approx(problem.objective(tree.coef, tree.apply(problem.X)))
    return tree, info


def test_univariate_target_is_fit_exactly_with_one_feature():
    x0 = np.linspace(0, 1, 21)
    X = np.column_stack([x0, np.random.default_rng(0).uniform(size=21)])
    tree, info = fit(make_problem(X, np.where(x0 > 0.5, 1, 0), depth=1))
    # perfect fit, one use of x0 at level 0: penalty alpha / f = 0.1 / 0.5
    assert info["objective"] == pytest.approx(0.2)
    assert info["fidelity"] == 1.0
    assert tree.used_features() == [0] and tree.n_feature_uses() == 1
    assert tree.predict(X).tolist() == ["neg"] * 11 + ["pos"] * 10


def test_oblique_target_feasible_improved_and_deterministic():
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(150, 4))
    y = np.where(X[:, 0] + X[:, 1] > 1, 1, 0)
    weight = rng.uniform(0.5, 1.0, size=150)
    component = np.arange(150)
    component[[3, 17, 40]] = 3  # a three-sample proximity component
    problem = make_problem(X, y, depth=2, weight=weight, component=component, alpha=0.05)
    tree, info = fit(problem)
    assert info["fidelity"] >= 0.95
    leaves = tree.apply(X)
    assert len(set(leaves[[3, 17, 40]])) == 1
    again, info_again = warm_start(problem, random_state=0)
    np.testing.assert_array_equal(again.coef, tree.coef)
    np.testing.assert_array_equal(again.intercept, tree.intercept)
    assert info_again["objective"] == info["objective"]
    # the symmetry breaking b >= 0 holds above the last level; b-MIRET does not need it
    assert tree.intercept[0] >= 0
    basic, _ = fit(make_problem(X, y, depth=2, weight=weight, formulation="basic", alpha=0.05))
    assert basic.objective(problem) <= info["objective"] + 1.0


def test_one_class_ensemble_gets_one_cheapest_dummy_split():
    X = np.random.default_rng(2).uniform(size=(30, 2))
    frequency = [[0.2, 0.4], [0.5, 0.1]]  # penalties 0.5, 0.25 / 0.2, 1.0: cheapest x0 at level 1
    tree, info = fit(make_problem(X, np.ones(30), depth=2, frequency=frequency))
    assert info["objective"] == pytest.approx(0.2)
    assert tree.n_feature_uses() == 1
    level1 = tree.coef[1:3]
    assert np.count_nonzero(level1[:, 0]) == 1
    assert set(tree.predict(X)) == {"pos"}
    basic, basic_info = fit(make_problem(X, np.ones(30), depth=2, formulation="basic"))
    assert basic.n_feature_uses() == 0 and basic_info["objective"] == 0.0


def test_empty_allowed_set_at_a_level():
    x0 = np.linspace(0, 1, 40)
    X = np.column_stack([x0, x0[::-1]])
    allowed = [[False, False], [True, True]]
    tree, info = fit(make_problem(X, np.where(x0 > 0.3, 1, 0), depth=2, allowed=allowed))
    assert not tree.coef[0].any()
    assert info["fidelity"] == 1.0


def test_no_allowed_feature_at_all():
    X = np.random.default_rng(3).uniform(size=(10, 2))
    y = np.where(X[:, 0] > 0.5, 1, 0)
    with pytest.raises(ValueError, match="no feature is allowed at any level"):
        warm_start(make_problem(X, y, depth=2, allowed=np.zeros((2, 2), bool)))
    tree, _ = fit(make_problem(X, y, depth=2, allowed=np.zeros((2, 2), bool), formulation="basic"))
    assert tree.n_feature_uses() == 0


def test_duplicated_rows_and_fewer_samples_than_leaves():
    X = np.array([[0.1, 0.2], [0.1, 0.2], [0.9, 0.3], [0.9, 0.3], [0.5, 0.8]])
    y = np.array([0, 0, 1, 1, 0])
    tree, info = fit(make_problem(X, y, depth=2, component=[0, 0, 1, 1, 2]))
    assert info["fidelity"] == 1.0
    small = make_problem([[0.1], [0.5], [0.9]], [0, 1, 0], depth=3)
    tree, info = fit(small)
    assert info["fidelity"] == 1.0
    assert tree.predict(small.X).tolist() == ["neg", "pos", "neg"]


def test_component_is_kept_in_one_leaf_at_a_cost():
    x0 = np.linspace(0, 1, 21)
    y = np.where(x0 > 0.5 + 1e-9, 1, 0)
    component = np.arange(21)
    component[8:13] = 8  # x0 in {0.4, ..., 0.6}: three negatives and two positives
    tree, info = fit(make_problem(x0[:, None], y, depth=1, component=component))
    assert len(set(tree.apply(x0[:, None])[8:13])) == 1
    assert info["objective"] == pytest.approx(2 + 0.2)  # two misfits + one feature use


def _violations(coef, intercept, depth=2, **kwargs):
    X = np.array([[0.2, 0.4], [0.6, 0.1], [0.9, 0.9]])
    problem = make_problem(X, [0, 1, 1], depth=depth, **kwargs)
    return check_feasible(SurrogateTree(coef, intercept, depth), problem)


def test_check_feasible_reports_each_violation():
    good = [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]
    assert _violations(good, [0.0, -0.5, -0.5]) == []
    assert (
        "coefficients outside [-1, 1] at nodes [1]"
        in _violations([[1.0, 0.0], [0.0, 1.5], [0.0, 1.0]], [0.0, -0.5, -0.5])[0]
    )
    assert "intercepts outside" in _violations(good, [0.0, -1.5, -0.5])[0]
    negative = _violations([[-1.0, 0.0], [0, 1.0], [0, 1.0]], [-0.5, -0.5, -0.5])
    assert any("negative intercept above the last level at nodes [0]" in m for m in negative)
    basic = _violations([[-1.0, 0.0], [0, 1.0], [0, 1.0]], [-0.05, -0.5, -0.5], formulation="basic")
    assert basic == []
    allowed = [[True, False], [True, True]]
    bad_feature = _violations([[0.0, 1.0], [0, 1.0], [0, 1.0]], [0.0, 0, 0], allowed=allowed)
    assert any("(0, 1)" in m and "J_gamma" in m for m in bad_feature)
    # sample 0 has 0.2 - 0.1995 = 0.0005 at the root: inside (0, 0.001)
    gap = _violations(good, [-0.1995, -0.5, -0.5])
    assert any("open gap" in m and "samples [0]" in m for m in gap)
    split = _violations(good, [-0.5, -0.5, -0.5], component=[0, 0, 1])
    assert any("1 proximity components split" in m for m in split)
    assert any("no nonzero coefficient" in m for m in _violations(np.zeros((3, 2)), [0.0] * 3))
    problem = make_problem(np.zeros((2, 2)), [1, 1], depth=2)
    assert "depth 1" in check_feasible(SurrogateTree([[1.0, 0.0]], [0.0], 1), problem)[0]


def test_warm_start_on_a_random_forest_is_milp_feasible(breast_cancer):
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.preprocessing import MinMaxScaler

    from miret_governance.governance.ensembles.readers.reading import read_ensemble
    from miret_governance.governance.miret.milp import formulation
    from miret_governance.governance.miret.problem.problem import build_problem

    X, y = breast_cancer
    X = MinMaxScaler().fit_transform(X.iloc[:200])
    forest = RandomForestClassifier(20, max_depth=2, random_state=0).fit(X, y.iloc[:200])
    problem = build_problem(X, read_ensemble(forest), alpha=0.2, proximity_threshold=0.9)
    tree, info = fit(problem)
    assert info["fidelity"] >= 0.95
    model = formulation.build_model(problem)
    assert model.is_feasible(formulation.encode(tree.coef, tree.intercept, tree.apply(X), model))


def test_a_memoized_gini_shortlist_is_the_head_of_the_longer_one_and_counts_its_scan():
    from miret_governance.governance.miret.heuristics.local_search import TreeSearch

    rng = np.random.default_rng(3)
    X = rng.uniform(size=(40, 4))
    problem = make_problem(X, (X[:, 0] + X[:, 2] > 1).astype(int), depth=2)

    def search():
        return TreeSearch(problem, np.random.default_rng(0), work_budget=1e9)

    idx = np.arange(40)
    longer = search().gini_shortlist(idx, 0, 3)
    assert len(longer) == 3
    memoized = search()
    shortlists = [memoized.gini_shortlist(idx, 0, size) for size in (1, 3, 2)]
    # 40 rows x 4 features + SCAN_WORK per call, also when the memo answers (size 2)
    assert memoized.work == 3 * (40 * 4 + 2000)
    for shortlist in shortlists:
        assert len(shortlist) in (1, 3, 2)
        for (a, b, penalty), (a3, b3, penalty3) in zip(shortlist, longer, strict=False):
            assert a.tolist() == a3.tolist() and b == b3 and penalty == penalty3


def test_a_memoized_greedy_subtree_is_the_one_grown_and_counts_its_work_again():
    from miret_governance.governance.miret.heuristics.local_search import TreeSearch

    rng = np.random.default_rng(4)
    X = rng.uniform(size=(60, 3))
    problem = make_problem(X, (X[:, 0] - X[:, 1] > 0).astype(int), depth=3)

    def search():
        return TreeSearch(problem, np.random.default_rng(0), work_budget=1e9)

    def grown(state, idx):
        """(cost, subtree, work counted) of growing node 1 on the rows ``idx``."""
        out, before = {}, state.work
        cost = state.grow(1, idx, False, out)
        subtree = {node: (a.tolist(), b) for node, (a, b) in out.items()}
        return cost, subtree, state.work - before

    idx = np.arange(0, 60, 2)
    expected = grown(search(), idx)
    assert sorted(expected[1]) == [1, 3, 4] and expected[2] > 0  # node 1 and its children

    memoized, computed = search(), []
    compute = memoized._grow
    memoized._grow = lambda t, *args: computed.append(t) or compute(t, *args)
    assert grown(memoized, idx) == expected
    assert computed[0] == 1
    computed.clear()
    assert grown(memoized, idx) == expected  # the same work counted again
    assert computed == []  # from the memo
