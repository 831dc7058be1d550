"""The opt-in ``miret`` evaluator of ``mlflow.models.evaluate``, in a real SQLite store:
installed through its entry point, it runs only when its config enables it, fits the
same surrogate as ``MiretSurrogate`` directly, logs it to the run and the evaluated
model, and refuses models that are not tree ensembles or are pickles."""

import json
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.read.evaluator import MiretEvaluator
from miret_governance.governance.measures.metrics import fidelity
from miret_governance.governance.miret import MiretSurrogate

pytest_plugins = ["mlflow_store"]

ROWS = 120
FEATURES = ["mean radius", "mean texture", "mean perimeter", "mean area"]
FIT = {"depth": 2, "time_limit": 30.0, "work_limit": 1.0, "stall_work": 0.5}
"""A small budget in units of work, so both fits stop on work, never on the clock."""
ENABLED = {"miret": {"enabled": True, **FIT}}


@pytest.fixture
def data(breast_cancer):
    """The first 120 Wisconsin rows of four features, with the label column."""
    X, y = breast_cancer
    return X[FEATURES].iloc[:ROWS].assign(label=y.iloc[:ROWS].to_numpy())


@pytest.fixture
def forest(data):
    """A 5-tree depth-2 random forest of ``data``."""
    model = RandomForestClassifier(n_estimators=5, max_depth=2, random_state=0)
    return model.fit(data[FEATURES], data["label"])


def log_sklearn(store, model, **options) -> str:
    """``model`` logged with mlflow.sklearn in a run of ``store``; its model URI."""
    with mlflow.start_run(experiment_id=store):
        info = mlflow.sklearn.log_model(
            model, name="model", pip_requirements=["scikit-learn"], **options
        )
    return info.model_uri


def log_skops(store, model) -> str:
    return log_sklearn(
        store,
        model,
        serialization_format="skops",
        skops_trusted_types=["sklearn.tree._tree.Tree"],
    )


def evaluate(store, model_uri, data, **options):
    """``mlflow.models.evaluate`` of ``model_uri`` on ``data`` as a classifier, in a new
    run of ``store``; (result, run id)."""
    with mlflow.start_run(experiment_id=store) as run:
        result = mlflow.models.evaluate(
            model_uri, data, targets="label", model_type="classifier", **options
        )
    return result, run.info.run_id


def miret_metrics(metrics) -> dict:
    return {k: v for k, v in metrics.items() if k.startswith("miret_")}


def test_the_evaluator_is_installed_through_its_entry_point():
    assert "miret" in mlflow.models.list_evaluators()


def test_named_and_enabled_it_logs_the_fidelity_of_the_same_surrogate(store, data, forest):
    model_uri = log_skops(store, forest)
    result, run_id = evaluate(
        store, model_uri, data, evaluators=["miret"], evaluator_config=ENABLED
    )

    direct = MiretSurrogate(forest, **FIT).fit(data[FEATURES])
    agreeing = fidelity(forest.predict(data[FEATURES]), direct.predict(data[FEATURES]))
    expected = {
        "miret_fidelity": agreeing,
        "miret_baseline_cart_fidelity": direct.baseline_fidelity(data[FEATURES]),
        "miret_n_features": float(len(direct.selected_features_)),
        "miret_depth": 2.0,
        "miret_n_rows": float(ROWS),
    }
    assert {k: result.metrics[k] for k in expected} == expected
    assert (result.metrics["miret_fidelity"] * ROWS).is_integer()  # k of the 120 rows
    assert set(result.metrics) == set(miret_metrics(result.metrics))  # no other evaluator

    run = MlflowClient().get_run(run_id)
    assert miret_metrics(run.data.metrics) == result.metrics
    model_id = model_uri.removeprefix("models:/")
    on_model = {m.key: m for m in mlflow.get_logged_model(model_id).metrics}
    assert on_model["miret_fidelity"].value == agreeing
    assert on_model["miret_fidelity"].dataset_digest  # linked to the evaluation data

    listed = MlflowClient().list_artifacts(run_id, "miret")
    assert sorted(a.path for a in listed) == [
        "miret/fit.json",
        "miret/rules.txt",
        "miret/surrogate_tree.png",
        "miret/surrogate_tree.svg",
    ]
    assert result.artifacts["miret_rules"].content == direct.rules() + "\n"
    fit = result.artifacts["miret_fit"].content
    assert fit["tree_digest"] == direct.tree_digest()
    assert fit["model_uri"] == model_uri and fit["params"]["work_limit"] == 1.0
    local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="miret/fit.json")
    assert json.loads(Path(local).read_text()) == fit
    assert result.artifacts["miret_tree"].content.size[0] > 0  # the PNG, read back


def test_enabled_by_config_alone_it_runs_next_to_the_builtin_evaluators(store, data, forest):
    model_uri = log_skops(store, forest)
    result, _ = evaluate(store, model_uri, data, evaluator_config=ENABLED)
    direct = MiretSurrogate(forest, **FIT).fit(data[FEATURES])
    assert result.metrics["miret_fidelity"] == direct.score(data[FEATURES])
    assert result.metrics["accuracy_score"] == np.mean(forest.predict(data[FEATURES]) == data.label)


def test_without_a_model_id_from_mlflow_it_logs_to_the_run_and_the_model(store, data, forest):
    model_uri = log_skops(store, forest)
    model_id = model_uri.removeprefix("models:/")
    run_uri = f"runs:/{mlflow.get_logged_model(model_id).source_run_id}/model"
    mlflow.clear_active_model()  # MLflow then knows no model id and logs nothing itself
    result, run_id = evaluate(store, run_uri, data, evaluators=["miret"], evaluator_config=ENABLED)
    assert result.artifacts["miret_fit"].content["model_uri"] == model_uri
    logged = MlflowClient().get_run(run_id).data.metrics
    assert miret_metrics(logged) == result.metrics
    on_model = {m.key: m.value for m in mlflow.get_logged_model(model_id).metrics}
    assert miret_metrics(on_model) == result.metrics


def test_installed_but_not_enabled_it_never_runs(store, data, forest):
    model_uri = log_skops(store, forest)
    result, run_id = evaluate(store, model_uri, data)  # evaluators=None: every installed one
    assert "accuracy_score" in result.metrics
    assert miret_metrics(result.metrics) == {}
    assert miret_metrics(MlflowClient().get_run(run_id).data.metrics) == {}
    assert MlflowClient().list_artifacts(run_id, "miret") == []

    disabled = {"miret": {"enabled": False, "depth": 2}}
    result, _ = evaluate(store, model_uri, data, evaluator_config=disabled)
    assert "accuracy_score" in result.metrics and miret_metrics(result.metrics) == {}

    # MLflow asks can_evaluate the same question whether the evaluator was named or
    # merely installed, so naming it without the config key runs nothing either
    with pytest.raises(MlflowException, match="could not be evaluated by any"):
        evaluate(store, model_uri, data, evaluators=["miret"])


def test_a_model_that_is_not_a_tree_ensemble_is_refused_naming_the_supported_ones(store, data):
    model = LogisticRegression(max_iter=1000).fit(data[FEATURES], data["label"])
    model_uri = log_sklearn(store, model, serialization_format="skops")
    with pytest.raises(ExplainError, match="LogisticRegression") as info:
        evaluate(store, model_uri, data, evaluators=["miret"], evaluator_config=ENABLED)
    message = str(info.value)
    for family in ("RandomForestClassifier", "HistGradientBoostingClassifier", "XGBClassifier"):
        assert family in message
    assert "lightgbm.Booster" in message


def test_a_pickled_forest_is_refused_even_when_mlflow_may_unpickle_it(
    store, data, forest, monkeypatch
):
    model_uri = log_sklearn(store, forest, serialization_format="cloudpickle")
    monkeypatch.setenv("MLFLOW_ALLOW_PICKLE_DESERIALIZATION", "true")  # MLflow's own load
    with pytest.raises(ExplainError, match=r"'cloudpickle'.*the miret evaluator refuses it"):
        evaluate(store, model_uri, data, evaluators=["miret"], evaluator_config=ENABLED)


def test_static_predictions_are_refused(store, data, forest):
    frame = data.assign(prediction=forest.predict(data[FEATURES]))
    refused = pytest.raises(ExplainError, match="pass model= a logged model's URI")
    with refused, mlflow.start_run(experiment_id=store):
        mlflow.models.evaluate(
            data=frame,
            targets="label",
            predictions="prediction",
            model_type="classifier",
            evaluators=["miret"],
            evaluator_config=ENABLED,
        )


@pytest.mark.parametrize(
    ("config", "model_type", "match"),
    [
        ({"enabled": "yes"}, "classifier", r"\['enabled'\] must be True or False, got 'yes'"),
        ({"enabled": True, "trust_pickle": True}, "classifier", r"unknown keys \['trust_pickle'\]"),
        ({"enabled": True, "time_limit": -1}, "classifier", "time_limit"),
        ({"enabled": True, "depth": 9}, "classifier", "depth must be at most 8"),
        ({"enabled": True}, "regressor", "model_type is 'regressor'"),
    ],
)
def test_an_enabled_evaluator_refuses_a_bad_config_before_any_work(config, model_type, match):
    with pytest.raises(ExplainError, match=match):
        MiretEvaluator.can_evaluate(model_type=model_type, evaluator_config=config)


def test_without_its_config_key_it_declines_every_model_type():
    for model_type in ("classifier", "regressor", None):
        for config in ({}, {"enabled": False}, {"depth": 2}):
            assert not MiretEvaluator.can_evaluate(model_type=model_type, evaluator_config=config)
