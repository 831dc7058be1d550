"""A registered model loaded without running its code (skops, a checked XGBoost file)
gives the explain path its labels through the library's own predict; a LightGBM text
model never reaches LightGBM."""

import lightgbm
import mlflow
import numpy as np
import pytest
import xgboost
from mlflow_store import register_sklearn
from sklearn.ensemble import RandomForestClassifier

from miret_governance.flavors.store.inputs import load_ensemble
from miret_governance.governance.ensembles.native_predict import LibraryProba

pytest_plugins = ["mlflow_store"]


@pytest.fixture
def cancer(breast_cancer):
    X, y = breast_cancer
    return X.rename(columns=lambda c: c.replace(" ", "_")).iloc[:300], y.iloc[:300]


def test_skops_and_xgboost_models_predict_with_their_library(store, cancer):
    X, y = cancer
    forest = RandomForestClassifier(n_estimators=20, max_depth=3, random_state=0).fit(X, y)
    register_sklearn(forest, "credit-rf", store, serialization_format="skops")
    booster = xgboost.XGBClassifier(n_estimators=10, max_depth=2).fit(X, y)
    with mlflow.start_run(experiment_id=store):
        mlflow.xgboost.log_model(booster, name="model", registered_model_name="credit-xgb")
    for name, model in (("credit-rf", forest), ("credit-xgb", booster)):
        ensemble, _ = load_ensemble(f"models:/{name}/1")
        assert isinstance(ensemble.native_proba, LibraryProba)
        assert ensemble.native_proba.model is not model  # the registry's copy
        np.testing.assert_array_equal(ensemble.predict(X), model.predict(X))
        np.testing.assert_allclose(
            ensemble.predict_proba(X), ensemble.exact_proba(X), rtol=0, atol=1e-6
        )


def test_a_lightgbm_text_model_keeps_the_exact_view(store, cancer):
    X, y = cancer
    model = lightgbm.LGBMClassifier(n_estimators=5, num_leaves=4, verbose=-1).fit(X, y)
    with mlflow.start_run(experiment_id=store):
        mlflow.lightgbm.log_model(model.booster_, name="model", registered_model_name="lgb")
    ensemble, _ = load_ensemble("models:/lgb/1")
    assert ensemble.native_proba is None
