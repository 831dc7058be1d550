"""Greedy top-down growth of univariate subtrees (exact split at the last level)."""

from __future__ import annotations

import numpy as np

from miret_governance.governance.miret.heuristics.cuts import CutSearch
from miret_governance.governance.miret.heuristics.search_state import IMPROVEMENT, digest

LOOKAHEAD = 8  # Gini-shortlisted splits evaluated with a greedy completion


class GreedySearch(CutSearch):
    """Greedy subtrees; look-ahead completions stop once ``lookahead_work`` is spent."""

    def grow(self, t, idx, lookahead, out):
        """Greedy subtree at ``t`` for samples ``idx``; writes ``out[node] = (a, b)``.

        Memoized by node, rows and leaf classes. Without look-ahead the subtree does not
        depend on the work spent so far, and a memoized one counts again the work it
        took, so the budget ends the search where it would without the memo."""
        if idx.size == 0:
            return 0.0
        if lookahead and self.work < self.lookahead_work:
            key = ("greedy", t, digest(idx, self.leaf_class))
            if key not in self.memo:
                sub = {}
                self.memo[key] = (self._grow(t, idx, True, sub), sub)
            cost, sub = self.memo[key]
            out.update(sub)
            return cost
        key = ("plain", t, digest(idx, self.leaf_class))
        if key in self.memo:
            cost, sub, work = self.memo[key]
            self.work += work
        else:
            sub, before = {}, self.work
            cost = self._grow(t, idx, False, sub)
            self.memo[key] = (cost, sub, self.work - before)
        out.update(sub)
        return cost

    def _grow(self, t, idx, lookahead, out):
        level = int(self.level[t])
        y, w = self.y[idx], self.w[idx]
        if level == self.depth - 1:  # the two leaves' classes are fixed
            left_class, right_class = self.leaf_class[
                2 * t + 1 - self.n_branch : 2 * t + 3 - self.n_branch
            ]
            L, R = w * (y != left_class), w * (y != right_class)
            best = (float(L.sum()), np.zeros(self.p), 0.0)
            if R.sum() < L.sum():
                best = (float(R.sum()), np.zeros(self.p), 1.0)
            W, extra = self.univariate(level)
            found = self.best_cut(W, extra, idx, L, R, level, False, univariate=True)
            if found is not None and found[0] < best[0] - IMPROVEMENT:
                best = found[:3]
            out[t] = (best[1], best[2])
            return best[0]
        candidates = self.gini_shortlist(idx, level, LOOKAHEAD if lookahead else 1)
        candidates.insert(min(1, len(candidates)), (np.zeros(self.p), 0.0, 0.0))
        best = None
        for k, (a, b, penalty) in enumerate(candidates):
            if k >= 2 and self.work >= self.lookahead_work:
                break
            left = self.split_values(a, b, idx) <= 0
            sub = {}
            cost = penalty + self.grow(2 * t + 1, idx[left], False, sub)
            cost += self.grow(2 * t + 2, idx[~left], False, sub)
            if best is None or cost < best[0] - IMPROVEMENT:
                best = (cost, a, b, left, sub)
        cost, a, b, left, sub = best
        if lookahead:
            deeper = {}
            deep_cost = self.node_penalty(t, a) + self.grow(2 * t + 1, idx[left], True, deeper)
            deep_cost += self.grow(2 * t + 2, idx[~left], True, deeper)
            if deep_cost < cost - IMPROVEMENT:
                cost, sub = deep_cost, deeper
        out.update(sub)
        out[t] = (a, b)
        return cost
