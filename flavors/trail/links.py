"""Signed links: which explanation of an ensemble version is the current one.

An ensemble version names its explanation in the tag ``governance.surrogate``, and
whoever can write the registry can move a tag. Every explanation of one version is
signed by the same CI key and pins the same files, so pointing the tag back at an older
one (made on friendlier data, whose evidence passes a policy the newer one fails) used
to pass every gate. Explain therefore leaves a **link record** each time it links a
surrogate, new or reused: a run of the ``governance-links`` experiment holding a record
of kind ``link`` (:mod:`flavors.decisions`: ``ensemble`` and ``surrogate`` {uri,
model_id}, ``decided_by``, ``time``) signed with the explain key. A gate follows the tag
only to the surrogate of the latest link record that a key the policy trusts for
``explain`` signed (by signed time; deleted runs and every page included), and refuses
a tag that names another (:func:`check_signed_link`); ``govern show`` and
``explain-row`` refuse to present it as the version's explanation
(:func:`check_presented`).

Reuse may rightly link an older explanation again, so "the newest surrogate wins" would
be wrong; the record of that re-link is what makes it current. A version without any
signed link record (explained before links were recorded, or only by unsigned what-if
explains) is followed by its tag, as before. Like every record, a link record is bound to its run and a
link record of the version that does not verify blocks the gates (fail closed:
:mod:`flavors.decisions`); renaming the experiment still hides one (docs/architecture.md):
the signature proves what a record says, not that none was hidden.
"""

from __future__ import annotations

from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_USER

from miret_governance.flavors.errors import GateError
from miret_governance.flavors.store.registry import (
    ENSEMBLE_URI_TAG,
    SURROGATE_TAG,
    resolve_model_version,
    version_uri,
)
from miret_governance.flavors.trail.decisions import (
    LINK_EXPERIMENT,
    SURROGATE_URI_TAG,
    Decision,
    decided_by,
    decision_runs,
    newer,
    now_utc,
    pinned,
    read_all,
    record_in_new_run,
    signed_time,
    unknown_since,
)
from miret_governance.governance.trust.keyring import TrustedKeys
from miret_governance.governance.trust.records import LinkRecord
from miret_governance.governance.trust.signers import SigningKey


def record_link(
    client: MlflowClient, ensemble_version, surrogate_version, key: SigningKey | None
) -> str | None:
    """Leave the signed record of ``ensemble_version`` linked to ``surrogate_version``;
    the record's run id (None without a key: an unsigned explain is a what-if that no
    gate believes, so its link proves nothing either)."""
    if key is None:
        return None
    record = LinkRecord(
        ensemble=pinned(ensemble_version),
        surrogate=pinned(surrogate_version),
        decided_by=decided_by(TrustedKeys(), key, client),
        time=now_utc(),
    )
    return record_in_new_run(
        client,
        LINK_EXPERIMENT,
        f"LINK {ensemble_version.name} v{ensemble_version.version} → "
        f"{surrogate_version.name} v{surrogate_version.version}",
        {
            ENSEMBLE_URI_TAG: record.ensemble.uri,
            SURROGATE_URI_TAG: record.surrogate.uri,
            MLFLOW_USER: record.decided_by.mlflow_user,
        },
        record,
        key,
    )


def latest_link(client: MlflowClient, ensemble_version, trusted: TrustedKeys) -> Decision | None:
    """The latest link record of ``ensemble_version`` that a key ``trusted`` for
    ``explain`` signed (None when there is none); a record about another version never
    counts.

    Raises
    ------
    BlockedError
        A link record of the version does not verify (fail closed:
        :func:`flavors.decisions.read_all`); overwriting the newest one must not make an
        older one current.
    GateError
        Such a record was cleared and no link was signed since: the current one is
        unknown until explain links again.
    """
    ensemble_uri = version_uri(ensemble_version)
    runs = decision_runs(client, LINK_EXPERIMENT, ensemble_uri)
    latest = None
    read = read_all(client, runs, trusted, ensemble_version.name)
    for link in read:
        if not link.valid or not isinstance(link.record, LinkRecord):
            continue
        if link.record.ensemble.uri != ensemble_uri:
            continue
        if latest is None or newer(link, latest):
            latest = link
    cleared = unknown_since(read)
    if cleared is not None and (latest is None or signed_time(latest) < cleared):
        raise GateError(
            f"a link record of {ensemble_uri} was cleared ({cleared.isoformat()}) without "
            "being readable, so which explanation is current is unknown: run govern explain "
            f"--model-uri {ensemble_uri} --data <file> with the CI key (an identical earlier "
            "explanation is reused and linked again)"
        )
    return latest


def check_signed_link(client: MlflowClient, ensemble_version, surrogate, trusted) -> None:
    """``surrogate`` (the version the tag names) is the one the latest signed link record
    of ``ensemble_version`` names.

    Raises
    ------
    GateError
        The tag names another surrogate version (or the same number of another logged
        model) than the latest signed link: it was moved by hand since.
    """
    ensemble_uri = version_uri(ensemble_version)
    latest = latest_link(client, ensemble_version, trusted)
    if latest is None:
        return
    signed = latest.record.surrogate
    if signed == pinned(surrogate):
        return
    raise GateError(
        f"{ensemble_uri} is tagged governance.surrogate = {version_uri(surrogate)}, but the "
        f"latest link that explain signed (run {latest.run_id}, {latest.record.time}) "
        f"is to {signed.uri}: the tag was changed since by something other than an "
        "explain with a trusted key (by hand, or by the recovery of a killed explain), so "
        "the gates do not follow it; to make an explanation current, run govern explain "
        "--model-uri "
        f"{ensemble_uri} --data <file> with the CI key (an identical earlier explanation "
        "is reused and linked again)"
    )


def check_presented(client: MlflowClient, model_uri: str, ensemble_version, trusted) -> None:
    """:func:`check_signed_link` when ``model_uri`` names the ensemble version, whose link
    ``govern show`` and ``explain-row`` followed to present its current explanation (a
    surrogate named by its own URI is shown as what it is)."""
    named = resolve_model_version(client, model_uri)
    if version_uri(named) == version_uri(ensemble_version):
        linked = resolve_model_version(client, ensemble_version.tags[SURROGATE_TAG])
        check_signed_link(client, ensemble_version, linked, trusted)
