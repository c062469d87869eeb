/* The vectorised kernels at every SIMD level this compiler and target allow, and the run-time choice among them
 * (simd.h says what the levels promise; docs/ARCHITECTURE.md, "Kernels and SIMD levels").
 *
 * Compiled as its own translation unit with -ffp-contract=off (no fused multiply-add the source does not write, so
 * every level rounds alike) and -fno-wrapv (Python's -fwrapv keeps gcc and clang from counting the iterations of
 * `for (; k + 32 <= n; k += 32)`, and so from vectorising it; no loop here relies on signed overflow). setup.py and
 * `make cross-check` pass both flags.
 *
 * x86-64 with gcc or clang: portable, AVX2+FMA+F16C and AVX-512 copies, each function compiled with a `target`
 * attribute (simd.h, "One convention") and chosen through a table of function pointers when the module loads, from
 * __builtin_cpu_supports (gcc) or the cpuid instruction (clang and others: see ock_cpuid_level). No ifunc: the same
 * code builds for Linux, macOS and Windows.
 * Any other target or compiler (aarch64, MSVC, ...): the portable copy only.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "simd.h"

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(_M_X64))
#define OCK_X86 1
#include <immintrin.h>
#endif

/* ---- level-independent helpers of the encoder's kernels ---------------------------------------------------------- */

#define OCK_SELECT_GROUPS 32

/* Insert (v, k) into the list of the best `count` <= T pairs, ascending by (v, k); returns the new count. */
static inline int ock_insert_ranked(float v, int k, int T, float *score, int *index, int count) {
    int j;
    if (count == T) {
        if (v > score[T - 1] || (v == score[T - 1] && k > index[T - 1])) return count;
        j = T - 1;
    } else {
        j = count++;
    }
    while (j > 0 && (score[j - 1] > v || (score[j - 1] == v && index[j - 1] > k))) {
        score[j] = score[j - 1];
        index[j] = index[j - 1];
        j--;
    }
    score[j] = v;
    index[j] = k;
    return count;
}

/* ock_pack_lanes[mask]: the positions of the set bits of an 8-bit mask, in order, then zeros (AVX2 left-packing).
 * Filled by ock_simd_init. */
static unsigned char ock_pack_lanes[256][8];

/* ---- the levels (simd.h, "One convention") ---------------------------------------------------------------------- */

#define OCK_LEVEL OCK_LEVEL_PORTABLE
#define OCK_FN(name) name##_portable
#define OCK_TARGET
#include "simd_level.h"
#undef OCK_LEVEL
#undef OCK_FN
#undef OCK_TARGET

#ifdef OCK_X86
/* The targets ask for what ock_simd_best_level requires of the CPU: AVX2, FMA and F16C (every CPU with AVX2 has F16C)
 * for the AVX2 level, AVX-512F on top for the AVX-512 level. */
#define OCK_LEVEL OCK_LEVEL_AVX2
#define OCK_FN(name) name##_avx2
#define OCK_TARGET __attribute__((target("avx2,fma,f16c")))
#define OCK_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#include "simd_level.h"
#undef OCK_LEVEL
#undef OCK_FN
#undef OCK_TARGET
#undef OCK_TARGET_AVX2

#define OCK_LEVEL OCK_LEVEL_AVX512
#define OCK_FN(name) name##_avx512
#define OCK_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
#define OCK_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#include "simd_level.h"
#undef OCK_LEVEL
#undef OCK_FN
#undef OCK_TARGET
#undef OCK_TARGET_AVX2
#endif

/* ---- the choice ------------------------------------------------------------------------------------------------- */

/* Index = level; NULL for a level not compiled in. */
static const ock_kernels *const ock_levels[OCK_N_LEVELS] = {
    &ock_kernels_portable,
#ifdef OCK_X86
    &ock_kernels_avx2,
    &ock_kernels_avx512,
#else
    NULL,
    NULL,
#endif
};

const ock_kernels *ock_kernels_in_use = &ock_kernels_portable;

/* gcc's __builtin_cpu_supports reads what libgcc found at load time. clang's depends on the runtime library its
 * toolchain links: compiler-rt's works, zig's answers "no" for every feature (seen with zig 0.17 / clang 22), which
 * would leave a clang build at the portable level. So clang, and any other compiler, asks the CPU itself. */
#if defined(OCK_X86) && defined(__GNUC__) && !defined(__clang__)
#define OCK_CPU_BUILTINS 1
#endif

#if defined(OCK_X86) && !defined(OCK_CPU_BUILTINS)
#include <cpuid.h>
/* The cpuid instruction and the OS's saved register state (xgetbv): AVX2, FMA and F16C (the re-ranking of float16
 * rows converts with it; every CPU with AVX2 has it) with YMM state saved; AVX-512F with the opmask and ZMM state
 * saved too. */
static int ock_cpuid_level(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return OCK_LEVEL_PORTABLE;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !f16c) return OCK_LEVEL_PORTABLE;
    unsigned xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0x6) != 0x6) return OCK_LEVEL_PORTABLE; /* the OS saves no YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return OCK_LEVEL_PORTABLE;
    const int avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1;
    if (!(avx2 && fma)) return OCK_LEVEL_PORTABLE;
    if (avx512f && (xcr0_lo & 0xe6) == 0xe6) return OCK_LEVEL_AVX512; /* opmask and ZMM state saved too */
    return OCK_LEVEL_AVX2;
}
#endif

int ock_simd_best_level(void) {
#if defined(OCK_CPU_BUILTINS)
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")))
        return OCK_LEVEL_PORTABLE;
    return __builtin_cpu_supports("avx512f") ? OCK_LEVEL_AVX512 : OCK_LEVEL_AVX2;
#elif defined(OCK_X86)
    return ock_cpuid_level();
#else
    return OCK_LEVEL_PORTABLE;
#endif
}

int ock_simd_use(int level) {
    if (level < 0 || level >= OCK_N_LEVELS || level > ock_simd_best_level() || ock_levels[level] == NULL) return -1;
    ock_kernels_in_use = ock_levels[level];
    return 0;
}

int ock_simd_level(void) {
    for (int level = 0; level < OCK_N_LEVELS; level++)
        if (ock_levels[level] == ock_kernels_in_use) return level;
    return OCK_LEVEL_PORTABLE;
}

const char *ock_simd_level_name(int level) {
    static const char *const names[OCK_N_LEVELS] = {"portable", "avx2", "avx512"};
    return level >= 0 && level < OCK_N_LEVELS ? names[level] : NULL;
}

int ock_simd_init(void) {
    for (int mask = 0; mask < 256; mask++) {
        int j = 0;
        for (int b = 0; b < 8; b++)
            if (mask >> b & 1) ock_pack_lanes[mask][j++] = (unsigned char)b;
        for (; j < 8; j++) ock_pack_lanes[mask][j] = 0;
    }
    const int best = ock_simd_best_level();
    ock_simd_use(best);
    return best;
}

int ock_fast_fma(void) {
#ifdef FP_FAST_FMAF
    return 1;
#else
    return 0;
#endif
}
