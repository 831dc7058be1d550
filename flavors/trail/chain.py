"""The record chain of a registered model, verified end to end (``govern audit``).

Every record a key signed names its place in its model's chain (``chain`` {model,
count, previous}, bound to its run as parameters: :mod:`flavors.trail.decisions`). The
audit finds every run bound to a version of the model in **every** experiment of the
store, deleted experiments and runs included (one search of the experiments and one of
their runs by the bound parameter, every page), and checks that each count from 1 to
the highest is there once and names the digest of the one before. It reports, by count
and run:

- a **gap**: counts no run holds any more, between the runs of the counts around it.
  Its run was removed from the store's database (garbage-collected after a deletion, or
  deleted by hand): a record withheld. A writer killed while it wrote leaves no gap: its
  run keeps the bound count and digest, and only its record file is missing (the
  decision record check reads it as never written, its writer having stopped first);
- a **fork**: two runs holding one count (a lock bypassed, or a run forged by hand);
- a **broken link**: a record whose ``previous`` is not the digest bound to the run of
  the count before;
- a record **outside the governance experiments** (an experiment renamed away, or a run
  moved): hidden from every decider, which reads only those experiments;
- a signed record **without a link after the chain began** (a writer that does not
  chain: an older version of govern, or a forgery; a verification record never is).
  Signed records from before the chain began (the model's first chained record) are
  outside it, as before.

**Fail closed.** ``promote`` refuses while the chain of its model has a break at a count
(a gap, a fork, a broken link, a chained record outside the governance experiments:
:func:`check_chain`), as it refuses while a record does not verify: it may be a
rejection someone hid. A key trusted for ``decide`` sets the breaks aside, up to the
chain's head as it is then, with a signed clearance (``govern clear --chain``:
:func:`clear_chain`; the audit lists them as cleared). Gates and approvals do not check
the chain: they move no alias, and each such check costs a search of every experiment.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlflow import MlflowClient
from mlflow.entities import LifecycleStage
from mlflow.utils.mlflow_tags import MLFLOW_USER

from miret_governance.flavors.store.reads import search_all_experiments
from miret_governance.flavors.store.registry import ENSEMBLE_URI_TAG, quoted, version_uri
from miret_governance.flavors.trail.decisions import (
    ALIAS_PARAM,
    CHAIN_COUNT_PARAM,
    CHAIN_MODEL_PARAM,
    CHAIN_PREVIOUS_PARAM,
    CHAIN_START,
    CLEARANCE_EXPERIMENT,
    DECISION_PARAM,
    DIGEST_PARAM,
    GOVERNANCE_EXPERIMENTS,
    KIND_PARAM,
    SIGNATURE_PARAM,
    UNSIGNED_DIGEST,
    URI_PARAM,
    BlockedError,
    DecisionError,
    chain_count,
    chain_head,
    clearance_runs,
    clearing,
    now_utc,
    pinned,
    policy_ref,
    read_record,
    record_in_new_run,
    search_all_runs,
    signed_time,
)
from miret_governance.governance.trust.records import RECORDS, ClearanceRecord


@dataclass(frozen=True)
class ChainProblem:
    """One break of a model's record chain.

    Attributes
    ----------
    version : str
        The ensemble version the record concerned is about (``models:/<name>/<v>``; the
        model's ``?`` for a gap).
    message : str
    run_id : str or None
        The run concerned (None for a gap: no run holds it).
    count : int or None
        The first count of the chain it breaks (None: a record outside the chain).
    """

    version: str
    message: str
    run_id: str | None = None
    count: int | None = None


def _what(run) -> str:
    """A record's run as the findings name it: its kind, decision and alias, and run."""
    params = run.data.params
    about = " ".join(
        part
        for part in (
            params.get(DECISION_PARAM),
            f"@{params[ALIAS_PARAM]}" if params.get(ALIAS_PARAM) else None,
        )
        if part
    )
    kind = params.get(KIND_PARAM, "decision")
    return f"the {kind} record{f' ({about})' if about else ''} of run {run.info.run_id}"


def chain_problems(client: MlflowClient, model_name: str) -> list:
    """The :class:`ChainProblem` of ``model_name``'s record chain (module docstring)."""
    prefix = f"models:/{model_name}/"
    experiments = {e.experiment_id: e for e in search_all_experiments(client)}
    runs = [
        run
        for run in search_all_runs(
            client, list(experiments), f"params.`{URI_PARAM}` LIKE {quoted(prefix + '%')}"
        )
        if run.data.params.get(URI_PARAM, "").startswith(prefix)  # LIKE's _ is any one
    ]
    problems = []
    for run in runs:
        experiment = experiments[run.info.experiment_id]
        if experiment.name not in GOVERNANCE_EXPERIMENTS:
            deleted = " (deleted)" if experiment.lifecycle_stage == LifecycleStage.DELETED else ""
            problems.append(
                ChainProblem(
                    run.data.params[URI_PARAM],
                    f"{_what(run)} is in experiment {experiment.name!r}{deleted} (id "
                    f"{experiment.experiment_id}), not in a governance experiment: renamed or "
                    "moved away, it is hidden from promote, the gates and the approvals; "
                    "restore the experiment's name",
                    run.info.run_id,
                    chain_count(run.data.params)
                    if run.data.params.get(CHAIN_MODEL_PARAM) == model_name
                    else None,
                )
            )
    chained: dict = {}
    for run in runs:
        if run.data.params.get(CHAIN_MODEL_PARAM) == model_name and chain_count(run.data.params):
            chained.setdefault(chain_count(run.data.params), []).append(run)
    if not chained:
        return problems
    problems += _forks(chained, prefix) + _gaps(chained, prefix) + _links(chained)
    began = min(run.info.start_time or 0 for run in chained.get(1, [])) if 1 in chained else None
    for run in runs:
        params = run.data.params
        if (
            began is not None
            and CHAIN_COUNT_PARAM not in params
            and params.get(DIGEST_PARAM)
            and params.get(SIGNATURE_PARAM, UNSIGNED_DIGEST) != UNSIGNED_DIGEST
            and getattr(RECORDS.get(params.get(KIND_PARAM)), "chained", True)
            and (run.info.start_time or 0) > began
        ):
            problems.append(
                ChainProblem(
                    params[URI_PARAM],
                    f"{_what(run)} is signed but has no place in the record chain of "
                    f"{model_name}, which began before it (run "
                    f"{chained[1][0].info.run_id}): written by a version of govern that does "
                    "not chain, or by hand",
                    run.info.run_id,
                )
            )
    return problems


def _forks(chained: dict, prefix: str) -> list:
    return [
        ChainProblem(
            runs[0].data.params[URI_PARAM],
            f"record {count} of the chain of {prefix[len('models:/') : -1]} is held by "
            f"{len(runs)} runs ({', '.join(r.info.run_id for r in runs)}): a fork (two "
            "writers took one count past the chain lock, or a run was forged)",
            runs[0].info.run_id,
            count,
        )
        for count, runs in sorted(chained.items())
        if len(runs) > 1
    ]


def _gaps(chained: dict, prefix: str) -> list:
    """Each run of counts from 1 to the highest that no run holds (by the counts held:
    a forged count of billions is one gap, not billions)."""
    problems, last = [], 0
    for count in sorted(chained):
        if count > last + 1:
            first, final = last + 1, count - 1
            before = chained[last][0] if last else None
            after = chained[count][0]
            one = first == final
            which = f"record {first}" if one else f"records {first} to {final}"
            since = f"run {before.info.run_id} (record {last})" if before else "the chain's start"
            problems.append(
                ChainProblem(
                    f"{prefix}?",
                    f"{which} of the chain of {prefix[len('models:/') : -1]} "
                    f"{'is' if one else 'are'} missing between {since} and run "
                    f"{after.info.run_id} (record {count}): no run of any experiment, "
                    "deleted ones included, is bound to "
                    f"{'it' if one else 'them'}, so it was removed from the store's "
                    "database (withheld, or garbage-collected after a deletion); a writer "
                    "killed while it wrote keeps its run and count and leaves no gap",
                    count=first,
                )
            )
        last = count
    return problems


def _links(chained: dict) -> list:
    """Each record whose ``previous`` is not the digest of the one before it."""
    problems = []
    for count, runs in sorted(chained.items()):
        if len(runs) > 1 or (count > 1 and len(chained.get(count - 1, ())) != 1):
            continue  # a fork or a gap is reported as such
        run, params = runs[0], runs[0].data.params
        expected = chained[count - 1][0].data.params.get(DIGEST_PARAM) if count > 1 else None
        if params.get(CHAIN_PREVIOUS_PARAM) != (expected or CHAIN_START):
            after = f"record {count - 1}'s ({expected[:16]})" if expected else "none (the first)"
            problems.append(
                ChainProblem(
                    params[URI_PARAM],
                    f"{_what(run)} (record {count}) names previous "
                    f"{str(params.get(CHAIN_PREVIOUS_PARAM))[:16]}, not {after}: the chain "
                    "is broken there",
                    run.info.run_id,
                    count,
                )
            )
    return problems


def chain_clearances(client: MlflowClient, model_name: str, trusted) -> list:
    """The valid signed clearances of ``model_name``'s chain breaks (``chain_through``
    set), as :class:`flavors.trail.decisions.Decision`, latest signed last."""
    cleared = [
        decision
        for decision in (
            read_record(client, r, trusted) for r in clearance_runs(client, model_name)
        )
        if decision.valid
        and isinstance(decision.record, ClearanceRecord)
        and decision.record.chain_through is not None
    ]
    return sorted(cleared, key=signed_time)


def cleared_through(clearances: list) -> int:
    """The highest count up to which ``clearances`` set the chain's breaks aside."""
    return max((d.record.chain_through for d in clearances), default=0)


def check_chain(client: MlflowClient, model_name: str, trusted) -> None:
    """Refuse a promotion of ``model_name`` while its record chain has a break at a count
    no valid clearance covers (module docstring).

    Raises
    ------
    BlockedError
        Names the first break and how to clear it.
    """
    breaks = [p for p in chain_problems(client, model_name) if p.count is not None]
    if not breaks:
        return
    through = cleared_through(chain_clearances(client, model_name, trusted))
    standing = [p for p in breaks if p.count > through]
    if standing:
        raise BlockedError(
            f"refused (fail closed): {standing[0].message}; a break of the record chain of "
            f"{model_name} may be a decision someone hid, so nothing is promoted until it "
            "is restored or a key the policy trusts for decide clears it: govern clear "
            "--model-uri <the version being decided> --chain --reason <why> (the audit "
            "lists the clearance)"
        )


def clear_chain(model_uri: str, reason: str, policy, signing_key, client=None) -> tuple:
    """Record a signed clearance of every break of the record chain of ``model_uri``'s
    model, up to its head now (``chain_through``).

    Returns
    -------
    (str, list of ChainProblem)
        The clearance run's id and the breaks it set aside.

    Raises
    ------
    DecisionError
        No reason, no signing key, or no break to clear (nothing recorded).
    governance.trust.keyring.SignatureError
        A key the policy does not trust for ``decide``.
    """
    key, client, by, version = clearing(model_uri, reason, policy, signing_key, client)
    through = cleared_through(chain_clearances(client, version.name, policy.keys))
    breaks = [
        p for p in chain_problems(client, version.name) if p.count is not None and p.count > through
    ]
    if not breaks:
        raise DecisionError(
            f"the record chain of {version.name} has no break to clear; nothing was recorded"
        )
    head = chain_head(client, version.name)
    record = ClearanceRecord(
        ensemble=pinned(version),
        policy=policy_ref(policy),
        cleared=(),
        reason=reason.strip(),
        chain_through=max([chain_count(head.data.params)] + [p.count for p in breaks]),
        decided_by=by,
        time=now_utc(),
    )
    run_id = record_in_new_run(
        client,
        CLEARANCE_EXPERIMENT,
        f"CLEAR the record chain of {version.name} through {record.chain_through}",
        {ENSEMBLE_URI_TAG: version_uri(version), MLFLOW_USER: by.mlflow_user},
        record,
        key,
        policy.keys,
    )
    return run_id, breaks
