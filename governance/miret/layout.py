"""Numbering of the complete binary tree shared by the surrogate, the MILP and the
heuristics: breadth-first node ids (root 0, children ``2t+1`` and ``2t+2``), their
levels, the paper's fixed leaf classes, and the one summation order of hyperplane values.
"""

from __future__ import annotations

import numpy as np


def node_level(node) -> np.ndarray:
    """Level of breadth-first node ids (root 0): ``floor(log2(t + 1))``."""
    node = np.asarray(node, dtype=np.int64)
    return np.floor(np.log2(node + 1) + 1e-12).astype(np.int64)


def leaf_sign(positions) -> np.ndarray:
    """Fixed class sign of leaf positions: ``-1`` for odd leaves, ``+1`` for even ones."""
    return np.where(np.asarray(positions, dtype=np.int64) % 2 == 1, -1, 1)


def hyperplane_values(X, coef, intercept) -> np.ndarray:
    """Row-wise ``coef[i] . X[i] + intercept[i]`` with one fixed summation order.

    Parameters
    ----------
    X : ndarray of shape (n, p)
    coef : ndarray of shape (n, p) or (p,)
    intercept : ndarray of shape (n,) or float
    """
    return np.multiply(X, coef).sum(axis=1) + intercept
