"""Feasibility of a tree as a solution of the MIRET MILP of a problem."""

from __future__ import annotations

import numpy as np

from miret_governance.governance.miret.heuristics.kernels import components_broken
from miret_governance.governance.miret.problem.layout import node_level


def check_feasible(tree, problem, epsilon=None, tolerance=1e-9) -> list:
    """Constraint violations of ``tree`` as a solution of the MILP of ``problem``.

    Checks the bounds ``|a| <= 1`` and ``|b| <= 1``, ``b_t >= 0`` above the last level
    (formulation ``"miret"``, two classes: :attr:`MiretProblem.symmetry_breaking`) and
    at least one nonzero coefficient (formulation ``"miret"``), the frequency
    constraints (zero coefficients outside ``J_gamma(d)``), the epsilon gap (no sample
    reaching a node has ``0 < a.x + b < epsilon``) and the proximity constraints (one
    leaf per component).

    Parameters
    ----------
    tree : SurrogateTree
    problem : MiretProblem
    epsilon : float, optional
        Gap to check; defaults to ``problem.epsilon``.
    tolerance : float
        Slack on the bounds.

    Returns
    -------
    list of str
        One message per violated constraint family; empty when the tree is feasible.
    """
    if tree.depth != problem.depth or tree.n_features != problem.X.shape[1]:
        return [
            (
                f"tree has depth {tree.depth} and {tree.n_features} features, the problem "
                f"depth {problem.depth} and {problem.X.shape[1]} features"
            )
        ]
    eps = problem.epsilon if epsilon is None else float(epsilon)
    coef, intercept = tree.coef, tree.intercept
    levels = node_level(np.arange(tree.n_branch_nodes))
    issues = []
    if np.any(np.abs(coef) > 1 + tolerance):
        issues.append(
            f"coefficients outside [-1, 1] at nodes "
            f"{np.flatnonzero((np.abs(coef) > 1 + tolerance).any(axis=1)).tolist()}"
        )
    if np.any(np.abs(intercept) > 1 + tolerance):
        issues.append(
            f"intercepts outside [-1, 1] at nodes "
            f"{np.flatnonzero(np.abs(intercept) > 1 + tolerance).tolist()}"
        )
    if problem.formulation == "miret":
        upper = np.flatnonzero((levels < tree.depth - 1) & (intercept < -tolerance))
        if upper.size and problem.symmetry_breaking:
            issues.append(
                f"negative intercept above the last level at nodes {upper.tolist()} "
                "(symmetry breaking b_t >= 0)"
            )
        if not np.any(coef != 0):
            issues.append("no nonzero coefficient (the MIRET formulation needs one split)")
    forbidden = (coef != 0) & ~np.asarray(problem.allowed)[levels]
    if forbidden.any():
        nodes, features = np.nonzero(forbidden)
        issues.append(
            f"features outside J_gamma(level) used at (node, feature) "
            f"{list(zip(nodes.tolist(), features.tolist(), strict=True))[:10]}"
        )
    nodes, values = tree.walk(problem.X)
    in_gap = (values > 0) & (values < eps)
    if in_gap.any():
        rows, cols = np.nonzero(in_gap)
        issues.append(
            f"{rows.size} (sample, node) pairs in the open gap (0, {eps:g}), e.g. "
            f"samples {rows[:5].tolist()} at nodes {nodes[rows[:5], cols[:5]].tolist()}"
        )
    leaves = 2 * nodes[:, -1] + 1 + (values[:, -1] > 0)
    component = np.asarray(problem.component, dtype=np.int64)
    split = np.unique(
        component[components_broken(component, leaves, np.zeros_like(leaves, dtype=bool))]
    )
    if split.size:
        issues.append(
            f"{split.size} proximity components split across leaves (ids {split[:10].tolist()})"
        )
    return issues
