"""SIGKILL at seeded random moments of ``govern explain``, ``promote`` and ``approve``, and
the invariants the next run of the same command must restore (issue 38, item 8).

**Store.** A temporary SQLite store with three versions of the demo's forest
(MinMaxScaler + 100-tree depth-3 random forest on the Wisconsin training split, seeds
0, 1, 2), a CI key pair trusted for ``explain`` and ``decide``, a reviewer key pair trusted
for ``approve`` (a policy with ``[approvals]`` may not let one key both decide and
approve) and a policy trusting both, with the gates ``min_fidelity = 0.90``,
``max_features = 5`` and ``require_validation_pass``, and ``[approvals] reviewed = 1``.
Versions 1 and 2 are explained (signed by the CI key); version 1 is promoted to
``@champion``; the reviewer approves version 2 for ``@reviewed``; the audit of the store
is then clean. These unkilled runs of explain
(version 2), promote and approve are the reference durations of the commands. Every
explain uses ``--alpha 0.5 --proximity-threshold 1 --time-limit 5 --max-rows 300`` (no
choice of alpha and m on held-out folds): the kills are about the writes, not the fit,
and the default settings take 40 to 60 s per explain on a loaded 2-core machine.

**Trials.** For each command, N trials: the command starts as a subprocess
(``.venv/bin/govern``, in its own process group, ``MLFLOW_TRACKING_URI`` the store); after
a delay of ``u x`` its typical duration, ``u`` drawn from ``random.Random(seed)`` (one
generator per command: row k is the same relative moment of each command), the whole
group gets SIGKILL. The typical duration is the median of the reference run and the last
re-runs that made the decision or explanation anew (:func:`run_trials`): on a shared
machine a command's duration doubles within minutes, and a fixed reference would aim
every kill at the first half of the command. Then the same command runs again to
completion; when it refuses with "fail closed" (the kill landed between binding a record
to its run and writing the record file: :mod:`flavors.decisions`), ``govern clear`` with
the CI key clears the named record and the command runs once more; finally
``govern audit --json``.

- explain: version 3, ``--seed k+1`` in trial k (a new fit each time; the re-run has the
  same seed, so it reuses the killed run's explanation only when that run finished);
- promote: the version of 1 and 2 that does not hold ``@champion`` (the alias moves each
  trial);
- approve: version 2 for ``@reviewed``, comment ``kill trial k``; after the last trial
  ``govern promote`` of version 2 to ``@reviewed`` must succeed (the approvals still
  count) and the audit be clean.

**Invariants** (a violation each when broken):

- no run of any experiment is RUNNING after the re-run (a killed explain's run is ended by
  the next explain of the version: :func:`flavors.faults.recover_killed_runs`);
- the re-run succeeds, or it is refused with "fail closed" naming a run, ``govern clear``
  clears it and the next re-run succeeds; the audit then lists that run under
  ``cleared``;
- explain: exactly one new surrogate version of version 3 per trial, linked; every
  surrogate version's run FINISHED and its logged model READY (no orphan); no temporary
  folder of the killed process left;
- promote: after the kill, an alias that moved is backed by a verified signed promotion
  record of its new holder; after the re-run, ``@champion`` is on the trial's version,
  named by the latest verified promotion record; the lock
  (``<name>.promotion-lock.champion``) is gone, and when the kill left it, the re-run's
  signed record says it was taken over;
- approve: a verified approval of this trial (its comment) by the reviewer key exists;
- ``govern audit`` after the re-run has no finding (:data:`BY_DESIGN` lists findings a
  kill may leave by design: none).

**Aimed kills** (``--aimed``, after the random ones): a kill at a random moment rarely
lands in the windows where a decision is half-written, a few hundred milliseconds from
creating a decision run to ending it and about one between binding its record and
writing the file. One kill of each command in each of :data:`WINDOWS` watches the store
(its SQLite file and the artifact folder) and kills there (:func:`kill_in_window`),
checked as the random kills are.

Writes ``examples/benchmarks/results_kills.md`` (``--out``; ``--append`` adds this run's
report to it) and exits 1 on any violation.

Run: ``.venv/bin/python examples/benchmarks/kills.py [--trials 30] [--seed 0]
[--commands explain,promote,approve] [--explain-trials N] [--aimed] [--append] [--keep]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

ROOT = Path(__file__).resolve().parents[2]
GOVERN = str(Path(sys.executable).with_name("govern"))
RESULTS = Path(__file__).with_name("results_kills.md")
COMMANDS = ("explain", "promote", "approve")
MODEL = "wisconsin-rf"
SURROGATE = f"{MODEL}-surrogate"
EXPLAINED = "3"
"""The version the explain trials explain (never promoted or approved, so a new
explanation of it supersedes no decision)."""
PROMOTED = ("1", "2")
"""The versions the promote trials move ``@champion`` between."""
APPROVED = "2"
CHAMPION = "champion"
REVIEWED = "reviewed"
EXPLAIN_OPTIONS = (
    "--target", "target", "--class-names", "malignant,benign", "--alpha", "0.5",
    "--proximity-threshold", "1", "--time-limit", "5", "--max-rows", "300",
)  # fmt: skip
GATES = "[gates]\nmin_fidelity = 0.90\nmax_features = 5\nrequire_validation_pass = true\n"
BY_DESIGN: tuple = ()
"""Audit findings (kind, a regular expression of the message) a kill followed by one
successful re-run may leave by design. None: every finding is a violation."""
GOVERNANCE_EXPERIMENTS = (
    "governance-gates",
    "governance-approvals",
    "governance-links",
    "governance-clearances",
)
RECENT = 5
"""Durations (the reference run's, then the re-runs') whose median is a command's typical
duration."""
RUN_ID = re.compile(r"\brun ([0-9a-f]{32})\b")


class SetupError(RuntimeError):
    """The store could not be prepared (a reference run failed or the audit was not clean)."""


# ---------------------------------------------------------------------- the store
@dataclass
class Ran:
    """One finished ``govern`` run."""

    args: tuple
    code: int
    out: str
    err: str
    seconds: float

    @property
    def text(self) -> str:
        """stdout and stderr, whitespace collapsed (rich wraps long lines)."""
        return " ".join(f"{self.out}\n{self.err}".split())

    def tail(self, chars: int = 400) -> str:
        return self.text[-chars:]


@dataclass
class Store:
    """The temporary store, its keys, policy and training rows."""

    root: Path
    policy: Path
    ci_key: Path
    reviewer_key: Path
    data: Path
    references: dict = field(default_factory=dict)
    """Seconds of the unkilled reference run of each command."""
    charged: set = field(default_factory=set)
    """Audit findings already charged to a trial (a later trial is charged only with new
    ones)."""

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.root / 'mlflow.db'}"

    @property
    def temp(self) -> Path:
        """TMPDIR of the commands (an explain's temporary folders land here)."""
        return self.root / "tmp"

    def env(self) -> dict:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID")
        }
        return env | {
            "MLFLOW_TRACKING_URI": self.uri,
            "MLFLOW_REGISTRY_URI": self.uri,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
            "GOVERN_POLICY": str(self.policy),
            "GOVERN_SIGNING_KEY": str(self.ci_key),
            "TMPDIR": str(self.temp),
            "COLUMNS": "200",
        }

    def client(self):
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)

    def trusted(self):
        from miret_governance.governance.trust.policy import load_policy

        return load_policy(self.policy).keys

    def start(self, args, label: str) -> subprocess.Popen:
        """``govern *args`` in its own process group, output to ``logs/<label>.*``."""
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        with open(logs / f"{label}.out", "wb") as out, open(logs / f"{label}.err", "wb") as err:
            return subprocess.Popen(
                [GOVERN, *map(str, args)],
                cwd=self.root,
                env=self.env(),
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    def govern(self, *args, timeout: float = 900) -> Ran:
        """``govern *args`` to completion."""
        begin = time.monotonic()
        done = subprocess.run(
            [GOVERN, *map(str, args)],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            start_new_session=True,
        )
        return Ran(tuple(args), done.returncode, done.stdout, done.stderr, time.monotonic() - begin)

    def audit(self) -> dict:
        """``govern audit --json`` of the model (exit 0 or 1), parsed."""
        ran = self.govern("audit", "--model-name", MODEL, "--json")
        if ran.code not in (0, 1):
            return {"error": f"govern audit exited {ran.code}: {ran.tail()}", "findings": []}
        try:
            return json.loads(ran.out)
        except ValueError:
            return {"error": f"govern audit printed no JSON: {ran.tail()}", "findings": []}


@contextlib.contextmanager
def _mlflow_at(uri: str, folder: Path):
    """MLflow's fluent API pointed at ``uri``, working in ``folder``; then restored."""
    import mlflow

    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    cwd = os.getcwd()
    os.environ["MLFLOW_TRACKING_URI"] = os.environ["MLFLOW_REGISTRY_URI"] = uri
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    os.chdir(folder)
    try:
        yield mlflow
    finally:
        os.chdir(cwd)
        mlflow.set_tracking_uri(None)
        mlflow.set_registry_uri(None)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def build_store(root: Path, log=print) -> Store:
    """The store of the module docstring, with the reference durations measured.

    Raises
    ------
    SetupError
        A reference run failed, or the audit of the prepared store is not clean.
    """
    import mlflow.sklearn
    from sklearn.datasets import load_breast_cancer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import MinMaxScaler

    from miret_governance.governance.trust.signers import generate_key_pair

    root.mkdir(parents=True, exist_ok=True)
    (root / "keys").mkdir(exist_ok=True)
    ci_key, ci_public = generate_key_pair(root / "keys" / "ci")
    reviewer_key, reviewer_public = generate_key_pair(root / "keys" / "reviewer")
    policy = root / "policy.toml"
    policy.write_text(
        'name = "kills"\n'
        + GATES
        + f'\n[keys.ci]\npublic_key = "{ci_public}"\nmay_sign = ["explain", "decide"]\n'
        + f'\n[keys.reviewer]\npublic_key = "{reviewer_public}"\nmay_sign = ["approve"]\n'
        + f"\n[approvals]\n{REVIEWED} = 1\n"
    )
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    X_train, _, y_train, _ = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    data = root / "train.csv"
    X_train.assign(target=y_train).to_csv(data, index=False)
    store = Store(root, policy, ci_key, reviewer_key, data)
    store.temp.mkdir(exist_ok=True)

    with _mlflow_at(store.uri, root) as mlflow:
        experiment = mlflow.MlflowClient().create_experiment(
            "kills", artifact_location=str(root / "mlruns-kills")
        )
        for seed in (0, 1, 2):
            forest = RandomForestClassifier(
                max_depth=3, n_estimators=100, max_features=None, random_state=seed
            )
            model = Pipeline([("scale", MinMaxScaler()), ("forest", forest)])
            model.fit(X_train, y_train)
            with mlflow.start_run(experiment_id=experiment, run_name=f"forest seed {seed}"):
                mlflow.sklearn.log_model(
                    model,
                    name="model",
                    registered_model_name=MODEL,
                    serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_SKOPS,
                    skops_trusted_types=["sklearn.tree._tree.Tree"],
                    pip_requirements=["scikit-learn"],
                )
    log(f"registered {MODEL} versions 1-3 in {store.uri}")

    def reference(command: str, *args) -> Ran:
        ran = store.govern(*args)
        if ran.code != 0:
            raise SetupError(f"govern {' '.join(map(str, args))} exited {ran.code}: {ran.tail()}")
        log(f"  {command}: {ran.seconds:.1f} s")
        return ran

    for version in ("1", "2"):
        ran = reference("explain", *explain_args(store, version, 0))
        store.references["explain"] = ran.seconds  # version 2's: its first fit, as a trial's
    promoted = reference("promote", *promote_args(PROMOTED[0]))
    store.references["promote"] = promoted.seconds
    approved = reference("approve", *approve_args(store, "reference approval"))
    store.references["approve"] = approved.seconds
    audit = store.audit()
    if audit.get("error") or audit.get("findings"):
        raise SetupError(f"the audit of the prepared store is not clean: {audit}")
    return store


def explain_args(store: Store, version: str, seed: int) -> tuple:
    return (
        "explain", "--model-uri", f"models:/{MODEL}/{version}", "--data", store.data,
        *EXPLAIN_OPTIONS, "--seed", str(seed),
    )  # fmt: skip


def promote_args(version: str) -> tuple:
    return ("promote", "--model-uri", f"models:/{MODEL}/{version}", "--alias", CHAMPION)


def approve_args(store: Store, comment: str) -> tuple:
    return (
        "approve", "--model-uri", f"models:/{MODEL}/{APPROVED}", "--alias", REVIEWED,
        "--decision", "approve", "--comment", comment, "--signing-key", store.reviewer_key,
    )  # fmt: skip


# ---------------------------------------------------------------------- store checks
def running_runs(store: Store) -> dict[str, str]:
    """Every run of every experiment that is RUNNING: run id -> description."""
    from mlflow.entities import ViewType

    from miret_governance.flavors.trail.decisions import DIGEST_PARAM

    client = store.client()
    experiments = {
        e.experiment_id: e.name for e in client.search_experiments(view_type=ViewType.ALL)
    }
    runs = client.search_runs(
        list(experiments),
        filter_string="attributes.status = 'RUNNING'",
        run_view_type=ViewType.ALL,
        max_results=1000,
    )
    described = {}
    for run in runs:
        bound = "its record bound" if DIGEST_PARAM in run.data.params else "no record bound"
        described[run.info.run_id] = (
            f"run {run.info.run_id} ({run.info.run_name!r}, experiment "
            f"{experiments.get(run.info.experiment_id)}, {bound}) is left RUNNING"
        )
    return described


def new_governance_runs(store: Store, since_ms: int) -> list[str]:
    """What the governance runs started since ``since_ms`` hold: status and, when their
    record does not verify, why (informational: what the kill left)."""
    from mlflow.entities import ViewType

    from miret_governance.flavors.trail.decisions import read_record

    client, trusted, notes = store.client(), store.trusted(), []
    for name in GOVERNANCE_EXPERIMENTS:
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            continue
        runs = client.search_runs(
            [experiment.experiment_id],
            filter_string=f"attributes.start_time >= {since_ms}",
            run_view_type=ViewType.ALL,
        )
        for run in runs:
            decision = read_record(client, run, trusted)
            what = f"{name.removeprefix('governance-')} run {run.info.run_id[:8]} {run.info.status}"
            if decision.problem:
                block = "BLOCKS" if decision.blocking else "blocks nothing"
                problem = decision.problem.split(" ", 6)[-1][:90]
                what += f" ({block}: {problem})"
            notes.append(what)
    return notes


def verified_records(store: Store, runs) -> list:
    """The verified decision records of ``runs``."""
    from miret_governance.flavors.trail.decisions import read_record

    client, trusted = store.client(), store.trusted()
    return [d for d in (read_record(client, run, trusted) for run in runs) if d.valid]


def champion_records(store: Store) -> list:
    """Verified ``promoted`` records of versions of the model to ``@champion``, oldest
    signed first."""
    from miret_governance.flavors.trail.decisions import promotion_runs, signed_time
    from miret_governance.governance.trust.records import PromotionRecord

    records = [
        d
        for d in verified_records(store, promotion_runs(store.client(), MODEL, CHAMPION))
        if isinstance(d.record, PromotionRecord)
        and d.record.decision == "promoted"
        and d.record.alias == CHAMPION
    ]
    return sorted(records, key=signed_time)


def holder(store: Store, alias: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(store.client().get_model_version_by_alias(MODEL, alias).version)
    except MlflowException:
        return None


def lock_exists(store: Store, alias: str) -> bool:
    from mlflow.exceptions import MlflowException

    from miret_governance.flavors.trail.promotion_lock import lock_name

    try:
        store.client().get_registered_model(lock_name(MODEL, alias))
    except MlflowException:
        return False
    return True


def surrogate_versions(store: Store) -> list:
    from miret_governance.flavors.store.registry import name_filter

    return list(store.client().search_model_versions(name_filter(SURROGATE)))


def orphans(store: Store) -> list[str]:
    """Surrogate versions whose explain run did not finish or whose logged model is not
    READY, or that name no ensemble version."""
    from mlflow.exceptions import MlflowException

    from miret_governance.flavors.store.registry import SURROGATE_OF_TAG, model_id_of

    client, found = store.client(), []
    for version in surrogate_versions(store):
        where = f"{SURROGATE}/{version.version}"
        try:
            status = client.get_run(version.run_id).info.status
        except MlflowException as error:
            found.append(f"orphan {where}: its run cannot be read ({error})")
            continue
        if status != "FINISHED":
            found.append(f"orphan {where}: its explain run is {status}")
        model_id = model_id_of(version)
        try:
            model = client.get_logged_model(model_id) if model_id else None
        except MlflowException:
            model = None
        if model is None or str(model.status) not in ("READY", "LoggedModelStatus.READY"):
            state = "missing" if model is None else str(model.status)
            found.append(f"orphan {where}: its logged model {model_id} is {state}")
        if not version.tags.get(SURROGATE_OF_TAG):
            found.append(f"orphan {where}: no {SURROGATE_OF_TAG} tag")
    return found


# ---------------------------------------------------------------------- trials
@dataclass
class Trial:
    """One kill and what followed it."""

    command: str
    number: int
    fraction: float
    typical: float
    delay: float
    landed: bool = False
    early_exit: int | None = None
    after_kill: list = field(default_factory=list)
    rerun: str = ""
    blocked_run: str | None = None
    findings: list = field(default_factory=list)
    cleared: list = field(default_factory=list)
    violations: list = field(default_factory=list)
    seconds: float = 0.0
    rerun_seconds: float | None = None
    window: str | None = None
    """An aimed kill's window (:data:`WINDOWS`); None for a kill at a random moment."""
    """The first re-run's duration when it made the decision (or the explanation) anew
    and succeeded: a measure of the command's typical duration."""

    @property
    def outcome(self) -> str:
        """ok, cleared (refused fail-closed, cleared, then ok) or other."""
        return self.rerun.split(":")[0]


def kill_at(process: subprocess.Popen, started: float, delay: float) -> tuple[bool, int | None]:
    """SIGKILL ``process``'s group ``delay`` seconds after ``started``: whether it still
    ran then, and its exit code when it had ended."""
    time.sleep(max(0.0, started + delay - time.monotonic()))
    ended = process.poll()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # also what it started (validation worker)
    process.wait()
    return ended is None, ended


def rerun(store: Store, trial: Trial, args: tuple, clear_uri: str, alias: str | None) -> None:
    """Run ``args`` again; on a fail-closed refusal, clear the named record with the CI
    key and run once more. Sets ``trial.rerun`` (and a violation unless it ends ok)."""
    ran = store.govern(*args)
    if ran.code == 0:
        trial.rerun = "ok"
        if trial.command != "explain" or "Registered models:/" in ran.text:  # not reused
            trial.rerun_seconds = ran.seconds
        return
    if "fail closed" not in ran.text:
        trial.rerun = f"other: exit {ran.code}"
        trial.violations.append(f"the re-run exited {ran.code}: {ran.tail()}")
        return
    named = RUN_ID.search(ran.text)
    trial.blocked_run = named.group(1) if named else None
    if trial.blocked_run is None:
        trial.violations.append(f"the fail-closed refusal names no run: {ran.tail()}")
    reason = f"kill trial {trial.number} of {trial.command}: the record's writing was killed"
    clear = ("clear", "--model-uri", clear_uri, "--reason", reason)
    cleared = store.govern(*clear, *(("--alias", alias) if alias else ()))
    if cleared.code != 0:
        trial.rerun = f"other: refused fail-closed, clear exited {cleared.code}"
        trial.violations.append(f"govern clear exited {cleared.code}: {cleared.tail()}")
        return
    again = store.govern(*args)
    if again.code != 0:
        trial.rerun = f"other: refused fail-closed, cleared, then exit {again.code}"
        trial.violations.append(f"the re-run after clear exited {again.code}: {again.tail()}")
        return
    trial.rerun = f"cleared: refused fail-closed (run {trial.blocked_run}), cleared, then ok"


def check_audit(store: Store, trial: Trial) -> None:
    """The audit after the re-run: no finding beyond :data:`BY_DESIGN`; a record cleared
    in this trial listed under ``cleared``."""
    audit = store.audit()
    if audit.get("error"):
        trial.violations.append(audit["error"])
    trial.findings = audit.get("findings", [])
    trial.cleared = audit.get("cleared", [])
    for finding in trial.findings:
        seen = (finding["kind"], finding["version"], finding["alias"], finding["run_id"])
        if seen in store.charged:
            continue  # charged to the trial that left it
        store.charged.add(seen)
        if not any(
            finding["kind"] == kind and re.search(pattern, finding["message"])
            for kind, pattern in BY_DESIGN
        ):
            trial.violations.append(
                f"audit finding {finding['kind']} on {finding['version']} "
                f"(alias {finding['alias']}, run {finding['run_id']}): {finding['message'][:300]}"
            )
    if trial.blocked_run and trial.blocked_run not in {c["run_id"] for c in trial.cleared}:
        trial.violations.append(f"the audit does not list run {trial.blocked_run} as cleared")


def kill_once(store: Store, trial: Trial, args: tuple, label: str) -> int:
    """Start ``args``, kill it after ``trial.delay`` (or in ``trial.window``); the killed
    pid."""
    since = int(time.time() * 1000)
    started = time.monotonic()
    process = store.start(args, label)
    if trial.window:
        kill_in_window(store, trial, process, since)
    else:
        trial.landed, trial.early_exit = kill_at(process, started, trial.delay)
    if not trial.landed:
        trial.after_kill.append(f"ended before the kill (exit {trial.early_exit})")
    trial.after_kill += new_governance_runs(store, since)
    running = running_runs(store)
    if running:
        trial.after_kill.append(f"{len(running)} run(s) RUNNING")
    return process.pid


# ---------------------------------------------------------------------- aimed kills
AIMED_AT = {
    "explain": "governance-links",
    "promote": "governance-gates",
    "approve": "governance-approvals",
}
"""The experiment of the decision run each command writes (explain: its link record)."""
WINDOWS = ("started", "bound")
"""Where an aimed kill lands: ``started``, the command's decision run exists (RUNNING)
and no record is bound to it; ``bound``, the record's parameters are logged and its file
is not written (about a millisecond: the command runs in slices meanwhile)."""
SLICE_S = 0.0002
"""How long the command runs between two looks at the store, once its decision run exists."""
AIM_LIMIT_S = 600
AIM_ATTEMPTS = 3


def _decision_run(db, experiment: str, since_ms: int):
    """(run id, RUNNING, bound, written) of the newest run of ``experiment`` started since
    ``since_ms``, read from the SQLite file; None when there is none."""
    from miret_governance.flavors.trail.decisions import DIGEST_PARAM

    rows = db.execute(
        "select r.run_uuid, r.status, r.artifact_uri from runs r join experiments e "
        "on r.experiment_id = e.experiment_id where e.name = ? and r.start_time >= ? "
        "order by r.start_time desc limit 1",
        (experiment, since_ms),
    ).fetchall()
    if not rows:
        return None
    run_id, status, artifacts = rows[0]
    bound = db.execute(
        "select 1 from params where run_uuid = ? and key = ?", (run_id, DIGEST_PARAM)
    ).fetchone()
    written = Path(artifacts.removeprefix("file://"), "decision", "record.json").exists()
    return run_id, status == "RUNNING", bool(bound), written


def kill_in_window(store: Store, trial: Trial, process: subprocess.Popen, since: int) -> None:
    """SIGKILL ``process``'s group in ``trial.window``: watch the store every 2 ms until the
    command's decision run exists, then (for ``bound``) let the command run in slices of
    :data:`SLICE_S` (SIGCONT, SIGSTOP), looking at the store between two slices."""
    experiment = AIMED_AT[trial.command]
    db = sqlite3.connect(f"file:{store.root / 'mlflow.db'}?mode=ro", uri=True, timeout=0.05)
    begin, verdict, slicing = time.monotonic(), "missed: the command ended first", False
    try:
        while process.poll() is None and time.monotonic() - begin < AIM_LIMIT_S:
            try:
                seen = _decision_run(db, experiment, since)
            except sqlite3.OperationalError:  # the command holds the lock: let it go on
                seen = None
            if seen is not None:
                run_id, running, bound, written = seen
                if trial.window == "started" and running and not bound:
                    verdict = f"hit: run {run_id[:8]} started, no record bound"
                    break
                if trial.window == "bound" and bound and not written:
                    verdict = f"hit: run {run_id[:8]} bound, its record file not written"
                    break
                if bound or written:
                    verdict = (
                        f"missed: run {run_id[:8]} already {'written' if written else 'bound'}"
                    )
                    break
                slicing = trial.window == "bound"
            if slicing:
                os.killpg(process.pid, signal.SIGCONT)
                time.sleep(SLICE_S)
                os.killpg(process.pid, signal.SIGSTOP)
            else:
                time.sleep(0.002)
        trial.delay = time.monotonic() - begin
        trial.landed = process.poll() is None
        trial.early_exit = process.returncode
    finally:
        db.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
            os.killpg(process.pid, signal.SIGCONT)
        process.wait()
    trial.after_kill.append(verdict)


def run_aimed(store: Store, command: str, log=print) -> list[Trial]:
    """A kill of ``command`` in each of :data:`WINDOWS`, checked as a random kill is;
    up to :data:`AIM_ATTEMPTS` kills per window until one hits it (each is checked)."""
    done = []
    for window in WINDOWS:
        for _ in range(AIM_ATTEMPTS):
            trial = Trial(command, len(done), 0.0, 0.0, 0.0, window=window)
            _checked(store, trial)
            done.append(trial)
            _logged(trial, log)
            if trial.after_kill and trial.after_kill[0].startswith("hit"):
                break
    return done


def explain_trial(store: Store, trial: Trial) -> None:
    from miret_governance.flavors.store.registry import SURROGATE_OF_TAG, SURROGATE_TAG

    ensemble = f"models:/{MODEL}/{EXPLAINED}"

    def explanations():
        return {
            v.version for v in surrogate_versions(store) if v.tags.get(SURROGATE_OF_TAG) == ensemble
        }

    before, orphaned = explanations(), orphans(store)  # reported by the trial that left them
    args = explain_args(store, EXPLAINED, trial.number + 1)
    pid = kill_once(store, trial, args, f"explain-{trial.number}")
    rerun(store, trial, args, ensemble, None)
    added = sorted(explanations() - before, key=int)
    if len(added) != 1:
        trial.violations.append(
            f"expected one new surrogate version of {ensemble}, found {added or 'none'}"
        )
    linked = store.client().get_model_version(MODEL, EXPLAINED).tags.get(SURROGATE_TAG)
    if added and linked != f"models:/{SURROGATE}/{added[-1]}":
        trial.violations.append(f"{ensemble} links {linked}, not the new {SURROGATE}/{added[-1]}")
    trial.violations += [o for o in orphans(store) if o not in orphaned]
    left = sorted(p.name for p in store.temp.glob(f"explain-{pid}-*"))
    if left:
        trial.violations.append(f"temporary folder(s) of the killed explain left: {left}")


def promote_trial(store: Store, trial: Trial) -> None:
    before = holder(store, CHAMPION)
    target = PROMOTED[1] if before == PROMOTED[0] else PROMOTED[0]
    since = time.time()
    args = promote_args(target)
    kill_once(store, trial, args, f"promote-{trial.number}")
    now = holder(store, CHAMPION)
    if now != before:
        backed = [d for d in champion_records(store) if d.record.ensemble.uri.endswith(f"/{now}")]
        if not any(_signed_after(d, since) for d in backed):
            trial.violations.append(
                f"after the kill @{CHAMPION} moved from {before} to {now} without a verified "
                "signed promotion record of this trial"
            )
        trial.after_kill.append(f"@{CHAMPION} moved to v{now}")
    trial.after_kill += _alias_note(store, now)
    left = lock_exists(store, CHAMPION)
    if left:
        trial.after_kill.append("lock left")
    rerun(store, trial, args, f"models:/{MODEL}/{target}", CHAMPION)
    if holder(store, CHAMPION) != target:
        trial.violations.append(
            f"after the re-run @{CHAMPION} is on {holder(store, CHAMPION)}, not {target}"
        )
    records = champion_records(store)
    latest = records[-1] if records else None
    if latest is None or latest.record.ensemble.uri != f"models:/{MODEL}/{target}":
        named = latest.record.ensemble.uri if latest else "none"
        trial.violations.append(
            f"the latest verified promotion to @{CHAMPION} names {named}, not version {target}"
        )
    if lock_exists(store, CHAMPION):
        trial.violations.append("the promotion lock is still there after the re-run")
    if left and trial.outcome != "other":
        taken = [d for d in records if _signed_after(d, since) and d.record.lock_taken_over]
        if not taken:
            trial.violations.append(
                "the kill left the promotion lock but no promotion record of this trial says "
                "it was taken over"
            )
        else:
            trial.after_kill.append(
                f"taken over: {taken[-1].record.lock_taken_over.get('reason', '')[:60]}"
            )


def _alias_note(store: Store, now: str | None) -> list[str]:
    """What the audit's alias check would say between the kill and the re-run
    (informational: a promotion killed after its record and before the alias moved
    leaves the alias where the latest signed promotion did not put it)."""
    from miret_governance.flavors.trail.decisions import BlockedError, alias_moved_by_hand

    client = store.client()
    version = client.get_model_version(MODEL, now) if now else None
    try:
        moved = alias_moved_by_hand(client, MODEL, CHAMPION, version, store.trusted())
    except BlockedError:
        return ["the promotions to @champion block (fail closed)"]
    return ["until the re-run the audit would say @champion was moved by hand"] if moved else []


def _signed_after(decision, since: float) -> bool:
    from miret_governance.flavors.trail.decisions import signed_time

    return signed_time(decision).timestamp() >= since - 1


def approve_trial(store: Store, trial: Trial) -> None:
    from miret_governance.flavors.trail.decisions import APPROVAL_EXPERIMENT, decision_runs
    from miret_governance.governance.trust.records import ApprovalRecord

    comment = f"kill trial {trial.number}"
    args = approve_args(store, comment)
    kill_once(store, trial, args, f"approve-{trial.number}")
    uri = f"models:/{MODEL}/{APPROVED}"
    rerun(store, trial, args, uri, REVIEWED)
    runs = decision_runs(store.client(), APPROVAL_EXPERIMENT, uri)
    mine = [
        d
        for d in verified_records(store, runs)
        if isinstance(d.record, ApprovalRecord)
        and d.record.comment == comment
        and d.record.alias == REVIEWED
        and d.signer.name == "reviewer"
    ]
    if not mine:
        trial.violations.append(f"no verified approval with comment {comment!r} by key reviewer")


TRIALS = {"explain": explain_trial, "promote": promote_trial, "approve": approve_trial}


def run_trials(store: Store, command: str, trials: int, seed: int, log=print) -> list[Trial]:
    """``trials`` kills of ``command``: the delay of each is ``u`` (from
    ``random.Random(seed)``) times the command's typical duration, the median of its
    reference run and its last :data:`RECENT` successful re-runs that made it anew (the
    load of a shared machine changes a command's duration twofold within minutes)."""
    rng = random.Random(seed)
    done, durations = [], [store.references[command]]
    for number in range(trials):
        fraction = rng.random()
        typical = statistics.median(durations[-RECENT:])
        trial = Trial(command, number, fraction, typical, fraction * typical)
        _checked(store, trial)
        if trial.rerun_seconds is not None:
            durations.append(trial.rerun_seconds)
        done.append(trial)
        _logged(trial, log)
    return done


def _checked(store: Store, trial: Trial) -> None:
    """Kill, re-run and check (the command's trial function), then the runs and the audit."""
    begin = time.monotonic()
    try:
        already = running_runs(store)  # reported by the trial that left them
        TRIALS[trial.command](store, trial)
        trial.violations += [d for r, d in running_runs(store).items() if r not in already]
        check_audit(store, trial)
    except Exception as error:  # noqa: BLE001 - a crash of a check is reported as one
        trial.violations.append(f"the trial's checks crashed: {type(error).__name__}: {error}")
    trial.seconds = time.monotonic() - begin


def _logged(trial: Trial, log) -> None:
    where = f"in window {trial.window}" if trial.window else f"delay {trial.delay:.2f} s"
    log(
        f"  {trial.command} #{trial.number}: {where}, "
        f"{'landed' if trial.landed else 'after the end'}, re-run {trial.outcome}, "
        f"{len(trial.findings)} finding(s), {len(trial.violations)} violation(s) "
        f"[{trial.seconds:.0f} s]"
    )
    for violation in trial.violations:
        log(f"    VIOLATION {violation}")


def final_approval_check(store: Store) -> list[str]:
    """After the approve trials: promote version 2 to ``@reviewed`` (the approvals still
    count) and audit; the problems found."""
    problems = []
    promoted = store.govern(
        "promote", "--model-uri", f"models:/{MODEL}/{APPROVED}", "--alias", REVIEWED
    )
    if promoted.code != 0 or holder(store, REVIEWED) != APPROVED:
        problems.append(
            f"promote of version {APPROVED} to @{REVIEWED} after the approve trials exited "
            f"{promoted.code}: {promoted.tail()}"
        )
    audit = store.audit()
    problems += [audit["error"]] if audit.get("error") else []
    problems += [
        f"audit finding {f['kind']} on {f['version']}: {f['message'][:300]}"
        for f in audit.get("findings", [])
    ]
    return problems


# ---------------------------------------------------------------------- report
def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def report(
    store: Store, results: dict, final: list, still: dict, options: dict, seconds: float
) -> str:
    """The results as Markdown."""
    import mlflow

    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    aimed = any(t.window for trials in results.values() for t in trials)
    random_kills = any(not t.window for trials in results.values() for t in trials)
    lines = [
        "# SIGKILL at seeded random moments of explain, promote and approve"
        if random_kills
        else "# SIGKILL in the write windows of explain, promote and approve (aimed kills)",
        "",
        "Issue 38, item 8. Produced by `.venv/bin/python examples/benchmarks/kills.py "
        + " ".join(f"--{k} {v}".strip() for k, v in options.items())
        + f"` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC ({platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average at the end {load}; MLflow {mlflow.__version__}); "
        f"{seconds / 60:.1f} minutes in all. The store, the trials and the invariants are "
        "described in the script's docstring.",
        "",
        "Reference (unkilled) durations: "
        + ", ".join(f"{c} {s:.1f} s" for c, s in store.references.items())
        + "; a kill's delay is u times the command's typical duration at that trial (the "
        "median of the reference and the last 5 re-runs that made it anew: column typical).",
        "",
        "## Summary",
        "",
        (
            "| command | trials | kills landed | re-run ok | refused fail-closed, cleared, "
            "then ok | re-run other | trials with violations | violations |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for command, trials in results.items():
        outcomes = [t.outcome for t in trials]
        lines.append(
            f"| {command} | {len(trials)} | {sum(t.landed for t in trials)} | "
            f"{outcomes.count('ok')} | {outcomes.count('cleared')} | {outcomes.count('other')} | "
            f"{sum(bool(t.violations) for t in trials)} | "
            f"{sum(len(t.violations) for t in trials)} |"
        )
    if aimed:
        lines += [
            "",
            (
                "Aimed kills (`--aimed`, column u: the window): the kill lands when the command's "
                "decision run exists and no record is bound to it (started), or between binding "
                "the record's parameters and writing its file (bound: the command runs in slices "
                f"of {SLICE_S * 1000:.1f} ms, SIGCONT then SIGSTOP, once its decision run exists); "
                "after the kill: hit, or missed when the command got past the window first. "
                "The decision run of explain is its link run."
            ),
        ]
    if "approve" in results:
        verdict = "ok" if not final else "; ".join(final)
        lines += [
            "",
            f"After the approve trials, promote of version 2 to @reviewed and audit: {verdict}",
        ]
    for command, trials in results.items():
        lines += [
            "",
            f"## {command}",
            "",
            (
                "| # | u | typical s | delay s | landed | after the kill | re-run | audit findings | "
                "cleared in audit | violations |"
            ),
            "|---:|---:|---:|---:|---|---|---|---:|---:|---|",
        ]
        for t in trials:
            u, typical = (t.window, "-") if t.window else (f"{t.fraction:.3f}", f"{t.typical:.1f}")
            lines.append(
                f"| {t.number} | {u} | {typical} | {t.delay:.2f} | {'yes' if t.landed else 'no'} "
                f"| {_cell('; '.join(t.after_kill) or '-')} | {_cell(t.rerun)} | "
                f"{len(t.findings)} | {len(t.cleared)} | "
                f"{_cell('; '.join(t.violations) or '-')} |"
            )
    lines += [
        "",
        f"Runs still RUNNING when every trial was done: {len(still)}"
        + "".join(f"\n- {_cell(d)}" for d in still.values()),
    ]
    violations = [(c, t) for c, trials in results.items() for t in trials if t.violations]
    lines += ["", "## Violations", ""]
    if not violations and not final:
        lines.append("None.")
    for command, t in violations:
        where = f"window {t.window}" if t.window else f"delay {t.delay:.2f} s"
        lines.append(f"- {command} #{t.number} ({where}):")
        lines += [f"  - {_cell(v)}" for v in t.violations]
    for problem in final:
        lines.append(f"- after the approve trials: {_cell(problem)}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=30, help="kills per command (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the delays (default 0)")
    parser.add_argument(
        "--commands",
        default=",".join(COMMANDS),
        help="comma-separated commands to kill (default explain,promote,approve)",
    )
    parser.add_argument(
        "--explain-trials", type=int, default=None, help="kills of explain (default --trials)"
    )
    parser.add_argument(
        "--aimed",
        action="store_true",
        help="after the random kills, one kill of each command in each write window",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="the Markdown results file")
    parser.add_argument("--append", action="store_true", help="append this run's report to --out")
    parser.add_argument("--keep", action="store_true", help="keep the temporary store")
    options = parser.parse_args(argv)
    commands = [c.strip() for c in options.commands.split(",") if c.strip()]
    unknown = sorted(set(commands) - set(COMMANDS))
    if unknown:
        parser.error(f"unknown command(s) {unknown}: choose among {', '.join(COMMANDS)}")
    counts = {c: options.trials for c in commands}
    if "explain" in counts and options.explain_trials is not None:
        counts["explain"] = options.explain_trials
    begin = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="govern-kills-"))
    print(f"store in {root}; reference runs:")
    try:
        store = build_store(root)
        results = {}
        for command in COMMANDS:  # this order: explain trials touch no promoted version
            if counts.get(command):
                results[command] = run_trials(store, command, counts[command], options.seed)
        final = final_approval_check(store) if "approve" in results else []
        if options.aimed:  # last, explain last: what a window leaves stays in every audit
            for command in ("approve", "promote", "explain"):
                if command in counts:
                    results[f"{command} (aimed)"] = run_aimed(store, command)
        still = running_runs(store)
        shown = {"trials": options.trials, "seed": options.seed, "commands": ",".join(commands)}
        if options.explain_trials is not None:
            shown["explain-trials"] = options.explain_trials
        if options.aimed:
            shown["aimed"] = ""
        text = report(store, results, final, still, shown, time.monotonic() - begin)
    finally:
        if options.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if options.append and options.out.exists():
        demoted = re.sub(r"^(#+) ", r"#\1 ", text, flags=re.MULTILINE)
        text = options.out.read_text() + "\n" + demoted.replace("## ", "## Appended run: ", 1)
    options.out.write_text(text)
    print(f"wrote {options.out}")
    bad = sum(len(t.violations) for trials in results.values() for t in trials) + len(final)
    print(f"{bad} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
