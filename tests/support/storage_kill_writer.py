"""A writer that gets killed with SIGKILL: helper of tests/storage/test_storage.py (docs/FORMAT.md R21).

    python tests/support/storage_kill_writer.py PATH MODE

MODE
    midway          declare a growing section, append a chunk, print "MIDWAY", then keep appending slowly (about a
                    minute) before committing: the test kills the process from outside after "MIDWAY".
    before-fsync    commit, killing itself (SIGKILL) at the commit's first fsync: the temporary file is written, not
                    yet synced nor renamed.
    before-replace  commit, killing itself just before the rename.
    after-replace   commit, killing itself just after the rename, before the folder is synced.

The file this script commits holds one growing section "rows" of dtype <i8 and row shape (4,), whose row i is
[i, i, i, i], for ``NEW_ROWS`` rows, and meta {"writer": "kill"}.
"""

import os
import sys
import time

import numpy as np

if __name__ == "__main__":  # run as a script: import the repository's ockstore
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from ockstore import storage  # noqa: E402

from helpers import sigkill_at  # noqa: E402 - next to this script

NEW_ROWS = 1000


def _rows(start, stop):
    return np.repeat(np.arange(start, stop, dtype="<i8")[:, None], 4, axis=1)


def main(path, mode):
    writer = storage.FileWriter(path)
    writer.declare_growing("rows", "<i8", (4,))
    if mode == "midway":
        writer.append("rows", _rows(0, 100))
        print("MIDWAY", flush=True)
        for i in range(600):
            writer.append("rows", _rows(100 + i, 101 + i))
            time.sleep(0.1)
        writer.commit({"writer": "kill"})
        print("COMMITTED", flush=True)
        return
    writer.append("rows", _rows(0, NEW_ROWS))
    with sigkill_at(mode):
        print("COMMITTING", flush=True)
        writer.commit({"writer": "kill"})
    print("COMMITTED", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
