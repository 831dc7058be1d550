"""Issue 8's bad-input campaign: every refusal exits with the right code, names the
problem, runs no code from an artifact and leaves the store unchanged; an interrupted
explain leaves no orphans once re-run.

The cases are the table in ``campaign_cases.py`` (shared with ``examples/campaign_table.py``);
they run in-process against one store per module, snapshotted around every case.
"""

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from campaign_cases import CASES, run_case
from campaign_store import StoreSnapshot, build_campaign
from mlflow import MlflowClient
from mlflow.entities import ViewType
from mlflow_store import interruptible_cli

pytest_plugins = ["mlflow_store"]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory, migrated_store):
    return build_campaign(tmp_path_factory.mktemp("campaign"), migrated_store)


def test_the_campaign_covers_every_area_with_at_least_40_cases():
    areas = {case.area for case in CASES}
    assert areas == {"data", "model", "parameters", "uri", "policy", "artifacts", "faults"}
    assert len(CASES) >= 40
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=[pytest.mark.slow] if c.subprocess else []) for c in CASES],
    ids=[c.name for c in CASES],
)
def test_refusal(case, campaign):
    outcome = run_case(case, campaign)
    assert not outcome.code_ran, "code shipped in the artifact ran"
    assert outcome.exit_code == case.exit_code, outcome.output
    assert re.search(case.message, outcome.output, re.DOTALL), outcome.output
    assert "Traceback" not in outcome.output, outcome.output
    assert outcome.changes == []


def test_snapshot_sees_a_new_tag_alias_and_run(campaign):
    """The store check can fail: each kind of change is reported."""
    client = MlflowClient(tracking_uri=campaign.uri, registry_uri=campaign.uri)
    before = StoreSnapshot.take(campaign.uri)
    client.set_model_version_tag("campaign-xgb", "1", "note", "x")
    client.set_registered_model_alias("campaign-xgb", "probe", "1")
    run = client.create_run(campaign.experiment_id)
    after = StoreSnapshot.take(campaign.uri)
    changes = before.changes(after, "runs")
    client.delete_model_version_tag("campaign-xgb", "1", "note")
    client.delete_registered_model_alias("campaign-xgb", "probe")
    client.set_terminated(run.info.run_id, "FINISHED")
    assert [c.split(":")[0] for c in changes] == [
        "tag note on campaign-xgb/1",
        "aliases",
        "1 run(s) left RUNNING",
    ]
    assert before.changes(StoreSnapshot.take(campaign.uri), "runs") == []
    assert before.changes(StoreSnapshot.take(campaign.uri)) == ["1 new run(s)"]


def test_float_labels_are_the_classes_for_validate_and_explain(campaign):
    """Labels 0.0/1.0 for classes 0/1: validate and explain agree (both accept)."""
    from campaign_cases import Case, _csv

    floats = _csv(lambda f: f.assign(label=f["label"].astype(float)))
    args = ("--model-uri", "models:/campaign-rf/1", "--data", "{case}/input.csv")
    validate = Case(
        "float labels validate",
        "data",
        ("validate", *args, "--target", "label"),
        0,
        "",
        prepare=floats,
    )
    explain = Case(
        "float labels explain",
        "data",
        (
            "explain",
            *args,
            "--target",
            "label",
            "--time-limit",
            "2",
            "--min-test-rows",
            "1",
            "--registered-name",
            "campaign-float-surrogate",
        ),
        0,
        "",
        prepare=floats,
    )
    checked = run_case(validate, campaign)
    assert checked.exit_code == 0, checked.output
    explained = run_case(explain, campaign)
    assert explained.exit_code == 0, explained.output
    assert "Registered models:/campaign-float-surrogate/1" in explained.output


# ---------------------------------------------------------------------- faults
def _kill_dataset(path: Path):
    """2,000 rows x 30 features labelled by ``x0 + x1 > 1`` and a 10-tree depth-4 forest:
    the MIRET tree leads its seeds on held-out folds (at m = 1), so its MILP phase runs
    (15 node MILPs, their progress shown once the inputs are validated) and the fit
    then measures and logs for seconds more."""
    import numpy as np
    import pandas as pd
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler

    X = np.random.default_rng(0).random((2000, 30))
    y = (X[:, 0] + X[:, 1] > 1).astype(int)
    X = pd.DataFrame(X, columns=[f"x{j:02d}" for j in range(X.shape[1])])
    X.assign(label=y).to_csv(path, index=False)
    model = make_pipeline(
        MinMaxScaler(), RandomForestClassifier(n_estimators=10, max_depth=4, random_state=0)
    )
    return model.fit(X, y)


def _explain_process(args, env, cwd):
    return subprocess.Popen(
        interruptible_cli("explain", *args),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _wait_for(process, text: bytes, limit: float = 240.0) -> bytes:
    """Read the process's output until ``text`` appears (or it exits or ``limit`` passes)."""
    seen = bytearray()
    found = threading.Event()

    def read():
        for chunk in iter(lambda: process.stdout.read1(4096), b""):
            seen.extend(chunk)
            if text in seen:
                found.set()
        found.set()

    threading.Thread(target=read, daemon=True).start()
    found.wait(limit)
    return bytes(seen)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_killed_mid_solve_then_rerun_leaves_no_orphans(sig, store, tmp_path, monkeypatch):
    from mlflow_store import register_sklearn

    monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", store)
    register_sklearn(
        _kill_dataset(tmp_path / "data.csv"), "killed-rf", pip_requirements=["scikit-learn"]
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {
        **os.environ,
        "TMPDIR": str(temp),
        "TTY_INTERACTIVE": "1",  # rich shows the live stages although stdout is a pipe
        "TTY_COMPATIBLE": "1",
        "COLUMNS": "160",
    }
    args = [
        "--model-uri",
        "models:/killed-rf/1",
        "--data",
        "data.csv",
        "--target",
        "label",
        "--depth",
        "4",
        "--alpha",  # given: the test is about signals, not the choice of alpha and m
        "0.5",
        "--proximity-threshold",
        "1",
    ]
    # the MILP phase's first progress (its incumbent, shown once the inputs are
    # validated) is the evidence that it runs; 14 more node MILPs follow
    process = _explain_process([*args, "--time-limit", "600"], env, tmp_path)
    try:
        shown = _wait_for(process, b"incumbent")
        assert b"solve (MILP)  incumbent" in shown, shown.decode(errors="replace")
        assert process.poll() is None, "the explain ended before the signal"
        process.send_signal(sig)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0

    rerun = subprocess.run(
        [sys.executable, "-m", "miret_governance.cli", "explain", *args, "--time-limit", "3"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    client = MlflowClient()
    versions = client.search_model_versions("name = 'killed-rf-surrogate'")
    assert [str(v.version) for v in versions] == ["1"]
    runs = client.search_runs([store], run_view_type=ViewType.ALL)
    assert [r.info.status for r in runs if r.info.status == "RUNNING"] == []
    assert sorted(p.name for p in temp.iterdir() if p.name.startswith("explain-")) == []
    link = client.get_model_version("killed-rf", "1").tags["governance.surrogate"]
    assert link == "models:/killed-rf-surrogate/1"
