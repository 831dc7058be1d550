"""Signed decision records: who decided what, on which evidence, under which policy.

Every gate evaluation, promotion and approval leaves one JSON record on its run,
``decision/record.json``, signed with OpenSSF model-signing into ``decision/record.sig``
(:func:`governance.trust.signers.sign_path`) by the deciding job's key: purpose ``decide`` for
gates and promotions, ``approve`` for a reviewer's approval or rejection. A record is
one of the typed records of :mod:`governance.trust.records` (``GateRecord``,
``PromotionRecord``, ``ApprovalRecord``, ``LinkRecord``, ``ClearanceRecord``), written
as the bytes its ``to_json`` gives and read back by ``parse_record``.

Each record is **bound to its run** when it is written: the sha256 of the record and of
its signature, and what it is about (kind, ensemble URI, alias, decision), are logged as
run parameters (:data:`BOUND_PARAMS`) before the files, and MLflow refuses to change a
logged parameter. Reading one back (:func:`read_record`) checks, in order, that the file
is there, that the record and signature are the bound ones (an artifact overwritten in
place is caught without trusting any tag), that it parses as a record of its kind
(:func:`governance.trust.records.parse_record`), that the parameters and the run's tags
agree with it (a re-tagged run is caught), that its signature verifies with a key or
certificate the policy trusts for the purpose of its kind at the record's signed
``time``, and that this time is one its store saw: while its run was open, give or take
:data:`governance.trust.keyring.CLOCK_SKEW_SECONDS` (:func:`_skew`).

**Fail closed.** A record that fails any check up to the signature **blocks**
(:attr:`Decision.blocking`): every decider that reads the records of a version or alias
(:func:`check_trail`, the latest link, approvals, promotions, recorded drift figures)
refuses with :class:`BlockedError` instead of skipping it, until a key the policy trusts
for ``decide`` clears that very record (its run and its current bytes) with a signed
``clearance`` record (``govern clear``: :func:`clear_records`). A record intact as
written whose signature the policy does not trust (unsigned what-if gates, a key the
policy does not name) counts for nothing and does not block: its signature is bound, so
nobody replaced a trusted one with it. A run with neither a bound record nor a record
file is a decision whose writing never started (a killed command) and is nothing. Runs
are found by their bound parameters and by their tags (:func:`decision_runs`), so
re-tagging a run does not hide it. A database administrator can still edit parameters
or delete rows in the store's database; only storage the insiders cannot write closes
that (docs/architecture.md, "What the trail cannot prove").

Promotions to one alias are serialized by :func:`flavors.promotion_lock.promotion_lock`.

**The record chain.** A record signed with a key also names its place in the chain of
its registered model's records (``chain`` {model, count, previous}:
:class:`governance.trust.records.ChainLink`), bound to its run as parameters
(:data:`CHAIN_PARAMS`): the writers of one model take its chain lock
(:func:`flavors.promotion_lock.chain_lock_name`, after any alias lock: locks are always
taken in that order), find the head (:func:`chain_head`: one search of the governance
experiments by the bound count, highest first; no tag an insider could move), and bind
the next count and the head's digest before they let go. A record deleted, withheld or
renamed away then leaves a gap or a fork that ``govern audit`` finds and ``promote``
refuses on (:mod:`flavors.trail.chain`). Unsigned what-if gates are not chained: they count for
nothing, and whoever has no key could otherwise lengthen the chain. Nor are
verification records (``Record.chained``): a reviewer's read must never wait for the
chain lock of promotions, and no decision rests on them.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from mlflow import MlflowClient
from mlflow.artifacts import download_artifacts
from mlflow.entities import Param, RunTag, ViewType
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_USER

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.explain.faults import HOST_TAG, PID_TAG, alive, process_tags
from miret_governance.flavors.store.auth import server_user
from miret_governance.flavors.store.reads import CommandClient, run_file, search_experiments_named
from miret_governance.flavors.store.registry import (
    ENSEMBLE_URI_TAG,
    EVIDENCE_DIGEST_TAG,
    PROMOTION_TAG,
    model_id_of,
    quoted,
    resolve_model_version,
    version_uri,
)
from miret_governance.flavors.trail.promotion_lock import (
    LOCK_TTL_SECONDS,
    ConcurrentPromotionError,
    chain_lock_name,
    promotion_lock,
)
from miret_governance.governance.trust.keyring import (
    CLOCK_SKEW_SECONDS,
    SignatureError,
    Signer,
    TrustedKeys,
)
from miret_governance.governance.trust.records import (
    ALIAS_RECORDS,
    MAX_RECORD_BYTES,
    RECORDS,
    ApprovalRecord,
    CertificateRef,
    ChainLink,
    ClearanceRecord,
    ClearedEntry,
    DecidedBy,
    DecisionRecord,
    EvidenceRef,
    PinnedModel,
    PolicyRef,
    PromotionRecord,
    Record,
    RecordError,
    SurrogateRecord,
    VerificationRecord,
    parse_record,
    record_digest,
)
from miret_governance.governance.trust.signers import SigningKey, sign_path
from miret_governance.governance.trust.signing import verify_path

RECORD_FOLDER = "decision"
RECORD_FILE = "record.json"
RECORD_SIGNATURE = "record.sig"
RECORD_PATH = f"{RECORD_FOLDER}/{RECORD_FILE}"
SIGNER_TAG = "governance.decision_signer"
"""Run tag: the name (or fingerprint) of the key that signed the record, or
``unsigned`` (a what-if gate run without a key: it never counts)."""
UNSIGNED = "unsigned"
GATE_EXPERIMENT = "governance-gates"
"""Gate and promotion runs (:mod:`flavors.gating`, :mod:`flavors.promotion`)."""
APPROVAL_EXPERIMENT = "governance-approvals"
LINK_EXPERIMENT = "governance-links"
"""Signed link records (:mod:`flavors.links`)."""
CLEARANCE_EXPERIMENT = "governance-clearances"
"""Signed clearances of records that blocked (:func:`clear_records`)."""
VERIFICATION_EXPERIMENT = "governance-verifications"
"""Verification records (:mod:`flavors.trail.verification`): read by the audit and the
version page, never by a decision (:func:`trail_runs` leaves them out)."""
VERIFICATION_TAGS = (
    "governance.verification.action",
    "governance.verification.result",
    "governance.verification.detail",
)
"""Run tags of a verification run repeating its record's ``action``, ``result`` and
``detail`` (:func:`_tag_disagreement` checks them)."""
DECISION_PAGE = 1000
"""Runs per page of :func:`decision_runs` (it reads every page)."""
ALIAS_RUN_TAG = "governance.alias"
DECISION_RUN_TAG = "governance.decision"
COMMENT_RUN_TAG = "governance.comment"
SURROGATE_URI_TAG = "governance.surrogate_uri"
DIGEST_PARAM = "governance.record.sha256"
KIND_PARAM = "governance.record.kind"
URI_PARAM = "governance.record.ensemble_uri"
ALIAS_PARAM = "governance.record.alias"
DECISION_PARAM = "governance.record.decision"
SIGNATURE_PARAM = "governance.record.signature_sha256"
UNSIGNED_DIGEST = "none"
""":data:`SIGNATURE_PARAM` of a record written without a key."""
CHAIN_MODEL_PARAM = "governance.record.chain_model"
CHAIN_COUNT_PARAM = "governance.record.chain_count"
"""The record's count, zero-padded to :data:`COUNT_DIGITS` so the store sorts it."""
CHAIN_PREVIOUS_PARAM = "governance.record.chain_previous"
CHAIN_PARAMS = (CHAIN_MODEL_PARAM, CHAIN_COUNT_PARAM, CHAIN_PREVIOUS_PARAM)
COUNT_DIGITS = 10
CHAIN_START = "none"
""":data:`CHAIN_PREVIOUS_PARAM` of a chain's first record."""
BOUND_PARAMS = (
    DIGEST_PARAM,
    SIGNATURE_PARAM,
    KIND_PARAM,
    URI_PARAM,
    ALIAS_PARAM,
    DECISION_PARAM,
) + CHAIN_PARAMS
"""Run parameters that bind a record to its run when it is written (MLflow refuses to
change a logged parameter)."""
GOVERNANCE_EXPERIMENTS = (
    GATE_EXPERIMENT,
    APPROVAL_EXPERIMENT,
    LINK_EXPERIMENT,
    CLEARANCE_EXPERIMENT,
    VERIFICATION_EXPERIMENT,
)
"""Every governance experiment: where records are written and chain heads searched."""
HEAD_PAGE = 10
"""Runs per page of :func:`chain_head`'s search past a first run that is not the head."""
CHAIN_WAIT_SECONDS = 60
"""How long a writer waits for its model's chain lock before it refuses."""
BLOCKERS_NAMED = 3
"""Blocking records a refusal names (it counts the rest)."""


class DecisionError(GovernanceError):
    """A decision that cannot be made or read: no signing key for a decision that must be
    signed, or a decision record that is missing or unreadable. Exit code 2."""


class BlockedError(DecisionError):
    """A record about the version or alias being decided does not read or verify, and no
    trusted key has cleared it: the decision is refused (fail closed). Exit code 2."""


# ---------------------------------------------------------------------- who decides
def mlflow_user(client: MlflowClient) -> str:
    """The user this command's records and runs name: the one the tracking server of
    ``client`` authenticated (:func:`flavors.store.auth.server_user`, asked once per
    process), else, on a store without users, what the client says: the tracking
    server's user name (``MLFLOW_TRACKING_USERNAME``) when set, else MLflow's
    ``mlflow.user`` run context (the operating system's user)."""
    from mlflow.tracking.context.registry import resolve_tags

    vouched = server_user(client.tracking_uri)
    if vouched is not None:
        return vouched.username
    return os.environ.get("MLFLOW_TRACKING_USERNAME") or resolve_tags().get(MLFLOW_USER, "")


def decided_by(
    trusted: TrustedKeys,
    key: SigningKey | None,
    client: MlflowClient,
    purpose: str = "decide",
) -> DecidedBy:
    """``decided_by`` of a record: who signs (:meth:`TrustedKeys.signer_for`: the key's
    policy name, or its certificate's identity and :class:`CertificateRef`; None when the
    policy does not name it), its fingerprint (None without a key), the MLflow user
    (:func:`mlflow_user`) and the user the server vouches for (None on a store without
    users). Called before a command writes anything.

    A key the policy does not trust for ``purpose`` is recorded unnamed (a what-if gate,
    a link; commands whose decisions must count refuse it first:
    :meth:`TrustedKeys.signer_for`); a key or certificate the policy trusts, but not now
    (window, revocation), is refused, and so is a certificate once the policy trusts an
    authority for ``purpose``.

    Raises
    ------
    DecisionError
        The policy binds the key to users (``[keys.<name>] users``) and the server
        authenticated another one, or cannot say who it is (nothing recorded).
    governance.trust.keyring.SignatureError
        A key or certificate refused as above (nothing recorded).
    """
    vouched = server_user(client.tracking_uri)
    user = vouched.username if vouched is not None else None
    fingerprint = key.fingerprint if key is not None else None
    named = trusted.with_fingerprint(fingerprint)
    signer, what = None, f"a {purpose} record signed now"
    if key is not None:
        certified = key.certificates and trusted.authorities_for(purpose)
        if certified or (named is not None and purpose in named.may_sign):
            signer = trusted.signer_for(key, purpose, what, datetime.now(timezone.utc))
        elif named is not None:  # named for other purposes: a what-if, still in its window
            signer = Signer(named.name, fingerprint)
            trusted.check_signer(signer, datetime.now(timezone.utc), what)
    if signer is not None and signer.authority is None and not named.allows(user):
        who = (
            f"the server says you are {user!r}: sign with your own key"
            if user is not None
            else "the tracking store has no users to say who you are: a key bound to users "
            "signs only on a tracking server with authentication"
        )
        raise DecisionError(f"{_bound_to(named)}; {who}; nothing was recorded")
    certificate = (
        CertificateRef(signer.authority, signer.serial, signer.identity)
        if signer is not None and signer.authority is not None
        else None
    )
    return DecidedBy(
        signer.name if signer is not None else None,
        fingerprint,
        mlflow_user(client),  # the vouched user again where there is one (asked once)
        user,
        certificate,
    )


def _bound_to(key) -> str:
    return f"key {key.name!r} may be used only by {', '.join(key.users)}"


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


def pinned(version) -> PinnedModel:
    """A model version as records name it."""
    return PinnedModel(version_uri(version), model_id_of(version) or "")


def policy_ref(policy) -> PolicyRef:
    """A policy as records name it (with its signer, once its signature verified)."""
    return PolicyRef(policy.label, policy.digest, policy.signer)


def new_record(
    cls: type[DecisionRecord], ensemble, surrogate, checked, policy, decider, **fields
) -> DecisionRecord:
    """A decision record of class ``cls`` on ``checked`` evidence, timed now; ``fields``
    are those of its kind."""
    return cls(
        ensemble=pinned(ensemble),
        surrogate=pinned(surrogate),
        evidence=EvidenceRef(checked.digest, getattr(checked, "signer", None)),
        policy=policy_ref(policy),
        **fields,
        decided_by=decider,
        time=now_utc(),
    )


def run_tags(record: Record) -> dict:
    """Run tags repeating a record for the MLflow UI ("Created by" is ``mlflow.user``)."""
    by = record.decided_by
    return {MLFLOW_USER: by.mlflow_user, SIGNER_TAG: by.key_name or by.key_fingerprint or UNSIGNED}


def alias_of(record: Record | None) -> str | None:
    """The alias a promotion or approval record is about (None for any other)."""
    return record.alias if isinstance(record, ALIAS_RECORDS) else None


def _bound(record: Record) -> dict:
    """What a record is about, as :data:`BOUND_PARAMS` hold it (digest and signed apart)."""
    about = {KIND_PARAM: record.kind, URI_PARAM: record.ensemble.uri}
    if isinstance(record, ALIAS_RECORDS):
        about |= {ALIAS_PARAM: record.alias, DECISION_PARAM: record.decision}
    if record.chain is not None:
        about |= {
            CHAIN_MODEL_PARAM: record.chain.model,
            CHAIN_COUNT_PARAM: f"{record.chain.count:0{COUNT_DIGITS}d}",
            CHAIN_PREVIOUS_PARAM: record.chain.previous or CHAIN_START,
        }
    return about


def model_of(record: Record) -> str:
    """The registered model whose chain ``record`` belongs to (its ensemble's)."""
    return record.ensemble.uri.removeprefix("models:/").rsplit("/", 1)[0]


# ---------------------------------------------------------------------- the chain
def chain_count(params: dict) -> int | None:
    """The count a run's parameters bind (:data:`CHAIN_COUNT_PARAM`), or None when there
    is none or it is not one :func:`log_record` writes."""
    value = params.get(CHAIN_COUNT_PARAM, "")
    well_formed = len(value) == COUNT_DIGITS and value.isascii() and value.isdigit()
    return int(value) if well_formed and int(value) > 0 else None


def chain_head(client: MlflowClient, model: str):
    """The run of the last record of ``model``'s chain: the highest well-formed bound
    count (:func:`chain_count`) with a bound digest in the governance experiments,
    deleted runs included; None before the first. A search of one run finds it; a
    forged run sorted above it (any run can be logged with any parameters) costs pages
    of :data:`HEAD_PAGE` runs, never a crash, and breaks the chain where the audit finds
    it."""
    ids = _experiment_ids(client, GOVERNANCE_EXPERIMENTS)
    for page_size in (1, HEAD_PAGE):  # the first run is the head but for forgeries
        token = None
        while ids:
            page = client.search_runs(
                list(ids.values()),
                filter_string=f"params.`{CHAIN_MODEL_PARAM}` = {quoted(model)}",
                run_view_type=ViewType.ALL,
                order_by=[f"params.`{CHAIN_COUNT_PARAM}` DESC"],
                max_results=page_size,
                page_token=token,
            )
            for run in page:
                if chain_count(run.data.params) and run.data.params.get(DIGEST_PARAM):
                    return run
            token = page.token
            if not token or page_size == 1:
                break
    return None


def next_link(client: MlflowClient, model: str) -> ChainLink:
    """The link of the record written next in ``model``'s chain (under its lock).

    Raises
    ------
    DecisionError
        The chain is at its last count (a forged run): nothing recorded.
    """
    head = chain_head(client, model)
    if head is None:
        return ChainLink(model, 1, None)
    count = chain_count(head.data.params) + 1
    if count >= 10**COUNT_DIGITS:
        raise DecisionError(
            f"the record chain of {model} is at its last count (run {head.info.run_id}, "
            "forged): an MLflow admin must delete that run; nothing was recorded"
        )
    return ChainLink(model, count, head.data.params[DIGEST_PARAM])


@contextmanager
def chain_lock(client: MlflowClient, record: Record, key: SigningKey, trusted):
    """Hold the chain lock of ``record``'s model (:func:`model_of`), waiting up to
    :data:`CHAIN_WAIT_SECONDS` while another writer verifiably holds it.

    Raises
    ------
    DecisionError
        Still held after that (nothing recorded).
    """
    model = model_of(record)
    lock = chain_lock_name(model)
    deadline = time.monotonic() + CHAIN_WAIT_SECONDS
    purposes = tuple(sorted({cls.purpose for cls in RECORDS.values() if cls.chained}))
    with ExitStack() as held:
        while True:
            try:
                held.enter_context(
                    promotion_lock(
                        client, model, "", record.ensemble.uri, key, trusted, lock, purposes
                    )
                )
                break
            except ConcurrentPromotionError:
                if time.monotonic() > deadline:
                    raise DecisionError(
                        f"another writer has held the record chain lock of {model} (registered "
                        f"model {lock}) for more than {CHAIN_WAIT_SECONDS} s; nothing was "
                        f"recorded; a lock expires {LOCK_TTL_SECONDS} s after it was taken, or "
                        "delete that registered model if its writer is gone"
                    ) from None
                time.sleep(random.uniform(0.05, 0.15))  # writers do not retry in step
        yield


# ---------------------------------------------------------------------- write and read
def log_record(
    client: MlflowClient,
    run_id: str,
    record: Record,
    key: SigningKey | None,
    trusted: TrustedKeys | None = None,
) -> Record:
    """Sign ``record`` with ``key`` (unsigned without a key), bind it and its signature to
    the run (:data:`BOUND_PARAMS`), then write them as ``decision/record.json`` and
    ``decision/record.sig``; the run is tagged (:func:`run_tags`) with the parameters.

    A signed record of a chained kind is first chained (module docstring): under its
    model's chain lock (:func:`chain_lock`), whose holders verify with ``trusted`` (the
    policy's keys; None: this key alone), it takes the next link, and is signed and bound
    before the lock is let go; a kind that is not (``Record.chained``: a verification) is
    bound and signed without the lock. Returns the record as written (with its link).
    """
    with tempfile.TemporaryDirectory(prefix="decision-") as tmp:
        if key is None or not record.chained:
            _bind(client, run_id, record, key, Path(tmp))
        else:
            trusted = trusted or key.trusted_for("decide")
            with chain_lock(client, record, key, trusted):
                record = replace(record, chain=next_link(client, model_of(record)))
                _bind(client, run_id, record, key, Path(tmp))
        client.log_artifacts(run_id, tmp, RECORD_FOLDER)
    return record


def _bind(client: MlflowClient, run_id: str, record: Record, key, tmp: Path) -> None:
    """Write ``record`` and its signature by ``key`` into ``tmp`` and bind both to the
    run (:data:`BOUND_PARAMS`, with the run's tags: one request)."""
    raw = record.to_json()
    parse_record(raw)  # what is written must read back
    path, signature = tmp / RECORD_FILE, tmp / RECORD_SIGNATURE
    path.write_bytes(raw)
    if key is not None:
        sign_path(path, key, signature)
    params = _bound(record) | {
        DIGEST_PARAM: record_digest(raw),
        SIGNATURE_PARAM: record_digest(signature.read_bytes())
        if key is not None
        else UNSIGNED_DIGEST,
    }
    # the run's tags go with the binding parameters: one request, not three
    client.log_batch(
        run_id,
        params=[Param(k, str(v)) for k, v in params.items()],
        tags=[RunTag(k, v) for k, v in run_tags(record).items()],
    )


def finish_with_record(
    client: MlflowClient, run_id: str, record: Record, key, trusted: TrustedKeys | None = None
) -> None:
    """Write ``record`` on the run (:func:`log_record`, ``trusted`` its chain lock's) and
    end it FINISHED, or FAILED when writing failed: a bound record missing from a run
    that did not finish is a decision whose writing was interrupted, never one that was
    deleted."""
    try:
        log_record(client, run_id, record, key, trusted)
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, "FINISHED")


def record_in_new_run(
    client: MlflowClient,
    experiment: str,
    run_name: str,
    tags: dict,
    record: Record,
    key,
    trusted: TrustedKeys | None = None,
) -> str:
    """Create a run of ``experiment`` (created when missing, tagged with this process:
    :func:`flavors.faults.process_tags`) holding ``record`` (:func:`finish_with_record`);
    its id."""
    run_id = client.create_run(
        experiment_id(client, experiment), run_name=run_name, tags=tags | process_tags()
    ).info.run_id
    finish_with_record(client, run_id, record, key, trusted)
    return run_id


def _writer_gone(run) -> bool:
    """Whether the run's writer stopped before it finished: the run ended FAILED or
    KILLED, or is RUNNING for a process of this host that is gone (a kill)."""
    status = run.info.status
    if status in ("FAILED", "KILLED"):
        return True
    pid = run.data.tags.get(PID_TAG, "")
    return (
        status == "RUNNING"
        and run.data.tags.get(HOST_TAG) == socket.gethostname()
        and pid.isdigit()
        and not alive(int(pid))
    )


def end_killed_runs(client: MlflowClient, runs) -> None:
    """End as KILLED the decision runs left RUNNING by a process of this host that is
    gone (a command killed while it wrote its record)."""
    for run in runs:
        if run.info.status == "RUNNING" and _writer_gone(run):
            client.set_terminated(run.info.run_id, "KILLED")


@dataclass(frozen=True)
class Decision:
    """A decision record read back from its run.

    Attributes
    ----------
    run_id : str
    record : Record or None
        The parsed record (:mod:`governance.trust.records`); None when there is none or it
        does not parse.
    signer : Signer or None
        The trusted key that signed it; None when it is not trusted.
    problem : str or None
        Why it does not count (unbound, replaced, unparsable, re-tagged, unsigned,
        untrusted key, altered); None when it verified.
    sha256 : str or None
        The sha256 of the record's bytes followed by its signature's digest, as stored
        now (None: no record file); a clearance covers these bytes only.
    blocking : bool
        A problem that blocks decisions (module docstring): anything but an intact
        record the policy does not trust, or a decision whose writing never started.
    cleared_at : datetime or None
        When a valid clearance set this blocking record aside (:func:`read_all`).
    bound : bool
        Its run was bound to a record when it was written (:data:`DIGEST_PARAM`): a
        cleared bound record may have been a real decision; an unbound one never was.
    misused : bool
        Intact and signed by a trusted key, but the policy binds that key to other users
        than the one the record names as vouched by the server (``[keys.<name>] users``),
        or signed at a time its store did not see (:func:`_skew`): it counts for nothing
        like an untrusted signature, and the audit reports it.
    """

    run_id: str
    record: Record | None
    signer: Signer | None
    problem: str | None
    sha256: str | None = None
    blocking: bool = False
    cleared_at: datetime | None = None
    bound: bool = False
    misused: bool = False

    @property
    def valid(self) -> bool:
        return self.problem is None


def _tag_disagreement(record: Record, tags: dict) -> str | None:
    """The first run tag that says otherwise than ``record`` (tags absent are fine: a
    killed command may not have written them)."""
    signed = {ENSEMBLE_URI_TAG: record.ensemble.uri}
    if isinstance(record, SurrogateRecord):
        signed[SURROGATE_URI_TAG] = record.surrogate.uri
    if isinstance(record, DecisionRecord):
        signed[EVIDENCE_DIGEST_TAG] = record.evidence.digest
    if isinstance(record, ApprovalRecord):
        signed |= {ALIAS_RUN_TAG: record.alias, DECISION_RUN_TAG: record.decision}
    if isinstance(record, VerificationRecord):
        signed |= dict(zip(VERIFICATION_TAGS, (record.action, record.result, record.detail)))
    prefix = PROMOTION_TAG.format(alias="")
    for tag in tags:
        if tag.startswith(prefix) and not tag.endswith(".run"):
            promoted = isinstance(record, PromotionRecord) and tag == PROMOTION_TAG.format(
                alias=record.alias
            )
            signed[tag] = record.decision if promoted else "(no such tag)"
    for tag, value in signed.items():
        if tag in tags and tags[tag] != value:
            return (
                f"disagrees with its run's tags: the record says {tag} = {value[:80]!r}, but "
                f"the run is tagged {tags[tag][:80]!r}; the run was re-tagged, which hides it "
                "from searches by that tag: restore the tag"
            )
    return None


def read_record(client: MlflowClient, run, trusted: TrustedKeys) -> Decision:
    """The decision record of ``run`` (a run, or its id), checked as the module
    docstring says (a bound record missing from a run whose writer stopped first,
    :func:`_writer_gone`, is an interrupted decision, not a blocking one: through
    MLflow's API nobody can delete an artifact, only a kill can leave it unwritten).

    Never raises for a record that is missing, unbound, replaced, malformed, re-tagged,
    unsigned, untrusted or altered: the :class:`Decision` says why it does not count and
    whether that blocks.
    """
    if isinstance(run, str):
        try:
            run = client.get_run(run)
        except MlflowException as error:
            return Decision(run, None, None, f"run {run} cannot be read: {error}", blocking=True)
    run_id, params, tags = run.info.run_id, run.data.params, run.data.tags
    what = f"the decision record of run {run_id}"
    bound = params.get(DIGEST_PARAM)

    def refused(problem: str, record=None, sha=None, blocking=True) -> Decision:
        return Decision(
            run_id, record, None, f"{what} {problem}", sha, blocking, bound=bound is not None
        )

    with tempfile.TemporaryDirectory(prefix="decision-") as tmp:
        try:
            local = _record_folder(client, run.info.artifact_uri.rstrip("/"), Path(tmp))
            path, signature = local / RECORD_FILE, local / RECORD_SIGNATURE
            with open(path, "rb") as handle:
                raw = handle.read(MAX_RECORD_BYTES + 1)
        except (MlflowException, OSError):
            if bound is None:  # never written: a command killed before it decided
                return refused("was never written (an unfinished decision)", blocking=False)
            if _writer_gone(run):  # bound, then killed before the file was written
                return refused(
                    f"was never written: its writer stopped first (run {run.info.status})",
                    blocking=False,
                )
            return refused(
                "is missing although its run was bound to one (parameter "
                f"{DIGEST_PARAM}): it was deleted, or its writing was interrupted"
            )
        signed = _signature_digest(signature)
        sha = record_digest(raw + (signed or "").encode())
        if len(raw) > MAX_RECORD_BYTES:
            return refused(f"is larger than {MAX_RECORD_BYTES} bytes", sha=sha)
        if bound is None or SIGNATURE_PARAM not in params:
            return refused(
                f"is not bound to its run (no parameter {DIGEST_PARAM}): it was not written "
                "by govern, or by a version before records were bound",
                sha=sha,
            )
        if record_digest(raw) != bound or (signed or UNSIGNED_DIGEST) != params[SIGNATURE_PARAM]:
            which = "record" if record_digest(raw) != bound else "signature"
            return refused(
                f"was replaced after it was written (its {which} is not the one its run's "
                f"parameters {DIGEST_PARAM} and {SIGNATURE_PARAM} bound)",
                sha=sha,
            )
        try:
            record = parse_record(raw)
        except RecordError as error:
            return refused(f"is not a record: {error}", sha=sha)
        for name, value in _bound(record).items():
            if params.get(name) != str(value):
                return refused(
                    f"says {name} = {str(value)[:80]!r} but its run's parameter says "
                    f"{str(params.get(name))[:80]!r}",
                    record,
                    sha,
                )
        disagreement = _tag_disagreement(record, tags)
        if disagreement:
            return refused(disagreement, record, sha)
        try:
            signer = verify_path(path, signature, trusted, record.purpose, what, record.signed_at)
        except SignatureError as error:  # intact as written: never a decision that counts
            return Decision(run_id, record, None, str(error), sha, blocking=False, bound=True)
    skew = _skew(record, run)
    if skew is not None:  # intact and signed, at a time its store did not see
        return Decision(run_id, record, None, f"{what} {skew}", sha, bound=True, misused=True)
    key, user = trusted.with_fingerprint(signer.fingerprint), record.decided_by.server_user
    if signer.authority is None and not key.allows(user):  # a key used by someone else
        by = (
            f"the server said {user!r} signed it" if user else "no server vouched for who signed it"
        )
        problem = f"{what} is signed with a key used by another user: {_bound_to(key)}, and {by}"
        return Decision(run_id, record, None, problem, sha, bound=True, misused=True)
    return Decision(run_id, record, signer, None, sha, bound=True)


def _skew(record: Record, run) -> str | None:
    """Why ``record``'s signed time is not one its store saw (None: it is): more than
    :data:`CLOCK_SKEW_SECONDS` before its run started, or after it ended (after now,
    while it runs: a promotion may take minutes between its run's start and its record).
    """
    start, end = run.info.start_time, run.info.end_time
    signed, tolerance = record.signed_at.timestamp() * 1000, CLOCK_SKEW_SECONDS * 1000
    if start is not None and start - tolerance <= signed <= (end or time.time() * 1000) + tolerance:
        return None
    return (
        f"is signed at {record.time}, outside the time its run was open in the store "
        f"({_stamp(start)} to {_stamp(end) if end else 'now'}, give or take "
        f"{CLOCK_SKEW_SECONDS} s): a signed time the store did not see does not count; check "
        "the signing host's clock and decide again"
    )


def _stamp(ms: int | None) -> str:
    if ms is None:
        return "no time"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="seconds")


def _record_folder(client: MlflowClient, artifact_uri: str, tmp: Path) -> Path:
    """The run's ``decision/`` folder as local files (from the run's own artifact
    location: ``runs:/`` would also search the experiment's logged models named like the
    folder, slow and anyone's to add).

    Both files are fetched by name, one request each and once per command
    (:func:`flavors.store.reads.run_file`), not as a folder (a listing, then each file).
    When either is not there or not readable, the folder is downloaded as a folder, so a
    record without a signature (an unsigned what-if) or without a file reads exactly as
    it always did; the bytes are checked by :func:`read_record` either way.
    """
    fetched = tmp / "fetched" / RECORD_FOLDER
    try:
        for name in (RECORD_FILE, RECORD_SIGNATURE):
            run_file(client, artifact_uri, f"{RECORD_FOLDER}/{name}", fetched / name)
        return fetched
    except Exception as error:
        if _unreachable(error):  # the folder would fail the same way, as slowly
            raise
        shutil.rmtree(fetched, ignore_errors=True)
    return Path(
        download_artifacts(artifact_uri=f"{artifact_uri}/{RECORD_FOLDER}", dst_path=str(tmp))
    )


def _unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a failure to reach the server: a timeout
    or a refused connection, not a file that is not there."""
    import requests

    from miret_governance.flavors.store.outages import error_chain

    failures = (requests.ConnectionError, requests.Timeout)
    return any(isinstance(link, failures) for link in error_chain(error))


def _signature_digest(signature: Path) -> str | None:
    """The sha256 of a record's signature file (None when there is none); a file larger
    than a record may be is not read (its digest then names its size)."""
    try:
        if signature.stat().st_size > MAX_RECORD_BYTES:
            return f"larger than {MAX_RECORD_BYTES} bytes"
        return record_digest(signature.read_bytes())
    except OSError:
        return None


def experiment_id(client: MlflowClient, name: str) -> str:
    """The id of experiment ``name``, created when missing (also concurrently).

    Not on a server with MLflow's basic-auth app: there MLflow gives MANAGE on an
    experiment to whoever creates it, so the first reviewer to approve would own
    ``governance-approvals`` and could delete others' approvals. There a missing
    governance experiment is refused, and ``govern server setup`` (an admin) makes it.
    """
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    from miret_governance.flavors.store.auth import authenticated

    if authenticated(client.tracking_uri):
        raise DecisionError(
            f"{name} does not exist on {client.tracking_uri}: an MLflow admin must run "
            "`govern server setup --policy <policy>` (it creates the governance experiments, "
            "owned by the admin, and grants each role its permissions); nothing was recorded"
        )
    try:
        return client.create_experiment(name)
    except MlflowException:  # created concurrently
        return client.get_experiment_by_name(name).experiment_id


def decision_runs(client: MlflowClient, experiment_name: str, ensemble_uri: str) -> list:
    """Runs of ``experiment_name`` about ``ensemble_uri`` by their bound parameter or by
    their tag (a run re-tagged is still found by its parameter; one created by hand by its
    tag), oldest first, deleted ones included: whoever can log can delete a run, and a
    signed rejection must not disappear with its run (until the store's garbage
    collection, which needs the database)."""
    return decision_runs_in(client, (experiment_name,), ensemble_uri)[experiment_name]


def decision_runs_in(client: MlflowClient, experiment_names, ensemble_uri: str) -> dict:
    """:func:`decision_runs` of several experiments at once: experiment name -> its runs.

    One search per filter covers every experiment (MLflow searches several experiments
    in one request), not one per experiment, and a :class:`flavors.store.reads.CommandClient`
    keeps each experiment's runs until its next write, so that the latest link, the
    approvals and the recorded drift figures read within one command are the runs
    :func:`check_trail` found, not a second search each.
    """
    found = {
        name: _recall(client, ("decision_runs", name, ensemble_uri)) for name in experiment_names
    }
    missing = [name for name, runs in found.items() if runs is None]
    if missing:
        searched = _either(
            client,
            missing,
            f"params.`{URI_PARAM}` = {quoted(ensemble_uri)}",
            f"tags.`{ENSEMBLE_URI_TAG}` = {quoted(ensemble_uri)}",
        )
        for name in missing:
            found[name] = searched[name]
            _remember(client, ("decision_runs", name, ensemble_uri), searched[name])
    return found


def remember_decision_runs(client: MlflowClient, runs: dict, ensemble_uris) -> None:
    """Let a :class:`flavors.store.reads.CommandClient` answer :func:`decision_runs` of
    each of ``ensemble_uris`` from ``runs`` (experiment name -> every run of it, as
    :func:`every_run_in` read them), selected as the searches select them: by the bound
    parameter or the tag, oldest first. The audit reads every run once; without this,
    each version's latest link and approvals would search again."""
    if not isinstance(client, CommandClient):
        return
    for uri in ensemble_uris:
        for name, every in runs.items():
            about = [
                r
                for r in every
                if r.data.params.get(URI_PARAM) == uri or r.data.tags.get(ENSEMBLE_URI_TAG) == uri
            ]
            about.sort(key=lambda r: (r.info.start_time or 0, r.info.run_id))
            client.remember(("decision_runs", name, uri), about)


def _recall(client: MlflowClient, key):
    return client.recall(key) if isinstance(client, CommandClient) else None


def _remember(client: MlflowClient, key, value) -> None:
    if isinstance(client, CommandClient):
        client.remember(key, value)


def _either(client: MlflowClient, experiment_names, *filters: str) -> dict:
    """Runs of each of ``experiment_names`` that any of ``filters`` selects, once each,
    oldest first: experiment name -> runs."""
    ids = _experiment_ids(client, experiment_names)
    found = {name: {} for name in experiment_names}
    for filter_string in filters:
        for name, runs in _grouped(client, experiment_names, ids, filter_string).items():
            for run in runs:
                found[name].setdefault(run.info.run_id, run)
    return {
        name: sorted(runs.values(), key=lambda r: (r.info.start_time or 0, r.info.run_id))
        for name, runs in found.items()
    }


def _experiment_ids(client: MlflowClient, experiment_names) -> dict:
    """Name -> id of those of ``experiment_names`` that exist."""
    if isinstance(client, CommandClient):
        found = client.experiments_named(experiment_names)
        return {name: experiment.experiment_id for name, experiment in found.items()}
    if len(experiment_names) > 1:  # one search, not one lookup each
        found = search_experiments_named(client, experiment_names)
        return {name: found[name].experiment_id for name in experiment_names if name in found}
    ids = {}
    for name in experiment_names:
        experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            ids[name] = experiment.experiment_id
    return ids


def every_run(client: MlflowClient, experiment_name: str, filter_string: str = "") -> list:
    """Every run of ``experiment_name`` that ``filter_string`` selects, oldest first,
    deleted ones included, every page read (a search capped at one page let 5,000 junk
    runs hide a record)."""
    return every_run_in(client, (experiment_name,), filter_string)[experiment_name]


def every_run_in(client: MlflowClient, experiment_names, filter_string: str = "") -> dict:
    """:func:`every_run` of several experiments in one search (a page covers them all):
    experiment name -> its runs, oldest first."""
    ids = _experiment_ids(client, experiment_names)
    return _grouped(client, experiment_names, ids, filter_string)


def _grouped(client: MlflowClient, experiment_names, ids: dict, filter_string: str) -> dict:
    """Name -> the runs of each of ``experiment_names`` (``ids``: name -> id of those that
    exist) that ``filter_string`` selects, oldest first, from one search of them all."""
    names = {experiment: name for name, experiment in ids.items()}
    found = {name: [] for name in experiment_names}
    for run in search_all_runs(client, list(ids.values()), filter_string):
        found[names[run.info.experiment_id]].append(run)
    return found


def search_all_runs(client: MlflowClient, experiment_ids: list, filter_string: str) -> list:
    """Every run of ``experiment_ids`` that ``filter_string`` selects, oldest first,
    deleted ones included, every page read (:data:`DECISION_PAGE` runs a page)."""
    if not experiment_ids:
        return []
    runs, token = [], None
    while True:
        page = client.search_runs(
            experiment_ids,
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


# ---------------------------------------------------------------------- fail closed
def read_all(client: MlflowClient, runs, trusted: TrustedKeys, model_name: str) -> list:
    """The records of ``runs`` (:func:`read_record`), refusing as soon as one blocks and
    no valid clearance covers it: a decider never reads past a blocking record, so junk
    aimed at a version costs one read, not one per junk run. A cleared record is
    returned with ``cleared_at`` (:func:`unknown_since`)."""
    decisions, cleared = [], None
    for run in runs:
        decision = read_record(client, run, trusted)
        if decision.blocking:
            if cleared is None:
                cleared = cleared_records(client, model_name, trusted)
            when = cleared.get((decision.run_id, decision.sha256))
            if when is None:
                raise BlockedError(_blocked_message(decision, model_name))
            decision = replace(decision, cleared_at=when)
        decisions.append(decision)
    return decisions


def unknown_since(decisions: list) -> datetime | None:
    """The latest time a clearance set aside one of ``decisions`` that was bound to its
    run (None when none was): that record may have been a real decision nobody can read
    now, so a decision signed before the clearance must not take its place (an older
    link would become current again, an approval would outrank a rejection someone
    overwrote). An unbound record never was a decision of this product."""
    cleared = [d.cleared_at for d in decisions if d.cleared_at is not None and d.bound]
    return max(cleared, default=None)


def _blocked_message(decision: Decision, model_name: str) -> str:
    return (
        f"refused (fail closed): {decision.problem}; a record about {model_name} that does "
        "not verify may be a decision someone hid, so nothing is decided until it is "
        "restored or a key the policy trusts for decide clears it: govern clear "
        "--model-uri <the version being decided> --reason <why> (the audit lists the "
        "clearance)"
    )


def trail_runs(client: MlflowClient, version, alias: str | None = None) -> list:
    """The runs whose records a decision on ``version`` (and ``alias``) rests on: its
    gate, approval and link runs, and the promotions of the model to ``alias``."""
    about = decision_runs_in(
        client, (GATE_EXPERIMENT, APPROVAL_EXPERIMENT, LINK_EXPERIMENT), version_uri(version)
    )
    runs = [run for runs in about.values() for run in runs]
    if alias is not None:
        known = {run.info.run_id for run in runs}
        runs += [
            r for r in promotion_runs(client, version.name, alias) if r.info.run_id not in known
        ]
    return runs


def check_trail(client: MlflowClient, version, trusted: TrustedKeys, alias: str | None = None):
    """Refuse a decision on ``version`` (and ``alias``) while a record it rests on
    (:func:`trail_runs`) blocks.

    Raises
    ------
    BlockedError
        Names the first such record's run and problem, and how to clear it.
    """
    runs = trail_runs(client, version, alias)
    end_killed_runs(client, runs)
    read_all(client, runs, trusted, version.name)


def blocking_records(client: MlflowClient, version, trusted, alias: str | None = None) -> list:
    """The records of :func:`trail_runs` that block and no clearance covers."""
    cleared = cleared_records(client, version.name, trusted)
    return [
        d
        for d in (read_record(client, run, trusted) for run in trail_runs(client, version, alias))
        if d.blocking and (d.run_id, d.sha256) not in cleared
    ]


def clearance_runs(client: MlflowClient, model_name: str) -> list:
    """The clearance runs about versions of ``model_name``."""
    return every_run(
        client,
        CLEARANCE_EXPERIMENT,
        f"params.`{URI_PARAM}` LIKE {quoted(f'models:/{model_name}/%')}",
    )


def cleared_records(client: MlflowClient, model_name: str, trusted: TrustedKeys) -> dict:
    """``(run_id, sha256)`` of every record a valid clearance about ``model_name``
    cleared, with the clearance's signed time (a clearance covers the record's bytes it
    saw; replaced again, it blocks again). A clearance that does not verify clears
    nothing."""
    cleared = {}
    for run in clearance_runs(client, model_name):
        decision = read_record(client, run, trusted)
        if decision.valid and isinstance(decision.record, ClearanceRecord):
            for entry in decision.record.cleared:
                key = (entry.run_id, entry.sha256)
                cleared[key] = max(cleared.get(key, signed_time(decision)), signed_time(decision))
    return cleared


def clearing(model_uri: str, reason: str, policy, signing_key, client) -> tuple:
    """What a clearance of ``model_uri`` needs, checked before anything is written: its
    key (trusted for ``decide``), client, ``decided_by`` and version.

    Raises
    ------
    DecisionError
        No reason or no signing key.
    governance.trust.keyring.SignatureError
        A key the policy does not trust for ``decide``.
    """
    if not reason or not reason.strip():
        raise DecisionError("a clearance needs a --reason saying why the records may be set aside")
    key = require_key(signing_key, "clear", "decide")
    policy.keys.signer_for(key, "decide", "the clearance", datetime.now(timezone.utc))
    client = client or CommandClient()
    by = decided_by(policy.keys, key, client)
    return key, client, by, resolve_model_version(client, model_uri)


def clear_records(
    model_uri: str,
    reason: str,
    policy,
    signing_key: SigningKey | None,
    alias: str | None = None,
    client: MlflowClient | None = None,
    run_ids: tuple = (),
):
    """Record a signed clearance of every record that blocks decisions on the version of
    ``model_uri`` (and ``alias``) now, or of the runs ``run_ids`` (records bound to no
    version, which the audit reports) when given.

    The clearance (kind ``clearance``, experiment ``governance-clearances``) names each
    record's run, the sha256 of its bytes as they are now (replaced again, it blocks
    again) and its problem; ``govern audit`` lists it.

    Returns
    -------
    (str, list of Decision)
        The clearance run's id and the records it cleared.

    Raises
    ------
    DecisionError
        No reason, no signing key, or nothing blocks (nothing recorded).
    governance.trust.keyring.SignatureError
        A key the policy does not trust for ``decide``.
    """
    key, client, by, version = clearing(model_uri, reason, policy, signing_key, client)
    uri = version_uri(version)
    if run_ids:
        named = [read_record(client, run_id, policy.keys) for run_id in run_ids]
        fine = [d.run_id for d in named if not d.blocking]
        if fine:
            raise DecisionError(
                f"the records of runs {', '.join(fine)} do not block (they verify, or say "
                "nothing); nothing was recorded"
            )
        blocking = named
    else:
        blocking = blocking_records(client, version, policy.keys, alias)
    if not blocking:
        raise DecisionError(f"no record blocks decisions on {uri}; nothing was recorded")
    record = ClearanceRecord(
        ensemble=pinned(version),
        policy=policy_ref(policy),
        cleared=tuple(ClearedEntry(d.run_id, d.sha256, d.problem[:1000]) for d in blocking),
        reason=reason.strip(),
        decided_by=by,
        time=now_utc(),
    )
    run_id = record_in_new_run(
        client,
        CLEARANCE_EXPERIMENT,
        f"CLEAR {len(blocking)} record(s) · {version.name} v{version.version}",
        {ENSEMBLE_URI_TAG: uri, MLFLOW_USER: record.decided_by.mlflow_user},
        record,
        key,
        policy.keys,
    )
    return run_id, blocking


def promotion_runs(client: MlflowClient, name: str, alias: str) -> list:
    """The promotion runs of versions of ``name`` to ``alias``, by bound parameters or by
    tags, oldest first, deleted ones included."""
    prefix = quoted(f"models:/{name}/%")
    return _either(
        client,
        (GATE_EXPERIMENT,),
        f"params.`{KIND_PARAM}` = 'promotion' and params.`{ALIAS_PARAM}` = {quoted(alias)} "
        f"and params.`{URI_PARAM}` LIKE {prefix}",
        f"tags.`{PROMOTION_TAG.format(alias=alias)}` = 'promoted' and "
        f"tags.`{ENSEMBLE_URI_TAG}` LIKE {prefix}",
    )[GATE_EXPERIMENT]


def latest_promotion(client: MlflowClient, name: str, alias: str, trusted: TrustedKeys):
    """The latest valid signed promotion of a version of ``name`` to ``alias`` (a
    :class:`Decision`, None when none was made), deleted runs included.

    Raises
    ------
    BlockedError
        A promotion record to ``alias`` does not verify (:func:`read_all`).
    """
    prefix = f"models:/{name}/"
    latest = None
    for decision in read_all(client, promotion_runs(client, name, alias), trusted, name):
        record = decision.record
        if (
            decision.valid
            and isinstance(record, PromotionRecord)
            and record.decision == "promoted"
            and record.alias == alias
            and record.ensemble.uri.startswith(prefix)
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
    signed = promotion.record.ensemble
    now = None if holder is None else pinned(holder)
    if signed == now:
        return ""
    where = "no version holds it" if holder is None else f"it points to {now.uri}"
    return (
        f"@{alias} was moved by hand: {where}, but the latest signed promotion (run "
        f"{promotion.run_id}, {promotion.record.time}) put {signed.uri} there; "
        f"restore the alias, or promote a version to @{alias} with govern promote"
    )


def newer(decision: Decision, than: Decision) -> bool:
    """Was ``decision`` signed after ``than`` (or at the same time, in a later run)? By
    the signed time, never by the run's start time, which is the logger's to choose: a
    copy of an older record logged again is no newer."""
    return signed_time(decision) >= signed_time(than)


def signed_time(decision: Decision) -> datetime:
    """The record's signed ``time`` (the earliest possible time when it has no record)."""
    if decision.record is None:
        return datetime.min.replace(tzinfo=timezone.utc)
    return decision.record.signed_at


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


def latest_approvals(read: list, bound) -> dict:
    """Per ``(alias, signer)``, the latest valid approval record of ``read`` (records of
    :func:`read_all`) that binds the ensemble version ``bound`` (URI and model id).
    Once an approval record was cleared unread (:func:`unknown_since`), only decisions
    signed after the clearance count: the one cleared may have been a rejection."""
    cleared = unknown_since(read)
    latest: dict[tuple, Decision] = {}
    for decision in read:
        record = decision.record
        if (
            not decision.valid
            or (cleared is not None and signed_time(decision) <= cleared)
            or not isinstance(record, ApprovalRecord)
            or record.ensemble != bound
        ):
            continue
        key = (record.alias, decision.signer.name)
        if key not in latest or newer(decision, latest[key]):
            latest[key] = decision
    return latest


def approval_state(
    client: MlflowClient,
    ensemble,
    alias: str,
    digest: str,
    trusted: TrustedKeys,
    needed: int,
    promoter: str | None = None,
) -> ApprovalState:
    """The approvals of ``alias`` on ``ensemble`` whose record verifies with ``trusted``
    and binds this ensemble version (URI and model id) and the alias (a record of the
    version that does not verify blocks: :class:`BlockedError`); per key the latest
    signed decision counts. An approval counts only on the evidence ``digest``; a
    rejection blocks on any evidence of the version until its key approves later: which
    explanation is linked is anyone's to change (and a new explanation is CI's to make),
    so neither may set aside a reviewer's rejection. Once an approval record of the
    version was cleared unread (:func:`unknown_since`), only decisions signed after the
    clearance count: the one cleared may have been a rejection. Four eyes by user: an
    approval the server vouches was made by ``promoter`` (the user the server vouches
    promotes; None: nobody vouched) does not count, whatever key signed it."""
    bound = pinned(ensemble)
    read = read_all(
        client, decision_runs(client, APPROVAL_EXPERIMENT, bound.uri), trusted, ensemble.name
    )
    latest = latest_approvals(read, bound)  # per key, or certified identity (any of its keys)
    ordered = sorted(
        (d for (named, _), d in latest.items() if named == alias), key=lambda d: d.signer.name
    )
    own = [  # the promoter's own approval: one pair of eyes
        d
        for d in ordered
        if promoter is not None
        and d.record.decision == "approve"
        and d.record.decided_by.server_user == promoter
    ]
    counted = [  # an approval of other evidence counts for nothing
        d
        for d in ordered
        if d not in own and (d.record.decision == "reject" or d.record.evidence.digest == digest)
    ]
    rejected = [d for d in counted if d.record.decision == "reject"]
    approvers = [d.signer.name for d in counted if d.record.decision == "approve"]
    if rejected:
        names = ", ".join(f"{d.signer.name} ({d.record.comment})" for d in rejected)
        return ApprovalState(False, f"@{alias} was rejected by {names}", counted)
    if len(approvers) < needed:
        four_eyes = (
            f"; the approval by key {', '.join(d.signer.name for d in own)} does not count: "
            f"the server says {promoter!r} made it, who promotes (four eyes)"
            if own
            else ""
        )
        return ApprovalState(
            False,
            f"@{alias} needs {needed} approval{'s' if needed != 1 else ''} of the current "
            f"evidence by approver keys the policy trusts, has {len(approvers)} "
            f"({', '.join(approvers) or 'none'}){four_eyes}; "
            f"approvers run: govern approve --model-uri {bound.uri} --alias {alias} "
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
    uri = bound.uri
    for run in decision_runs(client, APPROVAL_EXPERIMENT, uri):
        decision = read_record(client, run, trusted)
        record = decision.record
        if decision.valid and record.ensemble != bound:
            decision = replace(
                decision,
                signer=None,
                problem=f"its signed record is about {record.ensemble.uri}, not {uri}",
            )
        surrogate = record.surrogate.uri if isinstance(record, SurrogateRecord) else None
        listed.append(
            {
                "run_id": run.info.run_id,
                "alias": alias_of(record),
                "decision": record.decision if isinstance(record, ALIAS_RECORDS) else None,
                "comment": record.comment if isinstance(record, ApprovalRecord) else None,
                "signed_by": decision.signer.to_json() if decision.valid else None,
                "problem": decision.problem,
                "mlflow_user": record.decided_by.mlflow_user if record is not None else None,
                "time": record.time if record is not None else None,
                "surrogate_uri": surrogate,
                "current": surrogate == surrogate_uri,
            }
        )
    return listed
