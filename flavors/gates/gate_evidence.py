"""The evidence a gate accepts: a ``miret`` surrogate's own signed, digest-verified
manifest.

:func:`surrogate_evidence` verifies a downloaded surrogate model directory's signature
with the keys a policy trusts for ``explain`` (before anything in it is parsed), then
reads ``evidence.json`` and re-hashes every file it lists; :func:`checked_evidence` adds
what only the registry can confirm: the model is a ``miret`` model (its MLmodel flavors), the evidence
names this very ensemble version and data its explain run recorded as training input,
the explain run's immutable param ``evidence_digest`` vouches for ``evidence.json``
itself, the ensemble version's model files are still the ones explain read (their
digest, ``ensemble_files_digest``: a logged model's artifacts stay writable, so whoever
can log could swap the explained forest for another), and its metrics agree with the
surrogate where they can be recomputed. :func:`pinned_ensemble` loads an ensemble to
recompute with from the very files it compares with that digest (checking one download
and loading another would trust files replaced in between).
:func:`linked_surrogate` follows an ensemble version's link to its surrogate version; the
gates take its evidence only when the latest signed link record names that version
(``checked_evidence(current=True)``, :mod:`flavors.links`).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.models import Model

from miret_governance.flavors import miret as miret_flavor
from miret_governance.flavors.errors import GateError, GovernanceError
from miret_governance.flavors.evidence import (
    EVIDENCE_FILE,
    TamperedModelError,
)
from miret_governance.flavors.store.inputs import load_pinned_ensemble
from miret_governance.flavors.store.registry import (
    EVIDENCE_PARAM,
    SURROGATE_OF_TAG,
    SURROGATE_TAG,
    download_model,
    model_id_of,
    resolve_model_version,
    served_files_digest,
    version_uri,
)
from miret_governance.flavors.trail.links import check_signed_link
from miret_governance.governance.trust.gates import Evaluation, GateResult
from miret_governance.governance.trust.keyring import SignatureError, Signer, TrustedKeys
from miret_governance.governance.trust.policy import GATE_TABLE, Policy

UNVERIFIED = "unverified"
"""The digest a gate records for evidence whose signature does not verify."""
LEVEL_FREQUENCY_FILE = "vite/level_frequency.json"
"""The VITE level frequencies in a surrogate's model directory (pandas ``orient="split"``)."""


class EvidenceError(GovernanceError):
    """A surrogate's stored evidence is missing, unreadable or does not match its files.

    Exit code 2 (:func:`checked_evidence` reports it as a :class:`GateError`).
    """


def evidence_view(manifest: dict) -> dict:
    """The gate's view of an evidence manifest (:func:`flavors.miret.read_evidence`).

    Returns
    -------
    dict
        ``ensemble`` ({name, version, uri, model_id, files_digest}), ``data_digest``,
        ``explain_digest``, ``metrics``, ``validation`` ({status, success}),
        ``baseline``, ``solve``, ``input_range`` (feature -> [min, max] of the explained
        data), ``files`` and ``digest`` (of ``evidence.json``).
    """
    provenance = manifest.get("provenance") or {}
    status = (provenance.get("validation") or {}).get("status")
    return {
        "ensemble": {
            "name": provenance.get("ensemble_name"),
            "version": provenance.get("ensemble_version"),
            "uri": provenance.get("ensemble_uri"),
            "model_id": provenance.get("ensemble_model_id"),
            "files_digest": provenance.get("ensemble_files_digest"),
        },
        "data_digest": provenance.get("data_digest"),
        "explain_digest": provenance.get("explain_digest"),
        "metrics": dict(provenance.get("metrics") or {}),
        "validation": {"status": status, "success": status == "passed"},
        "baseline": dict(provenance.get("baseline_cart") or {}),
        "solve": dict(provenance.get("solve") or {}),
        "input_range": dict(provenance.get("input_range") or {}),
        "files": dict(manifest.get("files") or {}),
        "digest": manifest.get("digest"),
    }


def surrogate_evidence(model_dir, trusted: TrustedKeys, what: str | None = None):
    """The verified model of a downloaded surrogate model directory (signature first,
    then every file re-hashed: :func:`flavors.miret.open_model_dir`).

    Returns
    -------
    flavors.miret.VerifiedModel

    Raises
    ------
    governance.trust.keyring.SignatureError
        Unsigned, signed by a key not trusted for explain, or altered since signed.
    EvidenceError
        No manifest, an unreadable one, or a file that differs from its digest.
    """
    try:
        model = miret_flavor.open_model_dir(str(model_dir), trusted, what)
    except SignatureError:
        raise
    except (TamperedModelError, ValueError, OSError, KeyError, TypeError) as error:
        raise EvidenceError(str(error)) from error
    if miret_flavor.SURROGATE_FILE not in model.manifest.get("files", {}):
        raise EvidenceError(f"the manifest does not cover {miret_flavor.SURROGATE_FILE}")
    return model


@dataclass(frozen=True)
class CheckedEvidence:
    """A surrogate's stored evidence that passed every check of :func:`checked_evidence`.

    Attributes
    ----------
    evidence : dict
        The gate's view of the manifest (:func:`evidence_view`).
    digest : str
        sha256 of ``evidence.json`` (the explain run's ``evidence_digest`` param).
    features : tuple of str
        Columns with a nonzero coefficient in ``surrogate.json`` (:func:`used_columns`:
        original input columns when the evidence records the encoding).
    provenance : dict
        The manifest's whole provenance (the request, tree digest and environment that
        ``govern reproduce`` reads besides the gate's view).
    signer : governance.trust.keyring.Signer
        The trusted key that signed the surrogate's model directory.
    model : flavors.miret.VerifiedModel or None
        That verified directory as read (its tree is what ``features`` counts).
    level_frequency : dict or None
        :data:`LEVEL_FREQUENCY_FILE` of that directory (``columns``, ``index``, ``data``),
        digest-verified; None when the manifest lists no such file.
    """

    evidence: dict
    digest: str
    features: tuple
    provenance: dict
    signer: Signer
    model: miret_flavor.VerifiedModel | None = None
    level_frequency: dict | None = None

    @property
    def surrogate(self):
        """The MiretSurrogate or SurrogateTree of the verified directory (what
        ``gate --data`` measures again), built on first use: gates on the recorded
        figures need no scikit-learn. None when the evidence did not verify."""
        return None if self.model is None else self.model.surrogate


def used_columns(tree, provenance: dict) -> tuple:
    """The columns a surrogate tree uses: the original input columns when the evidence
    records the model's encoding (``provenance.encoding``, a one-hot group once), else the
    tree's features (evidence written before the encoding was recorded counted those)."""
    names = [tree.feature_names[j] for j in tree.used_features()]
    if provenance.get("encoding") is None:
        return tuple(names)
    from miret_governance.governance.ensembles.encoding import recorded_encoding

    return tuple(dict.fromkeys(recorded_encoding(provenance).original(n) for n in names))


def checked_evidence(
    client: MlflowClient,
    ensemble_version,
    surrogate,
    trusted: TrustedKeys,
    pinned=True,
    files_digest: str | None = None,
    current=False,
) -> CheckedEvidence:
    """The stored evidence of ``surrogate``, checked against ``ensemble_version``.

    ``current=True`` (what the gates read: ``surrogate`` is the one the version's tag
    links) also requires ``surrogate`` to be the one the latest link record signed by a
    key ``trusted`` for ``explain`` names (:func:`flavors.links.check_signed_link`):
    the tag alone is anyone's to move back to an older explanation.

    ``pinned=False`` (``govern reproduce``, which fits again from the evidence and says
    why a result differs) also accepts evidence that records no digest of the ensemble's
    files, written before it was recorded; a recorded digest must still match.
    ``files_digest``: the digest of the ensemble's files when the caller has just read
    them (explain), compared instead of downloading them again.

    The signature is verified first, with the keys ``trusted`` for ``explain``: nothing
    of an unsigned or altered surrogate is read.

    Raises
    ------
    governance.trust.keyring.SignatureError
        Unsigned, signed by a key not trusted for explain, or altered since it was
        signed (a gate turns it into a failure of every gate: :func:`refused_evaluation`).
    GateError
        Not a ``miret`` model, no or tampered evidence, evidence of another ensemble
        version or of data the explain run did not record, metrics that disagree
        with the surrogate itself, or (``current``) a link tag moved by hand since the
        latest signed link.
    """
    surrogate_uri, ensemble_uri = version_uri(surrogate), version_uri(ensemble_version)
    again = f"explain it again: govern explain --model-uri {ensemble_uri} --data <file> --force"
    with tempfile.TemporaryDirectory(prefix="gate-") as tmp:
        local = download_model(surrogate_uri, tmp, GateError)
        try:
            model = surrogate_evidence(local, trusted, f"the evidence of {surrogate_uri}")
            evidence = evidence_view(model.manifest)
            levels = None
            if LEVEL_FREQUENCY_FILE in evidence["files"]:  # verified with every other file
                levels = json.loads(Path(local, LEVEL_FREQUENCY_FILE).read_text())
        except (EvidenceError, ValueError, OSError, KeyError, TypeError, MlflowException) as error:
            flavors = sorted(Model.load(local).flavors) if Path(local, "MLmodel").is_file() else []
            if miret_flavor.FLAVOR_NAME not in flavors:
                raise GateError(
                    f"{surrogate_uri}, linked to {ensemble_uri}, is not a miret surrogate (its "
                    f"MLmodel flavors: {flavors or 'none'}); only a surrogate made by govern "
                    f"explain can pass the gates: {again}"
                ) from error
            raise GateError(
                f"the stored evidence of {surrogate_uri} cannot be trusted: {error}; {again}"
            ) from error
    _check_provenance(client, ensemble_version, surrogate, evidence, again)
    _check_anchor(client, surrogate, evidence["digest"], again)
    _check_ensemble_files(ensemble_version, evidence, again, pinned, files_digest)
    features = used_columns(model.tree, model.manifest["provenance"])
    recorded = evidence["metrics"].get("n_features_used")
    if not isinstance(recorded, (int, float)) or float(recorded) != len(features):
        raise GateError(
            f"the evidence of {surrogate_uri} says n_features_used = {recorded!r}, but its "
            f"surrogate.json uses {len(features)} features; {again}"
        )
    if current:
        check_signed_link(client, ensemble_version, surrogate, trusted)
    return CheckedEvidence(
        evidence,
        evidence["digest"],
        features,
        model.manifest["provenance"],
        model.signer,
        model,
        levels,
    )


def linked_surrogate(client: MlflowClient, version):
    """The surrogate ModelVersion linked to an ensemble version by tag.

    Raises
    ------
    GateError
        No ``governance.surrogate`` tag, a dangling link, or a link that does not point
        back (``governance.surrogate_of``).
    """
    ensemble_uri = version_uri(version)
    link = version.tags.get(SURROGATE_TAG)
    if not link:
        raise GateError(
            f"{ensemble_uri} has no linked surrogate (tag {SURROGATE_TAG}); explain it "
            f"first: govern explain --model-uri {ensemble_uri} --data <file>"
        )
    try:
        surrogate = resolve_model_version(client, link)
    except Exception as error:
        raise GateError(f"{ensemble_uri} links to {link}, which cannot be read: {error}") from error
    back = surrogate.tags.get(SURROGATE_OF_TAG)
    if back != ensemble_uri:
        raise GateError(
            f"{link} is tagged {SURROGATE_OF_TAG}={back!r}, not {ensemble_uri}: the link is "
            "inconsistent; explain the ensemble version again"
        )
    return surrogate


def refused_evaluation(policy: Policy, error: SignatureError) -> tuple[CheckedEvidence, Evaluation]:
    """What a gate records when the evidence's signature does not verify: nothing of the
    evidence is believed (no metrics, no validation, no features) and every gate of
    ``policy`` fails with the reason."""
    reason = f"unverified evidence: {error}"
    results = [
        GateResult(name, GATE_TABLE[name].metric, threshold, None, False, reason)
        for name, threshold in policy.gates.items()
    ]
    evaluation = Evaluation(False, results, policy.digest, dict(policy.gates), None)
    evidence = evidence_view({"digest": UNVERIFIED})
    return CheckedEvidence(evidence, UNVERIFIED, (), {}, None), evaluation


def _check_anchor(client, surrogate, digest: str, again: str) -> None:
    """``evidence.json`` is the one the explain run vouched for (param ``evidence_digest``)."""
    anchor = client.get_run(surrogate.run_id).data.params.get(EVIDENCE_PARAM)
    if anchor != digest:
        raise GateError(
            f"{EVIDENCE_FILE} of {version_uri(surrogate)} is not the evidence "
            f"its explain run "
            f"{surrogate.run_id} recorded (param {EVIDENCE_PARAM} = {anchor!r}): it was "
            f"edited or replaced; {again}"
        )


def _check_ensemble_files(
    ensemble_version, evidence: dict, again: str, required: bool, current: str | None = None
) -> None:
    """The ensemble version's model files (``current``: their digest, else downloaded and
    hashed) are the ones its explanation was made from."""
    ensemble_uri = version_uri(ensemble_version)
    recorded = evidence["ensemble"].get("files_digest")
    if not recorded and not required:
        return
    if not recorded:
        raise GateError(
            f"the evidence of {ensemble_uri}'s surrogate does not record a digest of the "
            "ensemble's model files (it predates govern pinning them), so it cannot show "
            f"that it explains the files {ensemble_uri} holds now; {again}"
        )
    if current is None:
        current = served_files_digest(ensemble_uri, GateError)
    if current != recorded:
        raise GateError(
            f"the model files of {ensemble_uri} changed after it was explained (sha256 "
            f"{current[:12]}... now, {recorded[:12]}... in the signed evidence): its "
            "explanation describes other files, and a logged model's artifacts must not "
            f"change once explained; restore them, or register the new files as a new "
            f"version and explain that: {again}"
        )


def pinned_ensemble(ensemble_version, evidence: dict, trust_pickle: bool = False):
    """The ensemble of ``ensemble_version``, loaded safely
    (:func:`flavors.inputs.load_pinned_ensemble`) from files whose digest is the one the
    checked ``evidence`` (:func:`evidence_view`) records, when it records one.

    Raises
    ------
    GateError
        The files differ from the explained ones.
    ExplainError
        The ensemble cannot be loaded safely.
    """
    uri = version_uri(ensemble_version)
    ensemble, files = load_pinned_ensemble(uri, trust_pickle)
    again = f"explain it again: govern explain --model-uri {uri} --data <file> --force"
    _check_ensemble_files(ensemble_version, evidence, again, required=False, current=files)
    return ensemble


def check_explains(surrogate_uri: str, provenance: dict, ensemble_version) -> None:
    """Refuse to present ``surrogate_uri`` as the explanation of ``ensemble_version``
    (``govern show``) unless its signed ``provenance`` names that version (the link tags
    are anyone's to set, so they could pair an honest surrogate with another model) and,
    when it records them, the version's files are still the ones explained.

    Raises
    ------
    GateError
    """
    view, again = _paired(surrogate_uri, provenance, ensemble_version)
    _check_ensemble_files(ensemble_version, view, again, required=False)


def explained_ensemble(surrogate_uri: str, provenance: dict, ensemble_version):
    """The checks of :func:`check_explains` (``govern explain-row``), then the ensemble
    loaded from the very files they compare (:func:`pinned_ensemble`).

    Raises
    ------
    GateError
    ExplainError
        The ensemble cannot be loaded safely.
    """
    view, _ = _paired(surrogate_uri, provenance, ensemble_version)
    return pinned_ensemble(ensemble_version, view)


def _paired(surrogate_uri: str, provenance: dict, ensemble_version) -> tuple[dict, str]:
    """The evidence view of ``provenance`` and the advice to explain again, once the
    evidence names ``ensemble_version``."""
    view = evidence_view({"provenance": provenance})
    uri = version_uri(ensemble_version)
    again = f"explain {uri}: govern explain --model-uri {uri} --data <file>"
    try:
        _check_named(surrogate_uri, view["ensemble"], ensemble_version)
    except GateError as error:
        raise GateError(f"{error}, which the registry's link tags pair it with; {again}") from None
    return view, again


def _check_named(surrogate_uri: str, named, ensemble_version) -> None:
    """The ensemble the evidence names (``{name, version, uri, model_id}``) is
    ``ensemble_version``."""
    named = named if isinstance(named, dict) else {}
    expected = {
        "name": ensemble_version.name,
        "version": str(ensemble_version.version),
        "uri": version_uri(ensemble_version),
        "model_id": model_id_of(ensemble_version) or "",
    }
    stored = {key: str(named.get(key) or "") for key in expected}
    if stored != expected:
        raise GateError(
            f"{surrogate_uri} explains {stored['uri'] or 'an unnamed ensemble'} (model id "
            f"{stored['model_id'] or '-'}) according to its signed evidence, not "
            f"{expected['uri']} (model id {expected['model_id'] or '-'})"
        )


def _check_provenance(client, ensemble_version, surrogate, evidence: dict, again: str) -> None:
    """The evidence names ``ensemble_version`` and data the explain run recorded."""
    surrogate_uri = version_uri(surrogate)
    try:
        _check_named(surrogate_uri, evidence.get("ensemble"), ensemble_version)
    except GateError as error:
        raise GateError(
            f"{error}; a surrogate vouches only for the ensemble version it was made from: {again}"
        ) from None
    run_id = surrogate.run_id or ""
    model_id = model_id_of(surrogate)
    try:
        run = client.get_run(run_id)
        source_run = client.get_logged_model(model_id).source_run_id if model_id else None
    except MlflowException as error:
        raise GateError(f"the explain run of {surrogate_uri} cannot be read: {error.message}")
    if source_run != run_id:
        raise GateError(
            f"{surrogate_uri} was not logged by its run {run_id or '-'} (logged model "
            f"{model_id or '-'}, source run {source_run or '-'}); {again}"
        )
    training = {
        item.dataset.digest
        for item in run.inputs.dataset_inputs
        if any(t.key == "mlflow.data.context" and t.value == "training" for t in item.tags)
    }
    if not evidence.get("data_digest") or evidence["data_digest"] not in training:
        raise GateError(
            f"the evidence of {surrogate_uri} names data digest "
            f"{evidence.get('data_digest')!r}, which its explain run {run_id} did not record "
            f"as training data (recorded: {sorted(training) or 'none'}); {again}"
        )
