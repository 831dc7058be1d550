"""Where the test suite's CPU goes: a pytest plugin that records each test's CPU time
(its worker's and its reaped child processes'), and a summary by file.

The suite is CPU-bound on a 2-core machine, so a file's CPU, not its wall time (which
depends on what the other workers run beside it), says what it costs::

    PYTHONPATH=examples/benchmarks .venv/bin/python -m pytest -q -n 3 --dist loadfile \\
        -p suite_cpu
    .venv/bin/python examples/benchmarks/suite_cpu.py       # the table, most costly first

A module fixture's CPU counts for the file's first test; a server a fixture starts
counts when it is stopped and reaped; so do the processes a fork server
(``tests/govern_forks.py``) forks, reaped by that server: when the worker stops it.
``suite_cpu.py --workers`` shows when each worker ran which file (the end of a run with
one busy worker is wall time the other two cores idle). Records go to
``$SUITE_CPU_DIR`` (default ``/tmp/suite-cpu``), one JSON-lines file per worker; a new
session clears them.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
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
        out.write(json.dumps([item.nodeid, _cpu_seconds() - before, time.time()]) + "\n")


def summary(top: int = 25) -> str:
    """The CPU seconds of each file (and its number of tests), most costly first."""
    seconds, tests = collections.Counter(), collections.Counter()
    for path in RECORDS.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            node, cpu = json.loads(line)[:2]
            seconds[node.split("::")[0]] += cpu
            tests[node.split("::")[0]] += 1
    lines = [f"total {sum(seconds.values()):.0f} CPU s in {sum(tests.values())} tests"]
    lines += [f"{s:7.1f} s {tests[f]:4d} tests  {f}" for f, s in seconds.most_common(top)]
    return "\n".join(lines)


def workers() -> str:
    """Each worker's files in the order it ran them: when each ended (seconds from the
    first test's end) and its CPU seconds; then when each worker's last test ended."""
    runs = {}
    for path in RECORDS.glob("*.jsonl"):
        runs[path.stem] = [json.loads(line) for line in path.read_text().splitlines()]
    start = min(rows[0][2] for rows in runs.values() if rows)
    lines = []
    for worker, rows in runs.items():
        files = {}  # in the order run: file -> [CPU s, end]
        for node, cpu, end in rows:
            done = files.setdefault(node.split("::")[0], [0.0, end])
            done[0], done[1] = done[0] + cpu, end
        lines.append(f"worker {worker}: last test ended at {rows[-1][2] - start:.0f} s")
        lines += [
            f"  {end - start:6.0f} s {cpu:7.1f} CPU s  {f}" for f, (cpu, end) in files.items()
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--workers"]:
        print(workers())
    else:
        print(summary(int(sys.argv[1]) if len(sys.argv) > 1 else 25))
