"""The ``ockstore`` command: train a quantizer, build an index file, search it, tune it, inspect, verify and evaluate
it; create a collection folder and change it (add, delete, compact, retrain).

    ockstore [--debug] [--version] {train,build,search,tune,info,verify,eval,create,add,delete,compact,retrain} ...

Exit status (docs/ARCHITECTURE.md, "Command line"): 0 on success; 2 for a usage error (argparse prints the usage
line and the message); 1 for a data or format error, including a missing or unreadable input file, reported as exactly
one line ``ockstore: error: <message>`` on stderr (``--debug`` adds the traceback); 130 when interrupted. A warning
(e.g. a CollectionWarning: a collection opened at an older generation) is one line ``ockstore: warning: <message>``.

    parser.py       the argument parser and the checks that need several options (usage errors)
    commands.py     one function per subcommand, over ockstore's public API only
    collections.py  the subcommands of collections (create, add, delete, compact, retrain) and their parsers
    options.py      what the parsers share: file kinds, argument types, option groups, add_command
    inputs.py       the input files of the subcommands and CommandError (data errors found by the command)
    output.py       printed results and info, result files
    advice.py       the library's advice in error messages rewritten as the command line's (commands, options, files)
    progress.py     the progress bar of long work (stderr, only on a terminal unless --progress)

Imports point one way: __init__ -> parser, commands -> collections -> inputs -> options (output and progress
import none of these).

Results go to stdout or to output files, which are written atomically (a temporary sibling, fsynced, renamed).
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings

from .advice import command_line_message
from .commands import COMMANDS
from .inputs import CommandError
from .output import one_line
from .parser import PROG, build_parser, check_args

__all__ = ["main", "build_parser"]


def _error(message):
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)


def _warning(message, category, filename, lineno, file=None, line=None):
    """warnings.showwarning of the command: one line in its own format (no source line of ockstore)."""
    print(f"{PROG}: warning: {one_line(message)}", file=sys.stderr, flush=True)


def main(argv=None):
    """Run the command line; returns the exit status (0, 1, 2 or 130)."""
    with warnings.catch_warnings():
        warnings.showwarning = _warning
        return _main(argv)


def _main(argv):
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with status 2 on a usage error
    check_args(args)
    debug = args.debug
    try:
        try:
            return COMMANDS[args.command](args, sys.stdout)
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
            message = "out of memory" + (f": {one_line(exc)}" if str(exc) else "")
        elif isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
            message = f"{exc.strerror}: {exc.filename!r}"
        else:
            message = one_line(exc)
            if message.startswith("path: "):  # the library names its parameter; here the file name says it all
                message = message[len("path: "):]
            if not isinstance(exc, CommandError):  # the library's advice names Python calls: the command's instead
                message = command_line_message(message, args)
        _error(message)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
