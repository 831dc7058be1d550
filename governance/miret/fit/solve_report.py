"""``SolveReport``: what one MIRET fit did and how good its tree is."""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields


@dataclass
class SolveReport:
    """What a fit did and how good its tree is.

    ``objective`` is the MIRET objective of the returned tree on the fit sample;
    ``solver_objective`` the solver's incumbent; ``bound`` its dual bound and ``gap`` the
    relative gap of ``objective`` to ``bound`` in ``[0, 1]`` (1 without a bound).
    ``status`` is the solver's (see :mod:`governance.miret.solvers`); ``stop_reason``
    says why the fit ended: ``"optimal"`` (gap closed), ``"gap_limit"`` (requested gap
    reached), ``"stalled"`` (neither incumbent nor bound moved for ``stall_work`` units
    of work), ``"work_limit"`` (the solver's work budget, ``solver_work`` units, ran
    out), ``"time_limit"`` (the safety cap in seconds; only then can a re-run differ) or
    ``"trivial"`` (the ensemble predicts one class: the constant tree, objective 0, no
    solver).
    ``incumbent_source`` is ``"heuristic"``, ``"seed"`` (the best seed tree) or
    ``"solver"`` for the MIRET tree, ``"univariate"`` or ``"cart"`` when the returned
    tree is that candidate.
    ``node_statuses``: each branch node's status in the node MILPs
    (:mod:`governance.miret.node_milp`; ``"optimal"``: that split is optimal given the
    rest of the tree), ``node_objective_before`` the objective they started from and
    ``node_time`` their seconds; ``global_milp``: whether the whole MILP ran (with HiGHS
    only on small models, :data:`governance.miret.solvers.solve_result.GLOBAL_MILP_BINARIES`); when it did
    not, ``status`` is ``"not_run"`` and ``stop_reason`` ``"node_milps"``.
    ``cv_fidelity``: each candidate's held-out fidelity (:mod:`governance.miret.
    selection`; empty when the choice was off or the sample too small for folds),
    ``candidate_features`` their numbers of features and ``chosen`` the returned one.
    ``grid``: when the depth or alpha was not given, the values tried, each
    procedure's held-out fidelity and fold features (``rows``), the rule and the chosen
    ``depth`` and ``alpha`` (:func:`governance.miret.grid.record`; empty otherwise).
    ``milp_work``: units of work the node MILPs and the whole MILP counted, and
    ``fit_work`` the units the fit counted before them (the folds' and the final
    heuristic's), of which ``milp_share`` is their budget; ``stop_reason``
    ``"no_milp_budget"``: ``milp_share`` 0, no MILP solved. ``whole_milp_start``: the
    objective of the tree the whole MILP started from (the heuristic's, after the node
    MILPs); ``whole_milp_skipped``: why the whole MILP was not attempted
    (:func:`governance.miret.solvers.table.whole_milp_backend`'s reasons, or
    ``"no_budget"``: the MILP phase's budget was spent), "" when it ran.
    ``allowed_features`` lists the feature names of ``J_gamma(d)`` per level.
    ``baseline_cart_train_fidelity`` / ``baseline_cart_n_features``: the depth-D CART
    fitted on the same labels (all features, fit sample); its fidelity on all the rows
    given to ``fit``; ``baseline_cart_cv_fidelity`` the same with each row of the fit
    sample predicted by a CART fitted without it (NaN when not measured). ``train_fidelity``: the returned tree's fidelity on
    those rows.
    ``fallback``: empty, or why another candidate than the MIRET tree was returned;
    ``objective``, ``bound`` and ``gap`` still describe the MIRET tree.
    """

    solver: str
    solver_version: str
    status: str
    stop_reason: str
    objective: float
    bound: float
    gap: float
    wall_time: float
    time_limit_hit: bool
    nodes: int
    n_variables: int
    n_binaries: int
    n_constraints: int
    n_nonzeros: int
    warm_start_objective: float
    warm_start_feasible: bool
    warm_start_work: int
    cart_seed_objective: float
    incumbent_source: str
    time_limit: float
    solver_objective: float
    build_time: float
    heuristic_time: float
    solve_time: float
    formulation: str
    reductions: bool
    mip_gap: float
    baseline_cart_train_fidelity: float
    baseline_cart_n_features: int
    allowed_features: list = field(default_factory=list)
    train_fidelity: float = math.nan
    fallback: str = ""
    stall_work: float = math.nan  # absent from reports of releases that stalled on seconds
    solver_work: float = math.nan
    baseline_cart_cv_fidelity: float = math.nan
    cv_fidelity: dict = field(default_factory=dict)
    candidate_features: dict = field(default_factory=dict)
    node_statuses: dict = field(default_factory=dict)
    node_objective_before: float = math.nan
    node_time: float = 0.0
    global_milp: bool = True
    chosen: str = "miret"
    grid: dict = field(default_factory=dict)
    milp_work: float = 0.0
    fit_work: float = math.nan
    whole_milp_start: float = math.nan
    whole_milp_skipped: str = ""

    def to_dict(self) -> dict:
        """Plain JSON values; non-finite floats become None."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = None
        return out

    @classmethod
    def from_dict(cls, data: dict) -> SolveReport:
        values = {}
        for f in fields(cls):
            has_default = f.default is not MISSING or f.default_factory is not MISSING
            if f.name not in data and has_default:  # fields added after a report was written
                continue
            value = data[f.name]
            values[f.name] = math.nan if value is None and f.type == "float" else value
        return cls(**values)
