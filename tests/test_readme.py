"""Every command of the README's "Using it" section, run as printed after a fresh demo.

A module fixture copies the checkout into a temporary folder (``project_copy``, with
``.venv`` linked to this one) and runs ``examples/demo.py`` there, as ``make demo``
does (in a process forked as below): the demo's store is that folder's ``mlflow.db``.
Then each ``bash`` line (continuations joined) and each ``python`` block of the section
runs in README order from that folder, without the tests' ``MLFLOW_TRACKING_URI`` and
signing key and policy (``GOVERN_SIGNING_KEY``, ``GOVERN_POLICY``: a line names the demo's
own), and must exit 0, or N when the line ends with ``# exit N``. Each ``govern`` of
those lines is a process forked from one that imported the CLI once
(``tests/govern_forks.py``): its own process, streams, environment and exit code,
without 2-3 s of imports each; the console script's own start is tested elsewhere. So
is each ``python`` block, as ``python -c`` of a process forked from that one, and the
demo, as ``python examples/demo.py``. The forking process is the worker's own
(``conftest.warm_forks``), shared with the other files that fork commands.

Not run: ``make ...`` lines and lines marked ``# not run by tests``. The Ray lines run
with ``HOME`` in the temporary folder (the token Ray generates lands there), and
``ray start`` runs with ``--block`` in its own process group, which the test of the last
Ray line stops (an idle cluster takes about 3 CPU s a minute; the README's ``ray stop``
would stop every Ray cluster of the machine's user).
MLflow's environments are built in one folder per test session
(``project_copy.mlflow_env_root``), shared with ``tests/test_mlproject.py``.
"""

import contextlib
import os
import re
import shlex
import socket
import subprocess
import time
from pathlib import Path

import pytest
from govern_forks import PYTHON, GovernForks
from processes import stop_group
from project_copy import ROOT, copy_project, mlflow_env_root, one_mlflow_run_at_a_time

NOT_RUN = "# not run by tests"
UNSET = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_REGISTRY_URI",
    "RAY_ADDRESS",
    "RAY_AUTH_MODE",
    "GOVERN_SIGNING_KEY",
    "GOVERN_SIGNING_KEY_PASSWORD",
    "GOVERN_POLICY",
)


def readme_steps(text: str) -> list[tuple[str, str]]:
    """``(language, code)`` of the "Using it" section in order: one per ``bash`` line
    (continuation lines joined) and one per ``python`` block."""
    section = text.split("\n## Using it\n", 1)[1].split("\n## ", 1)[0]
    steps = []
    for language, block in re.findall(r"```(bash|python)\n(.*?)```", section, re.DOTALL):
        if language == "python":
            steps.append(("python", block))
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("make ") and NOT_RUN not in line:
                steps.append(("bash", line))
    return steps


def _uses_ray(code: str) -> bool:
    return "bin/ray " in code or "--backend ray" in code


STEPS = readme_steps((ROOT / "README.md").read_text())
LAST_RAY_STEP = max(i for i, (_, code) in enumerate(STEPS) if _uses_ray(code))


def _step_id(index: int) -> str:
    language, code = STEPS[index]
    words = shlex.split(code, comments=True) if language == "bash" else ["python block"]
    shown = " ".join(w.removeprefix(".venv/bin/") for w in words if w != "-P")
    return f"{index:02d} {shown[:70]}"


def expected_exit(line: str) -> int:
    found = re.search(r"# exit (\d+)\s*$", line)
    return int(found.group(1)) if found else 0


def _environment(home: Path | None, env_root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", MLFLOW_ENV_ROOT=str(env_root))
    if home is not None:
        env["HOME"] = str(home)
    return env


def _venv_with_forked_govern(folder: Path, forks: GovernForks) -> None:
    """Make the copy's ``.venv`` (a link to this checkout's) a folder of links to it,
    whose ``bin/govern`` and ``bin/python-forked`` are ``forks``' stubs."""
    real = folder / ".venv"
    real, venv = real.resolve(), real
    venv.unlink()
    (venv / "bin").mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name != "bin":
            (venv / entry.name).symlink_to(entry)
    for entry in (real / "bin").iterdir():
        if entry.name != "govern":
            (venv / "bin" / entry.name).symlink_to(entry)
    forks.stubs(venv / "bin")


@pytest.fixture(scope="module")
def demo(tmp_path_factory, warm_forks):
    """The copied checkout after ``examples/demo.py``, its ``govern`` and the demo forked
    from the worker's process that imported the CLI once (``warm_forks``: 30 commands,
    2-3 s of imports each, and the demo's imports and its validation child); stops a Ray
    cluster it started."""
    folder = copy_project(tmp_path_factory.mktemp("readme"))
    (folder / "home").mkdir()
    state = {
        "folder": folder,
        "env_root": mlflow_env_root(tmp_path_factory),
        "clusters": [],
    }
    _venv_with_forked_govern(folder, warm_forks)
    yield from _demo(state)


def _demo(state: dict):
    folder = state["folder"]
    done = subprocess.run(
        [f".venv/bin/{PYTHON}", "examples/demo.py"],
        check=False,
        cwd=folder,
        env=_environment(None, state["env_root"]),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    yield state
    _stop_clusters(state)  # left by a failed Ray line


def _start_ray(line: str, demo: dict, env: dict) -> None:
    """``ray start ... --block`` in a new process group; waits for its port, and checks
    that the cluster requires a token (what a client must then send)."""
    words = shlex.split(line, comments=True)
    port = int(words[words.index("--port") + 1])
    log = (demo["folder"] / "ray-head.log").open("w")
    process = subprocess.Popen(
        [*words, "--block"],
        cwd=demo["folder"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    demo["clusters"].append(process)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, (demo["folder"] / "ray-head.log").read_text()[-3000:]
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                head_log = (demo["folder"] / "ray-head.log").read_text()
                assert "Token authentication is enabled" in head_log, head_log[-3000:]
                return
        time.sleep(0.5)
    pytest.fail(f"ray start: port {port} not open after 90 s")


def test_the_section_has_the_commands_it_documents():
    bash = [code for language, code in STEPS if language == "bash"]
    for command in ("explain", "show", "validate", "gate", "promote", "reproduce", "diff"):
        assert any(f"govern {command} " in line for line in bash), command
    assert any("govern explain-row " in line for line in bash)
    assert any("drift.toml" in line for line in bash)
    assert any('"miret": {"enabled": True' in code for lang, code in STEPS if lang == "python")
    assert any("--backend ray" in line for line in bash)
    assert any("mlflow run . -e pipeline" in line and "--env-manager" not in line for line in bash)
    assert "skops_trusted_types" in next(code for lang, code in STEPS if lang == "python")


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS, ids=[_step_id(i) for i in range(len(STEPS))])
def test_readme_command(step, demo):
    language, code = step
    ray = _uses_ray(code)
    env = _environment(demo["folder"] / "home" if ray else None, demo["env_root"])
    if language == "bash" and code.startswith(".venv/bin/ray start"):
        _start_ray(code, demo, env)
        return
    command = ["bash", "-c", code] if language == "bash" else [f".venv/bin/{PYTHON}", "-c", code]
    builds = "mlflow run " in code and "--env-manager local" not in code
    with one_mlflow_run_at_a_time(demo["env_root"]) if builds else contextlib.nullcontext():
        done = subprocess.run(
            command,
            check=False,
            cwd=demo["folder"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    expected = expected_exit(code) if language == "bash" else 0
    assert done.returncode == expected, done.stdout[-2000:] + done.stderr[-3000:]
    if step == STEPS[LAST_RAY_STEP]:
        _stop_clusters(demo)


def _stop_clusters(demo: dict) -> None:
    while demo["clusters"]:  # ray start --block and its cluster's processes
        stop_group(demo["clusters"].pop(), grace=5)
