"""The automatic merge policy of a collection: size-tiered, as LevelDB/Cassandra's size-tiered compaction and
Lucene's LogMergePolicy (docs/FORMAT.md section 13.5, docs/ARCHITECTURE.md "Collections").

A segment holding n live rows belongs to tier t(n) = floor(log_F n) (tier 0 for n < F), F being the collection's
``merge_factor`` (10 by default). After every commit that changes the segments, while some tier holds F or more
segments, the F oldest of the lowest such tier are merged into one segment of their live rows (which belongs to a
higher tier and may complete it in turn: such cascades are planned at once, so a row is copied once per commit).
A merge whose result would exceed ``max_merge_rows`` is not made: larger segments are left to ``compact()``.

Consequences, below ``max_merge_rows``: each tier holds at most F - 1 segments, so N live rows sit in at most
(F - 1) (floor(log_F N) + 1) segments (O(log N): with F = 10, a million single-row adds leave at most 54 segments,
and exactly as many as the sum of the decimal digits of N when nothing is deleted); a row is copied at most once per
tier it climbs, floor(log_F N) times in all. Segments with no live row left are dropped by the commit that deletes
their last row, without a merge.

Pure functions of the segment sizes: no files, no I/O.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MERGE_FACTOR", "DEFAULT_MAX_MERGE_ROWS", "tier", "plan_merges"]

DEFAULT_MERGE_FACTOR = 10

# Merges the policy may make on its own stop at this many rows (16.8 M rows: about 300 MB of 64-bit codes, norm bytes
# and ids, copied in a few seconds): an add never waits for a merge larger than this. compact() has no such limit.
DEFAULT_MAX_MERGE_ROWS = 1 << 24


def tier(n_rows, factor):
    """floor(log_factor(n_rows)), 0 for n_rows < factor (exact integer arithmetic)."""
    t = 0
    while n_rows >= factor:
        n_rows //= factor
        t += 1
    return t


def plan_merges(live_rows, factor, max_rows=DEFAULT_MAX_MERGE_ROWS):
    """The merges that the policy makes for segments of ``live_rows`` (in manifest order, oldest first).

    Parameters
    ----------
    live_rows : sequence of int >= 1
    factor : int >= 2
        F, the number of segments a tier may not reach.
    max_rows : int >= 1
        No merge produces more rows than this.

    Returns
    -------
    list of sorted lists of indices into ``live_rows``
        Each list is merged into one new segment; the lists are disjoint, and every index is in at most one. Empty
        when nothing is to be merged.
    """
    # groups[j]: the original segments making up segment j of the evolving list; sizes[j] its live rows.
    groups = [[i] for i in range(len(live_rows))]
    sizes = [int(n) for n in live_rows]
    merged = []  # indices into groups of those that are the result of a merge
    while True:
        tiers = {}
        for j, n in enumerate(sizes):
            tiers.setdefault(tier(n, factor), []).append(j)
        chosen = None
        for t in sorted(tiers):
            members = tiers[t][:factor]
            if len(members) >= factor and sum(sizes[j] for j in members) <= max_rows:
                chosen = members
                break
        if chosen is None:
            break
        first = chosen[0]
        union = sorted(i for j in chosen for i in groups[j])
        total = sum(sizes[j] for j in chosen)
        keep = [j for j in range(len(groups)) if j not in chosen[1:]]
        was_merged = {first} | {j for j in merged if j not in chosen}
        renumber = {old: new for new, old in enumerate(keep)}
        groups[first], sizes[first] = union, total
        groups = [groups[j] for j in keep]
        sizes = [sizes[j] for j in keep]
        merged = [renumber[j] for j in sorted(was_merged)]
    return [groups[j] for j in merged]
