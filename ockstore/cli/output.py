"""What the ``ockstore`` command writes: results printed for a person, info as aligned lines or JSON, and result
files (ids and distances), written atomically by the library's vector writer."""

from __future__ import annotations

import json
import os

import numpy as np

from ockstore import vecfiles

__all__ = ["print_results", "print_info", "jsonable", "output_kind", "distances_path", "write_ids", "write_distances",
           "one_line", "fmt_bytes"]


# What the values of a search are, by the index's metric (the heading of printed results).
VALUE_NAMES = {"l2": "squared distance", "ip": "inner product", "cosine": "cosine similarity"}


def print_results(out, D, I, per_line=5, metric="l2"):
    """A few readable lines per query: rank, id and the value of ``metric`` (squared distance, inner product or
    cosine similarity), ``per_line`` results a line. Padding past the last result shows as inf (l2) or -inf."""
    k = I.shape[1]
    id_w = max(2, len(str(int(I.max()))) if I.size else 2)
    rank_w = len(str(k))
    for qi in range(I.shape[0]):
        cells = []
        for j in range(k):
            d = float(D[qi, j])
            dist = f"{d:.6g}" if np.isfinite(d) else ("-inf" if d < 0 else "inf")
            cells.append(f"{j + 1:>{rank_w}}. {int(I[qi, j]):>{id_w}} ({dist})")
        width = max(len(c) for c in cells)
        print(f"query {qi}:  rank. id ({VALUE_NAMES.get(metric, 'distance')})" if qi == 0 else f"query {qi}:",
              file=out)
        for s in range(0, k, per_line):
            print("  " + "   ".join(c.ljust(width) for c in cells[s:s + per_line]).rstrip(), file=out)


def print_info(out, info):
    keys = list(info)
    width = max(len(k) for k in keys) if keys else 0
    for key in keys:
        value = info[key]
        if isinstance(value, dict):
            if not value:
                print(f"{key + ':':<{width + 1}} {{}}", file=out)
                continue
            print(f"{key}:", file=out)
            sub_w = max(len(str(k)) for k in value)
            for k2, v2 in value.items():
                print(f"  {str(k2) + ':':<{sub_w + 1}} {_scalar(v2)}", file=out)
        else:
            print(f"{key + ':':<{width + 1}} {_scalar(value)}", file=out)


def _scalar(v):
    if v is None:  # e.g. store_vectors of an index that stores none (JSON keeps null)
        return "none"
    if isinstance(v, (bytes, bytearray)):
        return f"<{len(v)} bytes>"
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(jsonable(v))
    return str(v)


def jsonable(v):
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if hasattr(v, "item") and callable(v.item):  # numpy scalars
        return v.item()
    return v



def output_kind(path):
    """'ivecs', 'ivecs.gz' or 'npy' from an output name, None for anything else."""
    low = os.path.basename(os.fspath(path)).lower()
    for kind in ("ivecs.gz", "ivecs", "npy"):
        if low.endswith("." + kind) and len(low) > len(kind) + 1:
            return kind
    return None


def distances_path(path):
    """OUT.ivecs -> OUT.dist.fvecs, OUT.ivecs.gz -> OUT.dist.fvecs.gz, OUT.npy -> OUT.dist.npy."""
    kind = output_kind(path)
    stem = path[: -(len(kind) + 1)]
    return stem + {"ivecs": ".dist.fvecs", "ivecs.gz": ".dist.fvecs.gz", "npy": ".dist.npy"}[kind]



def write_distances(path, D):
    """float32 distances as .npy or texmex .fvecs(.gz) beside the ids; +inf padding is kept."""
    vecfiles.write_vecs(path, np.ascontiguousarray(D, dtype=np.float32), compresslevel=6, allow_inf=True)


def write_ids(path, I):
    """Result ids as .npy (int64) or .ivecs(.gz) (int32: larger ids need .npy)."""
    if output_kind(path) == "npy":
        vecfiles.write_vecs(path, np.ascontiguousarray(I, dtype=np.int64))
        return
    if I.size and int(I.max()) > np.iinfo(np.int32).max:
        raise ValueError(f"{path}: ids above {np.iinfo(np.int32).max} do not fit in .ivecs (int32); "
                         "write a .npy file instead")
    vecfiles.write_vecs(path, I.astype(np.int32), compresslevel=6)


def one_line(exc):
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, KeyError):  # str(KeyError) is the repr of the key
        text = f"missing key {text}"
    return " ".join(text.split())


def fmt_bytes(n):
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n} B"  # pragma: no cover

