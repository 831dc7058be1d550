"""Safe reading of user tables (CSV or Parquet) and the label check shared by every command.

:func:`read_table` refuses, with a message naming the problem and the fix, what pandas
would otherwise read silently wrong: directories and devices, files over a size cap,
non-UTF-8 text, a file that parses as one column (wrong delimiter), and duplicate column
names (pandas renames the second ``x`` to ``x.1``). :func:`check_labels` is the one
label check of ``validate`` and ``explain``. :func:`content_digest` identifies a table by
every value it holds, in order; :func:`row_set_digest` by its rows whatever their order (a
Spark table has none: :mod:`governance.data.spark.measures` computes the same digest).
"""

from __future__ import annotations

import csv
import hashlib
import io
from pathlib import Path

import numpy as np
import pandas as pd

from miret_governance.governance.errors import GovernanceError, InvalidInputError

MAX_TABLE_BYTES = 4 * 2**30
"""Default size cap of an input table (4 GiB)."""
PARQUET_SUFFIXES = (".parquet", ".pq")
_HEADER_BYTES = 1 * 2**20
_OTHER_DELIMITERS = {";": "semicolon", "\t": "tab", "|": "pipe"}


class TableError(GovernanceError, ValueError):
    """An input table that cannot be read as intended.

    Exit code 2. Also a ValueError: ``governance.validation`` and callers of
    :func:`check_labels` catch bad label values as one.
    """


DIGEST_CHARS = 32
"""Hex digits of :func:`content_digest` kept (128 bits; MLflow stores at most 36)."""


def content_digest(frame: pd.DataFrame) -> str:
    """sha256 of a table's shape, column names and every value, in order.

    MLflow's own dataset digest hashes only the first 10,000 rows and leaves out columns
    that are neither numbers nor all text (a category column with a missing value), so
    edited data could pass as the data of an explanation. Numbers and booleans are hashed
    as float64 (a CSV and a Parquet copy of the same values agree; ``-0.0`` and every NaN
    alike), anything else as text with its missing values marked.

    Returns
    -------
    str
        The first :data:`DIGEST_CHARS` hex digits.
    """
    digest = hashlib.sha256(repr(frame.shape).encode())
    for (name, column), numeric in zip(frame.items(), numeric_columns(frame)):
        digest.update(b"\0column\0" + str(name).encode("utf-8", "surrogatepass"))
        if numeric:
            digest.update(b"numbers" + np.ascontiguousarray(_numbers(column)).tobytes())
            continue
        missing = column.isna().to_numpy()
        texts = [str(v) for v in column.astype(object).to_numpy()[~missing]]
        digest.update(b"text" + np.packbits(missing).tobytes())
        digest.update(np.array([len(t) for t in texts], dtype=np.int64).tobytes())
        digest.update("".join(texts).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:DIGEST_CHARS]


ROW_SET_MODULUS = 2**128
"""The per-row hashes of :func:`row_set_digest` are added modulo this (order-independent)."""


def numeric_columns(frame: pd.DataFrame) -> tuple[bool, ...]:
    """Per column, whether :func:`content_digest` and :func:`row_set_digest` hash it as
    numbers (numbers and booleans, not categories) or as text."""
    return tuple(
        (pd.api.types.is_numeric_dtype(c) or pd.api.types.is_bool_dtype(c))
        and not isinstance(c.dtype, pd.CategoricalDtype)
        for _, c in frame.items()
    )


def _numbers(column: pd.Series) -> np.ndarray:
    """A column of numbers or booleans as float64, ``-0.0`` and every NaN alike."""
    values = column.astype("float64").to_numpy(dtype=np.float64, na_value=np.nan)
    return np.where(np.isnan(values), np.nan, values + 0.0)


def row_hashes(frame: pd.DataFrame, numeric) -> list[bytes]:
    """Each row's hash: the first 128 bits (16 bytes) of the sha256 of its canonical bytes
    (per column, in order, ``numeric[i]`` telling which: a number as float64, ``-0.0``
    and every NaN alike; text as a presence byte, its UTF-8 length and bytes). Equal rows
    hash alike wherever they are, so a sample of the rows whose hash is small does not
    depend on their order or partitions (:mod:`governance.data.spark.sample`)."""
    parts = [b""] * len(frame)
    for (_, column), is_number in zip(frame.items(), numeric):
        if is_number:
            cells = [v.tobytes() for v in _numbers(column)]
        else:
            missing = column.isna().to_numpy()
            cells = [
                b"\0"
                if gone
                else b"\1"
                + len(t := str(v).encode("utf-8", "surrogatepass")).to_bytes(8, "little")
                + t
                for v, gone in zip(column.astype(object).to_numpy(), missing)
            ]
        parts = [a + b for a, b in zip(parts, cells)]
    return [hashlib.sha256(row).digest()[:16] for row in parts]


def row_hash_sum(frame: pd.DataFrame, numeric) -> int:
    """Sum modulo :data:`ROW_SET_MODULUS` of the rows' :func:`row_hashes` (as big-endian
    integers). Sums of disjoint row sets add up to the whole's."""
    total = sum(int.from_bytes(h, "big") for h in row_hashes(frame, numeric))
    return total % ROW_SET_MODULUS


def row_set_digest_of(names, numeric, n_rows: int, total: int) -> str:
    """The digest of :func:`row_set_digest` from its parts: column names and kinds, the
    row count and :func:`row_hash_sum` of all rows."""
    digest = hashlib.sha256(b"row set\0" + repr((n_rows, len(names))).encode())
    for name, is_number in zip(names, numeric):
        kind = b"numbers" if is_number else b"text"
        digest.update(b"\0column\0" + str(name).encode("utf-8", "surrogatepass") + b"\0" + kind)
    digest.update(total.to_bytes(16, "big"))
    return digest.hexdigest()[:DIGEST_CHARS]


def row_set_digest(frame: pd.DataFrame) -> str:
    """sha256 of a table's column names and kinds, its row count and the multiset of its
    rows (:func:`row_hash_sum`): the same rows in any order give the same digest, as
    numbers or text like :func:`content_digest`.

    Returns
    -------
    str
        The first :data:`DIGEST_CHARS` hex digits.
    """
    numeric = numeric_columns(frame)
    return row_set_digest_of(list(frame.columns), numeric, len(frame), row_hash_sum(frame, numeric))


def _duplicates(names) -> list[str]:
    seen, repeated = set(), []
    for name in map(str, names):
        if name in seen and name not in repeated:
            repeated.append(name)
        seen.add(name)
    return repeated


def _refuse_duplicates(path, names):
    repeated = _duplicates(names)
    if repeated:
        raise TableError(
            f"{path}: duplicate column names {repeated}; every column needs a unique "
            "name (pandas would silently rename the copies to 'name.1'): rename or drop "
            "the duplicates"
        )


def _csv_header(path: Path) -> list[str]:
    with path.open("rb") as handle:
        head = handle.read(_HEADER_BYTES)
    first_line = head.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        text = first_line.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise TableError(
            f"{path}: the header is not UTF-8 text ({error.reason} at byte {error.start}); "
            "save the file as UTF-8 CSV"
        ) from None
    if not text.strip():
        raise TableError(f"{path}: the first line is empty; a CSV needs a header row")
    header = next(csv.reader(io.StringIO(text)))
    if len(header) == 1:
        found = [name for sep, name in _OTHER_DELIMITERS.items() if sep in text]
        hint = f" (it contains {' and '.join(found)} characters)" if found else ""
        raise TableError(
            f"{path}: the header parses as a single column{hint}; the file must be "
            "comma-separated with one named column per feature: re-export it as CSV "
            "with ',' as delimiter"
        )
    return header


def read_table(path, max_bytes: int = MAX_TABLE_BYTES) -> pd.DataFrame:
    """Read a CSV (comma-separated, UTF-8, header row) or Parquet file, refusing bad input.

    Parameters
    ----------
    path : str or Path
        ``.parquet``/``.pq`` files are read as Parquet, anything else as CSV.
    max_bytes : int
        Largest file size read.

    Returns
    -------
    DataFrame

    Raises
    ------
    TableError
        Missing path, directory or non-regular file, file larger than ``max_bytes``,
        empty file, non-UTF-8 text, one column only (wrong delimiter), duplicate column
        names, or a file pandas cannot parse.
    """
    path = Path(path)
    if not path.exists():
        raise TableError(f"{path}: no such file; give the path of a CSV or Parquet file")
    if path.is_dir():
        raise TableError(f"{path} is a directory; give the path of a CSV or Parquet file")
    if not path.is_file():
        raise TableError(f"{path} is not a regular file (a device or pipe); give a data file")
    size = path.stat().st_size
    if size > max_bytes:
        raise TableError(
            f"{path} has {size:,} bytes, more than the {max_bytes:,} allowed; sample the "
            "data or raise the limit"
        )
    if size == 0:
        raise TableError(f"{path} is empty; a table needs a header row and data rows")
    if path.suffix.lower() in PARQUET_SUFFIXES:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(path).names
        except (pa.ArrowException, OSError) as error:
            raise TableError(f"{path}: not a readable Parquet file: {error}") from None
        _refuse_duplicates(path, names)
        return pd.read_parquet(path)
    _refuse_duplicates(path, _csv_header(path))
    try:
        frame = pd.read_csv(path, encoding="utf-8", encoding_errors="strict")
    except UnicodeDecodeError as error:
        raise TableError(
            f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); save the file "
            "as UTF-8 CSV"
        ) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise TableError(f"{path}: not a well-formed CSV file: {error}") from None
    return frame


def check_labels(labels, classes, name: str = "label") -> np.ndarray:
    """Labels as the ensemble's own class values, or a clear error.

    A label matches a class when they are equal as values of one type: strings equal to
    string classes, numbers numerically equal to numeric classes (so ``0.0``/``1.0``
    match classes ``0``/``1``). Mixed types (numbers and strings in one column), missing
    values and values outside the ensemble's classes are refused (by name).

    Parameters
    ----------
    labels : array-like of shape (n,)
    classes : array-like of shape (k,)
        The ensemble's classes, ``k >= 2``.
    name : str
        Column name used in messages.

    Returns
    -------
    ndarray
        The labels mapped to ``classes`` (same dtype as ``classes``).

    Raises
    ------
    ValueError
    """
    values = pd.Series(np.asarray(labels, dtype=object))
    classes = np.asarray(classes)
    if values.isna().any():
        raise InvalidInputError(
            f"label column {name!r} has {int(values.isna().sum())} missing values; every "
            "row needs a label"
        )
    kind = values.map(lambda v: "text" if isinstance(v, (str, bytes)) else "number")
    kinds = set(kind)
    if len(kinds) > 1:
        examples = {k: values[kind == k].iloc[0] for k in kinds}
        raise InvalidInputError(
            f"label column {name!r} mixes numbers and text (e.g. {examples['number']!r} and "
            f"{examples['text']!r}); use one type matching the ensemble's classes "
            f"{classes.tolist()}"
        )
    numeric_classes = np.issubdtype(classes.dtype, np.number) or classes.dtype == bool
    if kinds == {"number"} and numeric_classes:
        numbers = values.to_numpy(dtype=np.float64)
        match = numbers[:, None] == classes.astype(np.float64)[None, :]
    elif kinds == {"text"} and not numeric_classes:
        match = values.to_numpy(dtype=str)[:, None] == classes.astype(str)[None, :]
    else:  # text labels for numeric classes, or numbers for text classes
        match = np.zeros((len(values), len(classes)), dtype=bool)
    unknown = ~match.any(axis=1)
    if unknown.any():
        outside = pd.unique(values[unknown])[:5].tolist()
        raise InvalidInputError(
            f"label column {name!r} has values {outside} that are not the ensemble's "
            f"classes {classes.tolist()}; labels must be the classes the model was "
            "trained on (equal numbers, e.g. 1.0 for 1, or the same strings)"
        )
    return classes[match.argmax(axis=1)]
