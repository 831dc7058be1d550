"""What every model-family example shares: its store and experiment, a local key pair
with a policy that trusts it, and ``govern explain``, ``gate``, ``promote`` and ``show``
run exactly as a user types them (in this process, through the ``govern`` app).

Every example ends with :func:`explain_gate_promote`, which returns what the registry
holds afterwards as a :class:`Governed` record.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import mlflow
import typer
from mlflow import MlflowClient

from miret_governance.cli.app import app
from miret_governance.governance.trust.signers import generate_key_pair

POLICIES = Path(__file__).resolve().parents[1] / "policies"
"""``examples/policies/``: the gates each example is promoted under."""
ALIAS = "champion"


@dataclass(frozen=True)
class Governed:
    """What one example left in the registry.

    Attributes
    ----------
    ensemble_uri : str
        The registered ensemble version, ``models:/<name>/<version>``.
    exit_codes : dict
        Exit code of each ``govern`` command: ``explain``, ``gate``, ``promote``.
    gate : dict
        ``govern gate --json``: the verdict and every gate's value and threshold.
    shown : dict
        ``govern show --json`` after the promotion: the linked surrogate, its rules and
        metrics, the ensemble's aliases and gate and promotion tags.
    """

    ensemble_uri: str
    exit_codes: dict
    gate: dict
    shown: dict

    @property
    def metrics(self) -> dict:
        """The surrogate's logged metrics (fidelity, features, the CART baseline, ...)."""
        return self.shown["metrics"]


def start(tracking_uri: str, folder: Path, experiment: str) -> None:
    """Point MLflow at ``tracking_uri`` and at ``experiment``, whose artifacts are kept
    in ``folder/mlruns`` (never in the working directory)."""
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    found = MlflowClient().get_experiment_by_name(experiment)
    if found is None:
        MlflowClient().create_experiment(experiment, artifact_location=str(folder / "mlruns"))
    mlflow.set_experiment(experiment)


def trusted_policy(folder: Path, policy: str | Path) -> tuple[Path, Path]:
    """A local key pair in ``folder/keys`` and the policy (a name of
    ``examples/policies/``, or a file) with a ``[keys.example]`` table trusting the key
    (for explain and decide), written to ``folder/policies``. Returns (private key,
    policy file). In production the private key is the CI job's secret (``govern
    keygen``)."""
    private = folder / "keys" / "example.pem"
    if not private.exists():
        private, _ = generate_key_pair(folder / "keys" / "example")
    source = policy if isinstance(policy, Path) else POLICIES / f"{policy}.toml"
    text = source.read_text()
    trust = (
        '\n[keys.example]\npublic_key = "../keys/example.pub"\nmay_sign = ["explain", "decide"]\n'
    )
    path = folder / "policies" / source.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + trust)
    return private, path


def govern(*args: str, capture: bool = False) -> tuple[int, str]:
    """Run ``govern *args`` in this process; returns (exit code, standard output when
    ``capture``, else "": the output is printed). Exit code 0 is success, 1 a failed
    check (gate, validation); an error (2) ends the example with its message."""
    print("$ govern " + " ".join(args), flush=True)
    command = typer.main.get_command(app)
    out = io.StringIO()
    with contextlib.redirect_stdout(out) if capture else contextlib.nullcontext():
        code = command.main(list(args), prog_name="govern", standalone_mode=False) or 0
    if code not in (0, 1):
        raise SystemExit(f"govern {args[0]} exited with {code}: see its message above")
    return code, out.getvalue()


def explain_gate_promote(
    model_uri: str, data: Path, folder: Path, policy: str | Path, *explain_options: str
) -> Governed:
    """``govern explain`` (signed with the local key), ``govern gate --data`` (the
    fidelity recomputed on the same file), ``govern promote --alias champion`` under
    ``policy``, then ``govern show``.

    Parameters
    ----------
    model_uri : str
        The registered ensemble version.
    data : path
        Its training rows with the label column ``label``.
    folder : path
        Where the key pair and the policy file are written.
    policy : str or Path
        Name of a policy of ``examples/policies/``, or a policy file.
    *explain_options : str
        Further ``govern explain`` options (depth, time limit, class names, ...).

    Returns
    -------
    Governed
    """
    key, policy_file = trusted_policy(folder, policy)
    rows = ("--data", str(data), "--target", "label")
    signed = ("--signing-key", str(key), "--policy", str(policy_file))
    codes = {}
    codes["explain"], _ = govern(
        "explain", "--model-uri", model_uri, *rows, "--signing-key", str(key), *explain_options
    )
    if codes["explain"]:
        raise SystemExit("govern explain: the input validation failed (see above)")
    codes["gate"], gate_json = govern(
        "gate", "--model-uri", model_uri, *rows, *signed, "--json", capture=True
    )
    gate = json.loads(gate_json)
    for result in gate["gates"]:
        verdict = "pass" if result["passed"] else "FAIL"
        print(f"  gate {result['name']}: {verdict} ({result['reason']})")
    codes["promote"], _ = govern(
        "promote", "--model-uri", model_uri, "--alias", ALIAS, "--data", str(data), *signed
    )
    _, shown = govern(
        "show", "--model-uri", model_uri, "--policy", str(policy_file), "--json", capture=True
    )
    return Governed(model_uri, codes, gate, json.loads(shown))


def run_from_command_line(main, description: str, prefix: str, **choices) -> None:
    """Run an example's ``main(tracking_uri, folder, **options)`` as a script, with
    ``--folder`` (default: a new temporary one, named ``prefix...``), ``--tracking-uri``
    (default: ``FOLDER/mlflow.db``) and one ``--<name>`` option per entry of ``choices``
    (``name=(allowed values, default)``)."""
    parser = argparse.ArgumentParser(description=description)
    for name, (allowed, default) in choices.items():
        parser.add_argument(f"--{name}", choices=allowed, default=default)
    parser.add_argument("--folder", type=Path, default=None, help="default: a new temporary one")
    parser.add_argument("--tracking-uri", default=None, help="default: FOLDER/mlflow.db")
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix=prefix))
    folder.mkdir(parents=True, exist_ok=True)
    options = {name: getattr(args, name) for name in choices}
    main(args.tracking_uri or f"sqlite:///{folder / 'mlflow.db'}", folder, **options)
    print(f"store and files in {folder}")
