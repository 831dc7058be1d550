"""`govern keygen`: a key pair for signing, never overwritten."""

import stat

import pytest
from typer.testing import CliRunner

from miret_governance.cli.app import app
from miret_governance.governance.signing import PublicKey, SignatureError, SigningKey


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
