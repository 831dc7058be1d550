"""VITE quantities: the paper's toy forest by hand, real models by an independent count."""

import tracemalloc
from collections import defaultdict
from fractions import Fraction as F

import numpy as np
import pandas as pd
import pytest
import xgboost
from sklearn.datasets import make_classification
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier

from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.measures import vite

# --------------------------------------------------------------------------- toy forest
# The paper's toy example: 3 trees of depth 3 on 4 features. x1, x2 (indices 0, 1) are
# used at the root, x3 (index 2) only at level 1, x4 (index 3) never. Each tree maps a
# breadth-first position to (feature, threshold); tree 1 is pruned at position 4 (level
# 2), tree 3 at position 2 (level 1), and no tree splits at position 6.
TOY = [
    {0: (0, 0.5), 1: (2, 0.3), 2: (1, 0.6), 3: (0, 0.2), 5: (1, 0.7)},
    {0: (1, 0.4), 1: (0, 0.25), 2: (2, 0.35), 3: (1, 0.1), 4: (0, 0.3)},
    {0: (0, 0.55), 1: (2, 0.2), 3: (1, 0.15), 4: (1, 0.15)},
]
NAMES = ["x1", "x2", "x3", "x4"]


def tree_arrays(splits: dict) -> dict:
    """Node arrays (breadth-first ids) of a tree given its splits by position."""
    positions, queue = [], [0]
    while queue:
        t = queue.pop(0)
        positions.append(t)
        if t in splits:
            queue += [2 * t + 1, 2 * t + 2]
    node = {t: i for i, t in enumerate(positions)}
    split = [t in splits for t in positions]
    return {
        "feature": [splits[t][0] if s else -1 for t, s in zip(positions, split)],
        "threshold": [splits[t][1] if s else np.nan for t, s in zip(positions, split)],
        "left": [node[2 * t + 1] if s else -1 for t, s in zip(positions, split)],
        "right": [node[2 * t + 2] if s else -1 for t, s in zip(positions, split)],
        "value": [(t % 2) * 1.0 for t in positions],
    }


@pytest.fixture
def toy():
    return Ensemble.from_arrays([tree_arrays(t) for t in TOY], feature_names=NAMES)


def as_fractions(frame: pd.DataFrame) -> list:
    return [[F(v).limit_denominator(100) for v in row] for row in frame.to_numpy()]


def test_toy_level_frequency_over_splits(toy):
    frequency = vite.level_frequency(toy)
    assert list(frequency.index) == NAMES and list(frequency.columns) == [0, 1, 2]
    # Splits per level: 3 (every root), 5 (tree 3 prunes position 2), 6.
    expected = [
        [F(2, 3), F(1, 5), F(2, 6)],  # x1: two roots; level 1 tree 2; level 2 trees 1, 2
        [F(1, 3), F(1, 5), F(4, 6)],  # x2
        [0, F(3, 5), 0],  # x3 only at level 1
        [0, 0, 0],  # x4 unused
    ]
    assert as_fractions(frequency) == expected
    np.testing.assert_allclose(frequency.to_numpy(), np.array(expected, dtype=float))
    np.testing.assert_allclose(frequency.sum(axis=0), 1.0)


def test_toy_level_frequency_over_nodes(toy):
    frequency = vite.level_frequency(toy, denominator="nodes")
    # Denominators |E| 2^d = 3, 6, 12.
    expected = [
        [F(2, 3), F(1, 6), F(2, 12)],
        [F(1, 3), F(1, 6), F(4, 12)],
        [0, F(3, 6), 0],
        [0, 0, 0],
    ]
    np.testing.assert_allclose(frequency.to_numpy(), np.array(expected, dtype=float))
    np.testing.assert_allclose(frequency.sum(axis=0), [1, 5 / 6, 6 / 12])


def test_toy_node_frequency(toy):
    frequency = vite.node_frequency(toy)
    assert list(frequency.index) == list(range(7)) and list(frequency.columns) == NAMES
    expected = [
        [F(2, 3), F(1, 3), 0, 0],  # roots: x1, x2, x1
        [F(1, 3), 0, F(2, 3), 0],  # position 1: x3, x1, x3
        [0, F(1, 2), F(1, 2), 0],  # position 2: x2, x3 (tree 3 has a leaf there)
        [F(1, 3), F(2, 3), 0, 0],  # position 3: x1, x2, x2
        [F(1, 2), F(1, 2), 0, 0],  # position 4: x1, x2 (tree 1 has a leaf there)
        [0, 1, 0, 0],  # position 5: only tree 1 splits
        [0, 0, 0, 0],  # position 6: no tree splits
    ]
    np.testing.assert_allclose(frequency.to_numpy(), np.array(expected, dtype=float))


def test_toy_weighted_frequencies_are_scale_invariant(toy):
    weighted = toy.with_tree_weights([2.0, 1.0, 1.0])
    level = vite.level_frequency(weighted)
    # Level 0: x1 at the roots of trees 1 and 3 (2 + 1 of total weight 4). Level 1:
    # weighted splits 2*2 + 1*2 + 1*1 = 7; x1 in tree 2 (1), x2 in tree 1 (2), x3 in
    # trees 1, 2, 3 (2 + 1 + 1).
    np.testing.assert_allclose(level[0], [3 / 4, 1 / 4, 0, 0])
    np.testing.assert_allclose(level[1], [1 / 7, 2 / 7, 4 / 7, 0])
    nodes = vite.level_frequency(weighted, denominator="nodes")
    np.testing.assert_allclose(nodes[1], [1 / 8, 2 / 8, 4 / 8, 0])
    np.testing.assert_allclose(vite.node_frequency(weighted).loc[1], [1 / 4, 0, 3 / 4, 0])
    scaled = toy.with_tree_weights([20.0, 10.0, 10.0])
    for denominator in ("splits", "nodes"):
        pd.testing.assert_frame_equal(
            vite.level_frequency(scaled, denominator), vite.level_frequency(weighted, denominator)
        )
    pd.testing.assert_frame_equal(vite.node_frequency(scaled), vite.node_frequency(weighted))
    pd.testing.assert_frame_equal(
        vite.level_frequency(toy.with_tree_weights([5.0, 5.0, 5.0])), vite.level_frequency(toy)
    )


def test_toy_threshold_ranges(toy):
    ranges = vite.threshold_ranges(toy)
    assert list(ranges.columns) == ["position", "feature", "low", "high", "count", "share"]
    expected = [
        (0, "x1", 0.5, 0.55, 2, F(2, 3)),
        (0, "x2", 0.4, 0.4, 1, F(1, 3)),
        (1, "x1", 0.25, 0.25, 1, F(1, 3)),
        (1, "x3", 0.2, 0.3, 2, F(2, 3)),
        (2, "x2", 0.6, 0.6, 1, F(1, 2)),
        (2, "x3", 0.35, 0.35, 1, F(1, 2)),
        (3, "x1", 0.2, 0.2, 1, F(1, 3)),
        (3, "x2", 0.1, 0.15, 2, F(2, 3)),
        (4, "x1", 0.3, 0.3, 1, F(1, 2)),
        (4, "x2", 0.15, 0.15, 1, F(1, 2)),
        (5, "x2", 0.7, 0.7, 1, F(1)),
    ]
    found = [(*row[:5], F(row[5]).limit_denominator(100)) for row in ranges.itertuples(index=False)]
    assert found == expected
    # the node frequency the VITE figure shows, with the tree weights: at position 1 the
    # trees weigh 2 (x3), 1 (x1) and 1 (x3), so x3 has 3/4 of the weight though 2 of 3 trees
    weighted = vite.threshold_ranges(toy.with_tree_weights([2.0, 1.0, 1.0]))
    at_1 = weighted[weighted.position == 1].set_index("feature")
    assert (at_1["count"].to_dict(), at_1["share"].to_dict()) == (
        {"x1": 1, "x3": 2},
        {"x1": 0.25, "x3": 0.75},
    )
    frequency = vite.node_frequency(toy.with_tree_weights([2.0, 1.0, 1.0]))
    for row in weighted.itertuples(index=False):
        assert row.share == pytest.approx(frequency.loc[row.position, row.feature])


def test_toy_proximity_and_class_probability(toy):
    X = np.array(
        [[0.1, 0.05, 0.1, 0], [0.1, 0.12, 0.1, 0], [0.9, 0.9, 0.9, 0], [0.52, 0.9, 0.1, 0.5]]
    )
    positions = toy.apply_positions(X)
    # Samples 0 and 1 differ only in x2 (0.05 vs 0.12); on their paths only tree 2's split
    # x2 <= 0.1 at position 3 separates them, so they share 2 of 3 leaves.
    assert (positions[0] == positions[1]).tolist() == [True, False, True]
    proximity = vite.proximity(toy, X)
    shared = (positions[:, None, :] == positions[None, :, :]).mean(axis=2)
    np.testing.assert_allclose(proximity, shared)
    assert proximity[0, 1] == pytest.approx(2 / 3)
    pairs = vite.proximity_pairs(toy, X, 2 / 3)
    assert pairs.toarray()[0, 1] == pytest.approx(2 / 3)
    assert set(zip(*pairs.nonzero())) == {
        (i, k) for i in range(4) for k in range(i + 1, 4) if shared[i, k] >= 2 / 3
    }
    # Leaf value = position parity: p_1 is the share of trees ending at an odd position.
    p1 = (positions % 2).mean(axis=1)
    np.testing.assert_allclose(vite.class_probability(toy, X), np.maximum(p1, 1 - p1))


def test_bad_arguments(toy):
    with pytest.raises(ValueError, match="denominator"):
        vite.level_frequency(toy, denominator="levels")
    for threshold in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"threshold must be in \(0, 1\]"):
            vite.proximity_pairs(toy, np.zeros((2, 4)), threshold)


# --------------------------------------------------------------------------- real models
def sklearn_splits(model):
    """(tree, level, position, feature, threshold) of every split, by a recursive walk."""
    estimators = np.asarray(model.estimators_, dtype=object).ravel()  # GB: (n, 1)
    found = []
    for e, estimator in enumerate(estimators):
        t = estimator.tree_

        def walk(node, level, position, e=e, t=t):
            if t.children_left[node] == -1:
                return
            found.append((e, level, position, int(t.feature[node]), float(t.threshold[node])))
            walk(t.children_left[node], level + 1, 2 * position + 1)
            walk(t.children_right[node], level + 1, 2 * position + 2)

        walk(0, 0, 0)
    return found


def xgboost_splits(model, names):
    frame = model.get_booster().trees_to_dataframe().set_index("ID")
    found = []
    for e in frame["Tree"].unique():

        def walk(node_id, level, position, e=e):
            row = frame.loc[node_id]
            if row["Feature"] == "Leaf":
                return
            found.append((int(e), level, position, names.index(row["Feature"]), row["Split"]))
            walk(row["Yes"], level + 1, 2 * position + 1)
            walk(row["No"], level + 1, 2 * position + 2)

        walk(f"{e}-0", 0, 0)
    return found


def expected_frequencies(splits, weights, n_features, depth):
    level = np.zeros((n_features, depth))
    node = np.zeros((2**depth - 1, n_features))
    ranges = defaultdict(list)
    for e, d, t, j, threshold in splits:
        level[j, d] += weights[e]
        node[t, j] += weights[e]
        ranges[(t, j)].append(threshold)
    by_nodes = level / (weights.sum() * 2.0 ** np.arange(depth))
    by_splits = level / level.sum(axis=0)
    node_total = node.sum(axis=1, keepdims=True)
    node = np.divide(node, node_total, out=np.zeros_like(node), where=node_total > 0)
    return by_splits, by_nodes, node, ranges


@pytest.mark.parametrize("kind", ["random_forest", "gradient_boosting", "xgboost"])
def test_real_model_frequencies_match_an_independent_count(kind, breast_cancer):
    X, y = breast_cancer
    names = list(X.columns)
    if kind == "random_forest":
        model = RandomForestClassifier(n_estimators=25, max_depth=3, random_state=0).fit(X, y)
        splits = sklearn_splits(model)
    elif kind == "gradient_boosting":
        model = GradientBoostingClassifier(n_estimators=25, max_depth=3, random_state=0)
        splits = sklearn_splits(model.fit(X, y))
    else:
        model = xgboost.XGBClassifier(n_estimators=25, max_depth=3, random_state=0).fit(X, y)
        splits = xgboost_splits(model, names)
    ensemble = read_ensemble(model)
    if kind != "random_forest":
        ensemble = ensemble.weighted_by_data(X.to_numpy())
        assert not np.allclose(ensemble.tree_weights, ensemble.tree_weights[0])
    by_splits, by_nodes, node, ranges = expected_frequencies(
        splits, ensemble.tree_weights, len(names), 3
    )
    assert ensemble.max_depth == 3
    np.testing.assert_allclose(vite.level_frequency(ensemble).to_numpy(), by_splits, rtol=1e-12)
    np.testing.assert_allclose(
        vite.level_frequency(ensemble, "nodes").to_numpy(), by_nodes, rtol=1e-12
    )
    np.testing.assert_allclose(vite.node_frequency(ensemble).to_numpy(), node, rtol=1e-12)
    table = vite.threshold_ranges(ensemble)
    assert len(table) == len(ranges)
    for row in table.itertuples(index=False):
        values = ranges[(row.position, names.index(row.feature))]
        assert row.count == len(values)
        assert row.low == pytest.approx(min(values), rel=1e-6)
        assert row.high == pytest.approx(max(values), rel=1e-6)


def test_threshold_ranges_in_raw_units(breast_cancer, scaled_forest):
    X, _ = breast_cancer
    pipeline = scaled_forest
    ensemble = read_ensemble(pipeline)
    table = vite.threshold_ranges(ensemble)
    assert {"low_raw", "high_raw"} <= set(table.columns)
    scaler = pipeline[0]
    for row in table.itertuples(index=False):
        j = list(X.columns).index(row.feature)
        point = np.full((2, X.shape[1]), 0.5)
        point[:, j] = [row.low, row.high]
        raw = scaler.inverse_transform(point)[:, j]
        assert (row.low_raw, row.high_raw) == pytest.approx(tuple(raw), rel=1e-12)
        assert X.iloc[:, j].min() <= row.low_raw <= row.high_raw <= X.iloc[:, j].max()


def test_class_probability_is_the_larger_predicted_probability(breast_cancer, scaled_forest):
    X, y = breast_cancer
    for model in (
        scaled_forest,
        xgboost.XGBClassifier(n_estimators=10, max_depth=3, random_state=0).fit(X, y),
    ):
        ensemble = read_ensemble(model)
        p = vite.class_probability(ensemble, ensemble.transform(X))
        np.testing.assert_allclose(p, model.predict_proba(X).max(axis=1), atol=1e-6)
        assert p.min() >= 0.5


# --------------------------------------------------------------------------- proximity
@pytest.mark.parametrize("kind", ["random_forest", "boosted_weighted"])  # weights unused
def test_dense_and_sparse_proximity_agree(kind, breast_cancer):
    X, y = breast_cancer
    X = X.to_numpy()
    if kind == "random_forest":
        ensemble = read_ensemble(
            RandomForestClassifier(n_estimators=30, max_depth=4, random_state=0).fit(X, y)
        )
    else:
        model = GradientBoostingClassifier(n_estimators=30, max_depth=3, random_state=0)
        ensemble = read_ensemble(model.fit(X, y)).weighted_by_data(X)
    dense = vite.proximity(ensemble, X)
    np.testing.assert_array_equal(dense, dense.T)
    np.testing.assert_array_equal(np.diag(dense), 1.0)
    leaves = ensemble.apply(X)
    for i, k in [(0, 1), (3, 200), (100, 568)]:  # share of trees, whatever the weights
        assert dense[i, k] == np.mean(leaves[i] == leaves[k])
    for threshold in (0.5, 0.85, 1.0):
        pairs = vite.proximity_pairs(ensemble, X, threshold)
        expected = np.triu(dense >= threshold, k=1)
        assert pairs.nnz == expected.sum() > 0
        np.testing.assert_array_equal(pairs.toarray(), np.where(expected, dense, 0.0))


@pytest.mark.parametrize("dense_incidence", [True, False])
def test_proximity_pairs_blockwise_on_a_larger_sample(dense_incidence, monkeypatch):
    n = 3000
    X, y = make_classification(n_samples=n, n_features=10, random_state=0)
    forest = RandomForestClassifier(n_estimators=100, max_depth=3, random_state=0, n_jobs=2)
    ensemble = read_ensemble(forest.fit(X, y))
    monkeypatch.setattr(vite, "_BLOCK_BYTES", 4 * n * 128)  # 24 blocks of 128 rows
    if not dense_incidence:
        monkeypatch.setattr(vite, "_DENSE_INCIDENCE_BYTES", 0)
    tracemalloc.start()
    pairs = vite.proximity_pairs(ensemble, X, 0.9)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < n * n * 8 / 2  # half of one dense float64 n x n matrix
    assert pairs.shape == (n, n) and pairs.nnz > 0
    assert np.all(pairs.nonzero()[0] < pairs.nonzero()[1])
    sub = np.arange(0, n, 7)  # pairs inside a subsample are its own pairs
    dense = vite.proximity(ensemble, X[sub])
    expected = np.where(np.triu(dense >= 0.9, k=1), dense, 0.0)
    np.testing.assert_array_equal(pairs[sub][:, sub].toarray(), expected)


# --------------------------------------------------------------------------- deep trees
def chain_tree(depth: int) -> dict:
    """A tree that splits on feature 0 at 1/2, 1/4, ... down the left edge, ``depth`` levels."""
    n = 2 * depth + 1
    feature, threshold, left, right = [-1] * n, [np.nan] * n, [-1] * n, [-1] * n
    for level in range(depth):
        node = 2 * level  # the split of this level; its right child is the leaf node + 1
        feature[node], threshold[node] = 0, 0.5 ** (level + 1)
        left[node], right[node] = node + 2, node + 1
    return {"feature": feature, "threshold": threshold, "left": left, "right": right}


def test_synthetic_tree_deeper_than_64_levels():
    ensemble = Ensemble.from_arrays([chain_tree(70)], feature_names=["a", "b"])
    tree = ensemble.trees[0]
    assert ensemble.max_depth == 70
    # Positions stop where they would overflow int64; the first levels keep theirs.
    assert tree.position[2 * 3] == 2**3 - 1  # left edge: position 2^d - 1 at level d
    assert tree.position[tree.depth > 62].tolist() == [-1] * int((tree.depth > 62).sum())
    X = np.array([[0.75, 0.0], [0.3, 0.0], [0.5**71, 0.0]])
    np.testing.assert_array_equal(ensemble.apply(X)[:, 0], [1, 3, 140])
    levels = vite.level_frequency(ensemble, depth=3)
    assert levels.shape == (2, 3)
    assert levels.loc["a"].tolist() == [1.0, 1.0, 1.0]
    nodes = vite.node_frequency(ensemble, depth=3)
    assert nodes.index.tolist() == list(range(7))
    assert nodes["a"].tolist() == [1, 1, 0, 1, 0, 0, 0]
    ranges = vite.threshold_ranges(ensemble, depth=2)
    assert ranges[["position", "low", "high"]].to_numpy().tolist() == [
        [0, 0.5, 0.5],
        [1, 0.25, 0.25],
    ]
    with pytest.raises(ValueError, match="pass depth=D"):
        vite.node_frequency(ensemble)


def test_unbounded_random_forest_is_read_and_summarized_on_the_first_levels():
    X, y = make_classification(n_samples=3000, n_features=12, flip_y=0.2, random_state=0)
    model = RandomForestClassifier(n_estimators=10, max_depth=None, random_state=0).fit(X, y)
    ensemble = read_ensemble(model)
    assert ensemble.max_depth == max(e.get_depth() for e in model.estimators_) > 16
    np.testing.assert_array_equal(ensemble.apply(X), model.apply(X))
    np.testing.assert_allclose(ensemble.predict_proba(X), model.predict_proba(X))
    splits = [s for s in sklearn_splits(model) if s[1] < 3]
    by_splits, by_nodes, node, _ = expected_frequencies(splits, np.ones(10), 12, 3)
    np.testing.assert_allclose(vite.level_frequency(ensemble, depth=3).to_numpy(), by_splits)
    np.testing.assert_allclose(
        vite.level_frequency(ensemble, "nodes", depth=3).to_numpy(), by_nodes
    )
    np.testing.assert_allclose(vite.node_frequency(ensemble, depth=3).to_numpy(), node)
    # Proximity comes from the full trees: a sample shares every leaf only with itself.
    np.testing.assert_array_equal(np.diag(vite.proximity(ensemble, X[:50])), np.ones(50))


# --------------------------------------------------------------------------- k classes
def _stump(feature, left_value, right_value):
    return {
        "feature": [feature, -1, -1],
        "threshold": [0.5, np.nan, np.nan],
        "left": [1, -1, -1],
        "right": [2, -1, -1],
        "value": [left_value, left_value, right_value],
    }


K_ROWS = np.array([[0.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])


def test_vite_of_a_three_class_forest_by_hand():
    """Stumps on x0 and x1 with class fractions: each feature is half of level 0; rows
    share the x0 leaf or the x1 leaf or neither; the class probability is the largest
    mean fraction (3/4, 3/4, 1/2, 1/2)."""
    forest = Ensemble.from_arrays(
        [_stump(0, [1, 0, 0], [0, 0.5, 0.5]), _stump(1, [0.5, 0.5, 0], [0, 0, 1])],
        n_features=2,
        classes=("a", "b", "c"),
    )
    for denominator in vite.DENOMINATORS:
        frequency = vite.level_frequency(forest, denominator)
        assert frequency[0].tolist() == [0.5, 0.5]
    assert vite.node_frequency(forest).loc[0].tolist() == [0.5, 0.5]
    ranges = vite.threshold_ranges(forest)
    assert ranges[["low", "high", "count"]].to_numpy().tolist() == [[0.5, 0.5, 1]] * 2
    expected = [[1, 0, 0.5, 0.5], [0, 1, 0.5, 0.5], [0.5, 0.5, 1, 0], [0.5, 0.5, 0, 1]]
    np.testing.assert_array_equal(vite.proximity(forest, K_ROWS), expected)
    pairs = vite.proximity_pairs(forest, K_ROWS, 0.5)
    assert sorted(zip(*pairs.nonzero())) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    np.testing.assert_array_equal(vite.class_probability(forest, K_ROWS), [0.75, 0.75, 0.5, 0.5])


def test_vite_per_class_of_a_three_class_boosted_ensemble_by_hand():
    """Class 0's tree splits on x1, classes 1 and 2's on x0: the whole ensemble uses x0
    in 2 of 3 root splits, each class view only its own feature; the class probability
    is the softmax's largest, (1, 2, 5)/8 = 5/8 where x0 = 0, x1 = 1."""
    boosted = Ensemble.from_arrays(
        [_stump(1, 0.0, 0.0), _stump(0, np.log(2), 0.0), _stump(0, np.log(5), np.log(3))],
        n_features=2,
        aggregation="margin",
        base_margin=[0.0, 0.0, 0.0],
        classes=(0, 1, 2),
        tree_class=[0, 1, 2],
    )
    assert vite.level_frequency(boosted)[0].tolist() == [pytest.approx(2 / 3), pytest.approx(1 / 3)]
    assert vite.level_frequency(boosted.for_class(0))[0].tolist() == [0.0, 1.0]
    assert vite.level_frequency(boosted.for_class(2))[0].tolist() == [1.0, 0.0]
    assert vite.class_probability(boosted, K_ROWS[[2]]).tolist() == [pytest.approx(5 / 8)]


@pytest.mark.parametrize("kind", ["random_forest", "hist"])
def test_vite_of_k_class_models_counts_every_split(kind):
    """Every tree of every class counts once per split: level frequencies of each level
    sum to 1, and the class views' split counts add up to the whole ensemble's."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    X, y = make_classification(300, 5, n_informative=4, n_redundant=0, n_classes=3, random_state=0)
    model = {
        "random_forest": RandomForestClassifier(n_estimators=8, max_depth=3, random_state=0),
        "hist": HistGradientBoostingClassifier(max_iter=8, max_depth=3, random_state=0),
    }[kind].fit(X, y)
    ensemble = read_ensemble(model).weighted_by_data(X)
    np.testing.assert_allclose(vite.level_frequency(ensemble, depth=3).sum(axis=0), 1.0)
    counts = vite.threshold_ranges(ensemble, depth=3)["count"].sum()
    n_splits = sum(int((t.is_split & (t.depth < 3)).sum()) for t in ensemble.trees)
    assert counts == n_splits
    if kind == "hist":
        views = [ensemble.for_class(c) for c in range(3)]
        assert sum(vite.threshold_ranges(v, depth=3)["count"].sum() for v in views) == n_splits
    probability = vite.class_probability(ensemble, X)
    assert probability.min() >= 1 / 3 and probability.max() <= 1
    np.testing.assert_allclose(probability, model.predict_proba(X).max(axis=1), atol=1e-12)
