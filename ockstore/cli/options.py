"""What the subcommands of ``ockstore`` share in their parsers: the kinds of file they read, argument types checked by
the library's own rules, option groups, and one helper that makes a subcommand's parser (parser.py and
collections.py build on them; this module imports no other module of the command).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import textwrap

from ..quantizers.cartesian import METHODS, PARAMETERS

__all__ = ["VECTOR_FILES", "ID_FILES", "STORE_VECTORS", "DEFAULT_CHUNK", "QUANTIZER_OPTIONS", "Formatter", "wrap",
           "method_defaults", "param_type", "int_type", "positive", "add_command", "add_threads", "add_metadata",
           "add_rerank", "add_probe", "add_progress", "add_quantizer_options", "check_quantizer_options",
           "make_quantizer"]

# Vector and id files the command reads (the extensions ockstore.vecfiles understands).
VECTOR_FILES = ".fvecs, .bvecs, .ivecs (each optionally .gz) or .npy"

# Files of ids to allow (`search --allow`, `delete`; read by inputs.read_allowed_ids).
ID_FILES = ".ivecs or .ivecs.gz (every value), an integer .npy of shape (N,) or (N, 1), or a text file of integers"

# How `build --store-vectors` keeps the vectors for exact re-ranking (the store_vectors of ockstore.IndexWriter).
STORE_VECTORS = ("float16", "float32", "uint8", "sq8")

# Default rows per step when reading a base file (memory bounded by the chunk, not by N).
DEFAULT_CHUNK = 100_000

# The quantizer options of `ockstore train`: destination -> (the option as messages name it, the constructor argument
# it sets). The command passes exactly the options given; the class's own defaults apply to the others.
QUANTIZER_OPTIONS = {"codebooks": ("--codebooks/-C", "n_codebooks"), "beam": ("--beam/-T", "beam_width"),
                     "codewords": ("--codewords/-K", "n_codewords"), "iterations": ("--iterations", "n_iter"),
                     "tol": ("--tol", "tol"), "seed": ("--seed", "seed"), "metric": ("--metric", "metric")}


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keep the hand-wrapped descriptions and examples; show defaults only where the help text says so."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=32, width=min(110, _terminal_width()))


def _terminal_width():
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 100


def wrap(text, width=100):
    """A help description wrapped to ``width`` columns (the formatter keeps the examples' own line breaks)."""
    return textwrap.fill(text, width)


def method_defaults(parameter):
    """'pq 25, ckm 30, ...': each method's default for a constructor argument, read from its signature."""
    return ", ".join(f"{name} {inspect.signature(cls).parameters[parameter].default}"
                     for name, cls in METHODS.items() if parameter in inspect.signature(cls).parameters)


def param_type(parameter, parse=int):
    """An argparse type: the text parsed, then checked by the library's rule for ``parameter``."""
    rule = PARAMETERS[parameter]

    def check(text):
        try:
            return rule.check(parse(text))
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {rule.describe()}, got {text!r}") from None

    check.__name__ = rule.kind
    return check


def int_type(min_value, what="an integer"):
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


def _metadata_item(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


positive = int_type(1, "a positive integer")


def add_threads(p):
    p.add_argument("--threads", type=param_type("n_threads"), default=None, metavar="N",
                   help="threads to use (default: all cores available to the process)")


def add_metadata(p):
    p.add_argument("--metadata", nargs="+", action="extend", type=_metadata_item, default=[], metavar="KEY=VALUE",
                   help="user metadata stored in the file (strings)")


def add_rerank(p):
    p.add_argument("--rerank", type=int_type(0, "an integer"), default=None, metavar="R",
                   help="keep R >= K candidates per query from the codes, then return the best K by their exact "
                        "distances (or scores) from the vectors stored in the index (built with --store-vectors) "
                        "(e.g. -k 10 --rerank 100); 0: no re-ranking; default: 10 x K when the index stores "
                        "vectors, none otherwise")


def add_probe(p):
    p.add_argument("--probe", type=positive, default=None, metavar="N",
                   help="inverted-file indexes (train --lists): scan the N lists nearest each query (1..lists; more "
                        "lists, better recall, slower); default: the index's default_n_probe (lists / 64, see "
                        "'ockstore info'); --probe LISTS scans every list (e.g. --probe 32)")


def add_progress(p):
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar (errors are still reported on stderr)")
    g.add_argument("--progress", action="store_true",
                   help="show the progress bar even when stderr is not a terminal")


def add_quantizer_options(p, required):
    """The options that make a quantizer (train; create without QUANTIZER_FILE): --method, --subspaces, the
    parameters of QUANTIZER_OPTIONS, --lists (an IVF). ``required``: --method and --subspaces must be given."""
    p.add_argument("--method", required=required, choices=tuple(METHODS), help="the quantizer")
    p.add_argument("--subspaces", "-M", required=required, type=param_type("n_subspaces"), metavar="M",
                   help="M, subspaces (1..dim)")
    p.add_argument("--codebooks", "-C", type=param_type("n_codebooks"), default=None, metavar="C",
                   help=f"C, codebooks per subspace (default: {method_defaults('n_codebooks')}; pq and ckm use 1)")
    p.add_argument("--beam", "-T", type=param_type("beam_width"), default=None, metavar="T",
                   help=f"T, beam width of the encoder (default: {method_defaults('beam_width')})")
    p.add_argument("--codewords", "-K", type=param_type("n_codewords"), default=None, metavar="K",
                   help="K, words per codebook, 2..256 (default 256)")
    p.add_argument("--iterations", type=param_type("n_iter"), default=None, metavar="N",
                   help="maximum training iterations (default: the method's own, see below)")
    p.add_argument("--tol", type=param_type("tol", float), default=None,
                   help="stop when an iteration lowers the objective by less than this fraction (default 1e-4)")
    p.add_argument("--seed", type=param_type("seed"), default=None, help="random seed (default 0)")
    p.add_argument("--metric", choices=PARAMETERS["metric"].choices, default=None,
                   help="what searches rank by: l2, squared L2 distance, ascending (the default); ip, inner product, "
                        "or cosine, cosine similarity, both descending (e.g. --metric ip)")
    p.add_argument("--lists", type=int_type(1, "a positive integer"), default=None, metavar="N",
                   help="make an inverted file (IVF) of N coarse lists: vectors go to the list of their nearest "
                        "k-means centroid and the quantizer encodes their residuals; searches then scan the lists "
                        "nearest each query only (search/eval --probe). Needs at least N training vectors "
                        "(e.g. --lists 1024 for a million vectors); default: a flat index")


def check_quantizer_options(sub, args):
    """Each option of QUANTIZER_OPTIONS given must be a parameter of the method (usage error otherwise)."""
    accepted = inspect.signature(METHODS[args.method]).parameters
    for dest, (flag, parameter) in QUANTIZER_OPTIONS.items():
        if getattr(args, dest) is not None and parameter not in accepted:
            sub.error(f"argument {flag}: method {args.method} has no {parameter} "
                      f"({METHODS[args.method].__name__} takes {', '.join(accepted)})")


def make_quantizer(args):
    """The unfitted quantizer of --method, --subspaces, the QUANTIZER_OPTIONS given (the others: the class's own
    defaults) and --lists (an IVF over it)."""
    import ockstore  # noqa: PLC0415 - the IVF class

    given = {parameter: getattr(args, dest) for dest, (_flag, parameter) in QUANTIZER_OPTIONS.items()
             if getattr(args, dest) is not None}
    threads = getattr(args, "threads", None)
    q = METHODS[args.method](args.subspaces, **given, n_threads=threads, verbose=getattr(args, "verbose", False))
    if args.lists is not None:
        return ockstore.IVF(args.lists, q, seed=0 if args.seed is None else args.seed, n_threads=threads)
    return q


def add_command(sub, name, text):
    """The parser of subcommand ``name`` on the subparsers action ``sub``, from ``text``: its first line is the help
    line ``ockstore --help`` shows; then, up to the line ``example:`` or ``examples:``, the description, whose
    paragraphs (separated by blank lines) are re-wrapped to 100 columns; from that line on the examples, kept as
    written. ``args.subparser`` is the parser, for the usage errors found after parsing."""
    help, _, rest = text.partition("\n")
    lines = rest.split("\n")
    start = next(i for i, line in enumerate(lines) if line in ("example:", "examples:"))
    paragraphs = "\n".join(lines[:start]).strip().split("\n\n")
    description = "\n\n".join(wrap(" ".join(paragraph.split())) for paragraph in paragraphs)
    p = sub.add_parser(name, formatter_class=Formatter, help=help, description=description,
                       epilog="\n".join(lines[start:]))
    p.set_defaults(subparser=p)
    return p
