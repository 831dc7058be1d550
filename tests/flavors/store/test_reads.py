"""CommandClient: one command's reads answered once, never past one of its own writes,
never for an alias holder, and record files fetched by name."""

from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from miret_governance.flavors.store.reads import CommandClient, run_file


@pytest.fixture
def counted(monkeypatch):
    """A CommandClient whose store calls are counted by method name."""
    client = CommandClient()
    calls = {}
    store = client._tracking_client.store
    for name in ("get_run", "search_runs", "get_experiment_by_name", "set_tag"):
        method = getattr(store, name)

        def counting(*args, _method=method, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _method(*args, **kwargs)

        monkeypatch.setattr(store, name, counting)
    return client, calls


def test_reads_are_answered_once_until_the_client_writes(counted):
    client, calls = counted
    experiment = client.create_experiment("reads")
    run = client.create_run(experiment).info.run_id
    for _ in range(3):
        assert client.get_run(run).info.run_id == run
        client.search_runs([experiment])
    assert calls == {"get_run": 1, "search_runs": 1}
    client.set_tag(run, "seen", "yes")  # a write: what was read may have changed
    assert client.get_run(run).data.tags["seen"] == "yes"
    assert calls["get_run"] == 2


def test_experiments_are_kept_once_found_and_looked_up_again_while_missing(counted):
    client, calls = counted
    assert client.get_experiment_by_name("later") is None
    assert client.get_experiment_by_name("later") is None
    client.create_experiment("later")
    for _ in range(2):
        assert client.get_experiment_by_name("later").name == "later"
    assert calls["get_experiment_by_name"] == 3


def test_experiments_named_finds_several_in_one_search(counted):
    client, calls = counted
    for name in ("governance-a", "governance-b", "other"):
        client.create_experiment(name)
    found = client.experiments_named(("governance-a", "governance-b", "governance-c"))
    assert sorted(found) == ["governance-a", "governance-b"]
    assert "get_experiment_by_name" not in calls


def test_an_alias_holder_is_read_again_every_time():
    client = CommandClient()
    with mlflow.start_run() as run:
        mlflow.log_text("x", "x.txt")
    client.create_registered_model("m")
    for version in ("1", "2"):
        client.create_model_version("m", f"{run.info.artifact_uri}/x.txt", run.info.run_id)
    MlflowClient().set_registered_model_alias("m", "champion", "1")
    assert str(client.get_model_version_by_alias("m", "champion").version) == "1"
    MlflowClient().set_registered_model_alias("m", "champion", "2")  # another process
    assert str(client.get_model_version_by_alias("m", "champion").version) == "2"


def test_a_run_file_is_fetched_by_name_and_once(tmp_path, monkeypatch):
    with mlflow.start_run() as run:
        mlflow.log_text("record", "decision/record.json")
    uri = run.info.artifact_uri
    client = CommandClient()
    run_file(client, uri, "decision/record.json", tmp_path / "a" / "record.json")
    assert (tmp_path / "a" / "record.json").read_text() == "record"
    Path(uri.removeprefix("file://"), "decision", "record.json").unlink()
    run_file(client, uri, "decision/record.json", tmp_path / "b" / "record.json")
    assert (tmp_path / "b" / "record.json").read_text() == "record"  # the bytes read once
    with pytest.raises(MlflowException):
        run_file(MlflowClient(), uri, "decision/record.json", tmp_path / "c" / "record.json")
