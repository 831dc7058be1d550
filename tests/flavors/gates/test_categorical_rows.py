"""Raw rows of a pipeline that encodes categories, with missing values, in a real store:
``govern explain-row``, ``govern diff --data``, the drift gate and ``govern validate``
take the original columns (category strings, NaN), speak in them, refuse an unseen
category by name, and validate missing values against the share the explanation
recorded.

Two versions of ``credit-cat``, both trained on rows where ``income`` is missing on
every tenth row: version 1 one-hot encodes ``purpose`` and ``housing``, version 2
ordinal-encodes ``purpose``; each is explained once at depth 1 with HiGHS (the fits end
on work, not on time). Every expected answer is computed independently, by the
scikit-learn pipelines themselves and by the surrogates read back from the registry on
the pipelines' own encoding.
"""

import json

import mlflow
import numpy as np
import pandas as pd
import pytest
from categorical_data import CATEGORICAL, NUMERIC, explained_credit_cat, use_store_copy
from mlflow import MlflowClient
from signing_keys import trusting
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.gates.diff import diff_versions
from miret_governance.flavors.gates.gating import gate_model_version, validate_model_inputs
from miret_governance.flavors.miret import load_model
from miret_governance.governance.measures.drift import DriftError
from miret_governance.governance.trust.policy import parse_policy

pytest_plugins = ["mlflow_store"]
UNSEEN = (
    "categories not seen in training: purpose: boat (seen in training: business, car, "
    "education, furniture)"
)


@pytest.fixture(scope="module")
def explained(tmp_path_factory, migrated_store):
    """Both versions explained on 600 rows (tests/categorical_data.py)."""
    return explained_credit_cat(tmp_path_factory.mktemp("categorical-rows"), migrated_store)


@pytest.fixture
def case(explained, tmp_path, monkeypatch):
    """MLflow pointed at a copy of the store (aliases and gate runs stay in one test)."""
    use_store_copy(explained, tmp_path, monkeypatch)
    return explained


def invoke(*args):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def surrogate_answers(version: int, pipeline, rows: pd.DataFrame) -> np.ndarray:
    """The registered surrogate's answers on the pipeline's own encoding of ``rows``."""
    encoded = pipeline[0].transform(rows)
    encoded = encoded.toarray() if hasattr(encoded, "toarray") else encoded
    return load_model(f"models:/credit-cat-surrogate/{version}").predict(encoded)


def boats(frame: pd.DataFrame, path: str) -> str:
    """``frame``'s first 5 rows with an unseen purpose on row 2, written to ``path``."""
    rows = frame.head(5).copy()
    rows.loc[2, "purpose"] = "boat"
    rows.to_csv(path, index=False)
    return path


def test_explain_row_takes_raw_categories_and_missing_values(case):
    pipeline, rows = case["pipelines"][0], pd.read_csv("rows.csv")
    done = invoke(
        "explain-row", "--model-uri", "models:/credit-cat/1", "--data", "rows.csv", "--json"
    )
    assert done.exit_code == 0, done.output
    paths = json.loads(done.stdout)["rows"]
    features = rows[CATEGORICAL + NUMERIC]
    ensemble = pipeline.predict(features).astype(str)
    surrogate = surrogate_answers(1, pipeline, features).astype(str)
    assert [p["ensemble"] for p in paths] == ensemble.tolist()
    assert [p["surrogate"] for p in paths] == surrogate.tolist()
    assert [p["agrees"] for p in paths] == (ensemble == surrogate).tolist()
    steps = [step for p in paths for step in p["steps"]]
    assert steps and all("__" not in s["condition"] for s in steps)  # original columns
    assert all("__" not in t[0] for s in steps for t in s["terms"])  # [purpose = car], age
    shown = []
    for path, (_, row) in zip(paths, rows.iterrows(), strict=True):
        for step in path["steps"]:  # a missing income leaves an income split undefined
            uses_income = any(t[0] == "income" for t in step["terms"])
            assert (step["value"] is None) == (uses_income and np.isnan(row["income"]))
            column = step["condition"].split(" ")[0]  # a category split shows the row's own
            assert step["category"] == (row[column] if column in CATEGORICAL else None)
            if step["category"] is not None:  # e.g. purpose not in {car}? yes (row: education)
                shown.append(
                    f"node {step['node']}: {step['condition']}? {step['answer']} (row: {row[column]})"
                )
    assert shown  # the tree splits on purpose
    text = invoke("explain-row", "--model-uri", "models:/credit-cat/1", "--data", "rows.csv")
    assert text.exit_code == 0, text.output
    assert "cat__" not in text.output and "num__" not in text.output
    assert all(line in text.output for line in shown)
    undefined = sum(s["value"] is None for s in steps)
    assert text.output.count("(row: missing, by the rule for missing values)") == undefined


def test_the_missing_values_rule_names_original_columns(case):
    for version in (1, 2):
        rules = case["results"][version].rules.splitlines()
        (line,) = [r for r in rules if r.startswith("missing values: ")]
        named = [part.split(": missing ")[1].split(" -> ")[0] for part in line.split("; ")]
        assert named and set(named) <= set(NUMERIC) and "__" not in line


def test_explain_row_refuses_an_unseen_category_by_name(case, tmp_path):
    for version in (1, 2):  # one-hot and ordinal encodings of purpose
        refused = invoke(
            "explain-row",
            "--model-uri",
            f"models:/credit-cat/{version}",
            "--data",
            boats(case["frame"], str(tmp_path / "boats.csv")),
        )
        assert refused.exit_code == 2 and refused.stdout == ""
        assert f"boats.csv: {UNSEEN}" in " ".join(refused.output.split())


def test_diff_on_raw_rows_scores_both_encodings_and_names_original_columns(case, tmp_path):
    (one_hot, ordinal), rows = case["pipelines"], pd.read_csv("rows.csv")
    features = rows[CATEGORICAL + NUMERIC]
    outcome = diff_versions("models:/credit-cat/1", "models:/credit-cat/2", data="rows.csv")
    cross = outcome.drift.cross_fidelity
    from_on_to = int(np.sum(surrogate_answers(1, one_hot, features) == ordinal.predict(features)))
    to_on_from = int(np.sum(surrogate_answers(2, ordinal, features) == one_hot.predict(features)))
    assert (cross.rows, cross.from_on_to, cross.to_on_from) == (40, from_on_to, to_on_from)
    rules = outcome.to_json()["rules"]
    assert rules == {  # as govern explain wrote them: original columns and categories
        "from": case["results"][1].rules,
        "to": case["results"][2].rules,
    }
    assert "__" not in rules["from"] + rules["to"]
    bare = diff_versions("models:/credit-cat/1", "models:/credit-cat/2").to_json()
    assert bare["rules"] == rules  # no ensemble loaded: the encoding the evidence records
    changed = {change["feature"] for change in bare["changes"]}
    assert changed <= set(CATEGORICAL + NUMERIC) and "purpose" in changed
    assert set(bare["features"]["shared"]) <= set(CATEGORICAL + NUMERIC)
    with pytest.raises(DriftError, match="cannot be scored by models:/credit-cat/1") as info:
        diff_versions(
            "models:/credit-cat/1",
            "models:/credit-cat/2",
            data=boats(case["frame"], str(tmp_path / "boats.csv")),
        )
    assert UNSEEN in str(info.value)
    refused = invoke(
        "diff",
        "--from",
        "models:/credit-cat/1",
        "--to",
        "models:/credit-cat/2",
        "--data",
        str(tmp_path / "boats.csv"),
    )
    assert refused.exit_code == 2 and UNSEEN in " ".join(refused.output.split())


def test_drift_gate_measures_cross_fidelity_on_rows_with_missing_values(case):
    MlflowClient().set_registered_model_alias("credit-cat", "champion", "1")
    expected = diff_versions("models:/credit-cat/1", "models:/credit-cat/2", data="rows.csv")
    cross = expected.drift.cross_fidelity
    policy = parse_policy(trusting({"gates": {"min_cross_fidelity": cross.value}}))
    outcome = gate_model_version("models:/credit-cat/2", policy, data="rows.csv")
    (gate,) = [r for r in outcome.evaluation.results if r.name == "min_cross_fidelity"]
    assert (gate.passed, gate.value) == (True, cross.value)
    assert outcome.drift["cross_fidelity"] == cross.to_json()
    assert outcome.drift["data"]["rows"] == 40


def test_validate_compares_missing_values_with_the_recorded_training_share(case, tmp_path):
    folder = mlflow.artifacts.download_artifacts("models:/credit-cat-surrogate/1")
    with open(f"{folder}/evidence.json", encoding="utf-8") as handle:
        recorded = json.load(handle)["provenance"]["missing_share"]
    assert recorded == {"purpose": 0.0, "housing": 0.0, "income": 0.1, "age": 0.0, "duration": 0.0}
    complete = case["frame"].dropna().head(100).reset_index(drop=True)

    def validate(income_missing: int, age_missing: int = 0):
        rows = complete.copy()
        rows.loc[: income_missing - 1, "income"] = np.nan
        rows.loc[: age_missing - 1, "age"] = np.nan
        rows.to_csv(tmp_path / "new.csv", index=False)
        return validate_model_inputs("models:/credit-cat/1", tmp_path / "new.csv")

    assert validate(12).success  # 12% of rows: within 10% + 5 points
    report = validate(16, age_missing=1)
    assert not report.success
    messages = {f.column: f.message for f in report.failures}
    assert set(messages) == {"income", "age"}
    assert messages["income"].startswith(
        "column 'income': 16 rows (16%) with missing values (null/NaN), more than the training "
        "data's 10% plus the tolerance of 5 points (at most 15%)"
    )
    assert messages["age"].startswith(
        "column 'age': 1 row (1%) with missing values (null/NaN), but the training data had "
        "none in this column"
    )
