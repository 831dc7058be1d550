"""``govern inventory`` on an organisation's registry (issue 44, item 2): its time and
requests as the registry grows to 200 governed models.

What it builds, against a local ``mlflow server`` (SQLite backend, proxied artifacts,
one worker: ``tests/sqlite_server.py``'s), through HTTP as a CI job would:

- ``--models`` registered models ``org-NNN``, each one version explained the fast way the
  test suite explains (``tests/gate_store.py``: a hand-made depth-2 surrogate tree saved
  with the ``miret`` flavor, signed by the CI key, registered as ``org-NNN-surrogate`` and
  linked), then gated and promoted to ``@champion`` by the product
  (:func:`flavors.trail.promotion.promote_model_version`: a signed promotion record; its
  gate runs in it). Every tenth model also gets ``@challenger`` set by hand (an ``alias``
  finding each). The policy sets ``[revalidate_every_days] champion = 180``.
- At each step of ``--steps`` (registry sizes), the inventory is taken in this process
  (:func:`flavors.trail.inventory.inventory`, one ``CommandClient``, the clock 200 days
  on, so every champion is due): CPU seconds (``time.process_time``, BLAS threads 1),
  wall seconds and the requests the server logged (uvicorn's access log) while it ran;
  at the last step also one whole ``govern inventory --json`` process (wall, requests).

Rows are appended to ``--out`` as each step ends (a run cut short keeps them).

Run: ``nice -n 10 .venv/bin/python examples/benchmarks/inventory_scale.py --out
examples/benchmarks/results_inventory_scale.md`` (``--models 6 --steps 3,6`` for a dry run).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

import json
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "examples" / "server")]
GOVERN = str(Path(sys.executable).with_name("govern"))
NAME = "org-{:03d}"
ACCESS = re.compile(rb'"[A-Z]+ /[^"]*" \d{3}')
HEADER = (
    "| models | aliases | findings | due | CPU s | server CPU s | wall s | requests "
    "| requests/model |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
)


def server_cpu(group: int) -> float:
    """CPU seconds (user + system) of every process of the server's process group."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[2]) == group:  # pgrp
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def requests(log: Path) -> int:
    """Requests the server has logged so far."""
    return len(ACCESS.findall(log.read_bytes())) if log.exists() else 0


def build(count: int, policy, folder: Path) -> None:
    """Models ``org-000`` .. up to ``count`` - 1, each explained, promoted to @champion
    (and every tenth given @challenger by hand); those already there are kept."""
    import mlflow
    from gate_store import explained
    from mlflow import MlflowClient

    from miret_governance.flavors.trail.promotion import promote_model_version

    client = MlflowClient()
    experiment = mlflow.set_experiment("org").experiment_id
    there = {m.name for m in client.search_registered_models(max_results=1000)}
    for n in range(count):
        name = NAME.format(n)
        if name in there:
            continue
        uri = explained(experiment, folder / "surrogates", name=name)
        outcome = promote_model_version(uri, "champion", policy)
        if not outcome.promoted:
            raise SystemExit(f"{uri}: not promoted: {outcome.reason}")
        if n % 10 == 0:
            client.set_registered_model_alias(name, "challenger", "1")


def measure(policy, models: int, log: Path, group: int) -> str:
    """One inventory in this process: its row of the results table."""
    from miret_governance.flavors.store.reads import CommandClient
    from miret_governance.flavors.trail.inventory import inventory

    now = datetime.now(timezone.utc) + timedelta(days=200)
    before, served = requests(log), server_cpu(group)
    cpu, wall = time.process_time(), time.perf_counter()
    found = inventory(policy, now, CommandClient())
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    made, served = requests(log) - before, server_cpu(group) - served
    return (
        f"| {len(found.models)} | {len(found.rows)} | {len(found.findings)} | {found.due} | "
        f"{cpu:.1f} | {served:.1f} | {wall:.1f} | {made} | {made / max(models, 1):.1f} |\n"
    )


def whole_process(policy_path: Path, url: str, log: Path) -> str:
    """One ``govern inventory --json`` process: exit code, wall seconds, requests."""
    before, wall = requests(log), time.perf_counter()
    done = subprocess.run(
        [GOVERN, "inventory", "--json", "--policy", str(policy_path), "--tracking-uri", url],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - wall
    document = json.loads(done.stdout)
    return (
        f"`govern inventory --json` (one process, {document['n_models']} models): exit "
        f"{done.returncode}, {wall:.1f} s wall, {requests(log) - before} requests\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--steps", default="50,100,200")
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="inventory-scale-"))
    folder.mkdir(parents=True, exist_ok=True)

    import mlflow
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from signing_keys import keys_toml, use_ci_key
    from sqlite_server import Server

    from miret_governance.governance.trust.policy import load_policy

    template = folder / "template.db"
    SqlAlchemyStore(f"sqlite:///{template}", str(folder / "unused"))  # MLflow's migrations
    server = Server(folder, template)
    policy_path = folder / "org.toml"
    policy_path.write_text(
        'name = "org"\n[gates]\nmin_fidelity = 0.9\n[revalidate_every_days]\nchampion = 180\n'
        + keys_toml()
    )
    policy = load_policy(policy_path)
    use_ci_key()
    out = args.out
    if out is not None and not out.exists():
        out.write_text(HEADER)
    with server.serving():
        os.environ["MLFLOW_TRACKING_URI"] = server.url
        mlflow.set_tracking_uri(server.url)
        mlflow.set_registry_uri(server.url)
        log = folder / "server.log"
        for step in (int(s) for s in args.steps.split(",")):
            begin = time.perf_counter()
            build(min(step, args.models), policy, folder)
            print(f"built {step} models in {time.perf_counter() - begin:.0f} s", flush=True)
            row = measure(policy, step, log, server.process.pid)
            print(row, end="", flush=True)
            if out is not None:
                with out.open("a") as handle:
                    handle.write(row)
        line = whole_process(policy_path, server.url, log)
        print(line, end="")
        if out is not None:
            with out.open("a") as handle:
                handle.write("\n" + line)


if __name__ == "__main__":
    main()
