"""The MLproject: its parameters, its environment, and real ``mlflow run`` invocations with
MLflow's default environment manager (virtualenv, built from python_env.yaml)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from mlflow.projects._project_spec import load_project
from mlflow_store import register_rf
from project_copy import copy_project, mlflow_env_root, one_mlflow_run_at_a_time
from signing_keys import keys_toml

from miret_governance.flavors.explain.defaults import AUTO_DEPTH, ENSEMBLE_DEPTH, parse_depth
from miret_governance.flavors.explain.request import MIN_TEST_ROWS
from miret_governance.governance.miret import MiretSearchCV, MiretSurrogate

pytest_plugins = ["mlflow_store"]
ROOT = Path(__file__).resolve().parents[1]
FEATURES = ["mean radius", "mean texture", "worst area"]
PYTHON_ENV = yaml.safe_load((ROOT / "python_env.yaml").read_text())


def _entry_points():
    return yaml.safe_load((ROOT / "MLproject").read_text())["entry_points"]


def test_explain_defaults_match_the_estimator():
    params = _entry_points()["explain"]["parameters"]
    defaults = MiretSurrogate().get_params()
    for name in ("alpha", "proximity_threshold"):  # "": chosen on held-out folds
        assert defaults[name] is None and params[name]["default"] == "", name
    for name in (
        "gamma_percentile",
        "max_rows",
        "generated_rows",
        "time_limit",
        "solver",
    ):
        assert params[name]["default"] == defaults[name], name
    assert params["seed"]["default"] == defaults["random_state"]
    # a string: a number, or auto (MLflow's float would refuse it)
    assert params["depth"] == {"type": "string", "default": str(ENSEMBLE_DEPTH)}
    assert params["min_test_rows"]["default"] == MIN_TEST_ROWS
    search = MiretSearchCV(None).get_params()
    for name in ("search_time_limit", "cv", "tolerance", "backend"):
        assert params[name]["default"] == search[name], name
    assert params["search"]["default"] == "no-search"
    command = _entry_points()["explain"]["command"]
    for name in params:
        assert "{" + name + "}" in command
    assert "--{search} " in command
    assert params["supersede"]["default"] == "no-supersede"
    assert "--{supersede}" in _entry_points()["pipeline"]["command"]


def test_parameters_mean_the_same_in_every_entry_point():
    """A name has one type and one default everywhere; the model, the data and its label
    column are always required; seed is a whole number (MLflow has no integer type)."""
    specs = {}
    for entry in _entry_points().values():
        for name, spec in entry["parameters"].items():
            specs.setdefault(name, []).append(spec)
    for name, seen in specs.items():
        assert all(spec == seen[0] for spec in seen), name
    assert specs["model_uri"][0] == {"type": "string"}
    assert specs["data"][0] == {"type": "path"}
    assert specs["target"][0] == {"type": "string"}
    assert specs["seed"][0] == {"type": "float", "default": 0}
    assert len(specs["seed"]) == 2 and len(specs["data"]) == 3  # gate recomputes on data


@pytest.mark.parametrize(("given", "depth"), [({}, ENSEMBLE_DEPTH), ({"depth": "auto"}, None)])
def test_depth_reaches_the_command_as_govern_explain_parses_it(given, depth):
    spec = load_project(str(ROOT))
    params = {"model_uri": "models:/m/1", "data": "data.csv", "target": "label", **given}
    command = spec.get_entry_point("explain").compute_command(params, None)
    passed = re.search(r"--depth (\S+)", command).group(1)
    assert parse_depth(passed) == depth
    assert (passed == AUTO_DEPTH) == (depth is None)


@pytest.mark.parametrize(
    ("given", "expected"),
    [({}, []), ({"policy": "my policy.toml"}, ["--policy", "my policy.toml"])],
)
def test_an_empty_optional_file_is_left_out_of_the_command(given, expected, tmp_path):
    """MLflow fills ``{policy}`` with ``''``; bash then drops ``--policy`` altogether."""
    spec = load_project(str(ROOT))
    command = spec.get_entry_point("promote").compute_command(
        {"model_uri": "models:/m/1", **given}, None
    )
    shown = command.replace("python -m miret_governance.cli", "printf '%s\\n'")
    done = subprocess.run(["bash", "-c", shown], capture_output=True, text=True, check=True)
    called = ["promote", "--model-uri", "models:/m/1", "--alias", "champion"]
    assert done.stdout.splitlines() == [*called, *expected]


def test_the_inventory_job_logs_its_run_and_takes_the_policy():
    spec = load_project(str(ROOT))
    assert spec.get_entry_point("inventory").parameters["policy"].default == ""
    command = spec.get_entry_point("inventory").compute_command({"policy": "org.toml"}, None)
    shown = command.replace("python -m miret_governance.cli", "printf '%s\\n'")
    done = subprocess.run(["bash", "-c", shown], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["inventory", "--log-run", "--policy", "org.toml"]


def test_the_environment_installs_this_project_under_the_lock():
    assert load_project(str(ROOT)).env_config_path == str(ROOT / "python_env.yaml")
    assert PYTHON_ENV["dependencies"] == ["-c constraints.txt", "."]
    assert PYTHON_ENV["build_dependencies"][0] == "-c constraints.txt"
    lock = (ROOT / "constraints.txt").read_text()
    resolved_for = re.search(r"Resolved for CPython (\d+\.\d+)", lock).group(1)
    assert PYTHON_ENV["python"].startswith(resolved_for + ".")
    for package in PYTHON_ENV["build_dependencies"][1:]:
        assert re.search(rf"^{package}==", lock, re.MULTILINE), package


def _pyenv_has_the_python() -> bool:
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return False
    found = subprocess.run(
        [pyenv, "prefix", PYTHON_ENV["python"]], check=False, capture_output=True
    )
    return found.returncode == 0


needs_pyenv = pytest.mark.skipif(
    not _pyenv_has_the_python(),
    reason=f"MLflow's virtualenv manager needs pyenv with Python {PYTHON_ENV['python']} "
    f"(else it compiles it: minutes); `pyenv install {PYTHON_ENV['python']}`",
)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """This checkout, copied: the runs' ``./mlruns`` and pip's build stay out of it."""
    return copy_project(tmp_path_factory.mktemp("project"))


@pytest.fixture(scope="module")
def env_root(tmp_path_factory):
    """A fresh MLflow environment root for this test session (shared with
    tests/test_readme.py): the first run builds the environment from this checkout
    (about a minute), the next ones reuse it."""
    return mlflow_env_root(tmp_path_factory)


def _mlflow_run(project, entry_point, params, experiment_id, env_root, cwd):
    """``mlflow run`` of this project with the default environment manager, from a PATH
    without this interpreter's folder: the command's ``python`` is the built one."""
    here = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != here)
    env = {**os.environ, "PATH": path, "MLFLOW_ENV_ROOT": str(env_root)}
    command = [sys.executable, "-m", "mlflow", "run", str(project), "-e", entry_point]
    for name, value in params.items():
        command += ["-P", f"{name}={value}"]
    with one_mlflow_run_at_a_time(env_root):
        done = subprocess.run(
            [*command, "--experiment-id", experiment_id],
            check=False,
            env=env,
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = MlflowClient().search_runs(
        [experiment_id], filter_string=f"tags.`mlflow.project.entryPoint` = '{entry_point}'"
    )
    assert run.data.tags["mlflow.project.env"] == "virtualenv"
    return run


def _register(breast_cancer, store, name):
    X, y = breast_cancer
    frame = X[FEATURES].iloc[:120].assign(label=y.iloc[:120].to_numpy())
    frame.to_csv("data.csv", index=False)
    register_rf(frame, FEATURES, name, n_estimators=10, experiment_id=store)


@pytest.mark.slow
@needs_pyenv
def test_mlflow_run_pipeline(project, store, breast_cancer, tmp_path, env_root):
    _register(breast_cancer, store, "pipe-rf")
    (tmp_path / "policy.toml").write_text(
        "[gates]\nmin_fidelity = 0.5\nmax_features = 3\n" + keys_toml()
    )
    params = {
        "model_uri": "models:/pipe-rf/1",
        "data": "data.csv",  # a path: MLflow resolves it where `mlflow run` runs
        "target": "label",
        "policy": tmp_path / "policy.toml",
        "time_limit": 3,
        "seed": 1,
        "min_test_rows": 1,  # 120 rows: 24 test rows
    }
    run = _mlflow_run(project, "pipeline", params, store, env_root, tmp_path)
    client = MlflowClient()
    (surrogate,) = client.search_model_versions("name = 'pipe-rf-surrogate'")
    assert surrogate.run_id == run.info.run_id
    ensemble = client.get_model_version("pipe-rf", "1")
    assert ensemble.tags["governance.surrogate"] == "models:/pipe-rf-surrogate/1"
    assert ensemble.tags["governance.last_gate"] == "PASS"


@pytest.mark.slow
@needs_pyenv
def test_mlflow_run_explain_with_search(project, store, breast_cancer, tmp_path, env_root):
    _register(breast_cancer, store, "proj-rf")
    params = {
        "model_uri": "models:/proj-rf/1",
        "data": tmp_path / "data.csv",
        "target": "label",
        "time_limit": 3,
        "search": "search",
        "search_grid": '{"alpha": [0.2, 0.8]}',
        "cv": 2,
        "search_time_limit": 1,
        "min_test_rows": 1,
    }
    run = _mlflow_run(project, "explain", params, store, env_root, tmp_path)
    client = MlflowClient()
    (surrogate,) = client.search_model_versions("name = 'proj-rf-surrogate'")
    assert surrogate.tags["governance.surrogate_of"] == "models:/proj-rf/1"
    assert run.info.run_id == surrogate.run_id
    assert run.data.params["ensemble_uri"] == "models:/proj-rf/1"
    assert "train_fidelity" in run.data.metrics
    children = client.search_runs(
        [store], filter_string=f"tags.`mlflow.parentRunId` = '{run.info.run_id}'"
    )
    assert sorted(c.data.params["alpha"] for c in children) == ["0.2", "0.8"]
    assert run.data.params["search.cv"] == "2"
    chosen = [c for c in children if c.data.tags["governance.search.chosen"] == "true"]
    assert run.data.params["alpha.resolved"] == chosen[0].data.params["alpha"]
