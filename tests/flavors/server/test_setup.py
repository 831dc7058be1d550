"""The governed deployment on PostgreSQL: `govern server setup` against a real `mlflow
server --app-name basic-auth`, the server called as each role (the table of
docs/deployment.md), the governed flow end to end, the insider matrix and concurrent
promotions.

One stack per module (``examples/server/stack.py``, what ``make server`` starts:
PostgreSQL, proxied artifacts, ``default_permission = NO_PERMISSIONS``, a generated admin
password), with the users of the example roles policy. The tests run in order on it:
refusals before setup, setup, the role table, the governed flow (explain as CI, approve
as the reviewer, promote into ``credit-rf.governed``, which only CI writes, audit as the
auditor; the same flow without users is in tests/flavors/trail/test_governed.py), then,
on what the flow left, each insider attack of :data:`ATTACKS` as the data scientist
(docs/deployment.md, Insiders, holds the same table), explain's and CI's cleanup, and
:data:`RACERS` concurrent promotions (``examples/benchmarks/concurrent_promotion.py``
races 8 processes 20 times). Its own stack, not the session's shared one (``tests/server_stack.py``): setup
creates the governance experiments as it finds them.
"""

from contextlib import contextmanager
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from processes import free_port  # noqa: F401 - puts examples/server on sys.path
from requests.exceptions import HTTPError
from stack import Stack
from typer.testing import CliRunner

pytestmark = pytest.mark.slow

USERS = {"ds": "data_scientists", "ci": "ci", "reviewer": "approvers", "auditor": "auditors"}
ROLES_POLICY = Path(__file__).parents[3] / "examples" / "policies" / "roles.toml"
"""The example policy with roles: what the tests set up."""
POLICY = ROLES_POLICY.read_text()


@pytest.fixture(scope="module")
def auth_server():
    """The module's own stack (``examples/server/stack.py``: PostgreSQL and ``mlflow
    server --app-name basic-auth``), with the users of :data:`USERS`; ``passwords`` maps
    each user (and the admin) to their password. Not the session's shared stack
    (``tests/server_stack.py``): setup creates the governance experiments as it finds
    them, and the users are named as in the example policy."""
    with Stack() as stack:
        stack.passwords = {"admin": stack.admin_password}
        for name in USERS:
            env = stack.create_user(name)
            stack.passwords[name] = env["MLFLOW_TRACKING_PASSWORD"]
        yield stack
        print(f"the module's stack (PostgreSQL, mlflow server): {stack.cpu_seconds():.1f} s CPU")


@contextmanager
def _as(server: Stack, user: str):
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


# --------------------------------------------------------------- setup
def test_setup_applies_the_plan_then_changes_nothing(auth_server):
    with _as(auth_server, "ds") as client:  # a data scientist got there first
        client.create_experiment("governance-links")
    first = _setup(auth_server, "admin", "--policy", str(ROLES_POLICY))
    assert first.exit_code == 0, first.output
    assert "created experiment governance-gates (owner: admin)" in first.output
    assert "created experiment governance-links" not in first.output
    assert "granted (was MANAGE)" in first.output  # ds brought down to READ there
    assert "35 of 35 grants changed" in first.output
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
        verifications = reviewer.get_experiment_by_name("governance-verifications")
        assert not _denied(reviewer.create_run, approvals)
        assert not _denied(reviewer.create_run, verifications.experiment_id)  # govern show
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
        names = ["credit-rf", "governance-gates", "governance-verifications", "governance-links"]
        names.append("governance-approvals")
        ids = [auditor.get_experiment_by_name(name).experiment_id for name in names]
        assert not _denied(auditor.search_runs, ids)
        assert not _denied(auditor.get_run, content["ds_run"])
        for model, version in (("credit-rf", "version"), ("credit-rf.governed", "governed")):
            assert not _denied(auditor.get_model_version, model, content[version])
        assert _denied(auditor.create_run, ids[0])
        assert _denied(auditor.create_run, ids[1])
        assert _denied(auditor.create_run, ids[2])  # an auditor records no verification
        assert _denied(auditor.set_tag, content["ds_run"], "x", "y")
        assert _denied(
            auditor.set_registered_model_alias, "credit-rf", "champion", content["version"]
        )


# --------------------------------------------------------------- the governed flow
@pytest.fixture(scope="module")
def flow(auth_server, content, tmp_path_factory, breast_cancer):
    """The governed flow, as each role: the data scientist registers a forest
    (``credit-rf`` v1, the ``@dev`` of :func:`content` is on another version), CI
    explains it, the data scientist's ``govern approve`` with the reviewer's key is
    refused, the reviewer approves, CI promotes into ``credit-rf.governed``. The results,
    the policy and a ``govern(user, *args, key=None)`` for the tests that follow."""
    from mlflow_store import register_sklearn
    from signing_keys import key_pair, keys_toml
    from sklearn.ensemble import RandomForestClassifier

    from miret_governance.cli.app import app
    from miret_governance.flavors.explain.explain import explain_model_version

    folder = tmp_path_factory.mktemp("flow")
    X, y = breast_cancer
    X, y = X.iloc[:200, :6], y.iloc[:200]
    X.assign(label=y).to_csv(folder / "train.csv", index=False)
    forest = RandomForestClassifier(n_estimators=4, max_depth=2, random_state=0).fit(X, y)
    with _as(auth_server, "ds") as ds:
        experiment = ds.get_experiment_by_name("credit-rf").experiment_id
        register_sklearn(forest, "credit-rf", experiment_id=experiment)
        version = ds.get_registered_model("credit-rf").latest_versions[-1].version
    uri = f"models:/credit-rf/{version}"
    policy = folder / "flow.toml"
    policy.write_text(
        POLICY.replace("min_fidelity = 0.90", "min_fidelity = 0.0")
        + keys_toml(approvers=("rev",))
        + "\n[approvals]\nchampion = 1\n"
    )
    with _as(auth_server, "ci"):
        explained = explain_model_version(
            uri, folder / "train.csv", target="label", solver="highs", time_limit=5,
            min_test_rows=5,
        )  # fmt: skip

    def govern(user, *args, key=None):
        with _as(auth_server, user), pytest.MonkeyPatch.context() as mp:
            if key is not None:
                mp.setenv("GOVERN_SIGNING_KEY", str(key_pair(key)[0]))
            return CliRunner().invoke(app, [*args, "--policy", str(policy)])

    approve = ["approve", "--model-uri", uri, "--alias", "champion", "--comment", "reviewed"]
    forged = govern("ds", *approve, "--decision", "approve", key="rev")
    with _as(auth_server, "auditor") as auditor:
        approvals = auditor.get_experiment_by_name("governance-approvals").experiment_id
        runs_after_forged = len(auditor.search_runs([approvals]))
    approved = govern("reviewer", *approve, "--decision", "approve", key="rev")
    promoted = govern("ci", "promote", "--model-uri", uri, "--alias", "champion")
    return {
        "uri": uri, "explained": explained, "forged": forged, "approved": approved,
        "promoted": promoted, "runs_after_forged": runs_after_forged, "govern": govern,
        "folder": folder, "policy": policy,
    }  # fmt: skip


def test_the_governed_flow_runs_with_exactly_the_planned_permissions(auth_server, content, flow):
    """explain and promote as CI, approve as the reviewer, audit as the auditor: the
    plan's grants are enough for the product's own calls, and a data scientist's approve
    is refused by the server."""
    uri, govern = flow["uri"], flow["govern"]
    assert flow["explained"].surrogate_uri == "models:/credit-rf-surrogate/1"
    assert flow["forged"].exit_code == 2, flow["forged"].output
    assert flow["runs_after_forged"] == 2  # CI's and the reviewer's of `content`
    assert flow["approved"].exit_code == 0, flow["approved"].output
    promoted = flow["promoted"]
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
    shown = govern("auditor", "show", "--model-uri", "models:/credit-rf.governed@champion")
    assert shown.exit_code == 0, shown.output
    # files swapped where they are stored (an admin of the artifact store): refused on
    # load; then put back for the insiders below
    source = governed.source.removeprefix("mlflow-artifacts:/")
    swapped = next(p for p in (auth_server.artifacts / source).rglob("*.skops"))
    original = swapped.read_bytes()
    swapped.write_bytes(original + b"0")
    refused = govern("auditor", "show", "--model-uri", "models:/credit-rf.governed@champion")
    swapped.write_bytes(original)
    assert refused.exit_code == 2, refused.output
    assert "were replaced after promotion" in refused.output


# --------------------------------------------------------------- insiders
SERVER, PRODUCT = "server", "product"
"""Who refuses an attack: the server (403, MLflow's ``PERMISSION_DENIED``) or the
product (a ``govern`` command's exit code and message)."""
DATA_SCIENTIST = "data scientist"


def _refused_by_server(call, *args, **kwargs) -> str:
    """:data:`SERVER` when ``call`` is refused with 403 (an MLflow call, or an artifact
    upload through the proxy); what else happened otherwise."""
    try:
        call(*args, **kwargs)
    except MlflowException as error:
        return SERVER if error.error_code == "PERMISSION_DENIED" else repr(error)
    except HTTPError as error:
        return SERVER if error.response.status_code == 403 else repr(error)
    return "nobody: the server accepted it"


def _ids(server) -> dict:
    """As the auditor: the governance experiments' ids, a run of each decision kind, the
    explained surrogate version and the promoted governed version."""
    with _as(server, "auditor") as auditor:
        ids = {
            name: auditor.get_experiment_by_name(name).experiment_id
            for name in ("governance-gates", "governance-approvals", "governance-links")
        }
        for name in ids.copy():
            ids[f"{name} run"] = auditor.search_runs([ids[name]], max_results=1)[0].info.run_id
        ids["surrogate"] = auditor.get_model_version("credit-rf-surrogate", "1")
        ids["governed"] = auditor.get_model_version_by_alias("credit-rf.governed", "champion")
    return ids


def _forge_surrogate_version(server, flow, ds, ids):
    source = ids["surrogate"]
    return _refused_by_server(
        ds.create_model_version, "credit-rf-surrogate", source.source, source.run_id
    )


def _forge_link_record(server, flow, ds, ids):
    return _refused_by_server(ds.create_run, ids["governance-links"])


def _forge_gate_record(server, flow, ds, ids):
    return _refused_by_server(ds.create_run, ids["governance-gates"])


def _approve_with_a_stolen_key(server, flow, ds, ids):
    line = flow["forged"].output  # `flow` ran `govern approve` as ds with the reviewer's key
    assert flow["forged"].exit_code == 2 and "refused user 'ds' (HTTP 403" in line, line
    return SERVER


def _retag_decision_run(server, flow, ds, ids):
    run = ids["governance-gates run"]
    return _refused_by_server(ds.set_tag, run, "governance.decision", "refused")


def _delete_decision_run(server, flow, ds, ids):
    return _refused_by_server(ds.delete_run, ids["governance-approvals run"])


def _overwrite_record_files(server, flow, ds, ids):
    run = ids["governance-gates run"]
    return _refused_by_server(ds.log_text, run, "{}", "decision/record.json")


def _rename_governance_experiment(server, flow, ds, ids):
    return _refused_by_server(ds.rename_experiment, ids["governance-links"], "links-old")


def _delete_governance_experiment(server, flow, ds, ids):
    return _refused_by_server(ds.delete_experiment, ids["governance-approvals"])


def _retag_surrogate_version(server, flow, ds, ids):
    return _refused_by_server(
        ds.set_model_version_tag, "credit-rf-surrogate", "1", "governance.evidence_digest", "0"
    )


def _delete_surrogate_version(server, flow, ds, ids):
    return _refused_by_server(ds.delete_model_version, "credit-rf-surrogate", "1")


def _delete_explain_run(server, flow, ds, ids):
    return _refused_by_server(ds.delete_run, ids["surrogate"].run_id)


def _set_governed_alias(server, flow, ds, ids):
    return _refused_by_server(ds.set_registered_model_alias, "credit-rf.governed", "champion", "1")


def _retag_governed_version(server, flow, ds, ids):
    version = ids["governed"].version
    return _refused_by_server(
        ds.set_model_version_tag, "credit-rf.governed", version, "governance.governed.from", "x"
    )


def _register_into_governed(server, flow, ds, ids):
    return _refused_by_server(ds.create_model_version, "credit-rf.governed", flow["uri"])


def _overwrite_governed_files(server, flow, ds, ids):
    folder = flow["folder"] / "swap"
    folder.mkdir(exist_ok=True)
    (folder / "model.skops").write_bytes(b"not the promoted forest")
    return _refused_by_server(
        ds.log_artifacts, ids["governed"].run_id, str(folder), "governed_model"
    )


def _tamper_evidence(server, flow, ds, ids):
    """The surrogate's files are a logged model of the data scientists' own experiment
    (explain runs land next to training), which they may write: the upload is accepted,
    and every read refuses the altered evidence."""
    from mlflow.artifacts import download_artifacts
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    from miret_governance.flavors.store.registry import model_id_of

    location = ds.get_logged_model(model_id_of(ids["surrogate"])).artifact_location
    folder = flow["folder"] / "tamper"
    original = Path(download_artifacts(f"{location}/evidence.json", dst_path=str(folder)))
    kept = original.read_bytes()
    original.write_bytes(kept.replace(b'"test_fidelity"', b'"test_fidelity" ', 1))
    repository = get_artifact_repository(location)
    repository.log_artifact(str(original))  # accepted: EDIT on their experiment
    shown = flow["govern"]("auditor", "show", "--model-uri", flow["uri"])
    original.write_bytes(kept)
    repository.log_artifact(str(original))  # put back for the rows below
    assert shown.exit_code == 2, shown.output
    assert "does not match its signature" in " ".join(shown.output.split())
    return PRODUCT


def _another_version(server, flow) -> str:
    """A second version of the data scientists' forest (the same files, never
    explained), registered once by the data scientist."""
    from miret_governance.flavors.store.registry import model_id_of

    if "other" not in flow:
        with _as(server, "ds") as ds:
            source = ds.get_model_version("credit-rf", flow["uri"].rsplit("/", 1)[1])
            other = ds.create_model_version(
                "credit-rf", source.source, source.run_id, model_id=model_id_of(source)
            )
        flow["other"] = f"models:/credit-rf/{other.version}"
    return flow["other"]


def _retag_as_explained_and_gated(server, flow, ds, ids):
    """Their own model's tags are theirs to write: an unexplained version tagged with the
    honest surrogate of another version, a passed gate and a promotion. CI's gate
    believes none of it."""
    other = _another_version(server, flow)
    number = other.rsplit("/", 1)[1]
    for key, value in (
        ("governance.surrogate", "models:/credit-rf-surrogate/1"),
        ("governance.last_gate", "PASS"),
        ("governance.promotion.champion", "promoted"),
    ):
        ds.set_model_version_tag("credit-rf", number, key, value)
    gated = flow["govern"]("ci", "gate", "--model-uri", other)
    assert gated.exit_code in (1, 2), gated.output
    assert "credit-rf-surrogate/1" in gated.output and "credit-rf/" in gated.output
    return PRODUCT


def _hand_set_own_alias(server, flow, ds, ids):
    """``@champion`` on their own model moved by hand (the server lets them: it is their
    model): the audit reports it; serving reads the governed model's, which stays."""
    other = _another_version(server, flow)
    ds.set_registered_model_alias("credit-rf", "champion", other.rsplit("/", 1)[1])
    audited = flow["govern"]("auditor", "audit", "--model-name", "credit-rf.governed")
    ds.set_registered_model_alias("credit-rf", "champion", flow["uri"].rsplit("/", 1)[1])
    assert audited.exit_code == 1, audited.output
    assert f"@champion is on {other}" in " ".join(audited.output.split()), audited.output
    with _as(server, "auditor") as auditor:
        governed = auditor.get_model_version_by_alias("credit-rf.governed", "champion")
    assert governed.version == ids["governed"].version
    return PRODUCT


def _plant_promotion_lock(server, flow, ds, ids):
    """A lock model created first by the data scientist: CI cannot read it, and promote
    refuses at once as a misconfiguration instead of waiting for it."""
    ds.create_registered_model("credit-rf.promotion-lock.canary")
    promoted = flow["govern"]("ci", "promote", "--model-uri", flow["uri"], "--alias", "canary")
    with _as(server, "admin") as admin:
        admin.delete_registered_model("credit-rf.promotion-lock.canary")
    assert promoted.exit_code == 2, promoted.output
    output = " ".join(promoted.output.split())
    assert "lacks MANAGE on registered model credit-rf.promotion-lock.canary" in output, output
    return PRODUCT


ATTACKS = {
    "register a forged surrogate version": (SERVER, _forge_surrogate_version),
    "write a link record (a run in governance-links)": (SERVER, _forge_link_record),
    "write a gate or promotion record (a run in governance-gates)": (SERVER, _forge_gate_record),
    "govern approve with a stolen approver key": (SERVER, _approve_with_a_stolen_key),
    "re-tag a decision run": (SERVER, _retag_decision_run),
    "delete a decision run": (SERVER, _delete_decision_run),
    "overwrite a decision record's files": (SERVER, _overwrite_record_files),
    "rename a governance experiment": (SERVER, _rename_governance_experiment),
    "delete a governance experiment": (SERVER, _delete_governance_experiment),
    "re-tag the surrogate version": (SERVER, _retag_surrogate_version),
    "delete the surrogate version": (SERVER, _delete_surrogate_version),
    "delete the explain run": (SERVER, _delete_explain_run),
    "set the governed model's alias by hand": (SERVER, _set_governed_alias),
    "re-tag the governed version": (SERVER, _retag_governed_version),
    "register a version into the governed model": (SERVER, _register_into_governed),
    "overwrite the governed version's files": (SERVER, _overwrite_governed_files),
    "tamper with the explained surrogate's evidence files": (PRODUCT, _tamper_evidence),
    "re-tag their own version as explained, gated and promoted": (
        PRODUCT,
        _retag_as_explained_and_gated,
    ),
    "set @champion on their own model by hand": (PRODUCT, _hand_set_own_alias),
    "create the promotion lock first": (PRODUCT, _plant_promotion_lock),
}
"""The insider matrix on the governed deployment, every attack by the data scientist:
attack -> (who refuses it, the attack and its check). ``docs/deployment.md`` (Insiders) holds the same table, with
:data:`CONCURRENT`."""
CONCURRENT = ("promotions of different versions to one alias at once", "ci", PRODUCT)
RACERS = 3
"""Processes in the test's race: each is a version CI explains first (about 5 s of CPU
with the server's), so the suite races 3; the benchmark races 8, 20 times
(``results_concurrent_promotion.md``)."""


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_insider_is_refused(auth_server, flow, attack):
    """After the governed flow, as the data scientist: each attack of :data:`ATTACKS` is
    refused, by whom the table says (a product refusal: the server accepted the write,
    and the check names the command, exit code and message)."""
    refused_by, run = ATTACKS[attack]
    ids = _ids(auth_server)
    with _as(auth_server, "ds") as ds:
        assert run(auth_server, flow, ds, ids) == refused_by


def test_the_insider_table_of_the_deployment_guide_is_the_tested_one():
    text = (Path(__file__).parents[3] / "docs" / "deployment.md").read_text()
    section = text.split("### Insiders\n", 1)[1].split("\n#", 1)[0]
    rows = [
        tuple(cell.strip().strip("`") for cell in line.strip("|").split("|"))
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith(("| attack", "| ---"))
    ]
    tested = [(a, DATA_SCIENTIST, by) for a, (by, _) in ATTACKS.items()] + [CONCURRENT]
    assert [row[:3] for row in rows] == tested


# --------------------------------------------------------------- nothing half-written
def test_an_explain_that_could_not_remove_its_version_is_refused_before_it_runs(auth_server, flow):
    """EDIT on an existing surrogate model lets a user register a version but not delete
    it (MANAGE): a step refused after the registration (here the link tag on the
    ensemble, READ only) would leave it. Refused before the run starts instead."""
    from miret_governance.flavors.errors import ExplainError
    from miret_governance.flavors.explain.explain import explain_model_version

    with _as(auth_server, "admin") as admin:
        experiment = admin.get_experiment_by_name("credit-rf").experiment_id
        links = admin.get_experiment_by_name("governance-links").experiment_id
        before = len(admin.search_runs([experiment]))
        versions = len(admin.search_model_versions("name = 'credit-rf-surrogate'"))
    grants = [
        ("experiment", experiment, "EDIT"),
        ("experiment", links, "READ"),
        ("registered_model", "credit-rf", "READ"),
        ("registered_model", "credit-rf-surrogate", "EDIT"),
    ]
    auth_server.passwords["editor"] = auth_server.create_user("editor", grants)[
        "MLFLOW_TRACKING_PASSWORD"
    ]
    refused = pytest.raises(
        ExplainError,
        match="user 'editor' has EDIT on the registered model 'credit-rf-surrogate', and "
        "explain needs MANAGE there",
    )
    with _as(auth_server, "editor"), refused:
        explain_model_version(
            flow["uri"], flow["folder"] / "train.csv", target="label", solver="highs",
            time_limit=5, min_test_rows=5, force=True,
        )  # fmt: skip
    with _as(auth_server, "admin") as admin:
        assert len(admin.search_runs([experiment])) == before
        assert len(admin.search_model_versions("name = 'credit-rf-surrogate'")) == versions


def test_ci_cleans_up_a_failed_explain_with_the_planned_grants(auth_server, flow):
    """A CI explain that failed after registering (``faults.end_run``), cleaned up with
    CI's grants alone (EDIT on the data scientists' experiment and model, MANAGE on the
    surrogate model): the version is deleted, the ensemble linked back to its last
    finished explanation, the logged model FAILED (deleting it needs MANAGE on their
    experiment, which CI does not get), the run FAILED."""
    from miret_governance.flavors.explain import faults

    ensemble = flow["uri"].rsplit("/", 1)[1]
    with _as(auth_server, "ci") as ci:
        experiment = ci.get_experiment_by_name("credit-rf").experiment_id
        run = ci.create_run(experiment)
        model = ci.create_logged_model(experiment, name="surrogate", source_run_id=run.info.run_id)
        version = ci.create_model_version(
            "credit-rf-surrogate", f"models:/{model.model_id}", run.info.run_id,
            tags={"governance.surrogate_of": flow["uri"]}, model_id=model.model_id,
        )  # fmt: skip
        linked = f"models:/credit-rf-surrogate/{version.version}"
        ci.set_model_version_tag("credit-rf", ensemble, "governance.surrogate", linked)
        faults.end_run(ci, run, "FAILED")
        assert ci.search_model_versions(f"run_id = '{run.info.run_id}'") == []
        tags = ci.get_model_version("credit-rf", ensemble).tags
        assert tags["governance.surrogate"] == "models:/credit-rf-surrogate/1"
        assert ci.get_logged_model(model.model_id).status == "FAILED"
        assert ci.get_run(run.info.run_id).info.status == "FAILED"


# --------------------------------------------------------------- concurrent promotions
def test_concurrent_promotions_to_one_alias_have_exactly_one_winner(auth_server, flow):
    """:data:`CONCURRENT`: :data:`RACERS` versions of the data scientists' forest, each
    explained by CI, promoted by as many processes at once to one new alias (``examples/benchmarks/
    concurrent_promotion.py race``: forked after one import, released at one barrier):
    one exits 0, the others exit 2 naming the concurrent promotion, and nothing of theirs
    is left (no promotion record or tag, no lock). The benchmark beside it races 8, 20
    times (``results_concurrent_promotion.md``)."""
    import json
    import os
    import subprocess
    import sys

    from miret_governance.flavors.explain.explain import explain_model_version
    from miret_governance.flavors.store.registry import model_id_of
    from miret_governance.flavors.trail.promotion_lock import lock_name

    with _as(auth_server, "ds") as ds:
        source = ds.get_model_version("credit-rf", flow["uri"].rsplit("/", 1)[1])
        numbers = [
            ds.create_model_version(
                "credit-rf", source.source, source.run_id, model_id=model_id_of(source)
            ).version
            for _ in range(RACERS - 1)
        ]
    uris = [flow["uri"], *(f"models:/credit-rf/{n}" for n in numbers)]
    with _as(auth_server, "ci"):
        for uri in uris[1:]:
            explain_model_version(
                uri, flow["folder"] / "train.csv", target="label", solver="highs",
                time_limit=5, min_test_rows=5,
            )  # fmt: skip
    script = Path(__file__).parents[3] / "examples" / "benchmarks" / "concurrent_promotion.py"
    with _as(auth_server, "ci") as ci:
        race = subprocess.run(
            [sys.executable, str(script), "race", "--policy", str(flow["policy"]),
             "--alias", "race", *uris],
            env=dict(os.environ), capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert race.returncode == 0, race.stderr
        outcome = json.loads(race.stdout.splitlines()[-1])
        codes = outcome["codes"]
        assert sorted(codes) == [0] + [2] * (RACERS - 1), outcome
        winner = uris[codes.index(0)]
        assert (
            ci.get_model_version_by_alias("credit-rf", "race-1").version == winner.rsplit("/", 1)[1]
        )
        for uri, code, error in zip(uris, codes, outcome["errors"]):
            if code == 2:
                assert "nothing was recorded" in error, error
                assert "another promotion to @race-1" in error or "moved from no version" in error
                tags = ci.get_model_version("credit-rf", uri.rsplit("/", 1)[1]).tags
                assert "governance.promotion.race-1" not in tags
        gates = ci.get_experiment_by_name("governance-gates").experiment_id
        records = ci.search_runs(
            [gates], filter_string="tags.`governance.promotion.race-1` = 'promoted'"
        )
        assert [r.data.tags["governance.ensemble_uri"] for r in records] == [winner]
        assert not ci.search_registered_models(f"name = '{lock_name('credit-rf', 'race-1')}'")
