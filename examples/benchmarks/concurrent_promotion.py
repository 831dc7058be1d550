"""Eight ``govern promote`` processes, each promoting a different version to one alias at
once, on the shared-server stack (PostgreSQL, ``mlflow server --app-name basic-auth``):
exactly one may win, in every repetition.

``python examples/benchmarks/concurrent_promotion.py`` starts the stack
(``examples/server/stack.py``), runs ``govern server setup`` with the roles of
``examples/policies/roles.toml``, registers 8 versions of one forest as the data
scientist, explains each as CI, then races them 20 times (a new alias each time, all
expecting it unset) and writes ``results_concurrent_promotion.md`` beside this file.

``... concurrent_promotion.py race --policy P --alias A [--repetitions N] URI...`` is the
race alone, against the server the environment names (``MLFLOW_TRACKING_URI`` and the CI
user's credentials): it imports the CLI once, then per repetition forks one process per
URI (``multiprocessing``'s ``fork``: no process pays the imports, no MLflow call is made
before the fork), lets them all go at one barrier, and prints one JSON line per
repetition: the alias, each process's exit code and the error line of each loser. The
test (``tests/flavors/server/test_setup.py``) runs this too.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VERSIONS = 8
REPETITIONS = 20


def _promote(barrier, uri: str, alias: str, policy: str, out: Path) -> None:
    """One child: wait for the others, then ``govern promote`` (its exit code is the
    process's), stdout and stderr into ``out``."""
    from miret_governance.cli.app import app
    from miret_governance.cli.common import configure_mlflow

    configure_mlflow()
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    barrier.wait()
    app(
        ["promote", "--model-uri", uri, "--alias", alias, "--policy", policy,
         "--expect-holder", "none"],
        prog_name="govern",
    )  # fmt: skip


def race(uris: list, alias: str, policy: str) -> dict:
    """Promote every URI of ``uris`` to ``alias`` at once (one forked process each):
    ``{"alias", "codes", "errors", "seconds"}`` (``errors``: each loser's ``error:`` line)."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(len(uris))
    with tempfile.TemporaryDirectory(prefix="race-") as folder:
        outs = [Path(folder, f"{i}.out") for i in range(len(uris))]
        children = [
            context.Process(target=_promote, args=(barrier, uri, alias, policy, out))
            for uri, out in zip(uris, outs)
        ]
        start = time.perf_counter()
        for child in children:
            child.start()
        for child in children:
            child.join(timeout=600)
        seconds = time.perf_counter() - start
        texts = [out.read_text(errors="replace") for out in outs]
    errors = [
        next((line for line in text.splitlines() if line.startswith("error: ")), "")
        for text in texts
    ]
    return {
        "alias": alias,
        "codes": [child.exitcode for child in children],
        "errors": errors,
        "seconds": round(seconds, 1),
    }


def _race_main(argv: list) -> None:
    parser = argparse.ArgumentParser(prog="concurrent_promotion.py race")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--alias", required=True, help="repetition i promotes to <alias>-<i>")
    parser.add_argument("--repetitions", type=int, default=1)
    parser.add_argument("uris", nargs="+")
    args = parser.parse_args(argv)
    import miret_governance.cli.app  # noqa: F401 - imported once, before the forks

    for i in range(1, args.repetitions + 1):
        print(json.dumps(race(args.uris, f"{args.alias}-{i}", args.policy)), flush=True)


# ------------------------------------------------------------------ the benchmark
def _prepare(stack, folder: Path) -> tuple[list, Path, dict]:
    """Users and setup, 8 explained versions of one forest; their URIs, the policy and
    CI's environment."""
    import mlflow
    import pandas as pd
    from sklearn.datasets import load_breast_cancer
    from sklearn.ensemble import RandomForestClassifier
    from typer.testing import CliRunner

    from miret_governance.cli.app import app
    from miret_governance.flavors.explain.explain import explain_model_version
    from miret_governance.governance.trust.signers import generate_key_pair

    envs = {name: stack.create_user(name) for name in ("ds", "ci", "reviewer", "auditor")}
    private, public = generate_key_pair(folder / "ci")
    policy = folder / "policy.toml"
    policy.write_text(
        (ROOT / "examples" / "policies" / "roles.toml")
        .read_text()
        .replace("min_fidelity = 0.90", "min_fidelity = 0.0")
        + f'\n[keys.ci]\npublic_key = "{public}"\nmay_sign = ["explain", "decide"]\n'
    )
    with _environment(stack.env()):
        result = CliRunner().invoke(app, ["server", "setup", "--policy", str(policy)])
        assert result.exit_code == 0, result.output
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    X, y = X.iloc[:200, :6], y.iloc[:200]
    X.assign(label=y).to_csv(folder / "train.csv", index=False)
    forest = RandomForestClassifier(n_estimators=4, max_depth=2, random_state=0).fit(X, y)
    with _environment(envs["ds"]):
        experiment = mlflow.MlflowClient().get_experiment_by_name("credit-rf").experiment_id
        with mlflow.start_run(experiment_id=experiment):
            info = mlflow.sklearn.log_model(
                forest, name="model", skops_trusted_types=["sklearn.tree._tree.Tree"],
                pip_requirements=["scikit-learn"], input_example=pd.DataFrame(X.iloc[:2]),
            )  # fmt: skip
        uris = [
            f"models:/credit-rf/{mlflow.register_model(info.model_uri, 'credit-rf').version}"
            for _ in range(VERSIONS)
        ]
    ci = {**envs["ci"], "GOVERN_SIGNING_KEY": str(private)}
    with _environment(ci):
        for uri in uris:
            explain_model_version(
                uri, folder / "train.csv", target="label", solver="highs", time_limit=5,
                min_test_rows=5,
            )  # fmt: skip
    return uris, policy, ci


class _environment:
    """The variables of ``env`` (and its registry URI) set for a block."""

    def __init__(self, env: dict):
        self.env = {**env, "MLFLOW_REGISTRY_URI": env["MLFLOW_TRACKING_URI"]}

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def __exit__(self, *exc):
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> None:
    import subprocess

    sys.path.insert(0, str(ROOT / "examples" / "server"))
    from stack import Stack

    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    with Stack() as stack, tempfile.TemporaryDirectory(prefix="race-bench-") as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        uris, policy, ci = _prepare(stack, folder)
        prepared = time.perf_counter() - started
        env = {**os.environ, **ci, "MLFLOW_REGISTRY_URI": ci["MLFLOW_TRACKING_URI"]}
        before = os.times()
        process = subprocess.run(
            [sys.executable, __file__, "race", "--policy", str(policy), "--alias", "race",
             "--repetitions", str(REPETITIONS), *uris],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        after = os.times()
        races = [json.loads(line) for line in process.stdout.splitlines()]
        cpu = (after.children_user + after.children_system) - (
            before.children_user + before.children_system
        )
        _write_results(races, prepared, cpu, stack.cpu_seconds())


def _write_results(races: list, prepared: float, cpu: float, server_cpu: float) -> None:
    winners = [r["codes"].count(0) for r in races]
    losers_named = all(
        ("another promotion to @" in e or "moved from no version" in e)
        and "nothing was recorded" in e
        for r in races
        for code, e in zip(r["codes"], r["errors"])
        if code != 0
    )
    lines = [
        "# Concurrent promotion on PostgreSQL: 8 processes, one alias, 20 repetitions",
        "",
        "`python examples/benchmarks/concurrent_promotion.py`: the stack of `make server`",
        "(PostgreSQL 15, `mlflow server --app-name basic-auth`, proxied artifacts), `govern",
        "server setup` with the roles of `examples/policies/roles.toml`, 8 versions of one",
        "forest registered by the data scientist and explained by CI; then, 20 times, 8",
        "processes (forked after one import of the CLI, released at one barrier) run",
        "`govern promote --alias race-<i> --expect-holder none` as CI, each its own version",
        "(the promotion also copies the files into `credit-rf.governed`).",
        "",
        (
            f"Exactly one winner in {winners.count(1)} of {len(races)} repetitions; every "
            "loser exited 2 naming the concurrent promotion and saying nothing was recorded: "
            f"{'yes' if losers_named else 'NO'}."
        ),
        (
            f"Preparation (setup, 8 explains) {prepared:.0f} s; the races used {cpu:.0f} s "
            f"of client CPU ({cpu / len(races):.1f} s per repetition of 8 processes); the "
            f"stack {server_cpu:.0f} s of CPU in all. A 2-core machine shared with other "
            "jobs: wall times are indicative only."
        ),
        "",
        "| repetition | winner (process) | exit codes | seconds | a loser's message |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(races, 1):
        winner = ", ".join(str(k) for k, c in enumerate(r["codes"]) if c == 0) or "none"
        loser = next((e for c, e in zip(r["codes"], r["errors"]) if c != 0), "")
        loser = loser.replace("|", "/")[:140]
        codes = " ".join(str(c) for c in r["codes"])
        lines.append(f"| {i} | {winner} | {codes} | {r['seconds']} | {loser} |")
    (HERE / "results_concurrent_promotion.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:2] == ["race"]:
        _race_main(sys.argv[2:])
    else:
        main()
