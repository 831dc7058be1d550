"""The Great Expectations suites of :mod:`governance.validation` and their run in an
ephemeral context: structure (row count, column set, numeric types, categories seen in
training, label classes), missing values, and ranges (raw units within the training
range, or normalized values in ``[0, 1]``). Each builder returns a list of expectations;
:func:`run_suite` validates one DataFrame batch with one list and :func:`merged_result`
joins the runs into one suite result.

Great Expectations is imported inside the functions: importing it takes seconds.
"""

from __future__ import annotations

import warnings

import numpy as np

from miret_governance.governance.data.spark.frames import is_spark_frame
from miret_governance.governance.data.validation_messages import EXAMPLES
from miret_governance.governance.ensembles.encoding import encoding_of

NUMERIC_TYPES = [
    *(f"{kind}{bits}" for kind in ("int", "uint", "Int", "UInt") for bits in (8, 16, 32, 64)),
    "float16",
    "float32",
    "float64",
    "Float32",
    "Float64",
]
SPARK_NUMERIC_TYPES = [
    "ByteType",
    "ShortType",
    "IntegerType",
    "LongType",
    "FloatType",
    "DoubleType",
]
""":data:`NUMERIC_TYPES` as Spark's type names: a decimal column is refused on both (pandas
reads decimals as objects)."""
SUITE_NAME = "governance-inputs"
"""The suite's name in every result (the runs are named after it and their batch)."""


PYSPARK_PANDAS_WARNING = "PySpark does not yet fully support pandas"
"""The start of the FutureWarning PySpark 4 gives when Great Expectations imports it next
to pandas 3 (the ``spark`` extra): it says nothing about this product's results."""


def import_great_expectations():
    """Great Expectations, imported without :data:`PYSPARK_PANDAS_WARNING` on stderr
    (later imports find the module loaded)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PYSPARK_PANDAS_WARNING, category=FutureWarning)
        import great_expectations

    return great_expectations


def ephemeral_context():
    """An in-memory Great Expectations context without analytics or progress bars."""
    gx = import_great_expectations()
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
        store_backend_defaults=InMemoryStoreBackendDefaults(),
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def _seen_categories(ensemble) -> dict:
    """Categorical input column -> categories seen in training, for an ensemble behind a
    ``ColumnTransformer`` (:mod:`governance.encoding`); empty otherwise."""
    encoding = encoding_of(ensemble.preprocessor)
    if encoding is None:
        return {}
    # as Python values: an expectation is serialized as JSON, which has no numpy int64
    # (HistGradientBoosting's categorical_features on integer codes)
    return {
        column: [v.item() if isinstance(v, np.generic) else v for v in values]
        for column, values in encoding.seen.items()
    }


def structure_suite(columns, n_rows, features, label, ensemble, mostly, types=NUMERIC_TYPES):
    """At least one row, exactly the ``features`` (and ``label``) columns, numeric
    ``types`` (:data:`NUMERIC_TYPES`, or :data:`SPARK_NUMERIC_TYPES` on Spark) or
    categories seen in training, and a label on every row among the ensemble's classes.
    The table-level expectations come first (Spark runs them without the row index)."""
    import great_expectations.expectations as gxe

    expected = features + ([label] if label is not None else [])
    present = [c for c in features if c in columns]
    categorical = _seen_categories(ensemble)
    suite = [
        gxe.ExpectTableRowCountToBeBetween(min_value=1),
        gxe.ExpectTableColumnsToMatchSet(column_set=expected, exact_match=True),
    ]
    if n_rows:
        suite += [
            gxe.ExpectColumnValuesToBeInTypeList(column=c, type_list=types)
            for c in present
            if c not in categorical
        ]
    suite += [  # an unseen category is reported by name, never mapped
        gxe.ExpectColumnValuesToBeInSet(column=c, value_set=categorical[c], mostly=mostly)
        for c in present
        if c in categorical
    ]
    if label is not None and label in columns:
        classes = np.asarray(ensemble.classes).tolist()
        suite += [  # every row labelled; binary: both classes; k > 2: at least two of the k
            gxe.ExpectColumnValuesToNotBeNull(column=label, meta={"label": True}),
            gxe.ExpectColumnUniqueValueCountToBeBetween(
                column=label, min_value=2, max_value=len(classes)
            ),
            gxe.ExpectColumnDistinctValuesToBeInSet(column=label, value_set=classes),
        ]
    return suite


def missing_suite(reference: dict, tolerance: float, mostly: float, known: bool) -> list:
    """Per column: missing values at most as often as in training plus ``tolerance``
    (none when the column was complete in training), and no more than ``mostly`` lets;
    the training share goes into the expectation's ``meta`` when ``known``."""
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToNotBeNull(
            column=column,
            mostly=max(0.0, min(mostly, 1.0 - (min(1.0, share + tolerance) if share else 0.0))),
            meta={"training_missing_share": share, "missing_tolerance": tolerance}
            if known
            else None,
        )
        for column, share in reference.items()
    ]


def raw_range_suite(features, bounds, mostly):
    """Raw features within the training range, or only finite when none is recorded."""
    import great_expectations.expectations as gxe

    if bounds is None:
        big = float(np.finfo(np.float64).max)
        return [
            gxe.ExpectColumnValuesToBeBetween(
                column=c, min_value=-big, max_value=big, mostly=mostly
            )
            for c in features
        ]
    low, high = bounds
    return [
        gxe.ExpectColumnValuesToBeBetween(
            column=c, min_value=float(lo), max_value=float(hi), mostly=mostly
        )
        for c, lo, hi in zip(features, low, high)
    ]


def range_suite(names, mostly):
    """Normalized features in ``[0, 1]``."""
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectColumnValuesToBeBetween(column=c, min_value=0.0, max_value=1.0, mostly=mostly)
        for c in names
    ]


def run_suite(context, batch, frame, expectations, index: str | None = None) -> dict:
    """Run one suite on one DataFrame batch, pandas or Spark (``index``: the column
    naming the rows GE quotes, for Spark), and return GE's JSON result."""
    import great_expectations as gx

    result_format = {"result_format": "SUMMARY", "partial_unexpected_count": EXAMPLES}
    if is_spark_frame(frame):
        datasource = context.data_sources.add_spark(f"governance-{batch}")
    else:
        datasource = context.data_sources.add_pandas(f"governance-{batch}")
    if index is not None:
        result_format["unexpected_index_column_names"] = [index]
    definition = datasource.add_dataframe_asset(batch).add_batch_definition_whole_dataframe(batch)
    # Expectations go in before the suite is stored: adding them to a stored suite
    # re-serializes the whole suite each time (quadratic).
    suite = gx.ExpectationSuite(name=f"{SUITE_NAME}-{batch}", expectations=expectations)
    suite = context.suites.add(suite)
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name=f"{SUITE_NAME}-{batch}", data=definition, suite=suite)
    )
    result = validation.run(batch_parameters={"dataframe": frame}, result_format=result_format)
    return result.to_json_dict()


def merged_result(results: list[dict]) -> dict:
    """The runs of :func:`run_suite` as one result of the suite ``SUITE_NAME``."""
    merged = dict(results[0])
    merged["suite_name"] = SUITE_NAME
    merged["results"] = [r for result in results for r in result["results"]]
    merged["success"] = all(result["success"] for result in results)
    evaluated = len(merged["results"])
    successful = sum(bool(r["success"]) for r in merged["results"])
    merged["statistics"] = {
        "evaluated_expectations": evaluated,
        "successful_expectations": successful,
        "unsuccessful_expectations": evaluated - successful,
        "success_percent": 100.0 * successful / evaluated if evaluated else None,
    }
    return merged
