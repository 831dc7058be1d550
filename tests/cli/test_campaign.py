"""Issue 8's bad-input campaign: every refusal exits with the right code, names the
problem, runs no code from an artifact and leaves the store unchanged. (An explain
interrupted mid-solve: ``tests/flavors/explain/test_faults.py``.)

The cases are the table in ``campaign_cases.py`` (shared with ``examples/campaign_table.py``);
they run in-process against one store per module, snapshotted around every case.
"""

import re

import pytest
from campaign_cases import CASES, run_case
from campaign_store import StoreSnapshot, build_campaign
from mlflow import MlflowClient

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
