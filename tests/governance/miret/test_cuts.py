"""Cut scanning shortcuts: each gives exactly what the plain computation gives."""

from types import SimpleNamespace

import numpy as np

from miret_governance.governance.miret.cuts import CutSearch, cheapest, splits_components
from miret_governance.governance.miret.search_state import SearchState


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
