"""No silent supersede: an explain that would link a new surrogate to an ensemble version
whose linked evidence carries a promotion or an approval says so before it starts.

Linking a new surrogate (``govern explain --force``, a request that differs from the
current explanation's, or an earlier surrogate reused) makes every decision on the
evidence linked until then stop counting: the aliases it put on the version need a new
gate and promotion, the approvals must be given again. :func:`check_supersede` finds what
would stop counting, before any run or version is created, and refuses
(:class:`SupersedeError`, exit 2) unless the caller passed ``supersede``; then the explain
run and the new surrogate version carry :data:`SUPERSEDED_TAG` and both version pages say
what was superseded (:func:`page_line`).

What counts is what the audit and promote count: records read by
:func:`flavors.trail.decisions.read_all` with the trusted keys (a record of the version
that does not verify refuses the explain, as it refuses promote, until it is restored or
cleared: it may be a promotion someone hid), valid, about this
ensemble version (URI and model id) and naming the linked surrogate. A promotion counts
for an alias the version holds (and for the governed model's alias on the governed
version the record names, :mod:`flavors.trail.governed`); an approval counts when its
key's latest decision on this version and alias, on that surrogate, approves. Run tags
and parameters only say which records to read.

The keys are those of the policy given (``govern explain --policy``, the pipeline's),
else of the ``GOVERN_POLICY`` file (:func:`flavors.trust.trusted_keys`); with neither,
this explain's own signing key for decisions and approvals (what a job believes of its
own signatures: the CI job that explains and promotes with one key, ``make demo``). With no
key either nothing verifies and nothing is refused: such an explanation is unsigned and
passes no gate. The check costs one search of the version's gate and approval runs (an
experiment lookup and two searches) and one read of two small files per promotion or
approval of the version: on ``make demo``'s store about 0.1 s (22 ms of CPU).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.store.registry import (
    SURROGATE_TAG,
    markdown_literal,
    parse_registry_uri,
    version_link,
    version_uri,
)
from miret_governance.flavors.trail.decisions import (
    APPROVAL_EXPERIMENT,
    DECISION_PARAM,
    GATE_EXPERIMENT,
    KIND_PARAM,
    decision_runs_in,
    latest_approvals,
    pinned,
    read_all,
)
from miret_governance.flavors.trust import OWN_KEY_NAME, default_policy_path, trusted_keys
from miret_governance.governance.trust.keyring import TrustedKeys
from miret_governance.governance.trust.records import PromotionRecord

SUPERSEDED_TAG = "governance.superseded"
"""On an explain run that superseded decisions, and on the surrogate version it
registered: a JSON list, the surrogate linked before, then what stopped counting."""


class SupersedeError(GovernanceError):
    """An explain would make promotions or approvals stop counting, and ``supersede``
    was not given; nothing was written. Exit code 2."""


@dataclass(frozen=True)
class Superseded:
    """What stops counting when a new surrogate is linked.

    Attributes
    ----------
    surrogate_uri : str
        The surrogate linked until now.
    aliases : tuple of str
        ``@<alias>`` of the ensemble's registered model held under a valid promotion on
        its evidence, and ``<governed>@<alias>`` of the governed registered model.
    approvals : tuple of str
        ``@<alias> by <approver key>``: approvals of that evidence that count.
    """

    surrogate_uri: str
    aliases: tuple = ()
    approvals: tuple = ()

    def carried(self) -> list[str]:
        """The aliases, then the approvals' count (``["@champion", "1 approval"]``)."""
        count = len(self.approvals)
        return [*self.aliases] + ([f"{count} approval{'s' if count != 1 else ''}"] if count else [])

    def words(self) -> str:
        """What stopped counting, in one phrase, the approvers named."""
        items = list(self.aliases)
        if self.approvals:
            items.append(f"{self.carried()[-1]} ({', '.join(self.approvals)})")
        return ", ".join(items)

    def next_steps(self, ensemble_uri: str) -> str:
        """What to do after superseding: promote each alias again, approve again."""
        steps = []
        aliases = sorted({a.split("@", 1)[1] for a in self.aliases})
        if aliases:
            which = ", ".join(f"@{a}" for a in aliases)
            one = len(aliases) == 1
            steps.append(
                f"{which} {'needs' if one else 'need'} a new gate and promotion: govern "
                f"promote --model-uri {ensemble_uri} --alias {aliases[0] if one else '<each>'}"
            )
        if self.approvals:
            steps.append("the approvers must approve the new evidence")
        return ", and ".join(steps)

    def sentence(self, ensemble_uri: str) -> str:
        """What an explain that superseded them says."""
        return (
            f"Superseded {self.surrogate_uri}, which carried {self.words()}: those decisions "
            f"no longer count; {self.next_steps(ensemble_uri)}."
        )

    def tag(self) -> str:
        """The value of :data:`SUPERSEDED_TAG`."""
        return json.dumps([self.surrogate_uri, *self.carried()])


def own_trust(key) -> TrustedKeys:
    """Trust in the public half of this explain's ``key`` for decisions and approvals."""
    return key.trusted_for(("decide", "approve"), OWN_KEY_NAME)


def supersede_trust(policy, key) -> TrustedKeys:
    """The keys the check verifies records with (module docstring).

    Raises
    ------
    governance.trust.policy.PolicyError, governance.trust.keyring.SignatureError
        The policy file cannot be read or its signature does not verify.
    """
    if policy is not None or default_policy_path() is not None:
        return trusted_keys(policy)
    return own_trust(key) if key is not None else TrustedKeys()


def _governed_alias(client: MlflowClient, record: PromotionRecord) -> str | None:
    """``<governed>@<alias>`` when the governed version the record names holds the alias."""
    if record.governed is None:
        return None
    name, number, _ = parse_registry_uri(record.governed.uri)
    try:
        holder = client.get_model_version_by_alias(name, record.alias).version
    except MlflowException:
        return None
    return f"{name}@{record.alias}" if str(holder) == str(number) else None


def superseded_by_link(client: MlflowClient, version, trusted: TrustedKeys) -> Superseded | None:
    """What linking another surrogate to ``version`` (a ModelVersion, its tags and
    aliases as read now) would make stop counting (None: nothing)."""
    current = (version.tags or {}).get(SURROGATE_TAG)
    if not current:
        return None
    held = set(version.aliases or ())
    bound = pinned(version)
    runs = decision_runs_in(client, (GATE_EXPERIMENT, APPROVAL_EXPERIMENT), bound.uri)
    promotions = [
        run
        for run in runs[GATE_EXPERIMENT]
        if run.data.params.get(KIND_PARAM) == "promotion"
        and run.data.params.get(DECISION_PARAM) == "promoted"
    ]
    aliases = []
    for decision in read_all(client, promotions, trusted, version.name):
        record = decision.record
        if not (
            decision.valid
            and isinstance(record, PromotionRecord)
            and record.decision == "promoted"
            and record.ensemble == bound
            and record.surrogate.uri == current
        ):
            continue
        if record.alias in held:
            aliases.append(f"@{record.alias}")
        governed = _governed_alias(client, record)
        if governed is not None:
            aliases.append(governed)
    read = read_all(client, runs[APPROVAL_EXPERIMENT], trusted, version.name)
    approvals = [
        f"@{alias} by {signer}"
        for (alias, signer), d in sorted(latest_approvals(read, bound).items())
        if alias and d.record.decision == "approve" and d.record.surrogate.uri == current
    ]
    if not aliases and not approvals:
        return None
    return Superseded(current, tuple(dict.fromkeys(aliases)), tuple(approvals))


def check_supersede(
    client: MlflowClient, version, trusted: TrustedKeys, allowed: bool, forced: bool
) -> Superseded | None:
    """What linking a new surrogate to ``version`` supersedes, refused unless ``allowed``.

    Parameters
    ----------
    allowed : bool
        ``--supersede``: go on and return what stops counting.
    forced : bool
        ``--force`` (the refusal's advice: drop it to reuse the current explanation).

    Raises
    ------
    SupersedeError
        Something would stop counting and ``allowed`` is False.
    """
    found = superseded_by_link(client, version, trusted)
    if found is None or allowed:
        return found
    uri = version_uri(version)
    why = (
        "--force would link a new surrogate"
        if forced
        else "this request differs from the current explanation's, so it would link another "
        "surrogate"
    )
    reuse = (
        "drop --force to reuse the current explanation"
        if forced
        else "explain with the current explanation's data and parameters to reuse it"
    )
    raise SupersedeError(
        f"refused: {uri} is explained by {found.surrogate_uri}, whose evidence carries "
        f"{found.words()}; {why} and they would stop counting; {reuse}, or pass --supersede "
        f"to explain anyway (then {found.next_steps(uri)}); nothing was written"
    )


def page_line(surrogate_version) -> str:
    """The version pages' line when ``surrogate_version`` superseded decisions ("" when
    it did not): which surrogate version, and what it carried."""
    value = (surrogate_version.tags or {}).get(SUPERSEDED_TAG)
    try:
        previous, *carried = json.loads(value) if value else [None]
        name, number, _ = parse_registry_uri(previous)
    except (GovernanceError, TypeError, ValueError):
        return ""
    return (
        f"**Supersedes** surrogate version {version_link(name, number)}, which carried "
        f"{', '.join(markdown_literal(c) for c in carried)}: those decisions do not count for "
        "this evidence.\n\n"
    )
