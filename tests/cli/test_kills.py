"""Issue 38, item 8 in the suite: ``govern explain``, ``promote`` and ``approve`` killed
with SIGKILL at a seeded random moment (one trial each), then run again, leave a store
whose trail is whole: no run left RUNNING, the re-run succeeds (or refuses "fail closed"
until ``govern clear`` clears the record the kill left half-written), no orphan surrogate
version, the promotion lock taken over, no alias moved without a signed promotion record,
and a clean ``govern audit``.

The store, the trials and the checks are those of ``examples/benchmarks/kills.py`` (its
30 trials per command are the benchmark, ``results_kills.md``), imported as
``test_family_examples`` imports ``examples/families/``.
"""

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "examples" / "benchmarks"
TRIALS = 1
SEED = 0


@pytest.fixture
def kills(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import kills

    return kills


def _explained(trial) -> str:
    return (
        f"{trial.command} #{trial.number} (delay {trial.delay:.2f} s, "
        f"{'landed' if trial.landed else 'after the end'}; after the kill: "
        f"{'; '.join(trial.after_kill) or '-'}; re-run: {trial.rerun})"
    )


@pytest.mark.slow
def test_killed_commands_leave_a_trail_the_next_run_restores(kills, tmp_path):
    store = kills.build_store(tmp_path / "kills", log=lambda *_: None)
    assert set(store.references) == set(kills.COMMANDS)
    results = {
        command: kills.run_trials(store, command, TRIALS, SEED, log=lambda *_: None)
        for command in kills.COMMANDS
    }
    # the seeded delays: the same fractions of each command's typical duration
    fractions = [[t.fraction for t in trials] for trials in results.values()]
    assert fractions[0] == fractions[1] == fractions[2]
    every = [trial for trials in results.values() for trial in trials]
    assert all(0 <= t.delay <= t.typical for t in every)

    for trial in every:
        assert trial.violations == [], _explained(trial)
        # the re-run succeeded, or refused fail-closed naming the run, was cleared and
        # then succeeded; the audit lists the clearance and finds nothing
        assert trial.outcome in ("ok", "cleared"), _explained(trial)
        assert trial.findings == [], _explained(trial)
        if trial.outcome == "cleared":
            assert trial.blocked_run in {c["run_id"] for c in trial.cleared}

    # the approvals still count: version 2 is promoted to @reviewed, the audit is clean
    assert kills.final_approval_check(store) == []

    # the store at the end, checked apart from the trials' own checks
    assert kills.running_runs(store) == {}
    assert kills.orphans(store) == []
    assert not kills.lock_exists(store, kills.CHAMPION)
    holder = kills.holder(store, kills.CHAMPION)
    assert holder in kills.PROMOTED
    latest = kills.champion_records(store)[-1]
    assert latest.record.ensemble.uri == f"models:/{kills.MODEL}/{holder}"
    audit = store.audit()
    assert (audit.get("error"), audit["findings"], audit["clean"]) == (None, [], True)
