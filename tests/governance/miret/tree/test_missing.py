"""The surrogate's rule for missing values on hand-built trees: routing, JSON, the rule
learned at fit (governance.miret.missing) and a fit on data with NaN."""

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier

from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.ensembles.trees import Tree
from miret_governance.governance.miret import MiretSurrogate
from miret_governance.governance.miret.tree.display import display_tree, rules_text
from miret_governance.governance.miret.tree.missing import (
    ensemble_missing_sides,
    missing_directions,
)
from miret_governance.governance.miret.tree.paths import row_paths
from miret_governance.governance.miret.tree.tree import SurrogateTree

NAN = np.nan
# node 0: a <= 0.5 goes left; node 1: b + c <= 1; node 2: c <= 0.5
COEF = [[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]
INTERCEPT = [-0.5, -1.0, -0.5]


@pytest.fixture
def tree():
    return SurrogateTree(COEF, INTERCEPT, 2, ["a", "b", "c"], [0, 1], [False, True, False])


def test_an_undefined_value_follows_the_nodes_rule(tree):
    X = np.array(
        [
            [NAN, 0.2, 0.9],  # a missing: right at 0 (rule), c = 0.9 right at 2 -> leaf 6
            [0.2, NAN, 0.9],  # left at 0, b missing at 1: left (rule) -> leaf 3
            [0.7, NAN, 0.1],  # right at 0; b has no weight at 2: c = 0.1 left -> leaf 5
            [0.2, 0.3, 0.9],  # complete: 0.3 + 0.9 - 1 > 0 -> leaf 4
        ]
    )
    assert tree.apply(X).tolist() == [6, 3, 5, 4]
    assert tree.predict(X).tolist() == [1, 0, 0, 1]
    assert tree.branch_sides(X).tolist() == [[1, -1, 1], [0, 0, -1], [1, -1, 0], [0, 1, -1]]
    path = tree.decision_path(X[1])
    assert path[0] == (0, pytest.approx(-0.3), "left")
    assert path[1][0] == 1 and np.isnan(path[1][1]) and path[1][2] == "left"
    flipped = tree.with_missing_left(np.array([True, False, True]))
    assert flipped.apply(X).tolist() == [4, 4, 5, 4]  # a missing: left, then b + c > 1
    nodes, values = tree.walk(X[:1])
    assert nodes.tolist() == [[0, 2]] and np.isnan(values[0, 0]) and values[0, 1] == 0.4


def test_a_tree_without_a_rule_refuses_missing_values():
    plain = SurrogateTree(COEF, INTERCEPT, 2, ["a", "b", "c"], [0, 1])
    assert plain.missing_left is None
    assert plain.apply(np.array([[0.2, 0.3, 0.9]])).tolist() == [4]
    with pytest.raises(ValueError, match="no rule for them"):
        plain.apply(np.array([[NAN, 0.3, 0.9]]))
    with pytest.raises(ValueError, match="missing_left must hold 3 booleans"):
        SurrogateTree(COEF, INTERCEPT, 2, missing_left=[True, False])


def test_the_rule_is_stored_in_format_version_3_and_versions_1_2_still_read(tree):
    data = tree.to_dict()
    assert data["format_version"] == 3 and data["missing_left"] == [False, True, False]
    back = SurrogateTree.from_dict(data)
    assert back.missing_left.tolist() == [False, True, False]
    version2 = {**data, "format_version": 2}
    del version2["leaf_class"]
    assert SurrogateTree.from_dict(version2).missing_left.tolist() == [False, True, False]
    plain = SurrogateTree(COEF, INTERCEPT, 2, ["a", "b", "c"], [0, 1]).to_dict()
    assert plain["format_version"] == 3 and plain["missing_left"] is None
    assert SurrogateTree.from_dict(plain).missing_left is None
    old = {k: v for k, v in plain.items() if k not in ("missing_left", "leaf_class")}
    assert SurrogateTree.from_dict({**old, "format_version": 1}).missing_left is None
    with pytest.raises(ValueError, match="missing_left must hold 3 booleans for depth 2"):
        SurrogateTree.from_dict({**data, "missing_left": [True]})


def test_the_rule_is_shown_in_the_rules(tree):
    X = np.array([[0.2, 0.3, 0.9], [0.2, 0.3, 0.1], [0.7, 0.3, 0.9], [0.7, 0.3, 0.1]])
    text = rules_text(display_tree(tree, X, tree.predict(X)))
    assert (
        "missing values: a <= 0.5: missing a -> no branch; b + c <= 1: missing b or c -> "
        "yes branch; c <= 0.5: missing c -> no branch"
    ) in text.splitlines()


ONE_SPLIT = SurrogateTree([[1.0, 0.0]], [-0.5], 1, ["a", "b"], [0, 1])


@pytest.mark.parametrize(
    ("labels", "left"),
    [([1, 1, 1, 0], False), ([0, 0, 0, 1], True), ([0, 0, 1, 1], True)],
)
def test_rows_with_an_undefined_value_go_to_the_leaf_of_their_majority(labels, left):
    """Step 1 at the last level: the left leaf answers 0, the right leaf 1; an even
    split (2 of 4) gives no lean and falls to step 3 (1 row right, 1 left: left)."""
    X = np.array([[0.2, 0.0], [0.8, 0.0]] + [[NAN, 0.5]] * 4)
    y = np.array([0, 1] + labels)
    sides = np.zeros(2)
    assert missing_directions(ONE_SPLIT, X, y, sides).tolist() == [left]


@pytest.mark.parametrize(
    ("sides", "rows", "left"),
    [
        ([-1, 0], [0.8, 0.9, 0.7], True),  # step 2: the ensemble treats a missing a as small
        ([1, 0], [0.1, 0.2, 0.3], False),  # ... as large
        ([0, 1], [0.8, 0.9, 0.1], False),  # step 3: 2 of 3 rows go right
        ([0, 0], [0.8, 0.1], True),  # a tie: left
    ],
)
def test_without_undefined_rows_the_ensemble_then_the_rows_decide(sides, rows, left):
    X = np.array([[a, 0.0] for a in rows])
    y = (X[:, 0] > 0.5).astype(int)
    assert missing_directions(ONE_SPLIT, X, y, np.array(sides)).tolist() == [left]


def test_rules_are_learned_root_first_on_the_rows_the_parents_send():
    """Node 0 (a <= 0.5): the complete rows below node 1 get answers 0, 1, 0 (1/3 of
    class 1), below node 2 0, 1 (1/2); two of the three rows missing a are labelled 1,
    so they go right (1/3 - 1/2 < 0). Node 2 then has b for all five of its rows (3
    right, 2 left: right); node 1 has 2 rows left, 1 right: left."""
    tree = SurrogateTree(
        [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], [-0.5, -0.5, -0.5], 2, ["a", "b"], [0, 1]
    )
    X = np.array(
        [
            [0.2, 0.2],
            [0.2, 0.8],
            [0.8, 0.2],
            [0.8, 0.8],
            [0.3, 0.1],
            [NAN, 0.9],
            [NAN, 0.7],
            [NAN, 0.1],
        ]
    )
    y = np.array([0, 1, 0, 1, 0, 1, 1, 0])
    assert missing_directions(tree, X, y, np.zeros(2)).tolist() == [False, True, False]


def _stump(feature, missing_left):
    return Tree(
        feature=[feature, -1, -1],
        threshold=[0.5, NAN, NAN],
        left=[1, -1, -1],
        right=[2, -1, -1],
        value=[0.5, 0.0, 1.0],
        missing_left=[missing_left, False, False],
    )


def test_the_ensembles_direction_is_the_majority_of_its_splits():
    ensemble = Ensemble.from_arrays(
        [_stump(0, True), _stump(0, False), _stump(0, True), _stump(1, False)], n_features=3
    )
    assert ensemble_missing_sides(ensemble).tolist() == [-1, 1, 0]


def test_a_fit_on_data_with_missing_values():
    """Label 1 when a > 0.5 or a is missing (every fourth row); the MILP uses the 150
    complete rows, the rule sends a missing a right (class 1), the fidelity counts all
    200 rows."""
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 1, (200, 2))
    y = (X[:, 0] > 0.5).astype(int)
    X[::4, 0], y[::4] = NAN, 1
    model = HistGradientBoostingClassifier(max_iter=5, max_depth=2, random_state=0).fit(X, y)
    surrogate = MiretSurrogate(model, depth=1, time_limit=10).fit(X)
    assert surrogate.n_rows_seen_ == 200 and surrogate.n_rows_used_ == 150
    assert surrogate.tree_.missing_left.tolist() == [False]
    assert surrogate.predict(X[::4]).tolist() == [1] * 50
    assert surrogate.score(X) == surrogate.solve_report_.train_fidelity == 1.0
    assert "missing x0 -> no branch" in surrogate.rules()
    restored = MiretSurrogate.from_dict(surrogate.to_dict())
    assert restored.predict(X).tolist() == surrogate.predict(X).tolist()


def test_a_rows_path_names_the_rule_where_a_value_is_missing(tree):
    rows = pd.DataFrame({"a": [NAN], "b": [0.2], "c": [0.9]})
    (path,) = row_paths(tree, rows, np.array([1]))
    assert [step.text for step in path.steps] == [
        "a > 0.5 (row: missing, by the rule for missing values)",
        "c > 0.5 (row: 0.9)",
    ]
    assert path.leaf == 6 and path.agrees
