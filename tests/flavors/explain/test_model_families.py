"""LightGBM and HistGradientBoosting, registered the way their MLflow flavors store them
(a LightGBM booster as its text model; scikit-learn with skops), load without running
code, read exactly, are explained, gated (fidelity recomputed) and promoted."""

import lightgbm
import mlflow
import numpy as np
import pytest
from mlflow_store import log_skops
from signing_keys import keys_toml
from sklearn.ensemble import HistGradientBoostingClassifier

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.gates.gating import gate_model_version
from miret_governance.flavors.store.inputs import load_ensemble
from miret_governance.flavors.trail.promotion import promote_model_version
from miret_governance.governance.report.gate_markdown import gate_markdown
from miret_governance.governance.trust.policy import load_policy

pytest_plugins = ["mlflow_store"]


def gated_and_promoted(ensemble_uri: str, data_path, tmp_path) -> None:
    """The explained version passes a lenient policy, recomputed on its own data, and is
    promoted to @champion with a signed decision."""
    policy_path = tmp_path / "lenient.toml"
    policy_path.write_text("[gates]\nmin_fidelity = 0.8\nmax_features = 5\n" + keys_toml())
    policy = load_policy(policy_path)
    gated = gate_model_version(ensemble_uri, policy, data=data_path, target="label")
    assert gated.evaluation.all_passed, gate_markdown(gated.evaluation)
    assert "recomputed_fidelity" in [r.name for r in gated.evaluation.results]
    assert promote_model_version(ensemble_uri, "champion", policy).promoted


@pytest.fixture
def data(breast_cancer, tmp_path):
    """400 rows of breast cancer (original column names, with spaces) in a CSV file."""
    X, y = breast_cancer
    frame = X.iloc[:400].assign(label=y.iloc[:400].to_numpy())
    path = tmp_path / "data.csv"
    frame.to_csv(path, index=False)
    return X.iloc[:400], y.iloc[:400], path


def test_lightgbm_booster_reads_exactly_and_is_explained(store, data):
    X, y, path = data
    model = lightgbm.LGBMClassifier(n_estimators=20, max_depth=3, num_leaves=7, verbose=-1)
    model.fit(X.rename(columns=lambda c: c.replace(" ", "_")), y)
    with mlflow.start_run(experiment_id=store):
        mlflow.lightgbm.log_model(
            model.booster_,
            name="model",
            registered_model_name="credit-lgb",
            input_example=X.iloc[:2],
            pip_requirements=["lightgbm"],
        )
    ensemble, _ = load_ensemble("models:/credit-lgb/1")
    assert ensemble.feature_names == tuple(X.columns)  # from the signature, spaces kept
    np.testing.assert_allclose(
        ensemble.predict_proba(X)[:, 1], model.booster_.predict(X.to_numpy()), atol=1e-12
    )
    result = explain_model_version(
        "models:/credit-lgb/1", path, target="label", depth=2, time_limit=10
    )
    assert result.surrogate_uri == "models:/credit-lgb-surrogate/1"
    assert result.metrics["test_fidelity"] >= result.metrics["baseline_cart_test_fidelity"]
    gated_and_promoted("models:/credit-lgb/1", path, path.parent)


def test_pickled_lightgbm_classifier_is_refused_naming_the_booster(store, data):
    X, y, _ = data
    model = lightgbm.LGBMClassifier(n_estimators=3, verbose=-1).fit(X.to_numpy(), y)
    with mlflow.start_run(experiment_id=store):
        mlflow.lightgbm.log_model(
            model, name="model", registered_model_name="credit-lgbc", pip_requirements=["lightgbm"]
        )
    with pytest.raises(ExplainError, match=r"log_model\(model.booster_"):
        load_ensemble("models:/credit-lgbc/1")


def test_hist_gradient_boosting_with_skops_is_explained(store, data):
    X, y, path = data
    model = HistGradientBoostingClassifier(max_iter=20, max_depth=3, random_state=0).fit(X, y)
    log_skops(model, store, "credit-hgb")
    ensemble, _ = load_ensemble("models:/credit-hgb/1")
    np.testing.assert_allclose(
        ensemble.base_margin + ensemble.leaf_values(X).sum(axis=1),
        model.decision_function(X),
        atol=1e-12,
    )
    result = explain_model_version(
        "models:/credit-hgb/1", path, target="label", depth=2, time_limit=10
    )
    assert result.surrogate_uri == "models:/credit-hgb-surrogate/1"
    assert result.metrics["test_fidelity"] >= result.metrics["baseline_cart_test_fidelity"]
    gated_and_promoted("models:/credit-hgb/1", path, path.parent)
