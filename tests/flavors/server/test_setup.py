"""`govern server setup` against a real `mlflow server --app-name basic-auth`, then the
server called as each role: what each may and may not do (the table of docs/deployment.md).

One server per module (SQLite backend, proxied artifacts, ``default_permission =
NO_PERMISSIONS``, a generated admin password), started by :class:`AuthServer`; the
tests run in order on it (refusals before setup, setup, then the role table, then the
governed flow: promotion into ``credit-rf.governed``, which only CI writes, and its files
refused on load once swapped in the artifact store; the same flow without users is in
tests/flavors/trail/test_governed.py). The
fixture is small on purpose: the shared PostgreSQL stack (tests/server_stack.py) can
replace it.
"""

import secrets
from contextlib import contextmanager
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from requests.exceptions import HTTPError
from signing_keys import ci_key, keys_table
from sqlite_server import Server
from typer.testing import CliRunner

pytestmark = pytest.mark.slow

USERS = {"ds": "data_scientists", "ci": "ci", "reviewer": "approvers", "auditor": "auditors"}
ROLES_POLICY = Path(__file__).parents[3] / "examples" / "policies" / "roles.toml"
"""The example policy with roles: what the tests set up."""
POLICY = ROLES_POLICY.read_text()


class AuthServer(Server):
    """``mlflow server --app-name basic-auth`` on SQLite in ``folder`` (the faults tests'
    server, :class:`sqlite_server.Server`), users and passwords generated here."""

    def __init__(self, folder: Path, migrated_store: Path):
        self.passwords = {name: secrets.token_urlsafe(12) for name in ["admin", *USERS]}
        config = folder / "auth.ini"
        config.write_text(
            "[mlflow]\ndefault_permission = NO_PERMISSIONS\n"
            f"database_uri = sqlite:///{folder / 'auth.db'}\nadmin_username = admin\n"
            f"admin_password = {self.passwords['admin']}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
            # each request checks its password with PBKDF2 (about 0.5 s of the server's CPU);
            # cached for a minute, the governed flow is minutes faster (a deployment choice)
            "auth_cache_ttl_seconds = 60\n"
        )
        super().__init__(
            folder,
            migrated_store,
            app_name="basic-auth",
            env={
                "MLFLOW_AUTH_CONFIG_PATH": str(config),
                "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
            },
        )


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory, migrated_store):
    server = AuthServer(tmp_path_factory.mktemp("auth-server"), migrated_store)
    try:
        server.start()
        with _as(server, "admin"):
            from mlflow.server.auth.client import AuthServiceClient

            auth = AuthServiceClient(server.url)
            for name in USERS:
                auth.create_user(name, server.passwords[name])
        yield server
    finally:
        server.stop()


@contextmanager
def _as(server: AuthServer, user: str):
    """MLflow's credentials and URIs set to ``user`` on ``server`` (as the CLI reads them)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", server.url)
        mp.setenv("MLFLOW_REGISTRY_URI", server.url)
        mp.setenv("MLFLOW_TRACKING_USERNAME", user)
        mp.setenv("MLFLOW_TRACKING_PASSWORD", server.passwords[user])
        mp.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        yield MlflowClient(server.url, server.url)


def _setup(server, user: str, *args: str):
    from miret_governance.cli.app import app

    with _as(server, user):
        return CliRunner().invoke(app, ["server", "setup", *args])


def _denied(call, *args, **kwargs) -> bool:
    """Whether the server refuses ``call`` with 403 (it must not fail otherwise)."""
    try:
        call(*args, **kwargs)
    except MlflowException as error:
        if error.error_code == "PERMISSION_DENIED":
            return True
        raise
    return False


# --------------------------------------------------------------- before setup
def test_a_governance_experiment_is_not_created_on_first_use(auth_server):
    from miret_governance.flavors.trail.decisions import DecisionError, experiment_id

    refused = pytest.raises(DecisionError, match="govern server setup --policy")
    with _as(auth_server, "reviewer") as client, refused:
        experiment_id(client, "governance-approvals")
    with _as(auth_server, "admin") as client:
        assert client.get_experiment_by_name("governance-approvals") is None


def test_setup_refuses_a_user_who_is_not_admin(auth_server):
    result = _setup(auth_server, "ds", "--policy", str(ROLES_POLICY))
    assert result.exit_code == 2
    assert "'ds' is not an MLflow admin" in result.output


def test_wrong_credentials_are_one_line_naming_the_user(auth_server):
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(auth_server.passwords, "admin", "wrong")
        result = _setup(auth_server, "admin", "--policy", str(ROLES_POLICY))
    assert result.exit_code == 2
    assert "refused the credentials of user 'admin' (HTTP 401)" in result.output


def test_setup_names_missing_users_and_changes_nothing(auth_server, tmp_path):
    path = tmp_path / "ghost.toml"
    path.write_text(POLICY.replace('auditors = ["auditor"]', 'auditors = ["auditor", "ghost"]'))
    result = _setup(auth_server, "admin", "--policy", str(path))
    assert result.exit_code == 2
    assert "users" in result.output and "ghost" in result.output
    with _as(auth_server, "admin") as client:
        assert client.search_experiments(filter_string="name LIKE 'governance-%'") == []


def test_a_planted_lock_is_a_misconfiguration_not_a_promotion_to_wait_for(auth_server):
    from miret_governance.flavors.trail.promotion_lock import (
        LockMisconfiguredError,
        promotion_lock,
    )
    from miret_governance.governance.trust.signing import parse_trust

    with _as(auth_server, "ds") as client:
        client.create_registered_model("planted.promotion-lock.champion")
    trusted = parse_trust(keys_table(), None, "test")
    refused = pytest.raises(LockMisconfiguredError, match="planted.promotion-lock.champion")
    with _as(auth_server, "ci") as client, refused as e:
        promotion_lock(client, "planted", "champion", "models:/x/1", ci_key(), trusted).__enter__()
    assert "lacks MANAGE on registered model planted.promotion-lock.champion" in str(e.value)


# --------------------------------------------------------------- setup
def test_setup_applies_the_plan_then_changes_nothing(auth_server):
    with _as(auth_server, "ds") as client:  # a data scientist got there first
        client.create_experiment("governance-links")
    first = _setup(auth_server, "admin", "--policy", str(ROLES_POLICY))
    assert first.exit_code == 0, first.output
    assert "created experiment governance-gates (owner: admin)" in first.output
    assert "created experiment governance-links" not in first.output
    assert "granted (was MANAGE)" in first.output  # ds brought down to READ there
    assert "31 of 31 grants changed" in first.output
    second = _setup(auth_server, "admin", "--policy", str(ROLES_POLICY))
    assert second.exit_code == 0, second.output
    assert "nothing changed: the server already matches the plan" in second.output
    assert "granted" not in second.output and "created" not in second.output


# --------------------------------------------------------------- each role
@pytest.fixture(scope="module")
def content(auth_server):
    """What the roles act on: a data scientist's run and version, a version of the
    governed model (CI), and a CI run in each governance experiment."""
    with _as(auth_server, "ds") as ds:
        experiment = ds.get_experiment_by_name("credit-rf").experiment_id
        run = ds.create_run(experiment).info
        ds.log_text(run.run_id, "model", "model/MLmodel")
        version = ds.create_model_version("credit-rf", f"{run.artifact_uri}/model", run.run_id)
    with _as(auth_server, "ci") as ci:
        source = f"models:/credit-rf/{version.version}"
        governed = ci.create_model_version("credit-rf.governed", source)
        runs = {
            name: ci.create_run(ci.get_experiment_by_name(name).experiment_id).info.run_id
            for name in ("governance-gates", "governance-approvals")
        }
    return {"ds_run": run.run_id, "version": version.version, "governed": governed.version, **runs}


def test_a_data_scientist_works_on_their_own_and_only_reads_governance(auth_server, content):
    with _as(auth_server, "ds") as ds:
        experiment = ds.get_experiment_by_name("credit-rf").experiment_id
        assert not _denied(ds.create_run, experiment)
        assert not _denied(ds.set_registered_model_alias, "credit-rf", "dev", content["version"])
        gates = ds.get_experiment_by_name("governance-gates").experiment_id
        approvals = ds.get_experiment_by_name("governance-approvals").experiment_id
        assert not _denied(ds.search_runs, [gates, approvals])
        assert _denied(ds.create_run, approvals)
        assert _denied(ds.set_tag, content["governance-gates"], "governance.decision", "x")
        assert _denied(ds.delete_run, content["governance-approvals"])
        assert _denied(ds.rename_experiment, gates, "renamed")
        assert _denied(ds.delete_experiment, gates)
        assert _denied(
            ds.set_registered_model_alias, "credit-rf.governed", "champion", content["governed"]
        )
        assert _denied(ds.create_model_version, "credit-rf.governed", "models:/credit-rf/1")
        assert _denied(ds.create_model_version, "credit-rf-surrogate", "models:/credit-rf/1")


def test_ci_writes_governance_and_explains_in_the_data_scientists_experiment(auth_server, content):
    with _as(auth_server, "ci") as ci:
        credit = ci.get_experiment_by_name("credit-rf").experiment_id
        assert not _denied(ci.create_run, credit)
        assert not _denied(
            ci.set_model_version_tag, "credit-rf", content["version"], "governance.x", "y"
        )
        assert not _denied(
            ci.set_registered_model_alias, "credit-rf.governed", "champion", content["governed"]
        )
        assert not _denied(ci.delete_run, content["governance-gates"])
        assert _denied(ci.delete_run, content["ds_run"])


def test_an_approver_records_approvals_and_nothing_else(auth_server, content):
    with _as(auth_server, "reviewer") as reviewer:
        approvals = reviewer.get_experiment_by_name("governance-approvals").experiment_id
        gates = reviewer.get_experiment_by_name("governance-gates").experiment_id
        assert not _denied(reviewer.create_run, approvals)
        assert not _denied(reviewer.get_model_version, "credit-rf", content["version"])
        assert not _denied(reviewer.search_runs, [gates])
        assert _denied(reviewer.delete_run, content["governance-approvals"])
        assert _denied(reviewer.create_run, gates)
        assert _denied(
            reviewer.set_registered_model_alias, "credit-rf", "champion", content["version"]
        )
        assert _denied(
            reviewer.update_model_version, "credit-rf", content["version"], description="x"
        )


def test_an_auditor_reads_everything_and_writes_nothing(auth_server, content):
    with _as(auth_server, "auditor") as auditor:
        names = ["credit-rf", "governance-gates", "governance-approvals", "governance-links"]
        ids = [auditor.get_experiment_by_name(name).experiment_id for name in names]
        assert not _denied(auditor.search_runs, ids)
        assert not _denied(auditor.get_run, content["ds_run"])
        for model, version in (("credit-rf", "version"), ("credit-rf.governed", "governed")):
            assert not _denied(auditor.get_model_version, model, content[version])
        assert _denied(auditor.create_run, ids[0])
        assert _denied(auditor.create_run, ids[1])
        assert _denied(auditor.set_tag, content["ds_run"], "x", "y")
        assert _denied(
            auditor.set_registered_model_alias, "credit-rf", "champion", content["version"]
        )


# --------------------------------------------------------------- the governed flow
def test_the_governed_flow_runs_with_exactly_the_planned_permissions(
    auth_server, content, tmp_path, breast_cancer
):
    """explain and promote as CI, approve as the reviewer, audit as the auditor: the
    plan's grants are enough for the product's own calls, and a data scientist's approve
    is refused by the server."""
    from mlflow_store import register_sklearn
    from signing_keys import key_pair, keys_toml
    from sklearn.ensemble import RandomForestClassifier

    from miret_governance.cli.app import app
    from miret_governance.flavors.explain.explain import explain_model_version

    X, y = breast_cancer
    X, y = X.iloc[:200, :6], y.iloc[:200]
    X.assign(label=y).to_csv(tmp_path / "train.csv", index=False)
    forest = RandomForestClassifier(n_estimators=4, max_depth=2, random_state=0).fit(X, y)
    with _as(auth_server, "ds") as ds:
        experiment = ds.get_experiment_by_name("credit-rf").experiment_id
        register_sklearn(forest, "credit-rf", experiment_id=experiment)
        uri = (
            f"models:/credit-rf/{ds.get_registered_model('credit-rf').latest_versions[-1].version}"
        )
    policy = tmp_path / "flow.toml"
    policy.write_text(
        POLICY.replace("min_fidelity = 0.90", "min_fidelity = 0.0")
        + keys_toml(approvers=("rev",))
        + "\n[approvals]\nchampion = 1\n"
    )
    with _as(auth_server, "ci"):
        explained = explain_model_version(
            uri, tmp_path / "train.csv", target="label", solver="highs", time_limit=5,
            min_test_rows=5,
        )  # fmt: skip
    assert explained.surrogate_uri == "models:/credit-rf-surrogate/1"

    def govern(user, *args, key=None):
        with _as(auth_server, user), pytest.MonkeyPatch.context() as mp:
            if key is not None:
                mp.setenv("GOVERN_SIGNING_KEY", str(key_pair(key)[0]))
            return CliRunner().invoke(app, [*args, "--policy", str(policy)])

    approve = ["approve", "--model-uri", uri, "--alias", "champion", "--comment", "reviewed"]
    forged = govern("ds", *approve, "--decision", "approve", key="rev")
    assert forged.exit_code == 2, forged.output
    with _as(auth_server, "auditor") as auditor:
        approvals = auditor.get_experiment_by_name("governance-approvals").experiment_id
        assert len(auditor.search_runs([approvals])) == 2  # CI's and the reviewer's above
    approved = govern("reviewer", *approve, "--decision", "approve", key="rev")
    assert approved.exit_code == 0, approved.output
    promoted = govern("ci", "promote", "--model-uri", uri, "--alias", "champion")
    assert promoted.exit_code == 0, promoted.output
    assert "governed: @champion -> models:/credit-rf.governed/2" in promoted.output
    # The auditor reads the whole trail (the governed model's name audits the model it
    # governs, and its aliases); its one finding is the alias the data scientist set by
    # hand on their own model (in the role table above), as on any store.
    audited = govern("auditor", "audit", "--model-name", "credit-rf.governed")
    assert audited.exit_code == 1, audited.output
    assert "1 finding(s)" in audited.output and "@dev is on models:/credit-rf/1" in audited.output
    with _as(auth_server, "auditor") as auditor:
        assert auditor.get_model_version_by_alias("credit-rf", "champion").version == uri[-1]
        governed = auditor.get_model_version_by_alias("credit-rf.governed", "champion")
    assert governed.tags["governance.governed.from"] == uri
    _governed_is_governance_s_alone(auth_server, governed, content)
    shown = govern("auditor", "show", "--model-uri", "models:/credit-rf.governed@champion")
    assert shown.exit_code == 0, shown.output
    # files swapped where they are stored (an admin of the artifact store): refused on load
    source = governed.source.removeprefix("mlflow-artifacts:/")
    swapped = next(p for p in (auth_server.folder / "artifacts" / source).rglob("*.skops"))
    swapped.write_bytes(swapped.read_bytes() + b"0")
    refused = govern("auditor", "show", "--model-uri", "models:/credit-rf.governed@champion")
    assert refused.exit_code == 2, refused.output
    assert "were replaced after promotion" in refused.output


def _governed_is_governance_s_alone(server, governed, content) -> None:
    """A data scientist can neither move the governed alias nor write the governed
    version's files (a governance-gates run's artifacts): the server answers 403."""
    with _as(server, "ds") as ds:
        name = "credit-rf.governed"
        assert _denied(ds.set_registered_model_alias, name, "champion", content["governed"])
        assert _denied(ds.delete_registered_model_alias, name, "champion")
        assert _denied(ds.set_model_version_tag, name, governed.version, "x", "y")
        folder = server.folder / "swap"
        folder.mkdir()
        (folder / "model.skops").write_bytes(b"not the promoted forest")
        with pytest.raises(HTTPError, match="403 Client Error: Forbidden"):  # proxied upload
            ds.log_artifacts(governed.run_id, str(folder), "governed_model")
