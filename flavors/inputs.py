"""What an explain run reads: the registered ensemble (safely) and the data files.

Loading never executes code from the artifact's pickles: scikit-learn models are read
with skops and a fixed list of trusted types, XGBoost models with their own flavor.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import Model

from flavors.errors import ExplainError

SKOPS_TRUSTED_TYPES = ("sklearn.tree._tree.Tree",)
"""Types trusted when reading a scikit-learn model saved with skops, beyond skops' own
defaults. The list is ours, not the model's: a model cannot widen it."""


# ---------------------------------------------------------------------- the ensemble
def _load_sklearn(local: str, conf: dict):
    path = os.path.join(local, conf["pickled_model"])
    if conf.get("serialization_format") == "skops":
        import skops.io

        untrusted = set(skops.io.get_untrusted_types(file=path)) - set(SKOPS_TRUSTED_TYPES)
        if untrusted:
            raise ExplainError(
                f"the scikit-learn model contains types that are not trusted for loading: "
                f"{', '.join(sorted(untrusted))}; only tree ensembles are supported"
            )
        return skops.io.load(path, trusted=list(SKOPS_TRUSTED_TYPES))
    try:
        return mlflow.sklearn.load_model(local)
    except MlflowException as exc:
        raise ExplainError(
            f"the scikit-learn model is stored as {conf.get('serialization_format')!r}, "
            f"which executes code when loaded: {exc.message} Re-log it with "
            "serialization_format='skops' (the default) to explain it safely."
        ) from exc


def load_ensemble(model_uri: str):
    """Load a registered model with its own MLflow flavor and read it as an Ensemble.

    Returns
    -------
    (Ensemble, object)
        The uniform view and the loaded model.
    """
    from governance.ensemble import UnsupportedModelError, read_ensemble

    try:
        local = mlflow.artifacts.download_artifacts(artifact_uri=model_uri)
    except MlflowException as exc:
        raise ExplainError(f"cannot download {model_uri}: {exc.message}") from exc
    flavors = Model.load(local).flavors
    if "xgboost" in flavors:
        model = mlflow.xgboost.load_model(local)
    elif "sklearn" in flavors:
        model = _load_sklearn(local, flavors["sklearn"])
    else:
        raise ExplainError(
            f"{model_uri} has flavors {sorted(flavors)}; explain supports models logged "
            "with mlflow.sklearn or mlflow.xgboost"
        )
    try:
        return read_ensemble(model), model
    except UnsupportedModelError as exc:
        raise ExplainError(f"{model_uri}: {exc}") from exc


def load_explainable_ensemble(model_uri: str):
    """:func:`load_ensemble`, refusing preprocessing the surrogate cannot store as JSON."""
    ensemble, _ = load_ensemble(model_uri)
    if ensemble.preprocessor is not None and (
        ensemble.scaler is None or len(ensemble.preprocessor.steps) != 1
    ):
        raise ExplainError(
            f"{model_uri} preprocesses its input with {ensemble.preprocessor}; only a "
            "single MinMaxScaler in front of the ensemble can be stored without pickle"
        )
    return ensemble


# ---------------------------------------------------------------------- the data
def read_table(path) -> pd.DataFrame:
    """Read a CSV or Parquet file (by extension)."""
    path = Path(path)
    if not path.is_file():
        raise ExplainError(f"data file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return pd.read_csv(path)
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path)
    raise ExplainError(f"data file {path} must be .csv or .parquet, not {suffix or 'no suffix'}")


def _missing_label(source, frame: pd.DataFrame, target: str) -> ExplainError:
    return ExplainError(
        f"{source} has no label column {target!r} (columns: "
        f"{', '.join(map(str, frame.columns[:8]))}...); pass --target with one of them"
    )


def read_data(path, target: str | None) -> pd.DataFrame:
    """:func:`read_table`, with the label column present and at least two rows."""
    frame = read_table(path)
    if target and target not in frame.columns:
        raise _missing_label(path, frame, target)
    if len(frame) < 2:
        raise ExplainError(f"{path} has {len(frame)} rows; need at least 2")
    return frame


def dataset(frame: pd.DataFrame, source, target: str | None):
    """The MLflow dataset of a data file (named after the file, with its digest)."""
    with warnings.catch_warnings():  # source-type ambiguity and integer-column hints
        warnings.simplefilter("ignore", UserWarning)
        return mlflow.data.from_pandas(
            frame,
            source=str(Path(source).resolve()),
            name=Path(source).stem,
            targets=target or None,
        )


def split_features(frame: pd.DataFrame, ensemble, target, source) -> tuple:
    """Feature frame in the ensemble's column order, and the labels (or None)."""
    y = None
    if target:
        if target not in frame.columns:
            raise _missing_label(source, frame, target)
        by_text = {str(c): c for c in ensemble.classes}
        labels = frame[target]
        bad = sorted({str(v) for v in pd.unique(labels)} - set(by_text))
        if bad:
            raise ExplainError(
                f"label column {target!r} of {source} has values {bad[:5]} that are not the "
                f"ensemble's classes {list(ensemble.classes)}"
            )
        y = np.array([by_text[str(v)] for v in labels])
        frame = frame.drop(columns=[target])
    names = list(ensemble.feature_names)
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise ExplainError(
            f"{source} lacks the ensemble's feature columns {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}; it must have the columns the model was "
            "trained on"
        )
    return frame[names], y


@dataclass(frozen=True)
class Holdout:
    """Training and test features (raw units, the ensemble's column order) and labels.

    ``y_train``/``y_test`` are None when no label column was given.
    """

    train: pd.DataFrame
    test: pd.DataFrame
    y_train: np.ndarray | None
    y_test: np.ndarray | None


def holdout(request, ensemble, frame: pd.DataFrame, test_frame: pd.DataFrame | None) -> Holdout:
    """The test file, or a stratified holdout of ``request.test_size`` seeded by
    ``request.seed`` (stratified by label, or by the ensemble's prediction)."""
    from sklearn.model_selection import train_test_split

    features, y = split_features(frame, ensemble, request.target, request.data)
    if test_frame is not None:
        test, y_test = split_features(test_frame, ensemble, request.target, request.test_data)
        return Holdout(features, test, y, y_test)
    strata = y if y is not None else ensemble.predict(ensemble.transform(features))
    _, counts = np.unique(np.asarray(strata).astype(str), return_counts=True)
    stratify = strata if counts.min() >= 2 and len(counts) > 1 else None
    train, test = train_test_split(
        np.arange(len(features)),
        test_size=request.test_size,
        random_state=request.seed,
        stratify=stratify,
    )
    train, test = np.sort(train), np.sort(test)
    return Holdout(
        features.iloc[train],
        features.iloc[test],
        None if y is None else y[train],
        None if y is None else y[test],
    )
