"""Safe table reading and the shared label check."""

import numpy as np
import pandas as pd
import pytest

from miret_governance.governance.data.tables import TableError, check_labels, read_table


def test_read_table_refuses_what_pandas_reads_wrong(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text("a,b\n1,2\n3,4\n")
    assert read_table(good).to_numpy().tolist() == [[1, 2], [3, 4]]
    cases = {
        "dup.csv": (b"x,y,x\n1,2,3\n", r"duplicate column names \['x'\]"),
        "semi.csv": (b"x;y\n1;2\n", "single column .*semicolon"),
        "latin.csv": (b"x,y\n1,caf\xe9\n", "not UTF-8"),
        "empty.csv": (b"", "is empty"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(TableError, match=message):
            read_table(tmp_path / name)
    with pytest.raises(TableError, match="is a directory"):
        read_table(tmp_path)
    with pytest.raises(TableError, match="not a regular file"):
        read_table("/dev/zero")
    with pytest.raises(TableError, match="more than the 10 allowed"):
        read_table(good, max_bytes=10)
    parquet = tmp_path / "t.parquet"
    pd.DataFrame({"a": [1.0], "b": [2.0]}).to_parquet(parquet)
    assert read_table(parquet).columns.tolist() == ["a", "b"]


def test_labels_match_the_classes_numerically_and_refuse_mixed_types():
    np.testing.assert_array_equal(check_labels([0.0, 1.0, 1.0], np.array([0, 1])), [0, 1, 1])
    assert check_labels(["no", "yes"], np.array(["no", "yes"])).tolist() == ["no", "yes"]
    with pytest.raises(ValueError, match="mixes numbers and text"):
        check_labels([0, "1"], np.array([0, 1]))
    with pytest.raises(ValueError, match=r"values \[2.0\] that are not the ensemble's classes"):
        check_labels([0.0, 2.0], np.array([0, 1]))
    with pytest.raises(ValueError, match=r"values \['1'\]"):
        check_labels(["1"], np.array([0, 1]))
    with pytest.raises(ValueError, match="missing values"):
        check_labels([0, None], np.array([0, 1]))


def test_labels_of_three_classes_map_to_them_and_name_the_others():
    grades = np.array(["A", "B", "C"])
    assert check_labels(["C", "A", "C"], grades).tolist() == ["C", "A", "C"]
    np.testing.assert_array_equal(check_labels([2.0, 0.0], np.array([0, 1, 2])), [2, 0])
    with pytest.raises(ValueError) as error:
        check_labels(["A", "E", "F", "E"], grades, "grade")
    assert str(error.value) == (
        "label column 'grade' has values ['E', 'F'] that are not the ensemble's classes "
        "['A', 'B', 'C']; labels must be the classes the model was trained on (equal "
        "numbers, e.g. 1.0 for 1, or the same strings)"
    )
    with pytest.raises(ValueError, match=r"values \['2'\]"):
        check_labels(["2"], np.array([0, 1, 2]))


def test_content_digest_covers_every_row_and_column_and_ignores_number_types(tmp_path):
    """QA: MLflow's dataset digest hashes the first 10,000 rows and skips a category
    column with a missing value, so edited data passed as an explanation's data."""
    from miret_governance.governance.data.tables import DIGEST_CHARS, content_digest

    rows = 10_200
    frame = pd.DataFrame(
        {
            "amount": np.arange(rows, dtype=np.int64),
            "rate": np.linspace(0.0, 1.0, rows),
            "purpose": pd.Series(["car", None, "boat"] * (rows // 3), dtype="category"),
        }
    )
    digest = content_digest(frame)
    assert len(digest) == DIGEST_CHARS and int(digest, 16) >= 0
    same = frame.astype({"amount": "Int64", "rate": "float32"}).astype({"rate": "float64"})
    assert content_digest(same.assign(rate=frame.rate)) == digest  # Int64 = int64 values
    frame.to_parquet(tmp_path / "copy.parquet")
    assert content_digest(pd.read_parquet(tmp_path / "copy.parquet")) == digest
    assert content_digest(frame.assign(rate=frame.rate * -0.0 + frame.rate)) == digest
    tail = frame.copy()
    tail.loc[rows - 1, "amount"] = -1  # past row 10,000
    category = frame.copy()
    category.loc[2, "purpose"] = "car"  # a category column with missing values
    reordered = frame[["rate", "amount", "purpose"]]
    changed = {content_digest(f) for f in (tail, category, reordered, frame.iloc[:-1])}
    assert digest not in changed and len(changed) == 4
