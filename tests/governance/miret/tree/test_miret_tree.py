import json

import numpy as np
import pytest
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.miret.problem.layout import node_level
from miret_governance.governance.miret.problem.problem import MiretProblem
from miret_governance.governance.miret.tree.tree import SurrogateTree

# node 0: x0 <= 0.5 goes left; node 1: x1 <= 0.3; node 2: x1 <= x0
COEF = [[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]]
INTERCEPT = [-0.5, -0.3, 0.0]
X = np.array(
    [
        [0.2, 0.1],  # left, left -> leaf 3
        [0.5, 0.9],  # exactly on the root plane -> left, then right -> leaf 4
        [0.9, 0.2],  # right, left -> leaf 5
        [0.7, 0.7],  # right, exactly on node 2's plane -> left -> leaf 5
        [0.6, 0.8],  # right, right -> leaf 6
    ]
)


@pytest.fixture
def tree():
    return SurrogateTree(COEF, INTERCEPT, 2, ["x0", "x1"], ["benign", "malignant"])


def test_apply_predict_and_sides_hand_computed(tree):
    np.testing.assert_array_equal(tree.apply(X), [3, 4, 5, 5, 6])
    np.testing.assert_array_equal(tree.leaf_class_of([3, 4, 5, 6]), [0, 1, 0, 1])
    assert tree.predict(X).tolist() == ["benign", "malignant", "benign", "benign", "malignant"]
    np.testing.assert_array_equal(
        tree.branch_sides(X),
        [[0, 0, -1], [0, 1, -1], [1, -1, 0], [1, -1, 0], [1, -1, 1]],
    )
    assert tree.branch_sides(X).dtype == np.int8
    path = tree.decision_path(X[1])
    assert [(node, side) for node, _, side in path] == [(0, "left"), (1, "right")]
    assert path[0][1] == 0.0 and path[1][1] == pytest.approx(0.6)
    assert tree.apply(np.zeros((0, 2))).shape == (0,)


def test_node_levels():
    np.testing.assert_array_equal(node_level(np.arange(15)), [0, 1, 1, 2, 2, 2, 2] + [3] * 8)


def test_arrays_are_read_only_copies():
    coef = np.array(COEF)
    tree = SurrogateTree(coef, INTERCEPT, 2)
    coef[0, 0] = 9.0
    assert tree.coef[0, 0] == 1.0
    with pytest.raises(ValueError, match="read-only"):
        tree.coef[0, 0] = 2.0
    with pytest.raises(ValueError, match="read-only"):
        tree.intercept[0] = 2.0
    assert tree.feature_names == ("x0", "x1") and tree.classes.tolist() == [-1, 1]


def test_sparsity_counts():
    tree = SurrogateTree([[0, 0.3, 0], [0, 0, 0], [0.1, -0.2, 0]], [0, 0, 0], 2)
    assert tree.used_features() == [0, 1]
    assert tree.n_feature_uses() == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([[1.0]], [0.0], 0), "depth must be an integer >= 1"),
        (([[1.0, 0.0]], [0.0], 2), r"coef must have shape \(2\*\*depth - 1, n_features\)"),
        ((COEF, [0.0, 0.0], 2), r"intercept must have shape \(3,\)"),
        ((COEF, [np.nan, 0.0, 0.0], 2), "finite"),
        ((COEF, INTERCEPT, 2, ["a"]), "feature_names has 1 names but coef has 2 columns"),
        ((COEF, INTERCEPT, 2, None, [0, 1, 2]), "3 classes needs leaf_class"),
        ((COEF, INTERCEPT, 2, None, [0]), "at least two labels"),
        ((COEF, INTERCEPT, 2, None, [0, 1, 2], None, [0, 1, 2]), "4 class indices in 0..2"),
        ((COEF, INTERCEPT, 2, None, [0, 1, 2], None, [0, 1, 2, 3]), "4 class indices in 0..2"),
    ],
)
def test_constructor_errors(args, message):
    with pytest.raises(ValueError, match=message):
        SurrogateTree(*args)


def test_input_errors(tree):
    with pytest.raises(ValueError, match="2 columns"):
        tree.apply(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="no rule for them"):
        tree.predict(np.array([[np.nan, 0.0]]))
    with pytest.raises(ValueError, match="infinite values"):
        tree.predict(np.array([[np.inf, 0.0]]))
    with pytest.raises(ValueError, match="one sample"):
        tree.decision_path(X)
    with pytest.raises(ValueError, match="3..6"):
        tree.leaf_class_of([2])


RULE_COEF = [[0.5, 0.0, -0.25], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
RULE_INTERCEPT = [0.125, 0.0, -1 / 3]


def test_rules_text_exact():
    tree = SurrogateTree(RULE_COEF, RULE_INTERCEPT, 2, ["age", "bmi", "bp"], ["no", "yes"])
    assert tree.rules() == (
        "node 0 (level 0): if 0.5·age - 0.25·bp <= -0.125 then node 1 else node 2\n"
        "node 1 (level 1): (no split: all samples go left) -> leaf 3 (class no)\n"
        "node 2 (level 1): if bmi <= 0.3333 then leaf 5 (class no) else leaf 6 (class yes)"
    )
    right = SurrogateTree([[0.0, -0.009, 0.003]], [0.01], 1).rules(["a", "x2", "x11"])
    assert right == (
        "node 0 (level 0): if -0.009·x2 + 0.003·x11 <= -0.01 "
        "then leaf 1 (class -1) else leaf 2 (class 1)"
    )
    dummy = SurrogateTree([[0.0, 0.0, 0.0]], [0.5], 1).rules()
    assert dummy == "node 0 (level 0): (no split: all samples go right) -> leaf 2 (class 1)"


def test_rules_in_raw_units_route_raw_samples_identically():
    raw = np.array([[20.0, 15.0, 60.0], [70.0, 40.0, 160.0], [45.0, 22.0, 110.0]])
    scaler = MinMaxScaler().fit(raw)
    tree = SurrogateTree(RULE_COEF, RULE_INTERCEPT, 2, ["age", "bmi", "bp"], ["no", "yes"])
    lines = tree.rules(scaler=scaler).splitlines()
    # age in [20, 70], bmi in [15, 40], bp in [60, 160]:
    # 0.5 (age-20)/50 - 0.25 (bp-60)/100 + 0.125 = 0.01 age - 0.0025 bp + 0.075
    assert lines[0] == "node 0 (level 0): if 0.01·age - 0.0025·bp <= -0.075 then node 1 else node 2"
    # 0.04·bmi <= 0.9333 solved for bmi: bmi <= 23.33.
    assert lines[2].startswith(
        "node 2 (level 1): if 0.04·bmi <= 0.9333 (i.e. bmi <= 23.33) then leaf 5"
    )
    table = tree.rule_table(scaler=scaler)
    assert [row["node"] for row in table] == [0, 1, 2]
    assert [row["level"] for row in table] == [0, 1, 1]
    assert table[0]["terms"] == [("age", pytest.approx(0.01)), ("bp", pytest.approx(-0.0025))]
    assert table[0]["intercept"] == pytest.approx(0.075)
    assert table[1]["terms"] == [] and table[1]["text"] == "(no split: all samples go left)"

    rng = np.random.default_rng(0)
    samples = rng.uniform([20, 15, 60], [70, 40, 160], size=(200, 3))
    index = {"age": 0, "bmi": 1, "bp": 2}
    raw_sides = np.full((200, 3), -1)
    for row in table:
        value = row["intercept"] + sum(c * samples[:, index[name]] for name, c in row["terms"])
        raw_sides[:, row["node"]] = value > 0
    expected = tree.branch_sides(scaler.transform(samples))
    reached = expected >= 0
    np.testing.assert_array_equal(raw_sides[reached], expected[reached])

    with pytest.raises(ValueError, match="fitted MinMaxScaler over the tree's 3 features"):
        tree.rules(scaler=MinMaxScaler().fit(raw[:, :2]))


def test_json_round_trip_full_precision(tree):
    fine = SurrogateTree([[0.1 + 0.2, -1 / 3]], [1e-17], 1, ["a", "b"], ["no", "yes"])
    for original in (tree, fine):
        data = json.loads(json.dumps(original.to_dict()))
        assert data["format_version"] == 3 and data["leaf_class"] == [0, 1] * original.depth
        back = SurrogateTree.from_dict(data)
        np.testing.assert_array_equal(back.coef, original.coef)
        np.testing.assert_array_equal(back.intercept, original.intercept)
        assert back.feature_names == original.feature_names
        assert back.classes.tolist() == original.classes.tolist()
        assert back.depth == original.depth
    assert SurrogateTree.from_dict(fine.to_dict()).coef[0, 0] == 0.1 + 0.2
    assert SurrogateTree.from_dict(tree.to_dict()).predict(X).tolist() == tree.predict(X).tolist()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("coef"), r"missing keys \['coef'\]"),
        (lambda d: d.update(format="other"), "not a surrogate tree"),
        (lambda d: d.update(format_version=4), "unsupported surrogate tree format_version 4"),
        (lambda d: d.update(format_version=2), "missing_left must be a list of booleans"),
        (lambda d: d.update(depth=0), "depth must be an integer >= 1"),
        (lambda d: d.update(depth=3), r"coef must be 7 lists .* of 2 numbers"),
        (lambda d: d["coef"][1].append(0.0), r"coef must be 3 lists .* of 2 numbers"),
        (lambda d: d.update(intercept=[0.0]), "intercept must be a list of 3 numbers"),
        (lambda d: d["coef"][0].__setitem__(0, "x"), "numbers only"),
        (lambda d: d.update(classes=[0]), "at least two labels"),
        (lambda d: d.pop("leaf_class"), "leaf_class must be a list of class indices"),
        (lambda d: d.update(leaf_class=[0, 1, 0]), "leaf_class must hold 4 class indices"),
    ],
)
def test_from_dict_errors(tree, change, message):
    data = tree.to_dict()
    change(data)
    with pytest.raises(ValueError, match=message):
        SurrogateTree.from_dict(data)


def test_from_dict_needs_a_dict():
    with pytest.raises(TypeError, match="expected a dict"):
        SurrogateTree.from_dict([1, 2])


def test_objective_matches_formula(tree):
    problem = MiretProblem(
        X=X,
        y=np.array([0, 0, 0, 1, 1]),  # leaves 3,4,5,5,6 predict 0, 1, 0, 0, 1
        weight=np.array([0.9, 0.8, 0.7, 0.6, 1.0]),
        frequency=np.array([[0.5, 0.25], [0.1, 0.2]]),
        allowed=np.array([[True, False], [True, True]]),
        component=np.arange(5),
        depth=2,
        alpha=0.5,
        epsilon=1e-3,
        formulation="miret",
        feature_names=("x0", "x1"),
        classes=np.array(["benign", "malignant"]),
    )
    # misfits: sample 1 (0.8) and sample 3 (0.6); penalties: node 0 uses x0 at level 0
    # (0.5/0.5 = 1), node 1 uses x1 (0.5/0.2 = 2.5), node 2 uses x0 and x1 (5 + 2.5)
    expected = 0.8 + 0.6 + 1.0 + 2.5 + 5.0 + 2.5
    assert tree.objective(problem) == pytest.approx(expected)
    assert tree.objective(problem) == pytest.approx(expected)
    assert problem.objective(tree.coef, tree.apply(X)) == pytest.approx(expected)


def test_one_feature_rules_are_also_solved_for_the_feature():
    # -0.5·x1 + 0.25 <= 0  <=>  x1 >= 0.5 ; 2·x0 - 0.5 <= 0  <=>  x0 <= 0.25 ; x2 - 0.3 stays.
    coef = [[0.0, -0.5, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    tree = SurrogateTree(coef, [0.25, -0.5, -0.3], 2)
    lines = tree.rules().splitlines()
    assert (
        lines[0] == "node 0 (level 0): if -0.5·x1 <= -0.25 (i.e. x1 >= 0.5) then node 1 else node 2"
    )
    assert lines[1].startswith("node 1 (level 1): if 2·x0 <= 0.5 (i.e. x0 <= 0.25) then leaf 3")
    assert lines[2].startswith("node 2 (level 1): if x2 <= 0.3 then leaf 5")
    assert [row["univariate"] for row in tree.rule_table()] == ["x1 >= 0.5", "x0 <= 0.25", None]


# --------------------------------------------------------------------------- display tree
def test_display_tree_prunes_unreached_nodes_and_dummy_splits():
    from miret_governance.governance.miret.tree.display import display_tree, rules_text

    # Depth 3. Root: x0 <= 0.5 (yes = left). Node 1: no coefficients, all go right (to 4).
    # Node 2: -x1 + 0.3 <= 0 sends x1 >= 0.3 left; it reads "b < 0.3" with yes = its right
    # child (lower values on the yes side). Node 4: x1 <= 0.9 never separates (all
    # samples left): collapsed; so is node 6, which one sample reaches.
    coef = np.zeros((7, 2))
    intercept = np.zeros(7)
    coef[0], intercept[0] = [1.0, 0.0], -0.5
    intercept[1] = 1.0  # a dummy split: the whole space goes right
    coef[2], intercept[2] = [0.0, -1.0], 0.3
    coef[4], intercept[4] = [0.0, 1.0], -0.9
    coef[5], intercept[5] = [1.0, 1.0], -1.5
    coef[6], intercept[6] = [0.0, 1.0], -0.2
    tree = SurrogateTree(coef, intercept, 3, feature_names=("a", "b"), classes=(0, 1))
    X = np.array([[0.1, 0.1], [0.2, 0.5], [0.9, 0.8], [0.6, 0.5], [0.7, 0.1]])
    labels = tree.predict(X)
    labels[0] = 1  # one leaf becomes impure
    shown = display_tree(tree, X, labels, class_names=("benign", "malignant"))
    conditions = [(n.node, n.condition) for n in shown.nodes() if not n.is_leaf]
    assert conditions == [(0, "a <= 0.5"), (2, "b < 0.3"), (5, "a + b <= 1.5")]
    # Left of the root everything goes through node 1 (dummy) and node 4 (not
    # separating) to leaf 9 (odd: classes[0]); node 6 sees one sample (leaf 13).
    leaves = [(n.node, n.class_name, n.n_samples, n.purity) for n in shown.leaves()]
    assert leaves == [
        (9, "benign", 2, 0.5),
        (13, "benign", 1, 1.0),
        (11, "benign", 1, 1.0),
        (12, "malignant", 1, 1.0),
    ]
    assert shown.effective_depth == 3 and shown.depth == 3
    assert sum(n.n_samples for n in shown.leaves()) == 5
    # Every node drawn is reached by some sample.
    assert all(n.n_samples > 0 for n in shown.nodes())
    text = rules_text(shown).splitlines()
    assert text[0] == "if a <= 0.5 then benign (40.0% of samples, purity 50.0%)"
    assert text[1] == "if a > 0.5 and b < 0.3 then benign (20.0% of samples, purity 100.0%)"
    assert text[2] == (
        "if a > 0.5 and b >= 0.3 and a + b <= 1.5 then benign (20.0% of samples, purity 100.0%)"
    )
    assert text[4].startswith("(purity: share of a leaf's rows to which the ensemble gives")
    assert len(text) == 5 and shown.scores == ()


def test_display_conditions_in_raw_units_and_single_leaf():
    from sklearn.preprocessing import MinMaxScaler

    from miret_governance.governance.miret.tree.display import display_tree, rules_text

    scaler = MinMaxScaler().fit(np.array([[0.0, 100.0], [10.0, 300.0]]))
    # normalized: -x1 + 0.5 <= 0, i.e. raw perimeter >= 200
    tree = SurrogateTree([[0.0, -1.0]], [0.5], 1, feature_names=("r", "perimeter"))
    X = np.array([[0.1, 0.9], [0.2, 0.1]])
    shown = display_tree(tree, X, tree.predict(X), scaler=scaler)
    assert shown.root.condition == "perimeter < 200"  # yes: the tree's right child
    assert (shown.root.yes.class_name, shown.root.no.class_name) == ("1", "-1")
    assert shown.root.yes.n_samples == 1  # the sample with perimeter 120
    constant = display_tree(tree, X[:1], tree.predict(X[:1]), scaler=scaler)
    assert constant.effective_depth == 0
    assert rules_text(constant).splitlines()[0] == "always -1 (100.0% of samples, purity 100.0%)"
