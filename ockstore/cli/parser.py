"""The argument parser of the ``ockstore`` command: subcommands, options, and the checks that need several options
together (all usage errors: exit status 2 with argparse's usage line).

The quantizer options (options.add_quantizer_options: train, and create without a quantizer file) are checked by the
library's own parameter rules (``ockstore.quantizers.PARAMETERS``), and a method takes exactly the options its class's
constructor takes (``ockstore.quantizers.METHODS``).
"""

from __future__ import annotations

import argparse

import ockstore

from . import output
from .collections import add_parsers
from .options import (
    DEFAULT_CHUNK, ID_FILES, QUANTIZER_OPTIONS, STORE_VECTORS, VECTOR_FILES, Formatter, add_command, add_metadata,
    add_probe, add_progress, add_quantizer_options, add_rerank, add_threads, check_quantizer_options, method_defaults,
    positive, wrap,
)

__all__ = ["build_parser", "check_args", "PROG"]

PROG = "ockstore"


def build_parser():
    """The argument parser of the ``ockstore`` command (exposed for documentation and tests)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        formatter_class=Formatter,
        description=wrap("Build, store and search compact-code vector indexes with Optimized Cartesian K-Means (OCKM) "
                         "and its baselines PQ, CKM and ECKM."),
        epilog="""\
example:
  ockstore train sift_learn.bvecs.gz -o sift.ockq --method ockm --subspaces 4 --codebooks 2
  ockstore build sift.ockq sift_base.bvecs.gz -o sift.ock
  ockstore eval sift.ock sift_query.bvecs.gz sift_groundtruth.ivecs.gz --recalls 1 10 100

Run 'ockstore COMMAND --help' for the options of a command. Vector files: """ + VECTOR_FILES + """.
Exit status: 0 success, 1 data or format error (one line on stderr), 2 usage error, 130 interrupted.""",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {ockstore.__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    sub.required = True

    # ---------------------------------------------------------------------------------------------------- train
    p = add_command(sub, "train", """\
train a quantizer on a learn set and save it

Train a quantizer (PQ, CKM, ECKM or OCKM) on the vectors of LEARN_FILE and save it to QUANTIZER_FILE. Prints the
final objective (mean squared reconstruction error) and the time.

examples:
  # 64-bit OCKM codes: M=4 subspaces x C=2 codebooks of K=256 words, beam T=10
  ockstore train sift_learn.bvecs.gz -o sift.ockq --method ockm --subspaces 4 --codebooks 2 --beam 10
  # 64-bit PQ codes on the first 50,000 learn vectors
  ockstore train sift_learn.bvecs.gz -o pq.ockq --method pq --subspaces 8 --limit 50000
  # an index ranked by cosine similarity (every vector is normalised to unit length first)
  ockstore train learn.npy -o cos.ockq --method ockm --subspaces 8 --metric cosine
  # an inverted file: 1,024 coarse lists, residuals in 64-bit OCKM codes (search it with --probe)
  ockstore train sift_learn.bvecs.gz -o ivf.ockq --method ockm --subspaces 4 --lists 1024

Code size: M*C bytes per vector (C = 1 for pq and ckm). Default iterations: """ + method_defaults("n_iter") + ".")
    p.add_argument("learn", metavar="LEARN_FILE", help=f"training vectors ({VECTOR_FILES})")
    p.add_argument("-o", "--output", required=True, metavar="QUANTIZER_FILE", help="the quantizer file to write")
    add_quantizer_options(p, required=True)
    p.add_argument("--limit", type=positive, default=None, metavar="N", help="train on the first N vectors only")
    add_metadata(p)
    p.add_argument("-v", "--verbose", action="store_true", help="print the objective of every iteration on stderr")
    add_threads(p)

    # ---------------------------------------------------------------------------------------------------- build
    p = add_command(sub, "build", """\
encode a base with a quantizer into an index file

Encode the vectors of BASE_FILE with the quantizer of QUANTIZER_FILE (a quantizer file or an index file) and write
the index file INDEX_FILE. The base is streamed CHUNK rows at a time: memory stays bounded by the chunk size. The
file appears under its name only when complete.

With --workers or --scheduler the build runs on a Dask cluster (pip install 'ockstore[dask]') and writes a
collection folder: one task, one segment per partition of the base (each BASE_FILE, or ranges of --partition-rows
rows), committed at once when every task succeeded (into an existing collection folder, the vectors are added to
it).

examples:
  ockstore build sift.ockq sift_base.bvecs.gz -o sift.ock
  ockstore build sift.ockq base.npy -o base.ock --ids base_ids.npy --norm-encoding f32 --metadata source=photos
  # keep the vectors too (1 byte per component), for 'ockstore search --rerank'
  ockstore build sift.ockq sift_base.bvecs.gz -o sift.ock --store-vectors uint8
  # a collection folder built by 2 local worker processes, or on a running Dask cluster
  ockstore build sift.ockq base.npy -o sift/ --workers 2 --partition-rows 250000
  ockstore build sift.ockq part0.fvecs part1.fvecs -o /shared/sift/ --scheduler tcp://10.0.0.1:8786""")
    p.add_argument("quantizer", metavar="QUANTIZER_FILE", help="a quantizer file (ockstore train) or an index file")
    p.add_argument("base", metavar="BASE_FILE", nargs="+",
                   help=f"the vectors to index ({VECTOR_FILES}); several files only with --workers or --scheduler")
    p.add_argument("-o", "--output", required=True, metavar="INDEX_FILE",
                   help="the index file to write (with --workers or --scheduler: the collection folder)")
    p.add_argument("--norm-encoding", choices=("u8", "f32"), default=None,
                   help="how the norm term of C >= 2 codes is stored: one byte (u8, the default) or float32 (f32); "
                        "not used by pq and ckm")
    p.add_argument("--store-vectors", choices=STORE_VECTORS, default=None,
                   help="also store the vectors themselves, for exact re-ranking (search and eval --rerank): "
                        "float16, float32, uint8 (only for integer components 0..255, e.g. .bvecs), or sq8 (any "
                        "values at one byte per component, through the ranges the quantizer learned from its "
                        "training vectors); default: not stored (e.g. --store-vectors float16)")
    p.add_argument("--ids", default=None, metavar="IDS_FILE",
                   help="one non-negative integer id per base vector, in base order (.ivecs with dimension 1, or an "
                        "integer .npy of shape (N,) or (N, 1)); default: 0..N-1")
    p.add_argument("--chunk-size", type=positive, default=None, metavar="CHUNK",
                   help=f"base vectors read and encoded per step (default {DEFAULT_CHUNK:,}; not with --workers or "
                        "--scheduler, whose tasks read 65,536 rows at a time)")
    add_metadata(p)
    add_threads(p)
    add_progress(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--workers", type=positive, default=None, metavar="N",
                   help="build a collection on a Dask cluster of N local worker processes (one thread each)")
    g.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="build a collection on the Dask cluster of this scheduler (e.g. tcp://10.0.0.1:8786); "
                        "the output folder and the base files must be at the same paths on every worker")
    p.add_argument("--partition-rows", type=positive, default=None, metavar="ROWS",
                   help="with --workers or --scheduler: rows per task and segment (default: each BASE_FILE when "
                        "several are given, else 262,144)")

    # --------------------------------------------------------------------------------------------------- search
    p = add_command(sub, "search", """\
search an index file for the k nearest neighbours of queries

Search INDEX_FILE for the K nearest neighbours of every vector of QUERY_FILE. With -o the ids are written to a file
(.ivecs, .ivecs.gz or .npy; -1 where fewer than K vectors exist); without it they are printed, a few lines per
query.

examples:
  ockstore search sift.ock sift_query.bvecs.gz -k 10 --limit 3
  ockstore search sift.ock sift_query.bvecs.gz -k 100 -o neighbours.ivecs --distances   # + neighbours.dist.fvecs
  ockstore search sift.ock queries.npy -k 100 --distance sdc -o neighbours.npy           # + neighbours.dist.npy
  ockstore search sift.ock sift_query.bvecs.gz -k 10 --rerank 100     # index built with --store-vectors
  ockstore search sift.ock sift_query.bvecs.gz -k 10 --allow in_stock.txt              # one id per line
Distances follow the index's metric (ockstore info): squared L2 for l2 (ascending), inner products for ip and cosine
similarities for cosine (descending). ADC: from the query to each reconstruction; SDC: between reconstructions; with
--rerank: exact, from the stored vectors.""")
    p.add_argument("index", metavar="INDEX_FILE", help="an index file, or a collection folder (ockstore create)")
    p.add_argument("queries", metavar="QUERY_FILE", help=f"query vectors ({VECTOR_FILES})")
    p.add_argument("-k", type=positive, required=True, metavar="K", help="neighbours per query")
    p.add_argument("--distance", choices=("adc", "sdc"), default="adc", help="adc (default) or sdc")
    p.add_argument("-o", "--output", default=None, metavar="OUT",
                   help="write the ids to OUT (.ivecs, .ivecs.gz or .npy) instead of printing them")
    p.add_argument("--distances", action="store_true",
                   help="with -o, also write the distances beside it: OUT's stem + .dist.fvecs (or .dist.npy)")
    p.add_argument("--limit", type=positive, default=None, metavar="N", help="search the first N queries only")
    add_rerank(p)
    add_probe(p)
    p.add_argument("--allow", default=None, metavar="IDS_FILE",
                   help="search only the vectors with these ids; ids the index does not hold are ignored. "
                        f"IDS_FILE: {ID_FILES} (one per line; '#' starts a comment) (e.g. --allow in_stock.txt)")
    add_threads(p)
    add_progress(p)

    # ----------------------------------------------------------------------------------------------------- info
    p = add_command(sub, "info", """\
describe an index file, quantizer file or collection folder

Print what an index file (or a quantizer file) holds: method, parameters, sizes, format version, metadata; for an
inverted file also its lists (n_lists, default_n_probe, and the min, max, mean and median list size and the number
of empty lists). Reads the header and the small sections only: constant time whatever the number of vectors.

examples:
  ockstore info sift.ock
  ockstore info sift.ockq --json""")
    p.add_argument("file", metavar="FILE", help="an index file, a quantizer file or a collection folder")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of aligned lines")

    # --------------------------------------------------------------------------------------------------- verify
    p = add_command(sub, "verify", """\
read a whole index file and check it

Read every byte of INDEX_FILE and check it: checksums, codes within range, finite values. Prints 'ok' and the number
of vectors, or exits with status 1 and the reason.

example:
  ockstore verify sift.ock && echo intact""")
    p.add_argument("index", metavar="INDEX_FILE", help="an index file, or a collection folder (ockstore create)")

    # ----------------------------------------------------------------------------------------------------- eval
    p = add_command(sub, "eval", """\
measure recall (and mean overall ratio) against ground truth

Search INDEX_FILE with the queries of QUERY_FILE and compare with the exact neighbours of GROUNDTRUTH_FILE (.ivecs:
row i holds the base row numbers of query i's neighbours, nearest first; for an ip or cosine index, the best by that
metric). recall@R is the fraction of queries whose true nearest neighbour is among the first R results; 10-recall@10
(with K >= 10) the mean fraction of the true 10 nearest neighbours among the first 10. With --base,
also the mean overall ratio at 10 (1.0 is perfect; l2 indexes only). With --rerank, the K results are the best of R
candidates re-ranked exactly. The index's ids must be base row numbers (indexes built without --ids).

examples:
  ockstore eval sift.ock sift_query.bvecs.gz sift_groundtruth.ivecs.gz
  ockstore eval sift.ock sift_query.bvecs.gz sift_groundtruth.ivecs.gz --recalls 1 10 100 1000 -k 1000 \\
      --distance sdc --base sift_base.bvecs.gz
  ockstore eval sift.ock sift_query.bvecs.gz sift_groundtruth.ivecs.gz -k 10 --rerank 100 --json""")
    p.add_argument("index", metavar="INDEX_FILE", help="an index file, or a collection folder (ockstore create)")
    p.add_argument("queries", metavar="QUERY_FILE")
    p.add_argument("groundtruth", metavar="GROUNDTRUTH_FILE")
    p.add_argument("-k", type=positive, default=100, metavar="K", help="results per query (default 100)")
    p.add_argument("--recalls", type=positive, nargs="+", default=None, metavar="R",
                   help="the R of recall@R, each <= K (default: 1 10 100, those <= K)")
    p.add_argument("--distance", choices=("adc", "sdc"), default="adc", help="adc (default) or sdc")
    p.add_argument("--base", default=None, metavar="BASE_FILE",
                   help="the base vectors the index was built from, for the mean overall ratio at 10 (needs K >= 10; "
                        "l2 indexes only)")
    p.add_argument("--limit", type=positive, default=None, metavar="N", help="use the first N queries only")
    add_rerank(p)
    add_probe(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of aligned lines")
    add_threads(p)
    add_progress(p)

    # ----------------------------------------------------------------------------------------------------- tune
    p = add_command(sub, "tune", """\
find the fastest search settings that reach a target recall

Measure, on QUERY_FILE, the mean K-recall@K of the settings of INDEX_FILE (n_probe for an inverted file, rerank for
an index with stored vectors) and print the fastest setting that reaches the target, as search options. The true
neighbours are computed by brute force over the index's stored vectors, or read from --groundtruth.

examples:
  ockstore tune sift.ock sift_learn_queries.fvecs --target 0.95
  ockstore tune sift.ock queries.npy --target 0.9 -k 10 --groundtruth gt.ivecs --json""")
    p.add_argument("index", metavar="INDEX_FILE", help="an index file")
    p.add_argument("queries", metavar="QUERY_FILE", help=f"queries like those the index will serve ({VECTOR_FILES})")
    p.add_argument("--target", type=float, default=0.95, metavar="RECALL",
                   help="the mean K-recall@K to reach, in (0, 1] (default 0.95)")
    p.add_argument("-k", type=positive, default=10, metavar="K", help="results per query (default 10)")
    p.add_argument("--groundtruth", default=None, metavar="GROUNDTRUTH_FILE",
                   help="the ids of each query's true neighbours, nearest first (.ivecs or .npy); default: brute "
                        "force over the stored vectors")
    p.add_argument("--limit", type=positive, default=None, metavar="N", help="use the first N queries only")
    p.add_argument("--json", action="store_true", help="print the options and every measurement as JSON")
    add_threads(p)

    add_parsers(sub)  # create, add, delete, compact
    return parser


def check_args(args):
    """Checks that need several arguments together; failures are usage errors (exit 2)."""
    sub = args.subparser  # the subcommand's parser: its usage line goes with the message
    if args.command == "train":
        check_quantizer_options(sub, args)
        _check_metadata(sub, args.metadata)
    elif args.command in ("build", "create"):
        _check_metadata(sub, args.metadata)
        if args.command == "build":
            _check_build(sub, args)
        else:
            _check_create(sub, args)
    elif args.command == "search":
        if args.output is not None and output.output_kind(args.output) is None:
            sub.error(f"argument -o/--output: {args.output!r} must end in .ivecs, .ivecs.gz or .npy")
        if args.distances and args.output is None:
            sub.error("argument --distances: needs -o/--output (distances are written beside the ids)")
        _check_rerank(sub, args)
    elif args.command == "eval":
        if args.recalls is None:
            args.recalls = [r for r in (1, 10, 100) if r <= args.k] or [args.k]
        too_big = [r for r in args.recalls if r > args.k]
        if too_big:
            sub.error(f"argument --recalls: {too_big[0]} is larger than -k {args.k}")
        if args.base is not None and args.k < 10:
            sub.error(f"argument --base: the mean overall ratio at 10 needs -k >= 10, got -k {args.k}")
        _check_rerank(sub, args)


def _check_create(sub, args):
    """create takes QUANTIZER_FILE (a fitted quantizer), or --method and --subspaces (a quantizer the collection
    trains itself: --store-vectors required), not both."""
    if args.quantizer is not None:
        given = [flag for flag, dest in (("--method", "method"), ("--subspaces", "subspaces"), ("--lists", "lists"),
                                         ("--train-size", "train_size"))
                 if getattr(args, dest) is not None]
        given += [flag for dest, (flag, _p) in QUANTIZER_OPTIONS.items() if getattr(args, dest) is not None]
        if given:
            sub.error(f"argument {given[0]}: not with QUANTIZER_FILE (the collection takes that file's quantizer); "
                      "leave QUANTIZER_FILE out to have the collection train one itself")
        return
    if args.method is None or args.subspaces is None:
        sub.error("give QUANTIZER_FILE (a trained quantizer), or --method and --subspaces (a quantizer the "
                  "collection trains itself once it holds --train-size vectors)")
    if args.store_vectors is None:
        sub.error("argument --store-vectors: required without QUANTIZER_FILE (the collection keeps its vectors until "
                  "it trains the quantizer on them)")
    check_quantizer_options(sub, args)


def _check_build(sub, args):
    """A single-process build writes one index file from one base file; --workers/--scheduler a collection folder."""
    if args.workers is None and args.scheduler is None:
        if len(args.base) > 1:
            sub.error(f"argument BASE_FILE: {len(args.base)} files given; several base files need --workers or "
                      "--scheduler (a collection folder), an index file is built from one")
        if args.partition_rows is not None:
            sub.error("argument --partition-rows: needs --workers or --scheduler")
        args.base = args.base[0]
        if args.chunk_size is None:
            args.chunk_size = DEFAULT_CHUNK
        return
    for given, flag in ((args.threads, "--threads"), (args.chunk_size, "--chunk-size")):
        if given is not None:
            sub.error(f"argument {flag}: not with --workers or --scheduler (each task encodes on one thread, 65,536 "
                      "rows at a time; the cluster's workers set the parallelism)")


def _check_rerank(sub, args):
    if args.rerank and args.rerank < args.k:
        sub.error(f"argument --rerank: {args.rerank} is smaller than -k {args.k} (the best K of R candidates are "
                  "returned: R must be >= K)")


def _check_metadata(sub, items):
    seen = set()
    for key, _ in items:
        if key in seen:
            sub.error(f"argument --metadata: key {key!r} given twice")
        seen.add(key)

