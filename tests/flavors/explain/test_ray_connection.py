"""Connecting to a Ray cluster for ``--backend ray``: the failure message.

A cluster started with ``ray start --head`` while a token exists requires that token.
The success path (``govern`` finds the token and sends it) is ``tests/test_readme.py``
(the README's Ray lines); here a client without any token is refused by Ray after about
20 s, and the refusal names the address and the authentication settings."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import free_port, stop_group

pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]')")

CONNECT = (
    "import sys\n"
    "from miret_governance.flavors.errors import ExplainError\n"
    "from miret_governance.flavors.explain.search_runs import connect_ray\n"
    "try:\n"
    "    connect_ray(sys.argv[1])\n"
    "except ExplainError as exc:\n"
    "    print(exc)\n"
    "    sys.exit(2)\n"
)


def _without_ray_settings(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "HOME": str(home)}


PORT_TAKEN = "Failed to start the grpc server"
"""Ray's head exits with this when another process took its port after free_port chose it
(the suite starts many servers at once); the fixture then tries a fresh port."""


def _start_head(home: Path, log_path: Path) -> tuple[subprocess.Popen | None, int]:
    """A Ray head on a free port, once it listens: ``(head, port)``; ``(None, port)`` when
    the port was taken before the head could bind it."""
    port = free_port()
    ray = Path(sys.executable).parent / "ray"
    with log_path.open("w") as log:
        head = subprocess.Popen(
            [
                ray,
                "start",
                "--head",
                "--port",
                str(port),
                "--num-cpus",
                "1",
                "--include-dashboard",
                "false",
                "--block",
            ],
            env=_without_ray_settings(home),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if head.poll() is not None:
            if PORT_TAKEN in log_path.read_text():
                return None, port
            raise AssertionError(log_path.read_text()[-3000:])
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.5)
    return head, port


@pytest.fixture
def token_cluster(tmp_path):
    """A one-CPU Ray head whose HOME holds a token: token authentication is on."""
    home = tmp_path / "head"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("a" * 64)
    log_path = tmp_path / "head.log"
    for _ in range(3):
        head, port = _start_head(home, log_path)
        if head is not None:
            break
    assert head is not None, log_path.read_text()[-3000:]
    try:
        assert "Token authentication is enabled" in log_path.read_text()
        yield f"127.0.0.1:{port}"
    finally:
        stop_group(head, grace=5)


@pytest.mark.slow
def test_a_client_without_the_token_is_told_how_to_give_it(token_cluster, tmp_path):
    (tmp_path / "client").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", CONNECT, token_cluster],
        check=False,
        env=_without_ray_settings(tmp_path / "client"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    message = done.stdout
    assert message.startswith(f"cannot connect to the Ray cluster at {token_cluster}")
    assert "RAY_AUTH_MODE=token" in message and "RAY_AUTH_TOKEN" in message
    assert message.rstrip().endswith("RAY_AUTH_MODE is unset here")
