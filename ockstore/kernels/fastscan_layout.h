/* The fast scan's block layout (fastscan.h, 1.; docs/FORMAT.md "Fast-scan files" gives its bytes): rows in blocks
 * of 32, two words per byte. The sizes of blocks, a word read back from a block (the exact stage reads its
 * candidates' words this way), and packing and unpacking, which the Python layer uses to write, check and decode a
 * file's blocks.
 */
#ifndef OCKSTORE_FASTSCAN_LAYOUT_H
#define OCKSTORE_FASTSCAN_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define OCK_FS_BLOCK 32            /* rows per block */
#define OCK_FS_LANE 16             /* bytes per column: rows i and i + 16 share byte i */
#define OCK_FS_WORDS 16            /* entries per table (words below 16) */
#define OCK_FS_MAX_SUM 65535       /* the accumulator's range (uint16) */

/* Columns of a block for W words (W rounded up to even: one 32-byte load feeds two columns). */
static inline int ock_fs_columns(int W) { return W + (W & 1); }

/* Bytes of one block for W words. */
static inline size_t ock_fs_block_bytes(int W) { return (size_t)OCK_FS_LANE * (size_t)ock_fs_columns(W); }

/* Blocks holding n rows. */
static inline size_t ock_fs_blocks(size_t n) { return (n + OCK_FS_BLOCK - 1) / OCK_FS_BLOCK; }

/* --------------------------------------------------------------------------------------------------------------------
 * Word access, packing and unpacking. */

/* Word w of row i (0..31) of a block. */
static inline unsigned ock_fs_word(const uint8_t *block, int i, int w) {
    return ((unsigned)block[(size_t)w * OCK_FS_LANE + (i & 15)] >> ((i >> 4) << 2)) & 15u;
}

/* Pack rows codes[0..n-1] (n x W bytes, each < 16) into ock_fs_blocks(n) blocks at `blocks` (zeroing the padding:
 * the odd column and the rows past n of the last block). */
static inline void ock_fs_pack(const uint8_t *codes, size_t n, int W, uint8_t *blocks) {
    const int cols = ock_fs_columns(W);
    const size_t bytes = ock_fs_block_bytes(W);
    const size_t nb = ock_fs_blocks(n);
    memset(blocks, 0, nb * bytes);
    for (size_t r = 0; r < n; r++) {
        uint8_t *block = blocks + (r / OCK_FS_BLOCK) * bytes;
        const int i = (int)(r % OCK_FS_BLOCK);
        const int shift = i < 16 ? 0 : 4;
        const uint8_t *code = codes + r * (size_t)W;
        for (int w = 0; w < W; w++) block[(size_t)w * OCK_FS_LANE + (i & 15)] |= (uint8_t)((code[w] & 15) << shift);
    }
    (void)cols;
}

/* The inverse: rows start..stop-1 of the blocks, written to codes (stop - start rows of W bytes). */
static inline void ock_fs_unpack(const uint8_t *blocks, int W, size_t start, size_t stop, uint8_t *codes) {
    const size_t bytes = ock_fs_block_bytes(W);
    for (size_t r = start; r < stop; r++) {
        const uint8_t *block = blocks + (r / OCK_FS_BLOCK) * bytes;
        const int i = (int)(r % OCK_FS_BLOCK);
        uint8_t *code = codes + (r - start) * (size_t)W;
        for (int w = 0; w < W; w++) code[w] = (uint8_t)ock_fs_word(block, i, w);
    }
}

#endif
