"""Raw rows where the surrogate meets them (no MLflow): missing values routed by both
models or refused for a surrogate without a rule (format version 1), a pipeline's
original columns encoded with unseen categories named, and the missing-values rule in
original columns."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, OrdinalEncoder

from miret_governance.governance.ensembles.encoding import encoding_of
from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.measures import drift
from miret_governance.governance.measures.drift import DriftError, Explanation
from miret_governance.governance.miret.tree.conditions import split_table
from miret_governance.governance.miret.tree.display import display_from_counts, rules_text
from miret_governance.governance.miret.tree.missing import NoMissingRuleError, check_missing_rule
from miret_governance.governance.miret.tree.paths import RowsError, encoded_rows
from miret_governance.governance.miret.tree.tree import SurrogateTree

# ---------------------------------------------------------------------- missing values
STUMP = {  # class 1 when x0 > 0.5; a missing x0 goes right (the default): class 1
    "feature": [0, -1, -1],
    "threshold": [0.5, np.nan, np.nan],
    "left": [1, -1, -1],
    "right": [2, -1, -1],
    "value": [0.0, 0.0, 1.0],
}
ROWS = pd.DataFrame({"x0": [0.0, 1.0, np.nan, np.nan, 0.2], "x1": [0.0, 0.0, 0.0, 1.0, np.nan]})


def explained(name: str, missing_left) -> Explanation:
    """The stump and a depth-1 surrogate with the same cut; ``missing_left``: where the
    surrogate sends a missing x0 (None: no rule, as format version 1)."""
    tree = SurrogateTree([[1.0, 0.0]], [-0.5], 1, feature_names=["x0", "x1"], classes=(0, 1))
    if missing_left is not None:
        tree = tree.with_missing_left([missing_left])
    ensemble = Ensemble.from_arrays([STUMP], feature_names=["x0", "x1"], classes=(0, 1))
    levels = pd.DataFrame({0: [1.0, 0.0]}, index=pd.Index(["x0", "x1"], name="feature"))
    return Explanation(name, levels, ("x0",), "", tree, ensemble)


def test_cross_fidelity_routes_missing_values_by_each_models_rule():
    left, right = explained("v1", True), explained("v2", False)
    # both ensembles: 0 1 1 1 0 (a missing x0 goes right; x1 is unused)
    # v1's surrogate: 0 1 0 0 0 (missing x0 left); v2's: 0 1 1 1 0 (right, as the stump)
    cross = drift.cross_fidelity(left, right, ROWS)
    assert (cross.rows, cross.from_on_to, cross.to_on_from) == (5, 3, 5)
    assert cross.value == 0.6


def test_a_surrogate_without_a_rule_for_missing_values_is_refused_by_name():
    with pytest.raises(NoMissingRuleError) as refused:
        drift.cross_fidelity(explained("v1", None), explained("v2", False), ROWS)
    assert str(refused.value) == (
        "3 rows have missing values (NaN; rows 2, 3, 4), but the surrogate of v1 was "
        "written before missing values were supported (surrogate format version 1) and "
        "has no rule for them: impute them, or explain the ensemble again (govern explain "
        "--force) to learn one"
    )
    complete = ROWS.iloc[:2]  # without a missing value the old surrogate still scores
    assert drift.cross_fidelity(explained("v1", None), explained("v2", False), complete).rows == 2
    old = explained("v1", None).surrogate
    check_missing_rule(old, complete.to_numpy(), "old")  # nothing to refuse
    with pytest.raises(NoMissingRuleError, match=r"\(NaN; rows b, c\), but old was written"):
        check_missing_rule(old, ROWS.iloc[2:4].to_numpy(), "old", rows=["b", "c"])


# ---------------------------------------------------------------------- categories
TRAIN = pd.DataFrame(
    {
        "purpose": ["car", "education", "furniture", "car"],
        "housing": ["own", "rent", "free", "rent"],
        "income": [20000.0, 30000.0, 60000.0, 40000.0],
        "age": [25.0, 40.0, 33.0, 51.0],
    }
)


def transformer():
    """One-hot purpose, ordinal housing, scaled income, passed-through age: encoded as
    cat__purpose_{car,education,furniture}, ord__housing, num__income, raw__age."""
    return ColumnTransformer(
        [
            ("cat", OneHotEncoder(handle_unknown="ignore"), ["purpose"]),
            ("ord", OrdinalEncoder(), ["housing"]),
            ("num", MinMaxScaler(), ["income"]),
            ("raw", "passthrough", ["age"]),
        ]
    ).fit(TRAIN)


def test_raw_rows_are_encoded_with_missing_values_kept():
    prep = transformer()
    rows = TRAIN.iloc[[1, 2]].assign(income=[np.nan, 60000.0], label=[0, 1])
    encoded = encoded_rows(rows, encoding_of(prep), prep)
    assert encoded.columns.tolist() == [
        "cat__purpose_car",
        "cat__purpose_education",
        "cat__purpose_furniture",
        "ord__housing",
        "num__income",
        "raw__age",
    ]
    assert encoded.index.tolist() == [1, 2]
    np.testing.assert_array_equal(
        encoded.to_numpy(), [[0, 1, 0, 2, np.nan, 40.0], [0, 0, 1, 0, 1.0, 33.0]]
    )


def test_raw_rows_that_cannot_be_encoded_are_refused_by_name():
    prep = transformer()
    encoding = encoding_of(prep)
    unseen = TRAIN.assign(purpose=["car", "boat", "car", "car"], housing="castle")
    with pytest.raises(RowsError) as refused:
        encoded_rows(unseen, encoding, prep, "new.csv")
    assert str(refused.value) == (
        "new.csv: categories not seen in training: purpose: boat (seen in training: car, "
        "education, furniture); housing: castle (seen in training: free, own, rent); the "
        "model never learned from them (an encoder that ignores unknown categories scores "
        "them as none of the known ones), so they are refused: map them to a trained "
        "category or re-train with them"
    )
    with pytest.raises(RowsError, match=r"new.csv lacks the columns \['age'\]; give every"):
        encoded_rows(TRAIN.drop(columns="age"), encoding, prep, "new.csv")
    typed = TRAIN.astype({"income": object})
    typed.loc[3, "income"] = "high"
    with pytest.raises(RowsError, match=r"'income' holds text \(row 3: 'high'\)"):
        encoded_rows(typed, encoding, prep, "new.csv")
    with pytest.raises(DriftError, match="cannot be scored by v1: the rows: categories not seen"):
        drift._inputs(unseen, _encoded_ensemble(prep), "v1")


def _encoded_ensemble(prep) -> Ensemble:
    """A one-tree ensemble over the encoded columns behind ``prep`` (for the refusal)."""
    names = [str(n) for n in prep.get_feature_names_out()]
    stump = {**STUMP, "feature": [4, -1, -1]}
    ensemble = Ensemble.from_arrays([stump], feature_names=names, classes=(0, 1))
    return dataclasses.replace(ensemble, preprocessor=prep)


def test_the_missing_values_rule_names_original_columns():
    encoding = encoding_of(transformer())
    # node 0: income and [purpose = car]; node 1: [purpose = car] alone; node 2: age
    coef = [[0, 0, 0, 0, 1.0, 0], [1.0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1.0]]
    tree = SurrogateTree(
        np.array(coef) + np.array([[0.5, 0, 0, 0, 0, 0], [0] * 6, [0] * 6]),
        [-0.5, -0.5, -0.3],
        2,
        feature_names=encoding.names,
        classes=(0, 1),
    ).with_missing_left([True, True, False])
    splits = split_table(tree, encoding=encoding)
    assert [s["missing"] for s in splits] == [
        "missing income -> yes branch",  # a one-hot column is never missing
        None,
        "missing age -> no branch",
    ]
    # income in raw units: 1 / (60000 - 20000) per unit, intercept -0.5 - 20000 / 40000
    assert splits[0]["terms"] == [("[purpose = car]", 0.5), ("income", 1 / 40000)]
    assert splits[0]["intercept"] == -1.0
    assert splits[2]["terms"] == [("age", 1.0)]
    display = display_from_counts(tree, [[3, 0], [0, 2], [2, 0], [0, 3]], encoding=encoding)
    (line,) = [r for r in rules_text(display).splitlines() if r.startswith("missing values")]
    assert line == (
        "missing values: 0.5·[purpose = car] + 2.5e-05·income <= 1: missing income -> yes "
        "branch; age <= 0.3: missing age -> no branch"
    )
