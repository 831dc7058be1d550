"""Where the test suite's CPU goes: a pytest plugin that records each test's CPU time
(its worker's and its reaped child processes'), and a summary by file.

The suite is CPU-bound on a 2-core machine, so a file's CPU, not its wall time (which
depends on what the other workers run beside it), says what it costs::

    PYTHONPATH=examples/benchmarks .venv/bin/python -m pytest -q -n 3 --dist loadfile \\
        -p suite_cpu
    .venv/bin/python examples/benchmarks/suite_cpu.py       # the table, most costly first

A module fixture's CPU counts for the file's first test; a server a fixture starts
counts when it is stopped and reaped. Records go to ``$SUITE_CPU_DIR`` (default
``/tmp/suite-cpu``), one JSON-lines file per worker; a new session clears them.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
from pathlib import Path

import pytest

RECORDS = Path(os.environ.get("SUITE_CPU_DIR", "/tmp/suite-cpu"))


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controller, before the workers
        RECORDS.mkdir(parents=True, exist_ok=True)
        for old in RECORDS.glob("*.jsonl"):
            old.unlink()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _cpu_seconds()
    yield
    with open(RECORDS / f"{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps([item.nodeid, _cpu_seconds() - before]) + "\n")


def summary(top: int = 25) -> str:
    """The CPU seconds of each file (and its number of tests), most costly first."""
    seconds, tests = collections.Counter(), collections.Counter()
    for path in RECORDS.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            node, cpu = json.loads(line)
            seconds[node.split("::")[0]] += cpu
            tests[node.split("::")[0]] += 1
    lines = [f"total {sum(seconds.values()):.0f} CPU s in {sum(tests.values())} tests"]
    lines += [f"{s:7.1f} s {tests[f]:4d} tests  {f}" for f, s in seconds.most_common(top)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(int(sys.argv[1]) if len(sys.argv) > 1 else 25))
