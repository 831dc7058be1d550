"""The promotion policy (TOML): its gates, trusted keys, approvals and digest.

A policy file holds one ``[gates]`` table, optionally a ``name`` (default: the file's
stem), the ``[keys.<name>]`` it trusts (:mod:`governance.trust.keyring`), the
``[approvals]`` an alias needs, ``drift_against``, how often the holder of an alias must be
re-validated (``[revalidate_every_days]``, :mod:`governance.trust.revalidation`), and for a
shared MLflow server the
``[roles]`` of its users and the ``[governed."<model>"]`` registered models
(:mod:`governance.trust.roles`); nothing else is allowed at the top level::

    name = "strict"
    [gates]
    min_fidelity = 0.90            # test-set fidelity of the surrogate
    max_features = 5               # distinct features used by the surrogate
    max_columns = 3                # optional: distinct input columns (one-hot groups once)
    min_train_fidelity = 0.95      # optional
    min_proximity_agreement = 0.8  # optional
    min_class_fidelity = 0.8       # optional: test fidelity of every class
    max_gap = 0.05                 # optional: MIP gap of the solve
    require_validation_pass = true # the inputs passed validation (default true)
    max_explanation_drift = 0.2    # optional: DRIFT_GATES, against the version holding
    min_cross_fidelity = 0.9       # the alias drift_against (default "champion")

    [keys.ci]                      # who may sign what (governance.trust.keyring)
    public_key = "keys/ci.pub"     # relative to this file, or the PEM text
    may_sign = ["explain", "decide"]
    [keys.alice]
    public_key = "keys/alice.pub"
    may_sign = ["approve"]
    users = ["alice"]              # optional: only MLflow user alice may sign with it

    [authorities.bank]             # or the organisation's CA (governance.trust.keyring)
    certificates = ["ca/root.pem"]
    approve = ["*@risk.example.com"]

    [approvals]                    # signed approvals an alias needs before promotion
    champion = 1

    [revalidate_every_days]        # optional: days a champion's last signed gate or
    champion = 180                 # identical reproduction may be old (govern inventory)

    [roles]                        # MLflow users (govern server setup grants them)
    data_scientists = ["ds"]
    ci = "ci"
    approvers = ["reviewer"]
    auditors = ["auditor"]
    [governed."credit-rf"]         # a data scientists' registered model
    experiment = "credit-rf"       # their experiment
    registered_model = "credit-rf.governed"  # optional, the default

A key is listed once, with every purpose it may sign; an alias needs at most as many
approvals as keys are trusted to approve (any number with an authority trusted to
approve), and once ``[approvals]`` names an alias no key may both decide and approve
(four eyes, not one key approving and promoting). A key's
``users`` bind it to the MLflow users the tracking server must authenticate for a record
it signs to count (:mod:`governance.trust.signing`); with ``[roles]``, only users of the
role that signs its purposes (:data:`governance.trust.roles.SIGNING_ROLES`).

``min_fidelity``, ``max_features`` and ``require_validation_pass`` always apply (defaults
0.90, 5 and true, overridden by the file; ``require_validation_pass = false`` drops it);
the other gates apply when the file sets them. A policy is identified as
``<name> v<first 8 hex digits of its digest>`` (:attr:`Policy.label`); the digest covers
the gates, the trusted keys (and their ``users`` and windows when set), the
authorities and revocations when present, the approvals, (with a drift gate)
``drift_against`` and (when present) the re-validation periods, roles and governed
models, not the name,
so renaming a policy does not change its version and a policy without ``[roles]`` keeps
the digest it always had. Without keys, no evidence is trusted and every gate fails.

What a gate checks and how it decides: :mod:`governance.gates`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from miret_governance.governance.errors import GovernanceError
from miret_governance.governance.trust.keyring import (
    SignatureError,
    Signer,
    TrustedKeys,
    parse_trust,
)
from miret_governance.governance.trust.roles import (
    GovernedModel,
    Roles,
    RolesError,
    check_approvers,
    check_key_users,
    parse_governed,
    parse_roles,
)

VALIDATION_KEY = "validation"
"""The evidence's validation record, which ``require_validation_pass`` reads."""
CLASS_FIDELITY_METRICS = "test_fidelity_class_*"
"""The metrics ``min_class_fidelity`` reads: one per class,
:func:`governance.metrics.class_metric_name` ``("test_fidelity", class)``."""


EVIDENCE, DRIFT, RECOMPUTED = "evidence", "drift", "recomputed"
"""The kinds of gate, by where the figure comes from: the surrogate's signed evidence,
the comparison with the holder of ``drift_against`` (:mod:`governance.drift`), or the
gate's own measurement on ``--data`` (:mod:`flavors.recompute`, not a policy key)."""
RECOMPUTED_FIDELITY = "recomputed_fidelity"
"""The gate ``govern gate --data`` adds: the fidelity measured again."""
POLICY_ENV = "GOVERN_POLICY"
"""The environment variable naming the policy file a command or the flavor's loader reads
when none is given (read at the edges only: ``cli.common``, :mod:`flavors.trust`)."""


@dataclass(frozen=True)
class GateSpec:
    """One gate: its kind, the metric (or record) it reads, its direction, its
    threshold's type, and whether that threshold is a share in ``[0, 1]``; ``meaning``
    says in plain words what the figure measures and ``remedy`` what a user can do when
    it fails (:attr:`governance.trust.gates.GateResult.advice`; never in a record)."""

    kind: str
    metric: str
    greater_is_better: bool
    value_type: type
    description: str
    meaning: str
    remedy: str
    share: bool = False

    @property
    def comparison(self) -> str:
        """``>=`` or ``<=``; ``==`` for a yes/no gate (validation, recomputation)."""
        if self.value_type is bool or self.kind == RECOMPUTED:
            return "=="
        return ">=" if self.greater_is_better else "<="


OWNED = "or the risk function, which owns the policy, sets another threshold"
"""How a remedy ends where the threshold itself could change: that is a policy decision."""
GATE_TABLE = {
    "min_fidelity": GateSpec(
        EVIDENCE,
        "test_fidelity",
        True,
        float,
        "test-set fidelity, in [0, 1]",
        meaning="the share of test rows on which the surrogate tree gives the ensemble's class",
        remedy="explain again with a deeper tree (--depth; the default is the ensemble's "
        "depth, at most 4), which agrees more often but uses more features, or a smaller "
        f"sparsity weight (--alpha 0.2), {OWNED}",
        share=True,
    ),
    "min_fidelity_lower_bound": GateSpec(
        EVIDENCE,
        "test_fidelity_ci_low",
        True,
        float,
        "lower end of the 95% Wilson interval of test fidelity, in [0, 1]",
        meaning="the lowest test fidelity the test rows prove (the lower end of its 95% "
        "interval), which more test rows raise even when the fidelity stays the same",
        remedy="explain again with more test rows (a larger --test-data file, or more rows "
        f"in --data) or a deeper tree (--depth) that agrees more often, {OWNED}",
        share=True,
    ),
    "max_features": GateSpec(
        EVIDENCE,
        "n_features_used",
        False,
        int,
        "distinct features, integer >= 0",
        meaning="how many distinct features the surrogate's splits use (a split may "
        "combine several)",
        remedy="explain again with a shallower tree (--depth: a univariate or CART tree of "
        "depth D splits on at most 2^D - 1 features) or, for the MIRET tree, a larger "
        "sparsity weight (--alpha 0.8) or a higher --gamma-percentile (fewer features "
        f"allowed at each level), {OWNED}",
    ),
    "max_columns": GateSpec(
        EVIDENCE,
        "n_columns_used",
        False,
        int,
        "distinct input columns (a pipeline's encoded columns count as their original "
        "column), integer >= 0",
        meaning="how many distinct input columns the surrogate's splits use (the encoded "
        "columns of one original column count once)",
        remedy="explain again with a shallower tree (--depth) or, for the MIRET tree, a "
        f"larger sparsity weight (--alpha 0.8) or a higher --gamma-percentile, {OWNED}",
    ),
    "min_train_fidelity": GateSpec(
        EVIDENCE,
        "train_fidelity",
        True,
        float,
        "train fidelity, in [0, 1]",
        meaning="the share of training rows on which the surrogate tree gives the ensemble's class",
        remedy="explain again with a deeper tree (--depth) or a smaller sparsity weight "
        f"(--alpha 0.2), {OWNED}",
        share=True,
    ),
    "min_proximity_agreement": GateSpec(
        EVIDENCE,
        "test_proximity_agreement",
        True,
        float,
        "test proximity agreement, in [0, 1]",
        meaning="the share of the pairs of test rows the ensemble treats as alike (they "
        "share a leaf in at least the share m of its trees, m the fit's "
        "--proximity-threshold) that the surrogate also puts in one leaf",
        remedy="explain again at another depth (--depth) and compare: only the MIRET tree "
        "is fitted to keep alike training rows in one leaf, and the fit returns the optimal "
        "univariate or CART tree instead when that is more faithful on held-out rows (the "
        f"report says which tree it returned), {OWNED}",
        share=True,
    ),
    "min_class_fidelity": GateSpec(
        EVIDENCE,
        CLASS_FIDELITY_METRICS,
        True,
        float,
        "test-set fidelity of every class (the worst one decides), in [0, 1]",
        meaning="the test fidelity of each class the ensemble predicts, the worst class "
        "deciding: a surrogate can agree on the common class and miss a rare one",
        remedy="explain again with a deeper tree (--depth), which can set a rare class "
        "apart, and enough test rows of every class (--test-data; --min-test-rows refuses "
        f"fewer), {OWNED}",
        share=True,
    ),
    "max_gap": GateSpec(
        EVIDENCE,
        "solver.gap",
        False,
        float,
        "relative MIP gap, >= 0",
        meaning="how far the surrogate's objective may be from the best tree's, as the "
        "whole MILP's bound proves it: 1 (nothing proven) when the whole MILP did not run, "
        "as on all but small samples without a full Gurobi licence",
        remedy="explain again with --solver gurobi and a Gurobi licence without size limit, "
        "so that the whole MILP runs and proves a gap (a longer --time-limit gives it more "
        "work), or the risk function drops max_gap from the policy (govern policy check "
        "names the gates an explain's settings cannot meet)",
    ),
    "require_validation_pass": GateSpec(
        EVIDENCE,
        VALIDATION_KEY,
        True,
        bool,
        "true or false",
        meaning="whether the explained data passed validation against the ensemble's "
        "feature schema (columns, types, missing values, training range)",
        remedy="fix the data the explain run's validation result names and explain again "
        "(--allow-invalid explains anyway, but never passes this gate)",
    ),
    "max_explanation_drift": GateSpec(
        DRIFT,
        "explanation_drift",
        False,
        float,
        "VITE level-frequency distance, in [0, 1]",
        meaning="how much the ensemble's use of features (its VITE level frequencies) "
        "changed since the version holding the policy's drift_against alias: 0 the same, "
        "1 entirely different",
        remedy="review the change (govern diff) and retrain closer to that version (the "
        f"figure is the ensembles', not the surrogate's), {OWNED}",
        share=True,
    ),
    "min_cross_fidelity": GateSpec(
        DRIFT,
        "cross_fidelity",
        True,
        float,
        "each surrogate on the other's ensemble, in [0, 1]",
        meaning="how often each surrogate agrees with the other version's ensemble on "
        "--data: whether the two ensembles still decide alike",
        remedy="review where they disagree (govern diff) and retrain closer to that "
        f"version (the figure is the ensembles', not the surrogates'), {OWNED}",
        share=True,
    ),
    RECOMPUTED_FIDELITY: GateSpec(
        RECOMPUTED,
        "test_fidelity",
        True,
        float,
        "the fidelity measured again on --data agrees with the evidence",
        meaning="the surrogate's fidelity to the ensemble, recomputed on --data: on the "
        "explain's own data it must equal the evidence's, on other data its 95% interval "
        "must overlap the stored test fidelity's",
        remedy="check that --data (and --target) is the data explained or data like "
        "what the model scores; on other data a failure means the surrogate agrees with the "
        "ensemble less (or more) there than its evidence says: explain again on such data",
    ),
}
"""Every gate, by name: the one table the policy parser, the evaluation
(:mod:`governance.gates`, :mod:`governance.drift`, :mod:`flavors.recompute`) and the
gate report read. A policy sets the ``evidence`` and ``drift`` gates
(:data:`POLICY_GATES`); ``recomputed_fidelity`` is added by ``--data``."""
GATES = {name: spec for name, spec in GATE_TABLE.items() if spec.kind == EVIDENCE}
"""Gates on a figure of the surrogate's evidence (:func:`governance.gates.evaluate`)."""
DRIFT_GATES = {name: spec for name, spec in GATE_TABLE.items() if spec.kind == DRIFT}
"""Gates comparing the candidate with the version holding the policy's ``drift_against``
alias (:mod:`governance.drift` decides them; :func:`governance.gates.evaluate` leaves
them out)."""
POLICY_GATES = {**GATES, **DRIFT_GATES}
"""The gates a policy file may set."""
DEFAULTS = {"min_fidelity": 0.90, "max_features": 5, "require_validation_pass": True}
TOP_LEVEL = (
    "gates",
    "name",
    "keys",
    "authorities",
    "revoked",
    "approvals",
    "drift_against",
    "revalidate_every_days",
    "roles",
    "governed",
)
"""The keys a policy file may hold at its top level."""
MAX_POLICY_BYTES = 64 * 1024
"""Largest policy file read; a policy is a few lines of TOML."""
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,40}$")
_ALIAS = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,99}$")


class PolicyError(GovernanceError, ValueError):
    """A policy that cannot be read or has unknown keys or values of the wrong type.

    Exit code 2. Also a ValueError: a policy value of the wrong type or range.
    """


def _valid_keys() -> str:
    return "\n".join(f"  {name} = <{spec.description}>" for name, spec in POLICY_GATES.items())


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
    keys : governance.trust.keyring.TrustedKeys
        The public keys it trusts, each for some purposes (none built in).
    approvals : dict
        Alias -> number of distinct approver keys whose signed approval of the evidence
        the promotion to that alias needs.
    drift_against : str
        The alias whose holder :data:`DRIFT_GATES` compare with.
    revalidate_every_days : dict
        Alias -> days its holder's last signed gate or identical reproduction may be old
        (:mod:`governance.trust.revalidation`); empty: no alias is ever due.
    roles : governance.trust.roles.Roles or None
        The MLflow users of each role (``[roles]``), None when the policy names none.
    governed : tuple of governance.trust.roles.GovernedModel
        The registered models under governance (``[governed."<model>"]``).
    signer : governance.trust.keyring.Signer or None
        Who signed the policy, once its signature verified
        (:func:`governance.trust.policy_signature.checked_policy`); not in the digest.
    """

    gates: dict
    source: str = "built-in defaults"
    name: str = "default"
    keys: TrustedKeys = field(default_factory=TrustedKeys)
    approvals: dict = field(default_factory=dict)
    drift_against: str = "champion"
    revalidate_every_days: dict = field(default_factory=dict)
    roles: Roles | None = None
    governed: tuple[GovernedModel, ...] = ()
    signer: Signer | None = None

    @property
    def content(self) -> bytes:
        """The canonical JSON (:func:`canonical_json`) of the gates, with the trusted keys
        (fingerprints and purposes), approvals and ``drift_against`` (with a drift gate)
        when it has any, and the re-validation periods, roles and governed models when it
        names them (absent, it is what policies without them always had): what :attr:`digest` hashes and a
        policy's signature covers (:mod:`governance.trust.policy_signature`)."""
        drift = {"drift_against": self.drift_against} if set(self.gates) & set(DRIFT_GATES) else {}
        deployment = {}
        if self.revalidate_every_days:
            deployment["revalidate_every_days"] = self.revalidate_every_days
        if self.roles is not None:
            deployment["roles"] = self.roles.to_json()
        if self.governed:
            deployment["governed"] = {m.name: m.to_json() for m in self.governed}
        if not self.keys and not self.approvals and not drift and not deployment:
            return canonical_json(self.gates)
        return canonical_json(
            {
                "gates": self.gates,
                "keys": self.keys.to_json(),
                "approvals": self.approvals,
                **drift,
                **deployment,
            }
        )

    @property
    def digest(self) -> str:
        """sha256 of :attr:`content`."""
        return hashlib.sha256(self.content).hexdigest()

    @property
    def label(self) -> str:
        """``<name> v<digest8>``, e.g. ``strict v3f2a9c1d``: how runs and tags name it."""
        return f"{self.name} v{self.digest[:8]}"


def canonical_json(data) -> bytes:
    """The canonical JSON of ``data``: sorted keys, no spaces, NaN as null."""
    return json.dumps(_json_safe(data), sort_keys=True, separators=(",", ":")).encode()


def canonical_digest(data) -> str:
    """sha256 of :func:`canonical_json` of ``data``."""
    return hashlib.sha256(canonical_json(data)).hexdigest()


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
    extra = sorted(set(data) - set(TOP_LEVEL))
    if extra:
        hint = " (gate keys belong in the [gates] table)" if set(extra) & set(POLICY_GATES) else ""
        raise PolicyError(
            f"{source}: unknown top-level keys {extra}{hint}; a policy has an optional "
            "name, optional [keys.<name>], [authorities.<name>], [[revoked]], [approvals], "
            '[revalidate_every_days], [roles] and [governed."<model>"] tables, drift_against, and one [gates] table '
            f"with these keys:\n{_valid_keys()}"
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
    unknown = sorted(set(table) - set(POLICY_GATES))
    if unknown:
        raise PolicyError(f"{source}: unknown gates {unknown}; valid keys:\n{_valid_keys()}")
    gates = dict(DEFAULTS)
    for name, value in table.items():
        gates[name] = _checked(name, value, source)
    if gates.get("require_validation_pass") is False:
        del gates["require_validation_pass"]
    try:
        keys = parse_trust(data, base_dir, source)
    except SignatureError as error:
        raise PolicyError(str(error)) from error
    approvals = _approvals(data.get("approvals", {}), keys, source)
    try:
        roles = parse_roles(data.get("roles"), source)
        check_approvers(roles, approvals, source)
        check_key_users(roles, keys, source)
        governed = parse_governed(data.get("governed"), source)
    except RolesError as error:
        raise PolicyError(str(error)) from error
    return Policy(
        gates=dict(sorted(gates.items())),
        source=source,
        name=policy_name,
        keys=keys,
        approvals=approvals,
        drift_against=_drift_against(data.get("drift_against", "champion"), source),
        revalidate_every_days=_revalidation(data.get("revalidate_every_days", {}), source),
        roles=roles,
        governed=governed,
    )


def _drift_against(alias, source: str) -> str:
    if not isinstance(alias, str) or not _ALIAS.match(alias) or alias.lower() == "latest":
        raise PolicyError(
            f"{source}: drift_against = {alias!r} is not valid; name the alias of the version "
            'the candidate is compared with, e.g. "champion"'
        )
    return alias


def _revalidation(table, source: str) -> dict:
    """``[revalidate_every_days]``: alias -> a whole number of days, at least 1."""
    if not isinstance(table, dict):
        raise PolicyError(
            f"{source}: [revalidate_every_days] must map aliases to days, e.g. champion = 180"
        )
    for alias, days in table.items():
        if not _ALIAS.match(alias) or alias.lower() == "latest":
            raise PolicyError(
                f"{source}: revalidate_every_days names {alias!r}, not a valid alias; name "
                "the alias whose holder is re-validated, e.g. champion"
            )
        if isinstance(days, bool) or not isinstance(days, int) or days < 1:
            raise PolicyError(
                f"{source}: revalidate_every_days {alias} = {days!r}; give a whole number of "
                "days, at least 1"
            )
    return dict(sorted(table.items()))


def _approvals(table, keys: TrustedKeys, source: str) -> dict:
    """``[approvals]``: alias -> number of distinct approver keys needed.

    An alias may need at most as many approvals as the policy trusts keys to approve,
    and once any alias needs one, no key may both decide and approve (one key would
    approve and promote alone).
    """
    approvers = keys.names("approve")
    certified = keys.authorities_for("approve")  # any number of certified reviewers
    if not isinstance(table, dict):
        raise PolicyError(f"{source}: [approvals] must map aliases to numbers of approvals")
    for alias, count in table.items():
        if not approvers and not certified:
            raise PolicyError(
                f"{source}: approvals {alias} = {count!r} needs keys trusted to approve, and "
                'the policy trusts none: add [keys.<name>] tables with may_sign = ["approve"]'
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise PolicyError(
                f"{source}: approvals {alias} = {count!r}; give a whole number from 1 to "
                f"{len(approvers)}, the keys the policy trusts to approve"
                if not certified
                else f"{source}: approvals {alias} = {count!r}; give a whole number from 1"
            )
        if count > len(approvers) and not certified:
            trusted = f"{len(approvers)} key{'s' if len(approvers) > 1 else ''}"
            raise PolicyError(
                f"{source}: approvals {alias} = {count} asks for {count} distinct approvers, "
                f"but the policy trusts {trusted} to approve ({', '.join(approvers)}): add a "
                '[keys.<name>] table with may_sign = ["approve"] for each further reviewer, '
                f"or ask for at most {len(approvers)}"
            )
    both = sorted(set(keys.names("decide")) & set(approvers))
    if table and both:
        raise PolicyError(
            f"{source}: {', '.join(f'[keys.{name}]' for name in both)} may sign both decide "
            f"and approve, and [approvals] asks for approvals of {', '.join(sorted(table))}: "
            "one key could approve and promote alone (four eyes with one key). Give approve "
            "to reviewers' keys and decide to the CI key, never both to one key"
        )
    return dict(sorted(table.items()))


def _checked(name: str, value, source: str):
    spec = POLICY_GATES[name]
    wrong = f"{source}: {name} = {value!r} is not valid; expected {spec.description}"
    if spec.value_type is bool:
        if not isinstance(value, bool):
            raise PolicyError(wrong)
        return value
    if spec.value_type is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PolicyError(wrong)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PolicyError(wrong)
    value = float(value)
    if (spec.share and not 0.0 <= value <= 1.0) or value < 0.0:
        raise PolicyError(wrong)
    return value


def load_policy(path=None) -> Policy:
    """Read a TOML policy file; ``None`` gives the built-in defaults.

    Raises
    ------
    PolicyError
        The file fails :func:`read_toml` or :func:`parse_policy`.
    """
    if path is None:
        return Policy(gates=dict(sorted(DEFAULTS.items())))
    path = Path(path)
    data = read_toml(path, "policy file", "a [gates] table (see examples/policies/)")
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem)[:40] or "policy"
    return parse_policy(data, source=str(path), default_name=stem, base_dir=path.parent)


def read_toml(path: Path, what: str, expect: str) -> dict:
    """The TOML table of the ``what`` file at ``path`` (a policy, a policy trust file),
    which should hold ``expect``, named in messages.

    Only regular files of at most :data:`MAX_POLICY_BYTES` are read (a device such as
    ``/dev/zero``, a FIFO or a directory is refused before reading).

    Raises
    ------
    PolicyError
        The file is not a regular file, is too large or empty, cannot be read or parsed.
    """
    try:
        if not path.is_file():
            kind = "a directory" if path.is_dir() else "not a regular file"
            if not path.exists():
                kind = "missing"
            raise PolicyError(
                f"{what} {path} is {kind}: give the path of a TOML file with {expect}"
            )
        with path.open("rb") as handle:
            raw = handle.read(MAX_POLICY_BYTES + 1)
    except OSError as error:
        raise PolicyError(f"cannot read {what} {path}: {error.strerror}") from error
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyError(
            f"{what} {path} is larger than {MAX_POLICY_BYTES // 1024} KiB; it should be a few "
            f"lines of TOML with {expect}: check that the path names the {what}"
        )
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise PolicyError(f"{what} {path} is not UTF-8 text: {error}") from error
    except tomllib.TOMLDecodeError as error:
        raise PolicyError(f"{what} {path} is not valid TOML: {error}") from error
    if not data:
        raise PolicyError(f"{what} {path} is empty: give a TOML file with {expect}")
    return data
