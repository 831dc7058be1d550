"""Surrogates of every supported model family against CART, on the example datasets.

::

    .venv/bin/python examples/benchmarks/families.py
    .venv/bin/python examples/benchmarks/families.py --families lgbm hgb --depths 3

For each family (RandomForest, XGBoost, HistGradientBoosting, LightGBM: 100 trees of
depth D on raw features, the libraries' defaults otherwise; ``rf-3class`` and
``xgb-3class``: the same forest and XGBoost's ``multi:softprob`` on three 3-class data
sets), dataset and depth, the paper's protocol of ``paper.py`` (stratified 80/20 split,
seed 0): MIRET with ``govern explain``'s defaults (the estimator's, HiGHS, 60 s) and a
depth-D CART, both fitted on the ensemble's training labels, scored by test fidelity.
Writes ``examples/benchmarks/results_families.md`` and its rows as ``.csv``; the rows of
families not run this time are kept from the earlier ``.csv``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
from lightgbm import LGBMClassifier
from paper import (
    DATA,
    HERE,
    N_TREES,
    _table,
    fit_cart,
    fit_miret,
    make_instance,
    progress_line,
    run_instance,
)
from sklearn.datasets import load_digits, load_iris, load_wine
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from xgboost import XGBClassifier

BINARY = ["Wisconsin", "Heart", "Diabetes", "Ionosphere"]
"""Data sets of ``examples/data`` the binary families run on."""


def _digits_358():
    """The handwritten digits 3, 5 and 8 (the three most alike), labelled 0, 1, 2."""
    X, y = load_digits(return_X_y=True, as_frame=True)
    keep = y.isin([3, 5, 8])
    return X[keep], y[keep].map({3: 0, 5: 1, 8: 2})


THREE_CLASS = {
    "Wine": lambda: load_wine(return_X_y=True, as_frame=True),
    "Iris": lambda: load_iris(return_X_y=True, as_frame=True),
    "Digits358": _digits_358,
}
"""3-class data sets of scikit-learn (no download): name -> (X, y)."""

FAMILIES = {
    "rf": lambda depth, seed: RandomForestClassifier(
        n_estimators=N_TREES, max_depth=depth, random_state=seed
    ),
    "xgb": lambda depth, seed: XGBClassifier(
        n_estimators=N_TREES, max_depth=depth, random_state=seed, n_jobs=1
    ),
    "hgb": lambda depth, seed: HistGradientBoostingClassifier(
        max_iter=N_TREES, max_depth=depth, early_stopping=False, random_state=seed
    ),
    "lgbm": lambda depth, seed: LGBMClassifier(
        n_estimators=N_TREES,
        max_depth=depth,
        num_leaves=2**depth,
        random_state=seed,
        n_jobs=1,
        verbose=-1,
    ),
    "rf-3class": lambda depth, seed: RandomForestClassifier(
        n_estimators=N_TREES, max_depth=depth, random_state=seed
    ),
    "xgb-3class": lambda depth, seed: XGBClassifier(
        n_estimators=N_TREES,
        max_depth=depth,
        objective="multi:softprob",
        random_state=seed,
        n_jobs=1,
    ),
}
"""Family -> unfitted ensemble of depth D; a ``-3class`` family runs on ``THREE_CLASS``."""


def default_datasets(family: str) -> list[str]:
    """The data sets a family runs on unless ``--datasets`` says otherwise."""
    return list(THREE_CLASS) if family.endswith("-3class") else BINARY


def load_frame(name: str) -> pd.DataFrame:
    """A data set as one table, the label last: ``THREE_CLASS`` or ``examples/data``."""
    if name in THREE_CLASS:
        X, y = THREE_CLASS[name]()
        return X.assign(y=y.to_numpy())
    return pd.read_csv(DATA / f"{name}.csv")


def merged(results: pd.DataFrame, path: Path) -> pd.DataFrame:
    """``results`` and the rows of other families from an earlier ``path`` (if any)."""
    if not path.exists():
        return results
    earlier = pd.read_csv(path)
    kept = earlier[~earlier["family"].isin(results["family"].unique())]
    return pd.concat([kept, results], ignore_index=True)


def summary(results: pd.DataFrame) -> list[str]:
    """Per family and depth: mean test fidelity and features of MIRET and CART, MIRET's
    mean fit time and its worst instance against CART."""
    rows = []
    for (family, depth), group in results.groupby(["family", "depth"], sort=False):
        wide = group.pivot_table(
            index="dataset", columns="method", values=["test_fidelity", "features", "fit_s"]
        )
        fid, feats = wide["test_fidelity"], wide["features"]
        rows.append(
            [
                family,
                str(depth),
                str(len(wide)),
                f"{fid['MIRET'].mean():.2f}",
                f"{fid['CART'].mean():.2f}",
                f"{feats['MIRET'].mean():.2f}",
                f"{feats['CART'].mean():.2f}",
                f"{wide['fit_s']['MIRET'].mean():.2f}",
                f"{(fid['MIRET'] - fid['CART']).min():+.1f}",
            ]
        )
    header = [
        "family",
        "D",
        "datasets",
        "MIRET fid",
        "CART fid",
        "MIRET feat",
        "CART feat",
        "MIRET fit s",
        "worst MIRET - CART",
    ]
    return _table(header, rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    parser.add_argument(
        "--datasets", nargs="+", default=None, help="default: each family's (binary or 3-class)"
    )
    parser.add_argument("--depths", nargs="+", type=int, choices=(2, 3, 4), default=[2, 3, 4])
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--output", type=Path, default=HERE / "results_families.md")
    args = parser.parse_args(argv)
    fit_args = SimpleNamespace(mode="default", time_limit=args.time_limit)
    fitters = {"MIRET": fit_miret, "CART": fit_cart}
    rows = []
    for family in args.families:
        for depth in args.depths:
            for name in args.datasets or default_datasets(family):
                frame = load_frame(name)
                inst = make_instance(frame, FAMILIES[family](depth, 0), depth, 0)
                found = run_instance(inst, {}, fit_args, fitters)
                for row in found:
                    row.update(family=family, dataset=name, depth=depth)
                rows += found
                print(progress_line(f"{family} {name} D={depth}", found), flush=True)
    results = merged(pd.DataFrame(rows), args.output.with_suffix(".csv"))
    results.to_csv(args.output.with_suffix(".csv"), index=False)
    lines = [
        "# MIRET against CART for each model family",
        "",
        (
            "Written by `examples/benchmarks/families.py` (families "
            f"{', '.join(results.family.unique())}; the last run: `--families "
            f"{' '.join(args.families)}"
            f" --depths {' '.join(map(str, args.depths))}`): {N_TREES} trees of depth D on raw "
            "features, stratified 80/20 split (seed 0), MIRET with its defaults and HiGHS "
            f"({args.time_limit:g} s cap), CART of depth D; test fidelity in % (agreement "
            "with the ensemble), features = distinct features the tree splits on. The binary "
            f"families run on {', '.join(BINARY)} (`examples/data`), the `-3class` ones on "
            "scikit-learn's Wine (178 rows, 13 features), Iris (150, 4) and the digits 3, 5 "
            "and 8 (539, 64): one MIRET tree whose leaves predict any of the three classes. "
            "Fit seconds were measured while other jobs shared the 2 cores (not a speed "
            "benchmark). RF here uses scikit-learn's default `max_features` (the paper's "
            "benchmark uses all features)."
        ),
        "",
        *summary(results),
    ]
    args.output.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
