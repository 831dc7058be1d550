"""The policy's [roles] and [governed] tables and the grants they imply (no MLflow)."""

import pytest

from miret_governance.governance.trust.policy import PolicyError, load_policy, parse_policy
from miret_governance.governance.trust.roles import (
    EXPERIMENT,
    REGISTERED_MODEL,
    GovernanceNames,
    GovernedModel,
    Grant,
    Resource,
    Roles,
    plan_grants,
)

pytestmark = pytest.mark.no_store

NAMES = GovernanceNames(
    experiments=("g-approvals", "g-gates"),
    approval_experiment="g-approvals",
    surrogate_suffix="-surrogate",
)
ROLES = {"data_scientists": ["ds"], "ci": "ci", "approvers": ["rev"], "auditors": ["aud"]}
GOVERNED = {"credit-rf": {"experiment": "credit"}}


def _policy(**tables):
    return parse_policy({"gates": {}, **tables}, source="p.toml")


def test_roles_and_governed_parse_with_defaults():
    policy = _policy(roles=ROLES, governed=GOVERNED)
    assert policy.roles == Roles(
        ci="ci", data_scientists=("ds",), approvers=("rev",), auditors=("aud",)
    )
    assert policy.governed == (GovernedModel("credit-rf", "credit", "credit-rf.governed"),)


def test_digest_unchanged_without_roles_and_covers_them_when_present():
    plain = _policy()
    assert plain.digest == parse_policy({"gates": {}}, source="other").digest
    with_roles = _policy(roles=ROLES)
    with_governed = _policy(roles=ROLES, governed=GOVERNED)
    renamed = _policy(roles=ROLES, governed={"credit-rf": {"experiment": "other"}})
    digests = {plain.digest, with_roles.digest, with_governed.digest, renamed.digest}
    assert len(digests) == 4


def test_example_policies_keep_their_digests():
    """Digests of the shipped policies before [roles] existed."""
    from pathlib import Path

    examples = Path(__file__).parents[3] / "examples" / "policies"
    assert load_policy(examples / "strict.toml").digest.startswith("433edc70")
    assert load_policy(examples / "drift.toml").digest.startswith("1390f2ee")


@pytest.mark.parametrize(
    ("roles", "message"),
    [
        ({"ci": "ci", "reviewers": ["x"]}, "unknown roles ['reviewers']"),
        ({"data_scientists": ["ds"]}, "ci = None"),
        ({"ci": "ci", "data_scientists": "ds"}, "give a list of MLflow user names"),
        ({"ci": "ci", "approvers": ["a", "a"]}, "names a user twice"),
        ({"ci": "ci", "data_scientists": ["ci"]}, "both ci and in data_scientists"),
        ({"ci": "ci", "approvers": ["ci"]}, "both ci and in approvers"),
        ({"ci": "ci", "auditors": ["ci"]}, "both ci and in auditors"),
        ({"ci": "ci", "auditors": ["a"], "approvers": ["a"]}, "both auditors and approvers"),
        ({"ci": "ci", "auditors": ["a"], "data_scientists": ["a"]}, "auditor writes nothing"),
        ({"ci": "c i"}, "name the one MLflow user"),
    ],
)
def test_bad_roles_are_refused_with_the_fix(roles, message):
    with pytest.raises(PolicyError, match="p.toml: .*" + message.replace("[", r"\[")):
        _policy(roles=roles)


def test_a_data_scientist_approver_is_refused_only_where_approvals_are_required(tmp_path):
    roles = {"ci": "ci", "data_scientists": ["ann"], "approvers": ["ann"]}
    assert _policy(roles=roles).roles.approvers == ("ann",)
    from signing_keys import keys_toml

    toml = (
        keys_toml(approvers=("rev",)) + '\n[approvals]\nchampion = 1\n[gates]\n[roles]\nci = "ci"\n'
    )
    toml += 'data_scientists = ["ann"]\napprovers = ["ann"]\n'
    (tmp_path / "p.toml").write_text(toml)
    with pytest.raises(PolicyError, match="four eyes"):
        load_policy(tmp_path / "p.toml")


@pytest.mark.parametrize(
    ("governed", "message"),
    [
        ({"m": {}}, "experiment = None"),
        ({"m": {"experiment": "e", "owner": "x"}}, "unknown keys \\['owner'\\]"),
        ({"m": {"experiment": "e", "registered_model": "m"}}, "the data scientists' own model"),
        ({"m": "e"}, "must be a table"),
        ({"a": {"experiment": "e", "registered_model": "b"}, "b": {"experiment": "e"}}, "twice"),
    ],
)
def test_bad_governed_tables_are_refused(governed, message):
    with pytest.raises(PolicyError, match=message):
        _policy(governed=governed)


def test_unknown_top_level_key_names_roles_and_governed():
    with pytest.raises(PolicyError, match=r"\[roles\] and \[governed"):
        _policy(role={})


def _grant(user, kind, name, permission, role):
    return Grant(user, Resource(kind, name), permission, role)


def test_plan_is_exactly_the_grants_of_each_role():
    policy = _policy(roles=ROLES, governed=GOVERNED)
    plan = plan_grants(policy.roles, policy.governed, NAMES)
    E, M = EXPERIMENT, REGISTERED_MODEL
    assert plan == (
        _grant("aud", E, "credit", "READ", "auditors"),
        _grant("aud", E, "g-approvals", "READ", "auditors"),
        _grant("aud", E, "g-gates", "READ", "auditors"),
        _grant("aud", M, "credit-rf", "READ", "auditors"),
        _grant("aud", M, "credit-rf-surrogate", "READ", "auditors"),
        _grant("aud", M, "credit-rf.governed", "READ", "auditors"),
        _grant("ci", E, "credit", "EDIT", "ci"),
        _grant("ci", E, "g-approvals", "MANAGE", "ci"),
        _grant("ci", E, "g-gates", "MANAGE", "ci"),
        _grant("ci", M, "credit-rf", "EDIT", "ci"),
        _grant("ci", M, "credit-rf-surrogate", "MANAGE", "ci"),
        _grant("ci", M, "credit-rf.governed", "MANAGE", "ci"),
        _grant("ds", E, "credit", "EDIT", "data_scientists"),
        _grant("ds", E, "g-approvals", "READ", "data_scientists"),
        _grant("ds", E, "g-gates", "READ", "data_scientists"),
        _grant("ds", M, "credit-rf", "EDIT", "data_scientists"),
        _grant("ds", M, "credit-rf-surrogate", "READ", "data_scientists"),
        _grant("ds", M, "credit-rf.governed", "READ", "data_scientists"),
        _grant("rev", E, "credit", "READ", "approvers"),
        _grant("rev", E, "g-approvals", "EDIT", "approvers"),
        _grant("rev", E, "g-gates", "READ", "approvers"),
        _grant("rev", M, "credit-rf", "READ", "approvers"),
        _grant("rev", M, "credit-rf-surrogate", "READ", "approvers"),
    )


def test_a_user_in_two_roles_gets_the_larger_permission_once():
    roles = Roles(ci="ci", data_scientists=("ann",), approvers=("ann",))
    model = GovernedModel("m", "e", "m.governed")
    plan = plan_grants(roles, (model,), NAMES)
    ann = {(g.resource.kind, g.resource.name): g.permission for g in plan if g.user == "ann"}
    assert ann == {
        (EXPERIMENT, "e"): "EDIT",
        (EXPERIMENT, "g-approvals"): "EDIT",
        (EXPERIMENT, "g-gates"): "READ",
        (REGISTERED_MODEL, "m"): "EDIT",
        (REGISTERED_MODEL, "m-surrogate"): "READ",
        (REGISTERED_MODEL, "m.governed"): "READ",
    }
    assert len(plan) == len({(g.user, g.resource) for g in plan})


def _keys(**users):
    """``[keys.*]``: ci (explain, decide) and rev (approve), each bound to ``users``."""
    from signing_keys import key_pair

    purposes = {"ci": ["explain", "decide"], "rev": ["approve"]}
    return {
        name: {"public_key": str(key_pair(f"roles-{name}")[1]), "may_sign": purposes[name]}
        | ({"users": users[name]} if name in users else {})
        for name in purposes
    }


def test_a_key_binds_the_users_who_may_sign_with_it():
    bound = _policy(keys=_keys(rev=["rev"]), roles=ROLES)
    ci, rev = bound.keys.keys
    assert (rev.name, rev.users, ci.users) == ("rev", ("rev",), ())
    assert rev.allows("rev") and not rev.allows("ds") and not rev.allows(None)
    assert ci.allows("ds") and ci.allows(None)  # bound to nobody: whoever holds it


def test_the_digest_covers_a_binding_only_where_there_is_one():
    unbound = _policy(keys=_keys())
    assert unbound.keys.to_json() == {
        name: {"fingerprint": k.fingerprint, "may_sign": sorted(k.may_sign)}
        for name, k in zip(("ci", "rev"), unbound.keys.keys, strict=True)
    }
    rev, other = _policy(keys=_keys(rev=["rev"])), _policy(keys=_keys(rev=["aud"]))
    assert len({unbound.digest, rev.digest, other.digest}) == 3


@pytest.mark.parametrize(
    ("users", "message"),
    [
        ({"rev": ["ds"]}, r"\[keys.rev\] users names 'ds', not in \[roles\] approvers \(rev\)"),
        ({"ci": ["rev"]}, r"\[keys.ci\] users names 'rev', not in \[roles\] ci \(ci\), .* explain"),
        ({"rev": ["nobody", "rev"]}, r"\[keys.rev\] users names 'nobody', not in"),
    ],
)
def test_a_bound_user_must_hold_the_role_that_signs_the_keys_purpose(users, message):
    with pytest.raises(PolicyError, match="p.toml: " + message):
        _policy(keys=_keys(**users), roles=ROLES)
    assert _policy(keys=_keys(**users)).keys  # without [roles], any user may be bound


@pytest.mark.parametrize("users", [[], "rev", ["a b"], ["rev", "rev"], [7]])
def test_bad_key_users_are_refused_with_the_fix(users):
    with pytest.raises(PolicyError, match=r'\[keys.rev\]: users = .*e.g. users = \["reviewer"\]'):
        _policy(keys=_keys(rev=users))
