"""Governance at an organisation's scale (issue 40, item 6): ``gate``, ``promote``,
``show`` and ``audit`` against the authenticated PostgreSQL server as its registry and
trail grow, next to the same commands on a local SQLite store.

What it builds, in order:

1. **The measured model**, on a fresh local SQLite store (``sqlite:///<tmp>/mlflow.db``)
   and on the local shared-server stack (``examples/server/stack.py``: PostgreSQL,
   ``mlflow server --app-name basic-auth``, proxied artifacts), the same way on both: a
   MinMaxScaler + 5-tree depth-2 forest on 200 rows of 8 Wisconsin features, registered
   as ``bench-rf`` v1, explained (signed by a CI key), approved for ``@champion`` (a
   reviewer's key), gated and promoted, through the product's library functions. On the
   server everything runs as its admin (the roles are not what is measured; the admin
   is authenticated like every user, and the auth app checks the admin flag after the
   password).
2. **The organisation**, on the server only: ``--models`` registered models of
   ``--versions`` versions each (copies of one small logged model: the registry rows are
   what grows), then decision records in steps up to ``--records``: gate, link,
   approval and promotion records in turn, round robin over those versions, each made by
   the product's own :func:`flavors.trail.decisions.record_in_new_run` (signed record,
   bound parameters, tags, ``FINISHED``) with the CI or the reviewer key, about the
   measured model's surrogate and evidence. They are written in-process straight into
   the server's store: MLflow's own ``SqlAlchemyStore`` on the ``postgresql://`` URI for
   the rows, and the record's two files copied into the proxied artifact destination at
   the path the server serves them from (``mlflow-artifacts:/<experiment>/<run>/...``):
   the same rows and files the server would write, without 5 authenticated requests a
   record (about 25,000 requests for 5,000 records).
3. **At each step** (``--steps``), as whole ``govern`` processes (what a user or a CI job
   runs): ``gate``, ``promote`` and ``show`` of ``bench-rf`` v1, ``audit --model-name
   bench-rf``, and, at the first and last step, ``audit`` of every registered model
   (there is no command that audits every model: one ``govern audit --model-name`` per
   model, in a loop, each a process);
   the wall time and the number of requests the server logged (uvicorn's access log).
   The server runs with a 60 s credential cache (``auth_cache_ttl_seconds``, as
   ``make server`` runs it). At the last step the server is restarted without it
   (MLflow's default: every request re-hashes the password) and ``gate``, ``promote``,
   ``show`` and ``audit`` of ``bench-rf`` are timed again.

The commands write records too (each ``gate`` a gate record, each ``promote`` a
promotion record about ``bench-rf`` v1): ``bench-rf``'s own trail grows by two records a
step, the organisation's by thousands.

Run: ``.venv/bin/python examples/benchmarks/org_scale.py`` (27 minutes on 2 cores at load 8-19;
``--models 3 --versions 2 --records 100 --steps 0,100`` for a dry run). Writes
``--out`` (default: print only).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "examples" / "server"))
from stack import Stack

GOVERN = str(Path(sys.executable).with_name("govern"))
MODEL_NAME = "bench-rf"
MODEL_URI = f"models:/{MODEL_NAME}/1"
ALIAS = "champion"
ORG_MODEL = "org-model-{:02d}"
POLICY = "[gates]\nmin_fidelity = 0.5\nmax_features = 8\n[approvals]\nchampion = 1\n"
KINDS = ("gate", "link", "approval", "promotion")
COMMANDS = {
    "gate": ["gate", "--model-uri", MODEL_URI],
    "promote": ["promote", "--model-uri", MODEL_URI, "--alias", ALIAS],
    "show": ["show", "--model-uri", MODEL_URI],
    "audit": ["audit", "--model-name", MODEL_NAME],
}
"""The commands timed (``--policy`` added; the CI key comes from ``GOVERN_SIGNING_KEY``)."""
_ACCESS = re.compile(r'"[A-Z]+ /[^"]*" \d{3}')


# ---------------------------------------------------------------------- the measured model
@dataclass
class Setup:
    """The measured model's store: folder, environment of its ``govern`` processes,
    policy, keys and what explain made."""

    folder: Path
    env: dict
    policy_path: Path = None
    policy: object = None
    ci_key: object = None
    reviewer_key: object = None
    surrogate: object = None
    evidence: object = None
    seconds: dict = field(default_factory=dict)


def use(env: dict) -> None:
    """Point this process's MLflow at ``env``'s store and credentials."""
    import mlflow

    for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        os.environ.pop(key, None)
    os.environ.update(env)
    os.environ["MLFLOW_REGISTRY_URI"] = env["MLFLOW_TRACKING_URI"]
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    mlflow.set_registry_uri(env["MLFLOW_TRACKING_URI"])


def keys_and_policy(folder: Path) -> tuple:
    """A CI key (explain, decide) and a reviewer key (approve) in ``folder/keys``, and a
    policy trusting them that asks one approval for ``@champion``."""
    from miret_governance.governance.trust.signers import generate_key_pair

    lines = [POLICY]
    paths = {}
    for name, purposes in (("ci", '["explain", "decide"]'), ("reviewer", '["approve"]')):
        private, public = generate_key_pair(folder / "keys" / name)
        paths[name] = private
        lines.append(f'[keys.{name}]\npublic_key = "{public}"\nmay_sign = {purposes}\n')
    policy = folder / "policy.toml"
    policy.write_text("\n".join(lines))
    return policy, paths


def set_up(folder: Path, env: dict, governance_experiments: bool) -> Setup:
    """``bench-rf`` v1 registered, explained, approved, gated and promoted in ``env``'s
    store, through the library; ``governance_experiments``: create the governance
    experiments first (an authenticated server refuses to create them on first use:
    ``govern server setup`` does, here the admin)."""
    import mlflow
    from mlflow import MlflowClient
    from sklearn.datasets import load_breast_cancer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler

    from miret_governance.flavors.explain.explain import explain_model_version
    from miret_governance.flavors.gates.gating import gate_model_version
    from miret_governance.flavors.trail import decisions
    from miret_governance.flavors.trail.promotion import (
        approve_model_version,
        promote_model_version,
    )
    from miret_governance.governance.trust.policy import load_policy
    from miret_governance.governance.trust.signers import SIGNING_KEY_ENV, SigningKey

    setup = Setup(folder, dict(env))
    use(env)
    os.chdir(folder)
    setup.policy_path, keys = keys_and_policy(folder)
    setup.policy = load_policy(setup.policy_path)
    setup.ci_key, setup.reviewer_key = (SigningKey.load(keys[k]) for k in ("ci", "reviewer"))
    setup.env[SIGNING_KEY_ENV] = str(keys["ci"])
    client = MlflowClient()
    if governance_experiments:
        for name in (decisions.GATE_EXPERIMENT, decisions.APPROVAL_EXPERIMENT):
            client.create_experiment(name)
        for name in (decisions.LINK_EXPERIMENT, decisions.CLEARANCE_EXPERIMENT):
            client.create_experiment(name)
    mlflow.set_experiment("bench")
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    X, y = X.iloc[:200, :8], y.iloc[:200]
    X.assign(label=y).to_csv(folder / "train.csv", index=False)
    forest = RandomForestClassifier(n_estimators=5, max_depth=2, random_state=0)
    begin = time.perf_counter()
    with mlflow.start_run():
        mlflow.sklearn.log_model(
            make_pipeline(MinMaxScaler(), forest).fit(X, y),
            name="model",
            registered_model_name=MODEL_NAME,
            skops_trusted_types=["sklearn.tree._tree.Tree"],
            pip_requirements=["scikit-learn"],
        )
    setup.seconds["register"] = time.perf_counter() - begin
    begin = time.perf_counter()
    explained = explain_model_version(
        MODEL_URI, folder / "train.csv", target="label", time_limit=5, min_test_rows=5,
        alpha=0.5, proximity_threshold=0.9, signing_key=setup.ci_key,
    )  # fmt: skip
    setup.seconds["explain"] = time.perf_counter() - begin
    begin = time.perf_counter()
    approve_model_version(
        MODEL_URI, ALIAS, "approve", "reviewed", setup.policy, signing_key=setup.reviewer_key
    )
    gate = gate_model_version(MODEL_URI, setup.policy, signing_key=setup.ci_key)
    promotion = promote_model_version(MODEL_URI, ALIAS, setup.policy, signing_key=setup.ci_key)
    setup.seconds["approve, gate, promote"] = time.perf_counter() - begin
    if not (gate.evaluation.all_passed and promotion.promoted):
        raise SystemExit(f"set-up: gate passed {gate.evaluation.all_passed}, {promotion.reason}")
    setup.surrogate = client.get_model_version(*explained.surrogate_uri.split("/")[-2:])
    setup.evidence = types.SimpleNamespace(digest=gate.evaluation.evidence_digest, signer=None)
    return setup


# ---------------------------------------------------------------------- the organisation
def direct_client(stack: Stack):
    """An ``MlflowClient`` on the server's own store (``SqlAlchemyStore`` on its
    PostgreSQL database) whose artifact uploads land where the server keeps them."""
    from mlflow import MlflowClient

    class Direct(MlflowClient):
        def log_artifacts(self, run_id, local_dir, artifact_path=None):
            uri = self.get_run(run_id).info.artifact_uri
            where = stack.artifacts / uri.removeprefix("mlflow-artifacts:/").lstrip("/")
            shutil.copytree(local_dir, where / (artifact_path or ""), dirs_exist_ok=True)

    return Direct(tracking_uri=stack.backend_uri, registry_uri=stack.backend_uri)


def register_versions(client, models: int, versions: int) -> list:
    """``models`` registered models of ``versions`` versions each, copies of ``bench-rf``
    v1's logged model; every version created."""
    source = client.get_model_version(MODEL_NAME, "1")
    made = []
    for m in range(models):
        name = ORG_MODEL.format(m)
        client.create_registered_model(name)
        for _ in range(versions):
            made.append(
                client.create_model_version(
                    name, source.source, run_id=source.run_id, model_id=source.model_id
                )
            )
    return made


def add_records(client, setup: Setup, versions: list, first: int, last: int) -> None:
    """Decision records ``first`` to ``last - 1`` (:data:`KINDS` in turn, round robin
    over ``versions``), each by :func:`flavors.trail.decisions.record_in_new_run`."""
    from miret_governance.flavors.store.registry import ENSEMBLE_URI_TAG, PROMOTION_TAG
    from miret_governance.flavors.trail import decisions as d
    from miret_governance.governance.trust.records import (
        ApprovalRecord,
        GateRecord,
        LinkRecord,
        PromotionRecord,
    )

    trusted = setup.policy.keys
    ci = d.decided_by(trusted, setup.ci_key, client)
    reviewer = d.decided_by(trusted, setup.reviewer_key, client)
    for i in range(first, last):
        kind = KINDS[i % len(KINDS)]
        version = versions[(i // len(KINDS)) % len(versions)]
        uri = f"models:/{version.name}/{version.version}"
        tags = {ENSEMBLE_URI_TAG: uri}
        args = (version, setup.surrogate, setup.evidence, setup.policy)
        if kind == "gate":
            record = d.new_record(GateRecord, *args, ci, result="PASS")
            experiment, key = d.GATE_EXPERIMENT, setup.ci_key
        elif kind == "link":
            record = LinkRecord(
                ensemble=d.pinned(version), surrogate=d.pinned(setup.surrogate),
                decided_by=ci, time=d.now_utc(),
            )  # fmt: skip
            experiment, key = d.LINK_EXPERIMENT, setup.ci_key
        elif kind == "approval":
            record = d.new_record(
                ApprovalRecord, *args, reviewer, alias=ALIAS, decision="approve", comment="ok"
            )
            experiment, key = d.APPROVAL_EXPERIMENT, setup.reviewer_key
        else:
            record = d.new_record(
                PromotionRecord, *args, ci, result="PASS", alias=ALIAS, decision="promoted",
                reason="approved", approvals=(),
            )  # fmt: skip
            experiment, key = d.GATE_EXPERIMENT, setup.ci_key
            tags[PROMOTION_TAG.format(alias=ALIAS)] = "promoted"
        tags[d.MLFLOW_USER] = record.decided_by.mlflow_user
        d.record_in_new_run(client, experiment, f"{kind} {i} · {uri}", tags, record, key)


# ---------------------------------------------------------------------- timing
@dataclass
class Timed:
    seconds: float
    requests: int | None


def access_lines(stack: Stack | None) -> int:
    if stack is None:
        return 0
    text = (stack.folder / "server.log").read_text(errors="replace")
    return sum(1 for line in text.splitlines() if _ACCESS.search(line))


def run_govern(setup: Setup, args: list, stack: Stack | None) -> Timed:
    """One ``govern`` process (exit 0 required): its wall time and the requests the
    server logged meanwhile (None on SQLite)."""
    before = access_lines(stack)
    begin = time.perf_counter()
    done = subprocess.run(
        [GOVERN, *args, "--policy", str(setup.policy_path)],
        cwd=setup.folder, env=os.environ | setup.env, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - begin
    if done.returncode != 0:
        raise SystemExit(f"govern {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    if stack is None:
        return Timed(seconds, None)
    time.sleep(0.3)  # the access line is written before the response: margin only
    return Timed(seconds, access_lines(stack) - before)


def every_model(setup: Setup, stack: Stack, names: list) -> Timed:
    """``govern audit --model-name`` of each of ``names``, one process each."""
    runs = [run_govern(setup, ["audit", "--model-name", n], stack) for n in names]
    return Timed(sum(r.seconds for r in runs), sum(r.requests for r in runs))


def request_seconds(stack: Stack, n: int = 20) -> float:
    """Median wall seconds of one authenticated read (an experiment by name) as the admin."""
    import base64
    import statistics
    import urllib.request

    token = base64.b64encode(f"{stack.admin_username}:{stack.admin_password}".encode()).decode()
    url = f"{stack.url}/api/2.0/mlflow/experiments/get-by-name?experiment_name=bench"
    seconds = []
    for _ in range(n):
        request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
        begin = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
        seconds.append(time.perf_counter() - begin)
    return statistics.median(seconds)


def import_seconds() -> float:
    """Wall seconds of a process that imports the CLI and MLflow, and nothing else."""
    begin = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import miret_governance.cli.app, mlflow.tracking"], check=True
    )
    return time.perf_counter() - begin


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def cell(t: Timed) -> str:
    return f"{t.seconds:.1f} s" + (f" / {t.requests}" if t.requests is not None else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--steps", default="0,1000,2500,5000", help="records at each step")
    parser.add_argument("--out", type=Path, default=None, help="append the tables to this file")
    options = parser.parse_args()
    steps = [int(s) for s in options.steps.split(",")]
    lines = [f"load average at start: {load()} ({os.cpu_count()} CPUs)"]

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    with tempfile.TemporaryDirectory(prefix="org-scale-") as tmp:
        sqlite_folder = Path(tmp, "sqlite")
        sqlite_folder.mkdir()
        local = set_up(
            sqlite_folder, {"MLFLOW_TRACKING_URI": f"sqlite:///{sqlite_folder}/mlflow.db"}, False
        )
        sqlite = {name: run_govern(local, args, None) for name, args in COMMANDS.items()}
        say(f"a process importing the CLI and MLflow: {import_seconds():.1f} s")
        say(f"SQLite set-up: {', '.join(f'{k} {v:.1f} s' for k, v in local.seconds.items())}")
        say(
            "| SQLite (local file) | "
            + " | ".join(f"{k} {cell(v)}" for k, v in sqlite.items())
            + " |"
        )

        with Stack() as stack:
            server_folder = Path(tmp, "server")
            server_folder.mkdir()
            setup = set_up(server_folder, stack.env(), True)
            say(f"server set-up: {', '.join(f'{k} {v:.1f} s' for k, v in setup.seconds.items())}")
            client = direct_client(stack)
            begin = time.perf_counter()
            versions = register_versions(client, options.models, options.versions)
            say(f"registered {len(versions)} versions in {time.perf_counter() - begin:.0f} s")
            names = [MODEL_NAME] + [ORG_MODEL.format(m) for m in range(options.models)]
            say("")
            say(
                "| records | gate | promote | show | audit bench-rf | audit every model "
                f"({len(names)}) | load |"
            )
            say("| --- | --- | --- | --- | --- | --- | --- |")
            made = 0
            for step in steps:
                begin = time.perf_counter()
                add_records(client, setup, versions, made, step)
                filled = time.perf_counter() - begin
                print(f"  {step - made} records in {filled:.0f} s", flush=True)
                made = step
                row = {name: run_govern(setup, args, stack) for name, args in COMMANDS.items()}
                if step in (steps[0], steps[-1]):  # 21 processes: at the ends only
                    row["every"] = every_model(setup, stack, names)
                cells = [cell(t) for t in row.values()] + ["-"] * (5 - len(row))
                say(f"| {step} | " + " | ".join(cells) + f" | {load()} |")
            say(f"one authenticated request, auth cache 60 s: {request_seconds(stack):.3f} s")
            stack.restart_server(auth_cache_ttl=0)  # MLflow's default: no cache
            say(f"one authenticated request, no auth cache: {request_seconds(stack, 5):.3f} s")
            nocache = {name: run_govern(setup, args, stack) for name, args in COMMANDS.items()}
            say("")
            say(
                f"| no auth cache, {made} records | "
                + " | ".join(f"{k} {cell(v)}" for k, v in nocache.items())
                + f" | load {load()} |"
            )
            say(f"server CPU: {stack.cpu_seconds():.0f} s")
    if options.out:
        with options.out.open("a") as out:
            out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
