"""Tree alternating optimization: refit one node at a time while the rest stays fixed.

A node's candidates are univariate cuts, the current direction, directions from an L1
logistic regression with per-feature penalties ``alpha / f_{d,j}`` (columns rescaled by
``f``) and their sparsifications, and a fresh greedy subtree; a move is kept only when
the objective strictly decreases and the tree stays MILP-feasible. A move keeps the leaf
classes fixed; with more than two classes the leaves are relabelled to their weighted
majority after every kept move (:meth:`SearchState.relabel`, never worse).

A logistic fit counts ``LOGISTIC_WORK`` units of the search's work (scanned sample-
direction pairs) per row, column and liblinear iteration (a deterministic count): on the
calibration runs of :mod:`governance.miret.heuristic` these fits took most of the
heuristic's time (16 of 18 s on a 2,000-row sample) and had counted nothing.

The fits call liblinear through scikit-learn's binding (``sklearn.svm._liblinear.
train_wrap``) with the arguments ``LogisticRegression(l1_ratio=1, solver="liblinear")
.fit`` gives it, not through the estimator: a search makes thousands of fits on a few
hundred rows, where the estimator's input checks, label encoding and per-fit random
state took most of their time (profiled on Cleveland, XGBoost, depth 3: 3.4 s in the
estimator, 1.6 s in scikit-learn's wrapper ``_fit_liblinear``; five benchmark fits took
14.9 s through that wrapper and 12.8 s through the binding, with the same trees). The
binding is private API, pinned by ``constraints.txt``; a unit test checks that it still
gives the estimator's coefficients and iteration counts.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from sklearn.svm._liblinear import set_verbosity_wrap, train_wrap

from miret_governance.governance.miret.heuristics.greedy import GreedySearch
from miret_governance.governance.miret.heuristics.kernels import components_broken
from miret_governance.governance.miret.heuristics.search_state import (
    IMPROVEMENT,
    digest,
    subtree_ranges,
)

LOGISTIC_C = (0.05, 0.5, 5.0, 50.0)
LOGISTIC_WORK = 0.5  # work of a logistic fit per (row, column, liblinear iteration)
LIBLINEAR_L1_LOGISTIC = 6  # liblinear's solver L1R_LR: L1-regularized logistic regression


def l1_logistic(Z, target, weight, C, seed):
    """``(coef, n_iter)`` of an L1 logistic regression (liblinear) of the boolean
    ``target`` (both values present) on ``Z`` with sample weights ``weight`` and inverse
    regularization ``C``: ``LogisticRegression(l1_ratio=1.0, solver="liblinear", C=C,
    max_iter=500, random_state=seed)``'s."""
    set_verbosity_wrap(0)  # liblinear prints its iterations unless told not to
    raw, n_iter = train_wrap(
        np.ascontiguousarray(Z, dtype=np.float64),
        np.asarray(target, dtype=np.float64),  # the classes False, True encoded 0, 1
        False,  # dense
        LIBLINEAR_L1_LOGISTIC,
        1e-4,  # tol
        1.0,  # bias: an intercept, scaled 1
        C,
        np.ones(2),  # class weights
        500,  # max_iter
        _liblinear_seed(seed),
        0.1,  # epsilon (unused by this solver)
        np.asarray(weight, dtype=np.float64),
    )
    return raw[0, :-1], int(np.max(n_iter))


@cache
def _liblinear_seed(seed) -> int:
    """The seed ``LogisticRegression(random_state=seed)`` hands liblinear."""
    return int(np.random.RandomState(seed).randint(np.iinfo("i").max))


class TreeSearch(GreedySearch):
    """Node refits and subtree regrowth."""

    def child_costs(self, t, idx):
        """Loss of each sample of ``idx`` if sent left / right at ``t`` (inf-like when the
        fixed subtree there would break a component or put it in an epsilon gap)."""
        groups = self.comp[idx]
        costs = []
        for child in (2 * t + 1, 2 * t + 2):
            if int(self.level[t]) == self.depth - 1:
                leaf, gap = np.full(idx.size, child), np.zeros(idx.size, dtype=bool)
            else:
                leaf, gap = self.route(idx, child)
            cost = self.loss(leaf, idx)
            costs.append(cost + self.big * components_broken(groups, leaf, gap))
        return costs[0], costs[1]

    def logistic_directions(self, level, rows, target, weight):
        """Directions of L1 logistic fits with per-feature penalties ``alpha / f_{d,j}``
        (columns rescaled by ``f``), one per regularization strength."""
        key = ("logistic", level, digest(rows, target, weight))
        if key in self.memo:
            return self.memo[key]
        columns = np.flatnonzero(self.allowed[level])
        penalty = self.penalty[level, columns]
        scale = np.where(penalty > 0, 1.0 / np.where(penalty > 0, penalty, 1.0), 1.0)
        scale = scale / scale.max()
        Z = self.X[rows][:, columns] * scale
        found = []
        for C in LOGISTIC_C:
            coef, n_iter = l1_logistic(Z, target, weight, C, self.seed)
            self.work += int(LOGISTIC_WORK * Z.size * n_iter)
            a = np.zeros(self.p)
            a[columns] = coef * scale
            if np.any(a != 0):
                found.append(a)
        self.memo[key] = found
        return found

    def directions(self, t, idx, L, R):
        """Oblique candidate directions at ``t``: current and L1-logistic ones, with their
        sparsification paths."""
        level = int(self.level[t])
        columns = np.flatnonzero(self.allowed[level])
        bases = []
        if np.any(self.coef[t] != 0):
            bases.append(self.coef[t].copy())
        care = L != R
        target = R[care] < L[care]
        if columns.size and care.sum() >= 2 and 0 < target.sum() < target.size:
            cap = 2.0 * float(self.w.max())
            weight = np.minimum(np.abs(L - R)[care], cap)
            bases += self.logistic_directions(level, idx[care], target, weight)
        spread = np.ptp(self.X[idx], axis=0) if idx.size else np.zeros(self.p)
        rows, seen = [], set()
        for base in bases:
            importance = np.abs(base) * spread
            keep = np.flatnonzero(base != 0)
            keep = keep[np.argsort(importance[keep], kind="stable")[::-1]]
            # row r keeps the keep.size - r most important coefficients, scaled to max |w| 1
            path = np.zeros((keep.size, self.p))
            kept = np.arange(keep.size)[None, :] < np.arange(keep.size, 0, -1)[:, None]
            path[:, keep] = np.where(kept, base[keep], 0.0)
            path /= np.abs(path).max(axis=1)[:, None]
            for direction in path:
                key = direction.tobytes()
                if key not in seen:
                    seen.add(key)
                    rows.append(direction)
        W = np.array(rows).reshape(len(rows), self.p)
        return W, (W != 0) @ self.penalty[level]

    def improve_node(self, t, idx):
        """Refit node ``t`` on the samples reaching it; True when the objective dropped."""
        level = int(self.level[t])
        if idx.size == 0:
            if np.any(self.coef[t] != 0):
                return self.commit(t, np.zeros(self.p), 0.0, False)
            return False
        L, R = self.child_costs(t, idx)
        key = ("settled", t, digest(idx, L, R, self.coef[t], self.intercept[t]))
        if key in self.memo:
            return False
        current = float(np.where(self.V[idx, t] > 0, R, L).sum()) + self.node_penalty(t)
        best = (float(L.sum()), np.zeros(self.p), 0.0, False)
        if R.sum() < L.sum():
            best = (float(R.sum()), np.zeros(self.p), 1.0, False)
        swappable = level < self.depth - 1
        W_uni, extra_uni = self.univariate(level)
        W_obl, extra_obl = self.directions(t, idx, L, R)
        for W, extra, univariate in ((W_uni, extra_uni, True), (W_obl, extra_obl, False)):
            found = self.best_cut(W, extra, idx, L, R, level, swappable, univariate)
            if found is not None and found[0] < best[0] - IMPROVEMENT:
                best = found
        if best[0] < current - IMPROVEMENT and self.commit(t, best[1], best[2], best[3]):
            return True
        self.memo[key] = True
        return False

    def commit(self, t, a, b, swap):
        """Apply a node change if it keeps the tree feasible and lowers the objective."""
        saved = (self.coef.copy(), self.intercept.copy(), self.V.copy())
        before = self.objective()
        if swap:
            self.swap_children(t)
        self.coef[t], self.intercept[t] = a, b
        self.V[:, t] = self.split_values(a, b)
        if self.feasible() and self.objective() < before - IMPROVEMENT:
            return True
        self.coef, self.intercept, self.V = saved
        return False

    def regrow(self, t, idx):
        """Replace the subtree at ``t`` by a fresh greedy one on the samples reaching it."""
        if idx.size == 0 or int(self.level[t]) == self.depth - 1:
            return False
        out = {}
        self.grow(t, idx, True, out)
        saved = (self.coef.copy(), self.intercept.copy(), self.V.copy())
        before = self.objective()
        below = self.depth - int(self.level[t])
        for start, size in subtree_ranges(t, below):
            for node in range(start, start + size):
                a, b = out.get(node, (np.zeros(self.p), 0.0))
                self.coef[node], self.intercept[node] = a, b
                self.V[:, node] = self.split_values(a, b)
        if self.feasible() and self.objective() < before - IMPROVEMENT:
            return True
        self.coef, self.intercept, self.V = saved
        return False


def local_search(search):
    """Tree alternating optimization until no node improves; (passes, improvements).
    The leaf classes are relabelled after every kept move (more than two classes)."""
    passes = improvements = 0
    while not search.exhausted():
        passes += 1
        improved = False
        for level in range(search.depth - 1, -1, -1):
            nodes = np.arange(2**level - 1, 2 ** (level + 1) - 1)
            for t in search.rng.permutation(nodes):
                if search.exhausted():
                    break
                t = int(t)
                reach = search.reaching()
                if search.improve_node(t, reach[t]):  # else the tree is as it was
                    improved, improvements = True, improvements + 1
                    search.relabel()
                    reach = search.reaching()
                if search.regrow(t, reach[t]):
                    improved, improvements = True, improvements + 1
                    search.relabel()
        search.ensure_split()
        if not improved:
            break
    return passes, improvements
