"""Does a change of the engine keep every default fit's tree, bit for bit?

    nice -n 10 .venv/bin/python examples/benchmarks/engine_identity.py --record before.jsonl
    # ... change the engine (or run the line above with another checkout first on
    # PYTHONPATH) ...
    nice -n 10 .venv/bin/python examples/benchmarks/engine_identity.py --record after.jsonl
    .venv/bin/python examples/benchmarks/engine_identity.py --compare before.jsonl after.jsonl
    .venv/bin/python examples/benchmarks/engine_identity.py --compare before.jsonl bench

``--record`` fits ``MiretSurrogate(pipeline, depth=D, random_state=seed)`` (the
estimator's defaults, one process) on ``engine_bench.py``'s instances (``paper.py``'s
protocol: the seed's stratified 80/20 split and ensemble) of ``--groups``, ``--seeds``,
``--depths`` and ``--targets``, and appends one JSON line per fit (``--resume``: only the
fits the file lacks): the tree's digest (:meth:`MiretSurrogate.tree_digest`: splits,
weights, thresholds, leaf classes, normalization) and the digest of every choice the fit
made (depth, alpha, ``m``, the returned candidate, the CART baseline, the folds' held-out
rows and features of every procedure, the objective and the returned tree's source).
``--compare`` counts the fits whose two digests are identical in both files (``bench``
for the second: the default fits that ``engine_bench.py`` recorded with their digests on
the engine now) and names the others. A fit whose report says the wall-clock time limit cut it (its tree depends
on the load) is recorded as such and counted apart.
"""

from __future__ import annotations

import os

for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_pool] = "1"  # before numpy, xgboost or a solver loads its thread pool

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import paper
from engine_bench import GROUPS, ONE_PROCESS, choices_digest, csv_paths, engine_commit
from threadpoolctl import threadpool_limits

from miret_governance.governance.miret import MiretSurrogate

ENGINE = engine_commit()


def record(args) -> None:
    path = Path(args.record)
    done = set()
    if args.resume and path.exists():
        done = {json.loads(line)["key"] for line in path.read_text().splitlines() if line}
    with path.open("a") as out, threadpool_limits(limits=1):
        for group in args.groups:
            for target in args.targets:
                for depth in args.depths:
                    for seed in args.seeds:
                        for csv in sorted(GROUPS[group].glob("*.csv")):
                            key = f"{group}/{target}/{csv.stem}/D{depth}/s{seed}"
                            if key in done:
                                continue
                            model = paper.ensemble_model(target, depth, seed)
                            inst = paper.make_instance(pd.read_csv(csv), model, depth, seed)
                            fit = MiretSurrogate(
                                inst.model, depth=depth, random_state=seed, **ONE_PROCESS
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
                            out.write(json.dumps(row) + "\n")
                            out.flush()
                            print(key, row["tree"][:12], row["cpu_s"], flush=True)


def read(path: str) -> dict:
    """Records by key: of a ``--record`` file, or (``path`` "bench") of the default
    variant's fits in every ``results_engine_*.csv`` of the engine now (rows with digests)."""
    if path != "bench":
        lines = Path(path).read_text().splitlines()
        return {row["key"]: row for row in map(json.loads, filter(None, lines))}
    found = {}
    for group in GROUPS:
        for target in ("rf", "xgb"):
            for csv in csv_paths(group, target):
                rows = pd.read_csv(csv)
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
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    if args.compare:
        compare(*args.compare)
    else:
        record(args)


if __name__ == "__main__":
    main()
