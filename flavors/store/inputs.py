"""What an explain run reads of the registry: the registered ensemble, safely (the data
files: :mod:`flavors.data_files`).

Loading never executes code from the artifact: scikit-learn models are read with skops
and a fixed list of trusted types, XGBoost models from XGBoost's own model file into a
class chosen here (never a class named by the MLmodel file). No model's ``code/`` folder
is put on the import path. Pickled scikit-learn models are refused unless the caller
trusts them explicitly (``trust_pickle``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mlflow.models import Model

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.evidence import model_files_digest
from miret_governance.flavors.store.registry import download_model
from miret_governance.governance.ensembles.trees import MalformedModelError, UnsupportedModelError

SKOPS_TRUSTED_TYPES = (
    "sklearn.tree._tree.Tree",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "functools.partial",
    "sklearn.utils.validation.check_array",
)
"""Types trusted when reading a scikit-learn model saved with skops, beyond skops' own
defaults. The list is ours, not the model's: a model cannot widen it. A
HistGradientBoostingClassifier with native categorical features keeps
``FunctionTransformer(partial(check_array, ...))`` for its numeric columns: skops
rebuilds a ``partial`` only around a function that is itself trusted (each is checked
on its own), and nothing here ever calls it (:mod:`governance.native_categories` maps
the categories itself)."""
XGBOOST_CLASSES = {
    "xgboost.sklearn.XGBClassifier": "XGBClassifier",
    "xgboost.core.Booster": "Booster",
}
"""XGBoost classes a model file may be read into, by the name MLflow records. Any other
``model_class`` is refused; nothing named by the MLmodel file is ever imported."""


# ---------------------------------------------------------------------- the ensemble
def _artifact_file(local: str, relative) -> str:
    """``local/relative``, refusing a path that leaves the model directory."""
    root = os.path.realpath(local)
    path = os.path.realpath(os.path.join(root, str(relative)))
    if os.path.commonpath([root, path]) != root or not os.path.isfile(path):
        raise ExplainError(f"the model file {relative!r} named in MLmodel is not in {local}")
    return path


def _pickle_refusal(fmt: str) -> ExplainError:
    return ExplainError(
        f"the scikit-learn model is stored as {fmt!r}: loading a pickle runs whatever code "
        "the file carries, so it is refused. Re-log the model with "
        "mlflow.sklearn.log_model(model, name='model', serialization_format='skops', "
        f"skops_trusted_types={list(SKOPS_TRUSTED_TYPES)!r}) to explain it safely (the fitted "
        "trees' types are the only ones a forest, extra trees, gradient boosting, histogram "
        "gradient boosting or a Pipeline with MinMaxScaler or a ColumnTransformer of encoders "
        "needs beyond skops' defaults), "
        "or, if you trust whoever wrote this artifact, pass --trust-pickle "
        "(trust_pickle=True); that choice is recorded on the surrogate and in its report."
    )


def _load_sklearn(local: str, conf: dict, mlmodel: Model, trust_pickle: bool):
    fmt = conf.get("serialization_format")
    path = _artifact_file(local, conf.get("pickled_model", ""))
    if fmt == "skops":
        return load_skops_file(path)
    if fmt not in ("pickle", "cloudpickle"):
        raise ExplainError(f"unknown scikit-learn serialization format {fmt!r} in MLmodel")
    if not trust_pickle:
        raise _pickle_refusal(fmt)
    from mlflow.sklearn import _load_model_from_local_file

    previous = os.environ.get("MLFLOW_ALLOW_PICKLE_DESERIALIZATION")
    os.environ["MLFLOW_ALLOW_PICKLE_DESERIALIZATION"] = "true"
    try:
        return _load_model_from_local_file(path, fmt)
    finally:
        if previous is None:
            del os.environ["MLFLOW_ALLOW_PICKLE_DESERIALIZATION"]
        else:
            os.environ["MLFLOW_ALLOW_PICKLE_DESERIALIZATION"] = previous


def load_skops_file(path):
    """A scikit-learn model from a skops file, with :data:`SKOPS_TRUSTED_TYPES` only.

    Raises
    ------
    ExplainError
        The file holds a type that is not trusted.
    MalformedModelError
        skops cannot rebuild the file's objects (truncated or crafted content).
    """
    import skops.io

    try:
        untrusted = set(skops.io.get_untrusted_types(file=path)) - set(SKOPS_TRUSTED_TYPES)
    except Exception as exc:  # skops reports a broken file with any exception type
        raise MalformedModelError(f"skops cannot read {Path(path).name} ({exc})") from exc
    if untrusted:
        raise ExplainError(
            f"the scikit-learn model contains types that are not trusted for loading: "
            f"{', '.join(sorted(untrusted))}; only tree ensembles are supported"
        )
    try:
        return skops.io.load(path, trusted=list(SKOPS_TRUSTED_TYPES))
    except Exception as exc:  # likewise: a crafted state fails wherever skops notices it
        raise MalformedModelError(f"skops cannot rebuild {Path(path).name} ({exc})") from exc


def load_xgboost_file(path, class_name: str = "XGBClassifier"):
    """An XGBoost model file read into ``xgboost.<class_name>``, after
    :func:`governance.model_files.checked_model_json` decoded and checked it: XGBoost
    parses only the checked document, re-encoded as JSON (its own reader crashes on
    crafted files).

    Raises
    ------
    MalformedModelError
    """
    import tempfile

    import xgboost

    from miret_governance.governance.ensembles.readers.xgboost_files import checked_model_json

    checked = checked_model_json(Path(path).read_bytes())
    model = getattr(xgboost, class_name)()
    with tempfile.TemporaryDirectory(prefix="xgboost-checked-") as folder:
        target = os.path.join(folder, "model.json")
        with open(target, "wb") as f:
            f.write(checked)
        try:
            model.load_model(target)
        except xgboost.core.XGBoostError as exc:
            raise MalformedModelError(f"XGBoost refuses the checked model ({exc})") from exc
    return model


def _load_xgboost(local: str, conf: dict, mlmodel: Model, trust_pickle: bool):
    recorded = conf.get("model_class", "xgboost.core.Booster")
    if recorded not in XGBOOST_CLASSES:
        raise ExplainError(
            f"the XGBoost model names model_class {recorded!r}; explain reads XGBoost model "
            f"files only into {sorted(XGBOOST_CLASSES)}: re-log it with mlflow.xgboost from "
            "an XGBClassifier or a Booster"
        )
    return load_xgboost_file(_artifact_file(local, conf.get("data", "")), XGBOOST_CLASSES[recorded])


def _load_lightgbm(local: str, conf: dict, mlmodel: Model, trust_pickle: bool):
    """A LightGBM model stored as its text model file (``model.lgb``, how mlflow.lightgbm
    stores a Booster), read by :mod:`governance.lightgbm_text`; LightGBM never parses it.

    LightGBM replaces spaces in feature names by ``_``; the MLflow signature's column
    names are taken instead when they name the same columns.
    """
    from miret_governance.governance.ensembles.readers.lightgbm_text import (
        MAX_TEXT_CHARS,
        LightGBMText,
    )

    data = str(conf.get("data", ""))
    if not data.endswith(".lgb"):
        raise ExplainError(
            f"the LightGBM model is stored as {data!r}, a pickle (how mlflow.lightgbm stores "
            "an LGBMClassifier): loading it runs code from the artifact, so it is refused. "
            "Log its booster instead, which is stored as LightGBM's text model: "
            "mlflow.lightgbm.log_model(model.booster_, name='model')"
        )
    path = _artifact_file(local, data)
    if os.path.getsize(path) > MAX_TEXT_CHARS:
        raise ExplainError(f"the LightGBM model file is larger than {MAX_TEXT_CHARS} bytes")
    inputs = mlmodel.signature.inputs if mlmodel.signature is not None else None
    names = inputs.input_names() if inputs is not None and inputs.has_input_names() else None
    with open(path, encoding="utf-8", errors="replace") as handle:
        return LightGBMText(handle.read(), feature_names=names)


FLAVOR_LOADERS = {
    "lightgbm": _load_lightgbm,
    "xgboost": _load_xgboost,
    "sklearn": _load_sklearn,
}
"""The MLflow flavors explain loads, each with its loader
``loader(local, flavor_conf, mlmodel, trust_pickle)``, which runs no code from the
artifact (pickle only with ``trust_pickle``); a model directory with several of them is
loaded by the first in this order. The readers of the loaded models are
:data:`governance.readers.reading.LIBRARIES`."""


def load_ensemble(model_uri: str, trust_pickle: bool = False):
    """Load a registered model without executing its code and read it as an Ensemble.

    Parameters
    ----------
    model_uri : str
    trust_pickle : bool
        Also load scikit-learn models stored as pickle or cloudpickle (this runs code
        from the artifact); refused by default.

    Returns
    -------
    (Ensemble, object)
        The uniform view and the loaded model.
    """
    with tempfile.TemporaryDirectory(prefix="ensemble-") as private:
        return _read_model_dir(download_model(model_uri, private), model_uri, trust_pickle)


def _read_model_dir(local: str, model_uri: str, trust_pickle: bool):
    """:func:`load_ensemble` of the model directory ``local``, downloaded from ``model_uri``."""
    from miret_governance.governance.ensembles.readers.reading import read_ensemble

    mlmodel = Model.load(local)
    flavors = mlmodel.flavors
    if not set(FLAVOR_LOADERS) & set(flavors):
        raise ExplainError(
            f"{model_uri} has flavors {sorted(flavors)}; explain supports models logged "
            "with mlflow.sklearn, mlflow.xgboost or mlflow.lightgbm"
        )
    try:
        flavor = next(name for name in FLAVOR_LOADERS if name in flavors)
        model = FLAVOR_LOADERS[flavor](local, flavors[flavor], mlmodel, trust_pickle)
        # loaded without running its code (or trusted): its own predict gives the labels
        return read_ensemble(model, native=True), model
    except UnsupportedModelError as exc:  # MalformedModelError too: every tree is checked
        raise ExplainError(f"{model_uri}: {exc}") from exc


def load_explainable_ensemble(model_uri: str, trust_pickle: bool = False):
    """:func:`load_ensemble`, refusing preprocessing the surrogate cannot store as JSON
    or explain in its encoded space (a single MinMaxScaler, a ColumnTransformer of
    :mod:`governance.encoding`, or a model's native categories,
    :mod:`governance.native_categories`) and categorical splits without categories."""
    ensemble, _ = load_ensemble(model_uri, trust_pickle)
    return _explainable(ensemble, model_uri)


def load_digested_ensemble(model_uri: str, trust_pickle: bool = False):
    """:func:`load_ensemble`'s Ensemble and the digest of the very files it read
    (:func:`flavors.evidence.model_files_digest`), downloaded once.

    Returns
    -------
    (Ensemble, str)
    """
    with tempfile.TemporaryDirectory(prefix="ensemble-") as private:
        local = download_model(model_uri, private)  # a copy: a local store's own folder
        digest = model_files_digest(local)  # could change between the hash and the load
        ensemble, _ = _read_model_dir(local, model_uri, trust_pickle)
    return ensemble, digest


def load_pinned_ensemble(model_uri: str, trust_pickle: bool = False):
    """:func:`load_explainable_ensemble` and the digest of the very files it read, for
    the evidence to pin (:func:`load_digested_ensemble`).

    Returns
    -------
    (Ensemble, str)
    """
    ensemble, digest = load_digested_ensemble(model_uri, trust_pickle)
    return _explainable(ensemble, model_uri), digest


def _explainable(ensemble, model_uri: str):
    """``ensemble``, unless :func:`load_explainable_ensemble` refuses it."""
    from miret_governance.governance.ensembles.encoding import encoding_of

    if ensemble.preprocessor is None and any(t.is_categorical.any() for t in ensemble.trees):
        raise ExplainError(
            f"{model_uri} has native categorical splits on category codes whose categories "
            "the model does not record, so rules could not name them: train the LightGBM "
            "model on a DataFrame whose categorical columns have the pandas 'category' "
            "dtype (it then records pandas_categorical), or encode the categories in a "
            "Pipeline"
        )
    single_scaler = ensemble.scaler is not None and len(ensemble.preprocessor.steps) == 1
    encodes = ensemble.preprocessor is not None and encoding_of(ensemble.preprocessor)
    if ensemble.preprocessor is not None and not (single_scaler or encodes):
        raise ExplainError(
            f"{model_uri} preprocesses its input with {ensemble.preprocessor}; only a "
            "single MinMaxScaler, or one ColumnTransformer of OneHotEncoder, "
            "OrdinalEncoder, MinMaxScaler and passthrough columns, in front of the "
            "ensemble can be explained without pickle"
        )
    return ensemble
