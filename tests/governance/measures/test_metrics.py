"""Metrics of a surrogate on hand-checkable cases."""

import numpy as np
import pytest
import scipy.sparse as sp

from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.measures.metrics import (
    accuracy,
    class_fidelity,
    class_fidelity_metrics,
    class_metric_name,
    column_count,
    confusion,
    effective_depth,
    feature_counts,
    fidelity,
    fidelity_with_interval,
    measured_on_test_rows,
    proximity_agreement,
    surrogate_confusion,
    surrogate_metrics,
    wilson_interval,
)
from miret_governance.governance.miret.tree.tree import SurrogateTree


def _stump_forest():
    """Two stumps on x0 <= 0.5 with leaf fractions: ensemble predicts 1 iff x0 > 0.5."""
    stump = {
        "feature": [0, -1, -1],
        "threshold": [0.5, np.nan, np.nan],
        "left": [1, -1, -1],
        "right": [2, -1, -1],
        "value": [0.5, 0.0, 1.0],
    }
    return Ensemble.from_arrays([stump, stump], n_features=2)


def _depth2_tree():
    # root: x0 - 0.5 <= 0 goes left; node 1: dummy (all left); node 2: x1 - 0.5 <= 0 left.
    coef = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    intercept = np.array([-0.5, 0.0, -0.5])
    return SurrogateTree(coef, intercept, depth=2, feature_names=("x0", "x1"), classes=(0, 1))


def test_agreement_rates():
    assert fidelity([0, 1, 1, 0], [0, 1, 0, 0]) == 0.75
    assert accuracy(np.array(["a", "b"]), np.array(["a", "a"])) == 0.5
    with pytest.raises(ValueError, match="equal length"):
        fidelity([0, 1], [0])
    with pytest.raises(ValueError, match="empty"):
        accuracy([], [])


def test_proximity_agreement_counts_shared_leaves():
    pairs = sp.csr_matrix(([1.0, 0.9, 0.95], ([0, 0, 1], [1, 2, 3])), shape=(4, 4))
    fraction, n_pairs = proximity_agreement(pairs, np.array([7, 7, 8, 7]))
    assert n_pairs == 3
    assert fraction == pytest.approx(2 / 3)
    fraction, n_pairs = proximity_agreement(sp.csr_matrix((4, 4)), np.zeros(4))
    assert n_pairs == 0 and np.isnan(fraction)


def test_feature_counts_and_effective_depth():
    tree = _depth2_tree()
    assert feature_counts(tree) == (2, 2)
    X = np.array([[0.2, 0.1], [0.8, 0.2], [0.9, 0.9]])
    # Root separates; node 1 is dummy; node 2 separates samples 1 and 2.
    assert effective_depth(tree, X) == 2
    # A single sample never reaches both sides of a node, so no split is effective.
    assert effective_depth(tree, X[:1]) == 0


def test_surrogate_metrics_exact_values():
    ensemble = _stump_forest()
    tree = _depth2_tree()
    X_train = np.array([[0.2, 0.1], [0.8, 0.2], [0.9, 0.9], [0.1, 0.7]])
    y_train = np.array([0, 1, 1, 1])
    X_test = np.array([[0.6, 0.3], [0.7, 0.8]])
    metrics = surrogate_metrics(
        ensemble, tree, X_train, X_test, y_train, np.array([1, 0]), proximity_threshold=1.0
    )
    # Ensemble: [0,1,1,0]; tree leaves: 3(0),5(0),6(1),3(0) -> predictions [0,0,1,0].
    assert metrics["train_fidelity"] == 0.75
    assert metrics["train_accuracy_surrogate"] == 0.5
    assert metrics["train_accuracy_ensemble"] == 0.75
    # Train pairs with m = 1: (0,3) and (1,2) share both stump leaves.
    assert metrics["train_proximity_pairs"] == 2
    # Test: ensemble [1,1]; tree [0 (leaf 5), 1 (leaf 6)]; the single pair is split.
    assert metrics["test_fidelity"] == 0.5
    # 1 of 2 rows: the Wilson interval is symmetric about 1/2, z^2 = 3.8415
    assert metrics["n_test_rows"] == 2
    low, high = metrics["test_fidelity_ci_low"], metrics["test_fidelity_ci_high"]
    assert low + high == pytest.approx(1.0) and low == pytest.approx(0.0945312, abs=1e-7)
    assert metrics["test_accuracy_ensemble"] == 0.5
    assert metrics["test_proximity_pairs"] == 1
    assert metrics["test_proximity_agreement"] == 0.0
    assert metrics["n_features_used"] == 2
    assert metrics["n_columns_used"] == 2  # no encoding: a feature is a column
    assert metrics["n_feature_uses"] == 2
    assert metrics["effective_depth"] == 2


def test_one_hot_columns_of_one_input_column_count_once():
    """Encoded columns [purpose=car, purpose=boat, amount, age]: a tree on purpose=car,
    purpose=boat and amount uses 3 features from 2 input columns."""
    from miret_governance.governance.ensembles.encoding import EncodedColumn, Encoding

    encoding = Encoding(
        columns=(
            EncodedColumn("purpose_car", "purpose", "one-hot", ("car",)),
            EncodedColumn("purpose_boat", "purpose", "one-hot", ("boat",)),
            EncodedColumn("amount", "amount", "numeric"),
            EncodedColumn("age", "age", "numeric"),
        ),
        inputs=("purpose", "amount", "age"),
        seen={"purpose": ("boat", "car")},
    )
    coef = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0]])
    names = encoding.names
    tree = SurrogateTree(coef, np.zeros(3), depth=2, feature_names=names, classes=(0, 1))
    assert feature_counts(tree) == (3, 3)
    assert column_count(tree, encoding) == 2
    assert column_count(tree) == 3


@pytest.mark.parametrize(("agreeing", "rows"), [(84, 86), (86, 86), (0, 10), (5, 10), (1, 1)])
def test_wilson_interval_matches_scipy(agreeing, rows):
    from scipy.stats import binomtest

    expected = binomtest(agreeing, rows).proportion_ci(confidence_level=0.95, method="wilson")
    low, high = wilson_interval(agreeing, rows)
    assert low == pytest.approx(expected.low, abs=1e-12)
    assert high == pytest.approx(expected.high, abs=1e-12)
    assert 0.0 <= low <= agreeing / rows <= high <= 1.0


def _tested(agreeing, rows):
    low, high = wilson_interval(agreeing, rows)
    return {
        "test_fidelity": agreeing / rows,
        "test_fidelity_ci_low": low,
        "test_fidelity_ci_high": high,
        "n_test_rows": float(rows),
    }


def test_fidelity_with_interval_rounds_for_people():
    # 84 of 86: 0.97674, Wilson (0.91912, 0.99360); 86 of 86: (0.95724, 1)
    assert fidelity_with_interval(_tested(84, 86)) == "97.7% (95% CI 91.9-99.4%, n=86)"
    assert fidelity_with_interval(_tested(86, 86)) == "100.0% (95% CI 95.7-100.0%, n=86)"
    # 1 of 2: 50%, the interval symmetric about it (0.0945, 0.9055)
    assert fidelity_with_interval(_tested(1, 2)) == "50.0% (95% CI 9.5-90.5%, n=2)"
    assert fidelity_with_interval({"test_fidelity": 84 / 86}) == "97.7%"
    assert fidelity_with_interval({"test_fidelity": float("nan")}) == ""
    assert fidelity_with_interval({"train_fidelity": 1.0}) == ""


def test_metrics_measured_on_test_rows():
    on_test = ["test_fidelity", "test_fidelity_ci_low", "n_test_rows"]
    on_test += ["baseline_cart_test_fidelity", "test_proximity_rows"]
    assert all(measured_on_test_rows(name) for name in on_test)
    on_train = ["train_fidelity", "baseline_cart_cv_fidelity", "n_features_used"]
    on_train += ["solver.time_s", "effective_depth", "contested_rows"]
    assert not any(measured_on_test_rows(name) for name in on_train)


def test_wilson_interval_refuses_impossible_counts():
    with pytest.raises(ValueError, match="0 <= agreeing <= rows"):
        wilson_interval(3, 2)
    with pytest.raises(ValueError, match="rows >= 1"):
        wilson_interval(0, 0)


def test_chunked_metrics_equal_one_pass_and_proximity_uses_a_bounded_sample():
    rng = np.random.default_rng(0)
    X = rng.random((1001, 2))
    y = (rng.random(1001) > 0.5).astype(int)
    ensemble, tree = _stump_forest(), _depth2_tree()
    whole = surrogate_metrics(ensemble, tree, X, X[:300], y, y[:300], chunk_rows=10**6)
    chunked = surrogate_metrics(
        ensemble, tree, X, X[:300], y, y[:300], chunk_rows=7, proximity_rows=200
    )
    expected_fidelity = np.mean(ensemble.predict(X) == tree.predict(X))
    assert whole["train_fidelity"] == chunked["train_fidelity"] == expected_fidelity
    assert chunked["train_accuracy_surrogate"] == np.mean(tree.predict(X) == y)
    assert chunked["effective_depth"] == whole["effective_depth"] == 2
    assert whole["train_proximity_rows"] == 1001 and chunked["train_proximity_rows"] == 200
    assert chunked["test_proximity_rows"] == 200


def test_peak_memory_is_at_least_a_large_array():
    from miret_governance.governance.measures.metrics import peak_memory_bytes

    block = np.ones(50 * 2**20 // 8)  # 50 MiB, touched
    assert peak_memory_bytes() >= block.nbytes


def test_threshold_above_one_asks_for_no_proximity_pairs():
    X = np.array([[0.2, 0.1], [0.8, 0.2], [0.9, 0.9], [0.1, 0.7]])
    metrics = surrogate_metrics(_stump_forest(), _depth2_tree(), X, X, proximity_threshold=1.5)
    assert metrics["train_proximity_pairs"] == metrics["test_proximity_pairs"] == 0
    assert "test_proximity_agreement" not in metrics and metrics["train_fidelity"] == 0.75


# --------------------------------------------------------------------------- k classes
def test_class_metric_name_keeps_safe_characters_only():
    assert class_metric_name("test_fidelity", "grade A") == "test_fidelity_class_grade_A"
    assert class_metric_name("test_fidelity", "b/c-1.5") == "test_fidelity_class_b_c-1.5"
    assert class_metric_name("train_fidelity", 2) == "train_fidelity_class_2"


def test_confusion_and_per_class_fidelity_of_three_classes_on_ten_rows():
    ensemble = ["a", "a", "a", "a", "b", "b", "b", "c", "c", "c"]
    surrogate = ["a", "a", "a", "b", "b", "b", "a", "c", "b", "c"]
    table = confusion(ensemble, surrogate, ["a", "b", "c"])
    assert table.index.name == "ensemble" and table.columns.name == "surrogate"
    assert table.to_numpy().tolist() == [[3, 1, 0], [1, 2, 0], [0, 1, 2]]
    shares = class_fidelity(table)
    assert shares["ensemble_rows"].tolist() == [4, 3, 3]
    assert shares["agreeing_rows"].tolist() == [3, 2, 2]
    assert class_fidelity_metrics(table) == {
        "test_fidelity_class_a": 0.75,
        "test_fidelity_class_b": 2 / 3,
        "test_fidelity_class_c": 2 / 3,
    }
    # A class no row is given gets no key, and NaN in the table of shares.
    sparse = confusion(["a", "c"], ["a", "b"], ["a", "b", "c"])
    assert class_fidelity_metrics(sparse) == {
        "test_fidelity_class_a": 1.0,
        "test_fidelity_class_c": 0.0,
    }
    assert np.isnan(class_fidelity(sparse)["fidelity"][1])


def test_confusion_refuses_labels_outside_the_classes_and_clashing_names():
    with pytest.raises(ValueError, match=r"surrogate labels \['d'\] are not among the classes"):
        confusion(["a", "b"], ["a", "d"], ["a", "b"])
    with pytest.raises(ValueError, match="equal length"):
        confusion(["a"], ["a", "b"], ["a", "b"])
    clash = confusion(["a b", "a_b"], ["a b", "a_b"], ["a b", "a_b"])
    with pytest.raises(ValueError, match="both give the metric name test_fidelity_class_a_b"):
        class_fidelity_metrics(clash)


def test_surrogate_metrics_add_the_fidelity_of_each_class_on_the_test_rows():
    ensemble, tree = _stump_forest(), _depth2_tree()
    X_test = np.array([[0.6, 0.3], [0.7, 0.8], [0.2, 0.9], [0.9, 0.1]])
    metrics = surrogate_metrics(ensemble, tree, X_test, X_test, proximity_threshold=1.5)
    # Ensemble [1, 1, 0, 1]; tree [0 (leaf 5), 1 (leaf 6), 0 (leaf 3), 0 (leaf 5)].
    assert metrics["test_fidelity_class_0"] == 1.0
    assert metrics["test_fidelity_class_1"] == 1 / 3
    assert "train_fidelity_class_0" not in metrics
    table = surrogate_confusion(ensemble, tree, X_test, chunk_rows=3)
    assert table.to_numpy().tolist() == [[1, 0], [2, 1]]


def test_surrogate_metrics_per_class_on_three_grades_and_ten_rows():
    tree = {
        "feature": [0, -1, 0, -1, -1],
        "threshold": [0.3, np.nan, 0.7, np.nan, np.nan],
        "left": [1, -1, 3, -1, -1],
        "right": [2, -1, 4, -1, -1],
        "value": np.array([[0.3, 0.4, 0.3], [1, 0, 0], [0, 4 / 7, 3 / 7], [0, 1, 0], [0, 0, 1.0]]),
    }
    grades = ("grade A", "grade B", "grade C")
    ensemble = Ensemble.from_arrays([tree], feature_names=["x0", "x1"], classes=grades)
    surrogate = SurrogateTree(  # A below 0.3, B up to 0.5, C above: B's upper cut is too low
        [[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]],
        [-0.3, 0.0, -0.5],
        2,
        feature_names=("x0", "x1"),
        classes=grades,
        leaf_class=[0, 0, 1, 2],
    )
    x0 = [0.1, 0.2, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95]
    X = np.column_stack([x0, np.zeros(10)])
    metrics = surrogate_metrics(ensemble, surrogate, X, X)
    # Ensemble: A A A B B B B C C C; surrogate: A A A B B C C C C C.
    assert metrics["test_fidelity"] == 0.8
    assert {k: v for k, v in metrics.items() if "_class_" in k} == {
        "test_fidelity_class_grade_A": 1.0,
        "test_fidelity_class_grade_B": 0.5,
        "test_fidelity_class_grade_C": 1.0,
    }
    table = surrogate_confusion(ensemble, surrogate, X, chunk_rows=4)
    assert table.index.tolist() == list(grades)
    assert table.to_numpy().tolist() == [[3, 0, 0], [0, 2, 2], [0, 0, 3]]
