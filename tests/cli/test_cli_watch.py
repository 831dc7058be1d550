"""``govern watch``'s refusals before it serves: one line, exit code 2, nothing done."""

import pytest
from typer.testing import CliRunner

from miret_governance.cli.app import app

SECRET = "cli-watch-shared-secret"


@pytest.fixture
def watch_file(tmp_path):
    (tmp_path / "data.csv").write_text("a,label\n1,0\n")
    path = tmp_path / "watch.toml"
    path.write_text('[models."credit-rf"]\ndata = "data.csv"\n')
    return path


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--config", "watch.toml"],
            {},
            (
                "GOVERN_WEBHOOK_SECRET must hold the webhooks' shared secret (at least 16 "
                "characters; it is not set): set it in the receiver's environment, the same one "
                "--register gives the webhook"
            ),
        ),
        (
            ["--config", "watch.toml", "--secret-env", "MY_SECRET"],
            {"MY_SECRET": "short"},
            (
                "MY_SECRET must hold the webhooks' shared secret (at least 16 characters; it is "
                "shorter)"
            ),
        ),
        (
            ["--register"],
            {"GOVERN_WEBHOOK_SECRET": SECRET},
            "--register needs --url: the URL the server delivers to",
        ),
        (
            [],
            {"GOVERN_WEBHOOK_SECRET": SECRET},
            "give --config <watch file> (or --register --url URL)",
        ),
        (
            ["--config", "watch.toml"],
            {"GOVERN_WEBHOOK_SECRET": SECRET, "GOVERN_SIGNING_KEY": None},
            (
                "govern watch signs its explanations and audit records: give --signing-key (or "
                "GOVERN_SIGNING_KEY)"
            ),
        ),
    ],
    ids=["no-secret", "short-secret", "register-without-url", "no-config", "no-key"],
)
def test_refusals(watch_file, monkeypatch, args, env, message):
    monkeypatch.delenv("GOVERN_WEBHOOK_SECRET", raising=False)
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name)
        else:
            monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["watch", *args])
    assert result.exit_code == 2
    assert " ".join(result.stderr.split()).startswith(f"error: {message}")
    assert result.stdout == ""


def _bad_watch_file(watch_file) -> str:
    watch_file.write_text('[models."credit-rf"]\ntarget = "label"\n')
    return (
        f'[models."credit-rf"] of {watch_file}: needs data = <file> and takes only '
        "data, target, test_data, depth, alpha, gamma_percentile, proximity_threshold, "
        "max_rows, solver, time_limit, seed, min_test_rows, allow_invalid (got no data)"
    )


def _bad_state_file(watch_file) -> str:
    state = watch_file.parent / ".govern-watch" / "accepted_deliveries.json"  # the default
    state.parent.mkdir()
    state.write_text("[]")
    return (
        f"the watch state {state} is not a delivery id -> timestamp table: give --state-dir "
        "a folder only this receiver writes, or delete the file (a delivery accepted in the "
        "last 300 s could then be replayed once)"
    )


@pytest.mark.parametrize("spoil", [_bad_watch_file, _bad_state_file], ids=["watch", "state"])
def test_a_bad_file_is_refused(watch_file, monkeypatch, spoil):
    monkeypatch.setenv("GOVERN_WEBHOOK_SECRET", SECRET)
    message = spoil(watch_file)
    result = CliRunner().invoke(app, ["watch", "--config", str(watch_file)])
    assert result.exit_code == 2
    assert " ".join(result.stderr.split()) == f"error: {message}"
