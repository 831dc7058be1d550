"""Promotion policy, gate evaluation (ours and MLflow's), and `govern gate`."""

import json

import mlflow
import pandas as pd
import pytest
import typer
from gate_store import GOOD, explain, explained, register_ensemble, rewrite_evidence
from mlflow import MlflowClient
from mlflow_store import linked_versions, register_sklearn
from processes import free_port
from signing_keys import trusting
from typer.testing import CliRunner

from miret_governance.flavors.errors import GateError
from miret_governance.flavors.gates.gating import (
    GATE_EXPERIMENT,
    evaluate_gates,
    gate_model_version,
    mlflow_verdict,
)
from miret_governance.flavors.store.registry import model_id_of, version_uri
from miret_governance.governance.report.gate_markdown import gate_markdown
from miret_governance.governance.trust.gates import evaluate
from miret_governance.governance.trust.policy import (
    DEFAULTS,
    GATES,
    Policy,
    PolicyError,
    load_policy,
    parse_policy,
)

pytest_plugins = ["mlflow_store"]


def trusted_default() -> Policy:
    """The built-in gates, trusting the session's CI key (the built-in policy trusts none)."""
    return parse_policy(trusting({"gates": dict(DEFAULTS)}))


ALL_GATES = {
    "min_fidelity": 0.9,
    "min_fidelity_lower_bound": 0.85,
    "max_features": 3,
    "min_train_fidelity": 0.95,
    "min_proximity_agreement": 0.8,
    "max_gap": 0.05,
}
GOOD_METRICS = {
    "test_fidelity": 0.95,
    "test_fidelity_ci_low": 0.9,
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
    from miret_governance.cli.gates import register

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


def test_policy_name_from_key_or_file_stem(tmp_path):
    strict = load_policy(write(tmp_path / "strict.toml", "[gates]\nmin_fidelity = 0.99\n"))
    assert strict.name == "strict" and strict.label == f"strict v{strict.digest[:8]}"
    named = load_policy(
        write(tmp_path / "p.toml", 'name = "bank-2025"\n[gates]\nmin_fidelity = 0.99\n')
    )
    assert named.name == "bank-2025" and named.digest == strict.digest  # the name is not digested
    assert load_policy(None).label == f"default v{load_policy(None).digest[:8]}"
    with pytest.raises(PolicyError, match="name = 'a b' is not valid"):
        parse_policy({"name": "a b", "gates": {}})


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
        ("", "bad.toml is empty: give a TOML file with a [gates] table"),
        ("# only a comment\n", "is empty"),
        (
            "[extra]\n",
            '[approvals], [revalidate_every_days], [roles] and [governed."<model>"] tables',
        ),
        (
            "[gates]\n[approvals]\nprod = 1\n",
            "approvals prod = 1 needs keys trusted to approve, and the policy trusts none",
        ),
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
NUMERIC = [
    name for name, spec in GATES.items() if spec.value_type is not bool and name in ALL_GATES
]


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("offset, side", [(0.0, "at"), (1e-9, "above"), (-1e-9, "below")])
def test_threshold_edges_agree_with_mlflow(name, offset, side):
    spec = GATES[name]
    threshold = ALL_GATES[name]
    value = (
        threshold + offset if spec.value_type is float else threshold + (offset > 0) - (offset < 0)
    )
    policy = parse_policy({"gates": ALL_GATES})
    metrics = dict(GOOD_METRICS, **{spec.metric: value})
    ours = {r.name: r for r in evaluate(policy, {"metrics": metrics}).results}[name]
    theirs, message = mlflow_verdict(spec.metric, threshold, spec.greater_is_better, value)
    better = side == "at" or (side == "above") == spec.greater_is_better
    assert ours.passed is better
    assert theirs is better
    assert ours.value == value and ours.metric == spec.metric
    if not better:
        assert f"{spec.metric} value threshold check failed" in message
    evidence = {"metrics": metrics}
    assert {r.name: r.passed for r in evaluate_gates(policy, evidence).results}[name] is better


def test_exact_results_and_missing_or_nan_metrics():
    policy = parse_policy(
        {"gates": {"min_fidelity": 0.9, "max_features": 3, "require_validation_pass": False}}
    )
    evaluation = evaluate(policy, {"metrics": {"test_fidelity": 0.875, "n_features_used": 3.0}})
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

    missing = evaluate(policy, {"metrics": {"n_features_used": 1.0}})
    assert [r.reason for r in missing.results if not r.passed] == [
        "metric test_fidelity was not logged"
    ]
    assert mlflow_verdict("test_fidelity", 0.9, True, None)[0] is False
    nan = evaluate(policy, {"metrics": {"test_fidelity": float("nan"), "n_features_used": 1.0}})
    assert (
        not nan.all_passed and mlflow_verdict("test_fidelity", 0.9, True, float("nan"))[0] is False
    )
    assert nan.to_json()["results"][1]["value"] is None  # JSON has no NaN


def test_max_columns_counts_input_columns_and_fails_on_evidence_without_them():
    """A pipeline's surrogate on purpose=car, purpose=boat and amount: 3 features, 2
    input columns; evidence from before the count was recorded fails the gate."""
    policy = parse_policy({"gates": {"max_features": 3, "max_columns": 2}})
    evidence = {"metrics": {"test_fidelity": 0.95, "n_features_used": 3.0}}
    evidence["validation"] = {"success": True}
    columns = {r.name: r for r in evaluate(policy, evidence).results}["max_columns"]
    assert (columns.passed, columns.reason) == (False, "metric n_columns_used was not logged")
    evidence["metrics"]["n_columns_used"] = 2.0
    assert evaluate(policy, evidence).all_passed
    stricter = parse_policy({"gates": {"max_features": 3, "max_columns": 1}})
    (failed,) = [r for r in evaluate(stricter, evidence).results if not r.passed]
    assert failed.reason == "n_columns_used = 2 does not meet <= 1"


def test_validation_gate_reads_the_evidence_record():
    policy = parse_policy({"gates": {"require_validation_pass": True}})
    passed = {"metrics": GOOD_METRICS, "validation": {"success": True}}
    assert evaluate(policy, passed).all_passed
    failed = evaluate(policy, {"metrics": GOOD_METRICS, "validation": {"success": False}})
    assert [r.reason for r in failed.results if not r.passed] == [
        "the stored validation result is 'failed', not 'passed'"
    ]
    missing = evaluate(policy, {"metrics": GOOD_METRICS})
    assert [r.reason for r in missing.results if not r.passed] == [
        "no validation result in the evidence (was the surrogate validated?)"
    ]
    off = parse_policy({"gates": {"require_validation_pass": False}})
    assert set(off.gates) == set(DEFAULTS) - {"require_validation_pass"}


def test_gates_on_stored_evidence_ignore_tags_and_record_its_digest():
    import hashlib

    policy = load_policy(None)
    evidence = {
        "metrics": {"test_fidelity": 0.95, "n_features_used": 2},
        "validation": {"success": True},
    }
    passed = evaluate(policy, evidence)
    assert passed.all_passed
    canonical = (
        b'{"metrics":{"n_features_used":2,"test_fidelity":0.95},"validation":{"success":true}}'
    )
    assert passed.evidence_digest == hashlib.sha256(canonical).hexdigest()
    assert passed.to_json()["evidence_digest"] == passed.evidence_digest
    assert f"Evidence digest: `{passed.evidence_digest}`" in gate_markdown(passed)
    # Only success: true passes; a string or a missing record does not.
    for validation in ({"success": False}, {"success": "true"}, None):
        failed = evaluate(policy, dict(evidence, validation=validation))
        assert [r.name for r in failed.results if not r.passed] == ["require_validation_pass"]
    with pytest.raises(TypeError, match="'metrics' dict"):
        evaluate(policy, {"validation": {"success": True}})


def test_report_formats():
    evaluation = evaluate(Policy(gates={"min_fidelity": 0.9}), {"metrics": {"test_fidelity": 0.95}})
    data = evaluation.to_json()
    assert data["all_passed"] is True and data["policy"] == {"min_fidelity": 0.9}
    assert data["results"][0]["comparison"] == ">="
    json.dumps(data)
    markdown = gate_markdown(evaluation)
    assert markdown.startswith("# Gates PASSED: all 1 gates pass\n")
    assert "| min_fidelity | pass | 0.95 (needs &gt;= 0.9) |" in markdown


# ---------------------------------------------------------------------- registry
def test_gate_reads_stored_evidence_records_run_tags_and_descriptions(store, tmp_path):
    uri = explained(store, tmp_path)
    client = MlflowClient()
    surrogate_run = client.get_model_version("credit-rf-surrogate", "1").run_id
    mlflow.log_metrics({"test_fidelity": 0.1}, run_id=surrogate_run)  # ignored: not evidence
    policy = parse_policy(trusting({"gates": ALL_GATES, "name": "all"}))
    outcome = gate_model_version(uri, policy)
    assert outcome.evaluation.all_passed and outcome.policy == policy.label
    stored = client.get_run(surrogate_run).data.params["evidence_digest"]
    assert outcome.evaluation.evidence_digest == stored
    assert {r.name: r.value for r in outcome.evaluation.results}["min_fidelity"] == 0.95

    tags = client.get_model_version("credit-rf", "1").tags
    assert tags == {
        "governance.surrogate": "models:/credit-rf-surrogate/1",
        "governance.last_gate": "PASS",
        "governance.last_gate.run": outcome.run_id,
    }
    run = client.get_run(outcome.run_id)
    assert run.info.run_name == f"PASS all v{policy.digest[:8]} · credit-rf v1"
    assert run.data.tags["result"] == "PASS"
    assert run.data.tags["governance.evidence_digest"] == outcome.evaluation.evidence_digest
    assert client.get_experiment(run.info.experiment_id).name == GATE_EXPERIMENT
    assert run.data.metrics["test_fidelity"] == 0.95 and run.data.metrics["gates_passed"] == 1.0
    assert run.data.params["gate.max_features"] == "3"
    assert {f.path for f in client.list_artifacts(outcome.run_id)} == {
        "gate_report.json",
        "gate_report.md",
        "decision",
    }
    report = mlflow.artifacts.load_dict(f"runs:/{outcome.run_id}/gate_report.json")
    assert report["surrogate_uri"] == "models:/credit-rf-surrogate/1"
    assert report["evidence"]["features_used"] == ["x0", "x1"]
    assert report["evidence_digest"] == outcome.evaluation.evidence_digest
    assert len(report["results"]) == len(ALL_GATES) + 1  # and require_validation_pass
    assert all(r["advice"] is None for r in report["results"])  # what to do: a failed gate's
    markdown = mlflow.artifacts.load_text(f"runs:/{outcome.run_id}/gate_report.md")
    assert markdown.startswith(f"# Gates PASSED: all {len(ALL_GATES) + 1} gates pass\n")
    assert "policy all v" in markdown.splitlines()[2]

    ensemble_text = client.get_model_version("credit-rf", "1").description
    surrogate_text = client.get_model_version("credit-rf-surrogate", "1").description
    link = "[credit\\-rf\\-surrogate v1](#/models/credit-rf-surrogate/versions/1)"
    assert f"**Explained by** the MIRET surrogate {link}." in ensemble_text
    assert "[credit\\-rf v1](#/models/credit-rf/versions/1)" in surrogate_text
    model_id = model_id_of(client.get_model_version("credit-rf-surrogate", "1"))
    for text in (ensemble_text, surrogate_text):
        assert "| Fidelity on test rows | 95.0%; plain tree (CART) 90.0% |" in text
        assert "| Features used | 2: x0, x1; plain tree (CART) 3 |" in text
        assert "| Input validation | passed |" in text
        assert (
            f"| What-if gate (no alias) | **PASS** under policy all v{policy.digest[:8]}, " in text
        )
        assert f"[{model_id}](#/experiments/{store}/models/{model_id}/artifacts)" in text
        assert "`report.html`" in text
        technical = text.split("**Technical details**")[1]
        assert f"| Evidence digest | `{outcome.evaluation.evidence_digest[:16]}` |" in technical
        assert "Promotion" not in text


def test_failing_evidence_fails_even_with_good_logged_metrics(store, tmp_path):
    uri = explained(store, tmp_path, metrics=dict(GOOD, test_fidelity=0.8))
    client = MlflowClient()
    surrogate = client.get_model_version("credit-rf-surrogate", "1")
    mlflow.log_metrics(  # ignored: not evidence
        {"test_fidelity": 0.99}, run_id=surrogate.run_id, model_id=model_id_of(surrogate)
    )
    outcome = gate_model_version(uri, trusted_default())
    assert not outcome.evaluation.all_passed
    assert [r.reason for r in outcome.evaluation.results if not r.passed] == [
        "test_fidelity = 0.8 does not meet >= 0.9"
    ]
    tags = client.get_model_version("credit-rf", "1").tags
    assert tags["governance.last_gate"] == "FAIL"
    run = client.get_run(tags["governance.last_gate.run"])
    assert run.data.tags["result"] == "FAIL"
    assert run.info.run_name.startswith("FAIL default v")


def test_hand_set_validation_tag_does_not_pass(store, tmp_path):
    uri = explained(store, tmp_path, success=False)
    client = MlflowClient()
    surrogate = client.get_model_version("credit-rf-surrogate", "1")
    client.set_model_version_tag(surrogate.name, "1", "governance.validation", "passed")
    client.set_tag(surrogate.run_id, "governance.validation", "passed")
    outcome = gate_model_version(uri, trusted_default())
    assert [r.name for r in outcome.evaluation.results if not r.passed] == [
        "require_validation_pass"
    ]
    text = client.get_model_version("credit-rf", "1").description
    assert "| Input validation | **failed** |" in text


def test_fake_surrogate_model_is_refused(store, tmp_path):
    from sklearn.linear_model import LogisticRegression

    ensemble = register_ensemble(store)
    frame = pd.DataFrame({"x0": [0.0, 1.0], "x1": [1.0, 0.0]})
    register_sklearn(
        LogisticRegression().fit(frame, [0, 1]), "credit-rf-surrogate", experiment_id=store
    )
    client = MlflowClient()
    fake = client.get_model_version("credit-rf-surrogate", "1")
    mlflow.log_metrics(GOOD, run_id=fake.run_id)
    mlflow.log_metrics(GOOD, run_id=fake.run_id, model_id=model_id_of(fake))
    client.set_model_version_tag(fake.name, "1", "governance.surrogate_of", "models:/credit-rf/1")
    client.set_model_version_tag(fake.name, "1", "governance.validation", "passed")
    client.set_model_version_tag(
        "credit-rf", ensemble.version, "governance.surrogate", "models:/credit-rf-surrogate/1"
    )
    result = CliRunner().invoke(cli(), ["gate", "--model-uri", "models:/credit-rf/1"])
    assert result.exit_code == 1, result.output  # no trusted key signed it: every gate fails
    assert (
        "FAIL min_fidelity: unverified evidence: the evidence of models:/credit-rf-surrogate/1 is unsigned (no model.sig)"
        in (" ".join(result.output.split()))
    )
    assert client.get_model_version("credit-rf", "1").tags["governance.last_gate"] == "FAIL"
    runs = mlflow.search_runs(experiment_names=[GATE_EXPERIMENT])
    assert runs["tags.result"].tolist() == ["FAIL"]
    assert "metrics.test_fidelity" not in runs or runs["metrics.test_fidelity"].isna().all()


def test_empty_model_linked_by_tags_fails_every_gate(store):
    uri = linked_versions(store, GOOD_METRICS)
    outcome = gate_model_version(uri, trusted_default())
    assert not outcome.evaluation.all_passed
    unsigned = (
        f"unverified evidence: the evidence of {outcome.surrogate_uri} is unsigned (no "
        "model.sig): it was not produced by a job holding a trusted signing key "
        "(GOVERN_SIGNING_KEY), or its signature was deleted from the store since"
    )
    assert {r.reason for r in outcome.evaluation.results} == {unsigned}


def test_signed_model_without_the_miret_flavor_is_refused(store, tmp_path):
    def drop_flavor(model_dir, manifest):
        (model_dir / "MLmodel").write_text("flavors: {}\n")

    uri = explained(store, tmp_path, edit=drop_flavor)
    with pytest.raises(GateError, match="is not a miret surrogate .*flavors: none"):
        gate_model_version(uri, trusted_default())


def test_surrogate_of_another_ensemble_version_is_refused(store, tmp_path):
    client = MlflowClient()
    v1 = register_ensemble(store)
    v2 = register_ensemble(store)
    surrogate = explain(store, v2, tmp_path, link=False)
    client.set_model_version_tag(
        surrogate.name, surrogate.version, "governance.surrogate_of", "models:/credit-rf/1"
    )
    client.set_model_version_tag(
        "credit-rf", v1.version, "governance.surrogate", version_uri(surrogate)
    )
    with pytest.raises(GateError) as error:
        gate_model_version("models:/credit-rf/1", trusted_default())
    message = str(error.value)
    assert "models:/credit-rf-surrogate/1 explains models:/credit-rf/2" in message
    assert f"not models:/credit-rf/1 (model id {model_id_of(v1)})" in message


def test_ensemble_files_replaced_after_the_explanation_are_refused(store, tmp_path):
    """A logged model's artifacts stay writable: an insider overwrote the explained
    forest's model file (QA: a coin-flip forest, then a backdoored one agreeing on every
    data row) and gate, promote and audit still trusted the old explanation."""
    from miret_governance.flavors.trail.audit import audit_model
    from miret_governance.flavors.trail.promotion import promote_model_version

    uri = explained(store, tmp_path)
    policy = trusted_default()
    assert gate_model_version(uri, policy).evaluation.all_passed
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    (swapped / "model.skops").write_bytes(b"another forest")
    client = MlflowClient()
    client.log_model_artifacts(model_id_of(client.get_model_version("credit-rf", "1")), swapped)
    message = f"the model files of {uri} changed after it was explained"
    with pytest.raises(GateError, match=message):
        gate_model_version(uri, policy)
    with pytest.raises(GateError, match=message):
        promote_model_version(uri, "champion", policy)
    assert not client.get_registered_model("credit-rf").aliases
    report = audit_model("credit-rf", policy)
    assert [(f.kind, f.version) for f in report.findings] == [("evidence", uri)]
    assert message in report.findings[0].message


def test_the_files_digest_covers_every_file_but_the_downloads_own_metadata(tmp_path):
    from miret_governance.flavors.evidence import model_files_digest

    (tmp_path / "sub").mkdir()
    (tmp_path / "MLmodel").write_text("flavors: {}\n")
    (tmp_path / "sub" / "model.skops").write_bytes(b"trees")
    digest = model_files_digest(tmp_path)
    (tmp_path / "registered_model_meta").write_text("model_name: credit-rf\n")
    assert model_files_digest(tmp_path) == digest  # written by MLflow's download
    for change in (
        lambda: (tmp_path / "sub" / "registered_model_meta").write_text("x"),  # not the download's
        lambda: (tmp_path / "MLmodel").write_text("flavors: {sklearn: {}}\n"),
        lambda: (tmp_path / "sub" / "model.skops").write_bytes(b"other trees"),
    ):
        change()
        assert model_files_digest(tmp_path) != digest
        digest = model_files_digest(tmp_path)


def test_evidence_without_the_ensemble_files_digest_is_refused(store, tmp_path):
    uri = explained(store, tmp_path, pin_files=False)
    with pytest.raises(GateError, match="does not record a digest of the ensemble's model files"):
        gate_model_version(uri, trusted_default())


def _edited_metrics(model_dir, manifest):
    provenance = manifest["provenance"]
    metrics = dict(provenance["metrics"], test_fidelity=0.99)
    rewrite_evidence(model_dir, dict(manifest, provenance=dict(provenance, metrics=metrics)))


@pytest.mark.parametrize(
    "edit, message",
    [
        (_edited_metrics, "is not the evidence its explain run"),
        (
            lambda d, m: (d / "surrogate.json").write_text(
                (d / "surrogate.json").read_text().replace("-1.0", "-2.0")
            ),
            "edited: surrogate.json",
        ),
        (lambda d, m: (d / "evidence.json").write_text("{"), "evidence.json was modified"),
        (lambda d, m: (d / "evidence.json").unlink(), "has no verifiable evidence.json"),
    ],
    ids=["evidence-rewritten", "surrogate-edited", "evidence-garbled", "evidence-missing"],
)
def test_tampered_artifacts_are_refused(store, tmp_path, edit, message):
    uri = explained(store, tmp_path, edit=edit)
    with pytest.raises(GateError, match="cannot be trusted|is not the evidence") as error:
        gate_model_version(uri, trusted_default())
    assert message in str(error.value)
    assert "govern explain --model-uri models:/credit-rf/1" in str(error.value)


def test_feature_count_is_recomputed_from_the_surrogate(store, tmp_path):
    uri = explained(store, tmp_path, metrics=dict(GOOD, n_features_used=1))
    with pytest.raises(GateError, match="says n_features_used = 1, but its surrogate.json uses 2"):
        gate_model_version(uri, trusted_default())


def test_evidence_of_unrecorded_data_is_refused(store, tmp_path):
    uri = explained(store, tmp_path, data_digest="0" * 8)
    with pytest.raises(GateError, match="names data digest '00000000', which its explain run"):
        gate_model_version(uri, trusted_default())


def test_cli_gate_exit_codes(store, tmp_path):
    runner = CliRunner()
    passing = explained(store, tmp_path)
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
    assert "found.." not in result.output and "not found. Browse" in " ".join(result.output.split())
    result = CliRunner().invoke(cli(), ["gate", "--model-uri", "models:/lonely@nope"])
    assert result.exit_code == 2 and ".." not in result.output.replace("...", "")


def test_unreachable_server_fails_fast():
    import time

    port = free_port()  # nothing listens there
    started = time.time()
    result = CliRunner().invoke(
        cli(), ["gate", "--model-uri", "models:/x/1", "--tracking-uri", f"http://127.0.0.1:{port}"]
    )
    assert result.exit_code == 2
    assert f"the tracking server http://127.0.0.1:{port} refused the connection" in result.output
    assert time.time() - started < 10
