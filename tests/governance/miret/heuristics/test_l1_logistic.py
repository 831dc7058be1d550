"""The heuristic's L1 logistic fits call liblinear's private binding directly: it must
give what ``LogisticRegression`` gives, so that an upgrade of scikit-learn that changes
the binding fails here and not silently in the trees."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from miret_governance.governance.miret.heuristics.local_search import LOGISTIC_C, l1_logistic


@pytest.mark.parametrize("C", LOGISTIC_C)
def test_l1_logistic_matches_logistic_regression(C):
    rng = np.random.default_rng(7)
    Z = rng.random((150, 6))
    target = Z[:, 0] + 0.5 * Z[:, 3] + 0.2 * rng.standard_normal(150) > 0.8
    weight = rng.uniform(0.5, 3.0, 150)
    coef, n_iter = l1_logistic(Z, target, weight, C, seed=3)
    model = LogisticRegression(
        l1_ratio=1.0, solver="liblinear", C=C, max_iter=500, random_state=3
    ).fit(Z, target, sample_weight=weight)
    np.testing.assert_array_equal(coef, model.coef_[0])
    assert n_iter == int(np.max(model.n_iter_))


def test_l1_logistic_is_sparse_under_strong_penalty():
    rng = np.random.default_rng(0)
    Z = rng.random((200, 5))
    target = Z[:, 2] > 0.5
    coef, _ = l1_logistic(Z, target, np.ones(200), 0.05, seed=0)
    assert coef[2] > 0
    assert np.count_nonzero(coef) < 5


def test_l1_logistic_prints_nothing_even_after_a_verbose_liblinear_fit(capfd):
    from sklearn.svm._liblinear import set_verbosity_wrap

    set_verbosity_wrap(1)  # what LinearSVC(verbose=1) leaves behind
    rng = np.random.default_rng(1)
    Z = rng.random((60, 3))
    l1_logistic(Z, Z[:, 0] > 0.5, np.ones(60), 5.0, seed=0)
    assert capfd.readouterr().out == ""
