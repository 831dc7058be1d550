"""Who may do what on a shared MLflow server: the policy's ``[roles]`` and ``[governed]``
tables, and the permission grants they imply, as typed records (no MLflow here).

A policy names four roles of MLflow users (MLflow's basic-auth users; the app has no
groups) and the registered models it governs::

    [roles]
    data_scientists = ["ds"]        # train and register the governed models
    ci = "ci"                       # the governance job: explain, gate, promote
    approvers = ["reviewer"]        # sign approvals (govern approve)
    auditors = ["auditor"]          # read everything, write nothing

    [governed."credit-rf"]          # a data scientists' registered model
    experiment = "credit-rf"        # their experiment (explain runs land next to training)
    registered_model = "credit-rf.governed"  # optional: where governance promotes into

Separation of duties is why these are checked, not merely listed: the CI identity is
never a data scientist, an approver or an auditor (it could then write what it also
decides on, or what a reviewer must sign independently); an auditor is nobody else (the
one role that must write nothing); and once the policy's ``[approvals]`` asks for
approvals, no data scientist approves (four eyes: the author never approves).

:func:`plan_grants` turns these into :class:`Grant` records (user, resource kind, name,
permission), the one plan ``govern server setup`` prints and applies
(``flavors/server/setup.py``). The permissions are MLflow's (``READ``, ``EDIT``,
``MANAGE``); what each MLflow call the product makes needs was read from MLflow's
basic-auth validators (``mlflow/server/auth/__init__.py``, ``BEFORE_REQUEST_HANDLERS``):

- creating a run, logging to it, tagging it, uploading its artifacts: ``update`` on the
  experiment (EDIT); deleting or restoring a run: ``delete`` (MANAGE only);
- registering a version, tagging a version, editing its description, setting an alias:
  ``update`` on the registered model (EDIT); deleting a version, a version's tag or the
  model: ``delete`` (MANAGE);
- reading runs, artifacts, versions and aliases: READ.

So the CI identity, which explains (runs in the data scientists' experiment, the link tag
and descriptions on their versions), needs EDIT there, and MANAGE on everything governance
writes (it ends and cleans up its own runs and versions). An approver writes one run in
the approvals experiment (EDIT there: MLflow has no "create only" level, so an approver
can also tag another approver's run; the bound parameters of every record make that a
blocking, detected change, never a forged approval) and reads the evidence; it also
writes its verification records (``govern show``, ``reproduce``, ``audit``) in the
verifications experiment (EDIT there; an auditor, who writes nothing, records none). Lock models
(``<model>.promotion-lock.<alias>``) are not granted: a lock exists only while a
promotion holds it, its creator (the CI identity) gets MANAGE from MLflow, and MLflow
drops every grant of a registered model when it is deleted, so a standing grant cannot
exist; a lock the CI identity cannot read is refused as a misconfiguration instead
(``flavors/trail/promotion_lock.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from miret_governance.governance.errors import GovernanceError

READ, EDIT, MANAGE = "READ", "EDIT", "MANAGE"
"""MLflow's permission names (``mlflow.server.auth.permissions``) the plan grants."""
PERMISSION_RANK = {READ: 1, EDIT: 2, MANAGE: 3}
"""Which permission includes which: a user in two roles gets the larger one."""
EXPERIMENT, REGISTERED_MODEL = "experiment", "registered_model"
"""Resource kinds, as MLflow's permission API names them."""
ROLE_KEYS = {
    "data_scientists": "list of MLflow user names",
    "ci": "one MLflow user name: the governance job's identity",
    "approvers": "list of MLflow user names",
    "auditors": "list of MLflow user names",
}
"""The keys of ``[roles]``, each with what it holds."""
GOVERNED_KEYS = {
    "experiment": "the data scientists' experiment of this model",
    "registered_model": "the governed registered model governance promotes into",
}
"""The keys of a ``[governed."<model>"]`` table."""
GOVERNED_SUFFIX = ".governed"
"""Default governed registered model: ``<model>.governed``."""
_USER = re.compile(r"^[^\s]{1,255}$")
_RESOURCE = re.compile(r"^[^\s/][^/]{0,254}$")


class RolesError(GovernanceError, ValueError):
    """A ``[roles]`` or ``[governed]`` table that is malformed or breaks separation of
    duties. Exit code 2."""


@dataclass(frozen=True)
class Roles:
    """The MLflow users of each role (sorted, each at most once per role)."""

    ci: str
    data_scientists: tuple[str, ...] = ()
    approvers: tuple[str, ...] = ()
    auditors: tuple[str, ...] = ()

    @property
    def users(self) -> tuple[str, ...]:
        """Every user named, sorted."""
        return tuple(sorted({self.ci, *self.data_scientists, *self.approvers, *self.auditors}))

    def to_json(self) -> dict:
        return {
            "ci": self.ci,
            "data_scientists": list(self.data_scientists),
            "approvers": list(self.approvers),
            "auditors": list(self.auditors),
        }


@dataclass(frozen=True)
class GovernedModel:
    """A data scientists' registered model under governance.

    Attributes
    ----------
    name : str
        The data scientists' registered model (the ensemble).
    experiment : str
        Their experiment, where the model is trained and explained.
    registered_model : str
        The governed registered model promotions go into (``<name>.governed`` unless
        the policy says otherwise); only governance writes it.
    """

    name: str
    experiment: str
    registered_model: str

    def to_json(self) -> dict:
        return {"experiment": self.experiment, "registered_model": self.registered_model}


@dataclass(frozen=True)
class Resource:
    """An MLflow experiment or registered model, by name."""

    kind: str
    name: str


@dataclass(frozen=True)
class Grant:
    """One permission of one user on one resource, and the role that asks for it."""

    user: str
    resource: Resource
    permission: str
    role: str


@dataclass(frozen=True)
class GovernanceNames:
    """What governance itself writes, named by the layer that writes it (``flavors``):
    the decision experiments and the suffix of surrogate registered models, and the
    experiment of verification records (None: none granted)."""

    experiments: tuple[str, ...]
    approval_experiment: str
    surrogate_suffix: str
    verification_experiment: str | None = None


def parse_roles(table, source: str) -> Roles | None:
    """``[roles]`` checked (None when the policy has none).

    Raises
    ------
    RolesError
        Unknown keys, no ``ci``, user names that are not strings, or roles that break
        separation of duties (see the module docstring).
    """
    if table is None:
        return None
    if not isinstance(table, dict):
        raise RolesError(f"{source}: [roles] must be a table; {_expected(ROLE_KEYS)}")
    unknown = sorted(set(table) - set(ROLE_KEYS))
    if unknown:
        raise RolesError(f"{source}: unknown roles {unknown} in [roles]; {_expected(ROLE_KEYS)}")
    ci = table.get("ci")
    if not isinstance(ci, str) or not _USER.match(ci):
        raise RolesError(
            f"{source}: [roles] ci = {ci!r}; name the one MLflow user the governance job "
            'runs as, e.g. ci = "ci"'
        )
    lists = {key: _users(table.get(key, []), key, source) for key in ROLE_KEYS if key != "ci"}
    roles = Roles(ci=ci, **lists)
    _separated(roles, source)
    return roles


def _users(value, key: str, source: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(u, str) and _USER.match(u) for u in value):
        raise RolesError(
            f"{source}: [roles] {key} = {value!r}; give a list of MLflow user names, e.g. "
            f'{key} = ["alice", "bob"]'
        )
    if len(set(value)) != len(value):
        raise RolesError(f"{source}: [roles] {key} names a user twice: {value!r}")
    return tuple(sorted(value))


def _separated(roles: Roles, source: str) -> None:
    """Refuse a user in two roles that separation of duties keeps apart."""
    others = {
        "data_scientists": roles.data_scientists,
        "approvers": roles.approvers,
        "auditors": roles.auditors,
    }
    for role, users in others.items():
        if roles.ci in users:
            raise RolesError(
                f"{source}: [roles] user {roles.ci!r} is both ci and in {role}: the governance "
                "job's identity must be nobody else (it writes the trail others are judged "
                "by); give the job its own MLflow user"
            )
    for role in ("data_scientists", "approvers"):
        both = sorted(set(roles.auditors) & set(others[role]))
        if both:
            raise RolesError(
                f"{source}: [roles] {', '.join(map(repr, both))} in both auditors and {role}: "
                "an auditor writes nothing; give auditors their own MLflow users"
            )


def check_approvers(roles: Roles | None, approvals: dict, source: str) -> None:
    """Four eyes: once ``[approvals]`` asks for approvals, no data scientist approves."""
    if roles is None or not approvals:
        return
    both = sorted(set(roles.data_scientists) & set(roles.approvers))
    if both:
        raise RolesError(
            f"{source}: [roles] {', '.join(map(repr, both))} in both data_scientists and "
            f"approvers, and [approvals] asks for approvals of {', '.join(sorted(approvals))}: "
            "the author of a model would approve it (four eyes). Take them out of one role"
        )


SIGNING_ROLES = {"explain": "ci", "decide": "ci", "approve": "approvers"}
"""The role whose users may be bound to a key trusted for each purpose (``users`` of
``[keys.<name>]``): the governance job explains and decides, approvers approve."""


def check_key_users(roles: Roles | None, keys, source: str) -> None:
    """Every user a ``[keys.<name>]`` table binds (``users``; ``keys`` a
    :class:`governance.trust.keyring.TrustedKeys`) holds the role that signs each of its
    purposes (:data:`SIGNING_ROLES`), when the policy has ``[roles]``."""
    if roles is None:
        return
    for key in keys.keys:
        for purpose in key.may_sign:
            role = SIGNING_ROLES[purpose]
            allowed = (roles.ci,) if role == "ci" else getattr(roles, role)
            strangers = [u for u in key.users if u not in allowed]
            if strangers:
                raise RolesError(
                    f"{source}: [keys.{key.name}] users names {', '.join(map(repr, strangers))}, "
                    f"not in [roles] {role} ({', '.join(allowed) or 'nobody'}), and the key "
                    f"may sign {purpose}: bind it to users of that role, or add them to it"
                )


def parse_governed(table, source: str) -> tuple[GovernedModel, ...]:
    """``[governed."<model>"]`` tables checked, sorted by model name.

    Raises
    ------
    RolesError
        Not a table of tables, unknown keys, a missing ``experiment``, names that are not
        MLflow names, or a governed registered model named like another resource.
    """
    if table is None:
        return ()
    if not isinstance(table, dict):
        raise RolesError(f'{source}: [governed] must hold [governed."<model>"] tables')
    models = []
    for name, entry in sorted(table.items()):
        where = f'{source}: [governed."{name}"]'
        if not _RESOURCE.match(name):
            raise RolesError(f"{where}: not a registered model name")
        if not isinstance(entry, dict):
            raise RolesError(f"{where} must be a table; {_expected(GOVERNED_KEYS)}")
        unknown = sorted(set(entry) - set(GOVERNED_KEYS))
        if unknown:
            raise RolesError(f"{where}: unknown keys {unknown}; {_expected(GOVERNED_KEYS)}")
        experiment = entry.get("experiment")
        governed = entry.get("registered_model", f"{name}{GOVERNED_SUFFIX}")
        for key, value in (("experiment", experiment), ("registered_model", governed)):
            if not isinstance(value, str) or not _RESOURCE.match(value):
                raise RolesError(
                    f"{where}: {key} = {value!r}; give {GOVERNED_KEYS[key]} by name, e.g. "
                    f'{key} = "{name if key == "experiment" else name + GOVERNED_SUFFIX}"'
                )
        if governed == name:
            raise RolesError(
                f"{where}: registered_model = {governed!r} is the data scientists' own model; "
                "governance promotes into a model only it writes, e.g. "
                f'"{name}{GOVERNED_SUFFIX}"'
            )
        models.append(GovernedModel(name, experiment, governed))
    names = [m.name for m in models] + [m.registered_model for m in models]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise RolesError(
            f"{source}: [governed] uses {', '.join(map(repr, repeated))} twice; each governed "
            "model and each registered_model must be a different registered model"
        )
    return tuple(models)


def _expected(keys: dict) -> str:
    return "expected keys: " + "; ".join(f"{key} ({what})" for key, what in keys.items())


def plan_grants(
    roles: Roles, governed: tuple[GovernedModel, ...], names: GovernanceNames
) -> tuple[Grant, ...]:
    """Every grant the roles need, one per user and resource (the largest when a user's
    roles ask for several), sorted by user, kind and name.

    Parameters
    ----------
    roles : Roles
    governed : tuple of GovernedModel
    names : GovernanceNames
        The governance experiments and the surrogate models' suffix.
    """
    own = [r for m in governed for r in (_exp(m.experiment), _model(m.name))]
    governance_models = [
        r
        for m in governed
        for r in (_model(f"{m.name}{names.surrogate_suffix}"), _model(m.registered_model))
    ]
    governance = [_exp(e) for e in names.experiments] + governance_models
    approving_reads = [_exp(e) for e in names.experiments if e != names.approval_experiment]
    approving_reads += [r for m in governed for r in (_exp(m.experiment), _model(m.name))]
    approving_reads += [_model(f"{m.name}{names.surrogate_suffix}") for m in governed]
    wanted = []
    for user in roles.data_scientists:
        wanted += [Grant(user, r, EDIT, "data_scientists") for r in own]
        wanted += [Grant(user, r, READ, "data_scientists") for r in governance]
    wanted += [Grant(roles.ci, r, EDIT, "ci") for r in own]
    wanted += [Grant(roles.ci, r, MANAGE, "ci") for r in governance]
    for user in roles.approvers:
        wanted.append(Grant(user, _exp(names.approval_experiment), EDIT, "approvers"))
        if names.verification_experiment is not None:
            wanted.append(Grant(user, _exp(names.verification_experiment), EDIT, "approvers"))
        wanted += [Grant(user, r, READ, "approvers") for r in approving_reads]
    for user in roles.auditors:
        wanted += [Grant(user, r, READ, "auditors") for r in own + governance]
    best: dict = {}
    for grant in wanted:
        key = (grant.user, grant.resource)
        held = best.get(key)
        if held is None or PERMISSION_RANK[grant.permission] > PERMISSION_RANK[held.permission]:
            best[key] = grant
    return tuple(sorted(best.values(), key=lambda g: (g.user, g.resource.kind, g.resource.name)))


def _exp(name: str) -> Resource:
    return Resource(EXPERIMENT, name)


def _model(name: str) -> Resource:
    return Resource(REGISTERED_MODEL, name)
