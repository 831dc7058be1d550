"""LightGBM with missing values, end to end: registered with ``mlflow.lightgbm``,
explained, gated and promoted.

::

    .venv/bin/python examples/families/lightgbm_missing.py [--tracking-uri URI] [--folder DIR]

The Wisconsin diagnostic breast-cancer data (``examples/data/Wisconsin.csv``, 569 rows,
30 measured features) with 10% of the values of three columns (``mean_texture``,
``worst_area``, ``mean_smoothness``) replaced by NaN (rows drawn with a seed), as in
records where not every measurement was taken. A LightGBM booster of 40 trees of depth
3 learns its own missing-value direction at each split.

Registered the way ``mlflow.lightgbm`` stores a booster: LightGBM's text model
(``model.lgb``), which the product reads in Python without LightGBM. An
``LGBMClassifier`` itself would be pickled by ``mlflow.lightgbm`` and is refused, so the
example logs ``model.booster_``, with an input example whose signature names the
columns (LightGBM would write a space in a column name as ``_``; the signature's names
are the ones the rules use).

This data has no categorical column. LightGBM's native categorical splits are read too
when the booster was trained on a DataFrame with ``category`` columns (their names are
in the model file); see ``tests/flavors/explain/test_native_categorical_flavor.py``.

``govern explain`` fits a depth-2 surrogate on the complete rows and routes a missing
value by its learned rule (the rules end with ``missing values: ...``); fidelity counts
every row, and ``test_fidelity_missing_rows`` those with a missing value. ``govern gate``
and ``govern promote --alias champion`` then run under ``examples/policies/lenient.toml``
(test fidelity >= 0.90, at most 5 features, proximity agreement >= 0.90, validation
passed), trusting a local example key pair."""

from __future__ import annotations

from pathlib import Path

import lightgbm
import mlflow
import mlflow.lightgbm
import numpy as np
import pandas as pd
from family_steps import Governed, explain_gate_promote, run_from_command_line, start

DATA = Path(__file__).resolve().parents[1] / "data" / "Wisconsin.csv"
MISSING = ("mean_texture", "worst_area", "mean_smoothness")
"""The columns that get missing values."""
MISSING_SHARE = 0.1
MODEL_NAME = "wisconsin-lightgbm"


def with_missing_values(seed: int = 0) -> pd.DataFrame:
    """``Wisconsin.csv`` with ``MISSING_SHARE`` of each ``MISSING`` column set to NaN
    (rows drawn with ``seed``) and the label column ``y`` renamed ``label``."""
    frame = pd.read_csv(DATA).rename(columns={"y": "label"})
    rng = np.random.default_rng(seed)
    for column in MISSING:
        rows = rng.choice(len(frame), round(MISSING_SHARE * len(frame)), replace=False)
        frame.loc[rows, column] = np.nan
    return frame


def register_booster(frame: pd.DataFrame, seed: int = 0) -> str:
    """Fit 40 depth-3 trees on ``frame`` and log the booster with ``mlflow.lightgbm``;
    returns its registered version's URI."""
    X, y = frame.drop(columns="label"), frame["label"]
    model = lightgbm.LGBMClassifier(
        n_estimators=40, max_depth=3, num_leaves=8, random_state=seed, n_jobs=1, verbose=-1
    )
    model.fit(X, y)
    with mlflow.start_run(run_name="train-wisconsin-lightgbm"):
        info = mlflow.lightgbm.log_model(
            model.booster_,
            name="model",
            registered_model_name=MODEL_NAME,
            input_example=X.head(3),  # its signature names the columns
            pip_requirements=["lightgbm"],
        )
    return f"models:/{MODEL_NAME}/{info.registered_model_version}"


def main(tracking_uri: str, folder: Path, time_limit: float = 30.0) -> Governed:
    """Register, explain, gate and promote the LightGBM booster in ``tracking_uri``;
    the data file, keys and policy are written to ``folder``."""
    folder = Path(folder)
    start(tracking_uri, folder, "families-lightgbm")
    frame = with_missing_values()
    data = folder / "wisconsin_missing.csv"
    frame.to_csv(data, index=False)
    model_uri = register_booster(frame)
    options = (
        "--depth",
        "2",
        "--time-limit",
        f"{time_limit:g}",
        "--class-names",
        "malignant,benign",
    )
    return explain_gate_promote(model_uri, data, folder, "lenient", *options)


if __name__ == "__main__":
    run_from_command_line(main, __doc__.splitlines()[0], "family-lightgbm-")
