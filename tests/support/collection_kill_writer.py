"""A collection writer killed with SIGKILL at a chosen file-system event: helper of
tests/collection/test_collection_crash.py (docs/FORMAT.md C10-C12).

    python tests/support/collection_kill_writer.py QUANTIZER_FILE FOLDER SEED KILL_AT

Opens the collection FOLDER (created by the test) as the writer and runs a sequence of operations drawn from SEED:
adds with and without ids, upserts, deletes, compactions, vacuums. Before each it prints ``BEGIN <json>`` (the
operation with its vectors and ids), after it ``ACK <generation>``.

Every file-system event that makes a commit durable or removes a file (os.fsync, os.replace, os.rename, os.unlink) is
counted. KILL_AT = n > 0: the process kills itself (SIGKILL: no cleanup, as a crash or a power cut) just before event
n; KILL_AT = -n: just after it. KILL_AT = 0: nothing is killed; the script ends by printing ``EVENTS <count>``.
"""

import json
import os
import sys

import numpy as np

if __name__ == "__main__":  # run as a script: import the repository's ockstore
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ockstore  # noqa: E402

from helpers import gaussian_mixture  # noqa: E402 - next to this script
from helpers import count_events  # noqa: E402

OPERATIONS = 14
KINDS = ["add", "add", "add_ids", "upsert", "delete", "delete", "compact", "vacuum"]


def operation(rng, live, dim, step):
    kind = KINDS[int(rng.integers(len(KINDS)))]
    n = int(rng.integers(1, 30))
    X = gaussian_mixture(n, dim, seed=1000 + step).tolist()
    if kind == "add":
        return {"op": "add", "X": X, "ids": None}
    if kind in ("add_ids", "upsert"):
        pool = np.arange(10_000, 10_000 + 60) if kind == "add_ids" else np.concatenate([live, np.arange(50)])
        pool = np.setdiff1d(pool, live) if kind == "add_ids" else np.unique(pool)
        ids = rng.choice(pool, size=min(n, len(pool)), replace=False)
        return {"op": kind, "X": X[:len(ids)], "ids": [int(i) for i in ids]}
    if kind == "delete":
        chosen = rng.choice(live, size=min(len(live), int(rng.integers(1, 25))), replace=False) if len(live) else []
        return {"op": "delete", "ids": [int(i) for i in chosen] + [99_999_999]}
    return {"op": kind}


def main(quantizer_path, folder, seed, kill_at):
    q = ockstore.load_quantizer(quantizer_path)
    rng = np.random.default_rng(seed)
    counter = count_events(kill_at)
    c = ockstore.open_collection(folder, "a")
    for step in range(OPERATIONS):
        op = operation(rng, c.ids(), q.dim, step)
        print("BEGIN " + json.dumps(op), flush=True)
        if op["op"] == "add":
            c.add(np.array(op["X"], dtype=np.float32), n_threads=1)
        elif op["op"] == "add_ids":
            c.add(np.array(op["X"], dtype=np.float32), op["ids"], n_threads=1)
        elif op["op"] == "upsert":
            c.upsert(np.array(op["X"], dtype=np.float32), op["ids"], n_threads=1)
        elif op["op"] == "delete":
            c.delete(op["ids"])
        elif op["op"] == "compact":
            c.compact()
        else:
            c.vacuum()
        print(f"ACK {c.generation}", flush=True)
    c.close()
    print(f"EVENTS {counter[0]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
