"""``govern explain-row`` and the report's disagreement rows, in a real MLflow store."""

import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from applicant_panel import panel
from mlflow_store import register_rf
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.miret import load_model
from miret_governance.governance.miret.tree.conditions import format_number

pytest_plugins = ["mlflow_store"]
FEATURES = ["mean radius", "mean texture", "mean perimeter", "worst area"]


@pytest.fixture(scope="module")
def explained(tmp_path_factory, breast_cancer):
    """A forest explained once at depth 1 with a separate test file (the first 100 rows
    after row 150 inside the training rows' range), so the report's holdout is that file;
    the depth-1 tree disagrees with the forest on some of them."""
    from miret_governance.flavors.explain.explain import explain_model_version

    root = tmp_path_factory.mktemp("explain-row")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    X, y = breast_cancer
    frame = X[FEATURES].assign(label=y.to_numpy())
    with pytest.MonkeyPatch.context() as mp:
        for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
            mp.setenv(name, uri)
        mp.chdir(root)
        train, rest = frame.iloc[:150], frame.iloc[150:]
        inside = ((rest[FEATURES] >= train[FEATURES].min()) & (rest <= train.max())).all(axis=1)
        train.to_csv("data.csv", index=False)
        rest[inside].iloc[:100].to_csv("test.csv", index=False)
        model = register_rf(frame.iloc[:150], FEATURES, "credit-rf", n_estimators=10)
        result = explain_model_version(
            "models:/credit-rf/1",
            "data.csv",
            target="label",
            test_data="test.csv",
            depth=1,
            time_limit=60,
            min_test_rows=1,
            class_names=("malignant", "benign"),
        )
        local = Path(mlflow.artifacts.download_artifacts(result.surrogate_uri, dst_path="model"))
    return {"uri": uri, "root": root, "model": model, "result": result, "local": local}


@pytest.fixture
def case(explained, monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
        monkeypatch.setenv(name, explained["uri"])
    monkeypatch.chdir(explained["root"])
    return explained


def invoke(*args):
    return CliRunner().invoke(app, ["explain-row", *args], env={"COLUMNS": "200"})


def test_explain_row_paths_and_answers_match_both_models(case):
    done = invoke("--model-uri", "models:/credit-rf/1", "--data", "test.csv", "--json")
    assert done.exit_code == 0, done.output
    document = json.loads(done.stdout)
    assert (document["command"], document["schema_version"]) == ("explain-row", 1)
    assert document["surrogate_uri"] == "models:/credit-rf-surrogate/1"
    assert document["ensemble_uri"] == "models:/credit-rf/1"
    rows = document["rows"]
    test = pd.read_csv("test.csv")
    assert [r["row"] for r in rows] == list(range(100)) and document["n_rows"] == 100
    names = np.array(["malignant", "benign"])
    ensemble = names[case["model"].predict(test[FEATURES])]
    surrogate = names[load_model(case["result"].surrogate_uri).predict(test[FEATURES])]
    assert [r["ensemble"] for r in rows] == ensemble.tolist()
    assert [r["surrogate"] for r in rows] == surrogate.tolist()
    assert [r["agrees"] for r in rows] == (ensemble == surrogate).tolist()
    disagree = int(np.sum(ensemble != surrogate))
    assert document["n_disagree"] == disagree > 0
    fidelity = case["result"].metrics["test_fidelity"]
    assert disagree == round(100 * (1 - fidelity))
    for row in rows:  # depth 1: one split, a feature's raw value or a weighted sum
        (step,) = row["steps"]
        assert step["node"] == 0 and row["surrogate"] == names[row["leaf"] - 1]
        assert (step["holds"] == step["condition"]) == (step["answer"] == "yes")
    for row, (_, x) in zip(rows, test.iterrows(), strict=True):  # value: the left side
        (step,) = row["steps"]
        terms = step["terms"]
        left = x[terms[0][0]] if len(terms) == 1 else sum(w * x[name] for name, w in terms)
        assert step["value"] == pytest.approx(left, rel=1e-12)

    text = invoke("--model-uri", "models:/credit-rf-surrogate/1", "--data", "test.csv")
    assert text.exit_code == 0, text.output
    first, step = rows[0], rows[0]["steps"][0]
    verdict = "agree" if first["agrees"] else "DISAGREE"
    assert (
        f"row 0: surrogate {first['surrogate']}, ensemble {first['ensemble']}: {verdict}\n"
        f"  node 0: {step['condition']}? {step['answer']} (row: "
    ) in text.output
    assert f"{disagree} of 100 rows: surrogate and ensemble disagree" in text.output


def test_report_card_and_csv_list_every_disagreement(case):
    done = invoke("--model-uri", "models:/credit-rf/1", "--data", "test.csv", "--json")
    disagreeing = [r for r in json.loads(done.stdout)["rows"] if not r["agrees"]]
    local = case["local"]
    table = pd.read_csv(local / "disagreements.csv")
    assert table.row.tolist() == [r["row"] for r in disagreeing]
    assert table.ensemble.tolist() == [r["ensemble"] for r in disagreeing]
    assert table.surrogate.tolist() == [r["surrogate"] for r in disagreeing]
    assert table.columns.tolist() == ["row", "ensemble", "surrogate", "leaf", "path", *FEATURES]
    html = (local / "report.html").read_text()
    card = (local / "model_card.md").read_text()
    heading = f"Rows where surrogate and ensemble disagree: {len(disagreeing)} of 100 test rows"
    assert heading in html and heading in card
    assert "of test.csv (row numbers count its data rows from 0)" in html
    for r in disagreeing:
        assert f'<tr><td class="num">{r["row"]}</td>' in html
        assert (
            f"- **Row {r['row']}**: " in card
            and f"ensemble **{r['ensemble']}**, surrogate **{r['surrogate']}**" in card
        )
    assert "disagreements.csv" in card


def test_report_panel_follows_rows_as_explain_row(case):
    """The signed report's own script, in V8, on 20 rows of the test file (one with a
    missing value): the same path words, surrogate and ensemble answers as explain-row."""
    follow = panel((case["local"] / "report.html").read_text())
    test = pd.read_csv("test.csv").iloc[:20][FEATURES]
    test.iloc[3, 0] = np.nan
    test.to_csv("twenty.csv", index=False)
    done = invoke("--model-uri", "models:/credit-rf/1", "--data", "twenty.csv", "--json")
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)["rows"]
    for row, (_, values) in zip(rows, test.iterrows(), strict=True):
        got = follow(values.to_dict())
        assert [s["line"] for s in got["steps"]] == [  # as explain-row prints them
            f"node {s['node']}: {s['condition']}? {s['answer']} (row: "
            + ("missing, by the rule for missing values" if s["value"] is None else "")
            + (format_number(s["value"]) if s["value"] is not None else "")
            + ")"
            for s in row["steps"]
        ]
        assert [(s["holds"], s["value"]) for s in got["steps"]] == [
            (s["holds"], s["value"]) for s in row["steps"]
        ]
        assert (got["leaf"], got["surrogate"], got["ensemble"], got["agrees"]) == (
            row["leaf"],
            row["surrogate"],
            row["ensemble"],
            row["agrees"],
        )
    assert {r["agrees"] for r in rows} == {True, False}


def test_bad_rows_and_untrusted_policy_exit_2(case, tmp_path):
    pd.read_csv("test.csv").drop(columns=["worst area", "mean texture"]).to_csv(
        tmp_path / "missing.csv", index=False
    )
    missing = invoke("--model-uri", "models:/credit-rf/1", "--data", str(tmp_path / "missing.csv"))
    assert missing.exit_code == 2 and missing.stdout == ""
    assert "missing.csv lacks the feature columns ['mean texture', 'worst area']" in missing.output
    typed = pd.read_csv("test.csv").astype({"mean radius": object})
    typed.loc[3, "mean radius"] = "high"
    typed.to_csv(tmp_path / "typed.csv", index=False)
    wrong = invoke("--model-uri", "models:/credit-rf/1", "--data", str(tmp_path / "typed.csv"))
    assert wrong.exit_code == 2
    assert "'mean radius' holds text (row 3: 'high')" in wrong.output
    (tmp_path / "nobody.toml").write_text("[gates]\nmin_fidelity = 0.9\n")
    untrusted = invoke(
        "--model-uri",
        "models:/credit-rf/1",
        "--data",
        "test.csv",
        "--policy",
        str(tmp_path / "nobody.toml"),
    )
    assert untrusted.exit_code == 2 and "explain" in untrusted.output
    unexplained = invoke("--model-uri", "models:/credit-rf-surrogate/7", "--data", "test.csv")
    assert unexplained.exit_code == 2
