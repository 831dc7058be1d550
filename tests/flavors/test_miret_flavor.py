"""The ``miret`` flavor: save/load round trip, pyfunc input spaces, no pickle."""

import json
import subprocess
import sys

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from signing_keys import ci_key
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from miret_governance.flavors import miret
from miret_governance.flavors.trust import sign_model_dir
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.miret import MiretSurrogate
from miret_governance.governance.miret.tree.tree import SurrogateTree

FEATURES = ["mean radius", "mean texture", "mean perimeter", "worst area"]
KEY = ci_key()


@pytest.fixture(scope="module")
def fitted(breast_cancer):
    X, y = breast_cancer
    X, y = X[FEATURES].iloc[:80], y.iloc[:80]
    pipeline = make_pipeline(
        MinMaxScaler(), RandomForestClassifier(n_estimators=10, max_depth=2, random_state=0)
    ).fit(X, y)
    ensemble = read_ensemble(pipeline)
    surrogate = MiretSurrogate(ensemble, time_limit=5).fit(X)
    return X, pipeline, ensemble, surrogate


def test_save_load_round_trip(fitted, tmp_path):
    X, pipeline, _ensemble, surrogate = fitted
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "note.txt").write_text("hello")
    (tmp_path / "card.md").write_text("# card")
    path = tmp_path / "model"
    miret.save_model(
        surrogate,
        path,
        artifacts={"vite": tmp_path / "extra", "model_card.md": tmp_path / "card.md"},
        signing_key=KEY,
    )
    files = {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()}
    assert {
        "MLmodel",
        "surrogate.json",
        "evidence.json",
        "vite/note.txt",
        "model_card.md",
        "requirements.txt",
        "model.sig",
    } <= files
    assert not [f for f in files if f.endswith((".pkl", ".pickle", ".skops", ".joblib"))]
    assert json.loads((path / "surrogate.json").read_text()) == surrogate.to_dict()

    mlmodel = yaml.safe_load((path / "MLmodel").read_text())
    conf = mlmodel["flavors"]["miret"]
    assert conf["surrogate_class"] == "MiretSurrogate" and conf["input_space"] == "raw"
    assert conf["feature_names"] == FEATURES and conf["depth"] == 2
    assert conf["artifacts"] == ["model_card.md", "vite"]
    assert (
        mlmodel["flavors"]["python_function"]["loader_module"] == "miret_governance.flavors.miret"
    )
    assert [c["name"] for c in json.loads(mlmodel["signature"]["inputs"])] == FEATURES

    loaded = miret.load_model(str(path))
    assert isinstance(loaded, MiretSurrogate)
    normalized = pipeline[0].transform(X)
    np.testing.assert_array_equal(loaded.predict(normalized), surrogate.predict(normalized))
    assert miret.load_preprocessing(str(path)).scale_.tolist() == pipeline[0].scale_.tolist()


def test_pyfunc_raw_and_normalized_input(fitted, tmp_path):
    X, pipeline, _ensemble, surrogate = fitted
    path = tmp_path / "model"
    miret.save_model(surrogate, path, signing_key=KEY)
    expected = surrogate.predict(X)
    np.testing.assert_array_equal(expected, surrogate.tree_.predict(pipeline[0].transform(X)))

    raw_model = mlflow.pyfunc.load_model(str(path))
    np.testing.assert_array_equal(np.asarray(raw_model.predict(X)), expected)
    shuffled = X[FEATURES[::-1]]  # columns are matched by name
    np.testing.assert_array_equal(np.asarray(raw_model.predict(shuffled)), expected)

    normalized = pd.DataFrame(pipeline[0].transform(X), columns=FEATURES)
    norm_model = mlflow.pyfunc.load_model(str(path), model_config={"input_space": "normalized"})
    np.testing.assert_array_equal(np.asarray(norm_model.predict(normalized)), expected)
    assert isinstance(raw_model.get_raw_model(), MiretSurrogate)


def test_surrogate_tree_without_scaler_defaults_to_normalized(tmp_path):
    tree = SurrogateTree([[1.0, 0.0]], [-0.5], 1, feature_names=["a", "b"], classes=["no", "yes"])
    path = tmp_path / "tree"
    miret.save_model(tree, path, signing_key=KEY)
    conf = yaml.safe_load((path / "MLmodel").read_text())["flavors"]["miret"]
    assert conf["input_space"] == "normalized" and conf["surrogate_class"] == "SurrogateTree"
    model = mlflow.pyfunc.load_model(str(path))
    frame = pd.DataFrame({"a": [0.2, 0.5, 0.9], "b": [1.0, 0.0, 0.3]})
    assert list(model.predict(frame)) == ["no", "no", "yes"]
    assert miret.load_model(str(path)).to_dict() == tree.to_dict()
    with pytest.raises(ValueError, match="input_space='raw' needs a MiretSurrogate"):
        mlflow.pyfunc.load_model(str(path), model_config={"input_space": "raw"})


def test_bad_arguments_are_refused(fitted, tmp_path):
    _, _, _, surrogate = fitted
    tree = surrogate.tree_
    with pytest.raises(ValueError, match="needs a MiretSurrogate"):
        miret.save_model(tree, tmp_path / "a", input_space="raw")
    with pytest.raises(ValueError, match="input_space must be one of"):
        miret.save_model(surrogate, tmp_path / "b", input_space="scaled")
    with pytest.raises(ValueError, match="relative, non-reserved"):
        miret.save_model(surrogate, tmp_path / "c", artifacts={"../x": tmp_path})
    with pytest.raises(ValueError, match="relative, non-reserved"):
        miret.save_model(surrogate, tmp_path / "d", artifacts={"surrogate.json": tmp_path})
    with pytest.raises(TypeError, match="MiretSurrogate or SurrogateTree"):
        miret.save_model(object(), tmp_path / "e")


def test_loading_refuses_unknown_surrogate_class(fitted, tmp_path):
    _, _, _ensemble, surrogate = fitted
    path = tmp_path / "model"
    miret.save_model(surrogate, path, signing_key=KEY)
    mlmodel = (
        (path / "MLmodel")
        .read_text()
        .replace("surrogate_class: MiretSurrogate", "surrogate_class: os.system")
    )
    (path / "MLmodel").write_text(mlmodel)
    sign_model_dir(path, KEY)  # what the key holder signed is still checked
    with pytest.raises(mlflow.MlflowException, match="unknown surrogate class"):
        miret.load_model(str(path))


READ_WITHOUT_SKLEARN = """\
import sys
from miret_governance.flavors import miret
model = miret.open_model_dir(sys.argv[1], miret.trusted_keys())
features = [model.tree.feature_names[j] for j in model.tree.used_features()]
print("PROBE", "sklearn" in sys.modules, model.kind, ",".join(features), sep="|")
"""


def test_reading_the_tree_and_evidence_imports_no_sklearn(fitted, tmp_path):
    """What show, gate, promote and audit read (the verified manifest and the tree) needs
    no scikit-learn: the estimator is built on first use only, from the same JSON."""
    _, _, _ensemble, surrogate = fitted
    path = tmp_path / "model"
    miret.save_model(surrogate, path, signing_key=KEY)
    done = subprocess.run(
        [sys.executable, "-c", READ_WITHOUT_SKLEARN, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    used = [FEATURES[j] for j in surrogate.tree_.used_features()]
    probe = done.stdout.splitlines()[-1].split("|")
    assert probe == ["PROBE", "False", "MiretSurrogate", ",".join(used)]

    model = miret.open_model_dir(str(path), miret.trusted_keys())
    assert "surrogate" not in vars(model)  # not built yet
    assert model.tree.to_dict() == surrogate.tree_.to_dict()
    assert isinstance(model.surrogate, MiretSurrogate) and model.surrogate is model.surrogate
    assert model.surrogate.to_dict() == surrogate.to_dict()
    assert model.scaler.scale_.tolist() == surrogate.input_scaler_.scale_.tolist()
    # the allow-list names exactly the two classes a surrogate is saved as
    assert {type(surrogate).__name__, type(surrogate.tree_).__name__} == set(
        miret.SURROGATE_CLASSES
    )


def test_default_requirements_name_the_package():
    requirements = miret.get_default_pip_requirements()
    assert requirements[0].startswith("miret-governance==")
    assert any(r.startswith("numpy==") for r in requirements)
    env = miret.get_default_conda_env()
    assert any(isinstance(d, dict) and "pip" in d for d in env["dependencies"])


def test_surrogate_of_an_earlier_format_is_refused_with_the_fix(fitted, tmp_path):
    """A format-1 surrogate (loader ``flavors.miret``) gets "explain again", not a crash."""
    from miret_governance.flavors.errors import GovernanceError

    _X, _pipeline, _ensemble, surrogate = fitted
    path = tmp_path / "model"
    miret.save_model(surrogate, path, signing_key=KEY)
    mlmodel = yaml.safe_load((path / "MLmodel").read_text())
    assert mlmodel["flavors"]["miret"]["format_version"] == miret.FORMAT_VERSION == 2
    del mlmodel["flavors"]["miret"]["format_version"]
    mlmodel["flavors"]["python_function"]["loader_module"] = "flavors.miret"
    (path / "MLmodel").write_text(yaml.safe_dump(mlmodel))
    sign_model_dir(path, KEY)
    for load in (miret.load_model, miret.read_evidence):
        with pytest.raises(GovernanceError, match=r"format 1.*govern explain --force"):
            load(str(path))
