"""Ports and child processes of the tests: a free local port, and stopping a child
started in its own process group (``start_new_session=True``) with everything it
started. Both come from the local server stack's launcher,
``examples/server/stack.py`` (which the tests import from this folder's path), so the
launcher ``make server`` runs and the tests share one way to stop a group."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "server"))

from stack import free_port, stop_group

__all__ = ["free_port", "stop_group"]
