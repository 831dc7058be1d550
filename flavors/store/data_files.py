"""What an explain run reads of the data files: tables, the label column, MLflow datasets
and their content digests, the rows as the ensemble takes them, and the stratified
holdout. (The registered ensemble: :mod:`flavors.inputs`.)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd

from miret_governance.flavors.errors import ExplainError
from miret_governance.governance.data import tables
from miret_governance.governance.data.spark.frames import on_spark, source_name


def read_table(path) -> pd.DataFrame:
    """:func:`governance.tables.read_table` (size cap, UTF-8, delimiter, duplicate
    columns, directories), its refusals as :class:`ExplainError`; Spark data (a
    ``spark:`` source or a Spark DataFrame) is refused, never collected."""
    if on_spark(path):
        raise ExplainError(
            f"{source_name(path)}: this reads its rows into one process from a CSV or Parquet "
            "file and takes no Spark data yet (govern gate --data spark:<table> does); give "
            "a file sample of the rows"
        )
    try:
        return tables.read_table(path)
    except tables.TableError as exc:
        raise ExplainError(str(exc)) from None


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


LEGACY_DIGEST_CHARS = 8
"""Length of MLflow's own dataset digest, which explanations recorded before
:func:`governance.tables.content_digest` (it hashes only the first 10,000 rows)."""


def dataset(frame: pd.DataFrame, source, target: str | None, name: str | None = None, digest=None):
    """The MLflow dataset of a data file: named after the file (or ``name``), with the
    digest of its content (:func:`governance.tables.content_digest`; ``digest=False``:
    MLflow's own); its source is the file's name, never a local folder (a sample of a
    Spark table ``spark:<table>``: the table)."""
    from miret_governance.governance.data.spark import SPARK_PREFIX

    origin = Path(source).name
    if str(source).startswith(SPARK_PREFIX):
        from mlflow.data.spark_dataset_source import SparkDatasetSource

        origin = SparkDatasetSource(table_name=str(source)[len(SPARK_PREFIX) :])
    with warnings.catch_warnings():  # source-type ambiguity and integer-column hints
        warnings.simplefilter("ignore", UserWarning)
        return mlflow.data.from_pandas(
            frame,
            source=origin,
            name=name or Path(source).stem,
            targets=target or None,
            digest=None if digest is False else tables.content_digest(frame),
        )


def digest_like(frame: pd.DataFrame, source, target: str | None, recorded: str) -> str:
    """The digest of ``frame`` to compare with the ``recorded`` one: MLflow's own when
    that is one (an explanation from before the content digest), else the content's."""
    legacy = len(recorded) == LEGACY_DIGEST_CHARS
    return dataset(frame, source, target, digest=False if legacy else None).digest


def split_features(frame: pd.DataFrame, ensemble, target, source) -> tuple:
    """Feature frame in the ensemble's column order, and the labels (or None)."""
    y = None
    if target:
        if target not in frame.columns:
            raise _missing_label(source, frame, target)
        try:
            y = tables.check_labels(frame[target], ensemble.classes, target)
        except ValueError as exc:
            raise ExplainError(f"{source}: {exc}") from None
        frame = frame.drop(columns=[target])
    names = list(ensemble.feature_names)
    missing = missing_features(frame.columns, names, source)
    if missing is not None:
        raise missing
    return frame[names], y


def missing_features(columns, names, source) -> ExplainError | None:
    """The refusal of a table whose ``columns`` lack some of the feature ``names``."""
    missing = [n for n in names if n not in set(map(str, columns))]
    if not missing:
        return None
    return ExplainError(
        f"{source} lacks the ensemble's feature columns {missing[:8]}"
        f"{' ...' if len(missing) > 8 else ''}; it must have the columns the model was "
        "trained on"
    )


def encoded_inputs(request, ensemble, frame, test_frame) -> tuple:
    """``(ensemble, frame, test_frame)`` in the encoded space of an ensemble behind a
    ``ColumnTransformer`` (:func:`governance.encoding.encoded_view`; the label column
    kept as it is); unchanged otherwise.

    Raises
    ------
    ExplainError
        A category not seen in training (named, never mapped), or a missing column.
    """
    from miret_governance.governance.ensembles.encoding import EncodingError, encoded_view

    view = encoded_view(ensemble)
    if view.encoding is None:
        return ensemble, frame, test_frame

    def encode(table, source):
        if table is None:
            return None
        try:
            encoded = view.encoding.encode(ensemble.preprocessor, table)
        except (EncodingError, KeyError) as exc:
            raise ExplainError(f"{source}: {exc}") from None
        if request.target and request.target in table.columns:
            encoded[request.target] = table[request.target].to_numpy()
        return encoded

    return view, encode(frame, request.data), encode(test_frame, request.test_data)


def feature_inputs(ensemble, frame: pd.DataFrame, source) -> np.ndarray:
    """A file's rows as the ensemble takes them
    (:func:`governance.data.spark.predict.model_inputs`, which a Spark batch runs too).

    Raises
    ------
    ExplainError
        A missing feature column, a column holding text or infinite values, no rows, or
        an unseen category.
    """
    from miret_governance.governance.data.spark.predict import model_inputs
    from miret_governance.governance.ensembles.encoding import EncodingError, encoding_of
    from miret_governance.governance.miret.tree.paths import RowsError

    if encoding_of(ensemble.preprocessor) is None:
        split_features(frame, ensemble, None, source)  # missing columns named
    try:  # text, infinite values or no rows named, not left to the preprocessing
        return model_inputs(ensemble, frame, source)
    except RowsError as exc:
        raise ExplainError(str(exc)) from None
    except (EncodingError, KeyError) as exc:
        raise ExplainError(f"{source}: {exc}") from None


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
