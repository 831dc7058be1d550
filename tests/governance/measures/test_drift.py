"""What changed between two explanations (governance.drift), on hand-checkable inputs."""

import hashlib

import numpy as np
import pandas as pd
import pytest

from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.measures import drift
from miret_governance.governance.measures.drift import DriftError, Explanation
from miret_governance.governance.miret.tree.tree import SurrogateTree
from miret_governance.governance.trust.gates import evaluate
from miret_governance.governance.trust.policy import DRIFT_GATES, PolicyError, parse_policy


def frame(columns: dict) -> pd.DataFrame:
    """Level frequencies: feature -> shares at levels 0, 1, ..."""
    return pd.DataFrame(columns).T.rename_axis("feature")


# champion: x at the root; x and y share level 1
FROM = frame({"x": [1.0, 0.5], "y": [0.0, 0.5]})
# candidate: x and z share the root; z alone at level 1
TO = frame({"x": [0.5, 0.0], "z": [0.5, 1.0]})


# ---------------------------------------------------------------------- VITE frequencies
def test_distance_is_the_mean_total_variation_over_levels():
    # level 0: (|1 - .5| + |0 - 0| + |0 - .5|) / 2 = 0.5; level 1: (.5 + .5 + 1) / 2 = 1
    assert drift.explanation_distance(FROM, TO) == 0.75
    assert drift.explanation_distance(FROM, FROM) == 0.0
    # only one side splits at level 2: that level counts 1, so (0.5 + 0 + 1) / 3
    deeper = frame({"x": [0.5, 0.5, 1.0], "y": [0.5, 0.5, 0.0]})
    assert drift.explanation_distance(FROM, deeper) == 0.5
    # a level where neither splits is left out: (1 + 0) / 1
    assert drift.explanation_distance(frame({"x": [1.0, 0.0]}), frame({"y": [1.0, 0.0]})) == 1.0


def test_changes_per_feature_and_level_largest_first():
    changes = drift.frequency_changes(FROM, TO)
    assert changes.to_dict(orient="list") == {
        "feature": ["z", "x", "x", "y", "z"],
        "level": [1, 0, 1, 1, 0],
        "from": [0.0, 1.0, 0.5, 0.5, 0.0],
        "to": [1.0, 0.5, 0.0, 0.0, 0.5],
        "change": [1.0, -0.5, -0.5, -0.5, 0.5],
    }  # (y, 0) is 0 on both sides: left out


def test_frequencies_that_are_not_split_shares_are_refused():
    nodes = frame({"x": [1.0, 0.25], "y": [0.0, 0.25]})  # level 1 sums to 0.5
    with pytest.raises(DriftError, match=r"levels \[1\] do not\): give .*denominator='splits'"):
        drift.explanation_distance(FROM, nodes)


# ---------------------------------------------------------------------- features, rules
def test_feature_overlap_is_jaccard():
    assert drift.feature_overlap(("a", "b", "c"), ("b", "c", "d")) == (
        ("b", "c"),
        ("a",),
        ("d",),
        0.5,
    )
    assert drift.feature_overlap((), ()) == ((), (), (), 1.0)


def test_rules_side_by_side():
    assert drift.side_by_side("if a then 0\nelse 1", "always 1") == [
        ("if a then 0", "always 1"),
        ("else 1", ""),
    ]


# ---------------------------------------------------------------------- cross-fidelity
def stump(feature: int, classes=(0, 1)) -> Ensemble:
    """One tree: class 1 when x_feature > 0.5."""
    tree = {
        "feature": [feature, -1, -1],
        "threshold": [0.5, np.nan, np.nan],
        "left": [1, -1, -1],
        "right": [2, -1, -1],
        "value": [0.0, 0.0, 1.0],
    }
    return Ensemble.from_arrays([tree], feature_names=["x0", "x1"], classes=classes)


def explanation(name, feature, cut, classes=(0, 1)) -> Explanation:
    """A stump ensemble on x_feature and a depth-1 surrogate: class 1 when x_feature > cut."""
    coef = [[1.0, 0.0]] if feature == 0 else [[0.0, 1.0]]
    tree = SurrogateTree(coef, [-cut], 1, feature_names=["x0", "x1"], classes=classes)
    levels = frame({"x0": [1.0 - feature], "x1": [float(feature)]})
    features = (f"x{feature}",)
    return Explanation(
        name, levels, features, f"if x{feature} <= {cut} then 0", tree, stump(feature, classes)
    )


ROWS = pd.DataFrame({"x0": [0, 0, 1, 1, 0.2], "x1": [0, 1, 0, 1, 0.3], "label": 0})


def test_cross_fidelity_scores_each_surrogate_on_the_other_ensemble():
    champion, candidate = explanation("v1", 0, 0.5), explanation("v2", 1, 0.25)
    # ensembles: v1 0 0 1 1 0, v2 0 1 0 1 0; surrogates: v1 0 0 1 1 0, v2 0 1 0 1 1
    cross = drift.cross_fidelity(champion, candidate, ROWS)
    assert (cross.rows, cross.from_on_to, cross.to_on_from) == (5, 3, 2)
    assert cross.value == 0.4
    assert cross.to_json() == {
        "rows": 5,
        "from_surrogate_on_to_ensemble": 0.6,
        "to_surrogate_on_from_ensemble": 0.4,
        "value": 0.4,
    }
    result = drift.compare(champion, candidate, ROWS)
    assert result.distance == 1.0 and result.overlap == 0.0
    assert (result.shared, result.only_from, result.only_to) == ((), ("x0",), ("x1",))
    assert result.to_json()["rules"] == {
        "from": "if x0 <= 0.5 then 0",
        "to": "if x1 <= 0.25 then 0",
    }
    assert drift.compare(champion, candidate).cross_fidelity is None


def test_cross_fidelity_refusals_name_the_problem():
    champion = explanation("v1", 0, 0.5)
    with pytest.raises(DriftError, match="v1 predicts \\[0, 1\\] but v2 predicts \\['b', 'm'\\]"):
        drift.cross_fidelity(champion, explanation("v2", 1, 0.5, classes=("b", "m")), ROWS)
    with pytest.raises(DriftError, match="cannot be scored by v1: X must be .* 2 columns"):
        drift.cross_fidelity(champion, champion, ROWS[["x0"]])
    with pytest.raises(DriftError, match="at least one row"):
        drift.cross_fidelity(champion, champion, ROWS.iloc[:0])
    text = ROWS.astype({"x1": object})
    text.iloc[1, text.columns.get_loc("x1")] = "abc"  # QA: "could not convert string to float"
    with pytest.raises(DriftError, match="by v1: .*'x1' holds text \\(row 1: 'abc'\\)"):
        drift.cross_fidelity(champion, champion, text)


def three_grades(name: str, low: float, high: float) -> Explanation:
    """Grade A when x0 <= low, B up to high, C above: one tree with class fractions, and
    a depth-2 surrogate with the same cuts (its leaves A, A, B, C left to right)."""
    tree = {
        "feature": [0, -1, 0, -1, -1],
        "threshold": [low, np.nan, high, np.nan, np.nan],
        "left": [1, -1, 3, -1, -1],
        "right": [2, -1, 4, -1, -1],
        "value": np.array([[0.4, 0.3, 0.3], [1, 0, 0], [0, 0.5, 0.5], [0, 1, 0], [0, 0, 1.0]]),
    }
    ensemble = Ensemble.from_arrays([tree], feature_names=["x0", "x1"], classes=("A", "B", "C"))
    surrogate = SurrogateTree(
        [[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]],
        [-low, 0.0, -high],
        2,
        feature_names=["x0", "x1"],
        classes=("A", "B", "C"),
        leaf_class=[0, 0, 1, 2],
    )
    return Explanation(name, frame({"x0": [1.0], "x1": [0.0]}), ("x0",), "", surrogate, ensemble)


def test_cross_fidelity_compares_three_class_labels():
    champion, candidate = three_grades("v1", 0.3, 0.7), three_grades("v2", 0.3, 0.5)
    rows = pd.DataFrame({"x0": [0.1, 0.4, 0.6, 0.8, 0.2, 0.55], "x1": 0.0})
    # v1: A B B C A B; v2: A B C C A C (both surrogates reproduce their own ensemble)
    cross = drift.cross_fidelity(champion, candidate, rows)
    assert (cross.rows, cross.from_on_to, cross.to_on_from) == (6, 4, 4)
    assert cross.value == 4 / 6


# ---------------------------------------------------------------------- policy gates
def test_drift_gates_in_a_policy():
    policy = parse_policy(
        {
            "gates": {"max_explanation_drift": 0.75, "min_cross_fidelity": 0.5},
            "drift_against": "prod",
        }
    )
    assert policy.gates["max_explanation_drift"] == 0.75 and policy.drift_against == "prod"
    canonical = (
        b'{"approvals":{},"drift_against":"prod","gates":{"max_explanation_drift":0.75,'
        b'"max_features":5,"min_cross_fidelity":0.5,"min_fidelity":0.9,'
        b'"require_validation_pass":true},"keys":{}}'
    )
    assert policy.digest == hashlib.sha256(canonical).hexdigest()
    assert (
        parse_policy({"gates": {}, "drift_against": "prod"}).digest
        == parse_policy({"gates": {}}).digest
    )
    # the evidence's gates leave the drift gates to governance.drift
    evaluation = evaluate(policy, {"metrics": {"test_fidelity": 0.95, "n_features_used": 2}})
    assert [r.name for r in evaluation.results] == [
        "max_features",
        "min_fidelity",
        "require_validation_pass",
    ]
    with pytest.raises(
        PolicyError, match="max_explanation_drift = 1.5 is not valid; expected VITE"
    ):
        parse_policy({"gates": {"max_explanation_drift": 1.5}})
    with pytest.raises(PolicyError, match="drift_against = 'a b' is not valid; name the alias"):
        parse_policy({"gates": {}, "drift_against": "a b"})


def test_drift_gate_verdicts():
    gates = {"max_explanation_drift": 0.75, "min_cross_fidelity": 0.4, "min_fidelity": 0.9}
    champion, candidate = explanation("v1", 0, 0.5), explanation("v2", 1, 0.25)
    at = drift.drift_gates(gates, drift.compare(champion, candidate, ROWS), "champion")
    assert [(r.name, r.metric, r.value, r.passed, r.comparison) for r in at] == [
        ("max_explanation_drift", "explanation_drift", 1.0, False, "<="),
        ("min_cross_fidelity", "cross_fidelity", 0.4, True, ">="),  # exactly at: passes
    ]
    assert at[0].reason == "explanation_drift = 1 against v1 (@champion) does not meet <= 0.75"
    without_rows = drift.drift_gates(gates, drift.compare(champion, candidate), "champion")
    assert not without_rows[1].passed and without_rows[1].value is None
    assert without_rows[1].reason == "cross-fidelity against v1 (@champion) needs --data"
    alone = drift.drift_gates(gates, None, "champion")
    assert [(r.passed, r.value) for r in alone] == [(True, None), (True, None)]
    assert alone[0].reason.startswith("no champion yet")
    assert set(DRIFT_GATES) == {"max_explanation_drift", "min_cross_fidelity"}
