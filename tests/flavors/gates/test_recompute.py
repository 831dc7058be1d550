"""``govern gate --data``: the surrogate's fidelity measured again (flavors.recompute)."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow_store import register_sklearn
from signing_keys import keys_toml
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.gates.recompute import EXACT, GATE_NAME, OVERLAP
from miret_governance.flavors.miret import load_model
from miret_governance.governance.measures.metrics import wilson_interval
from miret_governance.governance.trust.policy import load_policy

pytest_plugins = ["mlflow_store"]
POLICY = "[gates]\nmin_fidelity = 0.9\nmax_features = 5\n"


def _use_store(monkeypatch, uri):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)


@pytest.fixture(scope="module")
def demo_case(tmp_path_factory):
    """The demo on a smaller forest: Wisconsin's stratified 75/25 split, a MinMaxScaler +
    depth-3 random forest of 20 trees, explained once with the default settings."""
    root = tmp_path_factory.mktemp("recompute")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.25, stratify=y, random_state=0
    )
    forest = RandomForestClassifier(max_depth=3, n_estimators=20, max_features=None, random_state=0)
    model = Pipeline([("scale", MinMaxScaler()), ("forest", forest)]).fit(X_train, y_train)
    X_train.assign(target=y_train).to_csv(root / "train.csv", index=False)
    X_test.assign(target=y_test).to_csv(root / "test.csv", index=False)
    (root / "policy.toml").write_text(POLICY + keys_toml())
    with pytest.MonkeyPatch.context() as mp:
        _use_store(mp, uri)
        mp.chdir(root)
        register_sklearn(model, "wisconsin-rf")
        result = explain_model_version(
            "models:/wisconsin-rf/1", root / "train.csv", target="target", solver="highs"
        )
    return {"uri": uri, "root": root, "model": model, "result": result, "X": X}


@pytest.fixture
def demo(demo_case, monkeypatch):
    _use_store(monkeypatch, demo_case["uri"])
    monkeypatch.chdir(demo_case["root"])
    return demo_case


def _recomputed(outcome):
    (result,) = [r for r in outcome.evaluation.results if r.name == GATE_NAME]
    return result


def _gate(demo, data):
    policy = load_policy(demo["root"] / "policy.toml")
    return gate_model_version("models:/wisconsin-rf/1", policy, data=demo["root"] / data)


def test_the_explain_runs_own_data_reproduces_the_stored_fidelities_exactly(demo):
    metrics = demo["result"].metrics
    assert metrics["n_test_rows"] == 86.0  # 20% of the 426 training rows
    assert metrics["train_fidelity"] == 331 / 340 and metrics["n_features_used"] == 2.0
    assert metrics["test_fidelity"] == 84 / 86
    outcome = _gate(demo, "train.csv")
    result = _recomputed(outcome)
    assert result.passed and result.threshold == EXACT
    assert result.value == {"train_fidelity": 331 / 340, "test_fidelity": 84 / 86}
    assert outcome.evaluation.all_passed
    run = MlflowClient().get_run(outcome.run_id)
    assert run.data.tags["result"] == "PASS"


def test_other_data_must_agree_within_the_wilson_intervals(demo):
    result = _recomputed(_gate(demo, "test.csv"))  # the 143 rows the forest never saw
    assert result.threshold == OVERLAP and result.passed
    assert result.value == 141 / 143
    assert wilson_interval(141, 143) == pytest.approx((0.9504, 0.9962), abs=1e-4)


def test_rows_where_the_surrogate_disagrees_fail_the_gate_and_are_recorded(demo):
    """Rows drawn where the ensemble and the verified surrogate disagree: 0 of 30 agree,
    95% interval 0-0.114, far below the stored 84 of 86 (0.919-0.994)."""
    surrogate = load_model(demo["result"].surrogate_uri, policy=demo["root"] / "policy.toml")
    X = demo["X"]
    rng = np.random.default_rng(0)
    low, high = X.min().to_numpy(), X.max().to_numpy()
    draws = low + rng.random((20000, X.shape[1])) * (high - low)
    candidates = X.iloc[:0].reindex(range(len(draws)))
    candidates.loc[:, :] = draws
    disagree = demo["model"].predict(candidates) != surrogate.predict(candidates)
    candidates[disagree].head(30).to_csv(demo["root"] / "disagree.csv", index=False)
    assert disagree.sum() >= 30

    done = CliRunner().invoke(
        app,
        [
            "gate", "--model-uri", "models:/wisconsin-rf/1", "--policy", "policy.toml",
            "--data", "disagree.csv", "--json",
        ],
    )  # fmt: skip
    assert done.exit_code == 1, done.output
    assert '"name": "recomputed_fidelity"' in done.output
    assert "0 of 30 rows agree: 0.0000 (95% 0.000-0.114)" in done.output
    assert "intervals do not overlap" in done.output
    (run,) = MlflowClient().search_runs(
        [MlflowClient().get_experiment_by_name("governance-gates").experiment_id],
        "tags.result = 'FAIL'",
    )
    assert run.data.params["gate.min_fidelity"] == "0.9"


def test_with_a_test_file_each_file_reproduces_its_own_split_exactly(demo):
    """Explained with the 143 held-out rows as its test file: gate --data of the test file
    reproduces test_fidelity, of the training file train_fidelity (all 426 rows)."""
    result = explain_model_version(
        "models:/wisconsin-rf/1",
        demo["root"] / "train.csv",
        target="target",
        test_data=demo["root"] / "test.csv",
        solver="highs",
        allow_invalid=True,  # a few held-out rows lie beyond the scaler's range
    )
    metrics = result.metrics
    assert (metrics["n_test_rows"], metrics["test_fidelity"]) == (143.0, 141 / 143)
    assert metrics["train_fidelity"] == 416 / 426
    on_test = _recomputed(_gate(demo, "test.csv"))
    assert on_test.passed and on_test.value == {"test_fidelity": 141 / 143}
    on_train = _recomputed(_gate(demo, "train.csv"))
    assert on_train.passed and on_train.value == {"train_fidelity": 416 / 426}


def test_data_the_ensemble_cannot_take_is_refused_by_column_and_row(demo):
    """QA: text in a numeric column, an infinite value and a header-only file reached the
    scaler, which answered "could not convert string to float: 'abc'"."""
    from miret_governance.flavors.errors import ExplainError

    test = pd.read_csv(demo["root"] / "test.csv")
    text = test.astype({"mean radius": object})
    text.loc[3, "mean radius"] = "abc"
    text.to_csv(demo["root"] / "text.csv", index=False)
    test.assign(**{"mean area": np.inf}).to_csv(demo["root"] / "inf.csv", index=False)
    test.iloc[:0].to_csv(demo["root"] / "empty.csv", index=False)
    cases = {
        "text.csv": "the columns must hold numbers in raw units: 'mean radius' holds text "
        "(row 3: 'abc')",
        "inf.csv": "'mean area' has infinite values (rows [0, 1, 2, 3, 4])",
        "empty.csv": "has no rows",
        "few.csv": "few.csv has too few rows to check the fidelity: 5, fewer than the 20",
    }
    test.iloc[:5].to_csv(demo["root"] / "few.csv", index=False)  # QA: 5 rows passed
    from mlflow.entities import ViewType

    from miret_governance.flavors.gates.gating import GATE_EXPERIMENT

    def gate_runs():
        found = MlflowClient().get_experiment_by_name(GATE_EXPERIMENT)
        ids = [found.experiment_id] if found else []
        return len(MlflowClient().search_runs(ids, run_view_type=ViewType.ALL)) if ids else 0

    before = gate_runs()
    for data, message in cases.items():
        with pytest.raises(ExplainError, match=re.escape(message)):
            _gate(demo, data)
    assert gate_runs() == before  # nothing recorded


def test_files_replaced_after_the_gates_check_are_not_the_ones_measured(demo, monkeypatch):
    """QA: the gate compared the ensemble files' digest with the evidence, then downloaded
    them again to recompute: files an insider replaced in between (here a forest trained
    on flipped labels) were measured. The recomputation compares the very files it loads."""
    import skops.io

    from miret_governance.flavors.errors import GateError
    from miret_governance.flavors.gates import gating
    from miret_governance.flavors.store.registry import download_model, model_id_of

    client = MlflowClient()
    model_id = model_id_of(client.get_model_version("wisconsin-rf", "1"))
    original = download_model("models:/wisconsin-rf/1", demo["root"] / "original")
    flipped = demo["root"] / "flipped"
    flipped.mkdir()
    X = demo["X"]
    forged = Pipeline(
        [("scale", MinMaxScaler()), ("forest", RandomForestClassifier(n_estimators=3))]
    )
    skops.io.dump(forged.fit(X, 1 - demo["model"].predict(X)), flipped / "model.skops")
    checked_evidence = gating.checked_evidence

    def check_then_replace(*args, **kwargs):
        checked = checked_evidence(*args, **kwargs)
        client.log_model_artifacts(model_id, flipped)
        return checked

    monkeypatch.setattr(gating, "checked_evidence", check_then_replace)
    try:
        with pytest.raises(GateError, match="model files of models:/wisconsin-rf/1 changed"):
            _gate(demo, "test.csv")
    finally:
        only_model = demo["root"] / "restore"
        only_model.mkdir()
        (only_model / "model.skops").write_bytes((Path(original) / "model.skops").read_bytes())
        client.log_model_artifacts(model_id, only_model)
    monkeypatch.setattr(gating, "checked_evidence", checked_evidence)
    assert _recomputed(_gate(demo, "test.csv")).passed  # the explained files are back


def test_the_ensemble_is_hashed_and_loaded_from_a_private_copy(demo, monkeypatch):
    """QA: with a local artifact store MLflow's download returns the store's own folder,
    so a file swapped there between the hash and the load (MLflow even writes
    registered_model_meta into it first, a trigger) was loaded under the digest of the
    other. The ensemble is hashed and loaded from a private copy."""
    import mlflow
    import skops.io

    from miret_governance.flavors.store import inputs

    store_folder = Path(mlflow.artifacts.download_artifacts("models:/wisconsin-rf/1"))
    original = (store_folder / "model.skops").read_bytes()
    X = demo["X"]
    forged = Pipeline(
        [("scale", MinMaxScaler()), ("forest", RandomForestClassifier(n_estimators=3))]
    )
    flipped = demo["root"] / "flipped-in-place.skops"
    skops.io.dump(forged.fit(X, 1 - demo["model"].predict(X)), flipped)
    hash_files = inputs.model_files_digest

    def hash_then_swap(folder):
        digest = hash_files(folder)
        (store_folder / "model.skops").write_bytes(flipped.read_bytes())
        return digest

    monkeypatch.setattr(inputs, "model_files_digest", hash_then_swap)
    try:
        ensemble, _ = inputs.load_pinned_ensemble("models:/wisconsin-rf/1")
    finally:
        (store_folder / "model.skops").write_bytes(original)
    assert (ensemble.predict(ensemble.transform(X)) == demo["model"].predict(X)).all()
