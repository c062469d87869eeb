"""Make the golden index files (format 1.0, and the inverted file of format 1.2) and their expected search results,
reproducibly.

    python tools/make_golden_index.py [--out tests/data] [--check] [--only v1|ivf]

Writes into ``--out`` (default: tests/data of this repository):

    golden_v1.ock            OCKM, P=12, M=3, C=2, T=4, K=16 (48-bit codes), 200 vectors with user ids, u8 norms
    golden_v1_queries.npy    (10, 12) float32 queries
    golden_v1_adc_D.npy      (10, 10) float32 and golden_v1_adc_I.npy (10, 10) int64: the ADC results (k = 10)
    golden_v1_sdc_D.npy      and golden_v1_sdc_I.npy: the SDC results
    golden_ivf.ock           IVF of 6 lists over OCKM (P=12, M=3, C=2, T=4, K=16), 300 vectors, user ids, u8 norms
    golden_ivf_queries.npy   (10, 12) float32 queries
    golden_ivf_D.npy         (3, 10, 10) float32 and golden_ivf_I.npy (3, 10, 10) int64: ADC at n_probe 2, ADC at
                             n_probe 6 (every list), SDC at n_probe 2 (k = 10)

Everything comes from one seeded NumPy Generator, trains and encodes on one thread, and the writer is canonical: a run
on the same machine reproduces the same bytes (``--check`` regenerates into a temporary folder and compares). The
queries are chosen among candidates so that the k + 1 nearest distances of each are separated by a relative gap of at
least 1e-4: the expected neighbours then do not depend on the rounding of another machine (for the inverted file, the
n_probe + 1 nearest lists of each query are separated alike, so the probed lists do not depend on it either).
tests/indexfile/test_index_file_checks.py (test_golden_v1_file_I14) and tests/indexfile/test_ivf_file.py
(test_golden_ivf_file_V10) open the committed files and compare: this pins format version 1 and its meaning
(docs/FORMAT.md I14, V10). Do not regenerate the committed files unless the format's major version changes.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":  # the repository's ockstore
    sys.path.insert(0, REPO)

import ockstore  # noqa: E402

SEED = 20261122
P, M, C, T, K = 12, 3, 2, 4, 16
N_BASE, N_LEARN, N_QUERIES, N_CANDIDATES, TOP_K = 200, 1000, 10, 60, 10
MIN_GAP = 1e-4
FILES = ["golden_v1.ock", "golden_v1_queries.npy", "golden_v1_adc_D.npy", "golden_v1_adc_I.npy",
         "golden_v1_sdc_D.npy", "golden_v1_sdc_I.npy"]
IVF_SEED = 20261124
IVF_LISTS, IVF_PROBE, IVF_BASE = 6, 2, 300
IVF_FILES = ["golden_ivf.ock", "golden_ivf_queries.npy", "golden_ivf_D.npy", "golden_ivf_I.npy"]
# (distance, n_probe) of the three results of golden_ivf_D.npy / golden_ivf_I.npy
IVF_RESULTS = [("adc", IVF_PROBE), ("adc", IVF_LISTS), ("sdc", IVF_PROBE)]


def _separated(D):
    """True when consecutive distances differ by at least MIN_GAP relative to their size."""
    gaps = np.diff(D.astype(np.float64))
    return bool((gaps >= MIN_GAP * np.maximum(1.0, np.abs(D[:-1]))).all())


def _well_separated(candidates, separated):
    """The first N_QUERIES candidates x for which ``separated(x)`` holds, C-contiguous (SystemExit when fewer do)."""
    chosen = []
    for i, x in enumerate(candidates):
        if separated(x):
            chosen.append(i)
        if len(chosen) == N_QUERIES:
            break
    if len(chosen) < N_QUERIES:
        raise SystemExit(f"only {len(chosen)} well-separated queries among {len(candidates)} candidates")
    return np.ascontiguousarray(candidates[chosen])


def _sampler(rng, n_centres):
    """draw(n): n float32 vectors around ``n_centres`` centres drawn from ``rng`` now, each dimension with its own
    spread (the draws come from ``rng`` too, in call order)."""
    centres = rng.normal(scale=3.0, size=(n_centres, P))
    scales = np.linspace(1.0, 0.2, P)

    def draw(n):
        return (centres[rng.integers(0, len(centres), size=n)] + rng.normal(size=(n, P)) * scales).astype(np.float32)

    return draw


def make(out):
    rng = np.random.default_rng(SEED)
    draw = _sampler(rng, 6)
    learn, base, candidates = draw(N_LEARN), draw(N_BASE), draw(N_CANDIDATES)
    ids = rng.choice(10**12, size=N_BASE, replace=False).astype(np.int64)  # distinct, in random order
    q = ockstore.OCKM(M, C, T, n_codewords=K, n_iter=10, seed=7, n_threads=1).fit(learn)
    path = os.path.join(out, "golden_v1.ock")
    ockstore.build_index(path, q, base, ids, norm_encoding="u8", n_threads=1,
                         metadata={"generator": "tools/make_golden_index.py", "seed": SEED,
                                   "purpose": "golden file of format version 1"})
    with ockstore.open_index(path) as index:
        index.verify()
        Q = _well_separated(candidates, lambda x: all(
            _separated(index.search(x, TOP_K + 1, distance=d, n_threads=1)[0]) for d in ("adc", "sdc")))
        np.save(os.path.join(out, "golden_v1_queries.npy"), Q)
        for distance in ("adc", "sdc"):
            D, I = index.search(Q, TOP_K, distance=distance, n_threads=1)
            np.save(os.path.join(out, f"golden_v1_{distance}_D.npy"), D)
            np.save(os.path.join(out, f"golden_v1_{distance}_I.npy"), I)
    return [os.path.join(out, name) for name in FILES]


def make_ivf(out):
    """The golden inverted file (format 1.2) and its expected results (see the module docstring)."""
    rng = np.random.default_rng(IVF_SEED)
    draw = _sampler(rng, 8)
    learn, base, candidates = draw(N_LEARN), draw(IVF_BASE), draw(4 * N_CANDIDATES)
    ids = rng.choice(10**12, size=IVF_BASE, replace=False).astype(np.int64)
    fine = ockstore.OCKM(M, C, T, n_codewords=K, n_iter=10, seed=7, n_threads=1)
    ivf = ockstore.IVF(IVF_LISTS, fine, n_iter=10, seed=9, n_threads=1).fit(learn)
    path = os.path.join(out, "golden_ivf.ock")
    ockstore.build_index(path, ivf, base, ids, norm_encoding="u8", n_threads=1,
                         metadata={"generator": "tools/make_golden_index.py", "seed": IVF_SEED,
                                   "purpose": "golden inverted file of format version 1.2"})
    centroids = ivf.centroids.astype(np.float64)

    def separated(x):
        keys = np.sort(((x.astype(np.float64) - centroids) ** 2).sum(axis=1))[:IVF_PROBE + 1]
        sdc = ivf.decode(*ivf.encode(x)).astype(np.float64)
        sdc_keys = np.sort(((sdc - centroids) ** 2).sum(axis=1))[:IVF_PROBE + 1]
        return _separated(keys.astype(np.float32)) and _separated(sdc_keys.astype(np.float32)) and all(
            _separated(index.search(x, TOP_K + 1, distance=d, n_probe=p, n_threads=1)[0]) for d, p in IVF_RESULTS)

    with ockstore.open_index(path) as index:
        index.verify()
        Q = _well_separated(candidates, separated)
        results = [index.search(Q, TOP_K, distance=d, n_probe=p, n_threads=1) for d, p in IVF_RESULTS]
    np.save(os.path.join(out, "golden_ivf_queries.npy"), Q)
    np.save(os.path.join(out, "golden_ivf_D.npy"), np.stack([D for D, _ in results]))
    np.save(os.path.join(out, "golden_ivf_I.npy"), np.stack([I for _, I in results]))
    return [os.path.join(out, name) for name in IVF_FILES]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(REPO, "tests", "data"), help="output folder")
    parser.add_argument("--check", action="store_true",
                        help="regenerate into a temporary folder and compare with the files in --out")
    parser.add_argument("--only", choices=("v1", "ivf"), default=None, help="make only these golden files")
    args = parser.parse_args(argv)
    makers = [(make, FILES), (make_ivf, IVF_FILES)]
    if args.only is not None:
        makers = [makers[0 if args.only == "v1" else 1]]
    if args.check:
        different = []
        with tempfile.TemporaryDirectory() as tmp:
            for maker, names in makers:
                maker(tmp)
                different += [name for name in names
                              if not filecmp.cmp(os.path.join(tmp, name), os.path.join(args.out, name), shallow=False)]
        print("identical" if not different else f"different: {', '.join(different)}")
        return 1 if different else 0
    os.makedirs(args.out, exist_ok=True)
    for maker, _names in makers:
        for path in maker(args.out):
            print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
