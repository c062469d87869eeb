"""The ``ockstore`` command: train a quantizer, build an index file, search it, inspect, verify and evaluate it.

    ockstore [--debug] [--version] {train,build,search,info,verify,eval} ...

Exit status (DESIGN.md section 6): 0 on success; 2 for a usage error (argparse prints the usage line and the
message); 1 for a data or format error, including a missing or unreadable input file, reported as exactly one line
``ockstore: error: <message>`` on stderr (``--debug`` adds the traceback); 130 when interrupted.

Only the public API is used here. Long work (building, searching many queries) shows a progress bar on stderr when
stderr is a terminal (``--progress`` forces it, ``-q`` silences it); results go to stdout or to the output files, which
are written atomically (a temporary sibling, fsynced, renamed over the target).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
import traceback

__all__ = ["main", "build_parser"]

PROG = "ockstore"

# Vector and id files the command reads (the extensions ockstore.datasets understands).
VECTOR_FILES = ".fvecs, .bvecs, .ivecs (each optionally .gz) or .npy"

# Queries searched per call when a progress bar is shown: a query gets the same results alone or in a batch, so
# searching in slices only changes how often the bar moves.
SEARCH_BATCH = 1024

# Default rows per step when reading a base file (memory bounded by the chunk, not by N).
DEFAULT_CHUNK = 100_000


class CommandError(Exception):
    """A data error detected by the command itself (message printed as is, exit status 1)."""


# ------------------------------------------------------------------------------------------------------ argparse
class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keep the hand-wrapped descriptions and examples; show defaults only where the help text says so."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=32, width=min(110, _terminal_width()))


def _terminal_width():
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 100


def _wrap(text, width=100):
    """A help description wrapped to ``width`` columns (the formatter keeps the examples' own line breaks)."""
    import textwrap

    return textwrap.fill(text, width)


def _default_iterations():
    """'pq 25, ckm 30, ...': each method's n_iter default, read from its signature (never out of date)."""
    import inspect

    import ockstore

    return ", ".join(f"{m} {inspect.signature(getattr(ockstore, cls)).parameters['n_iter'].default}"
                     for m, cls in _CLASSES.items())


def _int_type(min_value, what="an integer"):
    def parse(text):
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < min_value:
            raise argparse.ArgumentTypeError(f"expected {what} >= {min_value}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _float_type(min_value):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (value >= min_value and value != float("inf")):
            raise argparse.ArgumentTypeError(f"expected a finite number >= {min_value:g}, got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


def _metadata_item(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


_positive = _int_type(1, "a positive integer")


def _add_threads(p):
    p.add_argument("--threads", type=_positive, default=None, metavar="N",
                   help="threads to use (default: all cores available to the process)")


def _add_metadata(p):
    p.add_argument("--metadata", nargs="+", action="extend", type=_metadata_item, default=[], metavar="KEY=VALUE",
                   help="user metadata stored in the file (strings)")


def _add_progress(p):
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar (errors are still reported on stderr)")
    g.add_argument("--progress", action="store_true",
                   help="show the progress bar even when stderr is not a terminal")


def build_parser():
    """The argument parser of the ``ockstore`` command (exposed for documentation and tests)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        formatter_class=_Formatter,
        description=_wrap("Build, store and search compact-code vector indexes with Optimized Cartesian K-Means (OCKM) "
                    "and its baselines PQ, CKM and ECKM."),
        epilog="""\
example:
  ockstore train sift_learn.bvecs.gz -o sift.ockq --method ockm --subspaces 4 --codebooks 2
  ockstore build sift.ockq sift_base.bvecs.gz -o sift.ock
  ockstore eval sift.ock sift_query.bvecs.gz sift_groundtruth.ivecs.gz --recalls 1 10 100

Run 'ockstore COMMAND --help' for the options of a command. Vector files: """ + VECTOR_FILES + """.
Exit status: 0 success, 1 data or format error (one line on stderr), 2 usage error, 130 interrupted.""",
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    sub.required = True

    # ---------------------------------------------------------------------------------------------------- train
    p = sub.add_parser(
        "train", formatter_class=_Formatter, help="train a quantizer on a learn set and save it",
        description=_wrap("Train a quantizer (PQ, CKM, ECKM or OCKM) on the vectors of LEARN_FILE and save it to "
                    "QUANTIZER_FILE. Prints the final objective (mean squared reconstruction error) and the time."),
        epilog="""\
examples:
  # 64-bit OCKM codes: M=4 subspaces x C=2 codebooks of K=256 words, beam T=10
  ockstore train sift_learn.bvecs.gz -o sift.ockq --method ockm --subspaces 4 --codebooks 2 --beam 10
  # 64-bit PQ codes on the first 50,000 learn vectors
  ockstore train sift_learn.bvecs.gz -o pq.ockq --method pq --subspaces 8 --limit 50000

Code size: M*C bytes per vector (C = 1 for pq and ckm). Default iterations: """ + _default_iterations() + ".",
    )
    p.add_argument("learn", metavar="LEARN_FILE", help=f"training vectors ({VECTOR_FILES})")
    p.add_argument("-o", "--output", required=True, metavar="QUANTIZER_FILE", help="the quantizer file to write")
    p.add_argument("--method", required=True, choices=("ockm", "eckm", "ckm", "pq"), help="the quantizer")
    p.add_argument("--subspaces", "-M", required=True, type=_positive, metavar="M", help="M, subspaces (1..dim)")
    p.add_argument("--codebooks", "-C", type=_positive, default=None, metavar="C",
                   help="C, codebooks per subspace (ockm, eckm; default 2; pq and ckm use 1)")
    p.add_argument("--beam", "-T", type=_positive, default=None, metavar="T",
                   help="T, beam width of the encoder (ockm only; default 10)")
    p.add_argument("--codewords", "-K", type=_int_type(2, "an integer in 2..256"), default=256, metavar="K",
                   help="K, words per codebook, 2..256 (default 256)")
    p.add_argument("--iterations", type=_positive, default=None, metavar="N",
                   help="maximum training iterations (default: the method's own, see below)")
    p.add_argument("--tol", type=_float_type(0.0), default=1e-4,
                   help="stop when an iteration lowers the objective by less than this fraction (default 1e-4)")
    p.add_argument("--seed", type=_int_type(0, "a non-negative integer"), default=0, help="random seed (default 0)")
    p.add_argument("--limit", type=_positive, default=None, metavar="N", help="train on the first N vectors only")
    _add_metadata(p)
    p.add_argument("-v", "--verbose", action="store_true", help="print the objective of every iteration on stderr")
    _add_threads(p)
    p.set_defaults(func=cmd_train, subparser=p)

    # ---------------------------------------------------------------------------------------------------- build
    p = sub.add_parser(
        "build", formatter_class=_Formatter, help="encode a base with a quantizer into an index file",
        description=_wrap("Encode the vectors of BASE_FILE with the quantizer of QUANTIZER_FILE (a quantizer file or an "
                    "index file) and write the index file INDEX_FILE. The base is streamed CHUNK rows at a time: "
                    "memory stays bounded by the chunk size. The file appears under its name only when complete."),
        epilog="""\
examples:
  ockstore build sift.ockq sift_base.bvecs.gz -o sift.ock
  ockstore build sift.ockq base.npy -o base.ock --ids base_ids.npy --norm-encoding f32 --metadata source=photos""",
    )
    p.add_argument("quantizer", metavar="QUANTIZER_FILE", help="a quantizer file (ockstore train) or an index file")
    p.add_argument("base", metavar="BASE_FILE", help=f"the vectors to index ({VECTOR_FILES})")
    p.add_argument("-o", "--output", required=True, metavar="INDEX_FILE", help="the index file to write")
    p.add_argument("--norm-encoding", choices=("u8", "f32"), default=None,
                   help="how the norm term of C >= 2 codes is stored: one byte (u8, the default) or float32 (f32); "
                        "not used by pq and ckm")
    p.add_argument("--ids", default=None, metavar="IDS_FILE",
                   help="one non-negative integer id per base vector, in base order (.ivecs with dimension 1, or an "
                        "integer .npy of shape (N,) or (N, 1)); default: 0..N-1")
    p.add_argument("--chunk-size", type=_positive, default=DEFAULT_CHUNK, metavar="CHUNK",
                   help=f"base vectors read and encoded per step (default {DEFAULT_CHUNK:,})")
    _add_metadata(p)
    _add_threads(p)
    _add_progress(p)
    p.set_defaults(func=cmd_build, subparser=p)

    # --------------------------------------------------------------------------------------------------- search
    p = sub.add_parser(
        "search", formatter_class=_Formatter, help="search an index file for the k nearest neighbours of queries",
        description=_wrap("Search INDEX_FILE for the K nearest neighbours of every vector of QUERY_FILE. With -o the ids "
                    "are written to a file (.ivecs, .ivecs.gz or .npy; -1 where fewer than K vectors exist); "
                    "without it they are printed, a few lines per query."),
        epilog="""\
examples:
  ockstore search sift.ock sift_query.bvecs.gz -k 10 --limit 3
  ockstore search sift.ock sift_query.bvecs.gz -k 100 -o neighbours.ivecs --distances   # + neighbours.dist.fvecs
  ockstore search sift.ock queries.npy -k 100 --distance sdc -o neighbours.npy           # + neighbours.dist.npy
Distances are squared L2 (ADC: from the query to each reconstruction; SDC: between reconstructions).""",
    )
    p.add_argument("index", metavar="INDEX_FILE")
    p.add_argument("queries", metavar="QUERY_FILE", help=f"query vectors ({VECTOR_FILES})")
    p.add_argument("-k", type=_positive, required=True, metavar="K", help="neighbours per query")
    p.add_argument("--distance", choices=("adc", "sdc"), default="adc", help="adc (default) or sdc")
    p.add_argument("-o", "--output", default=None, metavar="OUT",
                   help="write the ids to OUT (.ivecs, .ivecs.gz or .npy) instead of printing them")
    p.add_argument("--distances", action="store_true",
                   help="with -o, also write the distances beside it: OUT's stem + .dist.fvecs (or .dist.npy)")
    p.add_argument("--limit", type=_positive, default=None, metavar="N", help="search the first N queries only")
    _add_threads(p)
    _add_progress(p)
    p.set_defaults(func=cmd_search, subparser=p)

    # ----------------------------------------------------------------------------------------------------- info
    p = sub.add_parser(
        "info", formatter_class=_Formatter, help="describe an index or quantizer file",
        description=_wrap("Print what an index file (or a quantizer file) holds: method, parameters, sizes, format "
                    "version, metadata. Reads the header only: constant time whatever the size of the index."),
        epilog="""\
examples:
  ockstore info sift.ock
  ockstore info sift.ockq --json""",
    )
    p.add_argument("file", metavar="FILE", help="an index file or a quantizer file")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of aligned lines")
    p.set_defaults(func=cmd_info, subparser=p)

    # --------------------------------------------------------------------------------------------------- verify
    p = sub.add_parser(
        "verify", formatter_class=_Formatter, help="read a whole index file and check it",
        description=_wrap("Read every byte of INDEX_FILE and check it: checksums, codes within range, finite values. "
                    "Prints 'ok' and the number of vectors, or exits with status 1 and the reason."),
        epilog="""\
example:
  ockstore verify sift.ock && echo intact""",
    )
    p.add_argument("index", metavar="INDEX_FILE")
    p.set_defaults(func=cmd_verify, subparser=p)

    # ----------------------------------------------------------------------------------------------------- eval
    p = sub.add_parser(
        "eval", formatter_class=_Formatter, help="measure recall (and mean overall ratio) against ground truth",
        description=_wrap("Search INDEX_FILE with the queries of QUERY_FILE and compare with the exact neighbours of "
                    "GROUNDTRUTH_FILE (.ivecs: row i holds the base row numbers of query i's neighbours, nearest "
                    "first). recall@R is the fraction of queries whose true nearest neighbour is among the first R "
                    "results. With --base, also the mean overall ratio at 10 (1.0 is perfect). The index's ids must "
                    "be base row numbers (indexes built without --ids)."),
        epilog="""\
examples:
  ockstore eval sift.ock sift_query.bvecs.gz sift_groundtruth.ivecs.gz
  ockstore eval sift.ock sift_query.bvecs.gz sift_groundtruth.ivecs.gz --recalls 1 10 100 1000 -k 1000 \\
      --distance sdc --base sift_base.bvecs.gz""",
    )
    p.add_argument("index", metavar="INDEX_FILE")
    p.add_argument("queries", metavar="QUERY_FILE")
    p.add_argument("groundtruth", metavar="GROUNDTRUTH_FILE")
    p.add_argument("-k", type=_positive, default=100, metavar="K", help="results per query (default 100)")
    p.add_argument("--recalls", type=_positive, nargs="+", default=None, metavar="R",
                   help="the R of recall@R, each <= K (default: 1 10 100, those <= K)")
    p.add_argument("--distance", choices=("adc", "sdc"), default="adc", help="adc (default) or sdc")
    p.add_argument("--base", default=None, metavar="BASE_FILE",
                   help="the base vectors the index was built from, for the mean overall ratio at 10 (needs K >= 10)")
    p.add_argument("--limit", type=_positive, default=None, metavar="N", help="use the first N queries only")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of aligned lines")
    _add_threads(p)
    _add_progress(p)
    p.set_defaults(func=cmd_eval, subparser=p)
    return parser


def _check_args(parser, args):
    """Checks that need several arguments together; failures are usage errors (exit 2)."""
    sub = args.subparser  # the subcommand's parser: its usage line goes with the message
    if args.command == "train":
        if args.codewords > 256:
            sub.error(f"argument --codewords/-K: expected an integer in 2..256, got {args.codewords}")
        if args.method in ("pq", "ckm") and args.codebooks not in (None, 1):
            sub.error(f"argument --codebooks/-C: {args.method} has one codebook per subspace (got {args.codebooks})")
        if args.method != "ockm" and args.beam is not None:
            sub.error(f"argument --beam/-T: only ockm has a beam width (method {args.method})")
        _check_metadata(sub, args.metadata)
    elif args.command == "build":
        _check_metadata(sub, args.metadata)
    elif args.command == "search":
        if args.output is not None and _output_kind(args.output) is None:
            sub.error(f"argument -o/--output: {args.output!r} must end in .ivecs, .ivecs.gz or .npy")
        if args.distances and args.output is None:
            sub.error("argument --distances: needs -o/--output (distances are written beside the ids)")
    elif args.command == "eval":
        if args.recalls is None:
            args.recalls = [r for r in (1, 10, 100) if r <= args.k] or [args.k]
        too_big = [r for r in args.recalls if r > args.k]
        if too_big:
            sub.error(f"argument --recalls: {too_big[0]} is larger than -k {args.k}")
        if args.base is not None and args.k < 10:
            sub.error(f"argument --base: the mean overall ratio at 10 needs -k >= 10, got -k {args.k}")


def _check_metadata(sub, items):
    seen = set()
    for key, _ in items:
        if key in seen:
            sub.error(f"argument --metadata: key {key!r} given twice")
        seen.add(key)


# ------------------------------------------------------------------------------------------------------ progress
class Progress:
    """A progress bar on stderr: done/total, rate and ETA.

    On a terminal the bar is redrawn in place (at most ten times a second); otherwise (``--progress`` with stderr
    redirected) one line is written at most every two seconds, and at the end.
    """

    def __init__(self, total, label, *, unit="vectors", enabled=True, stream=None):
        self.total = total
        self.label = label
        self.unit = unit
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = enabled and _isatty(self.stream)
        self.done = 0
        self.start = time.perf_counter()
        self._last = -1e9
        self._drawn = False
        if enabled:
            self._draw(force=True)

    def update(self, n):
        self.done += n
        if self.enabled:
            self._draw()

    def close(self):
        """Draw the final state and end the line."""
        if self.enabled:
            self._draw(force=True)
            if self.tty and self._drawn:
                self.stream.write("\n")
                self.stream.flush()
            self.enabled = False

    def abort(self):
        """Stop after an error: on a terminal the bar is erased, so the error message stands alone."""
        if self.enabled:
            if self.tty and self._drawn:
                self.stream.write("\r\033[K")
                self.stream.flush()
            self.enabled = False

    def _draw(self, force=False):
        now = time.perf_counter()
        if not force and now - self._last < (0.1 if self.tty else 2.0):
            return
        self._last = now
        elapsed = now - self.start
        rate = self.done / elapsed if elapsed > 0 and self.done else 0.0
        if self.total:
            frac = min(1.0, self.done / self.total)
            width = 24
            filled = int(round(frac * width))
            bar = "[" + "=" * filled + " " * (width - filled) + "]"
            eta = (self.total - self.done) / rate if rate > 0 else None
            text = (f"{self.label} {bar} {100 * frac:5.1f}%  {self.done:,}/{self.total:,} {self.unit}  "
                    f"{_rate(rate)} {self.unit}/s  "
                    + (f"ETA {_clock(eta)}" if self.done < self.total else f"{_clock(elapsed)}"))
        else:
            text = f"{self.label} {self.done:,} {self.unit}  {_rate(rate)} {self.unit}/s  {_clock(elapsed)}"
        if self.tty:
            self.stream.write("\r" + text + "\033[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._drawn = True


def _isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _rate(r):
    return f"{r:,.0f}" if r >= 100 else f"{r:.1f}"


def _clock(seconds):
    if seconds is None:
        return "--:--"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:d}:{s:02d}"


def _progress_enabled(args):
    if getattr(args, "quiet", False):
        return False
    return bool(getattr(args, "progress", False)) or _isatty(sys.stderr)


# ---------------------------------------------------------------------------------------------------- file helpers
def _read_vectors(path, what, limit=None):
    """Vectors of a file (its own dtype), the first ``limit`` rows when given (reading no further)."""
    from . import datasets

    if limit is None:
        X = datasets.read_vecs(path)
    else:
        parts, have = [], 0
        chunks = datasets.iter_vecs(path, chunk_size=min(limit, DEFAULT_CHUNK))
        try:
            for chunk in chunks:
                parts.append(chunk[: limit - have])
                have += len(parts[-1])
                if have >= limit:
                    break
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        import numpy as np

        X = parts[0] if len(parts) == 1 else np.concatenate(parts)
    if X.dtype.kind not in "iuf":
        raise CommandError(f"{path}: {what} must be numeric vectors, got dtype {X.dtype}")
    return X


def _check_dim(path, what, dim, expected, owner):
    if dim != expected:
        raise CommandError(f"{path}: {what} have dimension {dim}, but {owner} expects {expected}")


def _read_ids(path):
    """User ids of an ids file: .ivecs (dimension 1) or an integer .npy of shape (N,) or (N, 1); int64 (N,)."""
    import numpy as np

    from . import datasets

    low = os.fspath(path).lower()
    if low.endswith(".npy"):
        from ._validation import check_regular_file

        path = check_regular_file(path, "ids file")
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, EOFError) as exc:  # not .npy, pickled objects, truncated header
            raise CommandError(f"{path}: not a valid .npy file of ids: {_one_line(exc)}") from None
    else:
        arr = datasets.read_vecs(path)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise CommandError(f"{path}: ids must have shape (N,) or (N, 1), got {arr.shape}")
    from ._validation import as_ids

    try:
        return as_ids(arr, arr.shape[0], "ids")  # the library's own checks: integer dtype, int64 range, >= 0
    except (TypeError, ValueError) as exc:
        raise CommandError(f"{path}: {exc}") from None


def _output_kind(path):
    """'ivecs', 'ivecs.gz' or 'npy' from an output name, None for anything else."""
    low = os.path.basename(os.fspath(path)).lower()
    for kind in ("ivecs.gz", "ivecs", "npy"):
        if low.endswith("." + kind) and len(low) > len(kind) + 1:
            return kind
    return None


def _distances_path(path):
    """OUT.ivecs -> OUT.dist.fvecs, OUT.ivecs.gz -> OUT.dist.fvecs.gz, OUT.npy -> OUT.dist.npy."""
    kind = _output_kind(path)
    stem = path[: -(len(kind) + 1)]
    return stem + {"ivecs": ".dist.fvecs", "ivecs.gz": ".dist.fvecs.gz", "npy": ".dist.npy"}[kind]


def _check_output(path, what):
    """The folder of an output file must exist and the path must not be a directory (checked before any work)."""
    from ._validation import check_output_path

    try:
        check_output_path(path, what)
    except (FileNotFoundError, ValueError) as exc:
        raise CommandError(str(exc)) from None


def _write_distances(path, D):
    """float32 distances (they may hold +inf padding, which write_vecs refuses) as .npy or texmex .fvecs(.gz),
    atomically through the dataset writer's temporary-sibling-and-rename."""
    import numpy as np

    from .datasets import _atomic_write as _write_atomic

    D = np.ascontiguousarray(D, dtype="<f4")
    low = path.lower()
    if low.endswith(".npy"):
        _write_atomic(path, lambda f: np.lib.format.write_array(f, D, allow_pickle=False))
        return
    n, k = D.shape
    rec = np.empty(n, dtype=[("dim", "<i4"), ("v", "<f4", (k,))])
    rec["dim"] = k
    rec["v"] = D
    data = rec.tobytes()

    def write(f):
        if low.endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=6, mtime=0) as g:
                g.write(data)
        else:
            f.write(data)

    _write_atomic(path, write)


def _write_ids(path, I):
    import numpy as np

    from . import datasets

    kind = _output_kind(path)
    if kind == "npy":
        datasets.write_vecs(path, np.ascontiguousarray(I, dtype=np.int64))
        return
    if I.size and int(I.max()) > np.iinfo(np.int32).max:
        raise CommandError(f"{path}: ids above {np.iinfo(np.int32).max} do not fit in .ivecs (int32); "
                           "write a .npy file instead")
    datasets.write_vecs(path, I.astype(np.int32), compresslevel=6)


def _open_index(path):
    """open_index, with a clearer message when the file is a quantizer file (a common slip on the command line)."""
    import ockstore
    from .errors import FormatError

    try:
        return ockstore.open_index(path)
    except FormatError as exc:
        try:
            ockstore.load_quantizer(path)
        except (FormatError, OSError, ValueError):
            raise exc from None
        raise CommandError(f"{os.fspath(path)}: a quantizer file, not an index file; make an index with "
                           f"'ockstore build {os.fspath(path)} BASE_FILE -o INDEX_FILE'") from None


def _one_line(exc):
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, KeyError):  # str(KeyError) is the repr of the key
        text = f"missing key {text}"
    return " ".join(text.split())


def _fmt_bytes(n):
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n} B"  # pragma: no cover


# -------------------------------------------------------------------------------------------------------- commands
_CLASSES = {"pq": "PQ", "ckm": "CKM", "eckm": "ECKM", "ockm": "OCKM"}


def cmd_train(args, out):
    import ockstore

    _check_output(args.output, "-o/--output")
    cls = getattr(ockstore, _CLASSES[args.method])
    kwargs = dict(n_codewords=args.codewords, tol=args.tol, seed=args.seed, n_threads=args.threads,
                  verbose=args.verbose)
    if args.iterations is not None:
        kwargs["n_iter"] = args.iterations
    if args.method == "ockm":
        q = cls(args.subspaces, 2 if args.codebooks is None else args.codebooks,
                10 if args.beam is None else args.beam, **kwargs)
    elif args.method == "eckm":
        q = cls(args.subspaces, 2 if args.codebooks is None else args.codebooks, **kwargs)
    else:
        q = cls(args.subspaces, **kwargs)

    t0 = time.perf_counter()
    X = _read_vectors(args.learn, "learn vectors", args.limit)
    t_read = time.perf_counter() - t0
    n, dim = X.shape
    if n < args.codewords:
        raise CommandError(f"{args.learn}: {n} training vectors; training needs at least K={args.codewords}")
    if args.subspaces > dim:
        raise CommandError(f"--subspaces {args.subspaces} is larger than the dimension of the learn vectors ({dim})")
    t0 = time.perf_counter()
    q.fit(X)
    t_fit = time.perf_counter() - t0
    meta = dict(args.metadata)
    ockstore.save_quantizer(args.output, q, metadata=meta or None)
    hist = q.objective_history
    params = f"M={q.n_subspaces}"
    if args.method in ("ockm", "eckm"):
        params += f" C={q.n_codebooks}"
    if args.method == "ockm":
        params += f" T={q.beam_width}"
    params += f" K={q.n_codewords}"
    print(f"trained {type(q).__name__} {params} ({q.bits} bits) on {n:,} vectors of dim {dim} in "
          f"{t_fit:.1f} s (read {t_read:.1f} s)", file=out)
    print(f"{len(hist) - 1} iterations ({q.stop_reason}); objective (mean squared error): "
          f"{hist[0]:.6g} at init -> {hist[-1]:.6g} final", file=out)
    print(f"wrote {args.output}", file=out)
    return 0


def cmd_build(args, out):
    import ockstore
    from . import datasets

    _check_output(args.output, "-o/--output")
    q = ockstore.load_quantizer(args.quantizer)
    ids = _read_ids(args.ids) if args.ids is not None else None
    show = _progress_enabled(args)
    total = None
    if show or ids is not None:
        total, dim = datasets.count_vecs(args.base)
        _check_dim(args.base, "base vectors", dim, q.dim, f"the quantizer of {args.quantizer}")
        if ids is not None and len(ids) != total:
            raise CommandError(f"{args.ids}: {len(ids):,} ids for {total:,} base vectors in {args.base}")
    chunks = datasets.iter_vecs(args.base, chunk_size=args.chunk_size)
    meta = dict(args.metadata)
    t0 = time.perf_counter()
    bar = Progress(total, "build", enabled=show)
    done = 0
    try:
        with ockstore.IndexWriter(args.output, q, norm_encoding=args.norm_encoding, metadata=meta or None,
                                  n_threads=args.threads) as writer:
            for chunk in chunks:
                if chunk.shape[1] != q.dim:
                    _check_dim(args.base, "base vectors", chunk.shape[1], q.dim, f"the quantizer of {args.quantizer}")
                stop = done + chunk.shape[0]
                if ids is not None and stop > len(ids):
                    raise CommandError(f"{args.ids}: {len(ids):,} ids, but {args.base} has more base vectors")
                writer.add(chunk, ids=None if ids is None else ids[done:stop])
                done = stop
                bar.update(chunk.shape[0])
            if ids is not None and done != len(ids):
                raise CommandError(f"{args.ids}: {len(ids):,} ids for {done:,} base vectors in {args.base}")
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
    print(f"wrote {args.output}: {n:,} vectors, {info['method'].upper()} {info['bits']} bits, "
          f"{info['bytes_per_vector']} bytes/vector ({info['M'] * info['C']} code bytes{norm}), "
          f"{_fmt_bytes(size)}, {elapsed:.1f} s ({_rate(rate)} vectors/s)", file=out)
    return 0


def _search_all(index, Q, k, distance, threads, show, label="search"):
    """Search every query, in slices of SEARCH_BATCH when a progress bar is shown; returns (D, I, seconds)."""
    import numpy as np

    nq = Q.shape[0]
    t0 = time.perf_counter()
    if not show or nq <= SEARCH_BATCH:
        D, I = index.search(Q, k, distance=distance, n_threads=threads)
        return D, I, time.perf_counter() - t0
    D = np.empty((nq, k), dtype=np.float32)
    I = np.empty((nq, k), dtype=np.int64)
    bar = Progress(nq, label, unit="queries", enabled=True)
    try:
        for s in range(0, nq, SEARCH_BATCH):
            D[s:s + SEARCH_BATCH], I[s:s + SEARCH_BATCH] = index.search(Q[s:s + SEARCH_BATCH], k,
                                                                        distance=distance, n_threads=threads)
            bar.update(min(SEARCH_BATCH, nq - s))
    except BaseException:
        bar.abort()
        raise
    bar.close()
    return D, I, time.perf_counter() - t0


def _load_queries(args, index, path):
    Q = _read_vectors(path, "queries", args.limit)
    _check_dim(path, "queries", Q.shape[1], index.dim, f"the index {args.index}")
    if Q.shape[0] == 0:
        raise CommandError(f"{path}: no queries (the file holds zero vectors)")
    return Q


def cmd_search(args, out):
    if args.output is not None:
        _check_output(args.output, "-o/--output")
    with _open_index(args.index) as index:
        Q = _load_queries(args, index, args.queries)
        D, I, elapsed = _search_all(index, Q, args.k, args.distance, args.threads, _progress_enabled(args))
    nq = Q.shape[0]
    if args.output is None:
        _print_results(out, D, I)
        return 0
    _write_ids(args.output, I)
    written = [args.output]
    if args.distances:
        dpath = _distances_path(args.output)
        _write_distances(dpath, D)
        written.append(dpath)
    ms = 1000.0 * elapsed / nq if nq else 0.0
    print(f"searched {nq:,} queries, k={args.k}, {args.distance} in {elapsed:.2f} s ({ms:.3f} ms/query); wrote "
          + " and ".join(written), file=out)
    return 0


def _print_results(out, D, I, per_line=5):
    """A few readable lines per query: rank, id and squared distance, ``per_line`` results a line."""
    import numpy as np

    k = I.shape[1]
    id_w = max(2, len(str(int(I.max()))) if I.size else 2)
    rank_w = len(str(k))
    for qi in range(I.shape[0]):
        cells = []
        for j in range(k):
            d = float(D[qi, j])
            dist = f"{d:.6g}" if np.isfinite(d) else "inf"
            cells.append(f"{j + 1:>{rank_w}}. {int(I[qi, j]):>{id_w}} ({dist})")
        width = max(len(c) for c in cells)
        print(f"query {qi}:  rank. id (squared distance)" if qi == 0 else f"query {qi}:", file=out)
        for s in range(0, k, per_line):
            print("  " + "   ".join(c.ljust(width) for c in cells[s:s + per_line]).rstrip(), file=out)


def _print_info(out, info):
    keys = list(info)
    width = max(len(k) for k in keys) if keys else 0
    for key in keys:
        value = info[key]
        if isinstance(value, dict):
            if not value:
                print(f"{key + ':':<{width + 1}} {{}}", file=out)
                continue
            print(f"{key}:", file=out)
            sub_w = max(len(str(k)) for k in value)
            for k2, v2 in value.items():
                print(f"  {str(k2) + ':':<{sub_w + 1}} {_scalar(v2)}", file=out)
        else:
            print(f"{key + ':':<{width + 1}} {_scalar(value)}", file=out)


def _scalar(v):
    if isinstance(v, (bytes, bytearray)):
        return f"<{len(v)} bytes>"
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(_jsonable(v))
    return str(v)


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if hasattr(v, "item") and callable(v.item):  # numpy scalars
        return v.item()
    return v


def _file_info(path):
    """info() of an index file, or the description of a quantizer file (ockstore.file_info)."""
    import ockstore

    info = ockstore.file_info(path)
    if info["kind"] == "index":
        del info["kind"]  # `ockstore info` prints what Index.info() gives for an index
    return info


def cmd_info(args, out):
    info = _file_info(args.file)
    if args.json:
        print(json.dumps(_jsonable(info), indent=2, sort_keys=False), file=out)
    else:
        _print_info(out, info)
    return 0


def cmd_verify(args, out):
    with _open_index(args.index) as index:
        index.verify()
        n = index.ntotal
    print(f"ok: {n:,} vectors ({args.index})", file=out)
    return 0


def cmd_eval(args, out):
    from . import datasets, evaluation

    with _open_index(args.index) as index:
        info = index.info()
        Q = _load_queries(args, index, args.queries)
        gt = _read_vectors(args.groundtruth, "ground truth", args.limit)
        if gt.dtype.kind not in "iu":
            raise CommandError(f"{args.groundtruth}: ground truth must hold integer ids (.ivecs), got {gt.dtype}")
        if gt.shape[0] != Q.shape[0]:
            raise CommandError(f"{args.groundtruth}: {gt.shape[0]:,} ground-truth rows for {Q.shape[0]:,} queries "
                               f"in {args.queries}")
        if gt.size and int(gt[:, 0].min()) < 0:
            raise CommandError(f"{args.groundtruth}: column 0 must hold the nearest neighbour's id (>= 0)")
        base = None
        if args.base is not None:
            base = datasets.read_vecs(args.base)
            _check_dim(args.base, "base vectors", base.shape[1], index.dim, f"the index {args.index}")
            if base.shape[0] != info["N"]:
                raise CommandError(f"{args.base}: {base.shape[0]:,} base vectors, but the index holds "
                                   f"{info['N']:,}: the mean overall ratio needs the base the index was built from")
        D, I, elapsed = _search_all(index, Q, args.k, args.distance, args.threads, _progress_enabled(args))
    nq = Q.shape[0]
    result = {"index": args.index, "method": info["method"], "bits": info["bits"], "N": info["N"], "queries": nq,
              "k": args.k, "distance": args.distance}
    for r in args.recalls:
        result[f"recall@{r}"] = evaluation.recall_at_r(I, gt, r)
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
    print(f"index:    {args.index} ({info['method'].upper()}, {info['bits']} bits, {info['N']:,} vectors)", file=out)
    print(f"queries:  {nq:,} from {args.queries}, k={args.k}, {args.distance}", file=out)
    width = max(len(f"recall@{r}") for r in args.recalls)
    width = max(width, len("ms/query"), len("MOR@10") if base is not None else 0)
    for r in args.recalls:
        print(f"{f'recall@{r}':<{width}}  {result[f'recall@{r}']:.4f}", file=out)
    if base is not None:
        print(f"{'MOR@10':<{width}}  {result['mean_overall_ratio@10']:.4f}   (mean overall ratio at 10; 1 is exact)",
              file=out)
    threads = "all cores" if args.threads is None else f"{args.threads} thread{'s' if args.threads > 1 else ''}"
    print(f"{'ms/query':<{width}}  {result['ms_per_query']:.3f}   ({nq:,} queries in {elapsed:.2f} s, {threads})",
          file=out)
    return 0


# ------------------------------------------------------------------------------------------------------------ main
def _error(message):
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)


def main(argv=None):
    """Run the command line; returns the exit status (0, 1, 2 or 130)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with status 2 on a usage error
    _check_args(parser, args)
    debug = args.debug
    try:
        try:
            return args.func(args, sys.stdout)
        finally:
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                raise
            except (OSError, ValueError):
                pass
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): stop quietly, as other tools do.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141
    except (CommandError, ValueError, TypeError, OSError, ImportError, MemoryError, EOFError) as exc:
        # FormatError and NotFittedError are ValueErrors; FileNotFoundError, PermissionError, IsADirectoryError are
        # OSErrors. Anything else is a bug in ockstore and keeps its traceback.
        if debug:
            traceback.print_exc()
        if isinstance(exc, MemoryError):
            message = "out of memory" + (f": {_one_line(exc)}" if str(exc) else "")
        elif isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
            message = f"{exc.strerror}: {exc.filename!r}"
        else:
            message = _one_line(exc)
            if message.startswith("path: "):  # the library names its parameter; here the file name says it all
                message = message[len("path: "):]
        _error(message)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
