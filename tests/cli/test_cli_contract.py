"""The CLI contract for CI: --version, exit codes, --json schemas, files checked before
anything heavy is imported, one exception root, the literal defaults of the help."""

import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
from importlib.metadata import version

import pandas as pd
import pytest
import typer
from gate_store import explained
from mlflow_store import register_sklearn
from signing_keys import keys_toml
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from typer.testing import CliRunner

from miret_governance.cli import common
from miret_governance.cli.app import app
from miret_governance.governance.errors import CheckFailedError, GovernanceError
from miret_governance.governance.trust.policy import GATE_TABLE

pytest_plugins = ["mlflow_store"]
HEAVY = (
    "mlflow",
    "sklearn",
    "pandas",
    "numpy",
    "scipy",
    "great_expectations",
    "matplotlib",
    # every room of MIRET but the solvers' shared definitions (the shown time limit)
    "miret_governance.governance.miret.fit",
    "miret_governance.governance.miret.problem",
    "miret_governance.governance.miret.milp",
    "miret_governance.governance.miret.heuristics",
    "miret_governance.governance.miret.tree",
    "miret_governance.governance.miret.solvers.highs",
    "miret_governance.governance.miret.solvers.gurobi",
    "miret_governance.governance.miret.solvers.table",
)
PROBE = """\
import sys
from miret_governance.cli.app import app
try:
    app(sys.argv[1:], prog_name="govern")
except SystemExit as done:
    code = done.code
print("PROBE", code, ",".join(m for m in {heavy!r} if m in sys.modules))
"""
GATE_KEYS = {
    "command",
    "schema_version",
    "passed",
    "exit_code",
    "ensemble_uri",
    "surrogate_uri",
    "policy",
    "policy_digest",
    "evidence_digest",
    "run_id",
    "time",
    "data",
    "gates",
}


def probe(*args, cwd) -> tuple[int, str, list[str], str]:
    """Run ``govern *args`` in a fresh interpreter: exit code, stdout before the probe
    line, the heavy modules imported by then, stderr."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    out, _, last = done.stdout.rstrip("\n").rpartition("\n")
    _, code, heavy = (last.split(" ") + [""])[:3]
    return int(code), out, [m for m in heavy.split(",") if m], done.stderr


def invoke(*args):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_version_and_help_import_nothing_heavy(tmp_path):
    code, out, heavy, _ = probe("--version", cwd=tmp_path)
    assert (code, heavy) == (0, [])
    assert out == f"govern {version('miret-governance')} (mlflow {version('mlflow')})"
    code, out, heavy, _ = probe("--help", cwd=tmp_path)
    assert (code, heavy) == (0, []) and "Exit codes" in out


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["explain", "--model-uri", "models:/m/1", "--data", "nowhere.csv"], "--data nowhere.csv"),
        (["validate", "--model-uri", "models:/m/1", "--data", "nowhere.csv"], "--data nowhere.csv"),
        (
            ["explain", "--model-uri", "models:/m/1", "--data", "t.csv", "--test-data", "no.pq"],
            "--test-data no.pq",
        ),
        (["gate", "--model-uri", "models:/m/1", "--policy", "none.toml"], "--policy none.toml"),
        (["promote", "--model-uri", "models:/m/1", "--alias", "a", "--policy", "."], "--policy ."),
    ],
)
def test_a_missing_file_exits_2_before_anything_is_imported(args, named, tmp_path):
    (tmp_path / "t.csv").write_text("x\n1\n")
    code, out, heavy, err = probe(*args, "--tracking-uri", "http://127.0.0.1:9", cwd=tmp_path)
    assert (code, out, heavy) == (2, "", [])
    problem = "is a directory" if named.endswith(" .") else "does not exist"
    assert err.startswith(f"error: {named} {problem}; give the path of a readable ")


@pytest.mark.parametrize("given", ["2.5", "-1", "deep", "9"])
def test_a_bad_depth_exits_2_naming_the_accepted_values_before_anything_is_imported(
    given, tmp_path
):
    (tmp_path / "data.csv").write_text("x\n1\n")
    args = ("explain", "--model-uri", "models:/m/1", "--data", "data.csv", "--depth", given)
    code, out, heavy, err = probe(*args, "--tracking-uri", "http://127.0.0.1:9", cwd=tmp_path)
    assert (code, out, heavy) == (2, "", [])
    assert err.startswith(
        "error: --depth must be a whole number from 1 to 8, 0 (the ensemble's depth, at most "
        f"4) or auto (chosen on held-out folds); got '{given}'"
    ), err


def test_options_are_checked_before_connecting(tmp_path):
    (tmp_path / "data.csv").write_text("x\n1\n")
    cases = (
        (["show", "--model-uri", "credit-rf"], "models:/<name>/<version>"),
        (
            ["validate", "--model-uri", "models:/m", "--data", "data.csv"],
            "models:/<name>/<version>",
        ),
        (["gate", "--model-uri", "runs:/abc/model"], "'runs:/abc/model' is not a registered"),
        (["promote", "--model-uri", "models:/m/1", "--alias", "v1"], "alias 'v1' is not valid"),
        (["explain", "--model-uri", "models:/m/1", "--data", "data.csv", "--depth", "9"], "depth"),
    )
    for args, message in cases:
        done = invoke(*args, "--tracking-uri", "http://127.0.0.1:9")
        assert done.exit_code == 2 and done.stderr.count("error: ") == 1, done.output
        assert message in done.stderr and "unreachable" not in done.stderr, done.stderr


def test_help_documents_exit_codes_once_and_each_json_schema():
    main = invoke("--help")
    assert main.exit_code == 0
    text = " ".join(main.output.split())
    assert "Exit codes, the same for every command: 0 done (every check passed); 1 a check " in text
    assert "2 the request could not be carried out" in text
    for command in ("show", "gate", "validate"):
        helped = " ".join(invoke(command, "--help").output.split())
        assert f'--json prints {{"command": "{command}", "schema_version": 1' in helped
    for command in ("explain", "validate", "gate", "promote", "pipeline", "show"):
        assert "Exit codes:" not in invoke(command, "--help").output, command


def test_command_help_is_a_one_line_summary_then_paragraphs_the_terminal_wraps():
    """typer's rich help keeps a docstring's line breaks: a summary wrapped for the source
    broke mid-sentence in the command list (``show``: "...and the gate and promotion" /
    "status of its ensemble, ...") and ragged in a terminal narrower than the source."""

    def narrow(*args):
        return CliRunner().invoke(app, list(args), env={"COLUMNS": "80"}).output

    listed = narrow("--help")
    for name, command in typer.main.get_command(app).commands.items():
        summary, *details = command.help.split("\n\n")
        assert len(summary) <= 90 and summary.endswith("."), (name, summary)
        assert all("\n" not in paragraph for paragraph in details), name
        row = next(line for line in listed.splitlines() if line.startswith(f"│ {name} "))
        assert summary.split()[0] in row, (name, row)
    fragments = {"also", "succeeds; the", "gate"}  # the ragged line ends of promote's
    assert not fragments & {line.strip() for line in narrow("promote", "--help").splitlines()}


def test_file_options_are_one_shared_type():
    group = typer.main.get_command(app)
    helps = {}
    for name, command in group.commands.items():
        for param in command.params:
            if param.opts[0] in common.FILE_KINDS:
                shared = param.callback is not None and param.metavar == "FILE"
                assert shared, (
                    f"govern {name} {param.opts[0]}: use common.DataFile, TestDataFile or PolicyFile"
                )
                helps.setdefault(param.opts[0], set()).add(param.help)
    assert set(helps) >= {"--data", "--policy", "--test-data"}
    assert all(len(texts) == 1 for flag, texts in helps.items()), helps


def test_literal_defaults_are_the_estimators():
    from miret_governance.flavors.errors import ExplainError
    from miret_governance.flavors.explain.defaults import AUTO_DEPTH, ENSEMBLE_DEPTH
    from miret_governance.flavors.explain.fit_params import FitParams
    from miret_governance.flavors.explain.request import MIN_TEST_ROWS
    from miret_governance.governance.miret import MiretSearchCV, MiretSurrogate
    from miret_governance.governance.miret.fit.search_cv import CANDIDATE_CAP
    from miret_governance.governance.miret.solvers.solve_result import (
        DEFAULT_TIME_LIMIT,
        SolverOptions,
    )
    from miret_governance.governance.miret.solvers.table import solve

    params = MiretSurrogate().get_params()
    assert common.DEFAULTS == {name: params[name] for name in common.DEFAULTS}
    # the time limit is defined once and every layer reads it
    time_limits = {
        params["time_limit"],
        common.DEFAULTS["time_limit"],
        SolverOptions().time_limit,
        inspect.signature(solve).parameters["time_limit"].default,
        FitParams().time_limit,
    }
    assert time_limits == {DEFAULT_TIME_LIMIT}
    explain = typer.main.get_command(app).commands["explain"]
    limit = next(p for p in explain.params if p.name == "time_limit")
    assert limit.default == DEFAULT_TIME_LIMIT
    # --depth's default is an explicit depth (the ensemble's, at most 4), defined once;
    # auto is the estimator's depth=None (chosen on held-out folds)
    depth = next(p for p in explain.params if p.name == "depth")
    assert depth.default == str(ENSEMBLE_DEPTH) and FitParams().depth == ENSEMBLE_DEPTH == 0
    assert common.ENSEMBLE_DEPTH is ENSEMBLE_DEPTH and common.MIN_TEST_ROWS is MIN_TEST_ROWS
    assert params["depth"] is None
    assert FitParams(depth=None).depth is None and FitParams(depth=AUTO_DEPTH).depth is None
    with pytest.raises(ExplainError, match="depth must be at most 8"):
        FitParams(depth=9)
    search = MiretSearchCV(None).get_params()
    assert common.SEARCH_DEFAULTS == {name: search[name] for name in common.SEARCH_DEFAULTS}
    assert common.CANDIDATE_CAP == CANDIDATE_CAP
    gamma = next(p for p in explain.params if p.name == "gamma_percentile")
    assert gamma.default == params["gamma_percentile"] == 100 / 3  # the exact float is passed
    helped = invoke("explain", "--help").output
    assert "100/3" in helped and "33.333" not in helped


def _exception_classes():
    """Every error class the domain and flavor layers define (signals such as
    ``faults.Interrupted``, a KeyboardInterrupt, and warnings are not errors)."""
    found = {}
    layers = [importlib.import_module(f"miret_governance.{n}") for n in ("governance", "flavors")]
    modules = [pkgutil.walk_packages(m.__path__, f"{m.__name__}.") for m in layers]
    for module in (module for layer in modules for module in layer):
        if module.name.endswith("__main__"):
            continue
        loaded = importlib.import_module(module.name)
        for _, cls in inspect.getmembers(loaded, inspect.isclass):
            is_error = issubclass(cls, Exception) and not issubclass(cls, Warning)
            if cls.__module__ == module.name and is_error:
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def test_one_exception_root_and_each_class_names_its_exit_code():
    classes = _exception_classes()
    assert {
        "miret_governance.governance.trust.policy.PolicyError",
        "miret_governance.governance.ensembles.trees.UnsupportedModelError",
        "miret_governance.governance.ensembles.trees.MalformedModelError",
        "miret_governance.governance.data.tables.TableError",
        "miret_governance.governance.miret.solvers.gurobi.GurobiUnavailable",
        "miret_governance.flavors.gates.gate_evidence.EvidenceError",
        "miret_governance.flavors.evidence.TamperedModelError",
        "miret_governance.flavors.errors.ValidationFailedError",
        "miret_governance.flavors.errors.GateError",
    } <= set(classes)
    for name, cls in classes.items():
        assert issubclass(cls, GovernanceError), name
        code = common.exit_code(cls.__new__(cls))
        assert f"Exit code {code}" in (cls.__doc__ or ""), name
    assert issubclass(
        classes["miret_governance.flavors.errors.ValidationFailedError"], CheckFailedError
    )
    assert common.exit_code(OSError("disk")) == common.exit_code(KeyError("x")) == 2


@pytest.fixture
def gated(store, tmp_path):
    """A linked, evidenced surrogate (test fidelity 0.95, 2 features) of credit-rf v1."""
    return explained(store, tmp_path)


def test_gate_and_show_json(gated, tmp_path):
    passed = invoke("gate", "--model-uri", gated, "--json")
    assert passed.exit_code == 0, passed.output
    document = json.loads(passed.stdout)
    assert set(document) == GATE_KEYS
    assert document["command"] == "gate" and document["schema_version"] == 1
    assert document["data"] is None  # no --data: the record names no rows
    assert (document["passed"], document["exit_code"]) == (True, 0)
    assert document["ensemble_uri"] == "models:/credit-rf/1"
    assert document["surrogate_uri"] == "models:/credit-rf-surrogate/1"
    gates = {g["name"]: g for g in document["gates"]}
    assert gates["min_fidelity"] == {
        "name": "min_fidelity",
        "metric": "test_fidelity",
        "comparison": ">=",
        "threshold": 0.9,
        "value": 0.95,
        "passed": True,
        "reason": gates["min_fidelity"]["reason"],
        "advice": None,
    }
    assert (gates["max_features"]["value"], gates["max_features"]["threshold"]) == (2, 5)
    assert set(gates) == {"min_fidelity", "max_features", "require_validation_pass"}

    strict = tmp_path / "strict.toml"
    strict.write_text("[gates]\nmin_fidelity = 0.99\n" + keys_toml())
    advice = GATE_TABLE["min_fidelity"]
    expected = f"It measures {advice.meaning}. To meet it, {advice.remedy}."
    printed = invoke("gate", "--model-uri", gated, "--policy", str(strict))
    assert printed.exit_code == 1 and "warning: policy" not in printed.stderr
    assert f"FAIL min_fidelity: test_fidelity = 0.95 does not meet >= 0.99\n  {expected}\n" in (
        printed.stdout
    )
    failed = invoke("gate", "--model-uri", gated, "--policy", str(strict), "--json")
    assert failed.exit_code == 1, failed.output
    verdict = json.loads(failed.stdout)
    assert (verdict["passed"], verdict["exit_code"]) == (False, 1)
    assert [g["name"] for g in verdict["gates"] if not g["passed"]] == ["min_fidelity"]
    assert {g["name"]: g["advice"] for g in verdict["gates"]} == {
        "max_features": None,
        "min_fidelity": expected,  # what the figure measures and what to do
        "require_validation_pass": None,
    }

    shown = invoke("show", "--model-uri", gated, "--json")
    assert shown.exit_code == 0, shown.output
    summary = json.loads(shown.stdout)
    assert set(summary) == {
        "command",
        "schema_version",
        "surrogate_uri",
        "surrogate_model_id",
        "ensemble_uri",
        "aliases",
        "status",
        "last_gate",
        "validation",
        "rules",
        "metrics",
        "solve",
        "signed_by",
        "approvals",
    }
    assert (summary["command"], summary["schema_version"]) == ("show", 1)
    assert summary["signed_by"]["name"] == "test-ci" and summary["approvals"] == []
    assert summary["surrogate_uri"] == "models:/credit-rf-surrogate/1"
    assert summary["ensemble_uri"] == "models:/credit-rf/1" and summary["aliases"] == []
    assert summary["status"] == {
        "governance.last_gate": "FAIL",
        "governance.last_gate.run": verdict["run_id"],
    }  # a what-if gate: the JSON names it so, with its policy
    assert summary["last_gate"] == {
        "result": "FAIL",
        "policy": verdict["policy"],
        "alias": None,
        "run_id": verdict["run_id"],
    }
    assert "x0" in summary["rules"] and "x1" in summary["rules"]


def test_json_errors_leave_stdout_empty(store):
    done = invoke("gate", "--model-uri", "models:/nope/1", "--json")
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and "nope/1" in done.stderr


def test_validate_json(store, tmp_path):
    frame = pd.DataFrame({"a": [0.0, 1, 2, 3, 4, 5, 6, 7], "b": [1.0, 0, 1, 0, 1, 0, 1, 0]})
    forest = RandomForestClassifier(n_estimators=2, max_depth=2, random_state=0)
    pipe = make_pipeline(MinMaxScaler(), forest).fit(frame, [0, 0, 0, 0, 1, 1, 1, 1])
    register_sklearn(pipe, "credit-rf", experiment_id=store)
    frame.to_csv(tmp_path / "clean.csv", index=False)
    frame.assign(a=frame["a"] + 100).to_csv(tmp_path / "drift.csv", index=False)

    clean = invoke(
        "validate", "--model-uri", "models:/credit-rf/1", "--data", "clean.csv", "--json"
    )
    assert clean.exit_code == 0, clean.output
    document = json.loads(clean.stdout)
    assert set(document) == {
        "command",
        "schema_version",
        "passed",
        "exit_code",
        "model_uri",
        "data",
        "rows",
        "mostly",
        "expectations",
        "failures",
        "report",
    }
    assert (document["command"], document["schema_version"]) == ("validate", 1)
    assert (document["passed"], document["exit_code"], document["rows"]) == (True, 0, 8)
    assert document["data"] == "clean.csv" and document["failures"] == []
    expectations = document["expectations"]
    assert expectations["evaluated"] == expectations["successful"] > 0

    drift = invoke(
        "validate", "--model-uri", "models:/credit-rf/1", "--data", "drift.csv", "--json"
    )
    assert drift.exit_code == 1, drift.output
    verdict = json.loads(drift.stdout)
    assert (verdict["passed"], verdict["exit_code"]) == (False, 1)
    assert {f["column"] for f in verdict["failures"]} == {"a"}
    assert verdict["expectations"]["successful"] < verdict["expectations"]["evaluated"]
