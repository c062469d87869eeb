/* The exact values of re-ranking at each SIMD level (rerank.h defines what is computed, and runs the loop over a
 * query's candidates): one function per (row kind, metric), the kind and the metric constants inside, and the level's
 * table of them, OCK_FN(rerank_values), which the kernels' table holds (simd.h: the caller passes it to the loop once
 * per query). A level body (simd.h, "One convention"): simd_level.h includes it once per level.
 *
 * The portable level runs plain loops that compilers vectorise for the baseline instruction set. The AVX2 and the
 * AVX-512 levels run the same AVX2 (+F16C: every CPU with AVX2 has it) intrinsics, compiled for AVX2 at both
 * (OCK_TARGET_AVX2; AVX-512 has no version of its own). Both compute the same 16 lanes in the same order, so every
 * level returns bitwise the same values.
 */

/* The attributes of this level's functions: its target, and rerank.h's fixed rounding (OCK_RR_FN, OCK_RR_INLINE). */
#if OCK_LEVEL == OCK_LEVEL_PORTABLE
#define OCK_RR_LEVEL_FN OCK_TARGET OCK_RR_FN
#define OCK_RR_LEVEL_INLINE OCK_TARGET OCK_RR_INLINE
#else
#define OCK_RR_LEVEL_FN OCK_TARGET_AVX2 OCK_RR_FN
#define OCK_RR_LEVEL_INLINE OCK_TARGET_AVX2 OCK_RR_INLINE
#endif

#if OCK_LEVEL == OCK_LEVEL_PORTABLE
/* ------------------------------------------------------------------------------------------------------------------
 * The portable level: 16 values of a row as float64, and the lane sums (compilers vectorise these loops). */

/* A float16 bit pattern as a float32 value, exactly (normal, subnormal, zero, inf and NaN alike). The magnitude bits,
 * shifted into a float32's exponent and mantissa fields, read as a float32 2^112 times too small (subnormals too:
 * their leading bit then comes from the mantissa itself), and multiplying by 2^112 is exact. Exponent 31 (inf, NaN)
 * has no such image and is built directly. */
OCK_TARGET static inline float OCK_FN(rr_half_to_float)(uint16_t h) {
    uint32_t magnitude = (uint32_t)(h & 0x7fffu) << 13, bits;
    float f;
    if ((h & 0x7c00u) == 0x7c00u) {
        bits = magnitude | 0x7f800000u;
    } else {
        const uint32_t two_112 = 0x77800000u; /* 2^112: exponent field 127 + 112 */
        float scale;
        memcpy(&scale, &two_112, 4);
        memcpy(&f, &magnitude, 4);
        f *= scale;
        memcpy(&bits, &f, 4);
    }
    bits |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&f, &bits, 4);
    return f;
}

/* The halving tree over 16 lanes (the order the header comment defines). */
OCK_TARGET static inline double OCK_FN(rr_tree)(const double *a) {
    double s8[8], s4[4], s2[2];
    for (int j = 0; j < 8; j++) s8[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++) s4[j] = s8[j] + s8[j + 4];
    for (int j = 0; j < 2; j++) s2[j] = s4[j] + s4[j + 2];
    return s2[0] + s2[1];
}

/* The bit pattern of OCK_RR_MAX_ABS: a float32 whose magnitude bits exceed it is too large, inf or NaN. */
/* x[0..15] = the values of dimensions p0 .. p0+15 of a row, in float64; `block` points at the first of them, n <= 16
 * are real and the rest are zero. For float32 rows *maxbits collects the largest magnitude bit pattern. */
OCK_RR_LEVEL_INLINE void OCK_FN(rr_load16)(const ock_rr_query *qc, int kind, const unsigned char *block, int p0,
                                          int n, double *x, uint32_t *maxbits) {
    int j;
    if (kind == OCK_RR_F32) {
        float v[OCK_RR_LANES] = {0};
        uint32_t bits[OCK_RR_LANES];
        memcpy(v, block, (size_t)n * 4);
        memcpy(bits, v, sizeof bits);
        for (j = 0; j < OCK_RR_LANES; j++) {
            const uint32_t m = bits[j] & 0x7fffffffu;
            *maxbits = m > *maxbits ? m : *maxbits;
            x[j] = (double)v[j];
        }
    } else if (kind == OCK_RR_F16) {
        uint16_t h[OCK_RR_LANES] = {0};
        memcpy(h, block, (size_t)n * 2);
        for (j = 0; j < OCK_RR_LANES; j++) x[j] = (double)OCK_FN(rr_half_to_float)(h[j]);
    } else {
        unsigned char c[OCK_RR_LANES] = {0};
        memcpy(c, block, (size_t)n);
        if (kind == OCK_RR_U8) {
            for (j = 0; j < OCK_RR_LANES; j++) x[j] = (double)c[j];
        } else {
            const double *lo = qc->lo + p0, *step = qc->step + p0;
            for (j = 0; j < OCK_RR_LANES; j++) x[j] = lo[j] + step[j] * (double)c[j];
        }
    }
}

OCK_RR_LEVEL_INLINE double OCK_FN(rr_value)(const ock_rr_query *qc, int kind, int metric, const unsigned char *row,
                                          int *bad) {
    const int P = qc->P;
    if (kind == OCK_RR_U8_INT) {
        int32_t s = 0, xx = 0;  /* exact integers: any order gives the same sums */
        for (int p = 0; p < P; p++) {
            const int32_t x = row[p], q = qc->q16[p];
            if (metric == OCK_RR_L2) {
                s += (q - x) * (q - x);
            } else {
                s += q * x;
                if (metric == OCK_RR_COSINE) xx += x * x;
            }
        }
        if (metric != OCK_RR_COSINE) return (double)s;
        if (xx == 0) *bad |= OCK_RR_ZERO_VECTOR;
        return (double)s / sqrt((double)xx);
    }
    double acc[OCK_RR_LANES] = {0}, acc2[OCK_RR_LANES] = {0}, x[OCK_RR_LANES];
    uint32_t maxbits = 0;
    const int itemsize = ock_rr_itemsize(kind);
    for (int p0 = 0; p0 < P; p0 += OCK_RR_LANES) {
        const double *q = qc->q + p0;
        OCK_FN(rr_load16)(qc, kind, row + (size_t)p0 * itemsize, p0, P - p0 < OCK_RR_LANES ? P - p0 : OCK_RR_LANES, x,
                      &maxbits);
        if (metric == OCK_RR_L2) {
            for (int j = 0; j < OCK_RR_LANES; j++) {
                const double d = q[j] - x[j];
                acc[j] = acc[j] + d * d;
            }
        } else {
            for (int j = 0; j < OCK_RR_LANES; j++) acc[j] = acc[j] + q[j] * x[j];
            if (metric == OCK_RR_COSINE)
                for (int j = 0; j < OCK_RR_LANES; j++) acc2[j] = acc2[j] + x[j] * x[j];
        }
    }
    double value = OCK_FN(rr_tree)(acc);
    if (metric == OCK_RR_COSINE) {
        const double xx = OCK_FN(rr_tree)(acc2);
        if (xx == 0) *bad |= OCK_RR_ZERO_VECTOR;
        value = value / sqrt(xx);
    }
    if (maxbits > ock_rr_max_abs_bits() || !isfinite(value)) *bad |= OCK_RR_BAD_VALUES;
    return value;
}
#else
/* ------------------------------------------------------------------------------------------------------------------
 * The AVX2 and AVX-512 levels: AVX2 (+F16C), the same 16 lanes as four registers of four float64 (lanes 0-3,
 * 4-7, 8-11, 12-15). */

/* The halving tree: lanes j and j + 8 (registers 0+2, 1+3), then j and j + 4, then the 128-bit halves. */
OCK_RR_LEVEL_INLINE double OCK_FN(rr_tree)(__m256d a0, __m256d a1, __m256d a2, __m256d a3) {
    const __m256d s4 = _mm256_add_pd(_mm256_add_pd(a0, a2), _mm256_add_pd(a1, a3));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

OCK_RR_LEVEL_INLINE int32_t OCK_FN(rr_hsum_epi32)(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* The 16 values at `block` (dimensions p0 ..) as four float64 registers. */
OCK_RR_LEVEL_INLINE void OCK_FN(rr_load16)(const ock_rr_query *qc, int kind, const unsigned char *block, int p0,
                                           __m256d *x, __m256i *maxbits) {
    if (kind == OCK_RR_F32) {
        const __m256 v0 = _mm256_loadu_ps((const float *)block), v1 = _mm256_loadu_ps((const float *)block + 8);
        const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
        *maxbits = _mm256_max_epu32(*maxbits, _mm256_and_si256(_mm256_castps_si256(v0), abs_mask));
        *maxbits = _mm256_max_epu32(*maxbits, _mm256_and_si256(_mm256_castps_si256(v1), abs_mask));
        x[0] = _mm256_cvtps_pd(_mm256_castps256_ps128(v0));
        x[1] = _mm256_cvtps_pd(_mm256_extractf128_ps(v0, 1));
        x[2] = _mm256_cvtps_pd(_mm256_castps256_ps128(v1));
        x[3] = _mm256_cvtps_pd(_mm256_extractf128_ps(v1, 1));
    } else if (kind == OCK_RR_F16) {
        const __m256 v0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)block));
        const __m256 v1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(block + 16)));
        x[0] = _mm256_cvtps_pd(_mm256_castps256_ps128(v0));
        x[1] = _mm256_cvtps_pd(_mm256_extractf128_ps(v0, 1));
        x[2] = _mm256_cvtps_pd(_mm256_castps256_ps128(v1));
        x[3] = _mm256_cvtps_pd(_mm256_extractf128_ps(v1, 1));
    } else {
        const __m128i c = _mm_loadu_si128((const __m128i *)block);
        x[0] = _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(c));
        x[1] = _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_srli_si128(c, 4)));
        x[2] = _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_srli_si128(c, 8)));
        x[3] = _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_srli_si128(c, 12)));
        if (kind == OCK_RR_SQ8) {
            const double *lo = qc->lo + p0, *step = qc->step + p0;
            for (int i = 0; i < 4; i++)
                x[i] = _mm256_add_pd(_mm256_loadu_pd(lo + 4 * i), _mm256_mul_pd(_mm256_loadu_pd(step + 4 * i), x[i]));
        }
    }
}

OCK_RR_LEVEL_INLINE double OCK_FN(rr_value)(const ock_rr_query *qc, int kind, int metric, const unsigned char *row,
                                            int *bad) {
    const int P = qc->P;
    if (kind == OCK_RR_U8_INT) {
        /* 32 dimensions per step: bytes widened to int16, differences or products summed in pairs into int32 */
        __m256i s = _mm256_setzero_si256(), xx = _mm256_setzero_si256();
        unsigned char tail[32];
        for (int p0 = 0; p0 < P; p0 += 32) {
            const unsigned char *r = row + p0;
            if (P - p0 < 32) {
                memset(tail, 0, sizeof tail);
                memcpy(tail, r, (size_t)(P - p0));
                r = tail;
            }
            const __m256i c = _mm256_loadu_si256((const __m256i *)r);
            const __m256i x0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(c));
            const __m256i x1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(c, 1));
            const __m256i q0 = _mm256_loadu_si256((const __m256i *)(qc->q16 + p0));
            const __m256i q1 = _mm256_loadu_si256((const __m256i *)(qc->q16 + p0 + 16));
            if (metric == OCK_RR_L2) {
                const __m256i d0 = _mm256_sub_epi16(q0, x0), d1 = _mm256_sub_epi16(q1, x1);
                s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_madd_epi16(d0, d0), _mm256_madd_epi16(d1, d1)));
            } else {
                s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_madd_epi16(q0, x0), _mm256_madd_epi16(q1, x1)));
                if (metric == OCK_RR_COSINE)
                    xx = _mm256_add_epi32(xx, _mm256_add_epi32(_mm256_madd_epi16(x0, x0),
                                                               _mm256_madd_epi16(x1, x1)));
            }
        }
        if (metric != OCK_RR_COSINE) return (double)OCK_FN(rr_hsum_epi32)(s);
        const int32_t sumxx = OCK_FN(rr_hsum_epi32)(xx);
        if (sumxx == 0) *bad |= OCK_RR_ZERO_VECTOR;
        return (double)OCK_FN(rr_hsum_epi32)(s) / sqrt((double)sumxx);
    }
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    __m256d b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    __m256i maxbits = _mm256_setzero_si256();
    __m256d x[4];
    unsigned char tail[OCK_RR_LANES * 4];  /* the last, partial block, zero-padded (as the portable loads pad it) */
    const int itemsize = ock_rr_itemsize(kind), full = P / OCK_RR_LANES * OCK_RR_LANES;
    for (int p0 = 0; p0 < P; p0 += OCK_RR_LANES) {
        const unsigned char *block = row + (size_t)p0 * itemsize;
        if (p0 == full) {
            memset(tail, 0, sizeof tail);
            memcpy(tail, block, (size_t)(P - p0) * itemsize);
            block = tail;
        }
        OCK_FN(rr_load16)(qc, kind, block, p0, x, &maxbits);
        const double *q = qc->q + p0;
        const __m256d q0 = _mm256_loadu_pd(q), q1 = _mm256_loadu_pd(q + 4);
        const __m256d q2 = _mm256_loadu_pd(q + 8), q3 = _mm256_loadu_pd(q + 12);
        if (metric == OCK_RR_L2) {
            const __m256d d0 = _mm256_sub_pd(q0, x[0]), d1 = _mm256_sub_pd(q1, x[1]);
            const __m256d d2 = _mm256_sub_pd(q2, x[2]), d3 = _mm256_sub_pd(q3, x[3]);
            a0 = _mm256_add_pd(a0, _mm256_mul_pd(d0, d0));
            a1 = _mm256_add_pd(a1, _mm256_mul_pd(d1, d1));
            a2 = _mm256_add_pd(a2, _mm256_mul_pd(d2, d2));
            a3 = _mm256_add_pd(a3, _mm256_mul_pd(d3, d3));
        } else {
            if (kind == OCK_RR_SQ8) {
                a0 = _mm256_add_pd(a0, _mm256_mul_pd(q0, x[0]));
                a1 = _mm256_add_pd(a1, _mm256_mul_pd(q1, x[1]));
                a2 = _mm256_add_pd(a2, _mm256_mul_pd(q2, x[2]));
                a3 = _mm256_add_pd(a3, _mm256_mul_pd(q3, x[3]));
            } else {
                /* float32, float16 and uint8 values have at most 24 significant bits, as the float32 query: their
                 * products are exact in float64, so a fused multiply-add rounds exactly as a product then a sum */
                a0 = _mm256_fmadd_pd(q0, x[0], a0);
                a1 = _mm256_fmadd_pd(q1, x[1], a1);
                a2 = _mm256_fmadd_pd(q2, x[2], a2);
                a3 = _mm256_fmadd_pd(q3, x[3], a3);
            }
            if (metric == OCK_RR_COSINE) {
                if (kind == OCK_RR_SQ8) {
                    b0 = _mm256_add_pd(b0, _mm256_mul_pd(x[0], x[0]));
                    b1 = _mm256_add_pd(b1, _mm256_mul_pd(x[1], x[1]));
                    b2 = _mm256_add_pd(b2, _mm256_mul_pd(x[2], x[2]));
                    b3 = _mm256_add_pd(b3, _mm256_mul_pd(x[3], x[3]));
                } else {
                    b0 = _mm256_fmadd_pd(x[0], x[0], b0);
                    b1 = _mm256_fmadd_pd(x[1], x[1], b1);
                    b2 = _mm256_fmadd_pd(x[2], x[2], b2);
                    b3 = _mm256_fmadd_pd(x[3], x[3], b3);
                }
            }
        }
    }
    double value = OCK_FN(rr_tree)(a0, a1, a2, a3);
    if (metric == OCK_RR_COSINE) {
        const double xx = OCK_FN(rr_tree)(b0, b1, b2, b3);
        if (xx == 0) *bad |= OCK_RR_ZERO_VECTOR;
        value = value / sqrt(xx);
    }
    if (kind == OCK_RR_F32) {
        /* sign bits are cleared, so a signed comparison orders the magnitudes */
        const __m256i over = _mm256_cmpgt_epi32(maxbits, _mm256_set1_epi32((int)ock_rr_max_abs_bits()));
        if (!_mm256_testz_si256(over, over)) *bad |= OCK_RR_BAD_VALUES;
    }
    if (!isfinite(value)) *bad |= OCK_RR_BAD_VALUES;
    return value;
}
#endif

/* ------------------------------------------------------------------------------------------------------------------
 * The value functions and the table of this level. */
#define OCK_RR_VALUE_FN(ktag, kind, mtag, metric)                                                              \
    OCK_RR_LEVEL_FN static double OCK_FN(rr_##ktag##_##mtag)(const ock_rr_query *qc, const unsigned char *row, \
                                                               int *bad) {                                     \
        return OCK_FN(rr_value)(qc, kind, metric, row, bad);                                                   \
    }
#define OCK_RR_VALUE_FNS(ktag, kind)                                                                           \
    OCK_RR_VALUE_FN(ktag, kind, l2, OCK_RR_L2)                                                                 \
    OCK_RR_VALUE_FN(ktag, kind, ip, OCK_RR_IP)                                                                 \
    OCK_RR_VALUE_FN(ktag, kind, cosine, OCK_RR_COSINE)
OCK_RR_VALUE_FNS(f32, OCK_RR_F32)
OCK_RR_VALUE_FNS(f16, OCK_RR_F16)
OCK_RR_VALUE_FNS(u8, OCK_RR_U8)
OCK_RR_VALUE_FNS(sq8, OCK_RR_SQ8)
OCK_RR_VALUE_FNS(u8int, OCK_RR_U8_INT)
#define OCK_RR_TABLE_ROW(ktag) {OCK_FN(rr_##ktag##_l2), OCK_FN(rr_##ktag##_ip), OCK_FN(rr_##ktag##_cosine)}
static const ock_rr_value_table OCK_FN(rerank_values) = {
    OCK_RR_TABLE_ROW(f32), OCK_RR_TABLE_ROW(f16), OCK_RR_TABLE_ROW(u8), OCK_RR_TABLE_ROW(sq8), OCK_RR_TABLE_ROW(u8int),
};
#undef OCK_RR_TABLE_ROW
#undef OCK_RR_VALUE_FNS
#undef OCK_RR_VALUE_FN
#undef OCK_RR_LEVEL_INLINE
#undef OCK_RR_LEVEL_FN
