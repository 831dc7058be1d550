"""Promotion policy, gate evaluation (ours and MLflow's), and `govern gate`."""

import json

import mlflow
import pytest
import typer
from mlflow import MlflowClient
from mlflow_store import linked_versions
from typer.testing import CliRunner

from flavors.gating import (
    GATE_EXPERIMENT,
    evaluate_gates,
    gate_model_version,
    mlflow_verdict,
)
from governance.gates import (
    DEFAULTS,
    GATES,
    Policy,
    PolicyError,
    evaluate,
    load_policy,
    parse_policy,
)

pytest_plugins = ["mlflow_store"]

ALL_GATES = {
    "min_fidelity": 0.9,
    "max_features": 3,
    "min_train_fidelity": 0.95,
    "min_proximity_agreement": 0.8,
    "max_gap": 0.05,
}
GOOD_METRICS = {
    "test_fidelity": 0.95,
    "n_features_used": 2.0,
    "train_fidelity": 0.97,
    "test_proximity_agreement": 0.9,
    "solver.gap": 0.0,
}


@pytest.fixture(autouse=True)
def _restore_http_settings(monkeypatch):
    """The CLI sets MLflow's HTTP retry/timeout defaults; keep them out of other tests."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")


def write(path, text):
    path.write_text(text)
    return path


def cli():
    from cli.gates import register

    app = typer.Typer()
    register(app)
    return app


# ---------------------------------------------------------------------- policy
def test_defaults_and_overrides(tmp_path):
    assert load_policy(None).gates == {
        "max_features": 5,
        "min_fidelity": 0.9,
        "require_validation_pass": True,
    }
    policy = load_policy(
        write(
            tmp_path / "p.toml",
            "[gates]\nmin_fidelity = 1\nmax_gap = 0.01\nrequire_validation_pass = true\n",
        )
    )
    assert policy.gates == {
        "max_features": 5,
        "max_gap": 0.01,
        "min_fidelity": 1.0,
        "require_validation_pass": True,
    }
    assert policy.source == str(tmp_path / "p.toml")


def test_digest_is_canonical_sha256_of_gates(tmp_path):
    import hashlib

    a = load_policy(write(tmp_path / "a.toml", "[gates]\nmax_features = 5\nmin_fidelity = 0.9\n"))
    b = load_policy(write(tmp_path / "b.toml", "[gates]\nmin_fidelity = 0.90\n"))
    expected = hashlib.sha256(
        b'{"max_features":5,"min_fidelity":0.9,"require_validation_pass":true}'
    ).hexdigest()
    assert a.digest == b.digest == load_policy(None).digest == expected
    assert parse_policy({"gates": {"min_fidelity": 0.91}}).digest != expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("[gates]\nmin_fidelty = 0.9\n", "unknown gates ['min_fidelty']"),
        ("min_fidelity = 0.9\n", "gate keys belong in the [gates] table"),
        ("[gates]\nmax_features = 2.5\n", "max_features = 2.5 is not valid"),
        ("[gates]\nmax_features = true\n", "max_features = True is not valid"),
        ("[gates]\nmin_fidelity = '0.9'\n", "min_fidelity = '0.9' is not valid"),
        ("[gates]\nmin_fidelity = 1.5\n", "expected test-set fidelity, in [0, 1]"),
        ("[gates]\nrequire_validation_pass = 1\n", "expected true or false"),
        ("[gates\nmin_fidelity = 0.9\n", "is not valid TOML"),
        ("gates = 3\n", "'gates' must be a table"),
    ],
)
def test_invalid_policies_name_the_problem(tmp_path, text, message):
    with pytest.raises(PolicyError) as error:
        load_policy(write(tmp_path / "bad.toml", text))
    assert message in str(error.value)
    if "unknown" in message:
        assert all(key in str(error.value) for key in GATES)


def test_unreadable_policy_file(tmp_path):
    with pytest.raises(PolicyError, match="policy file .*missing.toml is missing"):
        load_policy(tmp_path / "missing.toml")
    with pytest.raises(PolicyError, match="is a directory"):
        load_policy(tmp_path)
    with pytest.raises(PolicyError, match="/dev/zero is not a regular file"):
        load_policy("/dev/zero")
    big = write(tmp_path / "big.toml", "[gates]\n" + "# padding\n" * 7000)
    with pytest.raises(PolicyError, match="larger than 64 KiB"):
        load_policy(big)
    (tmp_path / "latin1.toml").write_bytes(b"# caf\xe9\n[gates]\n")
    with pytest.raises(PolicyError, match="not UTF-8"):
        load_policy(tmp_path / "latin1.toml")


# ---------------------------------------------------------------------- evaluation
NUMERIC = [name for name, spec in GATES.items() if spec.kind is not bool]


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("offset, side", [(0.0, "at"), (1e-9, "above"), (-1e-9, "below")])
def test_threshold_edges_agree_with_mlflow(name, offset, side):
    spec = GATES[name]
    threshold = ALL_GATES[name]
    value = threshold + offset if spec.kind is float else threshold + (offset > 0) - (offset < 0)
    policy = parse_policy({"gates": ALL_GATES})
    metrics = dict(GOOD_METRICS, **{spec.metric: value})
    ours = {r.name: r for r in evaluate(policy, metrics).results}[name]
    theirs, message = mlflow_verdict(spec.metric, threshold, spec.greater_is_better, value)
    better = side == "at" or (side == "above") == spec.greater_is_better
    assert ours.passed is better
    assert theirs is better
    assert ours.value == value and ours.metric == spec.metric
    if not better:
        assert f"{spec.metric} value threshold check failed" in message
    assert {r.name: r.passed for r in evaluate_gates(policy, metrics, {}).results}[name] is better


def test_exact_results_and_missing_or_nan_metrics():
    policy = parse_policy(
        {"gates": {"min_fidelity": 0.9, "max_features": 3, "require_validation_pass": False}}
    )
    evaluation = evaluate(policy, {"test_fidelity": 0.875, "n_features_used": 3.0})
    assert not evaluation.all_passed
    fidelity, features = sorted(evaluation.results, key=lambda r: r.name)[::-1]
    assert (fidelity.name, fidelity.threshold, fidelity.value, fidelity.passed) == (
        "min_fidelity",
        0.9,
        0.875,
        False,
    )
    assert fidelity.reason == "test_fidelity = 0.875 does not meet >= 0.9"
    assert (features.value, features.passed, features.comparison) == (3.0, True, "<=")

    missing = evaluate(policy, {"n_features_used": 1.0})
    assert [r.reason for r in missing.results if not r.passed] == [
        "metric test_fidelity was not logged"
    ]
    assert mlflow_verdict("test_fidelity", 0.9, True, None)[0] is False
    nan = evaluate(policy, {"test_fidelity": float("nan"), "n_features_used": 1.0})
    assert (
        not nan.all_passed and mlflow_verdict("test_fidelity", 0.9, True, float("nan"))[0] is False
    )
    assert nan.to_json()["results"][1]["value"] is None  # JSON has no NaN


def test_validation_gate_reads_the_tag():
    policy = parse_policy({"gates": {"require_validation_pass": True}})
    assert evaluate(policy, GOOD_METRICS, {"governance.validation": "passed"}).all_passed
    failed = evaluate(policy, GOOD_METRICS, {"governance.validation": "failed"})
    assert [r.reason for r in failed.results if not r.passed] == [
        "tag governance.validation is 'failed', not 'passed'"
    ]
    assert not evaluate(policy, GOOD_METRICS, {}).all_passed
    off = parse_policy({"gates": {"require_validation_pass": False}})
    assert set(off.gates) == set(DEFAULTS) - {"require_validation_pass"}


def test_gates_on_stored_evidence_ignore_tags_and_record_its_digest():
    import hashlib

    policy = load_policy(None)
    evidence = {
        "metrics": {"test_fidelity": 0.95, "n_features_used": 2},
        "validation": {"success": True},
    }
    passed = evaluate(policy, {"test_fidelity": 0.1}, {}, evidence=evidence)
    assert passed.all_passed
    canonical = (
        b'{"metrics":{"n_features_used":2,"test_fidelity":0.95},"validation":{"success":true}}'
    )
    assert passed.evidence_digest == hashlib.sha256(canonical).hexdigest()
    assert passed.to_json()["evidence_digest"] == passed.evidence_digest
    assert f"Evidence digest: `{passed.evidence_digest}`" in passed.to_markdown()
    # A tag saying "passed" cannot override a stored failed (or missing) validation.
    for validation in ({"success": False}, {"success": "true"}, None):
        failed = evaluate(
            policy,
            tags={"governance.validation": "passed"},
            evidence=dict(evidence, validation=validation),
        )
        assert [r.name for r in failed.results if not r.passed] == ["require_validation_pass"]
    with pytest.raises(ValueError, match="'metrics' dict"):
        evaluate(policy, evidence={"validation": {"success": True}})


def test_report_formats():
    evaluation = evaluate(Policy(gates={"min_fidelity": 0.9}), {"test_fidelity": 0.95})
    data = evaluation.to_json()
    assert data["all_passed"] is True and data["policy"] == {"min_fidelity": 0.9}
    assert data["results"][0]["comparison"] == ">="
    json.dumps(data)
    markdown = evaluation.to_markdown()
    assert "# Promotion gates: PASSED" in markdown
    assert "| min_fidelity | `test_fidelity` | >= 0.9 | 0.95 | pass |" in markdown


# ---------------------------------------------------------------------- registry
def test_gate_reads_model_metrics_records_run_and_tags(store):
    uri = linked_versions(store, GOOD_METRICS)
    outcome = gate_model_version(uri, parse_policy({"gates": ALL_GATES}))
    assert outcome.evaluation.all_passed
    assert outcome.metrics_source.startswith("logged model m-")
    client = MlflowClient()
    tags = client.get_model_version("credit-rf", "1").tags
    assert tags["governance.gate.status"] == "passed"
    assert tags["governance.gate.policy_digest"] == outcome.evaluation.policy_digest
    assert tags["governance.gate.run_id"] == outcome.run_id
    assert tags["governance.gate.time"] == outcome.time
    run = client.get_run(outcome.run_id)
    assert client.get_experiment(run.info.experiment_id).name == GATE_EXPERIMENT
    assert run.data.metrics["test_fidelity"] == 0.95 and run.data.metrics["gates_passed"] == 1.0
    assert run.data.params["gate.max_features"] == "3"
    files = {f.path for f in client.list_artifacts(outcome.run_id)}
    assert files == {"gate_report.json", "gate_report.md"}
    report = mlflow.artifacts.load_dict(f"runs:/{outcome.run_id}/gate_report.json")
    assert report["surrogate_uri"] == "models:/credit-rf-surrogate/1"
    assert len(report["results"]) == len(ALL_GATES) + 1  # and require_validation_pass


def test_gate_falls_back_to_run_metrics_and_fails(store):
    uri = linked_versions(store, dict(GOOD_METRICS, test_fidelity=0.8), on_model=False)
    outcome = gate_model_version(uri, load_policy(None))
    assert not outcome.evaluation.all_passed
    assert outcome.metrics_source.startswith("run ")
    assert (
        MlflowClient().get_model_version("credit-rf", "1").tags["governance.gate.status"]
        == "failed"
    )


def test_cli_gate_exit_codes(store, tmp_path):
    runner = CliRunner()
    passing = linked_versions(store, GOOD_METRICS)
    result = runner.invoke(cli(), ["gate", "--model-uri", passing])
    assert result.exit_code == 0, result.output
    assert "all gates passed" in result.output and "min_fidelity" in result.output

    strict = write(tmp_path / "strict.toml", "[gates]\nmin_fidelity = 0.99\n")
    result = runner.invoke(
        cli(), ["gate", "--model-uri", "models:/credit-rf/1", "--policy", str(strict)]
    )
    assert result.exit_code == 1 and "a gate failed" in result.output

    bad = write(tmp_path / "bad.toml", "[gates]\nmax_fetures = 3\n")
    result = runner.invoke(cli(), ["gate", "--model-uri", passing, "--policy", str(bad)])
    assert result.exit_code == 2 and "unknown gates ['max_fetures']" in result.output


def test_version_without_surrogate_exits_2(store):
    client = MlflowClient()
    with mlflow.start_run(experiment_id=store) as run:
        model = mlflow.initialize_logged_model(name="lonely", experiment_id=store)
    client.create_registered_model("lonely")
    client.create_model_version("lonely", f"models:/{model.model_id}", run.info.run_id)
    result = CliRunner().invoke(cli(), ["gate", "--model-uri", "models:/lonely/1"])
    assert result.exit_code == 2
    assert "has no linked surrogate (tag governance.surrogate)" in result.output
    result = CliRunner().invoke(cli(), ["gate", "--model-uri", "models:/nope/4"])
    assert result.exit_code == 2 and "was not found in the registry" in result.output


def test_unreachable_server_fails_fast():
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.time()
    result = CliRunner().invoke(
        cli(), ["gate", "--model-uri", "models:/x/1", "--tracking-uri", f"http://127.0.0.1:{port}"]
    )
    assert result.exit_code == 2
    assert "is unreachable" in result.output
    assert time.time() - started < 10
