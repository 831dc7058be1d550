"""The examples of ``examples/families/``, one per model family, run end to end in a
temporary store: each model is registered the way its MLflow flavor stores it (skops for
scikit-learn), then ``govern explain``, ``gate`` and ``promote`` run as typed, and the
registry holds a linked, signed surrogate, a passing gate record and the alias.

The fidelity bands are those of the recorded runs (fixed seeds; HiGHS on one thread),
widened by one or two test rows each way, so that a fit cut short by the wall-clock cap on
a loaded machine does not decide the test; the exact row counts come from the seeded
holdout and do not depend on the solver."""

import importlib
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient

pytest_plugins = ["mlflow_store"]
FAMILIES = Path(__file__).resolve().parents[3] / "examples" / "families"


@pytest.fixture
def example(store, tmp_path, monkeypatch):
    """Run ``examples/families/<name>.py``'s ``main`` on this test's store and folder."""
    monkeypatch.syspath_prepend(str(FAMILIES))

    def run(name: str, **options):
        module = importlib.import_module(name)
        return module.main(mlflow.get_tracking_uri(), tmp_path, **options)

    return run


def governed_and_promoted(governed, name: str, gates: set) -> dict:
    """The checks every family shares: all three commands succeeded, the surrogate
    version is linked both ways, every gate of the policy passed (the fidelity was
    recomputed exactly on the data), and ``@champion`` is on the ensemble version.
    Returns the surrogate's metrics."""
    ensemble, surrogate = f"models:/{name}/1", f"models:/{name}-surrogate/1"
    assert governed.exit_codes == {"explain": 0, "gate": 0, "promote": 0}
    assert governed.ensemble_uri == ensemble
    assert (governed.shown["ensemble_uri"], governed.shown["surrogate_uri"]) == (
        ensemble,
        surrogate,
    )
    client = MlflowClient()
    assert client.get_model_version(name, "1").tags["governance.surrogate"] == surrogate
    linked = client.get_model_version(f"{name}-surrogate", "1").tags
    assert linked["governance.surrogate_of"] == ensemble
    assert linked["governance.validation"] == "passed"
    assert governed.gate["passed"] and governed.gate["surrogate_uri"] == surrogate
    results = {gate["name"]: gate for gate in governed.gate["gates"]}
    assert set(results) == gates | {"recomputed_fidelity"}
    assert all(gate["passed"] for gate in results.values()), results
    assert results["recomputed_fidelity"]["threshold"] == "reproduced exactly"
    assert str(client.get_model_version_by_alias(name, "champion").version) == "1"
    assert governed.shown["aliases"] == ["champion"]
    assert governed.shown["status"]["governance.promotion.champion"] == "promoted"
    assert governed.shown["signed_by"]["name"] == "example"
    return governed.metrics


LENIENT = {"min_fidelity", "max_features", "min_proximity_agreement", "require_validation_pass"}


def test_lightgbm_booster_with_missing_values(example):
    governed = example("lightgbm_missing")
    metrics = governed_and_promoted(governed, "wisconsin-lightgbm", LENIENT)
    folder = mlflow.artifacts.download_artifacts("models:/wisconsin-lightgbm/1")
    assert (Path(folder) / "model.lgb").is_file()  # LightGBM's text model, not a pickle
    # recorded: 108 of 114 test rows (0.947), 30 of 33 with a missing value, 3 features
    assert metrics["n_test_rows"] == 114 and metrics["n_test_missing_rows"] == 33
    assert 0.93 <= metrics["test_fidelity"] <= 0.97
    assert 0.87 <= metrics["test_fidelity_missing_rows"] <= 0.95
    assert metrics["n_features_used"] <= 3
    assert "\nmissing values: " in governed.shown["rules"]


def test_hist_gradient_boosting_with_categories_and_missing_values(example):
    governed = example("hist_gradient_boosting_categorical")
    metrics = governed_and_promoted(governed, "credit-hgb", LENIENT)
    folder = mlflow.artifacts.download_artifacts("models:/credit-hgb/1")
    assert (Path(folder) / "model.skops").is_file()
    # recorded: 92 of 100 test rows (0.92), 14 of 18 with a missing value (the MIRET of
    # an hour earlier: 94 and 16)
    assert metrics["n_test_rows"] == 100 and metrics["n_test_missing_rows"] == 18
    assert 0.90 <= metrics["test_fidelity"] <= 0.96
    assert 0.72 <= metrics["test_fidelity_missing_rows"] <= 0.95
    surrogate = mlflow.artifacts.download_artifacts("models:/credit-hgb-surrogate/1")
    figure = (Path(surrogate) / "figures" / "surrogate_tree.svg").read_text(encoding="utf-8")
    assert "[purpose = business]" in figure and "income" in figure  # original columns
    assert "cat__" not in figure and "num__" not in figure
    shown = governed.shown["rules"]  # govern show prints the rules explain signed
    assert "[purpose = business]" in shown and "cat__" not in shown and "num__" not in shown


@pytest.mark.parametrize(
    "model, flavor_file", [("forest", "model.skops"), ("xgboost", "model.ubj")]
)
def test_three_class_model_is_gated_per_class(example, model, flavor_file):
    governed = example("three_class", model=model)
    name = f"wine-{model}"
    metrics = governed_and_promoted(governed, name, LENIENT | {"min_class_fidelity"})
    folder = mlflow.artifacts.download_artifacts(f"models:/{name}/1")
    assert (Path(folder) / flavor_file).is_file()
    # recorded (both models): 34 of 36 test rows (0.944); per class 1, 0.929, 0.9
    assert metrics["n_test_rows"] == 36
    assert 0.91 <= metrics["test_fidelity"] <= 0.98
    per_class = [metrics[f"test_fidelity_class_{label}"] for label in range(3)]
    assert min(per_class) >= 0.8
    (gate,) = [g for g in governed.gate["gates"] if g["name"] == "min_class_fidelity"]
    assert gate["value"] == min(per_class)
    surrogate = Path(mlflow.artifacts.download_artifacts(f"models:/{name}-surrogate/1"))
    per_class_vite = list((surrogate / "vite").glob("class_*/level_frequency.csv"))
    assert len(per_class_vite) == (3 if model == "xgboost" else 0)  # one tree per class
    leaves = [line for line in governed.shown["rules"].splitlines() if line.startswith("if ")]
    assert {line.split(" then ")[1].split(" (")[0] for line in leaves} == {
        "cultivar_1",
        "cultivar_2",
        "cultivar_3",
    }
