"""Ports and child processes of the tests: a free local port, and stopping a child
started in its own process group (``start_new_session=True``) with everything it
started."""

import contextlib
import os
import signal
import socket
import subprocess


def free_port() -> int:
    """A local TCP port nothing listens on (bound once, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_group(process: subprocess.Popen, sig=signal.SIGTERM, grace: float = 10.0) -> None:
    """Send ``sig`` to ``process``'s group, wait up to ``grace`` seconds for it, then
    kill what is left of the group (a server's workers, a Ray cluster's processes)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
