"""The collection subcommands of ``ockstore``: create, add, delete, compact, retrain (a collection folder changed by commits;
``info``, ``verify``, ``search`` and ``eval`` take a folder too, see commands.py). Over the public API only."""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np

import ockstore
from ockstore import vecfiles
from ockstore.collection import SegmentWriter, names

from .inputs import CommandError, base_ids, iter_base, read_allowed_ids
from .options import (
    DEFAULT_CHUNK, ID_FILES, STORE_VECTORS, VECTOR_FILES, add_command, add_metadata, add_progress,
    add_quantizer_options, add_threads, int_type, make_quantizer, positive,
)
from .progress import Progress, progress_enabled, rate_text

__all__ = ["add_parsers", "COMMANDS"]


def add_parsers(sub):
    """The parsers of create, add, delete, compact and retrain, on the subparsers action ``sub``."""
    p = add_command(sub, "create", """\
create an empty collection folder with a quantizer

Create the collection folder FOLDER (it must not exist, or be empty) holding the quantizer of QUANTIZER_FILE (a
quantizer file or an index file). A collection changes by commits: 'ockstore add' and 'ockstore delete' change it,
'ockstore compact' merges its segments; info, verify, search and eval read it like an index file.

Without QUANTIZER_FILE, --method and --subspaces (and the other options of 'ockstore train') describe a quantizer the
collection trains itself: it keeps the vectors it is given (--store-vectors is required) and searches them exactly
until it holds --train-size of them; the add that reaches it trains the quantizer and encodes every vector. 'ockstore
retrain' trains it again later.

examples:
  ockstore create sift.ockq photos/
  ockstore create sift.ockq photos/ --store-vectors uint8 --metadata source=camera
  # an app's collection: starts empty, trains a 256-bit cosine OCKM once it holds 10,240 vectors
  ockstore create notes/ --method ockm --subspaces 16 --codebooks 2 --metric cosine --store-vectors float16""")
    p.add_argument("quantizer", metavar="QUANTIZER_FILE", nargs="?", default=None,
                   help="a quantizer file (ockstore train) or an index file; leave it out to give --method instead")
    p.add_argument("folder", metavar="FOLDER", help="the collection folder to create")
    p.add_argument("--norm-encoding", choices=("u8", "f32"), default=None,
                   help="how the norm term of C >= 2 codes is stored: u8 (the default) or f32")
    p.add_argument("--store-vectors", choices=STORE_VECTORS, default=None,
                   help="also store the vectors, for exact re-ranking (search --rerank); default: not stored")
    p.add_argument("--merge-factor", type=int_type(2, "an integer"), default=ockstore.collection.DEFAULT_MERGE_FACTOR,
                   metavar="F", help="segments of similar size are merged when F of them accumulate (default "
                                     f"{ockstore.collection.DEFAULT_MERGE_FACTOR})")
    add_quantizer_options(p, required=False)
    p.add_argument("--train-size", type=int_type(1, "a positive integer"), default=None, metavar="N",
                   help="without QUANTIZER_FILE: the number of vectors whose add trains the quantizer (default: 40 per "
                        "word of a codebook, 10,240 for K = 256)")
    add_metadata(p)

    p = add_command(sub, "add", """\
add the vectors of a file to a collection (one commit)

Encode the vectors of BASE_FILE and add them to the collection FOLDER in one commit: all of them or, on any error,
none. The file is streamed CHUNK rows at a time (memory bounded by the chunk). Without --ids the vectors get the ids
that follow the largest id ever assigned; prints the range.

examples:
  ockstore add photos/ new_photos.npy
  ockstore add photos/ sift_base.bvecs.gz --ids base_ids.npy""")
    p.add_argument("folder", metavar="FOLDER", help="a collection folder (ockstore create)")
    p.add_argument("base", metavar="BASE_FILE", help=f"the vectors to add ({VECTOR_FILES})")
    p.add_argument("--ids", default=None, metavar="IDS_FILE",
                   help="one id per vector, in file order (.ivecs with dimension 1, or an integer .npy of shape (N,) "
                        "or (N, 1)); ids must not be in the collection already")
    p.add_argument("--chunk-size", type=positive, default=DEFAULT_CHUNK, metavar="CHUNK",
                   help=f"vectors read and encoded per step (default {DEFAULT_CHUNK:,})")
    add_threads(p)
    add_progress(p)

    p = add_command(sub, "delete", """\
delete vectors from a collection by id (one commit)

Delete the vectors whose ids IDS_FILE lists from the collection FOLDER, in one commit. Ids the collection does not
hold are ignored, and so is -1 (the padding of a result file of 'ockstore search'); other negative values are an
error. Prints how many vectors were removed.

example:
  ockstore delete photos/ removed.txt        # one id per line""")
    p.add_argument("folder", metavar="FOLDER", help="a collection folder")
    p.add_argument("ids", metavar="IDS_FILE", help=f"the ids to delete: {ID_FILES}")

    p = add_command(sub, "compact", """\
merge a collection's segments into one, dropping deleted rows

Merge every segment of the collection FOLDER into one holding the live vectors (codes are copied, not re-encoded),
in one commit, then remove the files that neither this generation nor the one before uses (vacuum). The generation
before the compaction stays on disk as the fallback (should the newest manifest ever be damaged) until the next
commit: the folder holds its segments too, about twice the data; --no-fallback removes it at once. Readers that have
the collection open keep their generation.

example:
  ockstore compact photos/""")
    p.add_argument("folder", metavar="FOLDER", help="a collection folder")
    p.add_argument("--no-vacuum", action="store_true", help="keep the files of older generations")
    p.add_argument("--no-fallback", action="store_true",
                   help="also remove the generation before the compaction (no fallback until the next commit)")

    p = add_command(sub, "retrain", """\
train a collection's quantizer again on its stored vectors

Fit a fresh copy of the quantizer of the collection FOLDER on a sample of its stored vectors and encode every vector
again, in one commit (ids, deletions and stored vectors are kept; readers keep their generation). For a collection
whose quantizer was trained on few vectors, or that has not trained it yet (it trains now). Needs a collection that
stores vectors.

example:
  ockstore retrain notes/ --sample 50000""")
    p.add_argument("folder", metavar="FOLDER", help="a collection folder that stores vectors")
    p.add_argument("--sample", type=positive, default=None, metavar="N",
                   help="fit on a uniform sample of N stored vectors (default 131,072, or all of them when fewer)")
    add_threads(p)


def create(args, out):
    q = ockstore.load_quantizer(args.quantizer) if args.quantizer is not None else make_quantizer(args)
    meta = dict(args.metadata)
    with ockstore.create_collection(args.folder, q, norm_encoding=args.norm_encoding,
                                    store_vectors=args.store_vectors, metadata=meta or None,
                                    merge_factor=args.merge_factor, train_size=args.train_size) as c:
        info = c.info()
    lists = f"IVF of {info['n_lists']:,} lists over " if "n_lists" in info else ""
    trains = "" if info["trained"] else f" (not trained yet: trained by the add that reaches {info['train_size']:,} " \
                                        "vectors; searched exactly until then)"
    print(f"created collection {info['path']}: {lists}{info['method'].upper()} {info['bits']} bits, metric "
          f"{info['metric']}, norm encoding {info['norm_encoding']}, stored vectors {info['store_vectors'] or 'none'}"
          f"{trains}", file=out)
    return 0


def retrain(args, out):
    with ockstore.open_collection(args.folder, "a") as c:
        before = c.info()
        t0 = time.perf_counter()
        c.retrain(sample=args.sample, n_threads=args.threads)
        elapsed = time.perf_counter() - t0
        after = c.info()
    sample = min(after["N"], args.sample if args.sample is not None else 131072)
    print(f"retrained {args.folder}: {after['method'].upper()} {after['bits']} bits fitted on {sample:,} of "
          f"{after['N']:,} stored vectors, every vector encoded again in {elapsed:.1f} s: generation "
          f"{after['generation']} (was {before['generation']}, {'trained' if before['trained'] else 'not trained'})",
          file=out)
    return 0


def add(args, out):
    show = progress_enabled(args)
    with ockstore.open_collection(args.folder, "a") as c:
        owner = f"the collection {args.folder}"
        ids, total = base_ids(args, c.dim, owner, show)  # c.dim None: a collection without vectors yet
        first = c.next_id
        t0 = time.perf_counter()
        bar = Progress(total, "add", enabled=show)
        done = 0
        writer = None
        try:
            for chunk, chunk_ids, row in iter_base(args, ids, c.dim, owner):
                if writer is None:  # (the first chunk gives the dimension to a collection without vectors yet)
                    writer = SegmentWriter(c.path, c.segment_spec, n_threads=args.threads, dim=chunk.shape[1])
                done = row + chunk.shape[0]
                if chunk_ids is None:  # the ids that follow the largest id ever assigned
                    chunk_ids = np.arange(first + row, first + done)
                writer._add(chunk, chunk_ids, row)  # a refused row is named by its row in the file
                bar.update(chunk.shape[0])
            if done:
                c.commit_segments([writer.close()], operation="add")
            elif writer is not None:
                writer.abort()
        except BaseException:
            bar.abort()
            if writer is not None:
                writer.abort()
            raise
        bar.close()
        elapsed = time.perf_counter() - t0
        rate = done / elapsed if elapsed > 0 else float("inf")
        which = "" if not done else (f", ids {first:,}..{first + done - 1:,}" if ids is None
                                     else f", ids from {args.ids}")
        print(f"added {done:,} vectors to {args.folder}{which}: generation {c.generation}, {len(c):,} vectors in "
              f"{c.info()['segments']} segments, {elapsed:.1f} s ({rate_text(rate)} vectors/s)", file=out)
    return 0


def delete(args, out):
    ids = read_allowed_ids(args.ids)
    if (ids < -1).any():  # ids are >= 0, as Collection.delete says; -1 is the padding of a result file
        raise CommandError(f"{args.ids}: id {int(ids[np.argmax(ids < -1)])} is negative: ids are integers >= 0 (-1, "
                           "the padding of a result file, is skipped)")
    ids = ids[ids >= 0]
    with ockstore.open_collection(args.folder, "a") as c:
        removed = c.delete(ids)
        print(f"deleted {removed:,} of {len(np.unique(ids)):,} ids from {args.folder}: generation {c.generation}, "
              f"{len(c):,} vectors left", file=out)
    return 0


def compact(args, out):
    if args.no_vacuum and args.no_fallback:
        raise CommandError("--no-fallback removes files, --no-vacuum keeps them: give one of them")
    with ockstore.open_collection(args.folder, "a") as c:
        before = c.info()
        t0 = time.perf_counter()
        c.compact()
        elapsed = time.perf_counter() - t0
        removed = [] if args.no_vacuum else c.vacuum(keep_generations=1 if args.no_fallback else 2)
        after = c.info()
        fallback = _fallback_bytes(c.path, after)
    text = (f"compacted {args.folder}: {before['segments']} segments ({before['rows']:,} rows, {before['deleted']:,} "
            f"deleted) -> {after['segments']} ({after['N']:,} vectors) in {elapsed:.2f} s, generation "
            f"{after['generation']}" + ("" if args.no_vacuum else f"; removed {len(removed)} old files"))
    if after["generation"] != before["generation"] and not args.no_fallback:
        text += (f"; generation {before['generation']} is kept as the fallback ({fallback / 1e6:.1f} MB in files only "
                 "it uses) until the next commit ('ockstore compact --no-fallback' removes it at once)")
    print(text, file=out)
    return 0


def _fallback_bytes(folder, info):
    """Bytes of the collection's files in ``folder`` that the generation of ``info`` does not use (the fallback's own
    files, and any leftover): the folder's regular files less the live generation's and the lock file."""
    live = {info["quantizer_file"], names.LOCK_NAME, names.manifest_name(info["generation"])}
    for entry in info["segment_files"]:
        live.add(entry["file"])
        if entry["deletions"] is not None:
            live.add(entry["deletions"])
    return sum(e.stat().st_size for e in os.scandir(folder) if e.is_file() and e.name not in live)


def build_distributed(args, out):
    """`ockstore build ... --workers N | --scheduler ADDRESS`: a collection folder built on a Dask cluster
    (ockstore.distributed), with a progress bar over its tasks."""
    try:
        from ockstore import distributed as od  # noqa: PLC0415 - the optional extra, imported only when asked for
        from ockstore.distributed.cluster import embedded  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError(f"--workers/--scheduler: {exc}") from None
    q = ockstore.load_quantizer(args.quantizer)
    ids = vecfiles.read_ids(args.ids) if args.ids is not None else None
    options = {"norm_encoding": args.norm_encoding, "store_vectors": args.store_vectors,
               "metadata": dict(args.metadata) or None}
    options = {name: value for name, value in options.items() if value is not None}  # only what was asked for
    source = args.base[0] if len(args.base) == 1 else list(args.base)
    bar = None

    def progress(done, total, rows, _rows_total):
        nonlocal bar
        if bar is None:
            bar = Progress(total, "build", unit="tasks", enabled=progress_enabled(args))
        bar.update(done - bar.done)

    t0 = time.perf_counter()
    try:
        with (embedded(args.workers) if args.workers is not None else contextlib.nullcontext(args.scheduler)) as cl:
            workers = len(cl.nthreads()) if not isinstance(cl, str) else None
            c = od.build_collection(args.output, q, source, ids=ids, client=cl, partition_rows=args.partition_rows,
                                    progress=progress, **options)
    except BaseException:
        if bar is not None:
            bar.abort()
        raise
    if bar is not None:
        bar.close()
    elapsed = time.perf_counter() - t0
    with c:
        info = c.info()
    rate = info["N"] / elapsed if elapsed > 0 else float("inf")
    on = f"{workers} local workers" if workers is not None else f"the cluster of {args.scheduler}"
    lists = f"IVF of {info['n_lists']:,} lists over " if "n_lists" in info else ""
    print(f"built collection {info['path']} on {on}: {info['N']:,} vectors in {info['segments']} segments, "
          f"generation {info['generation']}, {lists}{info['method'].upper()} {info['bits']} bits, "
          f"metric {info['metric']}, "
          f"{elapsed:.1f} s ({rate_text(rate)} vectors/s)", file=out)
    return 0


COMMANDS = {"create": create, "add": add, "delete": delete, "compact": compact, "retrain": retrain}
