"""HistGradientBoosting with categorical columns and missing values, end to end:
registered with ``mlflow.sklearn`` in skops format, explained, gated and promoted.

::

    .venv/bin/python examples/families/hist_gradient_boosting_categorical.py \\
        [--tracking-uri URI] [--folder DIR]

500 credit-like applications (seeded): two categorical columns (``purpose``,
``housing``) and three numeric ones (``income``, ``age``, ``duration``), of which
``income`` and ``duration`` miss 10% of their values. The label depends on both kinds
(a business or car loan with an income above 40,000, or a renter under 35), with 10% of labels
flipped.

The model is ``Pipeline(ColumnTransformer(OneHotEncoder on the categorical columns,
passthrough for the rest), HistGradientBoostingClassifier)``: 40 trees of depth 3,
which route a missing value the way each split learned. It is logged with
``mlflow.sklearn`` in skops format, trusting the product's fixed list
(``flavors.inputs.SKOPS_TRUSTED_TYPES``: the fitted trees' types; the encoders are
skops' own defaults), so ``govern`` loads it without executing code.

``govern explain`` fits a depth-2 surrogate in the encoded space, as the booster sees
the data, but its rules and figures name the original columns and categories
(``[purpose = car]`` in an oblique split, ``purpose in {car}`` in a split on one
column), VITE frequencies are summed per original column, and validation checks the
categories against training's. A missing value is routed by the surrogate's learned
rule and fidelity counts those rows too. ``govern gate`` and ``govern promote --alias
champion`` then run under ``examples/policies/lenient.toml``, trusting a local example
key pair.
"""

from __future__ import annotations

from pathlib import Path

import mlflow
import mlflow.sklearn
import numpy as np
import pandas as pd
from family_steps import Governed, explain_gate_promote, run_from_command_line, start
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder

from miret_governance.flavors.store.inputs import SKOPS_TRUSTED_TYPES

CATEGORICAL = ["purpose", "housing"]
NUMERIC = ["income", "age", "duration"]
MISSING = ("income", "duration")
"""The numeric columns that miss ``MISSING_SHARE`` of their values."""
MISSING_SHARE = 0.1
MODEL_NAME = "credit-hgb"


def credit_applications(n: int = 500, seed: int = 0) -> pd.DataFrame:
    """Credit-like rows: the ``CATEGORICAL`` and ``NUMERIC`` columns, NaN in
    ``MISSING_SHARE`` of each ``MISSING`` column, and the 0/1 column ``label``."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "purpose": rng.choice(["business", "car", "education", "furniture"], n),
            "housing": rng.choice(["free", "own", "rent"], n),
            "income": rng.normal(42000, 9000, n).round(),
            "age": rng.integers(18, 70, n).astype(float),
            "duration": rng.integers(6, 60, n).astype(float),
        }
    )
    label = (frame.purpose.isin(["business", "car"]) & (frame.income > 40000)) | (
        (frame.housing == "rent") & (frame.age < 35)
    )
    frame["label"] = (label ^ (rng.random(n) < 0.1)).astype(int)
    for column in MISSING:
        frame.loc[rng.choice(n, round(MISSING_SHARE * n), replace=False), column] = np.nan
    return frame


def register_pipeline(frame: pd.DataFrame, seed: int = 0) -> str:
    """Fit the encoder + HistGradientBoosting pipeline on ``frame`` and log it with
    ``mlflow.sklearn`` (skops); returns its registered version's URI."""
    prep = ColumnTransformer(
        [
            ("cat", OneHotEncoder(handle_unknown="ignore"), CATEGORICAL),
            ("num", "passthrough", NUMERIC),
        ]
    )
    booster = HistGradientBoostingClassifier(
        max_iter=40, max_depth=3, early_stopping=False, random_state=seed
    )
    pipeline = Pipeline([("prep", prep), ("model", booster)])
    pipeline.fit(frame[CATEGORICAL + NUMERIC], frame["label"])
    with mlflow.start_run(run_name="train-credit-hgb"):
        info = mlflow.sklearn.log_model(
            pipeline,
            name="model",
            registered_model_name=MODEL_NAME,
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_SKOPS,
            skops_trusted_types=list(SKOPS_TRUSTED_TYPES),
            pip_requirements=["scikit-learn"],
        )
    return f"models:/{MODEL_NAME}/{info.registered_model_version}"


def main(tracking_uri: str, folder: Path, time_limit: float = 30.0) -> Governed:
    """Register, explain, gate and promote the pipeline in ``tracking_uri``; the data
    file, keys and policy are written to ``folder``."""
    folder = Path(folder)
    start(tracking_uri, folder, "families-hist-gradient-boosting")
    frame = credit_applications()
    data = folder / "credit_applications.csv"
    frame.to_csv(data, index=False)
    model_uri = register_pipeline(frame)
    options = ("--depth", "2", "--time-limit", f"{time_limit:g}", "--class-names", "repaid,default")
    return explain_gate_promote(model_uri, data, folder, "lenient", *options)


if __name__ == "__main__":
    run_from_command_line(main, __doc__.splitlines()[0], "family-hgb-")
