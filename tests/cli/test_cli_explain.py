"""``govern explain`` and ``govern show``: help, exit codes, and a real subprocess run."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from mlflow import MlflowClient
from mlflow_store import register_wisconsin_rf
from typer.testing import CliRunner

from miret_governance.cli import explain, show

pytest_plugins = ["mlflow_store"]
ROOT = Path(__file__).resolve().parents[2]
FEATURES = ["mean radius", "mean texture", "mean perimeter", "worst area"]


@pytest.fixture
def app():
    app = typer.Typer()
    explain.register(app)
    show.register(app)
    return app


@pytest.fixture
def registered(store, breast_cancer, monkeypatch):
    """A registered RF Pipeline and its data in a fresh (copied) store."""
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", store)
    return register_wisconsin_rf(breast_cancer, FEATURES, rows=150, n_estimators=10)


def test_help_lists_every_option(app):
    runner = CliRunner()
    result = runner.invoke(app, ["explain", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in (
        "--model-uri",
        "--data",
        "--target",
        "--test-data",
        "--depth",
        "--alpha",
        "--gamma-percentile",
        "--proximity-threshold",
        "--solver",
        "--time-limit",
        "--seed",
        "--registered-name",
        "--tracking-uri",
        "--force",
        "--no-force",
        "--supersede",
        "--no-supersede",
        "--policy",
        "--allow-invalid",
        "--no-allow-invalid",
        "--search",
        "--search-grid",
        "--search-time-limit",
        "--cv",
        "--tolerance",
        "--n-jobs",
        "--backend",
        "--ray-address",
    ):
        assert option in result.output
    assert "whole surrogate fit" in result.output
    shown = runner.invoke(app, ["show", "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "--model-uri" in shown.output


def test_errors_exit_2_and_validation_failure_exits_1(app, registered):
    runner = CliRunner()
    bad = runner.invoke(app, ["explain", "--model-uri", "credit-rf", "--data", "data.csv"])
    assert bad.exit_code == 2 and "models:/<name>/<version>" in bad.output
    markup = runner.invoke(app, ["explain", "--model-uri", "models:/[/]x", "--data", "data.csv"])
    assert markup.exit_code == 2 and "'models:/[/]x' is not of the form" in markup.output
    missing = runner.invoke(
        app, ["explain", "--model-uri", "models:/credit-rf/1", "--data", "nowhere.csv"]
    )
    assert missing.exit_code == 2 and "--data nowhere.csv does not exist" in missing.output
    registered.drop(columns=["worst area"]).to_csv("bad.csv", index=False)
    invalid = runner.invoke(
        app,
        ["explain", "--model-uri", "models:/credit-rf/1", "--data", "bad.csv", "--target", "label"],
    )
    assert invalid.exit_code == 1 and "worst area" in invalid.output
    assert MlflowClient().search_model_versions("name = 'credit-rf-surrogate'") == []
    not_surrogate = runner.invoke(app, ["show", "--model-uri", "models:/credit-rf/1"])
    assert not_surrogate.exit_code == 2 and "has no linked surrogate" in not_surrogate.output
    assert "govern explain --model-uri models:/credit-rf/1" in not_surrogate.output
    unknown = runner.invoke(app, ["show", "--model-uri", "models:/credit-rf/7"])
    assert (
        unknown.exit_code == 2 and "-m mlflow ui --backend-store-uri sqlite:///" in unknown.output
    )
    assert "mlflow models" not in unknown.output


def test_show_from_the_ensemble_follows_the_link(app, registered):
    from miret_governance.flavors.explain.explain import explain_model_version
    from miret_governance.governance.measures.metrics import fidelity_with_interval

    result = explain_model_version(
        "models:/credit-rf/1", "data.csv", target="label", time_limit=2, min_test_rows=1
    )
    client = MlflowClient()
    client.set_registered_model_alias("credit-rf", "champion", "1")
    client.set_model_version_tag("credit-rf", "1", "governance.last_gate", "FAIL")
    client.set_model_version_tag("credit-rf", "1", "governance.promotion.champion", "promoted")
    shown = CliRunner().invoke(
        app, ["show", "--model-uri", "models:/credit-rf@champion"], env={"COLUMNS": "200"}
    )
    assert shown.exit_code == 0, shown.output
    out = shown.output
    headline, technical = out.split("Technical details\n", 1)
    assert headline.startswith("models:/credit-rf-surrogate/1 explains models:/credit-rf/1\n")
    fidelity = fidelity_with_interval(result.metrics)
    cart = result.metrics["baseline_cart_test_fidelity"]
    assert f"\nfidelity on test rows: {fidelity}; plain tree (CART) {100 * cart:.1f}%\n" in out
    assert "\n  aliases: @champion\n  promotion @champion: promoted\n" in headline
    # a gate whose run names no alias is a what-if, never the version's verdict
    assert "\n  what-if gate (no alias) under unknown policy: FAIL\n" in headline
    assert "governance.last_gate" not in out and "solver" not in headline
    assert f"after {result.solve['wall_time']:.1f} s" in technical and "(solver: " in technical
    assert "MIRET vs the CART baseline" in technical and "baseline_cart_test_fidelity" in technical
    assert "solve_optimal" not in out and "solver.gap" in technical
    from_surrogate = CliRunner().invoke(app, ["show", "--model-uri", result.surrogate_uri])
    assert from_surrogate.exit_code == 0
    assert "promotion @champion: promoted" in from_surrogate.output


@pytest.mark.no_store
def test_read_only_commands_never_create_a_store(tmp_path, monkeypatch):
    from miret_governance.cli.gates import register as register_gates

    app = typer.Typer()
    explain.register(app)
    show.register(app)
    register_gates(app)
    missing = tmp_path / "elsewhere" / "mlflow.db"
    (tmp_path / "data.csv").write_text("x\n1\n")  # files are checked first
    runner = CliRunner()
    for args in (
        ["show", "--model-uri", "models:/credit-rf/1", "--tracking-uri", f"sqlite:///{missing}"],
        [
            "validate",
            "--model-uri",
            "models:/credit-rf/1",
            "--data",
            "data.csv",
            "--tracking-uri",
            f"sqlite:///{missing}",
        ],
    ):
        done = runner.invoke(app, args, env={"COLUMNS": "300"})
        assert done.exit_code == 2, done.output
        assert f"no MLflow store at {missing}" in done.output
        assert "--tracking-uri" in done.output
    assert not missing.parent.exists()
    # the default store of this test (MLFLOW_TRACKING_URI) does not exist either
    done = runner.invoke(app, ["show", "--model-uri", "models:/credit-rf/1"])
    assert done.exit_code == 2 and "no MLflow store at" in done.output
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_govern_explain_and_show_in_subprocess(app, registered, tmp_path):
    """The first explain in a process of its own (its exit code, stdout and stderr); the
    reuse and ``show`` after it in this one (a process costs seconds of imports)."""
    env = {**os.environ, "COLUMNS": "160"}
    args = [
        sys.executable,
        "-m",
        "miret_governance.cli",
        "explain",
        "--model-uri",
        "models:/credit-rf/1",
        "--data",
        "data.csv",
        "--target",
        "label",
        "--time-limit",
        "3",
        "--min-test-rows",
        "1",
    ]
    done = subprocess.run(
        args, check=False, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=180
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Registered models:/credit-rf-surrogate/1" in out
    assert re.search(r"^if .* then [01] \(", out, re.MULTILINE) and "train_fidelity" in out
    assert f"mlflow ui --backend-store-uri {os.environ['MLFLOW_TRACKING_URI']}" in out
    assert "#/models/credit-rf-surrogate/versions/1" in out
    assert "solve (MILP)" in done.stderr and "register" in done.stderr

    again = CliRunner().invoke(app, args[3:], env={"COLUMNS": "160"})
    assert again.exit_code == 0 and "Reused models:/credit-rf-surrogate/1" in again.stdout

    shown = CliRunner().invoke(
        app, ["show", "--model-uri", "models:/credit-rf-surrogate/1"], env={"COLUMNS": "160"}
    )
    assert shown.exit_code == 0, shown.output
    assert "models:/credit-rf-surrogate/1 explains models:/credit-rf/1" in shown.stdout
    assert (
        re.search(r"^if .* then [01] \(", shown.stdout, re.MULTILINE)
        and "test_fidelity" in shown.stdout
    )
