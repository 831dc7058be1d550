"""Does a change of the engine keep every default fit's tree, bit for bit?

    # the engine before the change: its checkout first on PYTHONPATH (a directory holding
    # miret_governance/{governance,flavors,cli} of that commit)
    PYTHONPATH=<before> nice -n 10 .venv/bin/python examples/benchmarks/engine_identity.py \
        --record examples/benchmarks/results_engine_identity_<commit>.csv --resume
    .venv/bin/python examples/benchmarks/engine_identity.py \
        --compare examples/benchmarks/results_engine_identity_<commit>.csv bench

``--record`` fits ``MiretSurrogate(pipeline, depth=D, random_state=seed)`` (the
estimator's defaults but ``--params``, one process) on ``engine_bench.py``'s instances
(``paper.py``'s protocol: the seed's stratified 80/20 split and ensemble) of
``--groups``, ``--seeds`` (default 0), ``--depths`` and ``--targets``, and appends one
CSV row per fit
(``--resume``: only the fits the file lacks): the tree's digest
(:meth:`MiretSurrogate.tree_digest`: splits, weights, thresholds, leaf classes,
normalization), the digest of every choice the fit made (``engine_bench.choices_digest``:
depth, alpha, ``m``, the returned candidate, the CART baseline, the folds' held-out
fidelities and features of every procedure, the objective and the returned tree's
source), whether the wall-clock time limit cut it, and its CPU seconds. ``--compare A B``
counts the fits whose two digests are the same in both (``bench`` for B: the default's
fits that ``engine_bench.py`` recorded with their digests on the engine now) and names
the others; a fit that the time limit cut in either (its tree depends on the load) is
left out and counted apart.
"""

from __future__ import annotations

import os

for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_pool] = "1"  # before numpy, xgboost or a solver loads its thread pool

import argparse
import csv
import json
import time
from pathlib import Path

import pandas as pd
import paper
from engine_bench import GROUPS, ONE_PROCESS, choices_digest, csv_paths, engine_commit
from threadpoolctl import threadpool_limits

from miret_governance.governance.miret import MiretSurrogate

ENGINE = engine_commit()
FIELDS = ("key", "tree", "choices", "time_limit_hit", "cpu_s")


def record(args) -> None:
    path = Path(args.record)
    done = set(read(path)) if args.resume and path.exists() else set()
    fresh = not path.exists() or not path.stat().st_size
    with path.open("a", newline="") as out, threadpool_limits(limits=1):
        writer = csv.DictWriter(out, FIELDS)
        if fresh:
            writer.writeheader()
        for group in args.groups:
            for target in args.targets:
                for depth in args.depths:
                    for seed in args.seeds:
                        for data in sorted(GROUPS[group].glob("*.csv")):
                            key = f"{group}/{target}/{data.stem}/D{depth}/s{seed}"
                            if key in done:
                                continue
                            model = paper.ensemble_model(target, depth, seed)
                            inst = paper.make_instance(pd.read_csv(data), model, depth, seed)
                            fit = MiretSurrogate(
                                inst.model,
                                depth=depth,
                                random_state=seed,
                                **ONE_PROCESS,
                                **json.loads(args.params),
                            )
                            cpu = time.process_time()
                            fit.fit(inst.X_train)
                            cpu = time.process_time() - cpu
                            row = {
                                "key": key,
                                "tree": fit.tree_digest(),
                                "choices": choices_digest(fit),
                                "time_limit_hit": bool(fit.solve_report_.time_limit_hit),
                                "cpu_s": round(cpu, 3),
                            }
                            writer.writerow(row)
                            out.flush()
                            print(key, row["tree"][:12], row["cpu_s"], flush=True)


def read(path: str) -> dict:
    """Records by key: of a ``--record`` file, or (``path`` "bench") of the default
    variant's fits in every ``results_engine_*.csv`` of the engine now (rows with digests)."""
    if str(path) != "bench":
        rows = pd.read_csv(path).to_dict("records")
        return {row["key"]: {**row, "time_limit_hit": bool(row["time_limit_hit"])} for row in rows}
    found = {}
    for group in GROUPS:
        for target in ("rf", "xgb"):
            for found_csv in csv_paths(group, target):
                rows = pd.read_csv(found_csv)
                if "tree_digest" not in rows:
                    continue
                mine = rows[(rows["variant"] == "default") & (rows["engine"].astype(str) == ENGINE)]
                for row in mine[mine["tree_digest"].notna()].to_dict("records"):
                    key = f"{group}/{target}/{row['dataset']}/D{row['depth']}/s{row['seed']}"
                    found[key] = {
                        "tree": row["tree_digest"],
                        "choices": row["choices_digest"],
                        "time_limit_hit": bool(row["r_time_limit_hit"]),
                        "cpu_s": row["cpu_s"],
                    }
    return found


def compare(before_path: str, after_path: str) -> None:
    before, after = read(before_path), read(after_path)
    common = sorted(set(before) & set(after))
    cut = [k for k in common if before[k]["time_limit_hit"] or after[k]["time_limit_hit"]]
    kept = [k for k in common if k not in cut]
    same = [k for k in kept if all(before[k][f] == after[k][f] for f in ("tree", "choices"))]
    for key in sorted(set(kept) - set(same)):
        print("DIFFERENT", key)
    cpu_before = sum(before[k]["cpu_s"] for k in kept)
    cpu_after = sum(after[k]["cpu_s"] for k in kept)
    print(
        f"identical {len(same)} / {len(kept)} fits (trees and choices); "
        f"{len(cut)} cut by the time limit left out; CPU s {cpu_before:.1f} -> {cpu_after:.1f}"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record")
    parser.add_argument("--compare", nargs=2)
    parser.add_argument("--groups", nargs="+", default=["examples", "unseen", "holdout"])
    parser.add_argument("--targets", nargs="+", default=["rf", "xgb"])
    parser.add_argument("--depths", nargs="+", type=int, default=[2, 3, 4])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument(
        "--params",
        default="{}",
        help="JSON of estimator parameters set away from the defaults (e.g. an old "
        "default spelled out: '{\"alpha_grid\": [0.2, 0.5, 0.8]}')",
    )
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    if args.compare:
        compare(*args.compare)
    else:
        record(args)


if __name__ == "__main__":
    main()
