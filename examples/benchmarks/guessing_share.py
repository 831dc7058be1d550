"""How much of issue 19's fit-time bar the threshold guessing alone takes.

    .venv/bin/python examples/benchmarks/guessing_share.py --target xgb --depth 3

On each example dataset (``surrogates.py``'s protocol) it times, one after another on
the same ensemble and training rows: one threshold-guessing call
(:func:`governance.miret.univariate.guessed_thresholds`, GOSDT's procedure), GOSDT with
guessing (``paper.fit_gosdt``, the bar's reference: ``pip install .[bench]``) and one
default MIRET fit (HiGHS, depth given). A default fit with held-out folds guesses
thresholds ``GUESSES`` times (each of the 3 folds' rows and the whole sample: the
univariate candidate of every fold must not see its held-out labels), so the bar
"MIRET at most 10 times GOSDT's time" leaves ``10 * GOSDT - GUESSES * guessing`` for
everything else: 12 fold heuristics, the final heuristic and the node MILPs. Writes
``results_guessing_share.md``. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import paper

from miret_governance.governance.miret import MiretSurrogate
from miret_governance.governance.miret.fit.selection import CV_FOLDS
from miret_governance.governance.miret.heuristics.univariate import guessed_thresholds

HERE = Path(__file__).resolve().parent
GUESSES = CV_FOLDS + 1  # each fold's training rows, then the whole sample
BAR = 10.0  # issue 19: mean fit time at most 10 times GOSDT-with-guessing's


def _seconds(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def run(target: str, depth: int) -> pd.DataFrame:
    """One row per example dataset: the three timings in seconds."""
    peer_args = SimpleNamespace(time_limit=60.0, gosdt_regularization=1e-3)  # paper.py's
    rows = []
    for csv in sorted(paper.DATA.glob("*.csv")):
        inst = paper.make_instance(
            pd.read_csv(csv), paper.ensemble_model(target, depth, 0), depth, 0
        )
        unit = inst.model[0].transform(inst.X_train)  # the pipeline's MinMaxScaler
        surrogate = MiretSurrogate(inst.model, depth=depth, solver="highs")
        rows.append(
            {
                "dataset": csv.stem,
                "guessing_s": _seconds(guessed_thresholds, unit, inst.labels_train, 0),
                "gosdt_s": _seconds(paper.fit_gosdt, inst, {}, peer_args),
                "miret_s": _seconds(surrogate.fit, inst.X_train),
            }
        )
        print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def report(frame: pd.DataFrame, target: str, depth: int) -> None:
    mean = frame[["guessing_s", "gosdt_s", "miret_s"]].mean()
    left = BAR * mean["gosdt_s"] - GUESSES * mean["guessing_s"]
    lines = [
        f"# Threshold guessing against issue 19's fit-time bar ({target.upper()}, depth {depth})",
        "",
        __doc__.split("\n\n")[2].replace("\n", " "),
        "",
        f"Load average at the end: {os.getloadavg()[0]:.2f}.",
        "",
        "| dataset | one guessing s | GOSDT with guessing s | MIRET default fit s |",
        "|---|---|---|---|",
        *(
            f"| {row.dataset} | {row.guessing_s:.3f} | {row.gosdt_s:.3f} | {row.miret_s:.2f} |"
            for row in frame.itertuples()
        ),
        f"| mean | {mean['guessing_s']:.3f} | {mean['gosdt_s']:.3f} | {mean['miret_s']:.2f} |",
        "",
        (
            f"- One guessing is {mean['guessing_s'] / mean['gosdt_s']:.0%} of GOSDT's time; "
            f"the fit's {GUESSES} guessings are "
            f"{GUESSES * mean['guessing_s'] / mean['gosdt_s']:.1f} times GOSDT's whole fit."
        ),
        (
            f"- The bar ({BAR:g} x GOSDT, {BAR * mean['gosdt_s']:.2f} s) leaves {left:.2f} s "
            "for the rest of the fit, which takes "
            f"{mean['miret_s'] - GUESSES * mean['guessing_s']:.2f} s today "
            f"(MIRET / GOSDT: {mean['miret_s'] / mean['gosdt_s']:.1f})."
        ),
        "",
    ]
    (HERE / "results_guessing_share.md").write_text("\n".join(lines))
    print(f"wrote {HERE / 'results_guessing_share.md'}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("rf", "xgb"), default="xgb")
    parser.add_argument("--depth", type=int, choices=(2, 3, 4), default=3)
    args = parser.parse_args(argv)
    report(run(args.target, args.depth), args.target, args.depth)


if __name__ == "__main__":
    main()
