"""A build that gets killed with SIGKILL: helper of tests/indexfile/test_index_file.py (docs/FORMAT.md I13).

    python tests/support/index_kill_builder.py QUANTIZER_FILE PATH MODE

Builds an index of PATH with the quantizer of QUANTIZER_FILE through ``ockstore.IndexWriter``, from seeded random
vectors, with user metadata {"writer": "kill"}.

MODE
    midway          add a few chunks, print "MIDWAY", then keep adding one small chunk every 0.1 s (about a minute)
                    before closing: the test kills the process from outside after "MIDWAY".
    before-replace  add every chunk, then close, killing itself (SIGKILL) just before the rename: the temporary file
                    is complete and synced, not yet in place.
    after-replace   close, killing itself just after the rename, before the folder is synced.
"""

import os
import sys
import time

import numpy as np

if __name__ == "__main__":  # run as a script: import the repository's ockstore
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ockstore  # noqa: E402

from helpers import sigkill_at  # noqa: E402 - next to this script

CHUNK = 50


def main(quantizer_path, path, mode):
    q = ockstore.load_quantizer(quantizer_path)
    rng = np.random.default_rng(0)
    writer = ockstore.IndexWriter(path, q, metadata={"writer": "kill"}, n_threads=1)
    for _ in range(4):
        writer.add(rng.normal(size=(CHUNK, q.dim)))
    if mode == "midway":
        print("MIDWAY", flush=True)
        for _ in range(600):
            writer.add(rng.normal(size=(CHUNK, q.dim)))
            time.sleep(0.1)
        writer.close()
        print("CLOSED", flush=True)
        return
    if mode not in ("before-replace", "after-replace"):
        raise SystemExit(f"unknown mode {mode!r}")
    with sigkill_at(mode):
        writer.close()
    print("CLOSED", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
