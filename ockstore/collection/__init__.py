"""Collections: data that changes (add, upsert, delete, compact) while every file stays immutable and mmap-able, as
in LSM trees, LevelDB and Lance (docs/ARCHITECTURE.md, "Collections"; the folder is specified in docs/FORMAT.md
section 13).

A collection is a folder: one quantizer file shared by every segment, segment files (ordinary index files that always
store ids), deletion files (the sorted ids deleted from one segment) and numbered manifests ``manifest.<generation>``
listing the live segments of each generation with their deletion files. A change writes new files, then the next
manifest, atomically: the current state is the newest manifest that verifies, and a crash at any instant leaves the
last committed generation intact. One writer holds the folder's lock; readers take no lock and keep the generation
they opened (a snapshot) until ``refresh()``.

    names.py       the file names of a folder and what each says
    manifest.py    manifests and deletion files: writing them, reading and checking them
    lock.py        the writer's OS lock (flock; msvcrt on Windows)
    policy.py      the size-tiered merge policy (pure functions of segment sizes)
    merge.py       the exact merge of per-part top-k results (``merge_topk``)
    scan.py        flat segments scanned as one index: one table model, each segment bounded by the k-th best
    segments.py    opened segments, id lookups, deletion masks; writing new and merged segments
    snapshot.py    one opened generation: loading the newest one, searching it
    commit.py      a commit (files, then the manifest), removing old generations, vacuum
    training.py    collections that train their quantizer: the default train_size, the training commit
    collection.py  the Collection class
    folder.py      create_collection, open_collection

Searching scans every segment with its deletions as a row filter (the bitmap of filtered search, built once per
segment and deletion file, never per search) and merges the per-segment top-k exactly: ties by the smaller id, so
the results equal one search over an index holding the live rows. Flat segments are scanned by ``scan.py`` with one
table model, each segment bounded by the k-th best distance so far; other segments (IVF, with ``n_probe``) by their
own ``Index.search``, merged with ``merge_topk``.

Distributed builds (an entry point for a Dask build, docs/ARCHITECTURE.md "Collections"): the client opens the
collection as the writer and ships ``collection.segment_spec`` (a picklable SegmentSpec: quantizer, norm encoding,
stored vectors) to its workers with disjoint id ranges (from ``collection.next_id``); each worker calls
``write_pending_segment(folder, spec, X, ids)`` (or streams chunks through a ``SegmentWriter``), which writes a hidden
``.pending.<hex>.ock`` file into the folder and returns a PendingSegment (path, rows, id range); a retried task just
writes another one. The client then calls ``collection.commit_segments(pendings, merge=False)``: every pending file
is checked (same quantizer, encodings, ids unique and not live) and all become segments in ONE commit, or none does.
Files of failed tasks are unreferenced and removed by ``vacuum()`` (which must not run while workers are still
writing). Searching per worker: each worker opens its share of the segments of one generation with
``snapshot.open_generation(folder, generation, files=...)``, searches it, and the client merges the per-worker top-k
with ``merge_topk``. ``ockstore.distributed`` does all this on Dask (docs/ARCHITECTURE.md, "Distributed builds and
searches").
"""

from .collection import Collection
from .folder import create_collection, open_collection
from ..search.merge import merge_topk
from .policy import DEFAULT_MERGE_FACTOR, plan_merges
from .segments import PendingSegment, SegmentSpec, SegmentWriter, write_pending_segment
from .snapshot import CollectionWarning

__all__ = ["Collection", "create_collection", "open_collection", "merge_topk", "CollectionWarning",
           "DEFAULT_MERGE_FACTOR", "plan_merges", "PendingSegment", "SegmentSpec", "SegmentWriter",
           "write_pending_segment"]
