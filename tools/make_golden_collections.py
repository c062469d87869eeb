"""Make the golden collections of format 1.3 (segments that carry their own copy of the model) and their expected
search results, reproducibly -- with a version of ockstore whose collections write format 1.3 (before segments
referred to the collection's quantizer file, format 1.4: docs/FORMAT.md section 18).

    python tools/make_golden_collections.py [--out tests/data]

Writes into ``--out`` (default: tests/data of this repository):

    golden_collection_v13/         a collection of a fitted OCKM (P=12, M=3, C=2, T=2, K=16: fast-scan segments),
                                   float32 stored vectors, u8 norm term: three adds (three segments, each holding its
                                   own model), then a delete (a deletion file); vacuumed to one generation
    golden_collection_ivf_v13/     a cosine collection that trained its own IVF (4 lists over OCKM M=3, C=2, T=2,
                                   K=16), float16 stored vectors: two adds of stored vectors, the training commit of
                                   the second (quantizer.<G>.ockq, segments with their own copy of the IVF), one more
                                   add, an upsert and a delete; vacuumed to one generation
    golden_collections.npz         for each (prefix "flat_" and "ivf_"): Q (10, 12) float32 queries, D, I (the
                                   default search, re-ranked from the stored vectors, k = 10) and D0, I0 (rerank=0:
                                   by codes; the IVF at n_probe 2)

tests/collection/test_collection_models.py opens copies of the committed folders with today's reader and requires
these results (ids exactly, values to 1e-5), then adds to them: the old self-contained segments and the new ones by
reference live side by side. The queries are chosen so that the 11 best values of each are separated by a relative
gap of at least 1e-4 (the expected neighbours do not depend on the rounding of another machine). Do not regenerate
the committed folders: they stand for what earlier versions wrote.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":  # the repository's ockstore
    sys.path.insert(0, REPO)

import ockstore  # noqa: E402

SEED = 20261203
P, M, C, T, K = 12, 3, 2, 2, 16
N_QUERIES, N_CANDIDATES, TOP_K, N_PROBE = 10, 200, 10, 2
MIN_GAP = 1e-4
FLAT, IVF = "golden_collection_v13", "golden_collection_ivf_v13"
RESULTS = "golden_collections.npz"


def _separated(D):
    D = np.abs(D.astype(np.float64))
    D = np.sort(D)
    gaps = np.diff(D)
    return bool((gaps >= MIN_GAP * np.maximum(1.0, D[:-1])).all())


def _draw(rng, n, centres):
    scales = np.linspace(1.0, 0.3, P)
    return (centres[rng.integers(0, len(centres), size=n)] + rng.normal(size=(n, P)) * scales).astype(np.float32)


def _queries(collection, candidates, probe):
    chosen = []
    for x in candidates:
        if all(_separated(collection.search(x, TOP_K + 1, rerank=r, n_threads=1, **probe)[0]) for r in (None, 0)):
            chosen.append(x)
        if len(chosen) == N_QUERIES:
            break
    if len(chosen) < N_QUERIES:
        raise SystemExit(f"only {len(chosen)} well-separated queries among {len(candidates)} candidates")
    return np.ascontiguousarray(chosen)


def _results(folder, candidates, probe):
    with ockstore.open_collection(folder) as c:
        c.verify()
        Q = _queries(c, candidates, probe)
        D, I = c.search(Q, TOP_K, n_threads=1)
        D0, I0 = c.search(Q, TOP_K, rerank=0, n_threads=1, **probe)
    return {"Q": Q, "D": D, "I": I, "D0": D0, "I0": I0}


def make_flat(out, rng, centres):
    folder = os.path.join(out, FLAT)
    q = ockstore.OCKM(M, C, T, n_codewords=K, n_iter=8, seed=7, n_threads=1).fit(_draw(rng, 1000, centres))
    with ockstore.create_collection(folder, q, store_vectors="float32", metadata={"golden": FLAT}) as c:
        for _ in range(3):
            c.add(_draw(rng, 40, centres), n_threads=1)
        c.delete([3, 17, 41, 77, 100])
        c.vacuum(keep_generations=1)
        assert len(c.info()["segment_files"]) == 3 and c.info()["deleted"] == 5
    return _results(folder, _draw(rng, N_CANDIDATES, centres), {})


def make_ivf(out, rng, centres):
    folder = os.path.join(out, IVF)
    ivf = ockstore.IVF(4, ockstore.OCKM(M, C, T, n_codewords=K, n_iter=8, metric="cosine", seed=7, n_threads=1),
                       n_iter=8, seed=9, n_threads=1)
    with ockstore.create_collection(folder, ivf, store_vectors="float16", train_size=64,
                                    metadata={"golden": IVF}) as c:
        c.add(_draw(rng, 40, centres), n_threads=1)
        assert not c.trained
        c.add(_draw(rng, 40, centres), n_threads=1)  # crosses train_size: the training commit
        assert c.trained and c.info()["quantizer_file"] != "quantizer.ockq"
        c.add(_draw(rng, 30, centres), n_threads=1)
        c.upsert(_draw(rng, 3, centres), [5, 60, 500])
        c.delete([2, 44, 90])
        c.vacuum(keep_generations=1)
        assert len(c.info()["segment_files"]) >= 2 and c.info()["deleted"] > 0
    return _results(folder, _draw(rng, N_CANDIDATES, centres), {"n_probe": N_PROBE})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(REPO, "tests", "data"), help="output folder")
    args = parser.parse_args(argv)
    for name in (FLAT, IVF):
        shutil.rmtree(os.path.join(args.out, name), ignore_errors=True)
    rng = np.random.default_rng(SEED)
    centres = rng.normal(scale=3.0, size=(6, P))
    arrays = {}
    for prefix, maker in (("flat_", make_flat), ("ivf_", make_ivf)):
        for key, value in maker(args.out, rng, centres).items():
            arrays[prefix + key] = value
    np.savez(os.path.join(args.out, RESULTS), **arrays)
    for name in (FLAT, IVF):
        folder = os.path.join(args.out, name)
        os.remove(os.path.join(folder, "writer.lock"))  # made again by the first writer; not part of the data
        for file in sorted(os.listdir(folder)):
            print(f"wrote {os.path.join(name, file)} ({os.path.getsize(os.path.join(folder, file))} bytes)")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
