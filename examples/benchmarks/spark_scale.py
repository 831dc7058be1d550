"""The recomputed-fidelity measurement of ``govern gate --data`` on 1M and 10M rows: pandas
streaming vs Spark ``local[1]`` and ``local[2]``, on the same Parquet rows.

A synthetic binary task of 30 features (``large_data.synthetic_classification``; parts of
500,000 rows, each after the first with noise of its own seed) is written as Parquet; a MinMaxScaler
+ random forest (100 trees, depth 3) is fitted on 20,000 rows and read as our Ensemble,
and a depth-3 decision tree fitted to its labels stands in for the surrogate (the cost
is the ensemble's). Each configuration runs in its own process (OpenMP/BLAS threads 1)
and measures what ``gate --data`` measures on every row: the rows where surrogate and
ensemble agree, and the order-independent row-set digest:

- ``pandas``: the Parquet parts read in 100,000-row batches (the streaming path of
  ``large_data.py``), :func:`governance.data.spark.predict.model_inputs`/``agreeing``
  and :func:`governance.data.tables.row_hash_sum` on each;
- ``local[k]``: :func:`governance.data.spark.predict.agreement` and
  :func:`governance.data.spark.measures.row_set_digest` on ``spark.read.parquet``.

Figures: wall seconds and rows per wall second, CPU seconds of every process (the
driver, the JVM and its Python workers, read from ``/proc`` before the session stops),
and the peak resident memory of that process tree (sampled every 0.2 s). Each finished
row is appended to ``results_spark_scale.md`` at once; a configuration already there is
skipped (``--resume``).

Run from the repository root, quietly: ``nice -n 10 .venv/bin/python
examples/benchmarks/spark_scale.py --rows 1000000 10000000``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

THREADS = {v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
os.environ.update(THREADS)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from large_data import N_FEATURES, synthetic_classification

RESULTS = Path(__file__).with_name("results_spark_scale.md")
CHUNK = 500_000
BATCH = 100_000
CONFIGS = ("pandas", "local[1]", "local[2]")
HEADER = (
    "| rows | engine | wall s | rows/s | CPU s (all processes) | peak RSS MiB | agreeing "
    "| row-set digest |\n|---:|---|---:|---:|---:|---:|---:|---|\n"
)
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def write_parts(folder: Path, rows: int) -> Path:
    """``rows`` synthetic rows as Parquet parts of :data:`CHUNK` rows (kept for reuse): the
    first part the benchmarks' task, each other one its rows with 1% noise of their own."""
    target = folder / f"rows-{rows}"
    if (target / "_DONE").exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    names = [f"x{j:02d}" for j in range(N_FEATURES)]
    base, _ = synthetic_classification(min(CHUNK, rows))
    for part, start in enumerate(range(0, rows, CHUNK)):
        X = base[: min(CHUNK, rows - start)]
        if part:
            X = X * (1 + 0.01 * np.random.default_rng(part).standard_normal(X.shape))
        X = X * np.linspace(1, 100, N_FEATURES) + np.linspace(0, 500, N_FEATURES)
        pd.DataFrame(X, columns=names).to_parquet(target / f"part-{part:05d}.parquet", index=False)
    (target / "_DONE").touch()
    return target


def models(parts: Path):
    """The Ensemble (MinMaxScaler + RF 100 x depth 3 on 20,000 rows) and the stand-in tree."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler
    from sklearn.tree import DecisionTreeClassifier

    from miret_governance.governance.ensembles.readers.reading import read_ensemble

    first = pd.read_parquet(min(parts.glob("part-*.parquet")))
    sample = first.iloc[:20_000]
    _, y = synthetic_classification(len(first))  # the first part's labels
    forest = make_pipeline(
        MinMaxScaler(), RandomForestClassifier(n_estimators=100, max_depth=3, random_state=0)
    ).fit(sample, y[:20_000])
    ensemble = read_ensemble(forest, native=True)
    working = ensemble.transform(sample)
    tree = DecisionTreeClassifier(max_depth=3, random_state=0)
    return ensemble, tree.fit(working, ensemble.predict(working))


def _tree_pids(root: int) -> list[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = [root], [root]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        tree += children
        frontier = children
    return tree


def _stat(pid: int) -> tuple[float, int]:
    """CPU seconds and resident bytes of ``pid`` (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0
    return (int(fields[11]) + int(fields[12])) / TICKS, int(fields[21]) * PAGE


class TreeMeter:
    """Peak resident memory of this process and its descendants, sampled in a thread."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, sum(_stat(p)[1] for p in _tree_pids(os.getpid())))

    def cpu(self) -> float:
        """CPU seconds of the live tree."""
        return sum(_stat(p)[0] for p in _tree_pids(os.getpid()))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def measure(config: str, parts: Path) -> dict:
    """One configuration, in this process."""
    from miret_governance.governance.data import tables
    from miret_governance.governance.data.spark.predict import agreeing, model_inputs

    ensemble, tree = models(parts)
    meter = TreeMeter()
    start, cpu0 = time.perf_counter(), meter.cpu()
    if config == "pandas":
        import pyarrow.parquet as pq

        rows = agree = total = 0
        names = None
        for part in sorted(parts.glob("part-*.parquet")):
            for batch in pq.ParquetFile(part).iter_batches(batch_size=BATCH):
                frame = batch.to_pandas()
                names = names or list(frame.columns)
                agree += agreeing(ensemble, tree, None, model_inputs(ensemble, frame, "rows"))
                total += tables.row_hash_sum(frame, tables.numeric_columns(frame))
                rows += len(frame)
        digest = tables.row_set_digest_of(
            names, (True,) * len(names), rows, total % tables.ROW_SET_MODULUS
        )
        cpu = meter.cpu() - cpu0
    else:
        from pyspark.sql import SparkSession

        from miret_governance.governance.data.spark import measures, predict

        spark = (
            SparkSession.builder.master(config)
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        frame = spark.read.parquet(str(parts))
        counted = predict.agreement(frame, ensemble, tree, None, "rows")
        rows, agree = counted.rows, counted.agreeing
        digest = measures.row_set_digest(frame)
        cpu = meter.cpu() - cpu0  # before the JVM and its workers are gone
        spark.stop()
    wall = time.perf_counter() - start
    return {
        "rows": rows,
        "engine": config,
        "wall": wall,
        "cpu": cpu,
        "peak": meter.stop(),
        "agreeing": agree,
        "digest": digest,
    }


def done_rows(results: Path) -> set:
    """``(rows, engine)`` of the rows already in ``results``."""
    if not results.exists():
        return set()
    found = set()
    for line in results.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 8 and cells[0].replace(",", "").isdigit():
            found.add((int(cells[0].replace(",", "")), cells[1]))
    return found


def append(results: Path, result: dict) -> None:
    """One row of the table (its header first, when ``results`` has none)."""
    if not results.exists() or "| rows | engine |" not in results.read_text():
        with results.open("a") as f:
            f.write(HEADER)
    with results.open("a") as f:
        f.write(
            f"| {result['rows']:,} | {result['engine']} | {result['wall']:.1f} | "
            f"{result['rows'] / result['wall']:,.0f} | {result['cpu']:.1f} | "
            f"{result['peak'] / 2**20:,.0f} | {result['agreeing']:,} | {result['digest']} |\n"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--folder", type=Path, default=Path("/tmp/spark-scale"))
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: "config parts"
    args = parser.parse_args()
    if args.one:
        config, parts = args.one.split(" ", 1)
        print(json.dumps(measure(config, Path(parts))))
        return
    for rows in args.rows:
        parts = write_parts(args.folder, rows)
        for config in args.configs:
            if (rows, config) in done_rows(args.results):
                continue
            done = subprocess.run(
                [sys.executable, __file__, "--one", f"{config} {parts}"],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise SystemExit(f"{config} on {rows:,} rows failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            append(args.results, result)
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
