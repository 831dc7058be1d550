"""A HistGradientBoosting model trained on data with missing values is explained end to
end in a real store: validation passes on the training file's own share of missing
values, the surrogate routes a NaN by its stored rule, and the fidelity on test rows with
a missing value is logged as ``test_fidelity_missing_rows``."""

from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow_store import log_skops
from signing_keys import keys_toml
from sklearn.ensemble import HistGradientBoostingClassifier

from miret_governance.flavors.errors import ValidationFailedError
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.miret import load_model
from miret_governance.flavors.store.inputs import load_ensemble
from miret_governance.governance.measures.metrics import surrogate_metrics
from miret_governance.governance.trust.policy import load_policy

pytest_plugins = ["mlflow_store"]


@pytest.fixture
def missing_data(tmp_path):
    """600 rows: label 1 when ``income > 0.5``; ``income`` is missing on every fifth row,
    and those rows are labelled 1 (a missing income means a yes)."""
    rng = np.random.default_rng(7)
    frame = pd.DataFrame({"income": rng.uniform(0, 1, 600), "age": rng.uniform(0, 1, 600)})
    frame["label"] = (frame["income"] > 0.5).astype(int)
    missing = np.arange(600) % 5 == 0
    frame.loc[missing, "income"] = np.nan
    frame.loc[missing, "label"] = 1
    path = tmp_path / "missing.csv"
    frame.to_csv(path, index=False)
    return frame, path


def register_model(store, frame):
    """A HistGradientBoosting model fitted on ``frame`` (NaN in income), registered as
    credit-nan the documented safe way (skops)."""
    X, y = frame[["income", "age"]], frame["label"]
    model = HistGradientBoostingClassifier(max_iter=10, max_depth=2, random_state=0).fit(X, y)
    log_skops(model, store, "credit-nan")


def test_model_trained_with_missing_values_is_explained(store, missing_data, tmp_path):
    frame, path = missing_data
    register_model(store, frame)
    X = frame[["income", "age"]]
    result = explain_model_version(
        "models:/credit-nan/1", path, target="label", depth=1, time_limit=10
    )
    assert result.validation == "passed"
    metrics = result.metrics
    assert metrics["n_test_rows"] == 120.0 and metrics["n_test_missing_rows"] == 25.0
    assert metrics["test_fidelity_missing_rows"] == metrics["test_fidelity"] == 1.0
    logged = mlflow.MlflowClient().get_run(result.run_id).data.metrics
    assert logged["test_fidelity_missing_rows"] == 1.0 and logged["n_test_missing_rows"] == 25.0
    assert (
        "missing values: income <= 0.5004: missing income -> no branch" in result.rules.splitlines()
    )
    folder = Path(mlflow.artifacts.download_artifacts(result.surrogate_uri))
    assert (
        "Missing values: income &lt;= 0.5004: missing income -&gt; no branch."
        in (folder / "model_card.md").read_text()
    )
    assert (
        "Missing values: <code>income &lt;= 0.5004: missing income -&gt; no branch</code>."
        in (folder / "report.html").read_text()
    )
    surrogate = load_model(result.surrogate_uri)
    assert surrogate.tree_.missing_left.tolist() == [False]  # right: the leaf of class 1
    ensemble, _ = load_ensemble("models:/credit-nan/1")
    missing = X["income"].isna().to_numpy()
    assert surrogate.predict(X[missing]).tolist() == [1] * 120
    assert ensemble.predict(X[missing].to_numpy()).tolist() == [1] * 120
    again = surrogate_metrics(
        ensemble, surrogate.tree_, X.to_numpy(), X.to_numpy(), tree_scaler=surrogate.input_scaler_
    )
    assert again["n_test_missing_rows"] == 120.0 and again["test_fidelity_missing_rows"] == 1.0
    policy_path = tmp_path / "lenient.toml"
    policy_path.write_text("[gates]\nmin_fidelity = 0.8\n" + keys_toml())
    gated = gate_model_version(
        "models:/credit-nan/1", load_policy(policy_path), data=path, target="label"
    )
    recomputed = {r.name: r for r in gated.evaluation.results}["recomputed_fidelity"]
    assert gated.evaluation.all_passed and recomputed.passed


def test_a_test_file_missing_a_column_complete_in_training_fails_validation(
    store, missing_data, tmp_path
):
    frame, path = missing_data
    register_model(store, frame)
    test = frame.iloc[:100].reset_index(drop=True)
    test.loc[[3, 4], "age"] = np.nan
    test_path = tmp_path / "test.csv"
    test.to_csv(test_path, index=False)
    with pytest.raises(ValidationFailedError) as failed:
        explain_model_version(
            "models:/credit-nan/1",
            path,
            test_data=test_path,
            target="label",
            depth=1,
            time_limit=10,
            min_test_rows=1,
        )
    assert (
        "column 'age': 2 rows (2%) with missing values (null/NaN), but the training data "
        "had none in this column; rows 3, 4"
    ) in str(failed.value)
