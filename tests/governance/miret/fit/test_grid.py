"""Depth, alpha and proximity threshold chosen on held-out folds when not given: the rule
by hand, the record, and explicit values kept."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import StratifiedKFold
from sklearn.tree import DecisionTreeClassifier

from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.miret import MiretSurrogate
from miret_governance.governance.miret.fit import fitting, grid
from miret_governance.governance.miret.fit.estimator import LEGACY_PARAMS
from miret_governance.governance.miret.fit.selection import folds


def hits(*values):
    return np.array(values, dtype=bool)


def row(right_count, n=8):
    """``right_count`` of ``n`` held-out rows right (the first ones)."""
    return np.arange(n) < right_count


def test_the_alpha_grid_is_a_parameter_and_old_evidence_keeps_the_old_one(step, chosen):
    assert grid.settings(None, None, (0.2, 0.5, 0.8)) == (
        (0.2, 0.9), (0.5, 0.9), (0.8, 0.9), (0.5, 1.0),
    )  # fmt: skip
    assert grid.settings(None, 1.0, [0.3]) == ((0.3, 1.0),)  # a list, as JSON records it
    assert grid.settings(0.7, 1.0, [0.3]) == ((0.7, 1.0),)  # a given alpha wins
    for bad in ([], [-0.1], ["a"], [float("nan")]):
        with pytest.raises(InvalidInputError, match="alpha_grid must be one or more"):
            MiretSurrogate(step[1], alpha_grid=bad).fit(step[0])
    # a document written before alpha_grid existed restores with the grid it was fitted on
    document = chosen.to_dict()
    del document["params"]["alpha_grid"]
    assert MiretSurrogate.from_dict(document).alpha_grid == (0.2, 0.5, 0.8)
    assert MiretSurrogate.from_dict(chosen.to_dict()).alpha_grid == (0.2, 0.5, 0.8)
    assert MiretSurrogate().alpha_grid == grid.ALPHA_GRID == (0.2, 0.5)


def test_the_grid_is_the_given_value_or_the_default_range():
    class Ensemble:
        max_depth = 6

    assert grid.depths(3, Ensemble) == (3,)
    assert grid.depths(None, Ensemble) == (2, 3, 4)  # the default depth is at most 4
    Ensemble.max_depth = 1
    assert grid.depths(None, Ensemble) == (1,)
    assert grid.settings(0.3, 0.85) == ((0.3, 0.85),)
    assert grid.settings(0.3, None) == ((0.3, 0.9), (0.3, 1.0))
    assert grid.settings(None, 2.0) == ((0.2, 2.0), (0.5, 2.0))
    # every alpha at the paper's m, and the paper's alpha at m = 1
    tried = grid.settings(None, None)
    assert tried == ((0.2, 0.9), (0.5, 0.9), (0.5, 1.0))
    # the paper's setting is kept unless another is clearly better; in the folds every
    # setting of a grid gets a third of the heuristic's budget, a lone setting all of it
    assert grid.incumbent(tried) == (0.5, 0.9) and grid.budget_share(tried) == 1 / 3
    assert grid.incumbent(((0.3, 0.9), (0.3, 1.0))) == (0.3, 0.9)
    assert grid.budget_share(((0.3, 0.85),)) == 1.0


def test_a_deeper_tree_needs_more_than_one_standard_error():
    # depth 2: best 5 of 8 rows; depth 3: 7 of 8 (two more, no loss): mean gain 0.25,
    # standard error sqrt(1.5 / 7 / 8) = 0.164 -> clearly better
    features = {}
    right = {}
    for depth, count in ((2, 5), (3, 7)):
        for name in ("miret", "univariate", "cart"):
            key = (name, depth, (0.5, 0.9) if name == "miret" else None)
            right[key], features[key] = row(count if name == "cart" else 4), 2.0
    assert grid.choose(right, features, (2, 3), ((0.5, 0.9),)) == (3, (0.5, 0.9))
    # one row more only (6 of 8): gain 1/8 equals its standard error -> the smaller depth
    right[("cart", 3, None)] = row(6)
    assert grid.choose(right, features, (2, 3), ((0.5, 0.9),)) == (2, (0.5, 0.9))


def test_the_setting_stays_the_papers_unless_another_is_clearly_better():
    tried = grid.settings(None, None)
    a2, a5, m1 = tried
    features = {("univariate", 2, None): 1.0, ("cart", 2, None): 1.0}
    right = {("univariate", 2, None): row(3), ("cart", 2, None): row(3)}
    for setting, count, used in ((a2, 6, 3.0), (a5, 6, 2.0), (m1, 5, 2.0)):
        right[("miret", 2, setting)], features[("miret", 2, setting)] = row(count), used
    # equal held-out rows, alpha 0.2 not sparser than 0.5 -> the paper's (0.5, 0.9)
    assert grid.choose(right, features, (2,), tried) == (2, (0.5, 0.9))
    # as many rows right with fewer features -> 0.2
    features[("miret", 2, a2)] = 1.0
    assert grid.choose(right, features, (2,), tried) == (2, (0.2, 0.9))
    # m = 1 gets all 8 rows (two more, no loss: clearly better) and beats the sparser 0.2
    right[("miret", 2, m1)] = row(8)
    assert grid.choose(right, features, (2,), tried) == (2, (0.5, 1.0))
    # alpha 0.2 as good as m = 1 with fewer features: the best of the clearly better ones
    right[("miret", 2, a2)] = row(8)
    assert grid.choose(right, features, (2,), tried) == (2, (0.2, 0.9))
    # without folds: the largest depth and the paper's setting
    assert grid.choose({}, {}, (2, 3, 4), tried) == (4, (0.5, 0.9))


class Stump:
    """A fitted candidate: class 1 above ``threshold`` on feature 0."""

    def __init__(self, threshold):
        self.threshold = threshold

    def predict(self, X):
        return (X[:, 0] > self.threshold).astype(int)

    def used_features(self):
        return [0]


def test_cross_validation_scores_each_procedure_on_the_rows_it_did_not_see():
    X = np.linspace(0, 1, 6)[:, None]
    y = np.array([0, 0, 0, 1, 1, 1])
    splits = [
        (np.array([2, 3, 4, 5]), np.array([0, 1])),
        (np.array([0, 1]), np.array([2, 3, 4, 5])),
    ]

    def fit_candidates(train, depth, setting):
        # the MIRET stump's threshold moves with alpha; the others depend on neither value
        return {"miret": Stump(setting[0]), "univariate": Stump(0.5), "cart": Stump(0.1)}

    tried = ((0.3, 0.9), (0.7, 0.9))
    right, features = grid.cross_validated(X, y, splits, [(2, s) for s in tried], fit_candidates)
    assert set(right) == {
        ("miret", 2, (0.3, 0.9)),
        ("miret", 2, (0.7, 0.9)),
        ("univariate", 2, None),
        ("cart", 2, None),
    }
    # X = 0, .2, .4, .6, .8, 1: threshold 0.3 misses row 2, 0.7 row 3, 0.1 rows 1 and 2
    assert right[("miret", 2, (0.3, 0.9))].tolist() == [1, 1, 0, 1, 1, 1]
    assert right[("miret", 2, (0.7, 0.9))].tolist() == [1, 1, 1, 0, 1, 1]
    assert right[("cart", 2, None)].tolist() == [1, 0, 0, 1, 1, 1]
    assert features[("univariate", 2, None)] == 1.0
    record = grid.record(right, features, (2,), tried, (2, (0.3, 0.9)))
    assert record["depth"] == 2 and record["alpha"] == 0.3 and record["alphas"] == [0.3, 0.7]
    assert record["proximity_threshold"] == 0.9 and record["proximity_thresholds"] == [0.9]
    rows = {(r["candidate"], r["alpha"], r["proximity_threshold"]) for r in record["rows"]}
    assert {(r["candidate"], r["alpha"]): r["cv_fidelity"] for r in record["rows"]} == {
        ("miret", 0.3): 5 / 6,
        ("miret", 0.7): 5 / 6,
        ("univariate", None): 1.0,
        ("cart", None): 4 / 6,
    }
    assert ("miret", 0.7, 0.9) in rows and ("cart", None, None) in rows
    assert grid.record(right, features, (2,), tried[:1], (2, tried[0])) == {}  # all given


@pytest.fixture(scope="module")
def step():
    """Labels that one threshold on feature 0 explains: every depth is perfect."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(120, 3))
    labels = (X[:, 0] > 0.5).astype(int)
    forest = RandomForestClassifier(10, max_depth=3, random_state=0).fit(X, labels)
    return X, forest


@pytest.fixture(scope="module")
def chosen(step):
    X, forest = step
    return MiretSurrogate(forest, solver="highs", time_limit=30, **LEGACY_PARAMS).fit(X)


def test_an_easy_ensemble_gets_the_smallest_depth_and_the_papers_alpha(step, chosen):
    X, forest = step
    report = chosen.solve_report_
    assert chosen.depth_ == 2 and chosen.alpha_ == 0.5 and chosen.tree_.depth == 2
    assert chosen.proximity_threshold_ == 0.9
    # the legacy grid (LEGACY_PARAMS: how evidence recorded without alpha_grid fitted)
    assert report.grid["depths"] == [2, 3] and report.grid["alphas"] == [0.2, 0.5, 0.8]
    assert report.grid["proximity_thresholds"] == [0.9, 1.0]
    assert (report.grid["depth"], report.grid["alpha"]) == (2, 0.5)
    # 2 depths x (4 settings + univariate + CART), each with its held-out fidelity
    assert len(report.grid["rows"]) == 12
    assert report.cv_fidelity["univariate"] == 1.0
    # CART's held-out fidelity at each depth equals an independent cross-validation
    labels = forest.predict(X)
    unit = chosen.input_scaler_.transform(X)
    for depth in (2, 3):
        right = 0
        for train, test in StratifiedKFold(3, shuffle=True, random_state=0).split(unit, labels):
            cart = DecisionTreeClassifier(max_depth=depth, random_state=0)
            right += int(
                np.sum(cart.fit(unit[train], labels[train]).predict(unit[test]) == labels[test])
            )
        [cv] = [
            r["cv_fidelity"]
            for r in report.grid["rows"]
            if r["candidate"] == "cart" and r["depth"] == depth
        ]
        assert cv == pytest.approx(right / 120)
    assert len(folds(labels)) == 3


def test_thresholds_are_guessed_once_per_rows_whatever_the_depths_tried(step, monkeypatch):
    X, forest = step
    rows_guessed = []
    guess = fitting.guessed_thresholds

    def counted(unit, labels, seed):
        rows_guessed.append(len(unit))
        return guess(unit, labels, seed)

    monkeypatch.setattr(fitting, "guessed_thresholds", counted)
    both = MiretSurrogate(forest, solver="highs", time_limit=30, **LEGACY_PARAMS).fit(X)
    # depths 2 and 3 on 3 folds of 80 rows, then the chosen depth on all 120 rows
    assert sorted(rows_guessed) == [80, 80, 80, 120]
    alone = MiretSurrogate(forest, depth=3, solver="highs", time_limit=30, **LEGACY_PARAMS)
    alone.fit(X)

    def univariate_at_3(fitted):
        rows = fitted.solve_report_.grid["rows"]
        return [
            r["cv_fidelity"] for r in rows if r["candidate"] == "univariate" and r["depth"] == 3
        ]

    assert univariate_at_3(both) == univariate_at_3(alone)


def test_explicit_values_are_never_overridden(step):
    X, forest = step
    given = MiretSurrogate(
        forest, depth=3, alpha=0.8, proximity_threshold=0.85, solver="highs", time_limit=30
    ).fit(X)
    assert (given.depth_, given.alpha_, given.tree_.depth) == (3, 0.8, 3)
    assert given.proximity_threshold_ == 0.85
    assert given.solve_report_.grid == {}
    only_depth = MiretSurrogate(forest, depth=3, solver="highs", time_limit=30).fit(X)
    assert only_depth.depth_ == 3 and only_depth.solve_report_.grid["depths"] == [3]
    # the paper's mode chooses nothing: the default depth and the paper's alpha
    paper = MiretSurrogate(forest, solver="highs", cart_guarantee=False).fit(X)
    assert (paper.depth_, paper.alpha_, paper.proximity_threshold_) == (3, 0.5, 0.9)
    assert (
        paper.solve_report_.grid["rows"] == []
        and "no held-out folds" in paper.solve_report_.grid["rule"]
    )


def test_the_choice_survives_a_round_trip(chosen):
    restored = MiretSurrogate.from_dict(chosen.to_dict())
    assert (restored.depth_, restored.alpha_) == (chosen.depth_, chosen.alpha_)
    assert restored.proximity_threshold_ == chosen.proximity_threshold_
    assert restored.solve_report_.grid == chosen.solve_report_.grid
    assert restored.get_params()["alpha"] is None


@pytest.mark.parametrize(
    "given, fold_share",
    [({}, grid.GRID_SHARE), ({"alpha": 0.5, "proximity_threshold": 0.9}, 1.0)],
)
def test_fold_fits_share_the_heuristic_budget_equally(step, monkeypatch, given, fold_share):
    """Every setting's fold fits get the same share of the heuristic's work budget (a
    third with the default grid, all of it for one setting); the final fit gets all."""
    from miret_governance.governance.miret.fit import engine

    budgets, heuristic_tree = [], engine.heuristic_tree

    def recorded(problem, seeds, random_state, work_budget, time_cap):
        budgets.append(work_budget)
        return heuristic_tree(problem, seeds, random_state, work_budget, time_cap)

    monkeypatch.setattr(engine, "heuristic_tree", recorded)
    X, forest = step
    MiretSurrogate(forest, depth=2, solver="highs", time_limit=30, **given).fit(X)
    full = engine.heuristic_budget(30.0)
    settings = 3 if not given else 1
    assert len(budgets) == 3 * settings + 1  # 3 folds per setting, then the final fit
    assert budgets[:-1] == [pytest.approx(fold_share * full)] * (3 * settings)
    assert budgets[-1] == pytest.approx(full)
