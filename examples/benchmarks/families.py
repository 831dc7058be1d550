"""Surrogates of every supported model family against CART, on the example datasets.

::

    .venv/bin/python examples/benchmarks/families.py
    .venv/bin/python examples/benchmarks/families.py --families lgbm hgb --depths 3

For each family (RandomForest, XGBoost, HistGradientBoosting, LightGBM: 100 trees of
depth D on raw features, the libraries' defaults otherwise), dataset and depth, the
paper's protocol of ``paper.py`` (stratified 80/20 split, seed 0): MIRET with
``govern explain``'s defaults (the estimator's, HiGHS, 60 s) and a depth-D CART, both
fitted on the ensemble's training labels, scored by test fidelity. Writes
``examples/benchmarks/results_families.md`` and its rows as ``.csv``.
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
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from xgboost import XGBClassifier

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
}


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
        "--datasets", nargs="+", default=["Wisconsin", "Heart", "Diabetes", "Ionosphere"]
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
            for name in args.datasets:
                frame = pd.read_csv(DATA / f"{name}.csv")
                inst = make_instance(frame, FAMILIES[family](depth, 0), depth, 0)
                found = run_instance(inst, {}, fit_args, fitters)
                for row in found:
                    row.update(family=family, dataset=name, depth=depth)
                rows += found
                print(progress_line(f"{family} {name} D={depth}", found), flush=True)
    results = pd.DataFrame(rows)
    results.to_csv(args.output.with_suffix(".csv"), index=False)
    lines = [
        "# MIRET against CART for each model family",
        "",
        (
            f"Written by `examples/benchmarks/families.py --families {' '.join(args.families)}"
            f" --depths {' '.join(map(str, args.depths))}`: {N_TREES} trees of depth D on raw "
            "features, stratified 80/20 split (seed 0), MIRET with its defaults and HiGHS "
            f"({args.time_limit:g} s cap), CART of depth D; test fidelity in % (agreement "
            "with the ensemble), features = distinct features the tree splits on."
        ),
        "",
        *summary(results),
    ]
    args.output.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
