"""Keys fail closed (issue 38): no message shows a key's value, key files are read only
when they are small regular files, and a policy's trust means what it says (a key listed
once; four eyes are two keys; no more approvals asked than approvers trusted)."""

import os
import signal
from pathlib import Path

import pytest
from signing_keys import CI_KEY, key_pair

from miret_governance.governance.trust.policy import PolicyError, load_policy
from miret_governance.governance.trust.signers import SigningKey, generate_key_pair
from miret_governance.governance.trust.signing import (
    MAX_KEY_FILE_BYTES,
    SIGNING_KEY_ENV,
    SIGNING_KEY_PASSWORD_ENV,
    SignatureError,
)

NOT_A_KEY = (
    "is not a path to an existing file (No such file or directory) and is not PEM text "
    "(no -----BEGIN line): give a path or the whole PEM text"
)


def key_body(name: str = "leaky") -> str:
    """The base64 body of a private key's PEM, without its BEGIN and END lines."""
    return "".join(key_pair(name)[0].read_text().splitlines()[1:-1])


def leaks(secret: str, text: str) -> bool:
    """Whether ``text`` holds any 20 consecutive characters of ``secret``."""
    return any(secret[i : i + 20] in text for i in range(len(secret) - 19))


@pytest.fixture
def deadline():
    """Ten seconds for the test: a read that blocks (a FIFO) fails it instead of hanging."""

    def expire(*_):
        raise TimeoutError("reading a key blocked")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def policy(folder: Path, keys: dict, approvals: str = "") -> Path:
    """A policy file trusting ``keys`` (name -> (public_key value, may_sign))."""
    text = "[gates]\nmin_fidelity = 0.9\n"
    for name, (public_key, may_sign) in keys.items():
        purposes = ", ".join(f'"{p}"' for p in may_sign)
        text += f"\n[keys.{name}]\npublic_key = '''{public_key}'''\nmay_sign = [{purposes}]\n"
    if approvals:
        text += f"\n[approvals]\n{approvals}\n"
    path = folder / "policy.toml"
    path.write_text(text)
    return path


def public(name: str) -> str:
    return str(key_pair(name)[1])


# ---------------------------------------------------------------------- key values
@pytest.mark.parametrize(
    "mangle",
    [
        lambda pem: "".join(pem.splitlines()[1:-1]),  # the body alone, on one line
        lambda pem: "\n".join(pem.splitlines()[1:]),  # without its BEGIN line
        lambda pem: pem.replace("-----BEGIN", "----BEGIN"),  # a mangled BEGIN line
    ],
    ids=["body", "no-begin-line", "mangled-begin"],
)
def test_a_key_value_that_is_neither_a_path_nor_pem_is_never_shown(mangle):
    value = mangle(key_pair("leaky")[0].read_text()).strip()
    with pytest.raises(SignatureError) as error:
        SigningKey.load(value, source="--signing-key")
    leaked = leaks(key_body(), str(error.value))
    assert not leaked, "the message shows part of the key"
    assert str(error.value) == f"the value of --signing-key ({len(value)} characters) {NOT_A_KEY}"
    assert error.value.__cause__ is None and error.value.__context__ is None

    with pytest.raises(SignatureError) as error:  # the edge names the variable it read
        SigningKey.load(value, source=SIGNING_KEY_ENV)
    leaked = leaks(key_body(), str(error.value))
    assert not leaked, "the message shows part of the key"
    assert (
        str(error.value) == f"the value of {SIGNING_KEY_ENV} ({len(value)} characters) " + NOT_A_KEY
    )


def test_a_wrong_password_is_never_shown(tmp_path):
    private, _ = generate_key_pair(tmp_path / "locked", password="right-horse-battery")
    with pytest.raises(SignatureError) as error:  # as the edge passes the variables' values
        SigningKey.load(str(private), "wrong-horse-battery", SIGNING_KEY_ENV)
    message = str(error.value)
    assert "horse" not in message
    assert message.startswith(
        f"the signing key from {SIGNING_KEY_ENV} ({private}) cannot be loaded ("
    )
    assert message.endswith(
        "); give the PEM private key govern keygen wrote, and its password in "
        f"{SIGNING_KEY_PASSWORD_ENV} if it has one"
    )


def test_the_pem_text_itself_still_loads():
    private = key_pair(CI_KEY)[0]
    key = SigningKey.load(private.read_text(), source=SIGNING_KEY_ENV)
    assert key.fingerprint == SigningKey.load(private).fingerprint
    assert repr(key) == "SigningKey(source='GOVERN_SIGNING_KEY')"


# ---------------------------------------------------------------------- key files
@pytest.mark.usefixtures("deadline")
def test_only_small_regular_files_are_read_as_keys(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big.pem").write_bytes(b"A" * (MAX_KEY_FILE_BYTES + 1))
    expected = {
        "/dev/zero": "which is a character device: give the key file govern keygen wrote",
        str(tmp_path / "fifo"): "which is a FIFO: give the key file govern keygen wrote",
        str(tmp_path): "which is a directory: give the key file govern keygen wrote",
        str(tmp_path / "big.pem"): "which is larger than 16 KiB: a PEM key is a few hundred "
        "bytes; give the key file govern keygen wrote",
    }
    for path, problem in expected.items():
        with pytest.raises(SignatureError) as error:
            SigningKey.load(path, source=SIGNING_KEY_ENV)
        assert str(error.value) == f"{SIGNING_KEY_ENV} names {path}, {problem}"


@pytest.mark.usefixtures("deadline")
@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_policy_refuses_a_public_key_that_is_not_a_regular_file(tmp_path, special):
    os.mkfifo(tmp_path / "fifo")
    path = policy(tmp_path, {"ci": (special, ["explain"])})
    with pytest.raises(PolicyError) as error:
        load_policy(path)
    kind = "a character device" if special == "/dev/zero" else "a FIFO"
    assert str(error.value) == (
        f"[keys.ci] public_key of {path} names {Path(tmp_path, special)}, which is {kind}: "
        "give the key file govern keygen wrote"
    )


def test_a_policy_never_shows_a_public_key_value_that_is_not_a_path(tmp_path):
    body = "".join(key_pair(CI_KEY)[1].read_text().splitlines()[1:-1])
    path = policy(tmp_path, {"ci": (body, ["explain"])})
    with pytest.raises(PolicyError) as error:
        load_policy(path)
    leaked = leaks(body, str(error.value))
    assert not leaked, "the message shows part of the public key"
    assert str(error.value) == (
        f"the value of [keys.ci] public_key of {path} ({len(body)} characters) {NOT_A_KEY}"
    )


# ---------------------------------------------------------------------- policy rules
@pytest.mark.parametrize("bob", [["approve"], ["explain"]])
def test_a_key_is_listed_once_with_every_purpose_it_may_sign(tmp_path, bob):
    twice = {"alice": (public("alice"), ["explain", "decide"]), "bob": (public("alice"), bob)}
    with pytest.raises(PolicyError) as error:
        load_policy(policy(tmp_path, twice))
    merged = '["explain", "decide", "approve"]' if bob == ["approve"] else '["explain", "decide"]'
    assert str(error.value) == (
        f"{tmp_path / 'policy.toml'}: [keys.alice] and [keys.bob] list the same public key; a "
        "key is listed once, with every purpose it may sign in its may_sign list: keep one "
        f"of the two tables, with may_sign = {merged}"
    )


def test_four_eyes_need_two_keys(tmp_path):
    one_key = {"ci": (public(CI_KEY), ["explain", "decide", "approve"])}
    assert load_policy(policy(tmp_path, one_key)).keys.names("approve") == ["ci"]
    path = policy(tmp_path, one_key, approvals="prod = 1\nchampion = 1")
    with pytest.raises(PolicyError) as error:
        load_policy(path)
    assert str(error.value) == (
        f"{path}: [keys.ci] may sign both decide and approve, and [approvals] asks for "
        "approvals of champion, prod: one key could approve and promote alone (four eyes "
        "with one key). Give approve to reviewers' keys and decide to the CI key, never both "
        "to one key"
    )


def test_no_more_approvals_than_approvers(tmp_path):
    keys = {"ci": (public(CI_KEY), ["explain", "decide"]), "alice": (public("alice"), ["approve"])}
    path = policy(tmp_path, keys, approvals="prod = 2")
    with pytest.raises(PolicyError) as error:
        load_policy(path)
    assert str(error.value) == (
        f"{path}: approvals prod = 2 asks for 2 distinct approvers, but the policy trusts 1 "
        'key to approve (alice): add a [keys.<name>] table with may_sign = ["approve"] for '
        "each further reviewer, or ask for at most 1"
    )
    keys["bob"] = (public("bob"), ["approve"])
    assert load_policy(policy(tmp_path, keys, approvals="prod = 2")).approvals == {"prod": 2}


def test_the_readme_four_eyes_policy_and_the_examples_load(tmp_path):
    examples = Path(__file__).resolve().parents[3] / "examples" / "policies"
    for example in sorted(examples.glob("*.toml")):
        text = example.read_text() + (
            f'\n[keys.demo]\npublic_key = "{public(CI_KEY)}"\nmay_sign = ["explain", "decide"]\n'
        )
        (tmp_path / example.name).write_text(text)
        assert load_policy(tmp_path / example.name).keys.names("decide") == ["demo"]
    four_eyes = (tmp_path / "lenient.toml").read_text() + (
        f'\n[keys.reviewer]\npublic_key = "{public("reviewer")}"\nmay_sign = ["approve"]\n'
        "\n[approvals]\nprod = 1\n"
    )
    (tmp_path / "four-eyes.toml").write_text(four_eyes)
    assert load_policy(tmp_path / "four-eyes.toml").approvals == {"prod": 1}
