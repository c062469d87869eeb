"""A reader of a collection in its own process: helper of tests/collection/test_collection_crash.py (snapshots).

    python tests/support/collection_reader.py FOLDER SEED STOP_FILE

Opens FOLDER read-only, searches seeded queries, prints ``OPENED <json>`` (generation and results), then searches
again and again until STOP_FILE exists, each time checking that the results are those of its first search (its
snapshot does not change while a writer commits, compacts and removes files). Then it refreshes and prints
``DONE <json>`` (searches made, the new generation and its results). Exits 1 with ``CHANGED`` if a search differed.
"""

import json
import os
import sys
import time


if __name__ == "__main__":  # run as a script: import the repository's ockstore
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ockstore  # noqa: E402

from helpers import gaussian_mixture  # noqa: E402 - next to this script

K = 8


def results(reader, Q):
    D, I = reader.search(Q, K, n_threads=1)
    return {"generation": reader.generation, "D": D.tolist(), "I": I.tolist()}


def main(folder, seed, stop_file):
    reader = ockstore.open_collection(folder)
    Q = gaussian_mixture(5, reader.dim, seed=seed)
    first = results(reader, Q)
    print("OPENED " + json.dumps(first), flush=True)
    searches = 0
    while not os.path.exists(stop_file):
        again = results(reader, Q)
        searches += 1
        if again != first:
            print("CHANGED " + json.dumps(again), flush=True)
            sys.exit(1)
        time.sleep(0.01)
    reader.verify()  # its files may be gone from the folder: they are still open
    reader.refresh()
    print("DONE " + json.dumps({"searches": searches, **results(reader, Q)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
