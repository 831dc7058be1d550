"""Crafted and corrupt model files: every tree is checked before any library code
predicts with it, so each file is refused with "the model file is malformed" or read
exactly, and none kills the process."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import skops.io
import xgboost
from sklearn.datasets import make_classification
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier

from miret_governance.flavors.store.inputs import load_skops_file, load_xgboost_file
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.ensembles.readers.xgboost_files import decode_model_file
from miret_governance.governance.ensembles.trees import MalformedModelError, UnsupportedModelError

HARNESS = Path(__file__).with_name("crafted_models.py")


@pytest.fixture(scope="module")
def data():
    return make_classification(200, 4, random_state=0)


def _crafted_skops(model, tmp_path, mutate) -> Path:
    """``model`` with one tree's node records changed by ``mutate``, saved with skops."""
    tree = np.ravel(model.estimators_)[0].tree_
    state = tree.__getstate__()
    nodes = state["nodes"].copy()
    mutate(nodes)
    tree.__setstate__({**state, "nodes": nodes})
    path = tmp_path / "crafted.skops"
    skops.io.dump(model, path)
    return path


def test_a_feature_index_beyond_the_model_is_refused_before_scikit_learn_predicts(data, tmp_path):
    """The issue's SIGSEGV: GradientBoosting whose tree names feature 2**40."""
    X, y = data
    model = GradientBoostingClassifier(n_estimators=3, max_depth=2, random_state=0).fit(X, y)

    def far_feature(nodes):
        nodes["feature"][0] = 2**40

    loaded = load_skops_file(_crafted_skops(model, tmp_path, far_feature))
    with pytest.raises(MalformedModelError) as raised:
        read_ensemble(loaded)
    assert str(raised.value).startswith("the model file is malformed: tree 0 splits on feature")
    assert "index 1099511627776, but the model has 4 features" in str(raised.value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("left_child", 2**40, "a child index lies outside the tree's"),
        (
            "right_child",
            0,
            r"a child index points back to the root \(node 0\): the nodes form a cycle",
        ),
        ("left_child", -2, r"a child index lies outside the tree's \d+ nodes \(found -2\)"),
        ("right_child", -1, "a node is a leaf exactly when feature, left and right are -1"),
        ("threshold", np.nan, "a split threshold is NaN"),
    ],
)
def test_corrupt_node_records_are_refused_with_what_is_wrong(data, tmp_path, field, value, message):
    X, y = data
    model = RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0).fit(X, y)

    def corrupt(nodes):
        nodes[field][0] = value

    loaded = load_skops_file(_crafted_skops(model, tmp_path, corrupt))
    with pytest.raises(MalformedModelError, match=message):
        read_ensemble(loaded)


def test_gradient_boosting_with_a_row_dependent_init_is_refused_clearly(data):
    """Read as a constant before, it agreed with the model on 63.8% of rows."""
    X, y = data
    model = GradientBoostingClassifier(
        n_estimators=3, init=RandomForestClassifier(n_estimators=3, random_state=0)
    ).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="init estimator .*RandomForestClassifier"):
        read_ensemble(model)
    zero = GradientBoostingClassifier(n_estimators=3, init="zero", random_state=0).fit(X, y)
    np.testing.assert_allclose(read_ensemble(zero).predict_proba(X), zero.predict_proba(X))


def test_an_xgboost_file_that_crashes_xgboost_is_refused_before_xgboost_reads_it(data, tmp_path):
    """``parents[9] = -1`` makes XGBoost's own load_model die with SIGSEGV."""
    X, y = data
    model = xgboost.XGBClassifier(n_estimators=3, max_depth=3).fit(X, y)
    model.save_model(tmp_path / "model.json")
    document = json.loads((tmp_path / "model.json").read_text())
    tree = document["learner"]["gradient_booster"]["model"]["trees"][0]
    tree["parents"][len(tree["parents"]) - 1] = -1
    (tmp_path / "crafted.json").write_text(json.dumps(document))
    with pytest.raises(MalformedModelError, match="tree 0's parents disagree with its children"):
        load_xgboost_file(tmp_path / "crafted.json")


def test_ubjson_models_decode_to_the_json_document(data, tmp_path):
    X, y = data
    model = xgboost.XGBClassifier(n_estimators=4, max_depth=3).fit(X, y)
    model.save_model(tmp_path / "model.json")
    model.save_model(tmp_path / "model.ubj")
    from_json = json.loads((tmp_path / "model.json").read_text())
    from_ubjson = decode_model_file((tmp_path / "model.ubj").read_bytes())
    trees = from_ubjson["learner"]["gradient_booster"]["model"]["trees"]
    expected = from_json["learner"]["gradient_booster"]["model"]["trees"]
    assert [t["left_children"] for t in trees] == [t["left_children"] for t in expected]
    conditions = [np.float32(t["split_conditions"]) for t in trees]
    for got, want in zip(conditions, expected):
        np.testing.assert_array_equal(got, np.float32(want["split_conditions"]))
    loaded = load_xgboost_file(tmp_path / "model.ubj")
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))
    with pytest.raises(MalformedModelError, match="the model file is malformed: a UBJSON length"):
        decode_model_file((tmp_path / "model.ubj").read_bytes()[:-7])


def test_random_corruptions_are_refused_or_read_exactly_and_never_crash(tmp_path):
    """800 cases: 400 skops forests (one stored array element crafted), 200 XGBoost JSON
    models (one tree array entry crafted or an array shortened) and 200 UBJSON models
    (bytes overwritten or cut), in a child process so that a crash fails this test."""
    run = subprocess.run(
        [sys.executable, str(HARNESS), str(tmp_path), "800", "0"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["accepted_but_library_fails"] == []
    assert summary["read_differently"] == []
    assert summary["refused"] + summary["read_exactly"] == 800
    # both outcomes occur: the corruptions are not all harmless, nor all fatal
    assert summary["refused"] > 200 and summary["read_exactly"] > 100
    assert summary["messages"] == ["the model file is malformed"]
