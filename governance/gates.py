"""Promotion policy (TOML) and its evaluation against a surrogate's metrics.

A policy file holds one ``[gates]`` table, optionally a ``name`` (default: the file's
stem), the ``[keys.<name>]`` it trusts (:mod:`governance.signing`) and the
``[approvals]`` an alias needs; nothing else is allowed at the top level::

    name = "strict"
    [gates]
    min_fidelity = 0.90            # test-set fidelity of the surrogate
    max_features = 5               # distinct features used by the surrogate
    min_train_fidelity = 0.95      # optional
    min_proximity_agreement = 0.8  # optional
    max_gap = 0.05                 # optional: MIP gap of the solve
    require_validation_pass = true # the inputs passed validation (default true)

    [keys.ci]                      # who may sign what (governance.signing)
    public_key = "keys/ci.pub"     # relative to this file, or the PEM text
    may_sign = ["explain", "decide"]
    [keys.alice]
    public_key = "keys/alice.pub"
    may_sign = ["approve"]

    [approvals]                    # signed approvals an alias needs before promotion
    champion = 1

``min_fidelity``, ``max_features`` and ``require_validation_pass`` always apply (defaults
0.90, 5 and true, overridden by the file; ``require_validation_pass = false`` drops it);
the other gates apply when the file sets them. A policy is identified as
``<name> v<first 8 hex digits of its digest>`` (:attr:`Policy.label`); the digest covers
the gates, the trusted keys and the approvals, not the name, so renaming a policy does
not change its version. Without keys, no evidence is trusted and every gate fails.

Gates are best evaluated on *evidence*: the metrics and validation result stored inside
the surrogate artifact (see :func:`evaluate`), not on tags anyone with write access can
set. Each evaluation records the sha256 digest of that evidence. A value exactly at its
threshold passes (``>=`` for ``min_*``, ``<=`` for ``max_*``), as MLflow's
``MetricThreshold`` does. A missing or NaN metric fails its gate.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from miret_governance.governance.errors import GovernanceError
from miret_governance.governance.signing import SignatureError, TrustedKeys, parse_trust

VALIDATION_KEY = "validation"
"""The evidence's validation record, which ``require_validation_pass`` reads."""


@dataclass(frozen=True)
class GateSpec:
    """What a policy key checks: the evidence metric (or record), its direction and type."""

    metric: str
    greater_is_better: bool
    kind: type
    description: str


GATES = {
    "min_fidelity": GateSpec("test_fidelity", True, float, "test-set fidelity, in [0, 1]"),
    "min_fidelity_lower_bound": GateSpec(
        "test_fidelity_ci_low",
        True,
        float,
        "lower end of the 95% Wilson interval of test fidelity, in [0, 1]",
    ),
    "max_features": GateSpec("n_features_used", False, int, "distinct features, integer >= 0"),
    "min_train_fidelity": GateSpec("train_fidelity", True, float, "train fidelity, in [0, 1]"),
    "min_proximity_agreement": GateSpec(
        "test_proximity_agreement", True, float, "test proximity agreement, in [0, 1]"
    ),
    "max_gap": GateSpec("solver.gap", False, float, "relative MIP gap, >= 0"),
    "require_validation_pass": GateSpec(VALIDATION_KEY, True, bool, "true or false"),
}
DEFAULTS = {"min_fidelity": 0.90, "max_features": 5, "require_validation_pass": True}
MAX_POLICY_BYTES = 64 * 1024
"""Largest policy file read; a policy is a few lines of TOML."""
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,40}$")
_UNIT_INTERVAL = (
    "min_fidelity",
    "min_fidelity_lower_bound",
    "min_train_fidelity",
    "min_proximity_agreement",
)


class PolicyError(GovernanceError, ValueError):
    """A policy that cannot be read or has unknown keys or values of the wrong type.

    Exit code 2. Also a ValueError: a policy value of the wrong type or range.
    """


def _valid_keys() -> str:
    return "\n".join(f"  {name} = <{spec.description}>" for name, spec in GATES.items())


@dataclass(frozen=True)
class Policy:
    """A parsed promotion policy.

    Attributes
    ----------
    gates : dict
        Gate name -> threshold (defaults included), e.g. ``{"min_fidelity": 0.9}``.
    source : str
        Where it came from (a path, or ``"built-in defaults"``).
    name : str
        The ``name`` key of the file, else the file's stem (``"default"`` built in).
    keys : governance.signing.TrustedKeys
        The public keys it trusts, each for some purposes (none built in).
    approvals : dict
        Alias -> number of distinct approver keys whose signed approval of the evidence
        the promotion to that alias needs.
    """

    gates: dict
    source: str = "built-in defaults"
    name: str = "default"
    keys: TrustedKeys = field(default_factory=TrustedKeys)
    approvals: dict = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """sha256 of the canonical JSON of the gates (sorted keys, no spaces), with the
        trusted keys (fingerprints and purposes) and approvals when it has any."""
        if not self.keys.keys and not self.approvals:
            return canonical_digest(self.gates)
        return canonical_digest(
            {"gates": self.gates, "keys": self.keys.to_json(), "approvals": self.approvals}
        )

    @property
    def label(self) -> str:
        """``<name> v<digest8>``, e.g. ``strict v3f2a9c1d``: how runs and tags name it."""
        return f"{self.name} v{self.digest[:8]}"


def canonical_digest(data) -> str:
    """sha256 of the canonical JSON of ``data`` (sorted keys, no spaces, NaN as null)."""
    canonical = json.dumps(_json_safe(data), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _json_safe(value):
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _json_safe(value.item())
    return value


def parse_policy(
    data: dict, source: str = "policy", default_name: str = "default", base_dir=None
) -> Policy:
    """Check a policy mapping (as read from TOML) and fill in the defaults.

    Parameters
    ----------
    data : dict
        ``{"gates": {...}}``, optionally ``keys`` and ``approvals``.
    source : str
        Named in error messages.
    default_name : str
        The policy's name when ``data`` has no ``name`` key.
    base_dir : path, optional
        Where relative public-key paths start (the policy file's folder).

    Raises
    ------
    PolicyError
        Unknown keys, a missing ``[gates]`` table, or values of the wrong type or range.
    """
    extra = sorted(set(data) - {"gates", "name", "keys", "approvals"})
    if extra:
        hint = " (gate keys belong in the [gates] table)" if set(extra) & set(GATES) else ""
        raise PolicyError(
            f"{source}: unknown top-level keys {extra}{hint}; a policy has an optional "
            f"name and one [gates] table with these keys:\n{_valid_keys()}"
        )
    policy_name = data.get("name", default_name)
    if not isinstance(policy_name, str) or not _NAME.match(policy_name):
        raise PolicyError(
            f"{source}: name = {policy_name!r} is not valid; use 1 to 40 letters, digits, '.', "
            "'_' or '-'"
        )
    table = data.get("gates", {})
    if not isinstance(table, dict):
        raise PolicyError(f"{source}: 'gates' must be a table ([gates])")
    unknown = sorted(set(table) - set(GATES))
    if unknown:
        raise PolicyError(f"{source}: unknown gates {unknown}; valid keys:\n{_valid_keys()}")
    gates = dict(DEFAULTS)
    for name, value in table.items():
        gates[name] = _checked(name, value, source)
    if gates.get("require_validation_pass") is False:
        del gates["require_validation_pass"]
    try:
        keys = parse_trust(data.get("keys", {}), base_dir, source)
    except SignatureError as error:
        raise PolicyError(str(error)) from error
    return Policy(
        gates=dict(sorted(gates.items())),
        source=source,
        name=policy_name,
        keys=keys,
        approvals=_approvals(data.get("approvals", {}), keys, source),
    )


def _approvals(table, keys: TrustedKeys, source: str) -> dict:
    """``[approvals]``: alias -> number of approver keys needed (at most those trusted)."""
    approvers = len(keys.names("approve"))
    if not isinstance(table, dict):
        raise PolicyError(f"{source}: [approvals] must map aliases to numbers of approvals")
    for alias, count in table.items():
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= approvers:
            raise PolicyError(
                f"{source}: approvals {alias} = {count!r}; give a whole number from 1 to "
                f"{approvers}, the keys the policy trusts to approve"
                + ("" if approvers else ' (add [keys.<name>] with may_sign = ["approve"])')
            )
    return dict(sorted(table.items()))


def _checked(name: str, value, source: str):
    spec = GATES[name]
    wrong = f"{source}: {name} = {value!r} is not valid; expected {spec.description}"
    if spec.kind is bool:
        if not isinstance(value, bool):
            raise PolicyError(wrong)
        return value
    if spec.kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PolicyError(wrong)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PolicyError(wrong)
    value = float(value)
    if (name in _UNIT_INTERVAL and not 0.0 <= value <= 1.0) or value < 0.0:
        raise PolicyError(wrong)
    return value


def load_policy(path=None) -> Policy:
    """Read a TOML policy file; ``None`` gives the built-in defaults.

    Only regular files of at most :data:`MAX_POLICY_BYTES` are read (a device such as
    ``/dev/zero``, a FIFO or a directory is refused before reading).

    Raises
    ------
    PolicyError
        The file is not a regular file, is too large, cannot be read or parsed, or
        fails :func:`parse_policy`.
    """
    if path is None:
        return Policy(gates=dict(sorted(DEFAULTS.items())))
    path = Path(path)
    try:
        if not path.is_file():
            what = "a directory" if path.is_dir() else "not a regular file"
            if not path.exists():
                what = "missing"
            raise PolicyError(
                f"policy file {path} is {what}: give the path of a TOML file with a [gates] table"
            )
        with path.open("rb") as handle:
            raw = handle.read(MAX_POLICY_BYTES + 1)
    except OSError as error:
        raise PolicyError(f"cannot read policy file {path}: {error.strerror}") from error
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyError(
            f"policy file {path} is larger than {MAX_POLICY_BYTES // 1024} KiB; a policy "
            "is a short [gates] table: check that the path names the policy file"
        )
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise PolicyError(f"policy file {path} is not UTF-8 text: {error}") from error
    except tomllib.TOMLDecodeError as error:
        raise PolicyError(f"policy file {path} is not valid TOML: {error}") from error
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem)[:40] or "policy"
    return parse_policy(data, source=str(path), default_name=stem, base_dir=path.parent)


@dataclass
class GateResult:
    """The verdict of one gate.

    Attributes
    ----------
    name : str
        Policy key, e.g. ``min_fidelity``.
    metric : str
        Metric (or tag) checked, e.g. ``test_fidelity``.
    threshold : float, int or str
        ``"passed"`` for ``require_validation_pass``.
    value : float, str or None
        Observed value; None when missing.
    passed : bool
    reason : str
    """

    name: str
    metric: str
    threshold: object
    value: object
    passed: bool
    reason: str

    @property
    def comparison(self) -> str:
        """``>=``, ``<=`` or ``==`` (for the validation tag)."""
        spec = GATES[self.name]
        if spec.kind is bool:
            return "=="
        return ">=" if spec.greater_is_better else "<="


@dataclass
class Evaluation:
    """All gate verdicts of one policy on one surrogate.

    Attributes
    ----------
    all_passed : bool
    results : list of GateResult
    policy_digest : str
    policy : dict
        The gates evaluated (thresholds, defaults included).
    evidence_digest : str or None
        :func:`canonical_digest` of the evidence evaluated (None when evaluated on
        loose metrics and tags).
    """

    all_passed: bool
    results: list
    policy_digest: str
    policy: dict = field(default_factory=dict)
    evidence_digest: str | None = None

    def to_json(self) -> dict:
        """A JSON-serializable dict (NaN values become None)."""
        results = []
        for result in self.results:
            row = asdict(result)
            row["comparison"] = result.comparison
            if isinstance(row["value"], float) and not math.isfinite(row["value"]):
                row["value"] = None
            results.append(row)
        return {
            "all_passed": self.all_passed,
            "policy_digest": self.policy_digest,
            "policy": dict(self.policy),
            "evidence_digest": self.evidence_digest,
            "results": results,
        }

    def to_markdown(self) -> str:
        """A Markdown table of the verdicts, with the policy digest."""
        lines = [
            f"# Promotion gates: {'PASSED' if self.all_passed else 'FAILED'}",
            "",
            f"Policy digest: `{self.policy_digest}`",
            "",
            *([f"Evidence digest: `{self.evidence_digest}`", ""] if self.evidence_digest else []),
            "| Gate | Metric | Threshold | Value | Result | Reason |",
            "|---|---|---|---|---|---|",
        ]
        for r in self.results:
            lines.append(
                f"| {r.name} | `{r.metric}` | {r.comparison} {format_value(r.threshold)} | "
                f"{format_value(r.value)} | {'pass' if r.passed else 'FAIL'} | {r.reason} |"
            )
        return "\n".join(lines) + "\n"


def format_value(value) -> str:
    """A threshold or metric value for tables (``-`` when missing)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def evaluate(policy: Policy, evidence: dict) -> Evaluation:
    """Check each gate of ``policy`` against a surrogate's stored evidence.

    Parameters
    ----------
    policy : Policy
    evidence : dict
        The surrogate artifact's own evidence: ``{"metrics": {...}, "validation":
        {"success": bool, ...}, ...}`` with the metric names of
        :func:`governance.metrics.surrogate_metrics` and the solver's (``solver.gap``);
        other keys (provenance) are digested but not read, and its ``digest``, when
        given, is the one recorded. Validation passes only when ``validation.success`` is
        ``True``.

    Returns
    -------
    Evaluation
        With ``evidence_digest`` set.
    """
    if not isinstance(evidence, dict) or not isinstance(evidence.get("metrics"), dict):
        raise TypeError("evidence must be a dict with a 'metrics' dict")
    validation = evidence.get("validation")
    status = None
    if validation:
        passed = isinstance(validation, dict) and validation.get("success") is True
        status = "passed" if passed else "failed"
    results = [
        _gate(name, threshold, evidence["metrics"], status)
        for name, threshold in policy.gates.items()
    ]
    return Evaluation(
        all_passed=all(r.passed for r in results),
        results=results,
        policy_digest=policy.digest,
        policy=dict(policy.gates),
        evidence_digest=evidence.get("digest") or canonical_digest(evidence),
    )


def _gate(name: str, threshold, metrics: dict, validation: str | None) -> GateResult:
    spec = GATES[name]
    if spec.kind is bool:
        passed = validation == "passed"
        reason = (
            "the inputs passed validation"
            if passed
            else f"the stored validation result is {validation!r}, not 'passed'"
            if validation is not None
            else "no validation result in the evidence (was the surrogate validated?)"
        )
        return GateResult(name, spec.metric, "passed", validation, passed, reason)
    value = metrics.get(spec.metric)
    if value is None:
        return GateResult(
            name, spec.metric, threshold, None, False, f"metric {spec.metric} was not logged"
        )
    value = float(value)
    if math.isnan(value):
        return GateResult(name, spec.metric, threshold, value, False, f"{spec.metric} is NaN")
    op = ">=" if spec.greater_is_better else "<="
    passed = value >= threshold if spec.greater_is_better else value <= threshold
    verdict = "meets" if passed else "does not meet"
    reason = f"{spec.metric} = {value:.10g} {verdict} {op} {threshold:.10g}"
    return GateResult(name, spec.metric, threshold, value, passed, reason)
