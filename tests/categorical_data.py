"""Credit-like rows with categorical columns, shared by the encoding tests, and two
explained pipelines on them (tests of raw rows: categories, missing values, Spark)."""

import shutil

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

CATEGORICAL, NUMERIC = ["purpose", "housing"], ["income", "age", "duration"]


def credit_frame(n=600, seed=0):
    """Credit-like rows: 2 categorical and 3 numeric columns, a label from both kinds."""
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
    label = ((frame.purpose == "car") & (frame.income > 40000)) | (
        (frame.housing == "rent") & (frame.age < 30)
    )
    flip = rng.random(n) < 0.1
    return frame, (label ^ flip).astype(int).to_numpy()


def credit_pipelines(trees=(10, 15)):
    """Two pipelines for :func:`credit_frame`: version 1 one-hot encodes purpose and
    housing; version 2 ordinal-encodes purpose, one-hot housing (``trees`` trees each)."""
    one_hot = [("cat", OneHotEncoder(handle_unknown="ignore"), CATEGORICAL)]
    mixed = [
        ("ord", OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1), ["purpose"]),
        ("cat", OneHotEncoder(handle_unknown="ignore"), ["housing"]),
    ]
    return [
        Pipeline(
            [
                ("prep", ColumnTransformer([*encoders, ("num", "passthrough", NUMERIC)])),
                ("model", RandomForestClassifier(n_estimators=n, max_depth=3, random_state=seed)),
            ]
        )
        for encoders, n, seed in ((one_hot, trees[0], 0), (mixed, trees[1], 1))
    ]


def explained_credit_cat(root, migrated_store, n=600, trees=(10, 15), depth=2) -> dict:
    """A store in ``root`` with both :func:`credit_pipelines` registered (skops) as
    ``credit-cat`` versions 1 and 2 and explained on ``data.csv``: ``n`` rows, income
    missing on every tenth; ``rows.csv``: its first 40 rows (4 without income)."""
    from mlflow import MlflowClient  # not for the domain tests, which never load MLflow
    from mlflow_store import copy_store, log_skops

    from miret_governance.flavors.explain.explain import explain_model_version

    uri = f"sqlite:///{root / 'mlflow.db'}"
    copy_store(migrated_store, root / "mlflow.db")
    frame, label = credit_frame(n)
    frame.loc[frame.index % 10 == 0, "income"] = np.nan
    fitted, results = credit_pipelines(trees), {}
    with pytest.MonkeyPatch.context() as mp:
        for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
            mp.setenv(name, uri)
        mp.chdir(root)
        experiment = MlflowClient().create_experiment("rows", str(root / "mlruns"))
        mp.setenv("MLFLOW_EXPERIMENT_ID", experiment)
        frame.assign(label=label).to_csv("data.csv", index=False)
        frame.head(40).assign(label=label[:40]).to_csv("rows.csv", index=False)
        for version, pipeline in enumerate(fitted, start=1):
            pipeline.fit(frame, label)
            log_skops(pipeline, experiment, "credit-cat")
            results[version] = explain_model_version(
                f"models:/credit-cat/{version}",
                "data.csv",
                target="label",
                depth=depth,
                time_limit=60,
                min_test_rows=1,
                solver="highs",
            )
    return {"uri": uri, "root": root, "pipelines": fitted, "results": results, "frame": frame}


def use_store_copy(explained: dict, tmp_path, monkeypatch) -> None:
    """MLflow pointed at a copy of ``explained``'s store (aliases and gate runs stay in
    one test), from its folder."""
    shutil.copy(explained["root"] / "mlflow.db", tmp_path / "mlflow.db")
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
        monkeypatch.setenv(name, f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(explained["root"])
