"""The ensemble's and the surrogate's predictions on a Spark DataFrame, batch by batch.

Each ``mapInPandas`` task runs :func:`model_inputs` and the ensemble's and tree's own
``predict`` on its batch: the :class:`~governance.ensembles.ensemble.Ensemble` (our own
arrays, read by the safe readers on the driver) and the surrogate tree travel to the
workers with Spark's closure serializer; no model file is ever opened, let alone
unpickled, on a worker. The pandas path (:func:`flavors.store.data_files.feature_inputs`)
calls the same :func:`model_inputs` and :func:`agreeing`, so both count the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from miret_governance.governance.ensembles.arrays import scaled
from miret_governance.governance.ensembles.encoding import EncodingError, encoding_of
from miret_governance.governance.miret.tree.paths import RowsError, feature_rows


def model_inputs(ensemble, frame: pd.DataFrame, source) -> np.ndarray:
    """Rows as the ensemble takes them: its feature columns through its preprocessing
    (behind a ``ColumnTransformer``, :meth:`~governance.ensembles.encoding.Encoding.encode`,
    which names a category not seen in training).

    Raises
    ------
    RowsError
        A missing feature column, text or infinite values, or no rows.
    EncodingError, KeyError
        An unseen category, or a column the encoding needs.
    """
    encoding = encoding_of(ensemble.preprocessor)
    if encoding is None:
        return ensemble.transform(feature_rows(frame, ensemble.feature_names, source))
    return encoding.encode(ensemble.preprocessor, frame).to_numpy()


def agreeing(ensemble, tree, tree_scaler, X) -> int:
    """Rows of ``X`` (the ensemble's working space) where surrogate and ensemble agree."""
    X = np.asarray(X, dtype=np.float64)
    to_tree = X if tree_scaler is None else scaled(tree_scaler, X)
    return int(np.sum(ensemble.predict(X) == tree.predict(to_tree)))


@dataclass(frozen=True)
class Agreement:
    """Rows where the surrogate agrees with the ensemble, of all rows.

    ``problem`` is the first batch's refusal (:func:`model_inputs`), None when every row
    could be read.
    """

    agreeing: int
    rows: int
    problem: str | None = None


def _batch_agreement(ensemble, tree, tree_scaler, source, batches):
    for batch in batches:
        if not len(batch):
            continue
        problem, agree = None, 0
        try:
            agree = agreeing(ensemble, tree, tree_scaler, model_inputs(ensemble, batch, source))
        except RowsError as error:
            problem = str(error)
        except (EncodingError, KeyError) as error:
            problem = f"{source}: {error}"
        yield pd.DataFrame({"agreeing": [agree], "rows": [len(batch)], "problem": [problem]})


def agreement(frame, ensemble, tree, tree_scaler, source: str) -> Agreement:
    """:func:`agreeing` over every row of a Spark DataFrame, one ``mapInPandas`` job."""
    task = partial(_batch_agreement, ensemble, tree, tree_scaler, source)
    counts = frame.mapInPandas(task, "agreeing long, rows long, problem string").collect()
    problems = [r["problem"] for r in counts if r["problem"]]
    return Agreement(
        sum(int(r["agreeing"]) for r in counts),
        sum(int(r["rows"]) for r in counts),
        problems[0] if problems else None,
    )
