"""The returned tree is chosen on held-out rows: the rule, and the folds checked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import StratifiedKFold
from sklearn.tree import DecisionTreeClassifier

from miret_governance.governance.miret import MiretSurrogate
from miret_governance.governance.miret.fit import selection
from miret_governance.governance.miret.fit.estimator import LEGACY_PARAMS
from miret_governance.governance.miret.fit.selection import (
    can_win,
    choose,
    clearly_better,
    fidelities,
    folds,
    note,
    standard_error,
)


def hits(*values):
    return np.array(values, dtype=bool)


def test_clearly_better_needs_more_than_one_standard_error():
    # 8 paired rows: the challenger wins 3 and loses none -> mean gain 0.375, SE 0.183
    right = {
        "a": hits(1, 1, 1, 1, 1, 0, 0, 1),
        "b": hits(0, 0, 0, 1, 1, 0, 0, 1),
    }
    gain = right["a"].astype(float) - right["b"]
    assert gain.mean() == 0.375
    assert standard_error(gain) == pytest.approx(np.sqrt(1.875 / 7 / 8))
    assert clearly_better(right, {"a": 3, "b": 3}, "a", "b")
    # and loses one: mean gain 0.25, exactly its standard error (3.5 / 7 / 8) ** 0.5
    right["b"][5] = True
    assert standard_error(right["a"].astype(float) - right["b"]) == pytest.approx(0.25)
    assert not clearly_better(right, {"a": 3, "b": 3}, "a", "b")
    # a single win is never more than its standard error (both 1 / n)
    right["b"] = right["a"].copy()
    right["b"][0] = False
    assert not clearly_better(right, {"a": 3, "b": 3}, "a", "b")
    # as many rows right with fewer features is better; with as many features, not
    right["b"] = right["a"].copy()
    assert clearly_better(right, {"a": 2, "b": 3}, "a", "b")
    assert not clearly_better(right, {"a": 3, "b": 3}, "a", "b")


def test_choose_keeps_the_univariate_tree_unless_beaten_clearly():
    same = hits(1, 1, 1, 1, 0, 0, 1, 1, 1, 1)
    features = {"miret": 2, "univariate": 2, "cart": 2}
    right = {"miret": same.copy(), "univariate": same.copy(), "cart": same.copy()}
    on_sample = {"miret": 0.8, "univariate": 0.8, "cart": 0.8}
    assert choose(right, features, on_sample) == "univariate"
    assert choose({}, features, on_sample) == "miret"  # no folds: the MIRET tree
    # MIRET gets every row right: clearly better, and its refit is consistent
    right["miret"] = np.ones(10, dtype=bool)
    assert choose(right, features, on_sample | {"miret": 1.0}) == "miret"
    # ... unless its refit fits the sample worse than the folds promised
    assert choose(right, features, on_sample | {"miret": 0.7}) == "univariate"
    # CART a single row ahead of the univariate tree is not clearly better
    right = {"miret": same.copy(), "univariate": same.copy(), "cart": same.copy()}
    right["cart"][4] = True
    assert choose(right, features, on_sample) == "univariate"
    assert "optimal univariate tree was returned" in note(
        "univariate", {"univariate": 0.8, "miret": 0.9}
    )
    assert note("miret", {}) == ""


def test_the_milp_phase_runs_only_when_the_miret_tree_can_still_be_returned():
    same = hits(1, 1, 1, 1, 0, 0, 1, 1, 1, 1)
    right = {"miret": same.copy(), "univariate": same.copy(), "cart": same.copy()}
    assert can_win(right) and can_win({})  # as many rows right: fewer features may win
    right["miret"][0] = False
    assert not can_win(right)  # one row fewer than its seed, the univariate tree
    # CART two rows ahead (mean gain 0.2 > its standard error 0.133) becomes the seed
    right = {"miret": same.copy(), "univariate": same.copy(), "cart": same.copy()}
    right["cart"][4:6] = True
    assert not can_win(right)
    right["miret"] = right["cart"].copy()
    assert can_win(right)
    # whenever it cannot win, choose never returns it (whatever features and refit)
    rng = np.random.default_rng(0)
    for _ in range(300):
        right = {name: rng.random(12) < 0.7 for name in ("miret", "univariate", "cart")}
        features = dict(zip(right, rng.integers(1, 4, size=3), strict=True))
        if not can_win(right):
            assert choose(right, features, {"miret": 1.0}) != "miret"


def test_folds_are_stratified_and_shrink_for_a_rare_class_or_few_rows():
    y = np.array(["a"] * 27 + ["b"] * 3)
    splits = folds(y, random_state=0)
    assert len(splits) == 3
    for _, test in splits:
        assert sorted(y[test]) == ["a"] * 9 + ["b"]
    assert len(folds(np.array(["a"] * 28 + ["b"] * 2))) == 2
    assert folds(np.array(["a"] * 29 + ["b"])) == []
    assert len(folds(np.array(["a", "b"] * 10))) == 2  # 20 rows: two folds of 10
    assert folds(np.array(["a", "b"] * 9)) == []


def test_fidelities_count_every_row_in_chunks(monkeypatch):
    from miret_governance.governance.miret.fit import selection

    monkeypatch.setattr(selection, "CHUNK_ROWS", 3)
    X = np.linspace(0, 1, 8)[:, None]
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 0])
    above = fidelities([lambda unit: (unit[:, 0] > 0.5).astype(int)], labels, X, None)
    assert above.tolist() == [7 / 8]


@pytest.fixture(scope="module")
def fitted():
    X, y = make_classification(300, 6, n_informative=4, random_state=3)
    forest = RandomForestClassifier(20, max_depth=3, random_state=0).fit(X, y)
    surrogate = MiretSurrogate(forest, depth=2, solver="highs", time_limit=30, **LEGACY_PARAMS)
    return X, forest, surrogate.fit(X)


def test_cart_held_out_fidelity_matches_an_independent_cross_validation(fitted):
    X, forest, surrogate = fitted
    report = surrogate.solve_report_
    labels = forest.predict(X)
    unit = surrogate.input_scaler_.transform(X)
    right = 0
    split = StratifiedKFold(3, shuffle=True, random_state=0)
    for train, test in split.split(unit, labels):
        cart = DecisionTreeClassifier(max_depth=2, random_state=0).fit(unit[train], labels[train])
        right += int(np.sum(cart.predict(unit[test]) == labels[test]))
    assert report.cv_fidelity["cart"] == pytest.approx(right / 300)
    assert report.baseline_cart_cv_fidelity == report.cv_fidelity["cart"]
    # the returned tree is the chosen candidate and its train fidelity is measured
    assert report.chosen in report.cv_fidelity
    assert report.train_fidelity == pytest.approx(np.mean(surrogate.predict(X) == labels))


def test_paper_mode_returns_the_objectives_tree_without_folds(fitted):
    X, forest, _ = fitted
    paper = MiretSurrogate(forest, depth=2, solver="highs", cart_guarantee=False).fit(X)
    report = paper.solve_report_
    assert report.cv_fidelity == {} and report.chosen == "miret" and report.fallback == ""


def test_a_report_written_before_the_choice_and_node_milps_still_loads(fitted):
    from miret_governance.governance.miret.fit.solve_report import SolveReport

    older = fitted[2].solve_report_.to_dict()
    for added in ("cv_fidelity", "chosen", "node_statuses", "node_objective_before"):
        del older[added]
    report = SolveReport.from_dict(older)
    assert report.cv_fidelity == {} and report.chosen == "miret" and report.node_statuses == {}


def test_a_miret_tree_behind_on_the_folds_skips_the_milp_phase(fitted, monkeypatch):
    from miret_governance.governance.report.wording import describe_stop

    X, forest, _ = fitted
    skipped = MiretSurrogate(
        forest, depth=2, proximity_threshold=0.9, solver="highs", time_limit=30, **LEGACY_PARAMS
    ).fit(X)
    report = skipped.solve_report_
    assert report.cv_fidelity["miret"] < report.cv_fidelity[report.chosen]
    assert report.stop_reason == "behind_on_folds" and report.node_statuses == {}
    assert report.status == "not_run" and report.node_time == pytest.approx(0, abs=1e-3)
    assert "MILP phase skipped" in describe_stop(report.to_dict())
    # run anyway, the MILP phase cannot change the returned tree
    monkeypatch.setattr(selection, "can_win", lambda right: True)
    ran = MiretSurrogate(
        forest, depth=2, proximity_threshold=0.9, solver="highs", time_limit=30, **LEGACY_PARAMS
    ).fit(X)
    assert ran.solve_report_.stop_reason == "node_milps" and ran.solve_report_.node_statuses
    assert ran.solve_report_.chosen == report.chosen
    assert ran.tree_digest() == skipped.tree_digest()


def test_without_fallbacks_the_folds_choose_only_the_setting(fitted, monkeypatch):
    """fallbacks=False, univariate_seed=False, milp_share=0: the MIRET procedure alone is
    scored on the folds (the same held-out rows as among the fallbacks), no threshold is
    guessed and no MILP solved."""
    from miret_governance.governance.miret.fit import fitting
    from miret_governance.governance.report.wording import solver_outcome

    X, forest, legacy = fitted
    guessed = []
    real = fitting.guessed_thresholds
    monkeypatch.setattr(fitting, "guessed_thresholds", lambda *a: guessed.append(a) or real(*a))
    lean = MiretSurrogate(
        forest,
        depth=2,
        solver="highs",
        time_limit=30,
        fallbacks=False,
        univariate_seed=False,
        milp_share=0.0,
    ).fit(X)
    report = lean.solve_report_
    assert guessed == [] and legacy.solve_report_.chosen == "univariate"
    assert report.cv_fidelity == {"miret": legacy.solve_report_.cv_fidelity["miret"]}
    assert (report.chosen, report.fallback, report.candidate_features) == (
        "miret",
        "",
        {"miret": 4},
    )
    assert (report.stop_reason, report.milp_work, report.node_statuses) == ("no_milp_budget", 0, {})
    assert solver_outcome(report.to_dict())["proven"] == (
        "No MILP was solved: the fit gave its MILP phase no work (milp_share 0)."
    )


def test_the_report_says_what_the_milp_budget_left_unsolved_and_what_it_cost():
    from miret_governance.governance.report.wording import solver_outcome

    statuses = {"0": "optimal", "1": "no_budget", "2": "nothing_to_decide"}
    solve = {"stop_reason": "node_milps", "node_statuses": statuses}
    assert solver_outcome({**solve, "milp_work": 0.15, "fit_work": 1.0})["proven"] == (
        "1 of 2 splits are proven the best at their node given the rest of the tree (each "
        "node solved as its own MILP; 1 was left when the work budget was spent and kept "
        "the split the search found); the whole tree was not solved as one MILP. The MILPs "
        "counted 15.0% of the work the rest of the fit counted."
    )
    whole = {"stop_reason": "stalled", "global_milp": True, "whole_milp_start": 8.5}
    assert solver_outcome({**whole, "solver_objective": 7.25, "gap": 0.5})["proven"].endswith(
        "The whole MILP improved the heuristic's objective from 8.5 to 7.25."
    )
