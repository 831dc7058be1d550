"""Signed decision records: who decided what, on which evidence, under which policy.

Every gate evaluation, promotion and approval leaves one JSON record on its run,
``decision/record.json``, signed with OpenSSF model-signing into ``decision/record.sig``
(:func:`governance.signing.sign_path`) by the deciding job's key: purpose ``decide`` for
gates and promotions, ``approve`` for a reviewer's approval or rejection. A record
holds::

    {"kind": "gate" | "promotion" | "approval" | "link"   (a link's fields: flavors.links),
     "ensemble": {"uri", "model_id"}, "surrogate": {"uri", "model_id"},
     "evidence": {"digest", "signer": {"name", "fingerprint"} | null},
     "policy": {"label", "digest"},
     "result": "PASS" | "FAIL"                      (gate, promotion)
     "drift": {...}          (gate, promotion with drift gates: flavors.diff.drift_results)
     "alias", "decision": "promoted" | "refused", "reason"      (promotion)
     "alias", "decision": "approve" | "reject", "comment"       (approval)
     "decided_by": {"key_name", "key_fingerprint", "mlflow_user"},
     "time": ISO 8601 UTC}

Reading one back (:func:`read_record`) downloads it, verifies the signature with the
keys a policy trusts for the purpose of the kind the record claims, and parses it: a
record nobody with a trusted key signed never counts. Run tags (``mlflow.user``,
``governance.*``) repeat the fields for the MLflow UI and searches; nothing that decides
reads them.

Promotions to one alias are serialized by :func:`flavors.promotion_lock.promotion_lock`.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import ViewType
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_USER

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.registry import PROMOTION_TAG, model_id_of, quoted, version_uri
from miret_governance.governance.signing import (
    SignatureError,
    Signer,
    SigningKey,
    TrustedKeys,
    sign_path,
    verify_path,
)

RECORD_FOLDER = "decision"
RECORD_FILE = "record.json"
RECORD_SIGNATURE = "record.sig"
RECORD_PATH = f"{RECORD_FOLDER}/{RECORD_FILE}"
KIND_PURPOSE = {"gate": "decide", "promotion": "decide", "approval": "approve", "link": "explain"}
"""The signing purpose (:data:`governance.signing.PURPOSES`) of each kind of record (a
``link``: :mod:`flavors.links`)."""
SIGNER_TAG = "governance.decision_signer"
"""Run tag: the name (or fingerprint) of the key that signed the record, or
``unsigned`` (a what-if gate run without a key: it never counts)."""
UNSIGNED = "unsigned"
GATE_EXPERIMENT = "governance-gates"
"""Gate and promotion runs (:mod:`flavors.gating`, :mod:`flavors.promotion`)."""
APPROVAL_EXPERIMENT = "governance-approvals"
DECISION_PAGE = 1000
"""Runs per page of :func:`decision_runs` (it reads every page)."""
ALIAS_RUN_TAG = "governance.alias"
DECISION_RUN_TAG = "governance.decision"
COMMENT_RUN_TAG = "governance.comment"
MAX_RECORD_BYTES = 1 << 20


class DecisionError(GovernanceError):
    """A decision that cannot be made or read: no signing key for a decision that must be
    signed, or a decision record that is missing or unreadable. Exit code 2."""


# ---------------------------------------------------------------------- who decides
def mlflow_user() -> str:
    """The user MLflow records for runs made here: the tracking server's user name
    (``MLFLOW_TRACKING_USERNAME``) when set, else MLflow's ``mlflow.user`` run context."""
    from mlflow.tracking.context.registry import resolve_tags

    return os.environ.get("MLFLOW_TRACKING_USERNAME") or resolve_tags().get(MLFLOW_USER, "")


def decided_by(trusted: TrustedKeys, key: SigningKey | None) -> dict:
    """``decided_by`` of a record: the key's policy name (None when the policy does not
    name it), its fingerprint (None without a key) and the MLflow user."""
    fingerprint = key.fingerprint if key is not None else None
    names = [k.name for k in trusted.keys if k.fingerprint == fingerprint]
    return {
        "key_name": names[0] if names else None,
        "key_fingerprint": fingerprint,
        "mlflow_user": mlflow_user(),
    }


def require_key(key: SigningKey | None, command: str, purpose: str) -> SigningKey:
    """``key``, or a :class:`DecisionError` saying how to give one."""
    if key is None:
        raise DecisionError(
            f"{command} records a signed decision and needs a signing key trusted for "
            f"{purpose}: pass --signing-key <private key file> or set GOVERN_SIGNING_KEY "
            "(make a pair with govern keygen); nothing was recorded"
        )
    return key


def now_utc() -> str:
    """The current UTC time, ISO 8601 to the millisecond (approvals are ordered by it)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def pinned(version) -> dict:
    """``{uri, model_id}``: a model version as records name it."""
    return {"uri": version_uri(version), "model_id": model_id_of(version) or ""}


def new_record(kind: str, ensemble, surrogate, checked, policy, decider: dict, **fields) -> dict:
    """A decision record (module docstring) of ``kind`` on ``checked`` evidence."""
    signer = getattr(checked, "signer", None)
    return {
        "kind": kind,
        "ensemble": pinned(ensemble),
        "surrogate": pinned(surrogate),
        "evidence": {
            "digest": checked.digest,
            "signer": signer.to_json() if signer is not None else None,
        },
        "policy": {"label": policy.label, "digest": policy.digest},
        **fields,
        "decided_by": decider,
        "time": now_utc(),
    }


def run_tags(record: dict) -> dict:
    """Run tags repeating a record for the MLflow UI ("Created by" is ``mlflow.user``)."""
    by = record["decided_by"]
    return {
        MLFLOW_USER: by["mlflow_user"],
        SIGNER_TAG: by["key_name"] or by["key_fingerprint"] or UNSIGNED,
    }


# ---------------------------------------------------------------------- write and read
def log_record(client: MlflowClient, run_id: str, record: dict, key: SigningKey | None) -> None:
    """Write ``record`` on the run as ``decision/record.json``, signed with ``key`` into
    ``decision/record.sig`` (unsigned without a key), and tag the run (:func:`run_tags`)."""
    with tempfile.TemporaryDirectory(prefix="decision-") as tmp:
        path = Path(tmp, RECORD_FILE)
        path.write_text(json.dumps(record, indent=1, sort_keys=True))
        if key is not None:
            sign_path(path, key, Path(tmp, RECORD_SIGNATURE))
        client.log_artifacts(run_id, tmp, RECORD_FOLDER)
    for name, value in run_tags(record).items():
        client.set_tag(run_id, name, value)


@dataclass(frozen=True)
class Decision:
    """A decision record read back from its run.

    Attributes
    ----------
    run_id : str
    record : dict
        The parsed record (module docstring); empty when it cannot be read.
    signer : Signer or None
        The trusted key that signed it; None when it is not trusted.
    problem : str or None
        Why it does not count (unsigned, untrusted key, altered, unreadable); None when
        it verified.
    """

    run_id: str
    record: dict
    signer: Signer | None
    problem: str | None

    @property
    def valid(self) -> bool:
        return self.problem is None


def read_record(client: MlflowClient, run_id: str, trusted: TrustedKeys) -> Decision:
    """The decision record of a run, verified with ``trusted`` for its kind's purpose.

    Never raises for a record that is missing, unsigned, untrusted or altered: the
    :class:`Decision` says why it does not count.
    """
    what = f"the decision record of run {run_id}"
    with tempfile.TemporaryDirectory(prefix="decision-") as tmp:
        try:
            local = Path(client.download_artifacts(run_id, RECORD_FOLDER, tmp))
        except (MlflowException, OSError) as error:
            return Decision(run_id, {}, None, f"{what} cannot be read: {error}")
        path = local / RECORD_FILE
        try:
            with open(path, "rb") as handle:
                record = json.loads(handle.read(MAX_RECORD_BYTES))
            purpose = KIND_PURPOSE[record["kind"]]
        except (OSError, ValueError, KeyError, TypeError) as error:
            return Decision(run_id, {}, None, f"{what} is missing or not a record ({error!r})")
        try:
            signer = verify_path(path, local / RECORD_SIGNATURE, trusted, purpose, what)
        except SignatureError as error:
            return Decision(run_id, record, None, str(error))
    return Decision(run_id, record, signer, None)


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of experiment ``name``, created when missing (also concurrently)."""
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(name)
    except MlflowException:  # created concurrently
        return client.get_experiment_by_name(name).experiment_id


def decision_runs(client: MlflowClient, experiment_name: str, ensemble_uri: str) -> list:
    """Runs of ``experiment_name`` tagged with ``ensemble_uri``, oldest first, deleted
    ones included: whoever can log can delete a run, and a signed rejection must not
    disappear with its run (until the store's garbage collection, which needs the
    database)."""
    return every_run(
        client, experiment_name, f"tags.`governance.ensemble_uri` = {quoted(ensemble_uri)}"
    )


def every_run(client: MlflowClient, experiment_name: str, filter_string: str = "") -> list:
    """Every run of ``experiment_name`` that ``filter_string`` selects, oldest first,
    deleted ones included, every page read (a search capped at one page let 5,000 junk
    runs hide a record)."""
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return []
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment.experiment_id],
            filter_string=filter_string,
            run_view_type=ViewType.ALL,
            order_by=["attributes.start_time ASC"],
            max_results=DECISION_PAGE,
            page_token=token,
        )
        runs += page
        token = page.token
        if not token:
            return runs


def latest_promotion(client: MlflowClient, name: str, alias: str, trusted: TrustedKeys):
    """The latest valid signed promotion of a version of ``name`` to ``alias`` (a
    :class:`Decision`, None when no record verifies), deleted runs included."""
    prefix = f"models:/{name}/"
    search = (
        f"tags.`{PROMOTION_TAG.format(alias=alias)}` = 'promoted' and "
        f"tags.`governance.ensemble_uri` LIKE {quoted(prefix + '%')}"
    )
    latest = None
    for run in every_run(client, GATE_EXPERIMENT, search):
        decision = read_record(client, run.info.run_id, trusted)
        record = decision.record
        if (
            decision.valid
            and record.get("kind") == "promotion"
            and record.get("decision") == "promoted"
            and record.get("alias") == alias
            and str((record.get("ensemble") or {}).get("uri", "")).startswith(prefix)
            and (latest is None or newer(decision, latest))
        ):
            latest = decision
    return latest


def alias_moved_by_hand(client: MlflowClient, name: str, alias: str, holder, trusted) -> str:
    """Why the version holding ``alias`` now (``holder``, None when none does) is not the
    one the latest valid signed promotion put there; ``""`` when it is, or when no
    signed promotion to ``alias`` exists (an alias set before governance)."""
    promotion = latest_promotion(client, name, alias, trusted)
    if promotion is None:
        return ""
    signed = promotion.record.get("ensemble")
    now = None if holder is None else pinned(holder)
    if signed == now:
        return ""
    where = "no version holds it" if holder is None else f"it points to {now['uri']}"
    return (
        f"@{alias} was moved by hand: {where}, but the latest signed promotion (run "
        f"{promotion.run_id}, {promotion.record.get('time')}) put {signed.get('uri')} there; "
        f"restore the alias, or promote a version to @{alias} with govern promote"
    )


def newer(decision: Decision, than: Decision) -> bool:
    """Was ``decision`` signed after ``than`` (or at the same time, in a later run)? By
    the signed time, never by the run's start time, which is the logger's to choose: a
    copy of an older record logged again is no newer."""
    return signed_time(decision) >= signed_time(than)


def signed_time(decision: Decision) -> datetime:
    """The record's signed ``time`` (the earliest possible time when it has none)."""
    try:
        return datetime.fromisoformat(str(decision.record.get("time")))
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)


# ---------------------------------------------------------------------- approvals
@dataclass(frozen=True)
class ApprovalState:
    """What the approvals of an alias say about the current evidence.

    Attributes
    ----------
    approved : bool
        At least ``needed`` distinct trusted approver keys approve and none rejects.
    reason : str
        In words (names the approvers, rejections and what is missing).
    counted : list of Decision
        The latest valid decision of each approver key on this version and alias that
        counts: a rejection, or an approval of the current evidence.
    """

    approved: bool
    reason: str
    counted: list


def approval_state(
    client: MlflowClient, ensemble, alias: str, digest: str, trusted: TrustedKeys, needed: int
) -> ApprovalState:
    """The approvals of ``alias`` on ``ensemble`` whose record verifies with ``trusted``
    and binds this ensemble version (URI and model id) and the alias; per key the latest
    signed decision counts. An approval counts only on the evidence ``digest``; a
    rejection blocks on any evidence of the version until its key approves later: which
    explanation is linked is anyone's to change (and a new explanation is CI's to make),
    so neither may set aside a reviewer's rejection."""
    uri, model_id = version_uri(ensemble), model_id_of(ensemble) or ""
    latest: dict[str, Decision] = {}
    for run in decision_runs(client, APPROVAL_EXPERIMENT, uri):
        if run.data.tags.get(ALIAS_RUN_TAG) != alias:
            continue
        decision = read_record(client, run.info.run_id, trusted)
        record = decision.record
        if (
            not decision.valid
            or record.get("kind") != "approval"
            or record.get("alias") != alias
            or record.get("ensemble") != {"uri": uri, "model_id": model_id}
        ):
            continue
        key = decision.signer.fingerprint
        if key not in latest or newer(decision, latest[key]):
            latest[key] = decision
    counted = [  # an approval of other evidence counts for nothing
        d
        for d in sorted(latest.values(), key=lambda d: d.signer.name)
        if d.record.get("decision") == "reject"
        or (d.record.get("evidence") or {}).get("digest") == digest
    ]
    rejected = [d for d in counted if d.record.get("decision") == "reject"]
    approvers = [d.signer.name for d in counted if d.record.get("decision") == "approve"]
    if rejected:
        names = ", ".join(f"{d.signer.name} ({d.record.get('comment', '')})" for d in rejected)
        return ApprovalState(False, f"@{alias} was rejected by {names}", counted)
    if len(approvers) < needed:
        return ApprovalState(
            False,
            f"@{alias} needs {needed} approval{'s' if needed != 1 else ''} of the current "
            f"evidence by approver keys the policy trusts, has {len(approvers)} "
            f"({', '.join(approvers) or 'none'}); "
            f"approvers run: govern approve --model-uri {uri} --alias {alias} "
            "--decision approve --comment <text>",
            counted,
        )
    return ApprovalState(True, f"approved by {', '.join(approvers)}", counted)


def approvals_of(client: MlflowClient, ensemble, trusted: TrustedKeys, surrogate_uri: str):
    """Every approval run of the ensemble version, oldest first, as the reviewer's view
    lists them: alias, decision, comment, who (verified key or the problem), time, and
    whether it was made on the surrogate linked now (``surrogate_uri``). A verified
    record of another version (its run re-tagged) is listed with that as its problem."""
    listed = []
    bound = pinned(ensemble)
    uri = bound["uri"]
    for run in decision_runs(client, APPROVAL_EXPERIMENT, uri):
        decision = read_record(client, run.info.run_id, trusted)
        record = decision.record
        if decision.valid and record.get("ensemble") != bound:
            named = (record.get("ensemble") or {}).get("uri")
            decision = replace(
                decision, signer=None, problem=f"its signed record is about {named}, not {uri}"
            )
        listed.append(
            {
                "run_id": run.info.run_id,
                "alias": record.get("alias"),
                "decision": record.get("decision"),
                "comment": record.get("comment"),
                "signed_by": decision.signer.to_json() if decision.valid else None,
                "problem": decision.problem,
                "mlflow_user": (record.get("decided_by") or {}).get("mlflow_user"),
                "time": record.get("time"),
                "surrogate_uri": (record.get("surrogate") or {}).get("uri"),
                "current": (record.get("surrogate") or {}).get("uri") == surrogate_uri,
            }
        )
    return listed
