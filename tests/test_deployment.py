"""``docs/deployment.md`` runs as printed: its one ``sh`` block (``make server``) starts
the local stack, which answers ``/health`` and refuses an unauthenticated call, accepts
the admin credentials it printed, runs the ``govern server setup`` section's ``bash``
block (the roles policy copied, its users created, the plan printed, then applied) with
the variables it printed exported, and stops everything on Ctrl-C (SIGINT to the
command's process group, as a terminal sends it), deleting its folder, even when it was started with SIGINT ignored."""

import base64
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from processes import stop_group

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "deployment.md"
pytestmark = [pytest.mark.slow, pytest.mark.no_store]


def shell_blocks(text: str) -> list:
    """The commands of every fenced ``sh`` block (the runnable ones; ``text`` blocks
    hold placeholders)."""
    return [b.strip() for b in re.findall(r"^```sh\n(.*?)^```", text, re.DOTALL | re.MULTILINE)]


def setup_block(text: str) -> str:
    """The ``bash`` block of the ``govern server setup`` section."""
    section = text.split("### `govern server setup`", 1)[1]
    return re.search(r"^```bash\n(.*?)^```", section, re.DOTALL | re.MULTILINE).group(1)


def run_setup_block(block: str, exports: dict, folder: Path) -> str:
    """``block`` run by bash in ``folder`` (a user's clone: ``examples`` links to this
    one's) with ``exports`` exported and the project's environment active; its output."""
    (folder / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")} | exports
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["bash", "-e", "-c", block], cwd=folder, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def get(url: str, auth: tuple | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(":".join(auth).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def processes_in(folder: str) -> list:
    """Live processes whose working directory is in ``folder``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "cwd").startswith(folder):
                found.append(entry.name)
        except OSError:
            continue
    return found


def test_make_server_and_server_setup_run_as_printed(tmp_path):
    (command,) = shell_blocks(DOC.read_text())
    assert command == "make server"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    # started with SIGINT ignored, as a non-interactive shell starts a background job (and
    # a test runner started so passes it on): the stack must still stop on Ctrl-C
    process = subprocess.Popen(
        f"trap '' INT; {command}", shell=True, cwd=ROOT, env=env, text=True,
        start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    watchdog = threading.Timer(900, stop_group, (process, signal.SIGKILL))
    watchdog.start()
    folder = None
    try:
        printed = []
        while not any("export MLFLOW_TRACKING_PASSWORD=" in line for line in printed):
            line = process.stdout.readline()
            assert line, "".join(printed)  # the command ended before printing it all
            printed.append(line)
        text = "".join(printed)
        exports = dict(re.findall(r"export (\w+)=(\S+)", text))
        url = exports["MLFLOW_TRACKING_URI"]
        admin = (exports["MLFLOW_TRACKING_USERNAME"], exports["MLFLOW_TRACKING_PASSWORD"])
        folder = re.search(r"everything under (\S+)", text).group(1)
        assert get(f"{url}/health") == 200
        search = f"{url}/api/2.0/mlflow/experiments/search?max_results=1"
        assert get(search) == 401
        assert get(search, admin) == 200
        printed_setup = run_setup_block(setup_block(DOC.read_text()), exports, tmp_path)
        users = re.findall(r"^(ds|ci|reviewer|auditor) \S{12,}$", printed_setup, re.MULTILINE)
        assert users == ["ds", "ci", "reviewer", "auditor"], printed_setup
        assert "governance-approvals" in printed_setup, printed_setup  # the plan, then done
        assert get(f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name="
                   "governance-approvals", admin) == 200  # fmt: skip
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C
        rest, _ = process.communicate(timeout=120)  # generous: a loaded CI machine
        assert "stopped" in rest, text + rest
        assert not Path(folder).exists()
        assert processes_in(folder) == []
    finally:
        watchdog.cancel()
        stop_group(process, signal.SIGKILL, grace=1)
        for pid in processes_in(folder) if folder else []:  # a stack left by a failed stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
