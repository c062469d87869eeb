"""Child processes of tools/bench_pareto.py (benchmark-only; never imported by the package).

    python tools/_pareto_child.py build  SYSTEM_ID DATA_META OUT_PATH THREADS FEATURES_JSON
    python tools/_pareto_child.py memory SYSTEM_ID DATA_META INDEX_PATH PARAMS_JSON FEATURES_JSON

``build`` builds one system's index into OUT_PATH (written beside it, then renamed into place, so an interrupted
build leaves no file that looks complete) and prints its timings and peak resident memory (VmHWM) as one JSON line.

``memory`` measures what a fresh process gains by opening a saved index and searching it: after importing the
libraries and reading the 1,000 queries into memory, it reads VmRSS (and its anon / file / shmem parts) from
/proc/self/status, opens the index, searches the whole batch once at PARAMS on one thread, and reads them again. It
prints both readings as one JSON line. mmap'ed file pages that the search touched count in RssFile.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))
if str(TOOLS.parent) not in sys.path:
    sys.path.insert(0, str(TOOLS.parent))

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "RAYON_NUM_THREADS")


def thread_env(threads, base=None):
    """The environment with every thread-count variable the libraries read set to ``threads``."""
    env = dict(os.environ if base is None else base)
    for name in THREAD_VARIABLES:
        env[name] = str(threads)
    return env


def systems(data, features):
    """Every system (peers and ockstore configurations) by id."""
    from _pareto_ockstore import ockstore_systems
    from _peers import peer_systems

    return {s.id: s for s in peer_systems(data) + ockstore_systems(data, features)}


def _build(system, out_path, threads):
    from _pareto_data import process_status

    out_path = Path(out_path)
    temp = out_path.with_name(out_path.name + ".partial")
    if temp.is_dir():
        shutil.rmtree(temp)
    elif temp.exists():
        temp.unlink()
    t0 = time.perf_counter()
    timings = system.build(temp, threads)
    build_s = time.perf_counter() - t0
    os.replace(temp, out_path)
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {**timings, "build_s": build_s, "cpu_s": usage.ru_utime + usage.ru_stime, "threads": threads,
            "peak_rss_kb": process_status().get("VmHWM"),
            "built": time.strftime("%Y-%m-%d %H:%M"), "versions": system.versions()}


def _memory(system, index_path, params):
    import numpy as np

    from _pareto_data import process_status

    Q = np.array(system.data.load("queries"), dtype=np.float32)  # in memory before the first reading
    system.import_libraries()
    before = process_status()
    t0 = time.perf_counter()
    system.open(index_path)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ids = system.search(Q, params)
    search_s = time.perf_counter() - t0
    after = process_status()
    return {"before": before, "after": after, "open_s": open_s, "search_s": search_s, "n_results": int(ids.size)}


def main(argv):
    from _pareto_data import DataSpec

    action, system_id, data_meta = argv[0], argv[1], argv[2]
    data = DataSpec.from_json(Path(data_meta).read_text())
    features = json.loads(argv[5])
    system = systems(data, features)[system_id]
    if action == "build":
        result = _build(system, argv[3], int(argv[4]))
    elif action == "memory":
        result = _memory(system, argv[3], json.loads(argv[4]))
    else:
        raise SystemExit(f"unknown action {action!r}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
