/* One SIMD level's kernels: included by simd.c once per level, with OCK_LEVEL, OCK_FN(name), OCK_TARGET (and at the
 * AVX2 and AVX-512 levels OCK_TARGET_AVX2) defined, as simd.h's "One convention" says. No include guard: each
 * inclusion compiles every level body below again, for the level in force, and ends with that level's table
 * (ock_kernels_portable, ock_kernels_avx2, ...).
 *
 * For the kernels written with intrinsics, AVX2 and AVX-512 share one body written with the vector operations below
 * (ock_vf, a register of OCK_VW floats, and OCK_V*); where the two instruction sets offer different operations (AVX-512's masks
 * and compress, AVX2's permutation tables) the body has an #if per level.
 */

#if OCK_LEVEL == OCK_LEVEL_AVX2
#define ock_vf __m256
#define OCK_VW 8
#define OCK_NV 2 /* registers of columns per block of the table product: 4 rows x 2 = 8 of the 16 registers */
#define OCK_VLOAD(p) _mm256_loadu_ps(p)
#define OCK_VSTORE(p, v) _mm256_storeu_ps(p, v)
#define OCK_VSET1(x) _mm256_set1_ps(x)
#define OCK_VZERO() _mm256_setzero_ps()
#define OCK_VADD(a, b) _mm256_add_ps(a, b)
#define OCK_VSUB(a, b) _mm256_sub_ps(a, b)
#define OCK_VMUL(a, b) _mm256_mul_ps(a, b)
#define OCK_VMIN(a, b) _mm256_min_ps(a, b)
#define OCK_VFMADD(a, b, c) _mm256_fmadd_ps(a, b, c)
#define OCK_VEQ_BITS(a, b) ((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)))
#elif OCK_LEVEL == OCK_LEVEL_AVX512
#define ock_vf __m512
#define OCK_VW 16
#define OCK_NV 4 /* registers of columns per block of the table product: 4 rows x 4 = 16 of the 32 registers */
#define OCK_VLOAD(p) _mm512_loadu_ps(p)
#define OCK_VSTORE(p, v) _mm512_storeu_ps(p, v)
#define OCK_VSET1(x) _mm512_set1_ps(x)
#define OCK_VZERO() _mm512_setzero_ps()
#define OCK_VADD(a, b) _mm512_add_ps(a, b)
#define OCK_VSUB(a, b) _mm512_sub_ps(a, b)
#define OCK_VMUL(a, b) _mm512_mul_ps(a, b)
#define OCK_VMIN(a, b) _mm512_min_ps(a, b)
#define OCK_VFMADD(a, b, c) _mm512_fmadd_ps(a, b, c)
#define OCK_VEQ_BITS(a, b) ((unsigned)_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ))
#endif

/* The level bodies. */
#include "encoder.h"
#include "tables.h"
#include "ivf.h"
#include "rerank_values.h"
#include "fastscan_simd.h"

static const ock_kernels OCK_FN(ock_kernels) = {
#if OCK_LEVEL == OCK_LEVEL_AVX512
    "avx512",
#elif OCK_LEVEL == OCK_LEVEL_AVX2
    "avx2",
#else
    "portable",
#endif
    OCK_FN(unary_inplace),
    OCK_FN(min_of_sum),
    OCK_FN(first_index_of_sum),
    OCK_FN(min),
    OCK_FN(first_index),
    OCK_FN(sum_of_squares),
    OCK_FN(max_abs),
    OCK_FN(add_rows_to_words),
    OCK_FN(encoder_tables),
    OCK_FN(select_smallest),
    OCK_FN(leaves_min),
    OCK_FN(leaves_locate),
    OCK_FN(rotate),
    OCK_FN(tables),
    OCK_FN(coarse_dots),
#if OCK_LEVEL == OCK_LEVEL_PORTABLE
    NULL,
#else
    OCK_FN(coarse_alone),
#endif
    &OCK_FN(rerank_values),
    OCK_FN(fs_scan_run),
    OCK_FN(fs_scan_run2),
    OCK_FN(fs_block_sums),
};

#ifdef OCK_VW
#undef ock_vf
#undef OCK_VW
#undef OCK_NV
#undef OCK_VLOAD
#undef OCK_VSTORE
#undef OCK_VSET1
#undef OCK_VZERO
#undef OCK_VADD
#undef OCK_VSUB
#undef OCK_VMUL
#undef OCK_VMIN
#undef OCK_VFMADD
#undef OCK_VEQ_BITS
#endif
