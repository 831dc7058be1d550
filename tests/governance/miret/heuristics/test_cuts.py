"""Cut scanning shortcuts: each gives exactly what the plain computation gives."""

from types import SimpleNamespace

import numpy as np

from miret_governance.governance.miret.heuristics.cuts import CutSearch
from miret_governance.governance.miret.heuristics.kernels import cheapest, splits_components
from miret_governance.governance.miret.heuristics.search_state import SearchState


def test_cheapest_is_the_finite_head_of_a_stable_argsort():
    values = np.array([3.0, 1.0, np.inf, 1.0, 2.0])
    assert cheapest(values, 3).tolist() == [1, 3, 4]
    assert cheapest(values, 12).tolist() == [1, 3, 4, 0]
    assert cheapest(np.array([1.0, 1.0, 1.0, 0.0]), 2).tolist() == [3, 0]
    assert cheapest(np.array([np.inf, np.inf, np.inf]), 2).tolist() == []


def test_column_order_is_the_stable_argsort_of_the_rows():
    search = CutSearch.__new__(CutSearch)
    search.X = np.array([[0.5, 0.0], [0.2, 1.0], [0.5, 0.0], [0.2, 1.0], [0.9, 0.5]])
    search.n, search.sorted_rows = 5, None
    order = search.column_order(np.array([0, 1, 2, 3]), np.array([0, 1]))
    assert order.tolist() == [[1, 0], [3, 2], [0, 1], [2, 3]]
    assert search.column_order(np.array([1, 0, 2]), np.array([0])) is None  # not increasing
    assert search.column_order(np.array([4]), np.array([0])) is None  # too few rows


def test_splits_components_marks_cuts_inside_a_component():
    # projections 0.1, 0.3, 0.2: sorted rows 0, 2, 1; rows 0 and 2 form one component
    order = np.array([[0], [2], [1]])
    assert splits_components(order, np.array([0, 1, 0]))[:, 0].tolist() == [
        False,
        True,
        False,
        False,
    ]
    assert not splits_components(order, np.array([0, 1, 2])).any()


def test_reaching_lists_the_rows_of_every_branch_node_in_order():
    # depth 2: the root sends rows 0 and 2 right (node 2), row 1 left (node 1)
    state = SimpleNamespace(
        n=3, depth=2, V=np.array([[1.0, -1.0, 0.0], [-1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    )
    assert [rows.tolist() for rows in SearchState.reaching(state)] == [[0, 1, 2], [1], [0, 2]]


def _layout_search(X, comp, allowed):
    search = CutSearch.__new__(CutSearch)
    search.X, search.comp, search.allowed = X, comp, allowed
    search.n, search.sorted_rows, search.min_gap = X.shape[0], None, 0.01
    search.memo, search.layout_cells = {}, 0
    return search


def test_a_univariate_layout_is_the_plain_layout_memoized_within_the_cell_cap(monkeypatch):
    X = np.array([[0.5, 0.1, 0.0], [0.2, 0.1, 1.0], [0.505, 0.4, 0.0], [0.9, 0.3, 1.0]])
    # rows 1 and 3 form one component; feature 1 is not allowed at level 0
    search = _layout_search(X, np.array([0, 1, 2, 1]), np.array([[True, False, True]]))
    idx = np.array([0, 1, 2, 3])
    order, sorted_S, valid = search.univariate_layout(idx, 0)
    assert order.T.tolist() == [[1, 0, 2, 3], [0, 2, 1, 3]]
    assert sorted_S.T.tolist() == [[0.2, 0.5, 0.505, 0.9], [0.0, 0.0, 1.0, 1.0]]
    # feature 0: 0.5 | 0.505 is inside the gap, and cuts 1 and 2 separate rows 1 and 3
    # feature 2: only the cut between the zeros and the ones (rows 1 and 3 both right)
    assert valid.T.tolist() == [[False] * 5, [False, False, True, False, False]]
    assert search.univariate_layout(idx, 0)[0] is order  # memoized
    assert search.layout_cells == valid.size

    monkeypatch.setattr(
        "miret_governance.governance.miret.heuristics.cuts.LAYOUT_CELLS", valid.size - 1
    )
    capped = _layout_search(X, np.array([0, 1, 2, 1]), np.array([[True, False, True]]))
    again = capped.univariate_layout(idx, 0)
    assert capped.memo == {} and capped.layout_cells == 0
    assert [a.tolist() for a in again] == [order.tolist(), sorted_S.tolist(), valid.tolist()]
