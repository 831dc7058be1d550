"""``govern reproduce`` after ``govern explain``: exit codes 0/1/2, the JSON schema, and
refused data, through the command line against a real SQLite store."""

import dataclasses
import json
import subprocess

import pytest
import typer
from mlflow import MlflowClient
from mlflow_store import copy_store, register_wisconsin_rf
from typer.testing import CliRunner

from miret_governance.cli import explain, reproduce
from miret_governance.flavors.explain.request import ExplainRequest
from miret_governance.flavors.miret import read_evidence
from miret_governance.governance.measures.metrics import HEADLINE_METRICS

pytest_plugins = ["mlflow_store"]

FEATURES = ["mean radius", "mean texture", "mean perimeter", "worst area"]
SCHEMA = {
    "command",
    "schema_version",
    "identical",
    "model_uri",
    "surrogate_uri",
    "data_digest",
    "tree_digest",
    "metrics",
    "versions_differ",
    "time_limit_hit",
    "signed_by",
}


@pytest.fixture(scope="module")
def app():
    app = typer.Typer()
    explain.register(app)
    reproduce.register(app)
    return app


@pytest.fixture(scope="module")
def explained(app, tmp_path_factory, migrated_store, breast_cancer):
    """``govern explain`` of a 10-tree forest on 150 rows at depth 2 with HiGHS (the
    same solver on every machine) and a generous time limit (the fit ends on work), in
    a store of this module."""
    root = tmp_path_factory.mktemp("cli-reproduce")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    copy_store(migrated_store, root / "mlflow.db")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setenv("MLFLOW_REGISTRY_URI", uri)
        experiment = MlflowClient().create_experiment("reproduce", str(root / "mlruns"))
        mp.setenv("MLFLOW_EXPERIMENT_ID", experiment)
        mp.chdir(root)
        frame = register_wisconsin_rf(breast_cancer, FEATURES, rows=150, n_estimators=10)
        result = CliRunner().invoke(
            app,
            [
                "explain",
                "--model-uri",
                "models:/credit-rf/1",
                "--data",
                "data.csv",
                "--target",
                "label",
                "--depth",
                "2",
                "--time-limit",
                "60",
                "--min-test-rows",
                "1",
                "--solver",
                "highs",
                "--tracking-uri",
                uri,
            ],
        )
    assert result.exit_code == 0, result.output
    return {"uri": uri, "root": root, "frame": frame}


@pytest.fixture
def run(app, explained, monkeypatch):
    """``govern reproduce *args`` in the module's store and folder."""
    monkeypatch.chdir(explained["root"])

    def invoke(*args):
        return CliRunner().invoke(app, ["reproduce", *args, "--tracking-uri", explained["uri"]])

    return invoke


def test_help_documents_the_options_and_the_json_schema(app):
    result = CliRunner().invoke(app, ["reproduce", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for text in ("--model-uri", "--data", "--test-data", "--target", "--json", "--tracking-uri"):
        assert text in result.output
    text = " ".join(result.output.split())
    assert '--json prints {"command": "reproduce", "schema_version": 1' in text
    assert "versions_differ" in text and "A reproduction that differs is a failed check" in text


def test_identical_exits_0_with_the_json_schema(explained, monkeypatch, warm_bin):
    """In a process of its own (forked from the worker's warm one): stdout holds the JSON
    object alone (HiGHS prints its banner from C, which goes to stderr)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", explained["uri"])
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", explained["uri"])
    done = subprocess.run(
        [warm_bin / "govern", "reproduce", "--model-uri"]
        + ["models:/credit-rf/1", "--data", "data.csv", "--json"]
        + ["--tracking-uri", explained["uri"]],
        capture_output=True,
        text=True,
        cwd=explained["root"],
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert set(document) == SCHEMA
    assert document["command"] == "reproduce" and document["schema_version"] == 1
    assert document["identical"] is True
    assert document["model_uri"] == "models:/credit-rf/1"
    assert document["surrogate_uri"] == "models:/credit-rf-surrogate/1"
    provenance = read_evidence(document["surrogate_uri"])["provenance"]
    assert document["data_digest"] == provenance["data_digest"]
    assert document["tree_digest"] == {
        "recorded": provenance["tree_digest"],
        "reproduced": provenance["tree_digest"],
    }
    assert set(document["metrics"]) == set(HEADLINE_METRICS)
    for name, metric in document["metrics"].items():
        assert metric == {
            "recorded": provenance["metrics"][name],
            "reproduced": provenance["metrics"][name],
            "equal": True,
        }
    assert document["versions_differ"] == {}
    assert document["time_limit_hit"] == {"recorded": False, "reproduced": False}


def test_identical_for_people(run):
    result = run("--model-uri", "models:/credit-rf-surrogate/1", "--data", "data.csv")
    assert result.exit_code == 0, result.output
    assert "IDENTICAL: models:/credit-rf-surrogate/1 fitted again" in result.output
    assert "evidence signed by key 'test-ci' (" in result.output
    assert "every recorded version is the one installed here" in result.output


def test_other_data_or_a_bad_uri_exit_2(run, explained):
    changed = explained["frame"].copy()
    changed.loc[3, "mean texture"] += 0.5
    changed.to_csv("changed.csv", index=False)
    other = run("--model-uri", "models:/credit-rf/1", "--data", "changed.csv", "--json")
    assert other.exit_code == 2 and other.stdout == ""
    assert "changed.csv is not the data of this explanation" in other.output
    assert "pass the file the explain run read" in other.output
    missing = run("--model-uri", "models:/credit-rf/1", "--data", "nowhere.csv")
    assert missing.exit_code == 2
    assert "--data nowhere.csv does not exist; give the path of a readable" in missing.output
    bad = run("--model-uri", "credit-rf", "--data", "data.csv")
    assert bad.exit_code == 2 and "models:/<name>/<version>" in bad.output


def test_a_different_fit_exits_1_listing_what_differs(run, monkeypatch):
    rebuild = ExplainRequest.from_record.__func__

    def other_seed(cls, record, **changes):
        request = rebuild(cls, record, **changes)
        return dataclasses.replace(request, fit=request.fit.replace(random_state=1))

    monkeypatch.setattr(ExplainRequest, "from_record", classmethod(other_seed))
    result = run("--model-uri", "models:/credit-rf/1", "--data", "data.csv", "--json")
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["identical"] is False
    assert document["tree_digest"]["recorded"] != document["tree_digest"]["reproduced"]
    differing = {name for name, m in document["metrics"].items() if not m["equal"]}
    assert differing == {
        "test_fidelity",
        "train_fidelity",
        "baseline_cart_test_fidelity",
        "test_proximity_agreement",
    }
    # seed 1 draws another holdout: 30 test rows, 120 training rows
    assert document["metrics"]["test_fidelity"] == {
        "recorded": 28 / 30,
        "reproduced": 1.0,
        "equal": False,
    }
    assert document["metrics"]["train_fidelity"]["recorded"] == 118 / 120
    assert document["metrics"]["train_fidelity"]["reproduced"] == 120 / 120
    shown = run("--model-uri", "models:/credit-rf/1", "--data", "data.csv")
    assert shown.exit_code == 1 and "DIFFERENT" in shown.output
    assert "tree digest reproduced " + document["tree_digest"]["reproduced"] in shown.output
