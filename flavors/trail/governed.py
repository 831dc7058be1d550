"""Promotion into the governed registered model: files only governance can write,
verified against the signed evidence on every read.

When the policy governs an ensemble's registered model (``[governed."<name>"]``,
:mod:`governance.trust.roles`), ``govern promote`` also sets the alias on a version of
the governed registered model (``<name>.governed`` by default), which serving and CD
read as ``models:/<governed>@<alias>``.

**Why not MLflow's ``copy_model_version`` alone.** It registers the copy with
``source = models:/<name>/<version>`` and the source's ``model_id``; the registry stores
resolve that to the source's own storage location (``SqlAlchemyStore.create_model_version``:
``storage_location`` is the logged model's ``artifact_location``). A copied version's
files therefore stay in the data scientists' experiment, which they can overwrite
(``tests/flavors/trail/test_governed.py`` checks this on a real store). So the files
are copied here: downloaded from the ensemble version, hashed as the evidence hashes
them (:func:`flavors.evidence.model_files_digest`), refused unless that digest is the
one the signed evidence pins, uploaded under ``governed_model/`` of the promotion's own
run in ``governance-gates`` (an experiment only the CI identity writes, once
``govern server setup`` ran: ``docs/deployment.md``), and registered from there. The
promotion record (kind ``promotion``, field ``governed``) names the governed version
and its files' digest.

**Nothing half-written.** The version is created with its tags in one request (no
version without them); its files are hashed again as the registry serves them before
the record is signed, and the version is deleted when they differ. A promotion stopped
after registering and before the alias (refused, killed) leaves a tagged version no
alias names: the next promotion of the same ensemble version reuses it only after
re-hashing its files (:func:`release`), never on its tags alone.

**Verified on every read.** :func:`verified_governed` hashes a governed version's files
and compares them with the ensemble files' digest its surrogate's signed evidence pins
(``provenance.ensemble_files_digest``); ``govern show``, ``gate`` and ``audit`` refuse a
version whose files differ (:class:`GovernedFilesError`, exit 2).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from miret_governance.flavors.errors import GateError, GovernanceError
from miret_governance.flavors.evidence import model_files_digest
from miret_governance.flavors.gates.gate_evidence import evidence_view
from miret_governance.flavors.store.registry import (
    describe_surrogate,
    download_model,
    name_filter,
    parse_registry_uri,
    resolve_model_version,
    served_files_digest,
    version_uri,
)
from miret_governance.governance.trust.policy import Policy
from miret_governance.governance.trust.records import GovernedRef
from miret_governance.governance.trust.roles import GovernedModel

GOVERNED_PATH = "governed_model"
"""Where a promotion run holds the governed version's files."""
FROM_TAG = "governance.governed.from"
"""On a governed version: the ensemble version its files were copied from."""
FILES_DIGEST_TAG = "governance.governed.files_digest"
"""On a governed version: the sha256 of its files (a lookup; every read hashes again)."""
SURROGATE_TAG = "governance.governed.surrogate"
"""On a governed version: the surrogate whose signed evidence pins those files."""
EVIDENCE_TAG = "governance.governed.evidence_digest"
"""On a governed version: that evidence's digest."""
RUN_TAG = "governance.governed.run"
"""On a governed version: the promotion run holding its files."""


class GovernedFilesError(GovernanceError):
    """A governed version whose files are not the ones the signed evidence pins, or
    that no promotion wrote. Exit code 2."""


@dataclass(frozen=True)
class GovernedSource:
    """A governed version read back and verified: the ensemble version it was promoted
    from and its files' digest."""

    uri: str
    ensemble_uri: str
    files_digest: str


def governed_model(policy: Policy, name: str) -> GovernedModel | None:
    """The policy's ``[governed]`` entry of the data scientists' model ``name``."""
    return next((m for m in policy.governed if m.name == name), None)


def governing(policy: Policy, name: str) -> GovernedModel | None:
    """The policy's ``[governed]`` entry whose governed registered model is ``name``."""
    return next((m for m in policy.governed if m.registered_model == name), None)


def _reusable(client: MlflowClient, target: str, ensemble_uri: str, pinned: str):
    """The lowest governed version copied from ``ensemble_uri`` whose files hash to
    ``pinned`` now (None: none)."""
    versions = client.search_model_versions(name_filter(target))
    for version in sorted(versions, key=lambda v: int(v.version)):
        tags = version.tags or {}
        if tags.get(FROM_TAG) != ensemble_uri or tags.get(FILES_DIGEST_TAG) != pinned:
            continue
        if served_files_digest(version_uri(version), GovernedFilesError) == pinned:
            return version
    return None


def release(
    client: MlflowClient, target: str, ensemble, checked, surrogate, run_id: str
) -> GovernedRef:
    """The governed version of ``target`` holding the files of ``ensemble`` pinned by
    the ``checked`` evidence: an earlier one whose files still hash to the pinned digest,
    else the files copied into run ``run_id`` (``governed_model/``) and registered from
    there (module docstring).

    Raises
    ------
    GateError
        The evidence pins no ensemble files, or the ensemble's files differ from them.
    GovernedFilesError
        The registered files, read back, differ (the version was deleted).
    """
    ensemble_uri = version_uri(ensemble)
    pinned = checked.evidence["ensemble"].get("files_digest")
    if not pinned:
        raise GateError(
            f"the evidence of {ensemble_uri} pins no digest of its files, so no governed "
            f"version can be checked against it; explain it again: govern explain "
            f"--model-uri {ensemble_uri} --data <file> --force"
        )
    found = _reusable(client, target, ensemble_uri, pinned)
    if found is not None:
        return GovernedRef(version_uri(found), pinned)
    with tempfile.TemporaryDirectory(prefix="governed-") as tmp:
        local = Path(download_model(ensemble_uri, tmp, GateError))
        (local / "registered_model_meta").unlink(missing_ok=True)
        copied = model_files_digest(local)
        if copied != pinned:
            raise GateError(
                f"the model files of {ensemble_uri} changed after it was explained (sha256 "
                f"{copied[:12]}... now, {pinned[:12]}... in the signed evidence); nothing "
                f"was promoted into {target}"
            )
        client.log_artifacts(run_id, str(local), GOVERNED_PATH)
    source = f"{client.get_run(run_id).info.artifact_uri}/{GOVERNED_PATH}"
    tags = {
        FROM_TAG: ensemble_uri,
        FILES_DIGEST_TAG: pinned,
        SURROGATE_TAG: version_uri(surrogate),
        EVIDENCE_TAG: checked.digest,
        RUN_TAG: run_id,
    }
    description = f"Files of {ensemble_uri}, copied by govern promote (run {run_id})."
    try:
        created = client.create_model_version(target, source, run_id, tags, description=description)
    except MlflowException as error:
        if error.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        # a store without govern server setup: the first promotion creates the model
        client.create_registered_model(target, description="Written by govern promote only.")
        created = client.create_model_version(target, source, run_id, tags, description=description)
    uri = version_uri(created)
    try:
        served = served_files_digest(uri, GovernedFilesError)
    except BaseException:
        client.delete_model_version(target, created.version)
        raise
    if served != pinned:
        client.delete_model_version(target, created.version)
        raise GovernedFilesError(
            f"{uri} serves files with sha256 {served[:12]}..., not the {pinned[:12]}... "
            f"copied from {ensemble_uri}; it was deleted and nothing was promoted"
        )
    return GovernedRef(uri, pinned)


def verified_governed(client: MlflowClient, version, trusted) -> GovernedSource:
    """``version`` of a governed model, once its files hash to the ensemble files'
    digest its surrogate's signed evidence pins (module docstring).

    Raises
    ------
    GovernedFilesError
        No promotion wrote it, the evidence names another ensemble or pins no files, or
        its files differ.
    governance.trust.keyring.SignatureError
        The surrogate's signature does not verify with ``trusted``.
    """
    uri = version_uri(version)
    tags = version.tags or {}
    ensemble_uri, surrogate_uri = tags.get(FROM_TAG), tags.get(SURROGATE_TAG)
    if not ensemble_uri or not surrogate_uri:
        raise GovernedFilesError(
            f"{uri} was not written by govern promote (no {FROM_TAG} and {SURROGATE_TAG} "
            f"tags): its files cannot be checked against any signed evidence; promote the "
            f"ensemble version with govern promote"
        )
    provenance = describe_surrogate(surrogate_uri, trusted, client)["provenance"]
    named = evidence_view({"provenance": provenance})["ensemble"]
    pinned = named.get("files_digest")
    if named.get("uri") != ensemble_uri or not pinned:
        raise GovernedFilesError(
            f"the signed evidence of {surrogate_uri} does not pin the files of "
            f"{ensemble_uri}, which {uri} says it holds; promote again"
        )
    current = served_files_digest(uri, GovernedFilesError)
    if current != pinned:
        raise GovernedFilesError(
            f"the files of {uri} differ from those the signed evidence of {surrogate_uri} "
            f"pins for {ensemble_uri} (sha256 {current[:12]}... now, {pinned[:12]}... "
            f"pinned): they were replaced after promotion; refused; promote "
            f"{ensemble_uri} again"
        )
    return GovernedSource(uri, ensemble_uri, pinned)


def ensemble_uri_of(client: MlflowClient, model_uri: str, trusted, policy=None) -> str:
    """``model_uri``, or, when it names a version of a governed registered model (of
    ``policy``'s ``[governed]``, or, without a policy, a version governance promoted),
    the URI of the ensemble version its verified files came from.

    Raises
    ------
    GovernedFilesError, governance.trust.keyring.SignatureError
        As :func:`verified_governed`.
    """
    name, _, _ = parse_registry_uri(model_uri)
    if policy is not None and governing(policy, name) is None:
        return model_uri
    try:
        version = resolve_model_version(client, model_uri)
    except (GovernanceError, MlflowException):
        return model_uri  # the caller's own resolution reports it
    if policy is None and FROM_TAG not in (version.tags or {}):
        return model_uri
    return verified_governed(client, version, trusted).ensemble_uri
