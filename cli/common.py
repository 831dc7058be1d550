"""What every ``govern`` command shares: consoles, the tracking URI, option types, the
estimator defaults shown in help, and the one mapping of errors to exit codes.

Importing this module (and every command module) costs no more than typer and rich:
MLflow, scikit-learn, pandas and the solver are imported by the command that runs, after
its options and files were checked, so ``govern --help`` and a mistyped path answer at
once.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from miret_governance.flavors.explain.defaults import (
    AUTO_DEPTH,
    DEPTH_CHOICES,
    ENSEMBLE_DEPTH,
    MIN_TEST_ROWS,  # noqa: F401 - for the command modules: --min-test-rows's default
    parse_depth,
)
from miret_governance.governance.errors import CheckFailedError, GovernanceError, InvalidInputError
from miret_governance.governance.miret.solvers.solve_result import DEFAULT_TIME_LIMIT
from miret_governance.governance.trust.policy import POLICY_ENV, load_policy
from miret_governance.governance.trust.policy_signature import (
    POLICY_TRUST_ENV,
    REQUIRE_SIGNED_POLICY_ENV,
    checked_policy,
    requirement,
)
from miret_governance.governance.trust.signers import (
    CERTIFICATE_CHAIN_ENV,
    CERTIFICATE_OPTIONS,
    PKCS11_PIN_ENV,
    PKCS11_PIN_FILE_ENV,
    SIGNING_CERTIFICATE_ENV,
    SIGNING_KEY_ENV,
    SIGNING_KEY_PASSWORD_ENV,
    SigningKey,
)

SQLITE_PREFIX = "sqlite:///"
EXIT_FAILED = 1
"""A check failed: a gate, the input validation, a reproduction."""
EXIT_ERROR = 2
"""The request could not be carried out (bad option, URI, file or policy; unreachable
server; locked store)."""
EXIT_CODES_HELP = (
    "Exit codes, the same for every command: 0 done (every check passed); 1 a check "
    "failed (a gate, the input validation, a reproduction, an audit finding); 2 the "
    "request could not be carried out (bad option, URI, file or policy, unreachable "
    "server, locked store). "
    "With --json (show, explain-row, gate, validate, reproduce, audit, diff) stdout holds one "
    "JSON object whenever the exit code is 0 or 1; on exit code 2 stdout is empty and stderr "
    "says what to fix."
)
JSON_SCHEMA_VERSION = 1
"""``schema_version`` of every ``--json`` object; it changes only when a key changes
meaning or disappears (new keys may be added)."""
GOVERN_SERVER = "GOVERN_SERVER"
"""The environment variable naming the socket of a warm ``govern serve`` (see
:mod:`cli.warm_process`); unset, every command runs in its own fresh process."""

DEFAULTS = {
    "alpha": None,
    "gamma_percentile": 100 / 3,
    "proximity_threshold": None,
    "max_rows": 2000,
    "generated_rows": 0.0,
    "solver": "auto",
    "time_limit": DEFAULT_TIME_LIMIT,
    "random_state": 0,
}
"""The estimator defaults the CLI shows and passes: ``MiretSurrogate().get_params()``
repeated as literals, so that ``--help`` needs no solver import
(``tests/cli/test_cli_contract.py`` keeps them equal); the time limit is read from its
one definition, ``solve_result.DEFAULT_TIME_LIMIT`` (a module that imports nothing
heavy)."""
SEARCH_DEFAULTS = {"search_time_limit": 5.0, "cv": 4, "tolerance": 0.01, "backend": "loky"}
"""``MiretSearchCV(None).get_params()`` repeated as literals (kept equal by the same test)."""
CANDIDATE_CAP = 5.0
"""``governance.miret.search.CANDIDATE_CAP``: a search candidate's safety cap, in
multiples of its budget."""

# ---------------------------------------------------------------------- option types
FILE_KINDS = {
    "--data": "CSV or Parquet file",
    "--test-data": "CSV or Parquet file",
    "--policy": "TOML policy file",
    "--policy-trust": "TOML policy trust file",
}
"""The file options :func:`existing_file` checks, and what each must name."""


def existing_file(ctx: typer.Context, param: typer.CallbackParam, value: Path | None):
    """Refuse a path that is missing, a directory or unreadable while the options are
    parsed, before anything is imported, connected or loaded (exit code 2)."""
    if value is None or ctx.resilient_parsing:
        return value
    from miret_governance.governance.data.spark import SPARK_PREFIX

    if str(value).startswith(SPARK_PREFIX):
        raise fail(
            f"{param.opts[0]} {value}: this command reads a CSV or Parquet file and takes no "
            "Spark table yet (gate, promote, validate, diff, explain, reproduce and explain-row "
            "do); give a file sample"
        )
    _check_file(param.opts[0], value)
    return value


def _check_file(flag: str, value: Path) -> None:
    """Refuse (exit code 2) a path that is missing, a directory or unreadable."""
    problem = None
    if not value.exists():
        problem = "does not exist"
    elif value.is_dir():
        problem = "is a directory"
    elif not os.access(value, os.R_OK):
        problem = "is not readable"
    if problem is not None:
        kind = FILE_KINDS.get(flag, "file")
        raise fail(f"{flag} {value} {problem}; give the path of a readable {kind}")


def depth_value(ctx: typer.Context, param: typer.CallbackParam, value: str | int | None):
    """``--depth``'s text as the depth explain fits: an int, or None for ``auto``
    (:func:`flavors.explain.defaults.parse_depth`), refused while the options are parsed
    with the accepted values named (exit code 2)."""
    if value is None or ctx.resilient_parsing:
        return value
    try:
        return parse_depth(value)
    except InvalidInputError as error:
        raise fail(error) from None


Depth = Annotated[
    str,
    typer.Option(
        "--depth",
        help=f"Surrogate depth: {DEPTH_CHOICES}. {ENSEMBLE_DEPTH} fits the tree that depth "
        f"given as a number fits; {AUTO_DEPTH} passes depth=None to MiretSurrogate and is "
        f"recorded as the run parameter depth={AUTO_DEPTH}, the depth fitted as depth_chosen.",
        metavar="DEPTH",
        callback=depth_value,
    ),
]
"""``govern explain --depth`` (the default: ``str(ENSEMBLE_DEPTH)``)."""

DATA_HELP = "CSV or Parquet file of the ensemble's feature columns in raw units (and the label)."
DataFile = Annotated[
    Path, typer.Option("--data", help=DATA_HELP, metavar="FILE", callback=existing_file)
]
TestDataFile = Annotated[
    Path | None,
    typer.Option(
        "--test-data",
        help="Separate test file (like --data); default: a stratified holdout of --data.",
        metavar="FILE",
        callback=existing_file,
    ),
]
CheckData = Annotated[
    Path | None,
    typer.Option("--data", help=DATA_HELP, metavar="FILE", callback=existing_file),
]
"""An optional ``--data`` (``govern gate``: the data to recompute the evidence on)."""


def spark_or_file(ctx: typer.Context, param: typer.CallbackParam, value: str | None):
    """:func:`existing_file` for a ``--data`` that Spark may read: ``spark:<table>``, a
    URI (``s3a://...``) and a folder (a Parquet dataset) pass to :func:`data_of`."""
    from miret_governance.governance.data.spark import SPARK_PREFIX

    if value is None or ctx.resilient_parsing:
        return value
    if not (value.startswith(SPARK_PREFIX) or "://" in value or Path(value).is_dir()):
        _check_file(param.opts[0], Path(value))
    return value


SparkData = Annotated[
    str, typer.Option("--data", help=DATA_HELP, metavar="FILE", callback=spark_or_file)
]
"""A required ``--data`` that Spark may read (:func:`data_of`)."""
SparkCheckData = Annotated[
    str | None, typer.Option("--data", help=DATA_HELP, metavar="FILE", callback=spark_or_file)
]
"""An optional ``--data`` that Spark may read (:func:`data_of`)."""
SparkDataFile = Annotated[
    str, typer.Option("--data", help=DATA_HELP, metavar="FILE", callback=spark_or_file)
]
"""A required ``--data`` that Spark may read (:func:`data_of`): ``spark:<table>``, a
file, or with ``--engine spark`` a Parquet path or folder."""
Engine = Annotated[
    str,
    typer.Option(
        "--engine",
        help="What reads --data: pandas (one process) or spark (the active Spark session, or "
        "one on Spark's configured master; Java 17+), which also reads a Parquet folder or "
        "URI. --data spark:<table> names a table of the Spark session whatever the engine.",
    ),
]
"""``--engine`` (:data:`governance.data.spark.frames.ENGINES`)."""


def data_of(value: str | None, engine: str):
    """The data a ``--data`` value (checked by :func:`spark_or_file`) and ``--engine`` name:
    a path for pandas, or a :class:`governance.data.spark.frames.DataSource` for Spark
    (exit code 2 on an unknown engine)."""
    from miret_governance.governance.data.spark import SPARK_PREFIX

    if value is None:
        return None
    if engine == "pandas" and not value.startswith(SPARK_PREFIX):
        return Path(value)
    from miret_governance.governance.data.spark.frames import data_source

    try:
        return data_source(value, engine)
    except GovernanceError as error:
        raise fail(error) from None


MinTestRows = Annotated[
    int,
    typer.Option(
        "--min-test-rows",
        min=0,
        help="Fewest test rows per class (as the ensemble predicts them) to explain at all; "
        "fewer say little about fidelity (20 of 20 agreeing rows: 95% interval 0.84-1). "
        "Lower it only knowingly: the value is recorded with the evidence.",
    ),
]


def policy_file(ctx: typer.Context, param: typer.CallbackParam, value: Path | None):
    """``--policy``: :func:`existing_file`, then one warning on stderr for each gate an
    explain with the default settings cannot meet
    (:func:`governance.trust.attainable.unattainable`); the exit code stays the command's,
    and a policy that cannot be read is left to the command."""
    value = existing_file(ctx, param, value)
    if value is not None and not ctx.resilient_parsing:
        from miret_governance.governance.trust.attainable import ExplainSettings, unattainable

        defaults = ExplainSettings(DEFAULTS["solver"], ENSEMBLE_DEPTH, DEFAULTS["max_rows"])
        try:
            found = unattainable(load_policy(value), defaults)
        except GovernanceError:  # the command refuses it, with its own message
            return value
        for item in found:
            errors.print(
                f"warning: policy {value.name}, with explain's default settings: {item.line}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    return value


PolicyFile = Annotated[
    Path | None,
    typer.Option(
        "--policy",
        help="TOML policy file: the gates table, an optional name, and the \\[keys.<name>] "
        "public keys it trusts to sign evidence (explain) and decisions (default: "
        "min_fidelity 0.90, max_features 5, require_validation_pass, and no trusted key, "
        "so no gate passes). A gate explain's default settings cannot meet is warned about "
        "on stderr (govern policy check).",
        metavar="FILE",
        envvar=POLICY_ENV,
        callback=policy_file,
    ),
]
SupersedeOption = Annotated[
    bool,
    typer.Option(
        "--supersede/--no-supersede",
        help="Explain even when the evidence linked now carries a promotion or an approval: "
        "they stop counting (the aliases need a new gate and promotion). Without it such an "
        "explain is refused before anything is written.",
    ),
]
PolicyTrustFile = Annotated[
    Path | None,
    typer.Option(
        "--policy-trust",
        help="The deployment's policy trust file: TOML \\[keys.<name>] tables of the keys "
        'that may sign policies (may_sign = ["policy"]), kept outside the repository the '
        "policy is committed to. A signed policy is verified with it (a signature that does "
        "not verify refuses); who signed is recorded with every decision.",
        metavar="FILE",
        envvar=POLICY_TRUST_ENV,
        show_envvar=True,
        callback=existing_file,
    ),
]
RequireSignedPolicy = Annotated[
    bool,
    typer.Option(
        "--require-signed-policy",
        help=f"Refuse a policy without a valid signature by a key --policy-trust trusts "
        f"(a deployment setting: also {REQUIRE_SIGNED_POLICY_ENV}=1).",
    ),
]


def load_checked_policy(policy: Path | None, trust: Path | None, require_signed: bool):
    """The policy of ``--policy``, its signature checked with ``--policy-trust`` and
    required by ``--require-signed-policy`` or :data:`REQUIRE_SIGNED_POLICY_ENV`
    (:func:`governance.trust.policy_signature.checked_policy`), before anything connects.

    Raises
    ------
    governance.trust.policy.PolicyError
    governance.trust.keyring.SignatureError
    """
    return checked_policy(policy, trust, signed_policy_required(require_signed))


def signed_policy_required(require_signed: bool) -> bool:
    """``--require-signed-policy``, or else the deployment's
    :data:`REQUIRE_SIGNED_POLICY_ENV` (:func:`governance.trust.policy_signature.requirement`).

    Raises
    ------
    governance.trust.policy.PolicyError
        A value of the variable that is neither yes nor no.
    """
    return require_signed or requirement(os.environ.get(REQUIRE_SIGNED_POLICY_ENV))


def _signing_option(flag: str, envvar: str, metavar: str, help: str):
    """An option of who signs: text (a path, PEM text or URI), also read from ``envvar``."""
    return Annotated[
        str | None,
        typer.Option(flag, help=help, metavar=metavar, envvar=envvar, show_envvar=True),
    ]


SigningKeyOption = _signing_option(
    "--signing-key",
    SIGNING_KEY_ENV,
    "FILE|URI",
    "The private key that signs what the command records: a PEM file (from govern keygen; "
    "its password in GOVERN_SIGNING_KEY_PASSWORD) or a key in a hardware security module, "
    "pkcs11:token=<label>;object=<key label>?module-path=<module .so> (its PIN in "
    f"{PKCS11_PIN_ENV} or the file {PKCS11_PIN_FILE_ENV} names). Give it to the CI job only; "
    "never printed, logged or stored.",
)
SigningCertificateOption = _signing_option(
    CERTIFICATE_OPTIONS[0],
    SIGNING_CERTIFICATE_ENV,
    "FILE",
    "The certificate your CA issued for --signing-key (PEM): signatures then carry it, for "
    "a policy that trusts the CA (\\[authorities.<name>]) and its identity.",
)
CertificateChainOption = _signing_option(
    CERTIFICATE_OPTIONS[1],
    CERTIFICATE_CHAIN_ENV,
    "FILE",
    "The intermediate CA certificates that issued --signing-certificate (PEM, several in "
    "one file).",
)


def load_signing_key(
    value: str | None, certificate: str | None = None, chain: str | None = None
) -> SigningKey | None:
    """The :class:`governance.trust.signers.SigningKey` of ``--signing-key`` (None when not
    given), with ``--signing-certificate`` and ``--certificate-chain``, loaded and checked
    before anything connects. Messages name each option, or its environment variable when
    the value is the variable's, and never a key, PIN or password.

    Raises
    ------
    governance.trust.keyring.SignatureError
        An unreadable file, a key that does not load (wrong password or PIN, unknown token
        or key) or is not EC, a certificate for another key.
    """
    if value is None or not value.strip():
        return None

    def named(option: str, variable: str, given: str | None) -> str:
        from_env = given is not None and os.environ.get(variable, "").strip() == given.strip()
        return variable if from_env else option

    return SigningKey.load(
        value.strip(),
        os.environ.get(SIGNING_KEY_PASSWORD_ENV) or None,
        named("--signing-key", SIGNING_KEY_ENV, value),
        certificate or None,
        chain or None,
        os.environ.get(PKCS11_PIN_ENV) or None,
        pin_file=os.environ.get(PKCS11_PIN_FILE_ENV) or None,
        certificate_sources=(
            named(CERTIFICATE_OPTIONS[0], SIGNING_CERTIFICATE_ENV, certificate),
            named(CERTIFICATE_OPTIONS[1], CERTIFICATE_CHAIN_ENV, chain),
        ),
    )


NoRecord = Annotated[
    bool,
    typer.Option(
        "--no-record",
        help="Record nothing. By default a command run with a signing key leaves a signed "
        "verification record of what it verified (experiment governance-verifications, "
        "shown on the ensemble version's page); without one it says so on stderr.",
    ),
]


def record_verified(key, no_record: bool, write) -> None:
    """Record what a read command verified: ``write(key)`` (it writes the verification
    records and returns a note, or None) unless ``no_record``; without a key one line on
    stderr says nothing was recorded, and so does a failure to record
    (:func:`error_message`) or the note: either way the command's outcome and exit code
    stay."""
    if no_record:
        return
    from miret_governance.flavors.trail.verification import NO_KEY

    plain = {"markup": False, "highlight": False, "soft_wrap": True}
    if key is None:
        errors.print(NO_KEY, **plain)
        return
    try:
        note = write(key)
    except Exception as error:  # noqa: BLE001 - recording never changes the outcome
        note = f"not recorded: {error_message(error)}"
    if note:
        errors.print(note, **plain)


ModelUri = Annotated[
    str,
    typer.Option(
        "--model-uri",
        help="Registered ensemble version: models:/<name>/<version> or models:/<name>@<alias>.",
    ),
]
Target = Annotated[
    str | None, typer.Option("--target", help="Label column in the data (optional).")
]
TRACKING_URI_HELP = "MLflow tracking server, also the registry (default: MLFLOW_TRACKING_URI)."
TrackingUri = Annotated[str | None, typer.Option("--tracking-uri", help=TRACKING_URI_HELP)]
Solver = Annotated[str, typer.Option("--solver", help="MILP solver: auto, highs or gurobi.")]
TimeLimit = Annotated[
    float,
    typer.Option(
        "--time-limit",
        help="Seconds for the whole surrogate fit: building the problem, the warm-start "
        "heuristic and the MILP solve.",
    ),
]
TrustPickle = Annotated[
    bool,
    typer.Option(
        "--trust-pickle",
        help="Load a scikit-learn model stored as pickle/cloudpickle. Loading a pickle runs "
        "code from the artifact: use only for models you trust. Recorded with your user "
        "name and the time on the surrogate and in its report.",
    ),
]
Seed = Annotated[
    int, typer.Option("--seed", help="Seed of the holdout split, the heuristic and the solver.")
]
JsonOutput = Annotated[
    bool,
    typer.Option(
        "--json", help="Print one JSON object to stdout instead of tables (schema above)."
    ),
]

# CI logs are not terminals (rich would assume 80 columns): give tables room there.
console = Console(width=None if sys.stdout.isatty() else 120)
errors = Console(stderr=True)


def configure_mlflow() -> None:
    """Process-wide MLflow settings of the CLI: no telemetry, no download progress bars."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def connect(
    tracking_uri: str | None, *, fail_fast: bool = True, read_only: bool = False, probe: bool = True
) -> None:
    """Point MLflow (tracking and registry) at ``tracking_uri`` and check it answers.

    Parameters
    ----------
    tracking_uri : str or None
        None keeps ``MLFLOW_TRACKING_URI`` (or MLflow's default store).
    fail_fast : bool
        No retries of MLflow's HTTP calls; otherwise two, with backoff (for the long
        explain run). Each call times out after 10 s either way, unless the environment
        says otherwise, so a server that stops answering fails the command within about
        40 s instead of hanging it (:mod:`flavors.outages`).
    read_only : bool
        The command only reads: a SQLite store that does not exist is an error
        (MLflow would create an empty one).
    probe : bool
        Check that an HTTP server answers; False when the caller checks its parameters
        first and probes itself (``explain_model_version``).

    Raises
    ------
    GovernanceError
        ``read_only`` and the SQLite store file does not exist; or the server is down.
    """
    import mlflow

    from miret_governance.flavors.store.outages import HTTP_SETTINGS
    from miret_governance.flavors.store.registry import check_tracking_server

    for name, value in HTTP_SETTINGS["fail_fast" if fail_fast else "retrying"].items():
        os.environ.setdefault(name, value)
    # the SQL store logs every database error with its SQL; the command prints one line
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_registry_uri(tracking_uri)
    if read_only:
        require_existing_store()
    if probe:
        check_tracking_server()


def import_model_readers() -> None:
    """Import skops' reader of scikit-learn models before MLflow, in a command that loads
    a registered ensemble.

    skops.io finds its default trusted types at import, looking each SciPy ufunc up in
    every loaded module (``skops.io._utils.whichmodule``): once MLflow, its SQL store and
    model-signing are loaded, that costs about a second of CPU more
    (``examples/benchmarks/results_command_speed.md``). An XGBoost or LightGBM model
    then imports skops for nothing, about 0.4 s.
    """
    import skops.io  # noqa: F401


def check_model_uri(model_uri: str) -> None:
    """Refuse a ``--model-uri`` that names no registered version, before connecting."""
    from miret_governance.flavors.store.registry import parse_registry_uri

    parse_registry_uri(model_uri)


def require_existing_store() -> None:
    """Refuse a ``sqlite:///`` tracking or registry URI whose file does not exist."""
    import mlflow

    for uri in dict.fromkeys((mlflow.get_tracking_uri(), mlflow.get_registry_uri())):
        if not uri.startswith(SQLITE_PREFIX):
            continue
        path = Path(uri[len(SQLITE_PREFIX) :]).resolve()
        if not path.is_file():
            raise GovernanceError(
                f"no MLflow store at {path} (tracking URI {uri}); nothing was created. Run "
                "from the project folder that holds mlflow.db, or pass --tracking-uri "
                "sqlite:///<path to mlflow.db> (or set MLFLOW_TRACKING_URI)"
            )


# ---------------------------------------------------------------------- errors
def exit_code(error: BaseException) -> int:
    """The exit code of an error: 1 for a check that failed, 2 for everything else."""
    return EXIT_FAILED if isinstance(error, CheckFailedError) else EXIT_ERROR


def _refusal_kinds() -> tuple:
    """Errors whose message is self-explanatory (printed without their class name)."""
    kinds = (GovernanceError, OSError, ValueError)
    mlflow_exceptions = sys.modules.get("mlflow.exceptions")  # raised only once imported
    if mlflow_exceptions is not None:
        kinds += (mlflow_exceptions.MlflowException,)
    return kinds


_URI_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]+):[^\s@/]+@")


def without_passwords(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` shown as
    ``***``: a store URI (``postgresql://...``) may carry its database's password, and no
    message shows a secret."""
    return _URI_PASSWORD.sub(r"\1:***@", text)


def error_message(error: BaseException) -> str:
    """What to print for an error (:func:`without_passwords`): a server's refusal of the
    credentials or of a permission (:func:`flavors.store.refusals.refusal_message`), a
    store or server failure in words (:func:`flavors.outages.outage_message`: locked
    store, refused or hung server, full disk), a refusal's own message, any other error
    with its class name."""
    return without_passwords(_error_text(error))


def _error_text(error: BaseException) -> str:
    if "mlflow" in sys.modules:  # store and server failures arise only once it is used
        import mlflow

        from miret_governance.flavors.store.outages import outage_message
        from miret_governance.flavors.store.refusals import refusal_message

        # a 401 or 403 first: the server answered, whatever failed after it
        outage = refusal_message(error, mlflow.get_tracking_uri()) or outage_message(error)
        if outage is not None:
            return outage
    if isinstance(error, _refusal_kinds()):
        return str(error)
    return f"{type(error).__name__}: {error}"


@contextmanager
def exit_codes():
    """Every command's body runs in this: an error raised inside is printed as one line
    on stderr and ends the command with :func:`exit_code` (a ``typer.Exit`` passes)."""
    try:
        yield
    except typer.Exit:
        raise
    except Exception as error:  # noqa: BLE001 - every failure is a clear exit 1 or 2
        raise fail(error_message(error), exit_code(error)) from None


@contextmanager
def exit_codes_of_main():
    """:func:`exit_codes` outside a typer command (the console script's own work): the
    error's line on stderr, then ``sys.exit`` with its code."""
    try:
        with exit_codes():
            yield
    except typer.Exit as done:
        sys.exit(done.exit_code)


def fail(message, code: int = EXIT_ERROR) -> typer.Exit:
    """Print ``message`` as an error (never read as rich markup) and return the exit."""
    errors.print(Text.assemble(("error: ", "bold red"), str(message)), soft_wrap=True)
    return typer.Exit(code)


# ---------------------------------------------------------------------- JSON output
def _jsonable(value):
    """``value`` with NaN and infinities as None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def print_json(command: str, payload: dict) -> None:
    """Write one JSON object to stdout: ``command``, ``schema_version``, then ``payload``."""
    document = {"command": command, "schema_version": JSON_SCHEMA_VERSION, **payload}
    sys.stdout.write(json.dumps(_jsonable(document), sort_keys=True, default=str) + "\n")
