"""``govern serve`` and ``GOVERN_SERVER``: a command handed to the warm process runs as it
would on its own (output, exit code, working folder, environment); the refusals. The
README's commands also run through the same engine (``tests/govern_forks.py``)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from miret_governance.cli import app as app_module
from miret_governance.cli.app import app

GOVERN = str(Path(sys.executable).with_name("govern"))


def test_a_socket_folder_open_to_others_is_refused_before_any_import(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    result = CliRunner().invoke(app, ["serve", "--socket", str(folder / "govern.sock")])
    assert result.exit_code == 2
    assert f"error: {folder} must belong to you and be closed to others (chmod 700 " in (
        result.output.replace("\n", " ")
    )
    assert not (folder / "govern.sock").exists()


def test_a_server_named_but_not_running_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GOVERN_SERVER", str(tmp_path / "none.sock"))
    monkeypatch.setattr(sys, "argv", ["govern", "show", "--model-uri", "models:/m/1"])
    with pytest.raises(SystemExit) as done:
        app_module.main()
    assert done.value.code == 2
    assert (
        capsys.readouterr()
        .err.replace("\n", " ")
        .startswith(
            f"error: no govern serve answers on {tmp_path / 'none.sock'} (No such file or "
            "directory): start it with `govern serve`, or unset GOVERN_SERVER"
        )
    )


@pytest.mark.slow
def test_commands_handed_to_govern_serve_run_as_on_their_own(tmp_path):
    folder = tmp_path / "warm"
    folder.mkdir(mode=0o700)
    path = folder / "govern.sock"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    server = subprocess.Popen(
        [GOVERN, "serve", "--socket", str(path)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while not path.is_socket():
            assert server.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)
        warm = {**env, "GOVERN_SERVER": str(path), "MLFLOW_TRACKING_URI": "sqlite:///here.db"}
        (tmp_path / "work").mkdir()
        ran = {}
        for name, environment in (("warm", warm), ("cold", {**warm, "GOVERN_SERVER": ""})):
            ran[name] = subprocess.run(
                [GOVERN, "show", "--model-uri", "models:/absent/1"],
                cwd=tmp_path / "work",
                env=environment,
                capture_output=True,
                text=True,
                check=False,
            )
        # the same refusal, exit code and streams: the command saw this folder's store
        # (read-only commands never create one) and this environment's tracking URI
        assert ran["warm"].returncode == ran["cold"].returncode == 2
        assert ran["warm"].stdout == ran["cold"].stdout
        assert ran["warm"].stderr == ran["cold"].stderr
        assert "here.db" in ran["warm"].stderr
        assert list((tmp_path / "work").iterdir()) == []
        second = subprocess.run(
            [GOVERN, "serve", "--socket", str(path)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert second.returncode == 2
        assert f"a govern serve already answers on {path}" in second.stderr.replace("\n", " ")
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert not path.exists()  # removed on the way out
    assert "export GOVERN_SERVER=" in server.stdout.read()
