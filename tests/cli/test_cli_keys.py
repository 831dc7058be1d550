"""`govern keygen`: a key pair for signing, never overwritten; a signing key's value is
never echoed, and a key "file" that is a device or a FIFO is refused at once (exit 2)."""

import os
import stat
import subprocess

import pytest
from signing_keys import CI_KEY, key_pair
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.governance.trust.keyring import PublicKey, SignatureError
from miret_governance.governance.trust.signers import SIGNING_KEY_ENV, SigningKey

GATE = ["gate", "--model-uri", "models:/m/1"]
APPROVE = ["approve", "--model-uri", "models:/m/1", "--alias", "prod", "--decision", "approve"]


def test_keygen_writes_a_pair_and_its_fingerprint(tmp_path):
    result = CliRunner().invoke(app, ["keygen", "--out", str(tmp_path / "keys" / "ci")])
    assert result.exit_code == 0, result.output
    private, public = tmp_path / "keys" / "ci.pem", tmp_path / "keys" / "ci.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    fingerprint = PublicKey.parse("ci", public.read_bytes(), ("explain",), "ci.pub").fingerprint
    assert SigningKey.load(private).fingerprint == fingerprint
    lines = result.output.splitlines()
    assert lines[0].startswith(f"private key: {private} ")
    assert lines[1].startswith(f"public key:  {public} ")
    assert lines[2] == f"fingerprint: {fingerprint}"

    again = CliRunner().invoke(app, ["keygen", "--out", str(tmp_path / "keys" / "ci")])
    assert again.exit_code == 2
    assert "exists already; keys are never overwritten" in again.output
    assert SigningKey.load(private).fingerprint == fingerprint


def test_keygen_encrypts_with_a_password_from_the_environment(tmp_path, monkeypatch):
    out = str(tmp_path / "signer")
    missing = CliRunner().invoke(app, ["keygen", "--out", out, "--password-env", "KEY_PASSWORD"])
    assert missing.exit_code == 2
    assert "--password-env KEY_PASSWORD: the environment variable is unset" in missing.output
    monkeypatch.setenv("KEY_PASSWORD", "s3cret")
    result = CliRunner().invoke(app, ["keygen", "--out", out, "--password-env", "KEY_PASSWORD"])
    assert result.exit_code == 0, result.output
    assert "s3cret" not in result.output
    key = SigningKey.load(f"{out}.pem", "s3cret")
    assert result.output.splitlines()[2] == f"fingerprint: {key.fingerprint}"
    with pytest.raises(SignatureError, match="its password in GOVERN_SIGNING_KEY_PASSWORD"):
        SigningKey.load(f"{out}.pem")


@pytest.mark.parametrize(
    "args, env_value",
    [
        (GATE, True),
        ([*APPROVE, "--comment", "ok"], True),
        (GATE, False),  # --signing-key <body>
    ],
    ids=["gate-env", "approve-env", "gate-option"],
)
def test_a_key_body_without_its_pem_lines_is_never_echoed(args, env_value):
    body = "".join(key_pair("leaky-cli")[0].read_text().splitlines()[1:-1])
    env = {SIGNING_KEY_ENV: body if env_value else None}
    result = CliRunner().invoke(app, args if env_value else [*args, "--signing-key", body], env=env)
    leaked = any(body[i : i + 20] in result.output for i in range(len(body) - 19))
    assert not leaked, "the output shows part of the key"
    assert result.exit_code == 2
    source = SIGNING_KEY_ENV if env_value else "--signing-key"
    assert result.output == (
        f"error: the value of {source} ({len(body)} characters) is not a path to an existing "
        "file (No such file or directory) and is not PEM text (no -----BEGIN line): give a "
        "path or the whole PEM text\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
@pytest.mark.parametrize("where", ["signing key", "policy"])
def test_a_device_or_fifo_as_a_key_file_fails_at_once(tmp_path, special, where, warm_bin):
    os.mkfifo(tmp_path / "fifo")
    path = tmp_path / special
    env = {
        **os.environ,
        SIGNING_KEY_ENV: str(path if where == "signing key" else key_pair(CI_KEY)[0]),
    }
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[gates]\n[keys.ci]\npublic_key = "{special}"\nmay_sign = ["explain"]\n')
    # a process of its own (forked from the worker's warm one): a blocked read stops only it
    done = subprocess.run(
        [warm_bin / "govern", *GATE, "--policy", str(policy)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    kind = "a character device" if special == "/dev/zero" else "a FIFO"
    source = SIGNING_KEY_ENV if where == "signing key" else f"[keys.ci] public_key of {policy}"
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: {source} names {path}, which is {kind}: give the key file govern keygen wrote\n"
    )
