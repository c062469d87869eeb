/* Rows of several parts in one collector (docs/ARCHITECTURE.md, "Search", *One pipeline*).
 *
 * A search of a collection scans the rows of every segment (a part) into one collector per query, so that the
 * candidates of all segments compete by their bound and one re-ranking loop serves them all. A collector holds row
 * handles: part p's row r is (p << OCK_PART_SHIFT) | r, so one int64 carries both (2^40 rows per part, 2^23 parts)
 * and a single part's handles are its row numbers. Ties are broken by id: the id table holds one pointer per part
 * (NULL: the row number is the id), and a NULL table means every handle is its own id. */
#ifndef OCKSTORE_ROWS_H
#define OCKSTORE_ROWS_H

#include <stdint.h>

#define OCK_PART_SHIFT 40
#define OCK_ROW_MASK ((((int64_t)1) << OCK_PART_SHIFT) - 1)

/* The id of a row handle (-1 for the empty slot -1). */
static inline int64_t ock_row_id(const int64_t **ids, int64_t handle) {
    if (handle < 0) return -1;
    if (ids == NULL) return handle;
    const int64_t *part = ids[handle >> OCK_PART_SHIFT];
    const int64_t row = handle & OCK_ROW_MASK;
    return part != NULL ? part[row] : row;
}

#endif
