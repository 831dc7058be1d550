"""Great Expectations validation in a child process that starts with the explain run.

Importing Great Expectations takes seconds, and validating runs Python that would hold
the GIL the surrogate's fit needs. :class:`ValidationWorker` starts ``python -m
flavors.validation_worker`` when an explain run begins (after the reuse check: a reused
explain validates nothing): the child imports Great Expectations while the parent starts
the run, then validates the frames it is sent while the parent fits. Only objects the parent built cross the pipe (the
frames and the loaded ensemble, pickled in; JSON out). When the child is unusable (it
did not start, died or timed out) :meth:`ValidationWorker.validate` returns None and
the caller validates in its own process with the same :func:`validate_frames`.
"""

from __future__ import annotations

import json
import logging
import pickle
import subprocess
import sys
from typing import Self

import numpy as np

TIMEOUT_S = 600
LOG = logging.getLogger(__name__)


def validate_frames(frames: dict, ensemble, label: str | None) -> dict:
    """Validate each frame's feature (and ``label``) columns against ``ensemble``.

    The first frame is the training data: every frame's missing values are checked
    against its share of missing values per column
    (:func:`governance.validation.missing_shares`).

    Returns
    -------
    dict
        Report name -> ``success``, ``results`` (Great Expectations' JSON result),
        ``summary`` (for people) and ``sound`` (columns, types and values allow the
        ensemble's normalization, so ``allow_invalid`` can explain anyway).
    """
    from miret_governance.governance.data.validation import (
        missing_shares,
        model_columns,
        raw_columns,
        validate_inputs,
    )

    training = next(iter(frames.values()))
    reference = missing_shares(training, [c for c in raw_columns(ensemble) if c in training])
    outcomes = {}
    for name, frame in frames.items():
        report = validate_inputs(
            model_columns(frame, ensemble, label or None)[0],
            ensemble,
            label=label or None,
            training_missing=reference,
        )
        outcomes[name] = {
            "success": bool(report.success),
            "results": report.to_json(),
            "summary": report.summary(),
            "sound": report.frame is not None
            and report.normalized is not None
            and not bool(np.isinf(report.normalized).any()),
        }
    return outcomes


class ValidationWorker:
    """The child process; :meth:`close` ends it if it still runs.

    A child is started for the first explain of a process only. A process that has
    imported Great Expectations already validates in place (about a second, less than a
    child needs to start), and so does one that explains a second time (a notebook, a
    scheduler, a test session): importing Great Expectations once costs less than a new
    child, and its import, for every later explain.
    """

    _started_once = False
    """Whether this process has started a child before (see the class docstring)."""

    def __init__(self):
        self._process = None
        if "great_expectations" in sys.modules or ValidationWorker._started_once:
            return
        ValidationWorker._started_once = True
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "miret_governance.flavors.explain.validation_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError:
            pass

    def validate(self, frames: dict, ensemble, label: str | None) -> dict | None:
        """:func:`validate_frames` in the child; None (and a logged warning) when the
        child cannot answer."""
        process, self._process = self._process, None
        if process is None:
            return None
        job = pickle.dumps((frames, ensemble, label), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            out, err = process.communicate(job, timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            process.kill()
            process.wait()
            LOG.warning("validating in this process: the validation worker failed (%s)", exc)
            return None
        if process.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
            LOG.warning(
                "validating in this process: the validation worker exited with code %s: %s",
                process.returncode,
                tail[0],
            )
            return None
        return json.loads(out)

    def close(self) -> None:
        """End the child if it still runs."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _serve() -> None:
    """The child: import Great Expectations, then validate the one job on stdin."""
    from miret_governance.governance.data.expectation_suites import import_great_expectations

    import_great_expectations()  # while the parent starts the run

    # stdin is a pipe only the parent holds: objects it built in memory, never an artifact
    frames, ensemble, label = pickle.load(sys.stdin.buffer)
    outcomes = validate_frames(frames, ensemble, label)
    sys.stdout.write(json.dumps(outcomes, default=str))


if __name__ == "__main__":
    _serve()
