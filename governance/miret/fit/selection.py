"""Which tree a fit returns: the candidate with the best cross-validated fidelity.

A fit makes three trees of depth D on its sample (:func:`governance.miret.engine.
fit_problem`): the MIRET tree (seeded with the others, then improved by the heuristic
and the solver), the optimal univariate tree on guessed thresholds
(:mod:`governance.miret.univariate`, what GOSDT or STreeD would give a user) and the
CART tree. Training fidelity flatters the trees that fit the sample hardest (random
forest, Parkinson, depth 3: a 1-feature oblique tree 97.4% faithful on test rows, the
6-feature CART 84.6%, yet CART ahead on the training rows), so the choice is made on
rows each candidate did not see: the sample is split into ``CV_FOLDS`` stratified
folds, each procedure is fitted on all folds but one (the MIRET procedure without its
solver phase: seeds and heuristic, the same work budgets) and scored on the fold it
did not see (:func:`governance.miret.grid.cross_validated`, which also measures the
depths and alphas tried when none is given). :func:`choose` keeps the optimal univariate tree unless another candidate is
clearly better on held-out rows (more than one standard error of the paired difference,
or as good with fewer features): on depth 2 of the example datasets, CART's small
held-out leads were noise (XGBoost, Sonar: 0.717 against 0.687 held out, 76.2% against
90.5% on the test split). The MIRET tree must also be, refitted on the whole sample,
the tree the folds measured (the MIRET objective weighs samples by the ensemble's
confidence, so a refit can land far from the fold fits: XGBoost, Diabetes, depth 2,
held-out fidelity 0.81 but 0.73 for the refit on the sample itself). The chosen tree is
the one fitted on the whole sample. When the MIRET procedure is behind its seed on the
folds it cannot be returned, so the fit skips its MILP phase (:func:`can_win`).

This is the product's rule, not the paper's (``cart_guarantee=False`` returns the
MIRET objective's tree). :func:`fidelities` measures the trees on every row given to
``fit`` in chunks, for the report.
"""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import StratifiedKFold

from miret_governance.governance.ensembles.arrays import scaled

CANDIDATES = ("miret", "univariate", "cart")
NAMES = {
    "miret": "MIRET tree",
    "univariate": "optimal univariate tree",
    "cart": "CART tree",
}
CV_FOLDS = 3
MIN_FOLD_ROWS = 10
TIE = 1e-12
CHUNK_ROWS = 50_000


def folds(y, random_state=0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified ``(train, test)`` positions of the sample's labels ``y`` (fewer folds
    when a class has fewer rows; none when a class has a single row or the sample has
    fewer than ``MIN_FOLD_ROWS`` rows per fold: held-out fidelity on a handful of rows
    says nothing)."""
    sizes = np.unique(np.asarray(y), return_counts=True)[1]  # rows of each class present
    count = min(CV_FOLDS, int(sizes.min()) if sizes.size > 1 else 0)
    count = min(count, len(y) // MIN_FOLD_ROWS)
    if count < 2:
        return []
    split = StratifiedKFold(count, shuffle=True, random_state=random_state)
    return list(split.split(np.zeros((len(y), 1)), y))


def standard_error(values) -> float:
    """Standard error of the mean of ``values``."""
    values = np.asarray(values, dtype=np.float64)
    return float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else 0.0


def clearly_better(
    right: dict, n_features: dict, challenger: str, incumbent: str, sparser_counts=True
) -> bool:
    """Does ``challenger`` get more held-out rows right than ``incumbent`` by more than
    one standard error of the paired difference, or (``sparser_counts``) as many with
    fewer features?"""
    gain = right[challenger].astype(np.float64) - right[incumbent]
    if gain.mean() > standard_error(gain) + TIE:  # one win alone: mean == standard error
        return True
    if not sparser_counts or gain.mean() < 0:
        return False
    return n_features[challenger] < n_features[incumbent]


def choose(right: dict, n_features: dict, sample_fidelity: dict) -> str:
    """The returned candidate (``"miret"`` without folds or without fallbacks).

    The optimal univariate tree unless the CART tree is :func:`clearly_better` (by more
    than a standard error: CART's one feature fewer at equal held-out fidelity lost 5
    points on the test rows of XGBoost, Diabetes, depth 2); then the MIRET tree if it is clearly better than that seed and its refit is the procedure the
    folds measured: its fidelity on the whole sample (``sample_fidelity``) is not more
    than a standard error below its held-out one.
    """
    if set(right) <= {"miret"}:  # no folds, or no fallbacks scored
        return "miret"
    seed = seed_of(right)
    held_out = right["miret"].mean()
    consistent = sample_fidelity["miret"] >= held_out - standard_error(right["miret"])
    return "miret" if consistent and clearly_better(right, n_features, "miret", seed) else seed


def seed_of(right: dict) -> str:
    """The seed the MIRET tree must beat: the CART tree when :func:`clearly_better` than
    the optimal univariate tree on held-out rows, else the univariate tree."""
    cart_better = clearly_better(right, {}, "cart", "univariate", sparser_counts=False)
    return "cart" if cart_better else "univariate"


def can_win(right: dict) -> bool:
    """Can :func:`choose` return the MIRET tree, whatever its refit on the whole sample?
    Only when it gets at least as many held-out rows right as its seed (or there are no
    folds): otherwise the MILP phase cannot change the returned tree, and is skipped."""
    if set(right) <= {"miret"}:
        return True
    return bool(right["miret"].sum() >= right[seed_of(right)].sum())


def decide(candidates: dict, held_out: dict, X, y) -> tuple[str, dict, dict]:
    """``(chosen, cv_fidelity, features)``: the :func:`choose` among ``candidates``
    (``{name: tree}`` fitted on the sample ``X`` with labels ``y``) given their held-out
    rows right (``held_out``, from :func:`governance.miret.grid.cross_validated`), their
    held-out fidelities and their numbers of features."""
    used = {name: len(tree.used_features()) for name, tree in candidates.items()}
    on_sample = {name: float(np.mean(tree.predict(X) == y)) for name, tree in candidates.items()}
    cv = {name: float(hits.mean()) for name, hits in held_out.items()}
    return choose(held_out, used, on_sample), cv, used


def note(chosen: str, cv_fidelity: dict) -> str:
    """Why a candidate other than the MIRET tree was returned (empty otherwise)."""
    if chosen == "miret":
        return ""
    return (
        f"the {NAMES[chosen]} was returned: held-out fidelity {cv_fidelity[chosen]:.4f}; "
        f"the MIRET tree's {cv_fidelity['miret']:.4f} was not clearly better"
    )


def fidelities(predictors, labels, tree_inputs, scaler) -> np.ndarray:
    """Fidelity of each predictor (a function of normalized inputs) on all rows, in
    chunks: ``labels`` are the ensemble's on ``tree_inputs`` (its inputs), ``scaler``
    maps those into the trees' normalized space (None: they already are)."""
    n = tree_inputs.shape[0]
    right = np.zeros(len(predictors))
    for start in range(0, n, CHUNK_ROWS):
        block = tree_inputs[start : start + CHUNK_ROWS]
        unit = np.clip(block if scaler is None else scaled(scaler, block), 0.0, 1.0)
        expected = labels[start : start + CHUNK_ROWS]
        right += [np.sum(np.asarray(predict(unit)) == expected) for predict in predictors]
    return right / n
