"""Reuse, concurrency, interrupts, kills and unreachable servers leave the store consistent."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from govern_forks import PYTHON
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow_store import interruptible_cli, linked_versions, register_wisconsin_rf

from miret_governance.flavors.errors import ExplainError, GovernanceError
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.store.registry import (
    SURROGATE_TAG,
    link_surrogate,
    resolve_model_version,
    set_version_tag,
)

pytest_plugins = ["mlflow_store"]
ROOT = Path(__file__).resolve().parents[3]
FEATURES = ["mean radius", "mean texture", "mean perimeter", "worst area"]
SMALL = {"target": "label", "time_limit": 2, "min_test_rows": 1}
"""Explain options for the 120-row data (24 test rows: below the default minimum)."""


@pytest.fixture
def registered(store, breast_cancer, monkeypatch):
    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", store)
    register_wisconsin_rf(breast_cancer, FEATURES, rows=120, n_estimators=5)
    return store


def _link():
    return MlflowClient().get_model_version("credit-rf", "1").tags[SURROGATE_TAG]


def _versions(name="credit-rf-surrogate"):
    return sorted(int(v.version) for v in MlflowClient().search_model_versions(f"name = '{name}'"))


def _explain_runs(experiment_id):
    return MlflowClient().search_runs(
        [experiment_id], "tags.`governance.ensemble_uri` = 'models:/credit-rf/1'"
    )


def _live_models(experiment_id):
    return MlflowClient().search_logged_models(experiment_ids=[experiment_id])


def test_reuse_moves_the_link_to_the_reused_version(registered):
    first = explain_model_version("models:/credit-rf/1", "data.csv", **SMALL)
    other = explain_model_version("models:/credit-rf/1", "data.csv", **SMALL, alpha=0.7)
    assert (first.version, other.version) == ("1", "2")
    assert _link() == "models:/credit-rf-surrogate/2"
    again = explain_model_version("models:/credit-rf/1", "data.csv", **SMALL)
    assert again.reused and again.surrogate_uri == "models:/credit-rf-surrogate/1"
    assert _link() == "models:/credit-rf-surrogate/1"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"alpha": float("nan")}, "'alpha' parameter"),
        ({"time_limit": -1.0}, "'time_limit' parameter"),
        ({"depth": -1}, "'depth' parameter"),
        ({"depth": 9}, "depth must be at most 8"),
        ({"max_rows": 1}, "'max_rows' parameter"),
        ({"registered_name": "a/b"}, "contains '/'"),
        ({"registered_name": 'it\'s "x"'}, "both ' and"),
        ({"test_size": 1.5}, "test_size must be in"),
    ],
)
def test_parameters_and_names_are_checked_before_any_work(store, option, message):
    with pytest.raises(ExplainError, match=message):
        explain_model_version("models:/nowhere/1", "missing.csv", **option)
    assert MlflowClient().search_runs([store]) == []


def _silent_server():
    """A socket that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server


def test_unreachable_server_is_named_not_a_missing_model(monkeypatch):
    server = _silent_server()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    try:
        for port in (server.getsockname()[1], closed_port):
            uri = f"http://127.0.0.1:{port}"
            monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
            monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
            with pytest.raises(GovernanceError, match="unreachable"):
                explain_model_version("models:/credit-rf/1", "data.csv")
            with pytest.raises(GovernanceError, match="unreachable") as info:
                resolve_model_version(MlflowClient(), "models:/credit-rf/1")
            assert "not found" not in str(info.value)
    finally:
        server.close()


def test_failed_registration_leaves_a_failed_run_and_no_logged_model(registered, monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("registry refused")

    monkeypatch.setattr(mlflow, "register_model", refuse)
    with pytest.raises(RuntimeError, match="refused"):
        explain_model_version("models:/credit-rf/1", "data.csv", **SMALL)
    (run,) = _explain_runs(registered)
    assert run.info.status == "FAILED"
    assert [m for m in _live_models(registered) if m.source_run_id == run.info.run_id] == []
    assert _versions() == []


CHILD = """
import json, os, sys, time
from pathlib import Path
import miret_governance.flavors.explain.explain as explain

barrier = Path(sys.argv[1])
original = explain.register_surrogate

def register_together(*args, **kwargs):
    (barrier / str(os.getpid())).touch()
    deadline = time.time() + 120
    while len(list(barrier.iterdir())) < 2 and time.time() < deadline:
        time.sleep(0.05)
    return original(*args, **kwargs)

explain.register_surrogate = register_together
result = explain.explain_model_version(
    "models:/credit-rf/1", "data.csv", target="label", time_limit=2, min_test_rows=1,
    alpha=0.5, proximity_threshold=0.9,  # given: the test is about the race, not the choice
)
print(json.dumps({"version": result.version, "reused": result.reused}))
"""


def _child_env(store):
    env = {**os.environ, "MLFLOW_EXPERIMENT_ID": store, "PYTHONPATH": str(ROOT)}
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    return env


@pytest.mark.slow
def test_two_concurrent_explains_register_one_version(registered, tmp_path, warm_bin):
    """Two processes forked from the worker's warm one (``warm_bin``: the imports paid
    once; each process its own explain, store connections and exit code)."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    children = [
        subprocess.Popen(
            [warm_bin / PYTHON, "-c", CHILD, str(barrier)],
            env=_child_env(registered),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outcomes = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    assert len(list(barrier.iterdir())) == 2  # both passed the reuse check before registering
    assert sorted(o["reused"] for o in outcomes) == [False, True]
    assert {o["version"] for o in outcomes} == {"1"}
    assert _versions() == [1]
    assert _link() == "models:/credit-rf-surrogate/1"
    runs = _explain_runs(registered)
    assert sorted(r.info.status for r in runs) == ["FINISHED", "FINISHED"]
    assert len(_live_models(registered)) == 2  # the ensemble's and the winner's surrogate
    client = MlflowClient()
    links = client.search_runs([client.get_experiment_by_name("governance-links").experiment_id])
    # one signed link record per explain, both to the winner
    assert [r.data.tags["governance.surrogate_uri"] for r in links] == [_link(), _link()]


def test_a_link_written_meanwhile_by_a_concurrent_explain_is_not_an_error(store, monkeypatch):
    """MLflow's SQL store writes a tag by select-then-insert. Here the other explain,
    linking the same winner, commits its tag between this one's select and insert, so
    this insert violates the unique key (the race two concurrent explains can lose)."""
    from mlflow.store.model_registry.dbmodels.models import SqlModelVersionTag
    from sqlalchemy.orm import Session

    client = MlflowClient()
    linked_versions(store, {})
    client.delete_model_version_tag("credit-rf", "1", SURROGATE_TAG)
    ensemble = client.get_model_version("credit-rf", "1")
    surrogate = client.get_model_version("credit-rf-surrogate", "1")
    real_merge, raced = Session.merge, []

    def merge_after_the_other_commits(session, instance, **kwargs):
        merged = real_merge(session, instance, **kwargs)  # selected: no tag yet
        if isinstance(instance, SqlModelVersionTag) and not raced:
            raced.append(instance.key)
            MlflowClient().set_model_version_tag(
                instance.name, instance.version, instance.key, instance.value
            )
        return merged

    monkeypatch.setattr(Session, "merge", merge_after_the_other_commits)
    link_surrogate(client, ensemble, surrogate)
    assert raced == [SURROGATE_TAG]
    assert _link() == "models:/credit-rf-surrogate/1"


def test_a_tag_write_that_fails_otherwise_is_not_retried(store):
    """Only a unique-constraint refusal is the race: a locked store is not waited for
    twice."""
    client, calls = MlflowClient(), []
    linked_versions(store, {})

    def locked(*args):
        calls.append(args)
        raise MlflowException("(sqlite3.OperationalError) database is locked")

    client.set_model_version_tag = locked
    with pytest.raises(MlflowException, match="locked"):
        set_version_tag(client, "credit-rf", "1", SURROGATE_TAG, "models:/other/1")
    assert calls == [("credit-rf", "1", SURROGATE_TAG, "models:/other/1")]
    assert _link() == "models:/credit-rf-surrogate/1"


def test_a_dataset_inserted_by_a_concurrent_run_is_linked_not_an_error(store, monkeypatch):
    """Two explains of one data set can race to insert it; the loser's unique-constraint
    error is followed by a retry that links the dataset the winner created."""
    from miret_governance.flavors.explain import stages

    frame = pd.DataFrame({"x": [0.1, 0.2], "label": [0, 1]})
    data = mlflow.data.from_pandas(frame, name="train.csv", targets="label")
    real, calls = mlflow.log_input, []

    def racing(dataset, context=None, **kwargs):
        calls.append(context)
        if len(calls) == 1:  # the other run commits the same dataset first
            with mlflow.start_run(experiment_id=store, nested=True):
                real(dataset, context="training")
            raise MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets")
        return real(dataset, context=context, **kwargs)

    monkeypatch.setattr(mlflow, "log_input", racing)
    with mlflow.start_run(experiment_id=store) as run:
        stages.log_dataset(data, "training")
    (logged,) = MlflowClient().get_run(run.info.run_id).inputs.dataset_inputs
    assert logged.dataset.name == "train.csv" and calls == ["training", "training"]
    monkeypatch.setattr(
        mlflow, "log_input", lambda *a, **k: (_ for _ in ()).throw(MlflowException("disk I/O"))
    )
    with mlflow.start_run(experiment_id=store), pytest.raises(MlflowException, match="disk"):
        stages.log_dataset(data, "training")  # any other error is not retried


def _start_cli_explain(store, tmp_path):
    """``govern explain`` on a problem that keeps the solver busy for its time limit."""
    args = [
        "explain",
        "--model-uri",
        "models:/credit-rf/1",
        "--data",
        "data.csv",
        "--target",
        "label",
        "--depth",
        "3",
        "--time-limit",
        "120",
        "--alpha",  # given: the test is about faults, not the choice of alpha and m
        "0.5",
        "--proximity-threshold",
        "0.9",
    ]
    child = subprocess.Popen(
        interruptible_cli(*args),
        env=_child_env(store),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    prefix = f"explain-{child.pid}-"
    while time.time() < deadline:  # the VITE figures are drawn during the solve
        folders = list(Path(tempfile.gettempdir()).glob(f"{prefix}*"))
        if folders and (folders[0] / "figures").is_dir():
            return child, prefix
        assert child.poll() is None, child.communicate()
        time.sleep(0.1)
    child.kill()
    pytest.fail("explain never reached the solve")


@pytest.fixture
def big_registered(store, monkeypatch):
    """Noisy synthetic data (2000 x 20) and a depth-4 forest: a depth-3 solve that
    keeps HiGHS busy for several seconds."""
    import pandas as pd
    from mlflow_store import register_sklearn
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler

    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", store)
    X, y = make_classification(2000, 20, n_informative=12, flip_y=0.2, random_state=0)
    X = pd.DataFrame(X, columns=[f"f{i}" for i in range(20)])
    X.assign(label=y).to_csv("data.csv", index=False)
    model = make_pipeline(MinMaxScaler(), RandomForestClassifier(30, max_depth=4, random_state=0))
    register_sklearn(model.fit(X, y), "credit-rf")
    return store


@pytest.mark.slow
def test_sigint_mid_solve_ends_the_run_killed_and_cleans_up(big_registered, tmp_path):
    child, prefix = _start_cli_explain(big_registered, tmp_path)
    time.sleep(2)  # well into the solve (a SIGKILL, below, needs no such wait)
    child.send_signal(signal.SIGINT)
    # well before the 120 s time limit: Ctrl-C does not wait for the fit's thread
    _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGINT, err
    assert "ended as KILLED" in err and "Traceback" not in err
    (run,) = _explain_runs(big_registered)
    assert run.info.status == "KILLED"
    assert not list(Path(tempfile.gettempdir()).glob(f"{prefix}*"))
    assert _versions() == []
    assert [m for m in _live_models(big_registered) if m.source_run_id == run.info.run_id] == []


@pytest.mark.slow
def test_after_sigkill_the_next_explain_recovers(big_registered, tmp_path):
    child, prefix = _start_cli_explain(big_registered, tmp_path)
    child.kill()
    child.communicate(timeout=60)
    (killed,) = _explain_runs(big_registered)
    assert killed.info.status == "RUNNING"
    assert list(Path(tempfile.gettempdir()).glob(f"{prefix}*"))

    result = explain_model_version(
        "models:/credit-rf/1", "data.csv", target="label", time_limit=2, depth=1,
        alpha=0.5, proximity_threshold=0.9,
    )  # fmt: skip
    assert result.recovered_runs == [killed.info.run_id]
    assert MlflowClient().get_run(killed.info.run_id).info.status == "KILLED"
    assert not list(Path(tempfile.gettempdir()).glob(f"{prefix}*"))
    assert _versions() == [1]
    link = MlflowClient().get_model_version("credit-rf", "1").tags["governance.surrogate"]
    assert link == "models:/credit-rf-surrogate/1"


def test_locked_store_gives_one_clear_message(registered, tmp_path, short_sqlite_lock_wait):
    import sqlite3

    from typer.testing import CliRunner

    from miret_governance.cli.app import app

    lock = sqlite3.connect(tmp_path / "mlflow.db")
    lock.execute("BEGIN EXCLUSIVE")
    try:
        result = CliRunner().invoke(
            app, ["explain", "--model-uri", "models:/credit-rf/1", "--data", "data.csv"]
        )
    finally:
        lock.rollback()
        lock.close()
    assert result.exit_code == 2
    assert "is locked by another process" in result.output
    assert "Traceback" not in result.output and result.output.count("error:") == 1


def test_a_signal_lost_in_a_finalizer_is_raised_at_the_next_stage(monkeypatch):
    """Python ignores an exception raised while ``__del__`` runs, so a SIGINT whose
    handler runs there would let the explain go on; the next stage raises it (once)."""
    from miret_governance.flavors.explain import faults
    from miret_governance.flavors.explain.stages import notify

    class Finalized:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # the handler runs in this finalizer

    ignored, shown = [], []
    monkeypatch.setattr(sys, "unraisablehook", ignored.append)
    with faults.signals_raise():
        Finalized()  # deleted at once
        assert [i.exc_type for i in ignored] == [faults.Interrupted]  # Python ignored it
        with pytest.raises(faults.Interrupted) as raised:
            notify(lambda stage, detail: shown.append(stage), "register")
        assert raised.value.signum == signal.SIGINT and shown == []
        notify(lambda stage, detail: shown.append(stage), "register")  # raised once
    assert shown == ["register"]
    assert signal.getsignal(signal.SIGINT) is not faults._raise_interrupted
