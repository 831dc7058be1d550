"""The evidence manifest of a ``miret`` model directory: ``evidence.json``.

The manifest holds the provenance of an explanation and the sha256 of every other file
of the directory (MLflow's own metadata aside); its own sha256 is recorded by the
flavor in MLmodel (``evidence_digest``). :func:`write_evidence` writes it when a model
is saved; :func:`verify_manifest` re-hashes every file before a model is loaded and
refuses a directory with an edited, missing or extra file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from mlflow import MlflowException
from mlflow.models.model import MLMODEL_FILE_NAME

from miret_governance.governance.errors import GovernanceError
from miret_governance.governance.trust.signing import SIGNATURE_FILE

EVIDENCE_FILE = "evidence.json"
FLAVORS_CODE = (Path(__file__).parent,)
"""This package's folder: its code (how data is prepared for the fit) is digested into the
evidence's environment with the domain's (``governance.environment.SOURCE_KEY``)."""
EVIDENCE_FORMAT = "miret-evidence"
EVIDENCE_FORMAT_VERSION = 1
WRITTEN_BY_MLFLOW = {MLMODEL_FILE_NAME, "registered_model_meta"}
"""Files MLflow itself writes (MLmodel, which holds the manifest's digest, and the
metadata of a downloaded registered version): not covered by the manifest. MLmodel is
covered by the signature (:mod:`flavors.trust`), like every file but the signature itself."""
_NOT_LISTED = {EVIDENCE_FILE, SIGNATURE_FILE, *WRITTEN_BY_MLFLOW}


class TamperedModelError(GovernanceError, MlflowException):
    """A model directory whose files do not match its evidence manifest.

    Exit code 2. Also an MlflowException: MLflow's own loading (``mlflow.pyfunc.load_model``)
    raises it.
    """


def file_digest(path) -> str:
    """sha256 of a file's bytes (hex)."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def model_files_digest(path) -> str:
    """sha256 of a downloaded model directory: of each file's relative path and sha256,
    ``registered_model_meta`` (written by the download) aside. An explanation records
    its ensemble's (``ensemble_files_digest``), so a gate can tell when the files of the
    explained version were replaced: a logged model's artifacts stay writable."""
    root = Path(path)
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    listed = {name: file_digest(root / name) for name in files if name != "registered_model_meta"}
    return hashlib.sha256(json.dumps(listed, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class EvidenceManifest:
    """``evidence.json``: what an explanation was made from and found, and the sha256 of
    every file of its model directory.

    Attributes
    ----------
    provenance : Mapping
        Free-form as the explain workflow writes it (docs/architecture.md, "Formats").
    files : Mapping
        Relative POSIX path -> sha256 of every file but the manifest, the signature and
        MLflow's own (:data:`WRITTEN_BY_MLFLOW`).
    format, format_version : str, int
        :data:`EVIDENCE_FORMAT`, :data:`EVIDENCE_FORMAT_VERSION`.
    """

    provenance: Mapping
    files: Mapping
    format: str = EVIDENCE_FORMAT
    format_version: int = EVIDENCE_FORMAT_VERSION

    def to_json(self) -> bytes:
        """The manifest's bytes (a value JSON has no type for written as its ``str``)."""
        manifest = {
            "format": self.format,
            "format_version": self.format_version,
            "provenance": self.provenance,
            "files": self.files,
        }
        return json.dumps(manifest, indent=1, sort_keys=True, default=str).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> EvidenceManifest:
        """The manifest of ``raw``.

        Raises
        ------
        TamperedModelError
            Not a JSON object of this format and version, or ``provenance`` or ``files``
            not an object.
        """
        try:
            manifest = json.loads(raw)
        except ValueError as error:
            raise TamperedModelError(f"{EVIDENCE_FILE} is not JSON ({error})") from None
        found = (
            isinstance(manifest, dict)
            and manifest.keys() == {"format", "format_version", "provenance", "files"}
            and manifest["format"] == EVIDENCE_FORMAT
            and manifest["format_version"] == EVIDENCE_FORMAT_VERSION
            and isinstance(manifest["provenance"], dict)
            and isinstance(manifest["files"], dict)
        )
        if not found:
            raise TamperedModelError(
                f"{EVIDENCE_FILE} is not a manifest of format {EVIDENCE_FORMAT!r} version "
                f"{EVIDENCE_FORMAT_VERSION}; explain the ensemble again"
            )
        return cls(**manifest)


def _model_files(path: str) -> list[str]:
    """Every file of a model directory but the manifest, the signature and MLflow's own
    metadata (POSIX, relative)."""
    root = Path(path)
    files = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return sorted(f for f in files if f not in _NOT_LISTED)


def write_evidence(path: str, provenance: dict) -> str:
    """Write the manifest of ``path`` (provenance and file digests); its own digest."""
    manifest = EvidenceManifest(
        provenance,
        {name: file_digest(os.path.join(path, name)) for name in _model_files(path)},
    )
    target = Path(path, EVIDENCE_FILE)
    target.write_bytes(manifest.to_json())
    return file_digest(target)


def verify_manifest(model_dir: str, expected_digest: str | None) -> EvidenceManifest:
    """Check the manifest of ``model_dir`` against ``expected_digest`` and every file
    against the manifest; the verified manifest (its own sha256 is ``expected_digest``).

    Raises
    ------
    TamperedModelError
        No manifest or no expected digest, a manifest that does not match
        ``expected_digest``, one not of its format, or a file that is edited, missing,
        or not listed in it.
    """
    manifest_path = os.path.join(model_dir, EVIDENCE_FILE)
    if not expected_digest or not os.path.isfile(manifest_path):
        raise TamperedModelError(
            f"{model_dir} has no verifiable {EVIDENCE_FILE}: it was not written by this "
            "flavor's save_model; explain the ensemble again to get a verifiable surrogate"
        )
    digest = file_digest(manifest_path)
    if digest != expected_digest:
        raise TamperedModelError(
            f"{model_dir}/{EVIDENCE_FILE} was modified (sha256 {digest[:12]}..., MLmodel "
            f"records {str(expected_digest)[:12]}...); refusing to load it"
        )
    manifest = EvidenceManifest.from_json(Path(manifest_path).read_bytes())
    listed = manifest.files
    present = _model_files(model_dir)
    changed = sorted(
        n for n in listed if n in present and file_digest(Path(model_dir, n)) != listed[n]
    )
    missing = sorted(set(listed) - set(present))
    extra = sorted(set(present) - set(listed))
    if changed or missing or extra:
        parts = [
            f"{label}: {', '.join(names[:5])}"
            for label, names in (("edited", changed), ("missing", missing), ("added", extra))
            if names
        ]
        raise TamperedModelError(
            f"{model_dir} does not match its evidence manifest ({'; '.join(parts)}); the "
            "model was altered after it was saved: refusing to load it, explain the "
            "ensemble again"
        )
    return manifest


def check_pyfunc_entry(model_dir: str, loader_module: str, data_file: str) -> None:
    """Refuse an MLmodel whose ``python_function`` entry would make
    ``mlflow.pyfunc.load_model`` import something else than ``loader_module``: another
    loader, a ``code`` folder, or another data file than ``data_file`` (MLmodel is
    outside the manifest, since it holds the manifest's digest; the signature covers it).

    Raises
    ------
    TamperedModelError
    """
    with open(os.path.join(model_dir, MLMODEL_FILE_NAME)) as f:
        mlmodel = yaml.safe_load(f)
    entry = (mlmodel.get("flavors") or {}).get("python_function") or {}
    found = {
        "loader_module": entry.get("loader_module"),
        "code": entry.get("code"),
        "data": entry.get("data"),
    }
    expected = {"loader_module": loader_module, "code": None, "data": data_file}
    if found != expected:
        changed = ", ".join(f"{k} {found[k]!r}" for k in found if found[k] != expected[k])
        raise TamperedModelError(
            f"{model_dir}/MLmodel names {changed} in its python_function entry, which "
            f"the flavor never writes (loader_module {loader_module!r}, no code, data "
            f"{data_file!r}); mlflow.pyfunc.load_model would run what it names. "
            "Refusing it: explain the ensemble again"
        )
