"""Random corruptions of a skops forest and of an XGBoost model (JSON fields, UBJSON
bytes), each loaded the
way ``govern explain`` loads a registered model; run as a child process by
``test_crafted_models.py`` so that a crash is a failed test, not a dead test session.

Prints one JSON line: how many cases were refused (and with which messages), how many
were read, and the largest probability difference between the ensemble view and the
library's own ``predict_proba`` on the cases that were read.

Usage: ``python crafted_models.py FOLDER CASES SEED``
"""

import io
import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import skops.io
import xgboost
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

from miret_governance.flavors.store.inputs import load_skops_file, load_xgboost_file
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.ensembles.trees import UnsupportedModelError

PROBABILITY_TOLERANCE = 1e-6
"""XGBoost predicts in single precision; the ensemble view sums in double."""
CRAFTED_INTS = [2**40, -(2**40), 2**31, -5, -2, -1, 0, 1, 2, 3, 10**6]
CRAFTED_FLOATS = [float("nan"), float("inf"), -float("inf"), 1e308, -1e308, 0.0, 0.5, -3.0]


def _crafted_value(rng, dtype):
    if dtype.kind in "iu":
        value = CRAFTED_INTS[rng.integers(len(CRAFTED_INTS))]
        info = np.iinfo(dtype)
        return int(np.clip(value, info.min, info.max))
    return CRAFTED_FLOATS[rng.integers(len(CRAFTED_FLOATS))]


def _corrupt_array(array, rng):
    """One element (one field of one record, for structured arrays) set to a crafted value."""
    array = array.copy()
    flat = array.reshape(-1)
    index = rng.integers(flat.shape[0])
    if array.dtype.names:
        field = array.dtype.names[rng.integers(len(array.dtype.names))]
        flat[index][field] = _crafted_value(rng, array.dtype[field])
    elif array.dtype.kind in "iuf":
        flat[index] = _crafted_value(rng, array.dtype)
    return array


def corrupt_skops(data: bytes, rng) -> bytes:
    """A skops file with one numeric element of one stored array crafted (node records,
    values, classes, ...), or a truncated member."""
    source = zipfile.ZipFile(io.BytesIO(data))
    arrays = [n for n in source.namelist() if n.endswith(".npy")]
    target = arrays[rng.integers(len(arrays))]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as sink:
        for name in source.namelist():
            content = source.read(name)
            if name == target:
                array = np.load(io.BytesIO(content), allow_pickle=False)
                if array.size == 0:
                    content = content[: len(content) // 2]
                else:
                    buffer = io.BytesIO()
                    np.save(buffer, _corrupt_array(array, rng), allow_pickle=False)
                    content = buffer.getvalue()
            sink.writestr(name, content)
    return out.getvalue()


def corrupt_xgboost(document: dict, rng) -> bytes:
    """An XGBoost JSON model with one tree array entry crafted, or one array shortened."""
    document = json.loads(json.dumps(document))
    trees = document["learner"]["gradient_booster"]["model"]["trees"]
    tree = trees[rng.integers(len(trees))]
    keys = [k for k, v in tree.items() if isinstance(v, list) and v]
    key = keys[rng.integers(len(keys))]
    if rng.random() < 0.1:
        tree[key] = tree[key][:-1]
    else:
        value = _crafted_value(rng, np.dtype(np.int64 if rng.random() < 0.7 else np.float64))
        tree[key][rng.integers(len(tree[key]))] = value
    if rng.random() < 0.05:
        tree["tree_param"]["num_nodes"] = str(CRAFTED_INTS[rng.integers(len(CRAFTED_INTS))])
    return json.dumps(document).encode()


def corrupt_bytes(data: bytes, rng) -> bytes:
    """A UBJSON model with a few bytes overwritten, or cut short."""
    data = bytearray(data)
    if rng.random() < 0.2:
        return bytes(data[: rng.integers(1, len(data))])
    for _ in range(rng.integers(1, 4)):
        data[rng.integers(len(data))] = rng.integers(256)
    return bytes(data)


def main(folder: Path, cases: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    X, y = make_classification(300, 6, random_state=0)
    forest = RandomForestClassifier(n_estimators=8, max_depth=4, random_state=0).fit(X, y)
    booster = xgboost.XGBClassifier(n_estimators=8, max_depth=3).fit(X, y)
    skops_bytes = skops.io.dumps(forest)
    booster.save_model(folder / "base.json")
    booster.save_model(folder / "base.ubj")
    document = json.loads((folder / "base.json").read_text())
    ubjson = (folder / "base.ubj").read_bytes()
    summary = {
        "refused": 0,
        "read_exactly": 0,
        "accepted_but_library_fails": [],
        "read_differently": [],
        "messages": set(),
    }
    for case in range(cases):
        if case % 2 == 0:
            path = folder / "case.skops"
            path.write_bytes(corrupt_skops(skops_bytes, rng))
            load = load_skops_file
        elif case % 4 == 1:
            path = folder / "case.json"
            path.write_bytes(corrupt_xgboost(document, rng))
            load = load_xgboost_file
        else:
            path = folder / "case.ubj"
            path.write_bytes(corrupt_bytes(ubjson, rng))
            load = load_xgboost_file
        try:
            model = load(path)
            ensemble = read_ensemble(model)
        except (UnsupportedModelError, ValueError) as exc:
            summary["refused"] += 1
            summary["messages"].add(str(exc).split(":")[0][:60])
            continue
        try:
            expected = model.predict_proba(X)
        except Exception as exc:  # noqa: BLE001 - any library error is a finding here
            summary["accepted_but_library_fails"].append(f"case {case}: {exc!r}"[:200])
            continue
        difference = np.abs(ensemble.predict_proba(X) - expected).max()
        if difference > PROBABILITY_TOLERANCE:
            summary["read_differently"].append(f"case {case}: {path.suffix} {difference:.3g}")
            continue
        summary["read_exactly"] += 1
    summary["messages"] = sorted(summary["messages"])
    return summary


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))))
