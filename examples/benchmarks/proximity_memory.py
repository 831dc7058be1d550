"""Peak memory and time of ``proximity_pairs`` for 20,000 samples x 100 trees.

A random forest of depth 4 is trained on synthetic data; peak memory is measured with
``tracemalloc`` (numpy and scipy allocations are traced) and, for the whole process,
with the resident-set high-water mark. Run: ``.venv/bin/python
examples/benchmarks/proximity_memory.py``.
"""

import resource
import time
import tracemalloc

from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.measures.vite import proximity_pairs

N_SAMPLES = 20_000
N_TREES = 100
THRESHOLDS = (1.0, 0.9, 0.5)


def main() -> None:
    X, y = make_classification(n_samples=N_SAMPLES, n_features=20, n_informative=8, random_state=0)
    forest = RandomForestClassifier(
        n_estimators=N_TREES, max_depth=4, random_state=0, n_jobs=-1
    ).fit(X, y)
    ensemble = read_ensemble(forest)
    dense_bytes = N_SAMPLES * N_SAMPLES * 8
    print(
        f"{N_SAMPLES} samples x {N_TREES} trees (depth 4); a dense n x n float64 "
        f"matrix would take {dense_bytes / 2**30:.2f} GiB"
    )
    for threshold in THRESHOLDS:
        tracemalloc.start()
        start, cpu_start = time.perf_counter(), time.process_time()
        pairs = proximity_pairs(ensemble, X, threshold)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        result_mib = (pairs.data.nbytes + pairs.indices.nbytes + pairs.indptr.nbytes) / 2**20
        print(
            f"threshold {threshold:4}: {pairs.nnz:>11,} pairs, {elapsed:6.2f} s "
            f"(CPU {cpu:6.2f} s), "
            f"peak traced memory {peak / 2**20:7.1f} MiB (result itself {result_mib:.1f} MiB)"
        )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    print(f"process peak resident memory (whole run, incl. training): {rss:.0f} MiB")


if __name__ == "__main__":
    main()
