"""The command line's advice in error messages: the library's errors name its Python API (``open_collection``,
``store_vectors='uint8'``, ``X row 3``); on the command line the same error names the command to run, the option to
give, the file and the row. Every rewrite of a library message is in ``RULES`` (one place: a new message of the library
that gives Python advice gets its command-line counterpart here, and tests/cli/test_cli_advice.py runs it).
"""

from __future__ import annotations

import re

__all__ = ["command_line_message", "RULES"]

# (pattern, replacement) applied in order to the one-line message of a library error. Replacements may use the
# placeholders {folder} (the command's collection folder, or FOLDER) and {base} (what it reads its vectors from).
RULES = [
    (r"is already a collection; open it with open_collection",
     "is already a collection: add vectors to it with 'ockstore add {folder} BASE_FILE'"),
    (r"is a file, not a collection folder \(an index file opens with ockstore\.open_index\)",
     "is a file, not a collection folder; make a collection with 'ockstore create QUANTIZER_FILE FOLDER'"),
    (r"(not a collection: no manifest file \(manifest\.<generation>\) in the folder)",
     r"\1; make a collection with 'ockstore create QUANTIZER_FILE FOLDER'"),
    (r"\(close that writer first, or open the collection with mode='r' to read it\)",
     "(wait until that command or program has finished; search, info and verify can read the collection meanwhile)"),
    (r"Close this writer and open the collection again", "Run the command again"),
    (r"open it with mode 'r' to read it", "search, info and verify can read it"),
    (r"; open_collection\('[^']*', 'r', skip_damaged=True\) reads the other segments",
     "; restore the file from a backup (a program can read the other segments: docs/ARCHITECTURE.md, \"Collections\")"),
    (r"^ids: (id \d+ is already in the collection) \(use upsert to replace it\)",
     r"--ids: \1 (remove it first with 'ockstore delete {folder} IDS_FILE', then add it)"),
    (r"store_vectors='(float16|float32|uint8)'", r"--store-vectors \1"),
    (r"; use 'float32'", "; use --store-vectors float32"),
    (r"pass None \(or its own, ockstore\.load_quantizer of its quantizer\.ockq\) to add to it",
     "build into it with its own quantizer file, {folder}/quantizer.ockq"),
    (r"open the collection it belongs to with ockstore\.open_collection\(folder\)",
     "give the command the collection's folder, not one of its segment files"),
    (r"\bX row (\d+)", r"{base} row \1"),
    (r"^X has (\d+) rows; fit needs", r"{base} has \1 rows; need"),
    (r"the dimension of X\b", "the dimension of {base}"),
    (r"\bn_threads\b", "--threads"),
    (r"\b(?:the fine quantizer's )?n_subspaces=(\d+)", r"--subspaces \1"),
    (r"\bn_codewords=(\d+)", r"--codewords \1"),
    (r"\bn_lists=(\d+)", r"--lists \1"),
]


def command_line_message(message, args):
    """``message`` (one line) with the library's Python advice replaced by the command line's."""
    base = getattr(args, "base", None) or getattr(args, "learn", None)
    if isinstance(base, (list, tuple)):
        base = base[0] if len(base) == 1 else "the base (the rows of every BASE_FILE in order)"
    base = str(base) if base is not None else "the vectors"
    folder = getattr(args, "folder", None) or getattr(args, "output", None) or "FOLDER"
    for pattern, replacement in RULES:
        for name, value in (("{base}", base), ("{folder}", str(folder))):
            replacement = replacement.replace(name, value.replace("\\", "\\\\"))
        message = re.sub(pattern, replacement, message)
    return message
