"""The subcommands of ``ockstore``: each takes the parsed arguments and the output stream, returns an exit status.

Only ockstore's public API is used here. Errors are raised, not printed: ``ockstore.cli.main`` turns them into the
one-line message and the exit status of docs/ARCHITECTURE.md ("Command line").
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

import ockstore
from ockstore import evaluation, vecfiles
from ockstore.errors import FormatError

from .collections import COMMANDS as COLLECTION_COMMANDS, build_distributed
from .inputs import CommandError, base_ids, check_dim, check_output, iter_base, read_allowed_ids, read_vectors
from .options import make_quantizer
from .output import (
    distances_path, fmt_bytes, jsonable, print_info, print_results, write_distances, write_ids,
)
from .progress import Progress, progress_enabled, rate_text

__all__ = ["COMMANDS"]

# Queries searched per call when a progress bar is shown: a query gets the same results alone or in a batch, so
# searching in slices only changes how often the bar moves.
SEARCH_BATCH = 1024

# Bytes per component of the vectors stored by `build --store-vectors`.
STORED_VECTOR_BYTES = {"float16": 2, "float32": 4, "uint8": 1, "sq8": 1}


def _check_rerank_vectors(index, args):
    """--rerank needs vectors stored in the index: say how to get them (the library's message names its API)."""
    if args.rerank and index.store_vectors is None:
        if isinstance(index, ockstore.Collection):
            raise CommandError(f"{args.index}: the collection stores no vectors, --rerank needs them; make one that "
                               "does with 'ockstore create ... --store-vectors float32' (or float16, uint8, sq8) and add "
                               "the vectors to it")
        raise CommandError(f"{args.index}: the index stores no vectors, --rerank needs them; rebuild it with "
                           "'ockstore build ... --store-vectors float32' (or float16, uint8, sq8)")


def _rerank_text(rerank, k, store_vectors):
    """How the search re-ranks, for the summary lines: the option given, or the library's default."""
    if rerank is None:
        return f", rerank {10 * k} (default)" if store_vectors is not None else ", no rerank"
    return f", rerank {rerank}" if rerank else ", no rerank"


def _open_index(path):
    """open_index (or open_collection, read-only, for a folder), with a clearer message when the file is a quantizer
    file (a common slip on the command line). Both give an object with the same search, info, verify, dim, metric,
    store_vectors and ntotal."""
    if os.path.isdir(path):
        return ockstore.open_collection(path, "r")
    try:
        return ockstore.open_index(path)
    except FormatError as exc:
        try:
            ockstore.load_quantizer(path)
        except (FormatError, OSError, ValueError):
            raise exc from None
        raise CommandError(f"{os.fspath(path)}: a quantizer file, not an index file; make an index with "
                           f"'ockstore build {os.fspath(path)} BASE_FILE -o INDEX_FILE'") from None



# -------------------------------------------------------------------------------------------------------- commands
def train(args, out):
    check_output(args.output, "-o/--output")
    q = make_quantizer(args)
    fine = q.quantizer if args.lists is not None else q

    t0 = time.perf_counter()
    X = read_vectors(args.learn, "learn vectors", args.limit)
    t_read = time.perf_counter() - t0
    n, dim = X.shape
    t0 = time.perf_counter()
    q.fit(X)
    t_fit = time.perf_counter() - t0
    meta = dict(args.metadata)
    ockstore.save_quantizer(args.output, q, metadata=meta or None)
    hist = fine.objective_history
    params = f"M={fine.n_subspaces}"
    if "n_codebooks" in fine.get_params():
        params += f" C={fine.n_codebooks}"
    if "beam_width" in fine.get_params():
        params += f" T={fine.beam_width}"
    params += f" K={fine.n_codewords}"
    what = f"{type(fine).__name__} {params} ({fine.bits} bits, metric {fine.metric})"
    if fine is not q:
        what = f"IVF of {q.n_lists:,} lists over {what}"
    print(f"trained {what} on {n:,} vectors of dim {dim} in {t_fit:.1f} s (read {t_read:.1f} s)", file=out)
    if fine is not q:
        coarse = q.coarse_objective_history
        print(f"coarse k-means: {len(coarse) - 1} iterations; mean squared distance to the nearest centroid "
              f"{coarse[0]:.6g} -> {coarse[-1]:.6g}", file=out)
    residuals = " of the residuals" if fine is not q else ""
    print(f"{len(hist) - 1} iterations ({fine.stop_reason}); objective (mean squared error{residuals}): "
          f"{hist[0]:.6g} at init -> {hist[-1]:.6g} final", file=out)
    print(f"wrote {args.output}", file=out)
    return 0


def build(args, out):
    if args.workers is not None or args.scheduler is not None:
        return build_distributed(args, out)  # a collection folder, on a Dask cluster
    check_output(args.output, "-o/--output")
    q = ockstore.load_quantizer(args.quantizer)
    owner = f"the quantizer of {args.quantizer}"
    show = progress_enabled(args)
    ids, total = base_ids(args, q.dim, owner, show)
    meta = dict(args.metadata)
    t0 = time.perf_counter()
    bar = Progress(total, "build", enabled=show)
    try:
        with ockstore.IndexWriter(args.output, q, norm_encoding=args.norm_encoding, store_vectors=args.store_vectors,
                                  metadata=meta or None, n_threads=args.threads) as writer:
            for chunk, chunk_ids, first_row in iter_base(args, ids, q.dim, owner):
                writer._add(chunk, chunk_ids, first_row)  # a refused row is named by its row in the file
                bar.update(chunk.shape[0])
            n = writer.ntotal
    except BaseException:
        bar.abort()
        raise
    bar.close()
    elapsed = time.perf_counter() - t0
    size = os.path.getsize(args.output)
    with ockstore.open_index(args.output) as index:
        info = index.info()
    rate = n / elapsed if elapsed > 0 else float("inf")
    norm = {"u8": " + 1 norm byte", "f32": " + 4 norm bytes"}.get(info["norm_encoding"], "")
    stored = info.get("store_vectors")
    vectors = (f" + {info['P'] * STORED_VECTOR_BYTES[stored]} bytes/vector of stored {stored} vectors"
               if stored else "")
    lists = ""
    if "n_lists" in info:
        sizes = info["list_sizes"]
        lists = (f"IVF of {info['n_lists']:,} lists ({sizes['min']:,} to {sizes['max']:,} vectors, {sizes['empty']} "
                 "empty), ")
    print(f"wrote {args.output}: {n:,} vectors, {lists}{info['method'].upper()} {info['bits']} bits, metric "
          f"{info['metric']}, {info['bytes_per_vector']} bytes/vector ({-(-info['bits'] // 8)} code bytes{norm})"
          f"{vectors}, {fmt_bytes(size)}, {elapsed:.1f} s ({rate_text(rate)} vectors/s)", file=out)
    return 0


def _check_probe(index, args):
    """--probe needs an inverted-file index, and at most its number of lists."""
    if args.probe is None:
        return
    n_lists = index.info().get("n_lists")
    if n_lists is None:
        raise CommandError(f"{args.index}: a flat index scans every code; --probe applies to inverted-file indexes "
                           "(made with 'ockstore train --lists N')")
    if args.probe > n_lists:
        raise CommandError(f"--probe {args.probe}: {args.index} has {n_lists:,} lists (--probe {n_lists} scans "
                           "them all)")


def _search_all(index, Q, k, distance, threads, show, label="search", rerank=None, allow=None, n_probe=None):
    """Search every query, in slices of SEARCH_BATCH when a progress bar is shown; returns (D, I, seconds)."""
    nq = Q.shape[0]
    options = {"distance": distance, "rerank": rerank, "allow": allow, "n_threads": threads}
    if n_probe is not None:
        options["n_probe"] = n_probe
    t0 = time.perf_counter()
    if not show or nq <= SEARCH_BATCH:
        D, I = index.search(Q, k, **options)
        return D, I, time.perf_counter() - t0
    D = np.empty((nq, k), dtype=np.float32)
    I = np.empty((nq, k), dtype=np.int64)
    bar = Progress(nq, label, unit="queries", enabled=True)
    try:
        for s in range(0, nq, SEARCH_BATCH):
            D[s:s + SEARCH_BATCH], I[s:s + SEARCH_BATCH] = index.search(Q[s:s + SEARCH_BATCH], k, **options)
            bar.update(min(SEARCH_BATCH, nq - s))
    except BaseException:
        bar.abort()
        raise
    bar.close()
    return D, I, time.perf_counter() - t0


def _load_queries(args, index, path):
    Q = read_vectors(path, "queries", args.limit)
    check_dim(path, "queries", Q.shape[1], index.dim, f"the index {args.index}")
    if Q.shape[0] == 0:
        raise CommandError(f"{path}: no queries (the file holds zero vectors)")
    return Q


def search(args, out):
    if args.output is not None:
        check_output(args.output, "-o/--output")
    with _open_index(args.index) as index:
        _check_rerank_vectors(index, args)
        _check_probe(index, args)
        metric, stored = index.metric, index.store_vectors
        Q = _load_queries(args, index, args.queries)
        allow = read_allowed_ids(args.allow) if args.allow is not None else None
        D, I, elapsed = _search_all(index, Q, args.k, args.distance, args.threads, progress_enabled(args),
                                    rerank=args.rerank, allow=allow, n_probe=args.probe)
    nq = Q.shape[0]
    if args.output is None:
        print_results(out, D, I, metric=metric)
        return 0
    write_ids(args.output, I)
    written = [args.output]
    if args.distances:
        dpath = distances_path(args.output)
        write_distances(dpath, D)
        written.append(dpath)
    ms = 1000.0 * elapsed / nq if nq else 0.0
    how = args.distance + _rerank_text(args.rerank, args.k, stored)
    if args.probe is not None:
        how += f", probe {args.probe}"
    if allow is not None:
        how += f", {len(allow):,} allowed ids"
    print(f"searched {nq:,} queries, k={args.k}, {how}, metric {metric} in {elapsed:.2f} s ({ms:.3f} ms/query); "
          "wrote " + " and ".join(written), file=out)
    return 0






def _file_info(path):
    """info() of an index file or a collection folder, or the description of a quantizer file (ockstore.file_info)."""
    if os.path.isdir(path):
        with ockstore.open_collection(path, "r") as collection:
            return collection.info()
    info = ockstore.file_info(path)
    if info["kind"] == "index":
        del info["kind"]  # `ockstore info` prints what Index.info() gives for an index
    return info


def info(args, out):
    described = _file_info(args.file)
    if args.json:
        print(json.dumps(jsonable(described), indent=2, sort_keys=False), file=out)
    else:
        print_info(out, described)
    return 0


def verify(args, out):
    with _open_index(args.index) as index:
        index.verify()
        n = index.ntotal
        where = args.index
        if isinstance(index, ockstore.Collection):
            where = f"{args.index}: generation {index.generation}, {len(index.info()['segment_files'])} segments"
    print(f"ok: {n:,} vectors ({where})", file=out)
    return 0


def evaluate(args, out):
    with _open_index(args.index) as index:
        info = index.info()
        if args.base is not None and info["metric"] != "l2":
            # The mean overall ratio is a ratio of Euclidean distances: meaningless for an index ranked by scores.
            args.subparser.error(f"argument --base: the mean overall ratio is an l2 measure, but {args.index} has "
                                 f"metric {info['metric']}; leave out --base")
        _check_rerank_vectors(index, args)
        _check_probe(index, args)
        Q = _load_queries(args, index, args.queries)
        gt = read_vectors(args.groundtruth, "ground truth", args.limit)
        if gt.dtype.kind not in "iu":
            raise CommandError(f"{args.groundtruth}: ground truth must hold integer ids (.ivecs), got {gt.dtype}")
        if gt.shape[0] != Q.shape[0]:
            raise CommandError(f"{args.groundtruth}: {gt.shape[0]:,} ground-truth rows for {Q.shape[0]:,} queries "
                               f"in {args.queries}")
        if gt.size and int(gt[:, 0].min()) < 0:
            raise CommandError(f"{args.groundtruth}: column 0 must hold the nearest neighbour's id (>= 0)")
        base = None
        if args.base is not None:
            base = vecfiles.read_vecs(args.base)
            check_dim(args.base, "base vectors", base.shape[1], index.dim, f"the index {args.index}")
            if base.shape[0] != info["N"]:
                raise CommandError(f"{args.base}: {base.shape[0]:,} base vectors, but the index holds "
                                   f"{info['N']:,}: the mean overall ratio needs the base the index was built from")
        D, I, elapsed = _search_all(index, Q, args.k, args.distance, args.threads, progress_enabled(args),
                                    rerank=args.rerank, n_probe=args.probe)
    nq = Q.shape[0]
    result = {"index": args.index, "method": info["method"], "metric": info["metric"], "bits": info["bits"],
              "N": info["N"], "queries": nq, "k": args.k, "distance": args.distance, "rerank": args.rerank}
    if "n_lists" in info:
        result["n_lists"] = info["n_lists"]
        result["n_probe"] = args.probe if args.probe is not None else info["default_n_probe"]
    for r in args.recalls:
        result[f"recall@{r}"] = evaluation.recall_at_r(I, gt, r)
    if args.k >= 10 and gt.shape[1] >= 10:
        result["10-recall@10"] = evaluation.k_recall_at_k(I, gt, 10)
    if base is not None:
        if int(I[:, :10].min()) < 0:
            raise CommandError("the index holds fewer than 10 vectors: no mean overall ratio at 10")
        if gt.shape[1] < 10:
            raise CommandError(f"{args.groundtruth}: {gt.shape[1]} neighbours per query; the mean overall ratio at "
                               "10 needs at least 10")
        if int(I.max()) >= base.shape[0]:
            raise CommandError(f"{args.index}: ids are not base row numbers (the index has user ids?)")
        result["mean_overall_ratio@10"] = evaluation.mean_overall_ratio(Q, base, I, gt, 10)
    result["ms_per_query"] = 1000.0 * elapsed / nq
    result["threads"] = args.threads
    if args.json:
        print(json.dumps(result, indent=2), file=out)
        return 0
    ivf = f"IVF {info['n_lists']:,} lists, " if "n_lists" in info else ""
    print(f"index:    {args.index} ({ivf}{info['method'].upper()}, {info['bits']} bits, metric {info['metric']}, "
          f"{info['N']:,} vectors)", file=out)
    rerank = _rerank_text(args.rerank, args.k, info["store_vectors"])
    probe = f", probe {result['n_probe']} of {result['n_lists']:,} lists" if "n_lists" in result else ""
    print(f"queries:  {nq:,} from {args.queries}, k={args.k}, {args.distance}{rerank}{probe}", file=out)
    width = max(len(f"recall@{r}") for r in args.recalls)
    width = max(width, len("ms/query"), len("MOR@10") if base is not None else 0)
    width = max(width, len("10-recall@10") if "10-recall@10" in result else 0)
    for r in args.recalls:
        print(f"{f'recall@{r}':<{width}}  {result[f'recall@{r}']:.4f}" + (
            "   (the nearest neighbour among the first R)" if r == args.recalls[0] else ""), file=out)
    if "10-recall@10" in result:
        print(f"{'10-recall@10':<{width}}  {result['10-recall@10']:.4f}   (the true 10 nearest among the first 10, "
              "on average)", file=out)
    if base is not None:
        print(f"{'MOR@10':<{width}}  {result['mean_overall_ratio@10']:.4f}   (mean overall ratio at 10; 1 is exact)",
              file=out)
    threads = "all cores" if args.threads is None else f"{args.threads} thread{'s' if args.threads > 1 else ''}"
    print(f"{'ms/query':<{width}}  {result['ms_per_query']:.3f}   ({nq:,} queries in {elapsed:.2f} s, {threads})",
          file=out)
    return 0


# The subcommands by name (argparse's ``args.command``).
def tune(args, out):
    """`ockstore tune`: ockstore.tune on the queries, its keywords printed as the search options that set them."""
    with _open_index(args.index) as index:
        if isinstance(index, ockstore.Collection):
            raise CommandError(f"{args.index}: tune takes an index file, not a collection folder")
        Q = _load_queries(args, index, args.queries)
        gt = None if args.groundtruth is None else read_vectors(args.groundtruth, "ground truth", args.limit)
        try:
            found = ockstore.tune(index, Q, k=args.k, target_recall=args.target, ground_truth=gt,
                                  n_threads=args.threads)
        except (ValueError, TypeError) as exc:
            raise CommandError(f"{args.index}: {exc}") from None
    if args.json:
        print(json.dumps({"options": dict(found), "recall": found.recall, "seconds_per_query": found.seconds_per_query,
                          "measurements": found.measurements}, indent=2), file=out)
        return 0
    flags = " ".join(f"--{'probe' if key == 'n_probe' else key} {value}" for key, value in found.items())
    print(f"{flags}    (mean {args.k}-recall@{args.k} {found.recall:.4f} on {Q.shape[0]:,} queries, "
          f"{found.seconds_per_query * 1e6:.1f} us per query)", file=out)
    return 0


COMMANDS = {"train": train, "build": build, "search": search, "info": info, "verify": verify, "eval": evaluate,
            "tune": tune, **COLLECTION_COMMANDS}
