"""``govern server setup --dry-run``: the plan of a policy's roles, printed without
contacting any server (the set-up itself: tests/flavors/server/test_setup.py)."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from miret_governance.cli.app import app

pytestmark = pytest.mark.no_store

ROLES_POLICY = Path(__file__).parents[2] / "examples" / "policies" / "roles.toml"
"""The example policy with roles: what the tests set up."""


def test_dry_run_prints_the_exact_plan_and_contacts_nothing():
    result = CliRunner().invoke(
        app, ["server", "setup", "--policy", str(ROLES_POLICY), "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    rows = [
        tuple(cell.strip() for cell in line.strip("│ ").split("│"))
        for line in result.output.splitlines()
        if line.startswith("│")
    ]
    gov = [
        "governance-approvals",
        "governance-clearances",
        "governance-gates",
        "governance-links",
        "governance-verifications",
    ]
    E, M = "experiment", "registered model"
    expected = (
        [("auditor", "auditors", E, e, "READ") for e in ["credit-rf", *gov]]
        + [("auditor", "auditors", M, m, "READ") for m in ["credit-rf", "credit-rf-surrogate", "credit-rf.governed"]]
        + [("ci", "ci", E, "credit-rf", "EDIT")]
        + [("ci", "ci", E, e, "MANAGE") for e in gov]
        + [("ci", "ci", M, "credit-rf", "EDIT")]
        + [("ci", "ci", M, m, "MANAGE") for m in ["credit-rf-surrogate", "credit-rf.governed"]]
        + [("ds", "data_scientists", E, "credit-rf", "EDIT")]
        + [("ds", "data_scientists", E, e, "READ") for e in gov]
        + [("ds", "data_scientists", M, "credit-rf", "EDIT")]
        + [("ds", "data_scientists", M, m, "READ") for m in ["credit-rf-surrogate", "credit-rf.governed"]]
        + [("reviewer", "approvers", E, "credit-rf", "READ"), ("reviewer", "approvers", E, gov[0], "EDIT")]
        + [("reviewer", "approvers", E, e, "READ") for e in gov[1:4]]
        + [("reviewer", "approvers", E, gov[4], "EDIT")]
        + [("reviewer", "approvers", M, m, "READ") for m in ["credit-rf", "credit-rf-surrogate"]]
    )  # fmt: skip
    assert rows == expected
    assert "nothing changed" in result.output


def test_a_policy_without_roles_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "plain.toml"
    path.write_text("[gates]\n")
    result = CliRunner().invoke(app, ["server", "setup", "--policy", str(path), "--dry-run"])
    assert result.exit_code == 2
    assert "has no [roles] table" in result.output


def test_a_store_without_users_is_refused_with_the_fix(tmp_path):
    result = CliRunner().invoke(
        app,
        ["server", "setup", "--policy", str(ROLES_POLICY), "--tracking-uri", "sqlite:///x.db"],
    )
    assert result.exit_code == 2
    assert "has no users or permissions (no basic-auth app)" in result.output
    assert "--app-name basic-auth" in result.output
