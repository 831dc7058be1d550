"""The fits one :meth:`MiretSurrogate.fit <governance.miret.estimator.MiretSurrogate.fit>`
makes on its rows: the held-out folds' and the final one.

:class:`SampleFits` holds the fit's inputs once (the ensemble's inputs and labels, the
MILP's sample, the wider sample of the returned CART and univariate trees) and builds
each problem once per (rows, depth, proximity threshold), the guessed thresholds once
per rows and each pair of CART and univariate trees once per (rows, depth): alpha only
weighs the objective, neither tree depends on alpha or ``m``, and the thresholds do not
depend on the depth either (several depths are tried when none is given).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from miret_governance.governance.ensembles.arrays import scaled
from miret_governance.governance.miret.fit.engine import (
    candidate_arrays,
    fit_problem,
    fit_trivial,
    univariate_trees,
)
from miret_governance.governance.miret.heuristics.heuristic import PAIRS_PER_UNIT
from miret_governance.governance.miret.heuristics.univariate import guessed_thresholds
from miret_governance.governance.miret.problem.problem import build_problem

CANDIDATE_ROWS = 10_000
"""Rows (at most) the returned CART and optimal univariate trees are fitted on when
the MILP's sample is smaller: refitted on 2,000 of 2,343 rows, the optimal univariate
tree of the unseen Train data (random forest, depth 3) lost 6 test points; 10,000 rows
cost about 1 s at depth 3 and 3 s at depth 4."""


def wider_size(max_rows) -> int | None:
    """Rows (at most) of the returned CART and univariate trees: ``max(max_rows,
    CANDIDATE_ROWS)`` (``max_rows`` None: every row)."""
    return None if max_rows is None else max(max_rows, CANDIDATE_ROWS)


class SampleFits:
    """Problems, candidate trees and fits of one estimator fit.

    Parameters
    ----------
    ensemble : Ensemble
    tree_inputs : ndarray of shape (n, p)
        The ensemble's inputs (after its own MinMaxScaler, if any), NaN allowed.
    labels : ndarray of shape (n,)
        The ensemble's predictions on ``tree_inputs``.
    rows : ndarray
        The MILP's sample (complete rows).
    wider : ndarray
        The rows the returned CART and univariate trees are fitted on (``rows`` or more).
    scaler : MinMaxScaler or None
        Maps ``tree_inputs`` into the normalized space (None: they already are).
    params : dict
        The estimator's parameters.
    begin : float
        ``time.perf_counter()`` at the start of the fit.
    """

    def __init__(self, ensemble, tree_inputs, labels, rows, wider, scaler, params, begin):
        self.ensemble, self.tree_inputs, self.labels = ensemble, tree_inputs, labels
        self.rows, self.wider, self.scaler = rows, wider, scaler
        self.params, self.begin = params, begin
        self._problems, self._trees, self._thresholds = {}, {}, {}
        self.folds_cut = []  # the time cap cut a fold's heuristic: the choice may differ
        self.fold_work = 0.0  # units of work the folds' heuristics counted

    def problem(self, sample, depth, proximity_threshold):
        """The MILP problem of the rows ``sample`` at ``depth`` with proximity pairs at
        ``proximity_threshold`` (alpha: the params')."""
        key = (tuple(sample), depth, proximity_threshold)
        if key not in self._problems:
            self._problems[key] = build_problem(
                self.tree_inputs[list(sample)],
                self.ensemble,
                depth=depth,
                gamma_percentile=self.params["gamma_percentile"],
                proximity_threshold=proximity_threshold,
                epsilon=self.params["epsilon"],
                formulation=self.params["formulation"],
                scaler=self.scaler,
            )
        return self._problems[key]

    def fit(self, sample, depth, setting, trees=None, **options):
        """``(problem, (tree, report, baseline, candidates))`` of
        :func:`governance.miret.engine.fit_problem` on the rows ``sample`` with the
        ``(alpha, m)`` of ``setting``."""
        alpha, proximity_threshold = setting
        problem = replace(self.problem(sample, depth, proximity_threshold), alpha=float(alpha))
        if np.all(problem.y == problem.y[0]):
            return problem, fit_trivial(problem, self.params, self.begin)
        if trees is None:
            key = (tuple(sample), depth)
            if key not in self._trees:
                univariate = self.params["fallbacks"] or self.params["univariate_seed"]
                thresholds = self.guessed_thresholds(key[0], problem) if univariate else None
                self._trees[key] = univariate_trees(
                    problem, self.params["random_state"], thresholds, univariate
                )
            trees = self._trees[key]
        return problem, fit_problem(problem, self.params, self.begin, trees=trees, **options)

    def guessed_thresholds(self, sample, problem):
        """The guessed thresholds of the rows ``sample`` (a tuple), on the normalized
        inputs and labels of ``problem`` (one of those rows' problems, any depth)."""
        if sample not in self._thresholds:
            labels = problem.classes[problem.y]
            seed = self.params["random_state"]
            self._thresholds[sample] = guessed_thresholds(problem.X, labels, seed)
        return self._thresholds[sample]

    def fold_candidates(self, train, depth, setting, share):
        """The candidates of a held-out fold's fit on ``rows[train]``: seeds and heuristic
        on ``share`` of its work budget (:func:`governance.miret.grid.budget_share`), no
        MILP phase."""
        _, (_, report, _, found) = self.fit(
            self.rows[train], depth, setting, milp_phase=False, heuristic_share=share
        )
        self.folds_cut.append(report.time_limit_hit)
        self.fold_work += report.warm_start_work / PAIRS_PER_UNIT
        return found

    def wider_trees(self, depth):
        """The CART and univariate trees of ``depth`` fitted on ``wider`` (None when that
        is the sample itself, or without ``fallbacks``: then no univariate or CART tree
        can be returned)."""
        if self.wider.size <= self.rows.size or not self.params["fallbacks"]:
            return None
        unit = self.tree_inputs[self.wider]
        unit = unit if self.scaler is None else np.clip(scaled(self.scaler, unit), 0.0, 1.0)
        classes = np.asarray(self.ensemble.classes)
        seed = self.params["random_state"]
        return candidate_arrays(unit, self.labels[self.wider], depth, classes, seed)
