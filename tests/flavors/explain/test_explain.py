"""flavors.explain, its registry, inputs and stages, against a real SQLite MLflow store."""

import itertools
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow_store import register_rf
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import MinMaxScaler

from miret_governance.flavors.errors import ExplainError, ValidationFailedError
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.miret import load_model
from miret_governance.flavors.store.inputs import load_ensemble
from miret_governance.flavors.store.registry import (
    EXPLAIN_DIGEST_TAG,
    SURROGATE_OF_TAG,
    SURROGATE_TAG,
    VALIDATION_TAG,
    model_id_of,
)
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.flavors.trail.supersede import SUPERSEDED_TAG, Superseded, SupersedeError
from miret_governance.governance.measures.metrics import fidelity_with_interval
from miret_governance.governance.trust.policy import load_policy

FEATURES = ["mean radius", "mean texture", "mean perimeter", "mean smoothness", "worst area"]
CONTRACT_METRICS = {
    "train_fidelity",
    "test_fidelity",
    "test_fidelity_ci_low",
    "test_fidelity_ci_high",
    "n_test_rows",
    "train_accuracy_surrogate",
    "test_accuracy_surrogate",
    "train_accuracy_ensemble",
    "test_accuracy_ensemble",
    "train_proximity_pairs",
    "test_proximity_pairs",
    "n_features_used",
    "n_feature_uses",
    "effective_depth",
    "solver.objective",
    "solver.gap",
    "solver.time_s",
    "solver.optimal",
    "baseline_cart_test_fidelity",
    "baseline_cart_train_fidelity",
    "baseline_cart_cv_fidelity",
    "baseline_cart_n_features",
}
MODEL_FILES = {
    "MLmodel",
    "surrogate.json",
    "evidence.json",
    "report.html",
    "model_card.md",
    "validation.json",
    "vite/level_frequency.csv",
    "vite/level_frequency.json",
    "vite/node_frequency.csv",
    "vite/threshold_ranges.csv",
    "figures/level_frequency.png",
    "figures/level_frequency.svg",
    "figures/vite_tree.png",
    "figures/vite_tree.svg",
    "figures/surrogate_tree.png",
    "figures/surrogate_tree.svg",
}


def _frame(breast_cancer, n=200):
    X, y = breast_cancer
    return X[FEATURES].iloc[:n].assign(label=y.iloc[:n].to_numpy())


def _use_store(monkeypatch, uri):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)


def _files(root):
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def rf_case(tmp_path_factory, breast_cancer):
    """One RF Pipeline explained once in its own store, shared by the tests (a 60 s cap far
    above the about 1 s of work its default budgets need, so it never decides the tree)."""
    root = tmp_path_factory.mktemp("rf")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        _use_store(mp, uri)
        mp.chdir(root)
        frame = _frame(breast_cancer)
        frame.to_csv(root / "data.csv", index=False)
        model = register_rf(frame, FEATURES, "credit-rf", n_estimators=20)
        stages = []
        result = explain_model_version(
            "models:/credit-rf/1",
            root / "data.csv",
            target="label",
            time_limit=60,
            min_test_rows=1,
            progress=lambda stage, detail: stages.append((stage, detail)),
        )
    return {
        "uri": uri,
        "root": root,
        "frame": frame,
        "model": model,
        "result": result,
        "stages": stages,
    }


@pytest.fixture
def rf(rf_case, monkeypatch):
    """The shared store (creating a SQLite store costs seconds): tests use their own names."""
    _use_store(monkeypatch, rf_case["uri"])
    return rf_case


def test_rf_explain_registers_linked_version(rf):
    result = rf["result"]
    client = MlflowClient()
    assert result.surrogate_uri == "models:/credit-rf-surrogate/1"
    assert not result.reused and result.validation == "passed"
    surrogate = client.get_model_version("credit-rf-surrogate", "1")
    ensemble = client.get_model_version("credit-rf", "1")
    assert surrogate.tags[SURROGATE_OF_TAG] == "models:/credit-rf/1"
    assert surrogate.tags[VALIDATION_TAG] == "passed"
    assert ensemble.tags[SURROGATE_TAG] == "models:/credit-rf-surrogate/1"
    assert model_id_of(surrogate) == result.model_id


def test_rf_metrics_on_model_and_run(rf):
    result = rf["result"]
    client = MlflowClient()
    assert CONTRACT_METRICS <= set(result.metrics)
    on_model = {m.key: m.value for m in client.get_logged_model(result.model_id).metrics}
    on_run = client.get_run(result.run_id).data.metrics
    assert on_model == pytest.approx(result.metrics)
    assert on_run.pop("peak_memory_mb") > 10  # a Python process with numpy: tens of MB
    assert on_run == pytest.approx(result.metrics)
    assert result.metrics["solver.optimal"] in (0.0, 1.0)
    assert 0.5 <= result.metrics["train_fidelity"] <= 1.0


def test_rf_headline_metrics_and_solver_prefix(rf):
    metrics = rf["result"].metrics
    headline = {
        "test_fidelity",
        "train_fidelity",
        "n_features_used",
        "baseline_cart_test_fidelity",
        "test_proximity_agreement",
    }
    assert headline <= set(metrics)
    solve = rf["result"].solve
    assert metrics["solver.time_s"] == pytest.approx(solve["wall_time"])
    assert metrics["solver.gap"] == pytest.approx(solve["gap"])
    assert not {"objective", "bound", "mip_gap", "solve_time_s", "solve_optimal"} & set(metrics)


def test_rf_datasets_linked_to_logged_model(rf):
    client = MlflowClient()
    result = rf["result"]
    run = client.get_run(result.run_id)
    digest = run.data.params["data_digest"]
    (holdout,) = [i.dataset for i in run.inputs.dataset_inputs if i.dataset.name == "data-holdout"]
    logged = client.get_logged_model(result.model_id).metrics
    assert {m.key for m in logged} == set(result.metrics)
    assert {(m.dataset_name, m.dataset_digest) for m in logged} == {
        ("data", digest),
        ("data-holdout", holdout.digest),
    }


def test_rf_run_records_reproducibility(rf):
    result = rf["result"]
    run = MlflowClient().get_run(result.run_id)
    params, tags = run.data.params, run.data.tags
    assert params["ensemble_uri"] == "models:/credit-rf/1"
    assert params["time_limit"] == "60.0" and params["seed"] == "0"
    assert params["depth"] == "2" and params["alpha"] == "0.5"
    assert params["n_train"] == "160" and params["n_test"] == "40"
    for key in (
        "governance.solver",
        "governance.solver_version",
        "governance.mip_status",
        "governance.objective",
        "governance.bound",
        "governance.gap",
    ):
        assert tags[key] or key == "governance.solver_version"
    # a fit whose MILP phase had no budget left (milp_share) ran no solver: no version
    solver = tags["governance.solver"]
    assert solver in ("highs", "gurobi", "none")
    assert bool(tags["governance.solver_version"]) == (solver != "none")
    assert tags[VALIDATION_TAG] == "passed"
    inputs = {i.tags[0].value: i.dataset for i in run.inputs.dataset_inputs}
    assert sorted(inputs) == ["testing", "training"]  # the file, and its holdout's rows
    assert inputs["training"].digest == params["data_digest"] == tags["governance.data_digest"]
    ensemble_id = model_id_of(MlflowClient().get_model_version("credit-rf", "1"))
    assert [m.model_id for m in run.inputs.model_inputs] == [ensemble_id]
    assert run.info.status == "FINISHED"


def test_rf_artifacts_and_pyfunc(rf, tmp_path):
    local = mlflow.artifacts.download_artifacts("models:/credit-rf-surrogate/1", dst_path="dl")
    files = _files(Path(local))
    assert MODEL_FILES <= files
    assert not [f for f in files if f.endswith((".pkl", ".pickle", ".skops"))]
    stored = json.loads(Path(local, "surrogate.json").read_text())["input_scaler"]
    scaler = rf["model"][0]
    assert stored["data_min_"] == scaler.data_min_.tolist()
    html = Path(local, "report.html").read_text()
    scripts = re.findall(r"<script[^>]*>", html)  # the applicant panel's, inline
    assert scripts == ['<script type="application/json" id="applicant-model">', "<script>"]
    assert "http://" not in html.replace("http://www.w3.org", "")
    assert html.count("<svg") >= 3 and "models:/credit-rf/1" in html
    assert "MIRET vs the depth-2 CART baseline" in html and "What the solver proved: " in html
    assert "<h2>Glossary</h2>" in html and "Technical status: solver: " in html
    metrics = rf["result"].metrics
    assert metrics["test_fidelity_ci_low"] <= metrics["test_fidelity"]
    assert metrics["test_fidelity"] <= metrics["test_fidelity_ci_high"]
    cart = rf["result"].metrics["baseline_cart_test_fidelity"]
    headline = (
        f"fidelity on test rows {fidelity_with_interval(metrics)}; plain tree (CART) "
        f"{100 * cart:.1f}%</span>"
    )
    assert headline in html.split("</header>")[0]
    technical = html.split("<h2>Technical details</h2>")[1]
    assert "What the solver proved: " in technical and "Objective" in technical
    card = Path(local, "model_card.md").read_text()
    assert "CART baseline" in card and "| Test fidelity | " in card
    assert f"{cart:.4g}" in card

    surrogate = load_model("models:/credit-rf-surrogate/1")
    raw = rf["frame"][FEATURES]
    expected = surrogate.predict(raw)
    np.testing.assert_array_equal(expected, surrogate.tree_.predict(scaler.transform(raw)))
    predicted = mlflow.pyfunc.load_model("models:/credit-rf-surrogate/1").predict(raw)
    np.testing.assert_array_equal(np.asarray(predicted), expected)
    normalized = mlflow.pyfunc.load_model(
        "models:/credit-rf-surrogate/1", model_config={"input_space": "normalized"}
    ).predict(pd.DataFrame(scaler.transform(raw), columns=FEATURES))
    np.testing.assert_array_equal(np.asarray(normalized), expected)


def test_rf_progress_reports_every_stage(rf):
    # once each, in order: the solve's progress is held back while validation runs
    seen = [stage for stage, _ in rf["stages"]]
    assert [stage for stage, _ in itertools.groupby(seen)] == [
        "load model",
        "load data",
        "validate",
        "solve",
        "VITE",
        "metrics",
        "report",
        "log model",
        "register",
    ]


def test_rf_reuse_then_force(rf, monkeypatch):
    from miret_governance.flavors.explain.validation_worker import ValidationWorker

    workers = []
    monkeypatch.setattr(ValidationWorker, "__enter__", lambda self: workers.append(self) or self)
    client = MlflowClient()
    again = explain_model_version(
        "models:/credit-rf/1",
        rf["root"] / "data.csv",
        target="label",
        time_limit=60,
        min_test_rows=1,
    )
    assert again.reused and again.surrogate_uri == "models:/credit-rf-surrogate/1"
    assert workers == []  # a reused explain validates nothing: no child is started
    assert again.metrics == pytest.approx(rf["result"].metrics)
    assert len(client.search_model_versions("name = 'credit-rf-surrogate'")) == 1
    digest = client.get_model_version("credit-rf-surrogate", "1").tags[EXPLAIN_DIGEST_TAG]

    # @champion holds it: another request, or a forced one, is refused before any work
    policy = load_policy(os.environ["GOVERN_POLICY"])
    assert promote_model_version("models:/credit-rf/1", "champion", policy).promoted
    for options in ({"seed": 1}, {"force": True}):
        with pytest.raises(SupersedeError, match="whose evidence carries @champion; "):
            explain_model_version(
                "models:/credit-rf/1", rf["root"] / "data.csv", target="label", **options
            )
    assert len(client.search_model_versions("name = 'credit-rf-surrogate'")) == 1

    # validated, then fitted (as inputs above BACKGROUND_FIT_CELLS are): the same surrogate
    monkeypatch.setattr("miret_governance.flavors.explain.explain.BACKGROUND_FIT_CELLS", 0)
    other = explain_model_version(
        "models:/credit-rf/1",
        rf["root"] / "data.csv",
        target="label",
        time_limit=60,
        force=True,
        min_test_rows=1,
        supersede=True,
    )
    assert not other.reused and other.version == "2"
    assert other.superseded == Superseded("models:/credit-rf-surrogate/1", ("@champion",))
    tag = json.dumps(["models:/credit-rf-surrogate/1", "@champion"])
    assert client.get_run(other.run_id).data.tags[SUPERSEDED_TAG] == tag
    assert client.get_model_version("credit-rf-surrogate", "2").tags[SUPERSEDED_TAG] == tag
    assert (
        "**Supersedes** surrogate version [credit\\-rf\\-surrogate v1](#/models/credit-rf-surrogate/"
        "versions/1), which carried @champion: those decisions do not count for this evidence."
    ) in client.get_model_version("credit-rf", "1").description
    assert len(workers) == 1
    # both fits end on work (about 1 s of a quiet core) far below the 60 s cap, so the
    # same tree under any load
    assert other.metrics["solver.time_limit_hit"] == 0.0
    assert rf["result"].metrics["solver.time_limit_hit"] == 0.0
    assert other.rules == rf["result"].rules
    first = {k: v for k, v in rf["result"].metrics.items() if k != "solver.time_s"}
    assert {k: other.metrics[k] for k in first} == pytest.approx(first)
    assert client.get_model_version("credit-rf-surrogate", "2").tags[EXPLAIN_DIGEST_TAG] == digest
    assert client.get_model_version("credit-rf", "1").tags[SURROGATE_TAG] == (
        "models:/credit-rf-surrogate/2"
    )


def test_xgboost_without_target(rf, breast_cancer, tmp_path):
    import xgboost

    X, y = breast_cancer
    X = X[FEATURES].iloc[:200]
    normalized = pd.DataFrame(MinMaxScaler().fit_transform(X), columns=FEATURES)
    model = xgboost.XGBClassifier(n_estimators=8, max_depth=2, random_state=0)
    model.fit(normalized, y.iloc[:200])
    with mlflow.start_run():
        mlflow.xgboost.log_model(
            model, name="model", registered_model_name="credit-xgb", pip_requirements=["xgboost"]
        )
    normalized.to_parquet(tmp_path / "data.parquet")

    result = explain_model_version(
        "models:/credit-xgb/1",
        tmp_path / "data.parquet",
        time_limit=5,
        registered_name="xgb-expl",
        min_test_rows=1,
    )
    assert result.surrogate_uri == "models:/xgb-expl/1"
    assert "train_fidelity" in result.metrics and "train_accuracy_surrogate" not in result.metrics
    client = MlflowClient()
    assert client.get_model_version("credit-xgb", "1").tags[SURROGATE_TAG] == result.surrogate_uri
    on_model = {m.key: m.value for m in client.get_logged_model(result.model_id).metrics}
    assert on_model == pytest.approx(result.metrics)
    surrogate = load_model(result.surrogate_uri)
    predicted = mlflow.pyfunc.load_model(result.surrogate_uri).predict(normalized)
    np.testing.assert_array_equal(np.asarray(predicted), surrogate.predict(normalized.to_numpy()))


def _nothing_registered(name="credit-rf"):
    client = MlflowClient()
    assert client.search_model_versions(f"name = '{name}-surrogate'") == []
    for version in client.search_model_versions(f"name = '{name}'"):
        assert not any(k.startswith("governance.") for k in version.tags)


def test_bad_uri_and_missing_version(rf, breast_cancer, tmp_path):
    frame = _frame(breast_cancer, 60)
    frame.to_csv("data.csv", index=False)
    with pytest.raises(ExplainError, match=r"models:/<name>/<version>"):
        explain_model_version("runs:/abc/model", "data.csv")
    with pytest.raises(ExplainError, match="not found in the registry"):
        explain_model_version("models:/nope/1", "data.csv")
    register_rf(frame, FEATURES, "bad-rf", n_estimators=20)
    with pytest.raises(ExplainError, match="missing.csv: no such file"):
        explain_model_version("models:/bad-rf/1", "missing.csv")
    with pytest.raises(ExplainError, match="no label column 'y'"):
        explain_model_version("models:/bad-rf/1", "data.csv", target="y")
    _nothing_registered("bad-rf")


def test_unsupported_model_registers_nothing(rf, breast_cancer):
    frame = _frame(breast_cancer, 100)
    frame.to_csv("data.csv", index=False)
    model = LogisticRegression(max_iter=500).fit(frame[FEATURES], frame["label"])
    with mlflow.start_run():
        mlflow.sklearn.log_model(
            model, name="model", registered_model_name="credit-lr", pip_requirements=["sklearn"]
        )
    with pytest.raises(ExplainError, match="Unsupported model.*LogisticRegression"):
        explain_model_version("models:/credit-lr/1", "data.csv")
    _nothing_registered("credit-lr")
    with pytest.raises(ExplainError, match="Unsupported model"):
        load_ensemble("models:/credit-lr/1")


def test_missing_column_fails_validation_and_registers_nothing(rf, breast_cancer):
    frame = _frame(breast_cancer, 100)
    register_rf(frame, FEATURES, "missing-rf", n_estimators=20)
    frame.drop(columns=["mean texture"]).to_csv("bad.csv", index=False)
    with pytest.raises(ValidationFailedError, match="mean texture") as info:
        explain_model_version("models:/missing-rf/1", "bad.csv", target="label", time_limit=2)
    _nothing_registered("missing-rf")
    run = MlflowClient().get_run(info.value.run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags[VALIDATION_TAG] == "failed"
    artifacts = [f.path for f in MlflowClient().list_artifacts(info.value.run_id)]
    assert artifacts == ["validation.json"]


def test_prepare_clips_only_training_rows_outside_the_scaler_range(breast_cancer):
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline

    from miret_governance.flavors.explain.stages import prepare
    from miret_governance.governance.ensembles.readers.reading import read_ensemble

    frame = _frame(breast_cancer, 120)
    model = make_pipeline(MinMaxScaler(), RandomForestClassifier(n_estimators=5, max_depth=2))
    ensemble = read_ensemble(model.fit(frame[FEATURES], frame["label"]))
    request = SimpleNamespace(
        target="label", data="data.csv", test_size=0.25, seed=0, min_test_rows=0, test_data=""
    )

    inside = prepare(request, ensemble, frame, None)
    assert inside.raw_train is inside.data.train  # nothing to clip: the rows as given
    assert inside.X_train.max() == pytest.approx(1.0)  # the scaler's own round-off

    shifted = frame.assign(**{"mean radius": frame["mean radius"] * 3})
    clipped = prepare(request, ensemble, shifted, None)
    high = model[0].data_max_[0]
    assert clipped.data.train["mean radius"].max() > high  # the holdout keeps raw units
    assert clipped.raw_train["mean radius"].max() == high  # the fit sees the range's bound
    assert clipped.X_train[:, 0].max() == pytest.approx(1.0)
    pd.testing.assert_frame_equal(
        clipped.raw_train.drop(columns="mean radius"),
        clipped.data.train.drop(columns="mean radius"),
    )


def test_allow_invalid_tags_failed_and_link_failure_rolls_back(rf, breast_cancer, monkeypatch):
    frame = _frame(breast_cancer, 120)
    register_rf(frame, FEATURES, "shifted-rf", n_estimators=20)
    shifted = frame.assign(**{"mean radius": frame["mean radius"] * 3})
    shifted.to_csv("shifted.csv", index=False)
    with pytest.raises(ValidationFailedError, match="allow-invalid"):
        explain_model_version("models:/shifted-rf/1", "shifted.csv", target="label", time_limit=2)
    _nothing_registered("shifted-rf")

    def refuse(self, name, version, key, value):
        raise RuntimeError("registry refused the tag")

    with monkeypatch.context() as mp:
        mp.setattr(MlflowClient, "set_model_version_tag", refuse)
        with pytest.raises(RuntimeError, match="refused"):
            explain_model_version(
                "models:/shifted-rf/1",
                "shifted.csv",
                target="label",
                time_limit=2,
                allow_invalid=True,
                min_test_rows=1,
            )
    _nothing_registered("shifted-rf")

    result = explain_model_version(
        "models:/shifted-rf/1",
        "shifted.csv",
        target="label",
        time_limit=2,
        allow_invalid=True,
        min_test_rows=1,
    )
    client = MlflowClient()
    assert (
        client.get_model_version("shifted-rf-surrogate", result.version).tags[VALIDATION_TAG]
        == "failed"
    )
    assert client.get_run(result.run_id).data.tags[VALIDATION_TAG] == "failed"
    local = mlflow.artifacts.download_artifacts(result.surrogate_uri, dst_path="dl")
    html = (Path(local) / "report.html").read_text()
    assert "Input validation failed" in html


def test_search_logs_every_candidate_as_a_child_run(rf):
    from miret_governance.flavors.explain.request import SearchSettings

    grid = {"alpha": [0.2, 0.8], "proximity_threshold": [0.9, 1.0]}
    settings = SearchSettings(param_grid=grid, cv=2, search_time_limit=1.0)
    stages = []
    result = explain_model_version(
        "models:/credit-rf/1",
        rf["root"] / "data.csv",
        target="label",
        time_limit=3,
        min_test_rows=1,
        search=settings,
        registered_name="searched-rf",
        progress=lambda stage, detail: stages.append((stage, detail)),
    )
    assert ("search", {"candidates": 4, "folds": 2}) in stages
    client = MlflowClient()
    parent = client.get_run(result.run_id)
    children = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{result.run_id}'",
    )
    assert len(children) == 4
    seen = {(c.data.params["alpha"], c.data.params["proximity_threshold"]) for c in children}
    assert seen == {("0.2", "0.9"), ("0.2", "1.0"), ("0.8", "0.9"), ("0.8", "1.0")}
    for child in children:
        metrics = child.data.metrics
        assert set(metrics) == {
            "mean_validation_fidelity",
            "std_validation_fidelity",
            "mean_n_features",
            "std_n_features",
            "mean_fit_time_s",
            "time_limit_hit_share",
        }
        assert 0 <= metrics["mean_validation_fidelity"] <= 1 and metrics["mean_fit_time_s"] > 0
    (chosen,) = [c for c in children if c.data.tags["governance.search.chosen"] == "true"]
    params, tags = parent.data.params, parent.data.tags
    assert tags["governance.search.chosen_run_id"] == chosen.info.run_id
    cut = any(c.data.metrics["time_limit_hit_share"] > 0 for c in children)
    assert tags["governance.search.reproducible"] == str(not cut).lower()
    assert params["alpha"] == chosen.data.params["alpha"]
    assert params["proximity_threshold"] == chosen.data.params["proximity_threshold"]
    assert params["search.cv"] == "2" and json.loads(params["search.grid"]) == grid
    assert "within 0.01 of the best" in tags["governance.search.rule"]
    best = max(c.data.metrics["mean_validation_fidelity"] for c in children)
    assert chosen.data.metrics["mean_validation_fidelity"] >= best - 0.01
    model = client.get_logged_model(result.model_id)
    assert model.params["alpha"] == chosen.data.params["alpha"]
    local = Path(mlflow.artifacts.download_artifacts(result.surrogate_uri, dst_path="dl"))
    html = (local / "report.html").read_text()
    assert "Hyperparameter search" in html and "4 candidates were cross-validated" in html
    svg = (local / "figures" / "search_tradeoff.svg").read_text()
    chosen_alpha = float(chosen.data.params["alpha"])
    assert f"chosen: alpha={chosen_alpha:.3g}" in svg  # text kept as text
