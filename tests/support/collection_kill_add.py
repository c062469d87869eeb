"""A collection writer killed with SIGKILL in the middle of an add, leaving what a killed writer leaves: helper of
tests/collection/test_collection_disk.py (docs/FORMAT.md C16).

    python tests/support/collection_kill_add.py FOLDER POINT

Opens the collection FOLDER (made by the test) as the writer and adds 20,000 vectors (several chunks), killing itself
at POINT:

    spill           at the third FileWriter.append: the segment's spill files (temporary files) hold part of its rows
    before-replace  when the segment's temporary file is complete, instead of putting it in place
    pending         after writing a pending segment (as a distributed build's worker), before committing it
"""

import os
import sys

if __name__ == "__main__":  # run as a script: import the repository's ockstore
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

import ockstore  # noqa: E402
from ockstore.storage import writer as storage_writer  # noqa: E402

from helpers import die, gaussian_mixture, sigkill_at  # noqa: E402 - next to this script

ROWS = 20_000


def main(folder, point):
    c = ockstore.open_collection(folder, "a")
    X = gaussian_mixture(ROWS, c.dim, seed=5)
    if point == "pending":
        ockstore.collection.write_pending_segment(folder, c.segment_spec, X, np.arange(ROWS) + 10**6)
        die()
    if point == "spill":
        real, calls = storage_writer.FileWriter.append, [0]

        def append(self, name, rows):
            calls[0] += 1
            if calls[0] == 3:
                die()
            return real(self, name, rows)

        storage_writer.FileWriter.append = append
        c.add(X, n_threads=1)
    with sigkill_at(point):
        c.add(X, n_threads=1)
    raise SystemExit("not killed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
