"""The ``miret`` evaluator on rows with missing values, in a real SQLite store: a
HistGradientBoosting model that routes NaN itself is evaluated on data where a feature
is missing on every fifth row, and the evaluator logs the same surrogate (its rule for
missing values included) and the same fidelity on every row as a direct fit."""

import mlflow
import numpy as np
import pandas as pd
from mlflow_store import log_skops
from sklearn.ensemble import HistGradientBoostingClassifier

from miret_governance.governance.measures.metrics import fidelity
from miret_governance.governance.miret import MiretSurrogate

pytest_plugins = ["mlflow_store"]
FIT = {"depth": 1, "time_limit": 30.0, "work_limit": 1.0, "stall_work": 0.5}
"""A small budget in units of work, so both fits stop on work, never on the clock."""


def test_rows_with_missing_values_are_evaluated_as_a_direct_fit(store):
    rng = np.random.default_rng(7)
    data = pd.DataFrame({"income": rng.uniform(0, 1, 200), "age": rng.uniform(0, 1, 200)})
    data["label"] = (data["income"] > 0.5).astype(int)
    missing = np.arange(200) % 5 == 0
    data.loc[missing, "income"] = np.nan
    data.loc[missing, "label"] = 1  # a missing income means a yes
    X = data[["income", "age"]]
    model = HistGradientBoostingClassifier(max_iter=10, max_depth=2, random_state=0)
    model.fit(X, data["label"])
    info = log_skops(model, store)
    with mlflow.start_run(experiment_id=store):
        result = mlflow.models.evaluate(
            info.model_uri,
            data,
            targets="label",
            model_type="classifier",
            evaluators=["miret"],
            evaluator_config={"miret": {"enabled": True, **FIT}},
        )
    direct = MiretSurrogate(model, **FIT).fit(X)
    assert direct.tree_.missing_left is not None
    assert result.artifacts["miret_fit"].content["tree_digest"] == direct.tree_digest()
    assert result.metrics["miret_fidelity"] == fidelity(model.predict(X), direct.predict(X))
    assert result.metrics["miret_n_rows"] == 200.0
    on_missing = direct.predict(X[missing])  # the 40 rows without income, routed by the rule
    assert on_missing.tolist() == model.predict(X[missing]).tolist() == [1] * 40
    assert "missing values: " in result.artifacts["miret_rules"].content
