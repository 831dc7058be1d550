"""``govern explain --depth auto`` end to end on a small store: the estimator's depth
chosen on held-out folds (``MiretSurrogate(depth=None)``), recorded as ``depth`` =
``auto`` beside ``depth_chosen``, reused by an identical request and reproduced."""

import pytest
from mlflow import MlflowClient
from mlflow_store import register_sklearn
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.explain.defaults import AUTO_DEPTH, DEPTH_CHOSEN
from miret_governance.flavors.miret import load_model, read_evidence
from miret_governance.flavors.read.reproduce import reproduce_explanation
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.miret import MiretSurrogate

pytest_plugins = ["mlflow_store"]
FEATURES = ["mean radius", "mean texture", "mean perimeter", "worst area"]
TIME_LIMIT = 60
"""Far above the work budgets: the fit ends on work, so the same rows give the same tree."""


@pytest.fixture
def forest(store, breast_cancer, monkeypatch):
    """A 10-tree depth-4 forest of 250 rows registered as ``deep-rf``; ``data.csv``
    holds 150 of them, all fitted (the other 100, ``test.csv``, are the test rows)."""
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", store)
    X, y = breast_cancer
    frame = X[FEATURES].assign(label=y.to_numpy())
    train, test = frame.iloc[:150], frame.iloc[150:250]
    train.to_csv("data.csv", index=False)
    test.to_csv("test.csv", index=False)
    model = make_pipeline(
        MinMaxScaler(), RandomForestClassifier(n_estimators=10, max_depth=4, random_state=0)
    ).fit(frame[FEATURES].iloc[:250], frame["label"].iloc[:250])
    register_sklearn(model, "deep-rf")
    return model, train


def _explain(*options):
    args = ["explain", "--model-uri", "models:/deep-rf/1", "--data", "data.csv"]
    args += ["--test-data", "test.csv", "--target", "label", "--min-test-rows", "1"]
    return CliRunner().invoke(app, [*args, "--time-limit", str(TIME_LIMIT), *options])


def test_depth_auto_is_the_estimators_choice_recorded_reused_and_reproduced(forest):
    model, train = forest
    done = _explain("--depth", AUTO_DEPTH)
    assert done.exit_code == 0, done.output
    (version,) = MlflowClient().search_model_versions("name = 'deep-rf-surrogate'")
    params = MlflowClient().get_run(version.run_id).data.params
    provenance = read_evidence("models:/deep-rf-surrogate/1")["provenance"]

    # an independent fit of the estimator on the same rows chooses the same depth
    ensemble = read_ensemble(model)
    rows = train[FEATURES]
    direct = MiretSurrogate(
        ensemble.weighted_by_data(ensemble.transform(rows)), depth=None, time_limit=TIME_LIMIT
    ).fit(rows)
    fitted = load_model("models:/deep-rf-surrogate/1")
    assert params["depth"] == AUTO_DEPTH and params[DEPTH_CHOSEN] == str(direct.depth_)
    assert fitted.tree_.depth == direct.tree_.depth == direct.depth_
    assert provenance["request"]["fit"]["depth"] is None
    assert provenance["parameters"]["depth"] == AUTO_DEPTH
    assert provenance["parameters"][DEPTH_CHOSEN] == direct.depth_
    assert provenance["tree_digest"] == direct.tree_digest()

    again = _explain("--depth", "auto")
    assert again.exit_code == 0 and "Reused models:/deep-rf-surrogate/1" in again.output
    reproduction = reproduce_explanation("models:/deep-rf/1", "data.csv", test_data="test.csv")
    assert reproduction.identical, reproduction.to_json()
