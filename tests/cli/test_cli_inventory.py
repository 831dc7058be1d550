"""``govern inventory`` through the command line: exit codes 0/1/2, its JSON keys, and
the run the scheduled job logs."""

import json
from pathlib import Path

import typer
from gate_store import explained
from mlflow import MlflowClient
from signing_keys import keys_toml
from typer.testing import CliRunner

from miret_governance.cli import gates, inventory

pytest_plugins = ["mlflow_store"]

KEYS = {
    "command",
    "schema_version",
    "policy",
    "policy_digest",
    "now",
    "clean",
    "exit_code",
    "run_id",
    "n_models",
    "n_findings",
    "n_due",
    "models",
    "aliases",
    "findings",
}
ROW = {
    "model",
    "alias",
    "version",
    "evidence",
    "evidence_digest",
    "promotion",
    "last_gate",
    "last_verification",
    "last_reproduction",
    "last_revalidated",
    "revalidate_every_days",
    "due",
}


def run(*args):
    app = typer.Typer()
    gates.register(app)
    inventory.register(app)
    return CliRunner().invoke(app, [str(a) for a in args])


def test_exit_codes_json_and_the_logged_run(store, tmp_path):
    policy = tmp_path / "p.toml"
    policy.write_text(
        "[gates]\nmin_fidelity = 0.9\n[revalidate_every_days]\nchampion = 30\n" + keys_toml()
    )
    uri = explained(store, tmp_path)
    assert (
        run("promote", "--model-uri", uri, "--alias", "champion", "--policy", policy).exit_code == 0
    )
    result = run("inventory", "--policy", policy, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document) == KEYS and set(document["aliases"][0]) == ROW
    assert (document["n_models"], document["findings"], document["run_id"]) == (1, [], None)
    assert document["aliases"][0]["due"] is False

    MlflowClient().set_registered_model_alias("credit-rf", "prod", "1")
    result = run("inventory", "--policy", policy, "--log-run")
    assert result.exit_code == 1, result.output
    assert f"FINDING alias {uri} @prod: @prod is on {uri} without a valid signed" in result.output
    assert "1 model(s), 2 row(s), 1 finding(s), 0 due; logged in run " in result.output
    run_id = result.output.split("logged in run ")[1].split()[0]
    client = MlflowClient()
    logged = client.get_run(run_id)
    assert client.get_experiment(logged.info.experiment_id).name == "governance-inventory"
    assert logged.info.status == "FINISHED"  # findings do not fail the run
    assert logged.data.metrics == {"n_models": 1.0, "n_findings": 1.0, "n_due": 0.0}
    files = sorted(a.path for a in client.list_artifacts(run_id))
    assert files == ["inventory.html", "inventory.json", "inventory_table.json"]
    page = client.download_artifacts(run_id, "inventory.html", str(tmp_path))
    text = Path(page).read_text()
    assert text.index("Findings") < text.index("Models and aliases")
    assert f"@prod is on {uri} without a valid signed" in text


def test_bad_input_is_one_line_and_exit_2(store, tmp_path):
    result = run("inventory", "--policy", tmp_path / "missing.toml")
    assert result.exit_code == 2
    assert "missing.toml" in result.output and "does not exist" in result.output
    result = run("inventory", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
