"""``govern server setup``: make a shared MLflow server enforce the policy's roles.

Run with an MLflow admin's credentials (``MLFLOW_TRACKING_USERNAME`` /
``MLFLOW_TRACKING_PASSWORD``). It creates, owned by the admin, every experiment and
registered model the plan names that does not exist yet (the governance experiments, the
surrogate and governed registered models, and the data scientists' own when missing):
MLflow gives MANAGE to whoever creates a resource, so a resource created here is one
nobody else came to own by being first. Then it sets each user's permission on each
resource to the one :func:`governance.trust.roles.plan_grants` gives, through MLflow's
``AuthServiceClient`` (``grant_user_permission``; a data
scientist who created a governance experiment earlier is brought down to READ: MLflow
has no update of a user's grant, so an existing one is revoked and granted again).

Idempotent: a permission the server already resolves to the planned one is left alone,
so a second run changes nothing and says so. Everything that can refuse is checked
before anything changes: the server has the basic-auth app, the caller is an admin,
every user exists (users are never created here: passwords are the platform team's), and
no planned experiment is deleted. A permission that an MLflow role still decides after
the user's grant is set is named as an error. Lock models are not in the plan
(:mod:`governance.trust.roles` says why).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.store.auth import server_user
from miret_governance.flavors.store.refusals import CREDENTIALS
from miret_governance.flavors.store.registry import SURROGATE_SUFFIX
from miret_governance.flavors.trail.audit import EXPERIMENTS
from miret_governance.flavors.trail.decisions import APPROVAL_EXPERIMENT, VERIFICATION_EXPERIMENT
from miret_governance.governance.trust.policy import Policy
from miret_governance.governance.trust.roles import (
    EXPERIMENT,
    GovernanceNames,
    Grant,
    Resource,
    plan_grants,
)

CREATED_BY_SETUP = "Created by govern server setup: only the governance roles write here."
"""The description of every experiment and registered model setup creates."""


class SetupError(GovernanceError):
    """The server or the policy cannot be set up as asked; nothing was changed.

    Exit code 2.
    """


@dataclass(frozen=True)
class Applied:
    """A planned grant and what the server held before (``before == grant.permission``
    when nothing changed)."""

    grant: Grant
    before: str

    @property
    def changed(self) -> bool:
        return self.before != self.grant.permission


@dataclass(frozen=True)
class SetupReport:
    """What setup did: the resources it created and every planned grant."""

    created: tuple[Resource, ...]
    grants: tuple[Applied, ...]

    @property
    def changed(self) -> bool:
        return bool(self.created) or any(a.changed for a in self.grants)


def governance_names() -> GovernanceNames:
    """What governance writes, named where the trail defines it."""
    return GovernanceNames(
        experiments=tuple(EXPERIMENTS),
        approval_experiment=APPROVAL_EXPERIMENT,
        surrogate_suffix=SURROGATE_SUFFIX,
        verification_experiment=VERIFICATION_EXPERIMENT,
    )


def setup_plan(policy: Policy) -> tuple[Grant, ...]:
    """The grants ``policy``'s roles need (no server involved: ``--dry-run``).

    Raises
    ------
    SetupError
        The policy has no ``[roles]`` table.
    """
    if policy.roles is None:
        raise SetupError(
            f"the policy {policy.source} has no [roles] table: name the MLflow users of "
            'each role ([roles] ci = "...", data_scientists, approvers, auditors) and the '
            'governed models ([governed."<model>"] experiment = "..."), see docs/deployment.md'
        )
    return plan_grants(policy.roles, policy.governed, governance_names())


def setup_server(policy: Policy, client: MlflowClient | None = None) -> SetupReport:
    """Create the missing resources and apply the plan on the tracking server.

    Raises
    ------
    SetupError
        No ``[roles]``; a server without the basic-auth app; a caller who is not an
        admin; users the server does not know; a planned experiment that is deleted.
        Raised before anything changes.
    """
    from mlflow.server.auth.client import AuthServiceClient

    plan = setup_plan(policy)
    uri = mlflow.get_tracking_uri()
    user = server_user(uri)
    if user is None:
        raise SetupError(
            f"the tracking server {uri} has no users or permissions (no basic-auth app): "
            "start it with mlflow server --app-name basic-auth, then run setup with an "
            f"admin's {CREDENTIALS}"
        )
    if not user.is_admin:
        raise SetupError(
            f"{user.username!r} is not an MLflow admin of {uri}: run govern server setup "
            f"with an admin's {CREDENTIALS}"
        )
    client = client or MlflowClient()
    auth = AuthServiceClient(uri)
    missing = [name for name in policy.roles.users if not _user_exists(auth, name)]
    if missing:
        raise SetupError(
            f"the policy's [roles] name users {uri} does not know: {', '.join(missing)}; an "
            "MLflow admin must create them first (MLflow UI > Admin, or AuthServiceClient("
            "uri).create_user); nothing was changed"
        )
    resources = sorted({g.resource for g in plan}, key=lambda r: (r.kind, r.name))
    found = {r: _find(client, r) for r in resources}
    created = []
    for resource in resources:
        if found[resource] is None:
            found[resource] = _create(client, resource)
            created.append(resource)
    applied, overridden = [], []
    for grant in plan:
        resource_id = found[grant.resource]
        kind = grant.resource.kind
        before = auth.get_user_permission(grant.user, kind, resource_id).permission
        if before != grant.permission:
            _replace_grant(auth, grant, resource_id)
            after = auth.get_user_permission(grant.user, kind, resource_id).permission
            if after != grant.permission:
                overridden.append(f"{grant.user} has {after} on {kind} {grant.resource.name}")
        applied.append(Applied(grant, before))
    if overridden:
        raise SetupError(
            f"the plan's grants are set, but other grants still decide ({'; '.join(overridden)}, "
            "not the planned permission): an MLflow role or workspace permission gives more; "
            "an MLflow admin must remove it (MLflow UI > Admin), then run setup again"
        )
    return SetupReport(tuple(created), tuple(applied))


def _replace_grant(auth, grant: Grant, resource_id: str) -> None:
    """Set ``grant`` on the server. MLflow refuses a second grant of one user on one
    resource and has no update of a user's grant, so an existing one (a creator's MANAGE)
    is revoked first: for that moment the user has the default permission, never more."""
    kind = grant.resource.kind
    try:
        auth.grant_user_permission(grant.user, kind, resource_id, grant.permission)
    except MlflowException as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        auth.revoke_user_permission(grant.user, kind, resource_id)
        auth.grant_user_permission(grant.user, kind, resource_id, grant.permission)


def _user_exists(auth, username: str) -> bool:
    try:
        auth.get_user(username)
    except MlflowException as error:
        if error.error_code == "RESOURCE_DOES_NOT_EXIST":
            return False
        raise
    return True


def _find(client: MlflowClient, resource: Resource) -> str | None:
    """The id MLflow's permissions name ``resource`` by (an experiment's id, a registered
    model's name), or None when it does not exist."""
    if resource.kind == EXPERIMENT:
        experiment = client.get_experiment_by_name(resource.name)
        if experiment is None:
            return None
        if experiment.lifecycle_stage != "active":
            raise SetupError(
                f"experiment {resource.name!r} (id {experiment.experiment_id}) is deleted: "
                f"restore it (MlflowClient().restore_experiment('{experiment.experiment_id}')) "
                "or remove it for good, then run setup again; nothing was changed"
            )
        return experiment.experiment_id
    try:
        return client.get_registered_model(resource.name).name
    except MlflowException as error:
        if error.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise


def _create(client: MlflowClient, resource: Resource) -> str:
    if resource.kind == EXPERIMENT:
        experiment_id = client.create_experiment(resource.name)
        client.set_experiment_tag(experiment_id, "mlflow.note.content", CREATED_BY_SETUP)
        return experiment_id
    return client.create_registered_model(resource.name, description=CREATED_BY_SETUP).name
