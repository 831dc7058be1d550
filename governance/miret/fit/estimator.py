"""``MiretSurrogate``: the MIRET surrogate tree of a tree ensemble as an sklearn estimator."""

from __future__ import annotations

import time
from functools import partial
from numbers import Integral, Real
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.preprocessing import MinMaxScaler
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from miret_governance.governance.ensembles.arrays import feature_matrix, scaled
from miret_governance.governance.ensembles.ensemble import Ensemble
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.errors import InvalidInputError
from miret_governance.governance.miret.fit import grid, persistence, selection
from miret_governance.governance.miret.fit.fitting import SampleFits, wider_size
from miret_governance.governance.miret.heuristics.cart import cart_predict
from miret_governance.governance.miret.problem.augment import with_generated_rows
from miret_governance.governance.miret.problem.problem import FORMULATIONS, PAPER_DEFAULTS
from miret_governance.governance.miret.problem.sampling import samples
from miret_governance.governance.miret.solvers.solve_result import DEFAULT_TIME_LIMIT
from miret_governance.governance.miret.solvers.table import AUTO, SOLVER_CHOICES
from miret_governance.governance.miret.tree.missing import with_missing_rule

DEFAULT_MAX_ROWS = 2000
LEGACY_PARAMS = {
    "fallbacks": True,
    "univariate_seed": True,
    "milp_share": None,
    "generated_rows": 0.0,
    "alpha_grid": list(persistence.LEGACY_ALPHA_GRID),  # a list, as a recorded request holds it
}
"""The values of the parameters added after evidence was first written that fit as
before them: a request recorded without one of them is refitted with this value
(``govern reproduce``), and a request at these values digests as before."""


class MiretSurrogate(ClassifierMixin, BaseEstimator):
    """Optimal oblique surrogate tree of a tree ensemble (MIRET, solved as a MILP).

    Parameters
    ----------
    ensemble : Ensemble or fitted tree-ensemble model
        Anything :func:`governance.ensemble.read_ensemble` reads (a Pipeline may put one
        MinMaxScaler before the ensemble).
    depth : int, optional
        Surrogate depth ``D``; default: chosen on held-out folds from 2 to the ensemble's
        depth, at most 4 (:mod:`governance.miret.grid`; without folds the largest).
    alpha : float, optional
        Weight of the frequency-weighted sparsity penalty; default: chosen on held-out
        folds among ``alpha_grid`` (0.5 unless clearly beaten).
    gamma_percentile : float
        ``h``: a level may use the features whose level frequency exceeds the h-th
        percentile of the level's positive frequencies (0: every used feature), and
        always its most frequent feature(s).
    proximity_threshold : float, optional
        ``m``: samples whose ensemble proximity is at least this share a leaf (above 1:
        none); default: chosen on held-out folds among
        :data:`governance.miret.grid.PROXIMITY_GRID` (0.9 unless clearly beaten).
    epsilon : float
        Gap modelling the strict inequality of right branches.
    formulation : {"miret", "basic"}
        Improved MIRET or b-MIRET.
    solver : {"auto", "highs", "gurobi"}
        A backend of :data:`governance.miret.solvers.table.SOLVERS`, or ``"auto"``.
    time_limit : float
        Safety cap in seconds for the whole fit (see ``solve_report_.time_limit_hit``);
        default :data:`governance.miret.solvers.solve_result.DEFAULT_TIME_LIMIT` (60).
        Work decides every other stop, so a fit that does not hit it is reproducible.
    stall_work : float, optional
        The solver stops after this many units of work (about a second of one core at
        most) without progress; default ``min(3, 0.05 * time_limit)``.
    work_limit : float, optional
        The solver's whole budget in units of work; default ``0.1 * time_limit`` (the
        heuristic's is ``0.05 * time_limit``, :func:`governance.miret.engine.work_budgets`).
    mip_gap : float
        Relative MIP gap at which the solver stops.
    threads : int
        Solver threads; the default 1 makes the solve deterministic.
    random_state : int
        Seed of the sample, the heuristic, CART and the solver.
    warm_start : bool
        Run the heuristic (always seeded with the CART trees).
    reductions : bool
        Exact model reductions (see :mod:`governance.miret.formulation`).
    max_rows : int, optional
        The problem uses a stratified, proximity-preserving sample of at most this many
        rows (:mod:`governance.miret.sampling`); None uses every row. The CART and
        optimal univariate trees the fit returns are refitted on a larger sample (at
        most ``max(max_rows, fitting.CANDIDATE_ROWS)`` rows).
    cart_guarantee : bool
        Choose the depth, alpha and ``m`` not given on held-out folds (see :meth:`fit`);
        False keeps the MIRET objective's tree of the given (else default) depth and
        alpha, as the paper. No fit promises to beat CART; what holds is measured over
        five splits against CART, GOSDT and STreeD (``examples/benchmarks/results_engine.md``).
    fallbacks : bool
        With ``cart_guarantee``, the optimal univariate and CART trees compete with the
        MIRET tree on the held-out folds (False: the MIRET tree is returned; over five
        depth-2 splits the competition paid 0.2 to 1.7 points of test fidelity for about
        0.4 s of one core).
    univariate_seed : bool
        Also seed the heuristic with the optimal univariate tree on guessed thresholds
        (False guesses no thresholds unless ``fallbacks`` needs that tree; with them it
        costs next to nothing, the thresholds being guessed anyway).
    milp_share : float, optional
        The MILP phase's (node MILPs, whole MILP) work budget, as a share of the units
        of work the fit counted before it (the folds' and the final heuristic's); None:
        no such cap (each solve has its own budget), 0: no MILP phase. The default keeps
        the phase near 15% of a fit's CPU where it improves nothing.
    generated_rows : float
        Rows generated next to the ensemble's thresholds and labelled by the ensemble,
        added to the final fit's sample, as a multiple of its real rows (capped so the
        sample stays within ``max_rows``; :mod:`governance.miret.problem.augment`).
        Held-out folds, fidelities and leaf counts stay on real rows. 0 (the default):
        none; measured in ``examples/benchmarks/results_generated_rows.md``.
    alpha_grid : sequence of float
        The alphas the folds choose among when ``alpha`` is None (default
        :data:`governance.miret.grid.ALPHA_GRID`, 0.2 and 0.5; evidence recorded
        without it was fitted with 0.8 too and is refitted so).

    Attributes
    ----------
    tree_ : SurrogateTree
        Splits in normalized space (``input_scaler_`` output).
    solve_report_ : SolveReport
    input_scaler_ : MinMaxScaler
        The ensemble's own MinMaxScaler, or one fitted on the fit data.
    depth_, alpha_, proximity_threshold_ : int, float, float
        The depth, alpha and ``m`` fitted, given or chosen (``solve_report_.grid``).
    baseline_ : dict
        The depth-D CART baseline (plain arrays, normalized space).
    leaf_counts_ : ndarray of shape (2**D, k)
        Fit-sample ensemble labels of each class (``classes_`` order) in each leaf.
    selected_features_ : ndarray of int
    problem_ : dict
    n_rows_seen_, n_rows_used_, n_rows_generated_ : int
        Rows given to ``fit``, real rows in the problem's sample and generated rows
        added to it.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
    classes_ : ndarray
    """

    _parameter_constraints: ClassVar[dict] = {
        "ensemble": "no_validation",
        "depth": [Interval(Integral, 1, None, closed="left"), None],
        "alpha": [Interval(Real, 0, None, closed="left"), None],
        "gamma_percentile": [Interval(Real, 0, 100, closed="both")],
        "proximity_threshold": [Interval(Real, 0, None, closed="neither"), None],
        "epsilon": [Interval(Real, 0, 1, closed="neither")],
        "formulation": [StrOptions(set(FORMULATIONS))],
        "solver": [StrOptions(set(SOLVER_CHOICES))],
        "time_limit": [Interval(Real, 0, None, closed="neither")],
        "stall_work": [Interval(Real, 0, None, closed="neither"), None],
        "work_limit": [Interval(Real, 0, None, closed="neither"), None],
        "mip_gap": [Interval(Real, 0, 1, closed="both")],
        "threads": [Interval(Integral, 1, None, closed="left")],
        "random_state": [Interval(Integral, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "reductions": ["boolean"],
        "max_rows": [Interval(Integral, 2, None, closed="left"), None],
        "cart_guarantee": ["boolean"],
        "fallbacks": ["boolean"],
        "univariate_seed": ["boolean"],
        "milp_share": [Interval(Real, 0, None, closed="left"), None],
        "generated_rows": [Interval(Real, 0, None, closed="left")],
        "alpha_grid": ["array-like"],
    }

    def __init__(
        self,
        ensemble=None,
        *,
        depth=None,
        alpha=None,
        gamma_percentile=PAPER_DEFAULTS["gamma_percentile"],
        proximity_threshold=None,
        epsilon=PAPER_DEFAULTS["epsilon"],
        formulation=PAPER_DEFAULTS["formulation"],
        solver=AUTO,
        time_limit=DEFAULT_TIME_LIMIT,
        stall_work=None,
        work_limit=None,
        mip_gap=1e-4,
        threads=1,
        random_state=0,
        warm_start=True,
        reductions=True,
        max_rows=DEFAULT_MAX_ROWS,
        cart_guarantee=True,
        fallbacks=True,
        univariate_seed=True,
        milp_share=0.025,
        generated_rows=0.0,
        alpha_grid=grid.ALPHA_GRID,
    ):
        self.ensemble = ensemble
        self.depth = depth
        self.alpha = alpha
        self.gamma_percentile = gamma_percentile
        self.proximity_threshold = proximity_threshold
        self.epsilon = epsilon
        self.formulation = formulation
        self.solver = solver
        self.time_limit = time_limit
        self.stall_work = stall_work
        self.work_limit = work_limit
        self.mip_gap = mip_gap
        self.threads = threads
        self.random_state = random_state
        self.warm_start = warm_start
        self.reductions = reductions
        self.max_rows = max_rows
        self.cart_guarantee = cart_guarantee
        self.fallbacks = fallbacks
        self.univariate_seed = univariate_seed
        self.milp_share = milp_share
        self.generated_rows = generated_rows
        self.alpha_grid = alpha_grid

    def __sklearn_clone__(self):
        """A copy with the same parameters that shares the (read-only) ensemble: cloning
        a fitted model the usual way would drop its fit."""
        return type(self)(**self.get_params(deep=False))

    # ------------------------------------------------------------------ inputs
    def _read_ensemble(self) -> Ensemble:
        if self.ensemble is None:
            raise InvalidInputError("MiretSurrogate needs ensemble=<fitted tree ensemble> to fit")
        ensemble = self.ensemble
        ensemble = ensemble if isinstance(ensemble, Ensemble) else read_ensemble(ensemble)
        steps = getattr(ensemble.preprocessor, "steps", None)
        if ensemble.preprocessor is not None and (ensemble.scaler is None or len(steps) != 1):
            raise InvalidInputError(
                "the ensemble's pipeline has preprocessing other than one MinMaxScaler; "
                "pass the fitted ensemble step and its transformed inputs instead"
            )
        return ensemble

    def _ensemble_labels(self, X) -> np.ndarray:
        """The ensemble's predictions on ``X`` (the fit's input units)."""
        ensemble = self._read_ensemble()
        X = feature_matrix(X, self.feature_names_in_, allow_nan=True)
        return ensemble.predict(ensemble.transform(X))

    def _normalized(self, X) -> np.ndarray:
        """Predict-time input: the fit's units mapped by ``input_scaler_``."""
        check_is_fitted(self, "tree_")
        return scaled(self.input_scaler_, feature_matrix(X, self.feature_names_in_, allow_nan=True))

    # ------------------------------------------------------------------ fitting
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, progress=None):
        """Fit the surrogate of ``ensemble`` on ``X`` (the ensemble's input units).

        Parameters
        ----------
        X : array-like of shape (n, p)
            What the ensemble (or its pipeline) takes in ``predict``. Behind a pipeline's
            MinMaxScaler, values outside the scaler's training range are clipped to it
            (the surrogate's normalized space is that range), as ``govern explain`` does.
        y : array-like of shape (n,), optional
            Must equal the ensemble's predictions (the labels are always the ensemble's).
        progress : callable, optional
            ``progress(elapsed, incumbent, bound, gap)`` while the solver runs.

        Returns
        -------
        self

        Notes
        -----
        With ``cart_guarantee`` (the default) the depth and alpha not given are chosen
        on held-out folds of the sample (:mod:`governance.miret.grid`), then the returned
        tree is the candidate (MIRET tree, optimal univariate tree on guessed
        thresholds, CART tree) with the best held-out fidelity, never chosen on training
        fidelity (:mod:`governance.miret.selection`; ``solve_report_.grid``,
        ``.chosen``, ``.cv_fidelity`` and ``.fallback`` say what was chosen and why).

        ``X`` may hold missing values (NaN): the trees are fitted on a sample of the
        complete rows, the rule for a missing value (:mod:`governance.miret.missing`) is
        learned from all rows, and ``solve_report_.train_fidelity`` measured on all rows.
        """
        with threadpool_limits(limits=1, user_api="blas"):
            return self._fit(X, y, progress)

    def _fit(self, X, y, progress):
        """:meth:`fit` with one BLAS thread: its products are small (thresholds x
        thresholds, rows x directions), where threads cost more than they do (on a loaded
        2-core machine a 700 x 40 product took 24 ms with two threads, 0.02 ms with
        one); the results do not depend on the thread count."""
        begin = time.perf_counter()
        grid.checked_alpha_grid(self.alpha_grid)  # before any work
        ensemble = self._read_ensemble()
        X = feature_matrix(X, ensemble.feature_names, allow_nan=True)
        if ensemble.scaler is not None:
            # rows outside the pipeline scaler's training range act like its bounds, as
            # in govern explain (the MILP works in [0, 1])
            X = np.clip(X, ensemble.scaler.data_min_, ensemble.scaler.data_max_)
        tree_inputs = ensemble.transform(X)  # the ensemble's one MinMaxScaler, if any
        if ensemble.scaler is not None:
            self.input_scaler_, scaler = ensemble.scaler, None
        else:
            self.input_scaler_ = scaler = MinMaxScaler().fit(X)
        labels = ensemble.predict(tree_inputs)  # once: sampling and guarantee use them
        if y is not None:
            y = np.asarray(y)
            if y.shape != labels.shape or np.any(y != labels):
                raise InvalidInputError(
                    "y must equal the ensemble's predictions on X (the surrogate explains "
                    f"the ensemble, not the ground truth): {int(np.sum(y != labels))} of "
                    f"{labels.size} labels differ; pass y=None"
                )
        complete = np.flatnonzero(~np.isnan(tree_inputs).any(axis=1))  # the MILP's rows
        if not complete.size:
            shares = np.isnan(tree_inputs).mean(axis=0)
            worst = np.argsort(-shares, kind="stable")[: min(3, int((shares > 0).sum()))]
            named = ", ".join(
                f"{ensemble.feature_names[j]!r} {100 * shares[j]:.0f}%" for j in worst
            )
            raise InvalidInputError(
                f"every row of X has a missing value (most often: {named}); the surrogate's "
                "splits are fitted on complete rows: give data with some complete rows, or "
                "fill in (impute) those columns first"
            )
        # the MILP's sample and the wider one of the returned CART and univariate trees,
        # from one stratification (the copy of the complete rows is freed at once)
        sizes = (self.max_rows, wider_size(self.max_rows))
        drawn = samples(ensemble, tree_inputs[complete], labels[complete], sizes, self.random_state)
        rows, wider = (complete[indices] for indices in drawn)
        self.n_rows_seen_, self.n_rows_used_ = int(X.shape[0]), int(rows.size)
        # generated rows join the final fit only: folds and figures stay on real rows
        fit_inputs, fit_labels, sample = with_generated_rows(
            ensemble,
            tree_inputs,
            labels,
            rows,
            self.generated_rows,
            self.max_rows,
            self.random_state,
        )
        real, self.n_rows_generated_ = slice(0, rows.size), int(sample.size - rows.size)
        params = self.get_params(deep=False)
        fits = SampleFits(ensemble, fit_inputs, fit_labels, sample, wider, scaler, params, begin)
        sample_labels = fit_labels[sample]
        splits = selection.folds(labels[rows], self.random_state) if self.cart_guarantee else []
        depths = grid.depths(self.depth, ensemble)
        tried = grid.settings(self.alpha, self.proximity_threshold, self.alpha_grid)
        right, features = grid.cross_validated(
            fits.problem(sample, depths[-1], tried[0][1]).X[real],
            sample_labels[real],
            splits,
            [(depth, setting) for depth in depths for setting in tried],
            partial(fits.fold_candidates, share=grid.budget_share(tried)),
        )
        self.depth_, setting = grid.choose(right, features, depths, tried)
        self.alpha_, self.proximity_threshold_ = setting
        held_out = grid.at(right, self.depth_, setting)
        problem, (tree, report, self.baseline_, candidates) = fits.fit(
            sample,
            self.depth_,
            setting,
            trees=fits.wider_trees(self.depth_),
            progress=progress,
            milp_phase=selection.can_win(held_out),  # else its time is given back
            skipped="behind_on_folds",
            prior_work=fits.fold_work,
        )
        chosen, cv, used = selection.decide(candidates, held_out, problem.X, sample_labels)
        tree = with_missing_rule(candidates[chosen], tree_inputs, labels, scaler, ensemble)
        own, cart = selection.fidelities(
            [tree.predict, partial(cart_predict, self.baseline_)], labels, tree_inputs, scaler
        )
        report.train_fidelity, report.baseline_cart_train_fidelity = float(own), float(cart)
        report.time_limit_hit = report.time_limit_hit or any(fits.folds_cut)
        report.cv_fidelity, report.chosen, report.candidate_features = cv, chosen, used
        report.grid = grid.record(right, features, depths, tried, (self.depth_, setting))
        report.baseline_cart_cv_fidelity = cv.get("cart", float("nan"))
        if chosen != "miret":
            report.fallback = selection.note(chosen, cv)
            report.incumbent_source = chosen
        report.wall_time = time.perf_counter() - begin
        self.tree_, self.solve_report_ = tree, report
        leaves = self.tree_.apply(problem.X[real]) - (2**problem.depth - 1)
        self.leaf_counts_ = np.zeros((2**problem.depth, problem.n_classes), dtype=np.int64)
        np.add.at(self.leaf_counts_, (leaves, problem.y[real]), 1)
        self.n_features_in_ = problem.n_features
        self.feature_names_in_ = np.asarray(problem.feature_names, dtype=object)
        self.classes_ = np.asarray(ensemble.classes)
        self.problem_ = problem.summary()
        self.selected_features_ = np.asarray(self.tree_.used_features(), dtype=np.int64)
        return self

    # ------------------------------------------------------------------ prediction
    def predict(self, X) -> np.ndarray:
        """Labels (the ensemble's classes) of samples in the fit's input units."""
        X = self._normalized(X)
        return self.tree_.predict(X)

    def predict_proba(self, X) -> np.ndarray:
        """Class shares of the fit sample's ensemble labels in each sample's leaf (an
        empty leaf gives its class probability 1)."""
        leaves = self.apply(X) - (2**self.tree_.depth - 1)
        counts = self.leaf_counts_.astype(np.float64)
        empty = counts.sum(axis=1) == 0
        counts[empty, self.tree_.leaf_class[empty]] = 1.0
        return (counts / counts.sum(axis=1, keepdims=True))[leaves]

    def apply(self, X) -> np.ndarray:
        """Leaf position (``2^D - 1 .. 2^{D+1} - 2``) of each sample."""
        X = self._normalized(X)
        return self.tree_.apply(X)

    def decision_path(self, x) -> list:
        """``(node, value, side)`` along the path of one sample."""
        x = self._normalized(np.reshape(x, (1, -1)))[0]
        return self.tree_.decision_path(x)

    def display(self, class_names=None):
        """The pruned tree a reviewer reads (:mod:`governance.miret.display`), from the
        fit sample's leaf counts, with conditions in the fit's input units."""
        from miret_governance.governance.miret.tree.display import display_from_counts

        check_is_fitted(self, "tree_")
        return display_from_counts(
            self.tree_, self.leaf_counts_, scaler=self.input_scaler_, class_names=class_names
        )

    def rules(self, class_names=None) -> str:
        """One rule per leaf of :meth:`display`: ``if <conditions> then <class> (...)``."""
        from miret_governance.governance.miret.tree.display import rules_text

        return rules_text(self.display(class_names))

    def score(self, X, y=None, sample_weight=None) -> float:
        """Fidelity: share of samples where the surrogate agrees with ``y`` (the
        ensemble's labels; computed from the ensemble when None)."""
        if y is None:
            y = self._ensemble_labels(X)
        agree = self.predict(X) == np.asarray(y)
        return float(np.average(agree, weights=sample_weight))

    def baseline_fidelity(self, X, y=None) -> float:
        """Fidelity of the depth-D CART baseline (fitted on the same labels) on ``X``."""
        if y is None:
            y = self._ensemble_labels(X)
        return float(np.mean(cart_predict(self.baseline_, self._normalized(X)) == np.asarray(y)))

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        """Plain JSON: parameters (without the ensemble), tree, scaler, report, baseline
        (:func:`governance.miret.persistence.to_dict`)."""
        return persistence.to_dict(self)

    def tree_digest(self) -> str:
        """sha256 of what decides the predictions and the rules: two fits with one digest
        are the same tree, bit for bit (:func:`governance.miret.persistence.tree_digest`)."""
        return persistence.tree_digest(self)

    @classmethod
    def from_dict(cls, data: dict, ensemble=None) -> MiretSurrogate:
        """Restore a fitted estimator written by :meth:`to_dict` (no refit)."""
        return persistence.restore(cls(ensemble), data)
