"""Numbering of the complete binary tree shared by the surrogate, the MILP and the
heuristics: breadth-first node ids (root 0, children ``2t+1`` and ``2t+2``), their
levels, the leaves left and right of each node, the paper's fixed leaf classes of
two-class trees, the weighted-majority relabelling of leaf classes, and the one
summation order of hyperplane values.
"""

from __future__ import annotations

import numpy as np


def node_level(node) -> np.ndarray:
    """Level of breadth-first node ids (root 0): ``floor(log2(t + 1))``."""
    node = np.asarray(node, dtype=np.int64)
    return np.floor(np.log2(node + 1) + 1e-12).astype(np.int64)


def subtree_leaves(depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Boolean matrices ``S_L``, ``S_R`` of shape (2^D - 1, 2^D): leaves left/right of t."""
    n_branch, n_leaves = 2**depth - 1, 2**depth
    t = np.arange(n_branch)
    level = node_level(t)
    width = 2 ** (depth - level)  # leaves under t
    first = (t - (2**level - 1)) * width
    leaf = np.arange(n_leaves)[None, :]
    left = (leaf >= first[:, None]) & (leaf < (first + width // 2)[:, None])
    right = (leaf >= (first + width // 2)[:, None]) & (leaf < (first + width)[:, None])
    return left, right


def leaves_below(t: int, n_branch: int) -> range:
    """Leaf indices (``0 .. 2^D - 1``, left to right) under node ``t`` of a complete tree
    with ``n_branch`` branch nodes (a leaf position ``t`` gives its own index)."""
    first = last = t
    while first < n_branch:
        first, last = 2 * first + 1, 2 * last + 2
    return range(first - n_branch, last - n_branch + 1)


def alternating_classes(depth: int) -> np.ndarray:
    """The paper's fixed leaf classes of a two-class tree, leaves left to right: class
    index 0 at odd positions (``2^D - 1``, ``2^D + 1``, ...), 1 at even ones."""
    return np.arange(2**depth, dtype=np.int64) % 2


def majority_classes(leaf, y, weight, leaf_class) -> np.ndarray:
    """Leaf classes relabelled to the weighted majority of the labels in each leaf.

    The class with the largest weight ``sum p^i`` among a leaf's samples; the current
    class on a tie with it (and for an empty leaf), else the lowest index. A leaf's
    misfit is its weight minus the weight of its class, so the result's misfit is never
    above that of ``leaf_class``.

    Parameters
    ----------
    leaf : ndarray of shape (n,)
        Leaf index ``0 .. 2^D - 1`` (left to right) of every sample.
    y : ndarray of shape (n,)
        Class index of every sample.
    weight : ndarray of shape (n,)
    leaf_class : ndarray of shape (2^D,)
        Current class index of every leaf; its length gives the number of leaves and
        ``max(y, leaf_class) + 1`` at least the number of classes.
    """
    leaf_class = np.asarray(leaf_class, dtype=np.int64)
    n_classes = int(max(np.max(y, initial=0), leaf_class.max()) + 1)
    mass = np.zeros((leaf_class.size, n_classes))
    np.add.at(mass, (leaf, y), weight)
    best = mass.max(axis=1)
    current = mass[np.arange(leaf_class.size), leaf_class]
    return np.where(current >= best, leaf_class, np.argmax(mass, axis=1))


def hyperplane_values(X, coef, intercept) -> np.ndarray:
    """Row-wise ``coef[i] . X[i] + intercept[i]`` with one fixed summation order.

    Parameters
    ----------
    X : ndarray of shape (n, p)
    coef : ndarray of shape (n, p) or (p,)
    intercept : ndarray of shape (n,) or float
    """
    return np.multiply(X, coef).sum(axis=1) + intercept
