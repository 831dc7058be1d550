"""flavors.reproduce and the request's parameter object, against a real SQLite store: an
explanation fitted again from its evidence is the same tree, bit for bit."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow_store import copy_store, register_rf
from signing_keys import ci_key

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.evidence import FLAVORS_CODE
from miret_governance.flavors.explain.explain import explain_model_version
from miret_governance.flavors.explain.fit_params import FitParams
from miret_governance.flavors.explain.request import ExplainRequest
from miret_governance.flavors.miret import load_model, read_evidence
from miret_governance.flavors.read.reproduce import reproduce_explanation
from miret_governance.governance.measures.metrics import HEADLINE_METRICS
from miret_governance.governance.miret.fit.estimator import LEGACY_PARAMS
from miret_governance.governance.trust.environment import environment

pytest_plugins = ["mlflow_store"]

FEATURES = ["mean radius", "mean texture", "mean perimeter", "mean smoothness", "worst area"]
TIME_LIMIT = 60.0
"""Generous: the fit ends on work (the solver's stall rule), never on seconds."""

KEY_FINGERPRINT = ci_key().fingerprint


def _use_store(monkeypatch, uri, experiment=None):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    if experiment is not None:
        monkeypatch.setenv("MLFLOW_EXPERIMENT_ID", experiment)


@pytest.fixture(scope="module")
def explained(tmp_path_factory, migrated_store, breast_cancer):
    """A 10-tree depth-2 forest on 120 rows, explained at depth 2 with HiGHS (the same
    solver on every machine) in its own store."""
    root = tmp_path_factory.mktemp("reproduce")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    X, y = breast_cancer
    frame = X[FEATURES].iloc[:120].assign(label=y.iloc[:120].to_numpy())
    copy_store(migrated_store, root / "mlflow.db")
    with pytest.MonkeyPatch.context() as mp:
        _use_store(mp, uri)
        experiment = MlflowClient().create_experiment("reproduce", str(root / "mlruns"))
        mp.setenv("MLFLOW_EXPERIMENT_ID", experiment)
        mp.chdir(root)
        frame.to_csv(root / "data.csv", index=False)
        register_rf(frame, FEATURES, "credit-rf", n_estimators=10)
        result = explain_model_version(
            "models:/credit-rf/1",
            root / "data.csv",
            target="label",
            depth=2,
            solver="highs",
            time_limit=60,
            min_test_rows=1,
        )
    return {
        "uri": uri,
        "experiment": experiment,
        "root": root,
        "frame": frame,
        "result": result,
    }


@pytest.fixture
def case(explained, monkeypatch):
    _use_store(monkeypatch, explained["uri"], explained["experiment"])
    monkeypatch.chdir(explained["root"])
    return explained


def _store_contents():
    client = MlflowClient()
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    versions = client.search_model_versions()
    return (
        sorted(r.info.run_id for r in runs),
        sorted((v.name, v.version) for v in versions),
        {r.info.run_id: len(client.list_artifacts(r.info.run_id)) for r in runs},
    )


def test_evidence_records_the_request_the_tree_digest_and_the_versions(case):
    result = case["result"]
    assert not result.reused and result.solve["time_limit_hit"] is False
    provenance = read_evidence(result.surrogate_uri)["provenance"]
    assert provenance["tree_digest"] == load_model(result.surrogate_uri).tree_digest()
    assert len(provenance["tree_digest"]) == 64
    # no gurobipy (HiGHS solved); the product's own code, here and in flavors/, by digest
    assert provenance["environment"] == environment(code=FLAVORS_CODE)
    assert (
        provenance["environment"]["miret-governance source"]
        != environment()["miret-governance source"]
    )
    record = provenance["request"]
    assert record["fit"] == dict(FitParams(depth=2, solver="highs", time_limit=60))
    assert (record["target"], record["test_size"], record["search"]) == ("label", 0.2, None)
    rebuilt = ExplainRequest.from_record(record)
    logged = MlflowClient().get_run(result.run_id).data.params["explain_digest"]
    assert rebuilt.digest == provenance["explain_digest"] == logged
    assert rebuilt.record() == record


def test_a_request_recorded_before_the_engine_options_refits_them_at_their_legacy_values(case):
    record = read_evidence(case["result"].surrogate_uri)["provenance"]["request"]
    fit = {name: value for name, value in record["fit"].items() if name not in LEGACY_PARAMS}
    old = ExplainRequest.from_record({**record, "fit": fit})
    assert {name: old.fit[name] for name in LEGACY_PARAMS} == LEGACY_PARAMS
    # at the legacy values a request digests as before those parameters existed
    legacy = ExplainRequest.from_record({**record, "fit": {**fit, **LEGACY_PARAMS}})
    assert old.digest == legacy.digest and "fallbacks" not in old.fit.identity()
    other = ExplainRequest.from_record({**record, "fit": {**fit, "milp_share": 0.15}})
    assert other.digest != old.digest and other.fit.identity()["milp_share"] == 0.15


def test_params_object_is_the_keyword_request(case):
    again = explain_model_version(
        "models:/credit-rf/1",
        "data.csv",
        target="label",
        params=FitParams(depth=2, solver="highs", time_limit=60),
        min_test_rows=1,
    )
    assert again.reused and again.surrogate_uri == case["result"].surrogate_uri
    with pytest.raises(ExplainError, match=r"not both \(got params and \['seed'\]\)"):
        explain_model_version("models:/credit-rf/1", "data.csv", params=FitParams(depth=2), seed=3)


def test_reproduce_is_identical_and_writes_nothing(case):
    before = _store_contents()
    for uri in ("models:/credit-rf/1", case["result"].surrogate_uri):
        reproduction = reproduce_explanation(uri, "data.csv")
        assert reproduction.identical
        digests = reproduction.tree_digest
        assert digests["recorded"] == digests["reproduced"]
        assert list(reproduction.metrics) == list(HEADLINE_METRICS)
        assert all(m["equal"] for m in reproduction.metrics.values())
        assert (
            reproduction.metrics["test_fidelity"]["reproduced"]
            == (case["result"].metrics["test_fidelity"])
        )
        assert reproduction.versions_differ == {}
        assert reproduction.time_limit_hit == {"recorded": False, "reproduced": False}
    assert _store_contents() == before
    document = json.loads(json.dumps(reproduction.to_json()))
    assert set(document) == {
        "identical",
        "model_uri",
        "surrogate_uri",
        "tree_digest",
        "metrics",
        "versions_differ",
        "data_digest",
        "time_limit_hit",
        "signed_by",
    }
    assert document["signed_by"] == {"name": "test-ci", "fingerprint": KEY_FINGERPRINT}
    assert document["identical"] is True
    assert document["surrogate_uri"] == "models:/credit-rf-surrogate/1"
    assert (
        document["data_digest"]
        == read_evidence(document["surrogate_uri"])["provenance"]["data_digest"]
    )
    assert set(document["metrics"]["n_features_used"]) == {"recorded", "reproduced", "equal"}


def test_other_data_is_refused_with_both_digests(case):
    recorded = read_evidence(case["result"].surrogate_uri)["provenance"]["data_digest"]
    changed = case["frame"].copy()
    changed.loc[0, "mean radius"] += 1.0
    changed.to_csv("changed.csv", index=False)
    with pytest.raises(ExplainError) as info:
        reproduce_explanation("models:/credit-rf/1", "changed.csv")
    message = str(info.value)
    assert f"the recorded one is {recorded}" in message
    # the evidence names the file, never its folder
    assert "pass the file the explain run read (data.csv) with --data" in message
    with pytest.raises(ExplainError, match="no test file.*leave out --test-data"):
        reproduce_explanation("models:/credit-rf/1", "data.csv", test_data="data.csv")
    with pytest.raises(ExplainError, match="label column 'label', not 'mean radius'"):
        reproduce_explanation("models:/credit-rf/1", "data.csv", target="mean radius")


def test_a_different_fit_is_reported_with_what_differs(case, monkeypatch):
    rebuild = ExplainRequest.from_record.__func__

    def other_seed(cls, record, **changes):
        request = rebuild(cls, record, **changes)
        return dataclasses.replace(request, fit=request.fit.replace(random_state=1))

    monkeypatch.setattr(ExplainRequest, "from_record", classmethod(other_seed))
    reproduction = reproduce_explanation("models:/credit-rf/1", "data.csv")
    assert not reproduction.identical
    assert reproduction.tree_digest["recorded"] != reproduction.tree_digest["reproduced"]
    differing = {name for name, m in reproduction.metrics.items() if not m["equal"]}
    assert differing == {"baseline_cart_test_fidelity"}
    assert reproduction.metrics["baseline_cart_test_fidelity"]["reproduced"] == 1.0


def test_an_unexplained_version_has_nothing_to_reproduce(case):
    register_rf(case["frame"], FEATURES, "plain-rf", n_estimators=3)
    with pytest.raises(ExplainError, match="no linked surrogate"):
        reproduce_explanation("models:/plain-rf/1", "data.csv")
    with pytest.raises(ExplainError, match="not found in the registry"):
        reproduce_explanation("models:/credit-rf/9", "data.csv")


def test_evidence_without_a_request_record_cannot_be_reproduced(store, tmp_path):
    from gate_store import explained as explained_by_hand

    uri = explained_by_hand(store, tmp_path)  # verified evidence, written without a request
    with pytest.raises(ExplainError, match="does not record its request.*--force"):
        reproduce_explanation(uri, "data.csv")
    # evidence from before the ensemble's files were pinned still gets this far (a gate
    # refuses it): a regulator's re-run of an old explanation is told what is missing
    older = explained_by_hand(store, tmp_path, pin_files=False)
    with pytest.raises(ExplainError, match="does not record its request"):
        reproduce_explanation(older, "data.csv")


def test_a_searched_explanation_is_searched_again(case):
    from miret_governance.flavors.explain.request import SearchSettings

    register_rf(case["frame"], FEATURES, "search-rf", n_estimators=10)
    settings = SearchSettings(param_grid={"alpha": [0.2, 0.8]}, cv=2, search_time_limit=5.0)
    result = explain_model_version(
        "models:/search-rf/1",
        "data.csv",
        target="label",
        params=FitParams(depth=2, solver="highs", time_limit=60),
        min_test_rows=1,
        search=settings,
    )
    record = read_evidence(result.surrogate_uri)["provenance"]["request"]
    assert record["search"] == settings.identity()
    reproduction = reproduce_explanation("models:/search-rf/1", "data.csv")
    assert reproduction.identical and reproduction.time_limit_hit["reproduced"] is False


def test_a_file_edited_past_mlflows_first_10000_rows_is_not_the_explained_data(case):
    """QA: MLflow's own dataset digest hashes the first 10,000 rows only, so reproduce (and
    explain's reuse) took an edited file for the explained one. The recorded digest is the
    content's (governance.tables.content_digest); an explanation recorded with MLflow's
    8-character digest before is still compared in that scheme."""
    from miret_governance.flavors.store.data_files import dataset, digest_like
    from miret_governance.governance.data.tables import content_digest

    frame = pd.DataFrame({"x": np.arange(10_200.0), "label": [0, 1] * 5_100})
    edited = frame.copy()
    edited.loc[10_100, "x"] = -5.0

    def mlflows(f):
        return dataset(f, "data.csv", "label", digest=False).digest

    assert mlflows(frame) == mlflows(edited) and len(mlflows(frame)) == 8
    ours = dataset(frame, "data.csv", "label").digest
    assert ours == content_digest(frame) != dataset(edited, "data.csv", "label").digest
    assert digest_like(frame, "data.csv", "label", mlflows(frame)) == mlflows(frame)
    assert digest_like(frame, "data.csv", "label", ours) == ours
    recorded = read_evidence(case["result"].surrogate_uri)["provenance"]["data_digest"]
    assert recorded == content_digest(pd.read_csv("data.csv"))


def test_a_changed_source_file_of_the_product_is_named_among_the_differences(tmp_path):
    """QA: the product's version stayed 0.1.0 through every change of its fitting code, so
    a re-run on patched code said every recorded version was the one installed."""
    from miret_governance.governance.trust.environment import SOURCE_KEY, differences, source_digest

    (tmp_path / "miret").mkdir()
    (tmp_path / "miret" / "search.py").write_text("STARTS = 2\n")
    (tmp_path / "notes.txt").write_text("not code")
    before = {SOURCE_KEY: source_digest([tmp_path])}
    (tmp_path / "notes.txt").write_text("still not code")
    assert source_digest([tmp_path]) == before[SOURCE_KEY]
    (tmp_path / "miret" / "search.py").write_text("STARTS = 1\n")
    after = {SOURCE_KEY: source_digest([tmp_path])}
    assert differences(before, after) == {
        SOURCE_KEY: {"recorded": before[SOURCE_KEY], "current": after[SOURCE_KEY]}
    }
