"""Cross-fidelity (:func:`governance.measures.drift.cross_fidelity`) on a Spark DataFrame.

One ``mapInPandas`` job counts both directions: each batch runs the pandas path's own
:func:`~governance.measures.drift.cross_fidelity` on its rows, with both versions'
ensembles and surrogates (our own arrays and trees, sent with the task: no model file is
opened on a worker), and the driver adds the counts. A batch the pandas path would refuse
(a missing column, an unseen category, a missing value for a surrogate without a rule for
one) yields its refusal, raised on the driver as the same error with the same message.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pandas as pd

from miret_governance.governance.measures.drift import (
    CrossFidelity,
    DriftError,
    Explanation,
    cross_fidelity,
)
from miret_governance.governance.miret.tree.missing import NoMissingRuleError

REFUSALS = {error.__name__: error for error in (DriftError, NoMissingRuleError)}
"""The refusals a batch reports by name, raised again on the driver."""


def _scorable(explanation: Explanation) -> Explanation:
    """What a task needs of an explanation: its name, surrogate and ensemble."""
    empty = pd.DataFrame()
    return replace(explanation, level_frequency=empty, features=(), rules="")


def _batch_counts(a, b, batches):
    for batch in batches:
        if not len(batch):
            continue
        kind, problem, counted = None, None, CrossFidelity(len(batch), 0, 0)
        try:
            counted = cross_fidelity(a, b, batch)
        except tuple(REFUSALS.values()) as error:
            kind, problem = type(error).__name__, str(error)
        yield pd.DataFrame(
            {
                "rows": [counted.rows],
                "from_on_to": [counted.from_on_to],
                "to_on_from": [counted.to_on_from],
                "kind": [kind],
                "problem": [problem],
            }
        )


def spark_cross_fidelity(frame, a: Explanation, b: Explanation) -> CrossFidelity:
    """:func:`governance.measures.drift.cross_fidelity` of ``a`` and ``b`` over every row
    of the Spark DataFrame ``frame``.

    Raises
    ------
    DriftError, governance.miret.missing.NoMissingRuleError
        As the pandas path, with its message (the first refused batch's).
    """
    task = partial(_batch_counts, _scorable(a), _scorable(b))
    schema = "rows long, from_on_to long, to_on_from long, kind string, problem string"
    counts = frame.mapInPandas(task, schema).collect()
    refused = [r for r in counts if r["kind"]]
    if refused:
        raise REFUSALS[refused[0]["kind"]](refused[0]["problem"])
    rows = sum(int(r["rows"]) for r in counts)
    if rows == 0:  # the pandas path's refusal of no rows (and of other classes)
        return cross_fidelity(a, b, frame.limit(0).toPandas())
    return CrossFidelity(
        rows,
        sum(int(r["from_on_to"]) for r in counts),
        sum(int(r["to_on_from"]) for r in counts),
    )
