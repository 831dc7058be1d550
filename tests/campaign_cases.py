"""The bad-input campaign of issue 8: what ``govern`` is asked, and how it must refuse.

:data:`CASES` is one table: for each bad input (data, model, parameters, URI, policy,
artifacts, faults) the exit code, a regular expression the message must match (it names
the problem), and what the store may record. :func:`run_case` runs one case against a
store built by :func:`campaign_store.build_campaign`, snapshotting the store around it.

``tests/cli/test_campaign.py`` asserts every case; ``examples/campaign_table.py`` prints
the same cases as a Markdown table.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from campaign_store import Campaign, StoreSnapshot
from signing_keys import keys_toml

LENIENT_POLICY = (
    "[gates]\nmin_fidelity = 0.0\nmax_features = 100\nrequire_validation_pass = true\n"
    + keys_toml()
)
"""Only the validation gate can fail: a refusal must come from the evidence itself."""


# ---------------------------------------------------------------------- the cases
def _csv(transform: Callable[[pd.DataFrame], pd.DataFrame], name: str = "input.csv"):
    """A ``prepare`` step: write ``transform(campaign data)`` as CSV to ``{case}/name``."""

    def prepare(folder: Path, campaign: Campaign) -> None:
        transform(campaign.frame.copy()).to_csv(folder / name, index=False)

    return prepare


def _bytes(content: bytes, name: str):
    def prepare(folder: Path, campaign: Campaign) -> None:
        (folder / name).write_bytes(content)

    return prepare


def _text(transform: Callable[[str], str], name: str = "input.csv"):
    """A ``prepare`` step: the campaign data as CSV text, transformed, to ``{case}/name``."""

    def prepare(folder: Path, campaign: Campaign) -> None:
        text = campaign.frame.to_csv(index=False)
        (folder / name).write_text(transform(text), encoding="utf-8")

    return prepare


def _policy(text: str):
    return _bytes(text.encode(), "policy.toml")


def _set(column, rows, value):
    def transform(frame):
        frame[column] = frame[column].astype(object)
        frame.loc[frame.index[rows], column] = value
        return frame

    return transform


def _lenient_policy(folder: Path, campaign: Campaign) -> None:
    (folder / "policy.toml").write_text(LENIENT_POLICY)


def _duplicated(frame):
    frame.insert(1, "mean radius ", frame["mean radius"] * 2)
    return frame.rename(columns={"mean radius ": "mean radius"})


def _latin1(folder: Path, campaign: Campaign) -> None:
    frame = campaign.frame.rename(columns={"mean texture": "mean texture é"})
    frame.to_csv(folder / "input.csv", index=False, encoding="latin-1")


@dataclass(frozen=True)
class Case:
    """One bad input and the refusal it must get.

    Attributes
    ----------
    name : str
    area : str
        data, model, parameters, uri, policy, artifacts or faults.
    argv : tuple of str
        ``govern`` arguments; ``{case}`` is the case's folder, other placeholders come
        from :attr:`Campaign.places`.
    exit_code : int
        2 an error, 1 a failed validation or gate.
    message : str
        Regular expression the output must match (it names the problem).
    records : str
        What the store may record: see :meth:`StoreSnapshot.changes`.
    prepare : callable, optional
        ``prepare(folder, campaign)`` writes the case's input files.
    marker : str
        Placeholder of a file whose existence proves code from an artifact ran.
    subprocess : bool
        Run ``python -m cli`` in a subprocess (network faults), not in-process.
    """

    name: str
    area: str
    argv: tuple
    exit_code: int
    message: str
    records: str = "nothing"
    prepare: Callable | None = None
    marker: str = ""
    subprocess: bool = False


def _explain(*extra, model="models:/campaign-rf/1", data="{case}/input.csv", target="label"):
    argv = ["explain", "--model-uri", model, "--data", data, "--time-limit", "2"]
    argv += ["--min-test-rows", "1"]
    return tuple(argv + (["--target", target] if target else []) + list(extra))


def _validate(*extra, model="models:/campaign-rf/1", data="{case}/input.csv", target="label"):
    argv = ["validate", "--model-uri", model, "--data", data]
    return tuple(argv + (["--target", target] if target else []) + list(extra))


def _gate(model="models:/campaign-rf/1", policy="{case}/policy.toml", command="gate"):
    argv = [command, "--model-uri", model, "--policy", policy]
    return tuple(argv + (["--alias", "champion"] if command == "promote" else []))


GOOD = "{data}"
_OVERSIZE = "[gates]\nmin_fidelity = 0.9\n" + "# padding\n" * 10_000

# One case per entry, laid out as a table (ruff format would spread each over 8 lines).
# fmt: off
CASES = (
    # ------------------------------------------------------------------ data
    Case("missing column", "data", _explain(), 1, r"worst area",
         "runs", _csv(lambda f: f.drop(columns=["worst area"]))),
    Case("renamed column", "data", _explain(), 1, r"mean texture",
         "runs", _csv(lambda f: f.rename(columns={"mean texture": "texture"}))),
    Case("duplicated column", "data", _explain(), 2, r"duplicate column.*mean radius",
         prepare=_csv(_duplicated)),
    Case("duplicated column (validate)", "data", _validate(), 2,
         r"duplicate column.*mean radius", prepare=_csv(_duplicated)),
    Case("inf feature", "data", _explain(), 1, r"mean smoothness.*(inf|finite)",
         "runs", _csv(_set("mean smoothness", [5], np.inf))),
    Case("3 classes", "data", _explain(), 1, r"label.*3 classes",
         "runs", _csv(_set("label", [0, 1, 2], 2))),
    Case("3 classes (validate)", "data", _validate(), 1, r"label.*3 classes",
         prepare=_csv(_set("label", [0, 1, 2], 2))),
    Case("string labels", "data", _explain(), 1, r"label.*'(yes|no)'.*classes",
         "runs", _csv(lambda f: f.assign(label=np.where(f["label"] == 1, "yes", "no")))),
    Case("string labels (validate)", "data", _validate(), 1, r"label.*'(yes|no)'.*classes",
         prepare=_csv(lambda f: f.assign(label=np.where(f["label"] == 1, "yes", "no")))),
    Case("mixed labels", "data", _explain(), 1, r"label.*maybe",
         "runs", _csv(_set("label", [4], "maybe"))),
    Case("float labels 0.5", "data", _explain(), 1, r"label.*0\.5.*classes",
         "runs", _csv(lambda f: f.assign(label=f["label"] * 0.5))),
    Case("label missing values", "data", _explain(), 1, r"label.*(missing|null)",
         "runs", _csv(_set("label", [8], np.nan))),
    Case("non-UTF-8 file", "data", _explain(), 2, r"UTF-8", prepare=_latin1),
    Case("non-UTF-8 file (validate)", "data", _validate(), 2, r"UTF-8", prepare=_latin1),
    Case("wrong delimiter", "data", _explain(), 2, r"(delimiter|single column).*",
         prepare=_text(lambda t: t.replace(",", ";"))),
    Case("directory as data", "data", _explain(data="{case}"), 2, r"is a directory"),
    Case("empty file", "data", _explain(), 2, r"empty", prepare=_bytes(b"", "input.csv")),
    Case("header only", "data", _explain(), 2, r"\b0 rows|no (data )?rows",
         prepare=_text(lambda t: t.splitlines()[0] + "\n")),
    Case("missing file", "data", _explain(data="{case}/nowhere.csv"), 2,
         r"nowhere\.csv.*(no such file|does not exist)"),
    Case("missing label column", "data", _explain(target="outcome", data=GOOD), 2,
         r"no label column 'outcome'"),
    Case("label value with markup [/]", "data", _explain(), 1, re.escape("'[/]'"),
         "runs", _csv(_set("label", [2], "[/]"))),
    Case("mathtext target name", "data", _explain(target=r"$\frac{a$", data=GOOD), 2,
         re.escape(r"'$\\frac{a$'")),
    Case("test data missing column", "data", _explain("--test-data", "{case}/test.csv",
         data=GOOD), 1, r"worst area", "runs",
         _csv(lambda f: f.drop(columns=["worst area"]), "test.csv")),
    # ------------------------------------------------------------------ model
    Case("regressor", "model", _explain(model="models:/campaign-regressor/1", data=GOOD), 2,
         r"(?i)regress"),
    Case("multi-output model", "model", _explain(model="models:/campaign-multioutput/1",
         data=GOOD, target=""), 2, r"(?i)outputs?"),
    Case("non-tree model", "model", _explain(model="models:/campaign-logistic/1", data=GOOD),
         2, r"LogisticRegression"),
    Case("pickled model, payload", "model", _explain(model="models:/campaign-pickle/1",
         data=GOOD), 2, r"(?s)pickle.*--trust-pickle", marker="pickle_marker"),
    Case("pickled model (validate)", "model", _validate(model="models:/campaign-pickle/1",
         data=GOOD), 2, r"(?s)pickle.*--trust-pickle", marker="pickle_marker"),
    Case("XGBoost with evil model_class", "model", _explain(
         model="models:/campaign-evil/1", data=GOOD, target="outcome"), 2,
         r"outcome|model_class|evil", marker="evil_marker"),
    Case("XGBoost with evil model_class (validate)", "model", _validate(
         model="models:/campaign-evil/1"), 2, r"model_class 'evil", marker="evil_marker",
         prepare=_csv(lambda f: f.drop(columns=["worst area"]))),
    Case("show an unexplained ensemble", "model",
         ("show", "--model-uri", "models:/campaign-xgb/1"), 2, r"no linked surrogate"),
    # ------------------------------------------------------------------ parameters
    Case("--alpha nan", "parameters", _explain("--alpha", "nan", data=GOOD), 2, r"alpha"),
    Case("negative --time-limit", "parameters", _explain("--time-limit", "-5", data=GOOD),
         2, r"time.limit"),
    Case("--depth 9", "parameters", _explain("--depth", "9", data=GOOD), 2, r"depth"),
    Case("--depth -1", "parameters", _explain("--depth", "-1", data=GOOD), 2, r"depth"),
    Case("--max-rows 0", "parameters", _explain("--max-rows", "0", data=GOOD), 2,
         r"max.rows"),
    Case("--gamma-percentile 150", "parameters",
         _explain("--gamma-percentile", "150", data=GOOD), 2, r"gamma"),
    Case("unknown --solver", "parameters", _explain("--solver", "cplex", data=GOOD), 2,
         r"cplex"),
    Case("--registered-name a/b", "parameters",
         _explain("--registered-name", "a/b", data=GOOD), 2, r"a/b"),
    Case("--registered-name with quotes", "parameters",
         _explain("--registered-name", "o'neil\"s", data=GOOD), 2, r"contains both"),
    Case("three --class-names", "parameters",
         _explain("--class-names", "a,b,c", data=GOOD), 2, r"class names"),
    Case("bad --alias", "parameters", ("promote", "--model-uri", "models:/campaign-rf/1",
         "--alias", "v1"), 2, r"alias 'v1'"),
    # ------------------------------------------------------------------ URIs
    Case("URI without version", "uri", _explain(model="models:/campaign-rf", data=GOOD), 2,
         re.escape("models:/<name>/<version>")),
    Case("unknown alias", "uri", _explain(model="models:/campaign-rf@nosuch", data=GOOD), 2,
         r"nosuch"),
    Case("unknown version", "uri", _explain(model="models:/campaign-rf/99", data=GOOD), 2,
         r"campaign-rf/99.*not found"),
    Case("not a models: URI", "uri", _explain(model="runs:/abc/model", data=GOOD), 2,
         r"runs:/abc/model"),
    Case("quotes in model name", "uri", _explain(model="models:/o'neil\"s/1", data=GOOD), 2,
         r"not found|quote"),
    Case("gate without version", "uri", ("gate", "--model-uri", "models:/campaign-rf"), 2,
         re.escape("models:/<name>/<version>")),
    Case("show unknown alias", "uri",
         ("show", "--model-uri", "models:/campaign-rf-surrogate@nosuch"), 2, r"nosuch"),
    Case("gate an unexplained version", "uri", ("gate", "--model-uri", "models:/campaign-xgb/1"),
         2, r"no linked surrogate"),
    # ------------------------------------------------------------------ policy
    Case("oversize policy", "policy", _gate(), 2, r"larger than", prepare=_policy(_OVERSIZE)),
    Case("/dev/zero policy", "policy", _gate(policy="/dev/zero"), 2, r"not a regular file"),
    Case("directory policy", "policy", _gate(policy="{case}"), 2, r"directory"),
    Case("missing policy", "policy", _gate(policy="{case}/none.toml"), 2, r"none\.toml"),
    Case("malformed TOML", "policy", _gate(), 2, r"(?i)toml",
         prepare=_policy("[gates\nmin_fidelity = 0.9\n")),
    Case("non-UTF-8 policy", "policy", _gate(), 2, r"(?i)utf-8|toml|decode",
         prepare=_bytes(b"[gates]\n# caf\xe9\nmin_fidelity = 0.9\n", "policy.toml")),
    Case("unknown gate", "policy", _gate(), 2, r"unknown gates.*min_fidelty",
         prepare=_policy("[gates]\nmin_fidelty = 0.9\n")),
    Case("unknown top-level key", "policy", _gate(), 2, r"unknown top-level keys",
         prepare=_policy("min_fidelity = 0.9\n")),
    Case("wrong type", "policy", _gate(), 2, r"min_fidelity = 'high'",
         prepare=_policy('[gates]\nmin_fidelity = "high"\n')),
    Case("out of range", "policy", _gate(), 2, r"min_fidelity = 1\.5",
         prepare=_policy("[gates]\nmin_fidelity = 1.5\n")),
    Case("bad policy on promote", "policy", _gate(command="promote"), 2, r"max_features",
         prepare=_policy("[gates]\nmax_features = -1\n")),
    # ------------------------------------------------------------------ artifacts
    Case("edited surrogate.json (show)", "artifacts",
         ("show", "--model-uri", "models:/campaign-edited-surrogate/1"), 2,
         r"does not match its signature by key 'test-ci' \(edited: surrogate.json\)"),
    Case("edited surrogate.json (gate)", "artifacts", _gate("models:/campaign-edited/1"), 1,
         r"unverified evidence: .*does not match its signature .*edited: surrogate.json",
         "gate", _lenient_policy),
    Case("forged validation tag (gate)", "artifacts", _gate("models:/campaign-forged/1"), 1,
         r"FAIL\W+require_validation_pass", "gate", _lenient_policy),
    Case("forged validation tag (promote)", "artifacts",
         _gate("models:/campaign-forged/1", command="promote"), 1,
         r"FAIL\W+require_validation_pass", "gate", _lenient_policy),
    Case("fake surrogate linked by tags (gate)", "artifacts", _gate("models:/campaign-fake/1"),
         1, r"unverified evidence: .*is unsigned \(no model.sig\)", "gate", _lenient_policy),
    Case("fake surrogate linked by tags (promote)", "artifacts",
         _gate("models:/campaign-fake/1", command="promote"), 1,
         r"unverified evidence: .*is unsigned \(no model.sig\)", "gate", _lenient_policy),
    # ------------------------------------------------------------------ faults
    Case("closed port (explain)", "faults", _explain(
         "--tracking-uri", "http://127.0.0.1:{closed_port}", data=GOOD), 2, r"refused the connection",
         subprocess=True),
    Case("closed port (show)", "faults", ("show", "--model-uri", "models:/campaign-rf-surrogate/1",
         "--tracking-uri", "http://127.0.0.1:{closed_port}"), 2, r"refused the connection",
         subprocess=True),
    Case("closed port (gate)", "faults", ("gate", "--model-uri", "models:/campaign-rf/1",
         "--tracking-uri", "http://127.0.0.1:{closed_port}"), 2, r"refused the connection",
         subprocess=True),
)
# fmt: on


# ---------------------------------------------------------------------- running
@dataclass(frozen=True)
class Outcome:
    """What one case did: exit code, output, store changes, whether artifact code ran."""

    exit_code: int
    output: str
    changes: list
    code_ran: bool

    def message(self, pattern: str = "") -> str:
        """The first output line matching ``pattern``, else the first error line (or the
        last line)."""
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        named = [line for line in lines if pattern and re.search(pattern, line)]
        errors = [line for line in lines if line.startswith("error:")]
        return (named or errors or lines[-1:] or [""])[0]


def _subprocess(argv: list[str], campaign: Campaign, folder: Path) -> tuple[int, str]:
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": campaign.uri,
        "MLFLOW_REGISTRY_URI": campaign.uri,
        "MLFLOW_EXPERIMENT_ID": campaign.experiment_id,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "COLUMNS": "200",
    }
    done = subprocess.run(
        [sys.executable, "-m", "miret_governance.cli", *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def run_case(case: Case, campaign: Campaign) -> Outcome:
    """Run one case against the campaign's store, snapshotting the store around it."""
    from typer.testing import CliRunner

    from miret_governance.cli.app import app

    (campaign.root / "cases").mkdir(exist_ok=True)
    # a neutral folder name: the case's name in a path must not satisfy its message pattern
    folder = Path(tempfile.mkdtemp(prefix="case-", dir=campaign.root / "cases"))
    if case.prepare is not None:
        case.prepare(folder, campaign)
    places = {"case": str(folder), **campaign.places}
    argv = [re.sub(r"\{(\w+)\}", lambda m: places.get(m[1], m[0]), arg) for arg in case.argv]
    marker = Path(campaign.places[case.marker]) if case.marker else None
    if marker is not None:
        marker.unlink(missing_ok=True)
    before = StoreSnapshot.take(campaign.uri)
    with campaign.active():
        if case.subprocess:
            code, output = _subprocess(argv, campaign, folder)
        else:
            result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
            code, output = result.exit_code, result.output
    after = StoreSnapshot.take(campaign.uri)
    for name, module in list(sys.modules.items()):  # imported from an artifact: forget it,
        if str(getattr(module, "__file__", None) or "").startswith(str(campaign.root)):
            del sys.modules[name]  # so that a later case would run it (and show it) again
    return Outcome(
        exit_code=code,
        output=output,
        changes=before.changes(after, case.records),
        code_ran=marker is not None and marker.exists(),
    )
