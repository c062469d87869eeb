"""Every SIMD level of the kernels gives bitwise the portable level's results (docs/ARCHITECTURE.md, "Kernels and
SIMD levels"), switched in this process (`_kernels._set_simd_level`) and in a fresh one by the environment variable
OCKSTORE_SIMD; the switch itself: names, errors, fallback.

`run_every_kernel` reaches each kernel of kernels/simd.h's table through the public API and the kernels module: training and
encoding (the encoder's selection, leaves, table products, minima, sums of squares; code_sums' per-word sums), query
tables and scans (ADC and SDC, each kind of table, a batch and a single query, a filter), the inverted file (coarse
assignment, probing by L2 and by inner product, in search and on its own, the scan of probed lists) and the vector
check (max_abs). The portable level computes the encoder's table products with exact fmaf here, as the other levels
do (`_set_exact_portable_tables`); where it uses BLAS instead (a CPU without FMA), tests/quantizers/test_beam_encoder.py
checks it against the reference. This file also runs as a script (`python test_kernels_simd.py OUT.npz`): the
subprocess half.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import ockstore
from ockstore import _kernels
from ockstore.quantizers.kmeans import CoarseTables

LEVELS = ("portable", "avx2", "avx512")


def runnable_levels():
    best = _kernels._best_simd_level()
    return LEVELS[:LEVELS.index(best) + 1]


def level_param(level):
    """A pytest parameter for `level`, skipped with a reason where this CPU cannot run it."""
    runs = level in runnable_levels()
    return pytest.param(level, marks=pytest.mark.skipif(not runs, reason=f"this CPU cannot run SIMD level {level} "
                                                                          f"(best: {_kernels._best_simd_level()})"))


def run_every_kernel():
    """A dict of named result arrays, every kernel of every kind at the level in use (a few seconds)."""
    previous = _kernels._set_exact_portable_tables(True)
    try:
        rng = np.random.default_rng(7)
        out = {}
        # Shapes: P not a multiple of any vector width, K = 256 (the vector paths), 100 and 24 (their fallbacks),
        # C = 1, 2, 3, beam widths 1, 5, 10 and 31 (next to the fast selection's limit), n not a multiple of 4.
        X = (rng.standard_normal((403, 21)) * 3).astype(np.float32)
        Q = (rng.standard_normal((9, 21)) * 3).astype(np.float32)
        models = {
            "pq": ockstore.PQ(3, n_codewords=24, n_iter=3, seed=1),
            "ckm": ockstore.CKM(3, n_codewords=100, n_iter=3, seed=2),
            "eckm": ockstore.ECKM(2, 3, n_codewords=64, n_iter=2, seed=3),
            "ockm": ockstore.OCKM(3, 2, 10, n_iter=3, seed=4),
            "ockm_c3": ockstore.OCKM(2, 3, 5, n_codewords=32, n_iter=2, seed=5),
            "ockm_t31": ockstore.OCKM(2, 2, 31, n_codewords=64, n_iter=2, seed=6),
            "ockm_ip": ockstore.OCKM(3, 2, 10, metric="ip", n_iter=2, seed=8),
            "ockm_cos": ockstore.OCKM(3, 2, 1, metric="cosine", n_iter=2, seed=9),
            # K <= 16: codes in fast-scan blocks, scanned by the byte shuffles of each level (n = 403: a last block
            # of 19 rows; W = 6 and 3: the pad column)
            "ockm_k16": ockstore.OCKM(3, 2, 10, n_codewords=16, n_iter=2, seed=11),
            "pq_k16": ockstore.PQ(3, n_codewords=16, n_iter=2, seed=12),
            "ockm_k16_ip": ockstore.OCKM(3, 2, 4, n_codewords=16, metric="ip", n_iter=2, seed=13),
            "ockm_k16_cos": ockstore.OCKM(3, 2, 4, n_codewords=16, metric="cosine", n_iter=2, seed=14),  # scales
        }
        for name, q in models.items():
            q.fit(X)
            out[f"{name}.codes"] = q.encode(X, n_threads=2)
            out[f"{name}.decoded"] = q.decode(out[f"{name}.codes"])
            index = ockstore.Index.from_vectors(q, X)
            allow = np.arange(0, X.shape[0], 3)
            for distance in ("adc", "sdc"):
                for tag, queries in (("batch", Q), ("one", Q[0])):
                    D, I = index.search(queries, 7, distance=distance, n_threads=2)
                    out[f"{name}.{distance}.{tag}.D"], out[f"{name}.{distance}.{tag}.I"] = D, I
                D, I = index.search(Q, 5, distance=distance, allow=allow, n_threads=1)
                out[f"{name}.{distance}.allow.D"], out[f"{name}.{distance}.allow.I"] = D, I
        for metric, K in (("l2", 256), ("ip", 256), ("l2", 16)):
            ivf = ockstore.IVF(8, ockstore.OCKM(3, 2, 10, n_codewords=K, metric=metric, n_iter=2, seed=10),
                               n_iter=4).fit(X)
            name = f"ivf.{metric}" + ("" if K == 256 else f".k{K}")
            for j, part in enumerate(ivf.encode(X)):  # (list ids, codes)
                out[f"{name}.encoded.{j}"] = part
            index = ockstore.IVFIndex.from_vectors(ivf, X)
            D, I = index.search(Q, 6, n_probe=3, n_threads=2)
            out[f"{name}.D"], out[f"{name}.I"] = D, I
        # the coarse step on its own: groups of queries (9: full groups and a last one of 1), blocks of lists of
        # each width and single lists (L = 300: a full panel and one of 44 lists); n_probe = L gives every inner
        # product as a term
        coarse = CoarseTables(rng.standard_normal((300, 21)).astype(np.float32))  # a panel and a narrow one
        ct, c_sqnorms = coarse.panels, coarse.sqnorms
        for kind, factor, n_probe in ((_kernels.PROBE_L2, -2.0, 5), (_kernels.PROBE_IP, -1.0, 300)):
            lists = np.empty((9, n_probe), dtype=np.int32)
            terms = np.empty((9, n_probe), dtype=np.float32)
            _kernels.probe(Q, ct, c_sqnorms, kind, factor, lists, terms, 2)
            out[f"probe.{kind}.lists"], out[f"probe.{kind}.terms"] = lists, terms
        for n in (0, 1, 7, 64, 1001):
            v = rng.standard_normal(n).astype(np.float32)
            out[f"max_abs.{n}"] = np.float32(_kernels.max_abs(v))
            if n:
                v[n // 2] = np.inf if n % 2 else np.nan
                out[f"max_abs.{n}.nonfinite"] = np.float32(_kernels.max_abs(v))
        return out
    finally:
        _kernels._set_exact_portable_tables(previous)


def assert_same(results, reference, level):
    assert results.keys() == reference.keys()
    for name, want in reference.items():
        got = results[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        # bitwise: compare the bytes (NaN == NaN, -0.0 != +0.0)
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), f"{name} differs at level {level}"


@pytest.fixture(scope="module")
def portable_results():
    previous = _kernels._set_simd_level("portable")
    try:
        return run_every_kernel()
    finally:
        _kernels._set_simd_level(previous)


@pytest.mark.parametrize("level", [level_param(level) for level in LEVELS])
def test_every_level_gives_the_portable_bits(level, portable_results):
    previous = _kernels._set_simd_level(level)
    try:
        assert _kernels.simd_level() == level
        assert_same(run_every_kernel(), portable_results, level)
    finally:
        _kernels._set_simd_level(previous)


@pytest.mark.parametrize("level", [level_param(level) for level in LEVELS])
def test_environment_variable_selects_the_level(level, portable_results, tmp_path):
    """OCKSTORE_SIMD=<level> in a fresh interpreter: that level runs, with the portable level's bits."""
    out = tmp_path / "results.npz"
    env = dict(os.environ, OCKSTORE_SIMD=level)
    subprocess.run([sys.executable, __file__, str(out)], env=env, check=True, cwd=tmp_path, timeout=600)
    with np.load(out) as saved:
        assert str(saved["__level__"]) == level
        results = {name: saved[name] for name in saved.files if name != "__level__"}
    assert_same(results, portable_results, level)


def simd_level_in_subprocess(value):
    """(returncode, stdout, stderr) of importing ockstore with OCKSTORE_SIMD=value and printing the level."""
    env = dict(os.environ, OCKSTORE_SIMD=value)
    done = subprocess.run([sys.executable, "-c", "import ockstore, ockstore._kernels as k; print(k.simd_level())"],
                          env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout.strip(), done.stderr


def test_unknown_level_in_the_environment_is_an_import_error():
    code, _, err = simd_level_in_subprocess("sse9")
    assert code != 0
    assert "ImportError: OCKSTORE_SIMD='sse9' is not a SIMD level: use one of portable, avx2, avx512" in err


def test_a_level_the_cpu_lacks_falls_back_to_the_best_it_has():
    best = _kernels._best_simd_level()
    for level in LEVELS:
        expected = level if level in runnable_levels() else best
        assert simd_level_in_subprocess(level)[:2] == (0, expected)
    assert simd_level_in_subprocess("")[:2] == (0, best)  # empty: as if unset


def test_set_simd_level_checks_its_argument_and_returns_the_previous_level():
    start = _kernels.simd_level()
    try:
        assert _kernels._set_simd_level("portable") == start
        assert _kernels._set_simd_level(start) == "portable"
        with pytest.raises(ValueError, match="name must be one of portable, avx2, avx512, got 'neon'"):
            _kernels._set_simd_level("neon")
        for level in LEVELS:
            if level not in runnable_levels():
                with pytest.raises(ValueError, match=f"this CPU cannot run SIMD level '{level}'"):
                    _kernels._set_simd_level(level)
        assert _kernels.simd_level() == start  # a refused level changes nothing
    finally:
        _kernels._set_simd_level(start)


def cpu_flags():
    """The CPU's feature flags as Linux reports them (an empty set elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


def test_detection_finds_the_levels_the_cpu_reports():
    """The level the build detects agrees with the kernel's view of the CPU (a detection that answers "no" to
    everything, as a toolchain's __builtin_cpu_supports once did, would leave every build at the portable level)."""
    flags = cpu_flags()
    if not flags or not ({"avx2", "fma", "avx512f"} & flags):
        pytest.skip("no x86 SIMD flags in /proc/cpuinfo")
    expected = "avx512" if {"avx512f", "avx2", "fma"} <= flags else "avx2" if {"avx2", "fma"} <= flags else "portable"
    assert _kernels._best_simd_level() == expected


def test_default_level_is_the_best_this_cpu_runs():
    if os.environ.get("OCKSTORE_SIMD"):
        pytest.skip("OCKSTORE_SIMD is set for this run")
    assert _kernels.simd_level() == _kernels._best_simd_level()
    assert _kernels.simd_level() in LEVELS


if __name__ == "__main__":
    results = run_every_kernel()
    np.savez(sys.argv[1], __level__=np.array(_kernels.simd_level()), **results)
