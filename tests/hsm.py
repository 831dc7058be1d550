"""A SoftHSM2 token for the tests: keys generated inside it (never extractable), each with
a certificate from the test CA (``tests/pki.py``), and the ``pkcs11:`` URI that names it.

SoftHSM2 (``make services`` installs it: ``examples/server/ensure_softhsm.sh``) keeps its
tokens in the folder its configuration file names, and reads ``SOFTHSM2_CONF`` once per
process, when the module is first loaded. So the token is made once per test process, in
a temporary folder, by the session fixture :func:`softhsm` (a plugin: a test module says
``pytest_plugins = ["hsm"]``).
"""

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from pki import Issued, TestCA

MODULE = "/usr/lib/softhsm/libsofthsm2.so"
LABEL = "govern-test"
PIN = "4711-0815"
SO_PIN = "87654321"
P256 = bytes.fromhex("06082a8648ce3d030107")
"""DER of the P-256 curve's object identifier (1.2.840.10045.3.1.7): CKA_EC_PARAMS."""
IDENTITIES = {
    "ci": "spiffe://bank.example/ci/governance",
    "alice": "alice@risk.example.com",
}
"""The token's keys (their labels) and the identity the CA certifies for each."""


@dataclass(frozen=True)
class Token:
    """The test token: its configuration, the CA and each key's certificate.

    Attributes
    ----------
    conf : Path
        The SoftHSM2 configuration (``SOFTHSM2_CONF``).
    ca : TestCA
    issued : dict
        Key label -> its :class:`pki.Issued` certificate.
    pin : str
        The user PIN.
    """

    conf: Path
    ca: TestCA
    issued: dict
    pin: str = PIN

    @staticmethod
    def uri(label: str = "ci", token: str = LABEL, module: str = MODULE) -> str:
        """The ``pkcs11:`` URI of the key ``label`` (no PIN: that comes from the
        environment)."""
        return f"pkcs11:token={token};object={label}?module-path={module}"

    def certificate(self, label: str = "ci") -> Issued:
        return self.issued[label]


def _make_token(labels) -> dict:
    """Initialise the token in SoftHSM2's free slot (PyKCS11, as an HSM vendor's tool
    would) and generate a P-256 key pair inside it for each of ``labels``, the private half
    sensitive and never extractable; label -> its public key."""
    import PyKCS11

    lib = PyKCS11.PyKCS11Lib()
    lib.load(MODULE)
    lib.initToken(lib.getSlotList(True)[0], SO_PIN, LABEL.ljust(32))  # labels are blank-padded
    slot = next(s for s in lib.getSlotList(True) if lib.getTokenInfo(s).label.strip() == LABEL)
    session = lib.openSession(slot, PyKCS11.CKF_SERIAL_SESSION | PyKCS11.CKF_RW_SESSION)
    session.login(SO_PIN, user_type=PyKCS11.CKU_SO)
    session.initPin(PIN)
    session.logout()
    session.login(PIN)
    keys = {}
    for label in labels:
        both = [
            (PyKCS11.CKA_TOKEN, True),
            (PyKCS11.CKA_LABEL, label),
            (PyKCS11.CKA_KEY_TYPE, PyKCS11.CKK_EC),
        ]
        public, _ = session.generateKeyPair(
            both + [(PyKCS11.CKA_CLASS, PyKCS11.CKO_PUBLIC_KEY), (PyKCS11.CKA_EC_PARAMS, P256),
                    (PyKCS11.CKA_VERIFY, True)],
            both + [(PyKCS11.CKA_CLASS, PyKCS11.CKO_PRIVATE_KEY), (PyKCS11.CKA_PRIVATE, True),
                    (PyKCS11.CKA_SIGN, True), (PyKCS11.CKA_SENSITIVE, True),
                    (PyKCS11.CKA_EXTRACTABLE, False)],
            mecha=PyKCS11.Mechanism(PyKCS11.CKM_EC_KEY_PAIR_GEN, None),
        )  # fmt: skip
        (point,) = session.getAttributeValue(public, [PyKCS11.CKA_EC_POINT])
        point = bytes(point)
        assert point[:2] == b"\x04\x41", "CKA_EC_POINT: a DER octet string of 65 bytes"
        keys[label] = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point[2:])
    session.logout()
    session.closeSession()
    return keys


@pytest.fixture(scope="session")
def softhsm(tmp_path_factory):
    """The test token, made once per test process; ``SOFTHSM2_CONF`` names it for the rest
    of the session (restored at its end)."""
    if not Path(MODULE).exists():
        pytest.fail(f"SoftHSM2 ({MODULE}) is missing: make services installs it")
    folder = tmp_path_factory.mktemp("softhsm")
    conf = folder / "softhsm2.conf"
    (folder / "tokens").mkdir()
    conf.write_text(
        f"directories.tokendir = {folder / 'tokens'}\nobjectstore.backend = file\n"
        "log.level = ERROR\nslots.removable = false\n"
    )
    before = os.environ.get("SOFTHSM2_CONF")
    os.environ["SOFTHSM2_CONF"] = str(conf)
    keys = _make_token(IDENTITIES)
    ca = TestCA(folder / "ca")
    issued = {
        label: ca.issue(label, identity, public_key=keys[label])
        for label, identity in IDENTITIES.items()
    }
    yield Token(conf, ca, issued)
    if before is None:
        os.environ.pop("SOFTHSM2_CONF", None)
    else:
        os.environ["SOFTHSM2_CONF"] = before
