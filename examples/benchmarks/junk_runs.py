"""Cost that does not grow with junk (issue 38, item 7): ``gate``, ``promote``, ``show``
and ``audit`` with thousands of junk runs in the governance experiments.

Builds the demo's setup in a fresh temporary SQLite store (``sqlite:///<tmp>/mlflow.db``,
artifacts in ``<tmp>/mlruns``): the Wisconsin MinMaxScaler + 100-tree depth-3 forest
registered as ``wisconsin-rf`` (``examples/demo.py``), a signing key made with
:func:`governance.trust.signers.generate_key_pair`, a policy ``examples/policies/lenient.toml`` plus
a ``[keys.ci]`` table trusting that key for ``explain`` and ``decide`` (README, "Signed
evidence"), ``explain`` of version 1 (which leaves a signed link record), one gate and one
promotion to ``@champion``: the legitimate trail.

Then, for each junk level (cumulative: ``--junk 0 1000 5000`` adds 1,000 then 4,000 more),
it adds junk runs as an insider with the public MLflow client makes them
(:func:`add_junk`: ``create_run`` with random tags, some with bound-looking parameters or
tags about *other* model versions, a ``decision/record.json`` such as ``{"kind": "gate",
"ensemble": "x"}`` that is unsigned and unbound, every fifth with no artifact at all),
spread over the four governance experiments (``flavors.decisions.GATE_EXPERIMENT``,
``APPROVAL_EXPERIMENT``, ``LINK_EXPERIMENT``, ``CLEARANCE_EXPERIMENT``), none of them
naming ``models:/wisconsin-rf/1`` or a promotion to ``@champion``; and times, through the
library functions in this process (not the CLI: that isolates the store's cost from
Python's start-up and imports, about the same for every level),

- ``gate``: :func:`flavors.gating.gate_model_version` of ``models:/wisconsin-rf/1``;
- ``promote``: :func:`flavors.promotion.promote_model_version` to ``@champion`` (the
  version already holds it: a re-evaluation of the holder);
- ``show``: :func:`flavors.review.describe_for_review` of the same URI;
- ``audit``: :func:`flavors.audit.audit_model` of ``wisconsin-rf``;
- apart, :func:`flavors.decisions.read_record` of v1's link record 20 times: the cost of
  one record read (the outcome column gives it per read).

Each timed call runs on a fresh copy of the store as it is at that junk level (the copy is
discarded after), so that a gate or promotion timed earlier does not add a record that a
later one reads: every call sees the same legitimate trail, and a difference in records
read can only come from junk. ``--repeats`` calls per command and level (wall clock,
``time.perf_counter``, median reported); before each, a cheap call opens the copy's
database (that one-off cost of a new SQLite file is not counted). Records read are
counted by wrapping :func:`flavors.decisions.read_record` (the module attribute and every
``flavors`` module that imported the name), and runs listed by wrapping
:func:`flavors.decisions.every_run` (the runs the searches return, each a full run with
its parameters and tags).

A separate measurement at the last level shows fail closed staying cheap: one more junk
run tagged with ``models:/wisconsin-rf/1`` (aimed at the version) makes ``gate`` refuse
with ``BlockedError`` after reading the version's records up to that one; and backdated
(``start_time`` 1 ms after the epoch, which anyone who logs can choose), after reading it
alone.

Then, on a copy of the last level, ``--junk-models 1000 5000`` (cumulative) adds logged
models named ``decision`` (the records' folder) to the governance experiments, of no run
(:func:`add_junk_models`), and times ``gate``, ``promote`` and ``show`` again (and the
audit once, with ``--junk-models-audit``): no record more is read, but each read pages
through them (the report says why).

``--cli`` also times the four commands as ``govern`` subprocesses (wall clock, same
copies; records read are not counted there).

Run: ``.venv/bin/python examples/benchmarks/junk_runs.py [--junk 0 1000 5000]
[--repeats 3] [--junk-models 1000 5000] [--junk-models-audit] [--cli] [--junk-via
store|client] [--out examples/benchmarks/results_junk_runs.md]``. Prints the
results table and writes it (with the machine: cores, Python, MLflow, load average) to
``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GOVERN = str(Path(sys.executable).with_name("govern"))
MODEL_NAME = "wisconsin-rf"
MODEL_URI = f"models:/{MODEL_NAME}/1"
ALIAS = "champion"
COMMANDS = ("gate", "promote", "show", "audit")
READ = "read_record of v1's link record, 20 times"
"""A micro-benchmark: the cost of one record read, apart from everything else."""
DEFAULT_OUT = HERE / "results_junk_runs.md"


# ---------------------------------------------------------------------- counting
@dataclass
class Counter:
    """Records read (:func:`flavors.decisions.read_record` calls) and runs listed (runs
    :func:`flavors.decisions.every_run` returned) since :meth:`reset`."""

    records: int = 0
    runs_listed: int = 0

    def reset(self) -> None:
        self.records = self.runs_listed = 0

    def install(self) -> None:
        """Wrap ``read_record`` and ``every_run`` in ``flavors.decisions`` and in every
        loaded ``miret_governance.flavors`` module that imported them by name."""
        from miret_governance.flavors.trail import decisions

        read_record, every_run = decisions.read_record, decisions.every_run

        def counted_read(*args, **kwargs):
            self.records += 1
            return read_record(*args, **kwargs)

        def counted_every(*args, **kwargs):
            runs = every_run(*args, **kwargs)
            self.runs_listed += len(runs)
            return runs

        patched = []
        for name, module in list(sys.modules.items()):
            if not name.startswith("miret_governance.flavors"):
                continue
            if getattr(module, "read_record", None) is read_record:
                module.read_record = counted_read
                patched.append(f"{name}.read_record")
            if getattr(module, "every_run", None) is every_run:
                module.every_run = counted_every
                patched.append(f"{name}.every_run")
        print("counting through: " + ", ".join(sorted(patched)), flush=True)


# ---------------------------------------------------------------------- setup
@dataclass
class Setup:
    folder: Path
    master: Path
    policy_path: Path
    private_key: Path
    policy: object = None
    key: object = None
    seconds: dict = field(default_factory=dict)


def use_store(uri: str):
    """Point MLflow (tracking and registry, this process) at ``uri``; a client of it."""
    import mlflow
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ["MLFLOW_REGISTRY_URI"] = uri
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def set_up(folder: Path) -> Setup:
    """The demo's registered forest, explained, gated and promoted to @champion, in a
    SQLite store in ``folder`` (the current directory: artifacts land in ./mlruns)."""
    sys.path.insert(0, str(ROOT / "examples"))
    import demo
    import mlflow

    from miret_governance.flavors.explain.explain import explain_model_version
    from miret_governance.flavors.gates.gating import gate_model_version
    from miret_governance.flavors.trail.promotion import promote_model_version
    from miret_governance.governance.trust.policy import load_policy
    from miret_governance.governance.trust.signers import SigningKey, generate_key_pair

    master = folder / "mlflow.db"
    use_store(f"sqlite:///{master}")
    mlflow.set_experiment(demo.EXPERIMENT)
    setup = Setup(folder, master, folder / "policies" / "lenient.toml", folder / "keys" / "ci.pem")
    begin = time.perf_counter()
    state = demo.train_and_register(demo.load_data(demo.DemoState()))
    train = folder / "train.csv"
    state.X_train.assign(target=state.y_train).to_csv(train, index=False)
    setup.seconds["train and register"] = time.perf_counter() - begin

    private, public = generate_key_pair(folder / "keys" / "ci")
    setup.private_key = private
    setup.policy_path.parent.mkdir(parents=True)
    setup.policy_path.write_text(
        (ROOT / "examples" / "policies" / "lenient.toml").read_text()
        + f'\n[keys.ci]\npublic_key = "{public}"\nmay_sign = ["explain", "decide"]\n'
    )
    setup.policy = load_policy(setup.policy_path)
    setup.key = SigningKey.load(private)

    begin = time.perf_counter()
    result = explain_model_version(
        MODEL_URI,
        train,
        target="target",
        class_names=["malignant", "benign"],
        signing_key=setup.key,
    )
    setup.seconds["explain"] = time.perf_counter() - begin
    print(f"explained: {result.surrogate_uri} in {setup.seconds['explain']:.1f} s", flush=True)
    begin = time.perf_counter()
    gate = gate_model_version(MODEL_URI, setup.policy, signing_key=setup.key)
    promotion = promote_model_version(MODEL_URI, ALIAS, setup.policy, signing_key=setup.key)
    setup.seconds["first gate and promotion"] = time.perf_counter() - begin
    if not (gate.evaluation.all_passed and promotion.promoted):
        raise SystemExit(f"setup: gate passed {gate.evaluation.all_passed}, {promotion.reason}")
    print(f"gated and promoted to @{ALIAS}", flush=True)
    return setup


# ---------------------------------------------------------------------- junk
def _token(n: int = 6) -> str:
    return secrets.token_hex(n)


JUNK_USER = "insider"
COMMIT_EVERY = 500
"""Junk runs per database transaction (``--junk-via store``)."""


def junk_runs(first: int, count: int):
    """``(i, experiment, kind, tags, params, with_record)`` of junk runs ``first`` to
    ``first + count - 1``, round robin over the governance experiments. None names
    ``models:/wisconsin-rf/1`` or @champion:

    - style 0: random tags, an unsigned unbound ``decision/record.json``;
    - style 1: also tagged ``governance.ensemble_uri`` with another model's version;
    - style 2: bound-looking parameters (kind, ensemble URI of another model, a made-up
      sha256) and the record;
    - style 3: tagged with version 2 of ``wisconsin-rf`` (no such version: same model,
      not the version decided on), and the record;
    - style 4: random tags, no artifact at all.
    """
    from miret_governance.flavors.store.registry import ENSEMBLE_URI_TAG
    from miret_governance.flavors.trail import decisions

    kinds = {
        decisions.GATE_EXPERIMENT: "gate",
        decisions.APPROVAL_EXPERIMENT: "approval",
        decisions.LINK_EXPERIMENT: "link",
        decisions.CLEARANCE_EXPERIMENT: "clearance",
    }
    names = list(kinds)
    for i in range(first, first + count):
        experiment = names[i % len(names)]
        kind, style = kinds[experiment], (i // len(names)) % 5
        tags = {f"junk.{_token(3)}": _token(8) for _ in range(3)}
        params = {}
        if style == 1:
            tags[ENSEMBLE_URI_TAG] = f"models:/other-model-{i % 50}/{i % 7 + 1}"
        elif style == 2:
            params = {
                decisions.KIND_PARAM: kind,
                decisions.URI_PARAM: f"models:/other-model-{i % 50}/1",
                decisions.DIGEST_PARAM: _token(32),
            }
        elif style == 3:
            tags[ENSEMBLE_URI_TAG] = f"models:/{MODEL_NAME}/2"
        yield i, experiment, kind, tags, params, style != 4


def add_junk(client, first: int, count: int, via: str = "store") -> float:
    """Add ``count`` junk runs (:func:`junk_runs`, numbered from ``first``); seconds
    taken. Half are left RUNNING (a killed command), half FINISHED.

    ``via="client"``: each run with ``MlflowClient.create_run``, ``log_batch``,
    ``log_text`` (and ``set_terminated``), as an insider would: three or four database
    transactions a run. ``via="store"`` (faster): the runs' rows (run, tags, parameters,
    as ``SqlAlchemyStore.create_run`` and ``log_batch`` write them) go into the SQLite
    store through its SQLAlchemy session, :data:`COMMIT_EVERY` a transaction; the records
    are still written with ``MlflowClient.log_text`` into each run's artifact folder.
    """
    from mlflow.entities import Param, RunTag

    from miret_governance.flavors.trail import decisions

    experiments = [decisions.GATE_EXPERIMENT, decisions.APPROVAL_EXPERIMENT]
    experiments += [decisions.LINK_EXPERIMENT, decisions.CLEARANCE_EXPERIMENT]
    ids = {name: decisions.experiment_id(client, name) for name in experiments}

    def record(kind: str) -> str:
        return json.dumps({"kind": kind, "ensemble": "x"})

    begin = time.perf_counter()
    if via == "client":
        for i, experiment, kind, tags, params, with_record in junk_runs(first, count):
            run = client.create_run(ids[experiment], run_name=f"junk {i}")
            run_id = run.info.run_id
            client.log_batch(
                run_id,
                params=[Param(k, v) for k, v in params.items()],
                tags=[RunTag(k, v) for k, v in tags.items()],
            )
            if with_record:
                client.log_text(run_id, record(kind), decisions.RECORD_PATH)
            if i % 2:
                client.set_terminated(run_id, "FINISHED")
        return time.perf_counter() - begin

    import uuid

    from mlflow.store.tracking.dbmodels.models import SqlParam, SqlRun, SqlTag
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME, MLFLOW_USER
    from mlflow.utils.uri import append_to_uri_path

    store = client._tracking_client.store
    location = {name: client.get_experiment(ids[name]).artifact_location for name in ids}
    pending = []

    def commit():
        with store.ManagedSessionMaker() as session:
            for row, _, _ in pending:
                session.add(row)
        for _, run_id, kind in pending:
            if kind is not None:
                client.log_text(run_id, record(kind), decisions.RECORD_PATH)
        pending.clear()

    for i, experiment, kind, tags, params, with_record in junk_runs(first, count):
        run_id, now = uuid.uuid4().hex, int(time.time() * 1000)
        finished = bool(i % 2)
        row = SqlRun(
            name=f"junk {i}",
            artifact_uri=append_to_uri_path(location[experiment], run_id, "artifacts"),
            run_uuid=run_id,
            experiment_id=ids[experiment],
            source_type="UNKNOWN",
            source_name="",
            entry_point_name="",
            user_id=JUNK_USER,
            status="FINISHED" if finished else "RUNNING",
            start_time=now,
            end_time=now if finished else None,
            deleted_time=None,
            source_version="",
            lifecycle_stage="active",
        )
        tags = tags | {MLFLOW_RUN_NAME: f"junk {i}", MLFLOW_USER: JUNK_USER}
        row.tags = [SqlTag(key=k, value=v) for k, v in tags.items()]
        row.params = [SqlParam(key=k, value=v) for k, v in params.items()]
        pending.append((row, run_id, kind if with_record else None))
        if len(pending) >= COMMIT_EVERY:
            commit()
    commit()
    return time.perf_counter() - begin


def add_junk_models(client, first: int, last: int) -> float:
    """Logged models ``first`` to ``last - 1`` named ``decision`` (the records' folder),
    round robin over the governance experiments, of no run: junk an insider makes with
    ``MlflowClient.create_logged_model``. Seconds taken."""
    from miret_governance.flavors.trail import decisions

    experiments = [decisions.GATE_EXPERIMENT, decisions.APPROVAL_EXPERIMENT]
    experiments += [decisions.LINK_EXPERIMENT, decisions.CLEARANCE_EXPERIMENT]
    ids = [decisions.experiment_id(client, name) for name in experiments]
    begin = time.perf_counter()
    for i in range(first, last):
        client.create_logged_model(ids[i % len(ids)], name=decisions.RECORD_FOLDER)
    return time.perf_counter() - begin


def add_aimed_junk(client, backdated: bool) -> str:
    """One junk run in the gate experiment tagged with the benchmarked version's URI (an
    unsigned, unbound record): fail closed makes it block that version."""
    from mlflow.entities import RunTag

    from miret_governance.flavors.store.registry import ENSEMBLE_URI_TAG
    from miret_governance.flavors.trail import decisions

    experiment = decisions.experiment_id(client, decisions.GATE_EXPERIMENT)
    run = client.create_run(
        experiment, start_time=1 if backdated else None, run_name="junk aimed at v1"
    )
    client.log_batch(run.info.run_id, tags=[RunTag(ENSEMBLE_URI_TAG, MODEL_URI)])
    record = {"kind": "gate", "ensemble": "x"}
    client.log_text(run.info.run_id, json.dumps(record), decisions.RECORD_PATH)
    return run.info.run_id


# ---------------------------------------------------------------------- timing
def library_call(command: str, setup: Setup):
    """``client -> outcome in words`` of one command through the library."""
    from miret_governance.flavors.gates.gating import gate_model_version
    from miret_governance.flavors.read.review import describe_for_review
    from miret_governance.flavors.trail.audit import audit_model
    from miret_governance.flavors.trail.promotion import promote_model_version

    def gate(client):
        outcome = gate_model_version(MODEL_URI, setup.policy, client=client, signing_key=setup.key)
        return "PASS" if outcome.evaluation.all_passed else "FAIL"

    def promote(client):
        outcome = promote_model_version(
            MODEL_URI, ALIAS, setup.policy, client=client, signing_key=setup.key
        )
        return "promoted" if outcome.promoted else f"refused: {outcome.reason}"

    def show(client):
        summary = describe_for_review(MODEL_URI, client=client, policy=setup.policy)
        return f"shown, {len(summary['ensemble']['approvals'])} approvals"

    def audit(client):
        report = audit_model(MODEL_NAME, setup.policy, client=client)
        kinds = {}
        for finding in report.findings:
            kinds[finding.kind] = kinds.get(finding.kind, 0) + 1
        about = sum(f.version == MODEL_URI for f in report.findings)
        found = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "clean"
        return f"{report.decisions} records checked; findings: {found} ({about} about v1)"

    def read(client):
        from miret_governance.flavors.trail.decisions import (
            LINK_EXPERIMENT,
            decision_runs,
            read_record,
        )

        (run,) = decision_runs(client, LINK_EXPERIMENT, MODEL_URI)
        begin = time.perf_counter()
        valid = all(read_record(client, run, setup.policy.keys).valid for _ in range(20))
        per = (time.perf_counter() - begin) / 20
        return f"{per * 1000:.1f} ms a read" + ("" if valid else " (NOT VALID)")

    calls = {"gate": gate, "promote": promote, "show": show, "audit": audit, READ: read}
    return calls[command]


CLI_ARGS = {
    "gate": ["gate", "--model-uri", MODEL_URI],
    "promote": ["promote", "--model-uri", MODEL_URI, "--alias", ALIAS],
    "show": ["show", "--model-uri", MODEL_URI],
    "audit": ["audit", "--model-name", MODEL_NAME],
}


@dataclass
class Row:
    junk: str
    """The junk level, as the table shows it."""
    command: str
    how: str
    seconds: list
    records: list
    runs_listed: list
    outcome: str
    cpu: list = field(default_factory=list)
    """CPU seconds of this process (the CLI: of the child), which load stretches far less."""


class Copies:
    """Fresh copies of the master store, one per timed call."""

    def __init__(self, setup: Setup):
        self.setup, self.n = setup, 0

    @contextlib.contextmanager
    def copy(self, source: Path | None = None):
        self.n += 1
        path = self.setup.folder / f"copy-{self.n}.db"
        shutil.copyfile(source or self.setup.master, path)
        try:
            yield f"sqlite:///{path}"
        finally:
            with contextlib.suppress(OSError):
                path.unlink()


def warm_up(client) -> None:
    """Open the copy's tracking and registry databases (not counted)."""
    from miret_governance.flavors.trail.decisions import GATE_EXPERIMENT

    client.get_experiment_by_name(GATE_EXPERIMENT)
    client.get_registered_model(MODEL_NAME)


def time_library(command, junk, setup, copies, counter, repeats, source=None) -> Row:
    call = library_call(command, setup)
    row = Row(junk, command, "library", [], [], [], "")
    for _ in range(repeats):
        with copies.copy(source) as uri:
            client = use_store(uri)
            warm_up(client)
            counter.reset()
            begin, cpu = time.perf_counter(), time.process_time()
            row.outcome = call(client)
            row.seconds.append(time.perf_counter() - begin)
            row.cpu.append(time.process_time() - cpu)
            row.records.append(counter.records)
            row.runs_listed.append(counter.runs_listed)
    print(_line(row), flush=True)
    return row


def time_cli(command, junk, setup, copies, repeats) -> Row:
    row = Row(junk, command, "CLI", [], [], [], "")
    for _ in range(repeats):
        with copies.copy() as uri:
            env = {
                **os.environ,
                "MLFLOW_TRACKING_URI": uri,
                "MLFLOW_REGISTRY_URI": uri,
                "GOVERN_POLICY": str(setup.policy_path),
                "GOVERN_SIGNING_KEY": str(setup.private_key),
            }
            args = [GOVERN, *CLI_ARGS[command], "--policy", str(setup.policy_path)]
            if command in ("gate", "promote"):
                args += ["--signing-key", str(setup.private_key)]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            begin = time.perf_counter()
            done = subprocess.run(
                args, cwd=setup.folder, env=env, capture_output=True, text=True, check=False
            )
            row.seconds.append(time.perf_counter() - begin)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            row.cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            row.outcome = f"exit {done.returncode}"
    print(_line(row), flush=True)
    return row


def time_aimed(junk, setup, copies, counter, backdated: bool) -> Row:
    """``gate`` on a copy with one more junk run aimed at the version."""
    from miret_governance.flavors.gates.gating import gate_model_version
    from miret_governance.flavors.trail.decisions import BlockedError

    label = "gate, +1 junk run aimed at v1" + (" (backdated)" if backdated else "")
    row = Row(junk, label, "library", [], [], [], "")
    with copies.copy() as uri:
        client = use_store(uri)
        run_id = add_aimed_junk(client, backdated)
        warm_up(client)
        counter.reset()
        begin, cpu = time.perf_counter(), time.process_time()
        try:
            gate_model_version(MODEL_URI, setup.policy, client=client, signing_key=setup.key)
            row.outcome = "NOT REFUSED (expected BlockedError)"
        except BlockedError as error:
            named = run_id in str(error)
            row.outcome = "BlockedError" + (" naming the aimed run" if named else "")
        row.seconds.append(time.perf_counter() - begin)
        row.cpu.append(time.process_time() - cpu)
        row.records.append(counter.records)
        row.runs_listed.append(counter.runs_listed)
    print(_line(row), flush=True)
    return row


# ---------------------------------------------------------------------- report
def _spread(values: list, digits: int = 2) -> str:
    if not values:
        return "-"
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:.{digits}f}"
    return f"{median:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def _counts(values: list) -> str:
    if not values:
        return "-"
    distinct = sorted(set(values))
    return str(distinct[0]) if len(distinct) == 1 else "/".join(map(str, values))


def _line(row: Row) -> str:
    return (
        f"junk {row.junk:>5} {row.command:<42} {row.how:<7} {_spread(row.seconds)} s "
        f"(CPU {_spread(row.cpu)} s), "
        f"records read {_counts(row.records)}, runs listed {_counts(row.runs_listed)}: "
        f"{row.outcome}"
    )


def machine() -> list:
    import mlflow

    return [
        f"- cores (`nproc`): {os.cpu_count()}",
        f"- Python {platform.python_version()}, MLflow {mlflow.__version__}, {platform.platform()}",
        f"- date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}",
    ]


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _level(row: Row) -> int | None:
    """The junk runs of a plain level (None: a row with more junk than runs)."""
    text = row.junk.replace(",", "")
    return int(text) if text.isdigit() else None


def checks(rows) -> list:
    """What the table shows, in words: the decisions' records read do not grow with junk
    runs; the audit reads one record per run, at a cost per record that does not grow."""
    plain = [r for r in rows if r.how == "library" and _level(r) is not None]
    lines = []
    for command in (*COMMANDS[:-1], READ):
        counts = {r.junk: _counts(r.records) for r in plain if r.command == command}
        same = len(set(counts.values())) == 1
        lines.append(
            f"- {command}: records read "
            + (f"{next(iter(counts.values()))} at every level" if same else f"DIFFER: {counts}")
            + " ("
            + ", ".join(
                f"{level}: {_spread(r.seconds)} s, CPU {_spread(r.cpu)} s"
                for level, r in _by_level(plain, command)
            )
            + ")"
        )
    audits = [r for r in plain if r.command == "audit"]
    if audits:
        offsets = {statistics.median(r.records) - _level(r) for r in audits}
        per = ", ".join(
            f"{r.junk}: {statistics.median(r.seconds) / statistics.median(r.records) * 1000:.1f}"
            f" (CPU {statistics.median(r.cpu) / statistics.median(r.records) * 1000:.1f})"
            for r in audits
            if _level(r)
        )
        lines.append(
            "- audit: records read = junk runs + "
            + (f"{offsets.pop():.0f} at every level" if len(offsets) == 1 else f"DIFFERS {offsets}")
            + f" (one per run); ms per record read (median seconds / records read) {per}"
        )
    if len(audits) >= 2:
        first, last = audits[0], audits[-1]
        extra = statistics.median(last.records) - statistics.median(first.records)
        if extra > 0:
            added = (statistics.median(last.seconds) - statistics.median(first.seconds)) / extra
            cpu = (statistics.median(last.cpu) - statistics.median(first.cpu)) / extra
            lines.append(
                f"- audit: {added * 1000:.1f} ms wall, {cpu * 1000:.1f} ms CPU per extra record "
                f"read ({first.junk} to {last.junk} junk runs)"
            )
    for row in rows:
        if "logged models" in row.junk:
            base = next(
                (r for r in reversed(plain) if r.command == row.command and r.how == row.how),
                None,
            )
            if base is not None:
                ratio = statistics.median(row.seconds) / statistics.median(base.seconds)
                cpu = statistics.median(row.cpu) / statistics.median(base.cpu)
                lines.append(
                    f"- {row.command} with {row.junk}: records read {_counts(row.records)} "
                    f"(without the logged models {_counts(base.records)}), {ratio:.1f} times "
                    f"the wall seconds, {cpu:.1f} times the CPU seconds"
                )
    return lines


def _by_level(rows, command):
    return [(r.junk, r) for r in rows if r.command == command]


def report(rows, setup, options, loads, junk_seconds, total) -> str:
    lines = [
        "# Junk runs: cost of gate, promote, show and audit (issue 38, item 7)",
        "",
        "Made by `.venv/bin/python examples/benchmarks/junk_runs.py "
        + " ".join(["--junk", *map(str, options.junk), "--repeats", str(options.repeats)])
        + (" --cli" if options.cli else "")
        + (f" --junk-via {options.junk_via}" if options.junk_via != "store" else "")
        + "` (its docstring says how). Store: a fresh temporary SQLite file "
        "(`sqlite:///<tmp>/mlflow.db`) with the demo's forest `wisconsin-rf` v1, explained "
        "with a signing key the policy (`examples/policies/lenient.toml` + `[keys.ci]`) "
        "trusts for explain and decide, gated once and promoted once to @champion. Junk "
        "runs (cumulative) spread round robin over the four governance experiments, none "
        "about v1 or a promotion to @champion. Each timed call runs in this process through "
        "the library (`gate_model_version`, `promote_model_version`, `describe_for_review`, "
        "`audit_model`) on a fresh copy of the store at that level, so each sees the same "
        "legitimate trail; seconds: median (min-max) of the repeats, wall clock; CPU "
        "seconds: of this process (`time.process_time`), which the machine's load stretches "
        "far less.",
        "",
        (
            "Records read: calls of `flavors.decisions.read_record` (each downloads and checks "
            "one run's `decision/` folder). Runs listed: runs returned by "
            "`flavors.decisions.every_run` (the searches of the governance experiments; each "
            "comes with its parameters and tags)."
        ),
        "",
        (
            "| junk runs | command | how | seconds | CPU seconds | records read | runs listed "
            "| outcome |"
        ),
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row.junk} | {row.command} | {row.how} | {_spread(row.seconds)} | {_spread(row.cpu)} | "
            f"{_counts(row.records)} | {_counts(row.runs_listed)} | {row.outcome} |"
        )
    lines += ["", "Checks:"] + checks(rows)
    if any("logged models" in row.junk for row in rows):
        lines += [
            "",
            "Rows `<runs> + <n> logged models`: the store at the last level plus n logged "  # noqa: ISC004
            "models named `decision` (the records' folder) spread over the four governance "
            "experiments, made with `MlflowClient.create_logged_model` and of no run (audit, "
            "when timed: once). `flavors.decisions.read_record` downloads a record with "
            "`MlflowClient.download_artifacts(run_id, 'decision', ...)`, which resolves "
            "`runs:/<run_id>/decision` and so also looks for a logged model named `decision` "
            "of that run, paging through every logged model of that name in the run's "
            "experiment (`mlflow/store/artifact/runs_artifact_repo.py`, "
            "`RunsArtifactRepository._get_logged_model_artifact_repo`, two `get_run` calls "
            "besides): the records read stay the same, the cost of each read grows with that "
            "junk.",
        ]
    how = {
        "store": "rows through the SQLAlchemy store's session, 500 runs a transaction; "
        "records with `MlflowClient.log_text`",
        "client": "`MlflowClient.create_run`, `log_batch`, `log_text`, `set_terminated`",
    }[options.junk_via]
    lines += ["", f"Junk made ({how}):"]
    lines += [f"- {n:,} runs in {s:.0f} s" for n, s in junk_seconds if n]
    lines += ["", "Setup:"]
    lines += [f"- {what}: {s:.1f} s" for what, s in setup.seconds.items()]
    lines += ["", "Machine (other processes were running: see the load averages):"]
    lines += machine()
    lines += [f"- load average (1, 5, 15 min) {when}: {load}" for when, load in loads]
    lines += [f"- whole run: {total / 60:.1f} min", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--junk", type=int, nargs="+", default=[0, 1000, 5000], help="junk levels (cumulative)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per command and level")
    parser.add_argument("--cli", action="store_true", help="also time the govern CLI")
    parser.add_argument(
        "--junk-via",
        choices=("store", "client"),
        default="store",
        help="make junk through the SQLAlchemy store (fast, default) or MlflowClient calls",
    )
    parser.add_argument(
        "--junk-models",
        type=int,
        nargs="*",
        default=[1000, 5000],
        help="then, on the last level: also this many junk logged models named 'decision' "
        "(cumulative; none: skip)",
    )
    parser.add_argument(
        "--junk-models-audit",
        action="store_true",
        help="also time the audit with junk logged models (once per level: it is slow)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results markdown file")
    options = parser.parse_args()
    if sorted(options.junk) != options.junk:
        parser.error("--junk levels must increase (junk is cumulative)")
    started = time.perf_counter()
    loads = [("at the start", _load())]
    rows, junk_seconds = [], []
    with tempfile.TemporaryDirectory(prefix="junk-runs-") as tmp:
        folder = Path(tmp)
        with contextlib.chdir(folder):  # the store's artifacts (./mlruns) land beside it
            setup = set_up(folder)
            # import every module whose names the counter wraps, then wrap
            for module in ("audit", "gating", "promotion", "review", "links", "recorded_drift"):
                importlib.import_module(f"miret_governance.flavors.{module}")

            counter = Counter()
            counter.install()
            copies = Copies(setup)
            made = 0
            for level in options.junk:
                master = use_store(f"sqlite:///{setup.master}")
                seconds = add_junk(master, made, level - made, options.junk_via)
                junk_seconds.append((level - made, seconds))
                if level - made:
                    print(f"added {level - made:,} junk runs in {seconds:.0f} s", flush=True)
                made = level
                loads.append((f"before timing {level:,} junk runs", _load()))
                for command in (*COMMANDS, READ):
                    rows.append(
                        time_library(command, f"{level:,}", setup, copies, counter, options.repeats)
                    )
                if options.cli:
                    for command in COMMANDS:
                        rows.append(time_cli(command, f"{level:,}", setup, copies, options.repeats))
            for backdated in (False, True):
                rows.append(time_aimed(f"{made:,}", setup, copies, counter, backdated))
            if options.junk_models:
                source = folder / "with-models.db"
                shutil.copyfile(setup.master, source)
                models = 0
                for level in options.junk_models:
                    seconds = add_junk_models(use_store(f"sqlite:///{source}"), models, level)
                    print(f"added {level - models:,} junk logged models in {seconds:.0f} s")
                    models = level
                    label = f"{made:,} + {models:,} logged models"
                    loads.append((f"before timing {label}", _load()))
                    commands = COMMANDS if options.junk_models_audit else COMMANDS[:-1]
                    commands = (*commands, READ)
                    for command in commands:
                        repeats = 1 if command == "audit" else options.repeats
                        rows.append(
                            time_library(command, label, setup, copies, counter, repeats, source)
                        )
            loads.append(("at the end", _load()))
            text = report(rows, setup, options, loads, junk_seconds, time.perf_counter() - started)
            use_store(f"sqlite:///{setup.master}")
    options.out.write_text(text)
    print()
    print(text)
    print(f"wrote {options.out}")


if __name__ == "__main__":
    main()
