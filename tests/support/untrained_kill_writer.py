"""A collection writer killed with SIGKILL during the commit that trains its quantizer: helper of
tests/collection/test_untrained_collection.py (docs/ARCHITECTURE.md, "Collections for apps").

    python tests/support/untrained_kill_writer.py FOLDER KILL_AT

Opens the collection FOLDER (untrained, made by the test, whose next add crosses train_size) as the writer, prints
``BEGIN <json>`` (the rows of the crossing add: ids and vectors), runs that add and prints ``ACK <generation>``.
Every file-system event of the add (os.fsync, os.replace, os.rename, os.unlink, os.link) is counted: KILL_AT = n > 0
kills the process just before event n, KILL_AT = -n just after it; KILL_AT = 0 kills nothing and prints
``EVENTS <count>`` at the end.
"""

import json
import os
import sys

if __name__ == "__main__":  # run as a script: import the repository's ockstore
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ockstore  # noqa: E402

from helpers import count_events, gaussian_mixture  # noqa: E402 - next to this script

ROWS = 60
FIRST_ID = 5000


def main(folder, kill_at):
    writer = ockstore.open_collection(folder, "a")
    X = gaussian_mixture(ROWS, writer.dim, seed=77)
    ids = list(range(FIRST_ID, FIRST_ID + ROWS))
    print("BEGIN " + json.dumps({"ids": ids, "X": X.tolist()}), flush=True)
    counter = count_events(kill_at, ("fsync", "replace", "rename", "unlink", "link"))
    writer.add(X, ids)
    print(f"ACK {writer.generation}", flush=True)
    writer.close()
    print(f"EVENTS {counter[0]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
