"""``docs/deployment.md`` runs as printed: its one ``sh`` block (``make server``) starts
the local stack, which answers ``/health`` and refuses an unauthenticated call, accepts
the admin credentials it printed, and stops everything on Ctrl-C (SIGINT to the
command's process group, as a terminal sends it), deleting its folder."""

import base64
import os
import re
import signal
import subprocess
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


def test_make_server_runs_as_printed():
    (command,) = shell_blocks(DOC.read_text())
    assert command == "make server"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    process = subprocess.Popen(
        command, shell=True, cwd=ROOT, env=env, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    watchdog = threading.Timer(300, stop_group, (process, signal.SIGKILL))
    watchdog.start()
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
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C
        rest, _ = process.communicate(timeout=60)
        assert "stopped" in rest, text + rest
        assert not Path(folder).exists()
        assert processes_in(folder) == []
    finally:
        watchdog.cancel()
        stop_group(process, signal.SIGKILL, grace=1)
