"""Shared fixtures: telemetry off, and every test isolated from the user's mlflow.db."""

import os

os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
# One thread per OpenMP and BLAS pool (scikit-learn's histogram boosting, XGBoost,
# LightGBM, NumPy), in the tests and the processes they start: `make test` runs three
# workers on two cores, where each pool's threads wait, spinning, for cores the other
# workers hold (a three-class HistGradientBoosting test: 14 CPU s with a pool, 4 without)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# The environment `mlflow run` builds once per session (tests/test_mlproject.py, the
# README's pipeline): pip byte-compiles its 12,000 installed modules by default (about
# 28 CPU s); the runs then compile only the few hundred they import. Not PIP_NO_COMPILE=1:
# pip reads an --no-... option's variable as the option's value, so that one compiles
os.environ.setdefault("PIP_COMPILE", "false")
# as the govern CLI sets it (cli.common.configure_mlflow): in-process CLI runs print no bars
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import numpy as np
import pytest
from govern_forks import GovernForks
from mlflow_store import copy_store
from signing_keys import use_ci_key, use_session_policy

use_ci_key()
use_session_policy()


FIRST_FILES = (
    "test_readme.py",
    "test_mlproject.py",
    "test_server_faults.py",
    "test_campaign.py",
    "test_server_e2e.py",
    "test_setup.py",
    "test_server_requests.py",
    "test_server_refusals.py",
    "test_deployment.py",
    "test_faults.py",
    "test_signed_evidence.py",
    "test_fail_closed.py",
    "test_family_examples.py",
)
"""Files scheduled first, in this order: pytest-xdist hands whole files (``--dist
loadfile``) to the workers in collection order (:func:`pytest_configure`), so the longest
go first and the end of the run is short files on every worker, not one long file on one
(the top-level server tests were collected last). The README's commands are the longest file; the MLproject's
tests build the environment of ``mlflow run`` (a minute of pip) that the README's
``mlflow run`` then reuses instead of waiting for it; then the files that start servers
or run explains in child processes, each a minute or more of one worker."""


def pytest_configure(config):
    """``--no-loadscope-reorder``: pytest-xdist (3.8 here) otherwise hands out ``--dist
    loadfile``'s files by their number of tests, most first, whatever the collection order
    (the campaign's 73 tests first, the MLproject's environment built by the README's
    ``mlflow run``, the one-test server files in the last minutes)."""
    if hasattr(config.option, "loadscopereorder"):  # xdist installed
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        name = item.path.name
        return FIRST_FILES.index(name) if name in FIRST_FILES else len(FIRST_FILES)

    items.sort(key=rank)  # stable: the order within a file is kept


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory):
    """An empty MLflow SQLite store with MLflow's tables, made once per worker: each
    test starts from a copy (``_isolated_mlflow``) instead of running MLflow's schema
    migrations again (about a second of CPU per store)."""
    from mlflow import MlflowClient

    folder = tmp_path_factory.mktemp("store")
    path = folder / "mlflow.db"
    uri = f"sqlite:///{path}"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        MlflowClient(tracking_uri=uri, registry_uri=uri).search_registered_models()
    return path


@pytest.fixture(autouse=True)
def _isolated_mlflow(request, tmp_path, monkeypatch):
    """Point MLflow at a throw-away SQLite store (a copy of :func:`migrated_store`; none
    for tests marked ``no_store``); never the user's ./mlflow.db.

    ``govern --tracking-uri`` sets MLflow's process-wide URIs, which take precedence
    over the environment: they are cleared before the environment is set, and again
    after the test (with the active experiment), so a module-scoped fixture of the next
    module never inherits them.
    """
    import mlflow

    if request.node.get_closest_marker("no_store") is None:
        copy_store(request.getfixturevalue("migrated_store"), tmp_path / "mlflow.db")
    mlflow.set_tracking_uri(None)
    mlflow.set_registry_uri(None)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    yield
    mlflow.set_tracking_uri(None)
    mlflow.set_registry_uri(None)
    # ``mlflow.set_experiment`` (the family examples call it, as a user's script does)
    # leaves its experiment id in the environment and in the fluent API: the next test's
    # new store has no such experiment
    os.environ.pop("MLFLOW_EXPERIMENT_ID", None)
    mlflow.tracking.fluent._active_experiment_id = None


@pytest.fixture(scope="session")
def warm_forks(tmp_path_factory):
    """This worker's fork server (``tests/govern_forks.py``), started by the first test
    that asks for it (about 6 CPU s of imports, paid once per worker instead of 2-7 s by
    each ``govern`` or ``python -c`` child process of the tests that use it)."""
    folder = tmp_path_factory.mktemp("warm")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    with GovernForks({**env, "MLFLOW_DISABLE_TELEMETRY": "true"}, folder) as forks:
        yield forks


@pytest.fixture(scope="session")
def warm_bin(warm_forks, tmp_path_factory):
    """A folder of the stubs ``govern`` and ``python-forked`` (``govern_forks.PYTHON``):
    each runs its command (``python-forked -c CODE ARGS``: CODE as ``python -c``) in a
    process of its own forked from :func:`warm_forks`, with the caller's arguments,
    environment, folder and streams, and exits with its code (``128 + n`` for a signal
    ``n``)."""
    return warm_forks.stubs(tmp_path_factory.mktemp("warm-bin"))


@pytest.fixture(scope="session")
def breast_cancer():
    """Wisconsin diagnostic data (569 x 30) as a DataFrame and a label Series."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    return X, y


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def scaled_forest(breast_cancer):
    """MinMaxScaler + 10-tree depth-3 random forest Pipeline fitted on ``breast_cancer``."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler

    X, y = breast_cancer
    return make_pipeline(
        MinMaxScaler(), RandomForestClassifier(n_estimators=10, max_depth=3, random_state=0)
    ).fit(X, y)


@pytest.fixture(scope="session")
def small_forest():
    """30 normalized samples with 3 features, and a 10-tree depth-2 forest fitted on them."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.preprocessing import MinMaxScaler

    X, y = load_breast_cancer(return_X_y=True)
    rows = np.random.default_rng(0).choice(len(X), 30, replace=False)
    X = MinMaxScaler().fit_transform(X[rows][:, :3])
    forest = RandomForestClassifier(10, max_depth=2, random_state=0).fit(X, y[rows])
    return X, forest
