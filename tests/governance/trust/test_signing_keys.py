"""Keys fail closed (issue 38): no message shows a key's value, key files are read only
when they are small regular files, and a policy's trust means what it says (a key listed
once; four eyes are two keys; no more approvals asked than approvers trusted). Keys in a
PKCS#11 token (issue 41, a SoftHSM2 token: ``tests/hsm.py``) sign alone or with their CA
certificate; the PIN never comes from the URI; a missing token, key or module, a wrong
PIN and a certificate for another key are refused with the fix."""

import base64
import hashlib
import json
import os
import signal
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from pki import TestCA
from signing_keys import CI_KEY, key_pair

from miret_governance.governance.trust.keyring import MAX_KEY_FILE_BYTES, SignatureError, public_pem
from miret_governance.governance.trust.policy import PolicyError, load_policy
from miret_governance.governance.trust.signers import (
    PKCS11_PIN_ENV,
    PKCS11_PIN_FILE_ENV,
    SIGNING_KEY_ENV,
    SIGNING_KEY_PASSWORD_ENV,
    SigningKey,
    generate_key_pair,
    sign_path,
)
from miret_governance.governance.trust.signing import verify_path

pytest_plugins = ["hsm"]

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


# ---------------------------------------------------------------------- PKCS#11 tokens
def _verify_with_ca(ca, path: Path, signature: Path) -> None:
    from model_signing import verifying

    config = verifying.Config().use_certificate_verifier(certificate_chain=[ca.root_path])
    config.verify(path, signature)


def _bundle_chain(signature: Path) -> list:
    material = json.loads(signature.read_text())["verificationMaterial"]
    return [
        base64.b64decode(c["rawBytes"]) for c in material["x509CertificateChain"]["certificates"]
    ]


def test_a_token_key_signs_alone_or_with_its_certificate(softhsm, tmp_path):
    (tmp_path / "data.txt").write_text("evidence")
    issued = softhsm.certificate("ci")
    raw = SigningKey.load(softhsm.uri(), source="--signing-key", pin=softhsm.pin)
    assert repr(raw) == "SigningKey(source=\"--signing-key (token 'govern-test', key 'ci')\")"
    assert (
        raw.fingerprint == hashlib.sha256(public_pem(issued.certificate.public_key())).hexdigest()
    )
    assert raw.certificates == ()
    sign_path(tmp_path / "data.txt", raw, tmp_path / "raw.sig")
    signer = verify_path(
        tmp_path / "data.txt",
        tmp_path / "raw.sig",
        raw.trusted_for("explain", "hsm"),
        "explain",
        "it",
    )
    assert signer.fingerprint == raw.fingerprint

    certified = SigningKey.load(
        softhsm.uri(),
        None,
        "--signing-key",
        issued.certificate_path,
        softhsm.ca.intermediate_path,
        softhsm.pin,
    )
    der = serialization.Encoding.DER
    assert certified.certificates == (
        issued.certificate.public_bytes(der),
        softhsm.ca.intermediate.public_bytes(der),
    )
    assert certified.fingerprint == raw.fingerprint
    sign_path(tmp_path / "data.txt", certified, tmp_path / "certified.sig")
    assert _bundle_chain(tmp_path / "certified.sig") == list(certified.certificates)
    _verify_with_ca(softhsm.ca, tmp_path / "data.txt", tmp_path / "certified.sig")


def test_a_file_key_with_a_password_signs_with_its_certificate(tmp_path):
    ca = TestCA(tmp_path / "ca")
    issued = ca.issue("alice", "alice@risk.example.com")
    locked = tmp_path / "alice.pem"
    key = serialization.load_pem_private_key(issued.key_path.read_bytes(), None)
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret"),
        )
    )
    (tmp_path / "data.txt").write_text("approval")
    signing_key = SigningKey.load(
        locked,
        "s3cret",
        SIGNING_KEY_ENV,
        issued.certificate.public_bytes(serialization.Encoding.PEM).decode(),
    )
    assert len(signing_key.certificates) == 1  # PEM text, no chain: the CA's store has it
    sign_path(tmp_path / "data.txt", signing_key, tmp_path / "data.sig")
    ca_store = tmp_path / "ca-store.pem"
    ca_store.write_bytes(ca.root_path.read_bytes() + ca.intermediate_path.read_bytes())
    from model_signing import verifying

    config = verifying.Config().use_certificate_verifier(certificate_chain=[ca_store])
    config.verify(tmp_path / "data.txt", tmp_path / "data.sig")


def test_model_signing_still_needs_the_workaround(softhsm, tmp_path):
    """The certificate bundles of :func:`signers._certified` replace two model-signing
    1.1.1 signers (signers' module docstring). When this test fails, upstream has fixed
    them: sign through ``use_pkcs11_certificate_signer`` and ``use_certificate_signer``
    and drop the subclass."""
    import inspect

    from model_signing import signing
    from pydantic import ValidationError

    (tmp_path / "data.txt").write_text("evidence")
    issued = softhsm.certificate("ci")
    config = signing.Config().use_pkcs11_certificate_signer(
        pkcs11_uri=f"{softhsm.uri()}&pin-value={softhsm.pin}",
        signing_certificate=issued.certificate_path,
        certificate_chain=[softhsm.ca.intermediate_path],
    )
    with pytest.raises(ValidationError):  # no tlogEntries; raw DER where base64 belongs
        config.sign(tmp_path / "data.txt", tmp_path / "data.sig")
    del config  # its token session: another login is refused while it lives
    parameters = inspect.signature(signing.Config.use_certificate_signer).parameters
    assert "password" not in parameters, "use_certificate_signer takes a key password now"


@pytest.mark.parametrize(
    "uri, problem",
    [
        (
            {"token": "no-such-token"},
            (
                "the module of --signing-key (token 'no-such-token', key 'ci') has no such "
                "token: correct token= (the token's label) in the URI (SoftHSM2 finds its "
                "tokens through SOFTHSM2_CONF)"
            ),
        ),
        (
            {"label": "no-such-key"},
            (
                "the token of --signing-key (token 'govern-test', key 'no-such-key') holds no "
                "such key: correct object= (the key's label) or id= in the URI (pkcs11-tool "
                "--list-objects lists them)"
            ),
        ),
        (
            {"module": "/usr/lib/softhsm/libnothing.so"},
            (
                "the PKCS#11 module /usr/lib/softhsm/libnothing.so of --signing-key (token "
                "'govern-test', key 'ci') does not exist: install it (SoftHSM2: apt-get "
                "install softhsm2; make services does) or correct module-path"
            ),
        ),
        (
            {"module": "/etc/passwd"},
            (
                "the PKCS#11 module of --signing-key (token 'govern-test', key 'ci') cannot be "
                "loaded (Load (/etc/passwd)): module-path must name the vendor's PKCS#11 "
                "library (.so)"
            ),
        ),
        (
            "pkcs11:token=govern-test;object=ci",
            (
                "the PKCS#11 URI of --signing-key (token 'govern-test', key 'ci') names no "
                "module: add ?module-path=<the vendor's PKCS#11 module> (SoftHSM2: "
                "/usr/lib/softhsm/libsofthsm2.so)"
            ),
        ),
        (
            "pkcs11:token=govern-test?module-path=/usr/lib/softhsm/libsofthsm2.so",
            (
                "the PKCS#11 URI of --signing-key cannot be used (Neither 'id' nor 'object' "
                "attributes were found in pkcs11 URI); write it as pkcs11:token=<token "
                "label>;object=<key label>?module-path=<the vendor's PKCS#11 module, e.g. "
                "/usr/lib/softhsm/libsofthsm2.so>"
            ),
        ),
    ],
    ids=["unknown-token", "unknown-key", "missing-module", "not-a-module", "no-module", "no-key"],
)
def test_a_token_key_that_cannot_be_found_names_the_fix(softhsm, uri, problem):
    uri = softhsm.uri(**uri) if isinstance(uri, dict) else uri
    with pytest.raises(SignatureError) as error:
        SigningKey.load(uri, source="--signing-key", pin=softhsm.pin)
    assert str(error.value) == problem


def test_the_pin_comes_from_the_environment_or_a_file_never_the_uri(softhsm, tmp_path):
    key = "--signing-key (token 'govern-test', key 'ci')"
    fix = (
        f"set {PKCS11_PIN_ENV} to the token's user PIN, or {PKCS11_PIN_FILE_ENV} to a file "
        "holding it"
    )
    pin_file = tmp_path / "pin"
    pin_file.write_text(f"{softhsm.pin}\n")  # as `echo` writes it: the newline is not the PIN's
    loaded = SigningKey.load(softhsm.uri(), source="--signing-key", pin_file=pin_file)
    assert loaded.fingerprint == SigningKey.load(softhsm.uri(), pin=softhsm.pin).fingerprint

    refused = {
        (
            f"{softhsm.uri()}&pin-value={softhsm.pin}",
            softhsm.pin,
            None,
        ): "the PKCS#11 URI of --signing-key "
        "holds the PIN (pin-value): it would end up in shell history and CI logs; remove it "
        f"and {fix}",
        (f"{softhsm.uri()}&pin-source={pin_file}", None, None): "the PKCS#11 URI of "
        "--signing-key holds the PIN (pin-source): model-signing reads that file with its "
        f"newline; remove it and {fix}",
        (softhsm.uri(), None, None): f"the token key of {key} needs the token's PIN: {fix}",
        (softhsm.uri(), softhsm.pin, pin_file): f"both {PKCS11_PIN_ENV} and {PKCS11_PIN_FILE_ENV} "
        f"are set for {key}: set one",
        (softhsm.uri(), None, tmp_path / "nope"): f"{PKCS11_PIN_FILE_ENV} names "
        f"{tmp_path / 'nope'}, which cannot be read (No such file or directory): give the "
        "file holding the token's user PIN",
        (softhsm.uri(), "0000", None): f"the PIN of {key} is wrong (CKR_PIN_INCORRECT): {fix}",
    }
    for (uri, pin, pin_file_given), problem in refused.items():
        with pytest.raises(SignatureError) as error:
            SigningKey.load(uri, source="--signing-key", pin=pin, pin_file=pin_file_given)
        assert str(error.value) == problem


def test_a_certificate_for_another_key_or_chain_is_refused(softhsm, tmp_path):
    ci, alice = softhsm.certificate("ci"), softhsm.certificate("alice")
    other_ca = TestCA(tmp_path / "other", name="Other Bank")
    with pytest.raises(SignatureError) as error:
        SigningKey.load(
            softhsm.uri(), None, "--signing-key", alice.certificate_path, pin=softhsm.pin
        )
    assert str(error.value) == (
        "the certificate 'CN=alice@risk.example.com,O=Example Bank' of --signing-certificate "
        f"({alice.certificate_path}) is not for the key of --signing-key (token "
        "'govern-test', key 'ci'): give the certificate your CA issued for that key"
    )
    with pytest.raises(SignatureError) as error:
        SigningKey.load(
            softhsm.uri(), None, "--signing-key", ci.certificate_path,
            other_ca.intermediate_path, softhsm.pin, certificate_sources=("A", "B"),
        )  # fmt: skip
    assert str(error.value) == (
        f"B ({other_ca.intermediate_path}) does not hold 'CN=Example Bank Signing CA,O=Example "
        f"Bank', the CA that issued A ({ci.certificate_path}): give your CA's intermediate "
        "certificates"
    )
    with pytest.raises(SignatureError) as error:
        SigningKey.load(key_pair(CI_KEY)[0], chain=softhsm.ca.intermediate_path)
    assert str(error.value) == (
        "--certificate-chain is given without --signing-certificate: give the certificate "
        "your CA issued for the signing key too, or neither"
    )
