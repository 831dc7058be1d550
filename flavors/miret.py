"""The ``miret`` MLflow flavor: a MIRET surrogate tree stored as plain JSON.

A model directory written by :func:`save_model` holds::

    MLmodel                 flavors "miret" and "python_function"
    surrogate.json          the fitted surrogate (``to_dict``, with its input scaler),
                            never a pickle
    vite/, figures/, report.html, model_card.md, validation.json
                            explanation artifacts passed as ``artifacts``
    evidence.json           the manifest: provenance of the explanation and the sha256
                            of every other file of the directory
    model.sig               the signature of every other file, MLmodel included
                            (:mod:`flavors.trust`), when saved with a ``signing_key``

The manifest (:mod:`flavors.evidence`) has its own sha256 recorded in the MLmodel flavor
configuration (``evidence_digest``). Every reader here (:func:`load_model`,
:func:`load_preprocessing`, :func:`read_evidence`, the pyfunc loader) first verifies the
signature with a key its policy trusts to sign ``explain`` evidence (``policy=``, else the
policy file named by ``GOVERN_POLICY``; refused without one), before MLmodel or any other
file is parsed; then checks MLmodel's ``python_function`` entry and every digest, and
refuses an edited, missing or extra file. It reads JSON only: no pickle, and no
``code/`` folder is ever put on the import path (the flavor writes none).
``mlflow.pyfunc.load_model(uri).predict(df)`` returns the surrogate's class labels, but
MLflow reads MLmodel and imports what it names before this flavor's loader runs: score
with :func:`load_model` (``uri``, ``policy=...``), which verifies first. The input space
is a model config, ``input_space``: ``"raw"`` (the ensemble's input units, mapped by the
surrogate's stored scaler) or ``"normalized"`` (the MILP's working space).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any

import mlflow
import numpy as np
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
from miret_governance.flavors.scoring import MiretModelWrapper, check_input_space
from miret_governance.flavors.trust import sign_model_dir, trusted_keys, verify_model_signature
from miret_governance.governance.errors import InvalidInputError, InvalidTypeError
from miret_governance.governance.trust.keyring import Signer, TrustedKeys
from miret_governance.governance.trust.signers import SigningKey

FLAVOR_NAME = "miret"
FORMAT_VERSION = 2
"""Version of the flavor's directory layout; 2: the ``miret_governance`` namespace
(``loader_module`` ``miret_governance.flavors.miret``). Nothing else is read."""
SURROGATE_FILE = "surrogate.json"
LOADER_MODULE = "miret_governance.flavors.miret"
"""The only ``python_function.loader_module`` a surrogate's MLmodel may name."""
_RESERVED = {MLMODEL_FILE_NAME, SURROGATE_FILE, EVIDENCE_FILE}


SURROGATE_CLASSES = ("MiretSurrogate", "SurrogateTree")
"""The ``surrogate_class`` names a surrogate may be saved and restored as (an allow-list:
no other class is imported)."""


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
def verify_model_dir(model_dir: str, trusted: TrustedKeys, what: str | None = None) -> dict:
    """Verify a ``miret`` model directory: its signature by a key ``trusted`` for
    ``explain`` first (nothing is parsed before), then every digest against the manifest
    that MLmodel's ``evidence_digest`` vouches for. ``what`` names the model in messages.

    Returns
    -------
    dict
        The fields of the verified manifest (:func:`flavors.evidence.verify_manifest`),
        its ``digest`` and ``signer`` (:class:`governance.trust.keyring.Signer`).

    Raises
    ------
    governance.trust.keyring.SignatureError
        Unsigned, signed by a key not trusted for explain, or altered since it was signed.
    GovernanceError
        A surrogate of another :data:`FORMAT_VERSION` (explain it again).
    TamperedModelError
    """
    signer = verify_model_signature(model_dir, trusted, what)
    conf = _get_flavor_configuration(model_path=model_dir, flavor_name=FLAVOR_NAME)
    found = conf.get("format_version", 1)
    if found != FORMAT_VERSION:
        raise GovernanceError(
            f"{model_dir} is a miret surrogate of format {found!r}, written by an earlier "
            f"miret-governance; this version reads format {FORMAT_VERSION} only. Explain the "
            "ensemble again (govern explain --force) to get a current surrogate"
        )
    check_pyfunc_entry(model_dir, LOADER_MODULE, SURROGATE_FILE)
    digest = conf.get("evidence_digest")
    return {**asdict(verify_manifest(model_dir, digest)), "digest": digest, "signer": signer}


def read_evidence(model_dir_or_uri, policy=None) -> dict:
    """The verified evidence manifest of a ``miret`` model (local directory or URI).

    Parameters
    ----------
    model_dir_or_uri : str or path
    policy : Policy, TrustedKeys or path, optional
        Whose ``[keys]`` to trust (default: the file ``GOVERN_POLICY`` names).

    Returns
    -------
    dict
        ``provenance`` (what the explanation was made from and what it found: see
        docs/architecture.md), ``files`` (relative path -> sha256), ``format``,
        ``format_version``, ``digest`` (sha256 of ``evidence.json`` itself, also in
        MLmodel and the ``governance.evidence_digest`` model-version tag) and ``signer``.

    Raises
    ------
    governance.trust.keyring.SignatureError
    TamperedModelError
    """
    trusted = trusted_keys(policy)
    local = str(model_dir_or_uri)
    if not os.path.isdir(local):
        local = _download_artifact_from_uri(artifact_uri=local)
    return verify_model_dir(local, trusted)


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
            raise InvalidInputError(
                f"artifact destination {dest!r} must be a relative, non-reserved path"
            )
        source = Path(source)
        if not source.exists():
            raise InvalidInputError(f"artifact {dest!r}: {source} does not exist")
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
    signing_key: SigningKey | None = None,
    validate_serving_input: bool = False,
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
    signing_key : governance.trust.signers.SigningKey, optional
        Signs the finished directory, MLmodel included (``model.sig``); without it the
        surrogate is unsigned, and no reader here trusts it.
    validate_serving_input : bool
        Read by MLflow's ``Model.log``, not here: :func:`log_model` passes False, since
        checking the input example would load the signed model through pyfunc (which
        needs a trusted policy) and may rewrite MLmodel after it was signed.
    """
    kind = type(surrogate).__name__
    if kind not in SURROGATE_CLASSES:
        raise InvalidTypeError(f"expected a MiretSurrogate or SurrogateTree, got {kind}")
    tree = getattr(surrogate, "tree_", surrogate)
    feature_names = list(tree.feature_names)
    if input_space is None:
        input_space = "raw" if kind == "MiretSurrogate" else "normalized"
    check_input_space(input_space, surrogate)
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
    if signing_key is not None:
        sign_model_dir(path, signing_key)


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
    signing_key: SigningKey | None = None,
):
    """Log a MIRET surrogate as an MLflow logged model of the active run.

    Parameters are those of :func:`save_model` plus MLflow's ``log_model`` ones
    (``name``, ``registered_model_name``, ``params``, ``tags``, ``model_type``, ``step``,
    ``model_id``). MLflow uploads the directory as :func:`save_model` wrote and signed
    it: it would rewrite MLmodel only after validating the input example, which is off.

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
        signing_key=signing_key,
        validate_serving_input=False,
    )


# ---------------------------------------------------------------------- load
@dataclass(frozen=True)
class VerifiedModel:
    """A ``miret`` model directory read after :func:`verify_model_dir`.

    ``surrogate.json`` is parsed (JSON only) and its tree checked when the directory is
    opened; the estimator itself (scikit-learn's, with its scaler) is built on first use
    of :attr:`surrogate` or :attr:`scaler`, so readers of the signed figures and the tree
    (``show``, ``gate``, ``promote``, ``audit``) never import scikit-learn.

    Attributes
    ----------
    kind : str
        MLmodel's ``surrogate_class``: ``"MiretSurrogate"`` or ``"SurrogateTree"``.
    document : dict
        The verified ``surrogate.json``.
    tree : SurrogateTree
        The fitted tree (``surrogate.tree_`` of a MiretSurrogate).
    conf : dict
        The ``miret`` flavor configuration of MLmodel.
    manifest : dict
        The verified evidence manifest (with ``digest``).
    signer : governance.trust.keyring.Signer
    """

    kind: str
    document: dict
    tree: object
    conf: dict
    manifest: dict
    signer: Signer

    @cached_property
    def surrogate(self):
        """The MiretSurrogate or SurrogateTree, built from :attr:`document` once."""
        if self.kind == "SurrogateTree":
            return self.tree
        from miret_governance.governance.miret import MiretSurrogate

        return MiretSurrogate.from_dict(self.document)

    @property
    def scaler(self):
        """The surrogate's input scaler (None for a bare SurrogateTree)."""
        return getattr(self.surrogate, "input_scaler_", None)


def open_model_dir(model_dir: str, trusted: TrustedKeys, what: str | None = None) -> VerifiedModel:
    """Verify a local ``miret`` model directory (:func:`verify_model_dir`), then read it:
    ``surrogate.json`` parsed and its tree checked (:class:`VerifiedModel`)."""
    from miret_governance.governance.miret.fit.persistence import read_tree
    from miret_governance.governance.miret.tree.tree import SurrogateTree

    manifest = verify_model_dir(model_dir, trusted, what)
    conf = _get_flavor_configuration(model_path=model_dir, flavor_name=FLAVOR_NAME)
    kind = conf.get("surrogate_class")
    if kind not in SURROGATE_CLASSES:
        raise mlflow.MlflowException(f"unknown surrogate class {kind!r} in {model_dir}/MLmodel")
    with open(os.path.join(model_dir, SURROGATE_FILE)) as f:
        document = json.load(f)
    tree = read_tree(document) if kind == "MiretSurrogate" else SurrogateTree.from_dict(document)
    return VerifiedModel(kind, document, tree, conf, manifest, manifest.pop("signer"))


def read_model_dir(model_dir: str, trusted: TrustedKeys):
    """Surrogate, its input scaler (None for a bare SurrogateTree) and the flavor
    configuration of a local model directory (:func:`open_model_dir`)."""
    model = open_model_dir(model_dir, trusted)
    return model.surrogate, model.scaler, model.conf


def load_model(model_uri: str, dst_path: str | None = None, policy=None):
    """Load the surrogate (``MiretSurrogate`` or ``SurrogateTree``) of a ``miret`` model:
    the safe way to score one.

    The signature is verified first, then every file against the evidence manifest;
    nothing from the model directory is imported.

    Parameters
    ----------
    model_uri : str
        ``models:/name/version``, ``runs:/...``, ``models:/m-...`` or a local path.
    dst_path : str, optional
        Local directory to download the model into.
    policy : Policy, TrustedKeys or path, optional
        Whose ``[keys]`` to trust (default: the policy file ``GOVERN_POLICY`` names).

    Raises
    ------
    governance.trust.keyring.SignatureError
        No trust configured, unsigned, signed by a key not trusted for explain, or
        altered since it was signed.
    TamperedModelError
        A file of the model was edited, removed or added after it was saved.
    """
    trusted = trusted_keys(policy)
    local = _download_artifact_from_uri(artifact_uri=model_uri, output_path=dst_path)
    return read_model_dir(local, trusted)[0]


def load_preprocessing(model_uri: str, dst_path: str | None = None, policy=None):
    """The input scaler stored with a ``miret`` model (``None`` for a SurrogateTree),
    verified as by :func:`load_model`."""
    trusted = trusted_keys(policy)
    local = _download_artifact_from_uri(artifact_uri=model_uri, output_path=dst_path)
    return read_model_dir(local, trusted)[1]


def _load_pyfunc(path: str, model_config: dict | None = None):
    """Called by ``mlflow.pyfunc.load_model``; trusts the policy ``GOVERN_POLICY`` names."""
    model_dir = os.path.dirname(path) if os.path.isfile(path) else path
    surrogate, _, conf = read_model_dir(model_dir, trusted_keys())
    input_space = (model_config or {}).get("input_space", conf["input_space"])
    return MiretModelWrapper(surrogate, input_space)
