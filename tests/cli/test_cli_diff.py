"""``govern diff`` through the command line: output, the JSON schema and exit codes 0/2."""

import json

import pytest
from diff_store import FEATURES, explained_pair, use_copy
from mlflow_store import register_wisconsin_rf
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.flavors.gates.diff import diff_versions

pytest_plugins = ["mlflow_store"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory, migrated_store, breast_cancer):
    return explained_pair(tmp_path_factory.mktemp("cli-diff"), migrated_store, breast_cancer)


@pytest.fixture
def govern(pair, tmp_path, monkeypatch):
    """``govern diff *args`` against a copy of the pair's store."""
    uri = use_copy(pair, tmp_path, monkeypatch)

    def invoke(*args):
        return CliRunner().invoke(
            app, ["diff", *args, "--tracking-uri", uri], env={"COLUMNS": "200"}
        )

    return invoke


def test_diff_prints_the_figures_and_exits_0(govern, pair):
    rows = pair["root"] / "rows.csv"
    result = govern(
        "--from", "models:/credit-rf/1", "--to", "models:/credit-rf/2", "--data", str(rows)
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    # what changed in the rules and features first, then the figures
    changed = (
        "what changed in the rules: 0 with thresholds moved, 2 added, 3 removed, 0 unchanged\n"
        "  added:   if -0.000308·worst area - 1.54·worst concave points <= -0.4367 then 0\n"
        "  added:   if -0.000308·worst area - 1.54·worst concave points > -0.4367 then 1\n"
        "  removed: if worst area < 806.3 and mean texture < 21.66 then 1\n"
        "  removed: if worst area < 806.3 and mean texture >= 21.66 then 0\n"
        "  removed: if worst area >= 806.3 then 0\n"
        "features gained: worst concave points; lost: mean texture\n"
        "change in the ensembles' feature use (VITE) 0.375 (explanation_drift: "
    )
    assert changed in result.stdout
    assert "VITE level frequency changes, largest first" in text
    assert "mean texture │ 1 │ 50.0% │ 20.0% │ -30.0 pts" in text
    assert "Rules side by side" in text
    # the surrogates' figures, as flavors.diff computes them (tested there)
    drift = diff_versions("models:/credit-rf/1", "models:/credit-rf/2", data=rows).drift
    assert (
        f"features used by both surrogates: {', '.join(drift.shared) or 'none'}; only before: "
        f"{', '.join(drift.only_from) or 'none'}; only after: {', '.join(drift.only_to) or 'none'} "
        f"(overlap {drift.overlap:.3f}, Jaccard)"
    ) in text
    cross = drift.cross_fidelity
    assert (
        f"cross-fidelity on 569 rows: {100 * cross.from_on_to / 569:.1f}% ({cross.from_on_to}) of "
        f"the earlier surrogate agree with the later ensemble, {100 * cross.to_on_from / 569:.1f}% "
        f"({cross.to_on_from}) of the later surrogate with the earlier ensemble; the smaller, "
        f"{cross.value:.3f}, is what min_cross_fidelity gates on"
    ) in text
    blind = govern("--from", "models:/credit-rf/1", "--to", "models:/credit-rf/2")
    assert blind.exit_code == 0 and "cross-fidelity needs --data" in blind.stdout


def test_json_schema(govern, pair):
    rows = str(pair["root"] / "rows.csv")
    result = govern(
        "--from", "models:/credit-rf/1", "--to", "models:/credit-rf/2", "--data", rows, "--json"
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document) == {
        "command",
        "schema_version",
        "from",
        "to",
        "distance",
        "changes",
        "features",
        "rules",
        "rule_changes",
        "cross_fidelity",
        "data",
    }
    assert set(document["rule_changes"]) == {
        "added",
        "removed",
        "moved",
        "unchanged",
        "gained",
        "lost",
    }
    assert (document["command"], document["schema_version"]) == ("diff", 1)
    assert document["to"]["ensemble_uri"] == "models:/credit-rf/2"
    assert document["distance"] == pytest.approx(0.375, abs=1e-12)
    assert document["changes"][0] == {
        "feature": "mean texture",
        "level": 1,
        "from": 0.5,
        "to": 0.2,
        "change": pytest.approx(-0.3, abs=1e-12),
    }
    assert document["features"]["overlap"] == len(document["features"]["shared"]) / len(
        {
            *document["features"]["shared"],
            *document["features"]["only_from"],
            *document["features"]["only_to"],
        }
    )
    assert document["cross_fidelity"]["rows"] == 569 and document["data"]["rows"] == 569


def test_errors_exit_2_and_name_the_fix(govern, breast_cancer):
    bad = govern("--from", "credit-rf/1", "--to", "models:/credit-rf/2")
    assert bad.exit_code == 2 and bad.stdout == ""
    assert "is not a registered model version; use models:/<name>/<version>" in bad.stderr
    register_wisconsin_rf(breast_cancer, FEATURES, rows=150, n_estimators=5)  # version 3
    unexplained = govern("--from", "models:/credit-rf/1", "--to", "models:/credit-rf/3", "--json")
    assert unexplained.exit_code == 2 and unexplained.stdout == ""
    message = " ".join(unexplained.stderr.split())
    assert (
        "--to models:/credit-rf/3: the explanation of models:/credit-rf/3 cannot be used" in message
    )
    assert (
        "explain it first: govern explain --model-uri models:/credit-rf/3 --data <file>" in message
    )
    missing = govern("--from", "models:/credit-rf/1", "--to", "models:/credit-rf/9")
    assert missing.exit_code == 2 and "models:/credit-rf/9 was not found" in missing.stderr
    no_file = govern(
        "--from", "models:/credit-rf/1", "--to", "models:/credit-rf/2", "--data", "nope.csv"
    )
    assert no_file.exit_code == 2 and "--data nope.csv does not exist" in no_file.stderr
