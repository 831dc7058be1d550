"""The ``miret`` MLflow flavor: a MIRET surrogate tree stored as plain JSON.

A model directory written by :func:`save_model` holds::

    MLmodel                 flavors "miret" and "python_function"
    surrogate.json          the fitted surrogate (``to_dict``, with its input scaler),
                            never a pickle
    vite/, figures/, report.html, model_card.md, validation.json
                            explanation artifacts passed as ``artifacts``
    evidence.json           the manifest: provenance of the explanation and the sha256
                            of every other file of the directory

The manifest (:mod:`flavors.evidence`) has its own sha256 recorded in the MLmodel flavor
configuration (``evidence_digest``). Loading verifies every digest and refuses a directory with an
edited, missing or extra file; it reads JSON only: no pickle, and no ``code/`` folder is
ever put on the import path (the flavor writes none).
``mlflow.pyfunc.load_model(uri).predict(df)`` returns the surrogate's class labels. The
input space is a model config, ``input_space``: ``"raw"`` (the ensemble's input units,
mapped by the surrogate's stored scaler) or ``"normalized"`` (the MILP's working space).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import yaml
from mlflow import pyfunc
from mlflow.models import Model, ModelInputExample, ModelSignature
from mlflow.models.model import MLMODEL_FILE_NAME
from mlflow.models.signature import Schema
from mlflow.models.utils import _save_example
from mlflow.tracking._model_registry import DEFAULT_AWAIT_MAX_SLEEP_SECONDS
from mlflow.tracking.artifact_utils import _download_artifact_from_uri
from mlflow.types import ColSpec
from mlflow.utils.environment import (
    _CONDA_ENV_FILE_NAME,
    _CONSTRAINTS_FILE_NAME,
    _PYTHON_ENV_FILE_NAME,
    _REQUIREMENTS_FILE_NAME,
    _mlflow_conda_env,
    _process_conda_env,
    _process_pip_requirements,
    _PythonEnv,
    _validate_env_arguments,
)
from mlflow.utils.file_utils import write_to
from mlflow.utils.model_utils import (
    _get_flavor_configuration,
    _validate_and_prepare_target_save_path,
)
from mlflow.utils.requirements_utils import _get_pinned_requirement

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.evidence import (
    EVIDENCE_FILE,
    check_pyfunc_entry,
    verify_manifest,
    write_evidence,
)

FLAVOR_NAME = "miret"
FORMAT_VERSION = 2
"""Version of the flavor's directory layout; 2: the ``miret_governance`` namespace
(``loader_module`` ``miret_governance.flavors.miret``). Nothing else is read."""
SURROGATE_FILE = "surrogate.json"
LOADER_MODULE = "miret_governance.flavors.miret"
"""The only ``python_function.loader_module`` a surrogate's MLmodel may name."""
INPUT_SPACES = ("raw", "normalized")
_RESERVED = {MLMODEL_FILE_NAME, SURROGATE_FILE, EVIDENCE_FILE}


def _surrogate_classes() -> dict:
    """Classes a surrogate may be restored as (an allow-list: nothing else is imported)."""
    from miret_governance.governance.miret import MiretSurrogate
    from miret_governance.governance.miret.tree import SurrogateTree

    return {"MiretSurrogate": MiretSurrogate, "SurrogateTree": SurrogateTree}


def get_default_pip_requirements() -> list[str]:
    """Pip requirements of a model saved by this flavor (the package, numpy, scikit-learn)."""
    return [
        _get_pinned_requirement("miret-governance", module="miret_governance"),
        _get_pinned_requirement("numpy"),
        _get_pinned_requirement("scikit-learn", module="sklearn"),
    ]


def get_default_conda_env() -> dict:
    """Conda environment of a model saved by this flavor."""
    return _mlflow_conda_env(additional_pip_deps=get_default_pip_requirements())


# ---------------------------------------------------------------------- evidence
def verify_model_dir(model_dir: str) -> dict:
    """Check every digest of a ``miret`` model directory against the manifest that
    MLmodel's ``evidence_digest`` vouches for; the verified manifest
    (:func:`flavors.evidence.verify_manifest`).

    Raises
    ------
    GovernanceError
        A surrogate of another :data:`FORMAT_VERSION` (explain it again).
    TamperedModelError
    """
    conf = _get_flavor_configuration(model_path=model_dir, flavor_name=FLAVOR_NAME)
    found = conf.get("format_version", 1)
    if found != FORMAT_VERSION:
        raise GovernanceError(
            f"{model_dir} is a miret surrogate of format {found!r}, written by an earlier "
            f"miret-governance; this version reads format {FORMAT_VERSION} only. Explain the "
            "ensemble again (govern explain --force) to get a current surrogate"
        )
    check_pyfunc_entry(model_dir, LOADER_MODULE, SURROGATE_FILE)
    return verify_manifest(model_dir, conf.get("evidence_digest"))


def read_evidence(model_dir_or_uri) -> dict:
    """The verified evidence manifest of a ``miret`` model (local directory or URI).

    Returns
    -------
    dict
        ``provenance`` (what the explanation was made from and what it found: see
        docs/architecture.md), ``files`` (relative path -> sha256), ``format``,
        ``format_version`` and ``digest`` (sha256 of ``evidence.json`` itself, also in
        MLmodel and the ``governance.evidence_digest`` model-version tag).

    Raises
    ------
    TamperedModelError
    """
    local = str(model_dir_or_uri)
    if not os.path.isdir(local):
        local = _download_artifact_from_uri(artifact_uri=local)
    return verify_model_dir(local)


def _default_signature(feature_names, classes) -> ModelSignature:
    label_type = "string" if isinstance(classes[0], str) else "long"
    if isinstance(classes[0], (float, np.floating)):
        label_type = "double"
    return ModelSignature(
        inputs=Schema([ColSpec("double", name) for name in feature_names]),
        outputs=Schema([ColSpec(label_type)]),
    )


def _copy_artifacts(artifacts, path: str) -> list[str]:
    copied = []
    for dest, source in (artifacts or {}).items():
        rel = PurePosixPath(dest)
        if rel.is_absolute() or ".." in rel.parts or str(rel) in _RESERVED:
            raise ValueError(f"artifact destination {dest!r} must be a relative, non-reserved path")
        source = Path(source)
        if not source.exists():
            raise FileNotFoundError(f"artifact {dest!r}: {source} does not exist")
        target = Path(path, *rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copyfile(source, target)
        copied.append(str(rel))
    return sorted(copied)


# ---------------------------------------------------------------------- save / log
def save_model(
    surrogate,
    path,
    input_space: str | None = None,
    artifacts: dict | None = None,
    evidence: dict | None = None,
    conda_env=None,
    mlflow_model: Model | None = None,
    signature: ModelSignature | None = None,
    input_example: ModelInputExample = None,
    pip_requirements=None,
    extra_pip_requirements=None,
    metadata: dict | None = None,
):
    """Save a fitted MIRET surrogate as an MLflow model directory.

    Parameters
    ----------
    surrogate : governance.miret.MiretSurrogate or governance.miret.SurrogateTree
        Fitted surrogate; stored with its ``to_dict`` as ``surrogate.json`` (a
        MiretSurrogate carries its input scaler there).
    path : str
        Directory to create (must not exist).
    input_space : {"raw", "normalized"}, optional
        Default input space of ``predict``: ``"raw"`` for a MiretSurrogate, else
        ``"normalized"`` (a bare SurrogateTree has no scaler).
    artifacts : dict, optional
        Relative destination in the model directory -> local file or directory to copy
        (``vite/``, ``figures/``, ``report.html``, ``model_card.md``, ...).
    evidence : dict, optional
        Provenance stored in ``evidence.json`` next to the digest of every file.
    conda_env, mlflow_model, signature, input_example, pip_requirements,
    extra_pip_requirements, metadata
        As in MLflow's built-in flavors. Without a signature one is built: one double
        column per feature and the class label as output. There is no ``code_paths``:
        a surrogate never ships code.
    """
    kind = type(surrogate).__name__
    if kind not in _surrogate_classes():
        raise TypeError(f"expected a MiretSurrogate or SurrogateTree, got {kind}")
    tree = getattr(surrogate, "tree_", surrogate)
    feature_names = list(tree.feature_names)
    if input_space is None:
        input_space = "raw" if kind == "MiretSurrogate" else "normalized"
    _check_input_space(input_space, surrogate)
    _validate_env_arguments(conda_env, pip_requirements, extra_pip_requirements)

    path = os.path.abspath(path)
    _validate_and_prepare_target_save_path(path)
    if mlflow_model is None:
        mlflow_model = Model()
    _save_example(mlflow_model, input_example, path)
    if signature is None:
        signature = _default_signature(feature_names, list(tree.classes))
    if signature is not False:
        mlflow_model.signature = signature
    if metadata is not None:
        mlflow_model.metadata = metadata

    with open(os.path.join(path, SURROGATE_FILE), "w") as f:
        json.dump(surrogate.to_dict(), f, indent=1)
    copied = _copy_artifacts(artifacts, path)

    if conda_env is None:
        default = get_default_pip_requirements() if pip_requirements is None else None
        conda_env, pip_requirements, pip_constraints = _process_pip_requirements(
            default, pip_requirements, extra_pip_requirements
        )
    else:
        conda_env, pip_requirements, pip_constraints = _process_conda_env(conda_env)
    with open(os.path.join(path, _CONDA_ENV_FILE_NAME), "w") as f:
        yaml.safe_dump(conda_env, stream=f, default_flow_style=False)
    if pip_constraints:
        write_to(os.path.join(path, _CONSTRAINTS_FILE_NAME), "\n".join(pip_constraints))
    write_to(os.path.join(path, _REQUIREMENTS_FILE_NAME), "\n".join(pip_requirements))
    _PythonEnv.current().to_yaml(os.path.join(path, _PYTHON_ENV_FILE_NAME))
    evidence_digest = write_evidence(path, dict(evidence or {}))

    pyfunc.add_to_model(
        mlflow_model,
        loader_module=LOADER_MODULE,
        data=SURROGATE_FILE,
        conda_env=_CONDA_ENV_FILE_NAME,
        python_env=_PYTHON_ENV_FILE_NAME,
        model_config={"input_space": input_space},
    )
    mlflow_model.add_flavor(
        FLAVOR_NAME,
        format_version=FORMAT_VERSION,
        surrogate=SURROGATE_FILE,
        surrogate_class=kind,
        input_space=input_space,
        depth=int(tree.depth),
        feature_names=feature_names,
        classes=[c.item() if hasattr(c, "item") else c for c in tree.classes],
        artifacts=copied,
        evidence=EVIDENCE_FILE,
        evidence_digest=evidence_digest,
    )
    mlflow_model.save(os.path.join(path, MLMODEL_FILE_NAME))


def log_model(
    surrogate,
    name: str | None = None,
    input_space: str | None = None,
    artifacts: dict | None = None,
    evidence: dict | None = None,
    conda_env=None,
    registered_model_name: str | None = None,
    signature: ModelSignature | None = None,
    input_example: ModelInputExample = None,
    await_registration_for=DEFAULT_AWAIT_MAX_SLEEP_SECONDS,
    pip_requirements=None,
    extra_pip_requirements=None,
    metadata: dict | None = None,
    params: dict[str, Any] | None = None,
    tags: dict[str, Any] | None = None,
    model_type: str | None = None,
    step: int = 0,
    model_id: str | None = None,
):
    """Log a MIRET surrogate as an MLflow logged model of the active run.

    Parameters are those of :func:`save_model` plus MLflow's ``log_model`` ones
    (``name``, ``registered_model_name``, ``params``, ``tags``, ``model_type``, ``step``,
    ``model_id``).

    Returns
    -------
    mlflow.models.model.ModelInfo
    """
    return Model.log(
        artifact_path=None,
        name=name,
        flavor=sys.modules[__name__],
        registered_model_name=registered_model_name,
        surrogate=surrogate,
        input_space=input_space,
        artifacts=artifacts,
        evidence=evidence,
        conda_env=conda_env,
        signature=signature,
        input_example=input_example,
        await_registration_for=await_registration_for,
        pip_requirements=pip_requirements,
        extra_pip_requirements=extra_pip_requirements,
        metadata=metadata,
        params=params,
        tags=tags,
        model_type=model_type,
        step=step,
        model_id=model_id,
    )


# ---------------------------------------------------------------------- load
def read_model_dir(model_dir: str):
    """Surrogate, its input scaler (None for a bare SurrogateTree) and the flavor
    configuration of a local model directory, after :func:`verify_model_dir`."""
    verify_model_dir(model_dir)
    conf = _get_flavor_configuration(model_path=model_dir, flavor_name=FLAVOR_NAME)
    classes = _surrogate_classes()
    kind = conf.get("surrogate_class")
    if kind not in classes:
        raise mlflow.MlflowException(f"unknown surrogate class {kind!r} in {model_dir}/MLmodel")
    with open(os.path.join(model_dir, SURROGATE_FILE)) as f:
        surrogate = classes[kind].from_dict(json.load(f))
    return surrogate, getattr(surrogate, "input_scaler_", None), conf


def load_model(model_uri: str, dst_path: str | None = None):
    """Load the surrogate (``MiretSurrogate`` or ``SurrogateTree``) of a ``miret`` model.

    Every file is checked against the evidence manifest first; nothing from the model
    directory is imported.

    Parameters
    ----------
    model_uri : str
        ``models:/name/version``, ``runs:/...``, ``models:/m-...`` or a local path.
    dst_path : str, optional
        Local directory to download the model into.

    Raises
    ------
    TamperedModelError
        A file of the model was edited, removed or added after it was saved.
    """
    local = _download_artifact_from_uri(artifact_uri=model_uri, output_path=dst_path)
    return read_model_dir(local)[0]


def load_preprocessing(model_uri: str, dst_path: str | None = None):
    """The input scaler stored with a ``miret`` model (``None`` for a SurrogateTree)."""
    local = _download_artifact_from_uri(artifact_uri=model_uri, output_path=dst_path)
    return read_model_dir(local)[1]


def _load_pyfunc(path: str, model_config: dict | None = None):
    """Called by ``mlflow.pyfunc.load_model``."""
    model_dir = os.path.dirname(path) if os.path.isfile(path) else path
    surrogate, _, conf = read_model_dir(model_dir)
    input_space = (model_config or {}).get("input_space", conf["input_space"])
    return _MiretModelWrapper(surrogate, input_space)


def _check_input_space(input_space: str, surrogate) -> None:
    """``input_space`` is known, and ``"raw"`` only for a surrogate that has a scaler."""
    if input_space not in INPUT_SPACES:
        raise ValueError(f"input_space must be one of {INPUT_SPACES}, got {input_space!r}")
    if input_space == "raw" and type(surrogate).__name__ != "MiretSurrogate":
        raise ValueError("input_space='raw' needs a MiretSurrogate (a SurrogateTree has no scaler)")


class _MiretModelWrapper:
    """pyfunc wrapper: class labels of the surrogate for raw or normalized input."""

    def __init__(self, surrogate, input_space: str):
        _check_input_space(input_space, surrogate)
        self.surrogate = surrogate
        self.input_space = input_space
        self.feature_names = list(getattr(surrogate, "tree_", surrogate).feature_names)

    def get_raw_model(self):
        """The surrogate object."""
        return self.surrogate

    def _matrix(self, data) -> np.ndarray:
        if isinstance(data, pd.DataFrame):
            missing = [c for c in self.feature_names if c not in data.columns]
            if missing:
                if list(data.columns) == list(range(len(self.feature_names))):
                    return data.to_numpy(dtype=np.float64)
                raise ValueError(f"input is missing feature columns: {', '.join(missing)}")
            return data[self.feature_names].to_numpy(dtype=np.float64)
        X = np.asarray(data, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.feature_names):
            raise ValueError(f"expected {len(self.feature_names)} feature columns, got {X.shape}")
        return X

    def predict(self, model_input, params: dict[str, Any] | None = None) -> np.ndarray:
        """Class labels of the surrogate.

        Parameters
        ----------
        model_input : DataFrame or array-like
            One column per feature (by name for a DataFrame), in ``self.input_space``.
        params : dict, optional
            Unused (the input space is a model config).
        """
        X = self._matrix(model_input)
        if self.input_space == "raw":  # a MiretSurrogate maps raw input with its own scaler
            return self.surrogate.predict(X)
        return getattr(self.surrogate, "tree_", self.surrogate).predict(X)
