/* Checks and a microbenchmark of the fast-scan kernels (ockstore/kernels/fastscan.h and its parts), in C alone. The
 * harness compiles the kernels' translation unit itself (ockstore/kernels/simd.c, with the flags setup.py gives it) and
 * reaches each SIMD level's scan through that level's table, as the package does (kernels/simd.h).
 *
 *     cc -O2 -ffp-contract=off -fno-wrapv -o /tmp/fastscan_harness tools/fastscan_harness.c -lm
 *     /tmp/fastscan_harness check [cases]
 *     cc -O3 -ffp-contract=off -fno-wrapv -o /tmp/fastscan_harness tools/fastscan_harness.c -lm
 *     /tmp/fastscan_harness bench [N] [W] [queries] [k]
 *
 * check: for random shapes (W words of K <= 16 values, some >= K as in a damaged file, N rows around the block
 * size, norms none / one byte / float32, ids with ties, filters, k > N, bounds, runs with list terms as an inverted
 * file has them), every SIMD level this CPU runs must give (a) the same uint16 block sums as the portable level and
 * (b) exactly the k best (distance, id) of a brute-force scan of the unpacked words, with distances summed as the
 * 8-bit scan sums them; the same for two queries scanned at once. Exit status 0 when every case passes.
 *
 * real PREFIX: CPU time per query over real data a script wrote (see bench_real), against the 8-bit scan loop timed
 * between its runs; each query's limit first set from a sample of its blocks as fastscan_scan does
 * (FASTSCAN_SAMPLE=0: without), FASTSCAN_ROWS=n: the first n rows only. bench: the same on random rows (W words,
 * one-byte norms), against the 8-bit scan's inner loop (one table load per byte, four rows at a time) over the same
 * words.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long exact_count = 0;
#define OCK_FS_COUNT exact_count
#include <math.h>
#include "../ockstore/kernels/simd.c"

/* Whether this CPU runs a level (the portable one always), and a level's kernels: simd.c's table of that level. */
static int ock_fs_level_supported(int level) { return level <= ock_simd_best_level() && ock_levels[level] != NULL; }
static const ock_kernels *kernels_of(int level) { return ock_levels[level]; }

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {  /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rndu(void) { return (double)(rnd() >> 11) * (1.0 / 9007199254740992.0); }
static int rndi(int n) { return (int)(rnd() % (uint64_t)n); }

static const char *level_name[] = {"portable", "avx2", "avx512"};

typedef struct {
    int W, K, k, norm_mode; /* 0 none, 1 u8, 2 f32 */
    size_t N;
    uint8_t *codes, *blocks, *norm_codes;
    float *norms, levels[256], *lut;
    int64_t *ids;
    const int64_t *id_parts[1];  /* the id table of the rows' handles (kernels/rows.h): one part, these ids */
    uint64_t *allow;
} problem;

/* The exact distances of the rows of [start, stop) as the kernel (and the 8-bit scan) sum them. */
static float exact_distance(const problem *p, float start_term, size_t row) {
    float n = 0.0f;
    if (p->norm_mode == 1) n = p->levels[p->norm_codes[row]];
    if (p->norm_mode == 2) n = p->norms[row];
    float d = p->norm_mode ? start_term + n : start_term;
    for (int w = 0; w < p->W; w++) d = d + p->lut[w * 16 + p->codes[row * p->W + w]];
    return d;
}

static int64_t id_of(const problem *p, int64_t row) { return row < 0 ? -1 : (p->ids ? p->ids[row] : row); }

static int allowed(const problem *p, size_t row) {
    return p->allow == NULL || ((p->allow[row >> 6] >> (row & 63)) & 1);
}

/* Brute force: the k best (d, id) pairs of the runs, below `bound`, padding (bound, -1). */
static void brute_force(const problem *p, int n_runs, const size_t *starts, const float *terms, float bound,
                        float *out_d, int64_t *out_r) {
    for (int j = 0; j < p->k; j++) {
        out_d[j] = bound;
        out_r[j] = -1;
    }
    for (int ru = 0; ru < n_runs; ru++) {
        for (size_t row = starts[ru]; row < starts[ru + 1]; row++) {
            if (!allowed(p, row)) continue;
            const float d = exact_distance(p, terms[ru], row);
            /* insertion into the sorted list when better than the last */
            int pos = p->k;
            while (pos > 0 && (d < out_d[pos - 1] || (d == out_d[pos - 1] &&
                                                       id_of(p, (int64_t)row) < id_of(p, out_r[pos - 1]))))
                pos--;
            if (pos == p->k) continue;
            for (int j = p->k - 1; j > pos; j--) {
                out_d[j] = out_d[j - 1];
                out_r[j] = out_r[j - 1];
            }
            out_d[pos] = d;
            out_r[pos] = (int64_t)row;
        }
    }
}

static int check_case(int seed_case) {
    problem p;
    memset(&p, 0, sizeof(p));
    p.W = rndi(10) == 0 ? 1 + rndi(600) : 1 + rndi(40);
    p.K = 2 + rndi(15);
    const size_t sizes[] = {0, 1, 5, 31, 32, 33, 63, 64, 65, 100, 257, 1000};
    p.N = sizes[rndi(12)];
    p.k = 1 + rndi(40);
    p.norm_mode = rndi(3);
    const int ties = rndi(3) == 0;        /* integer tables: many equal distances */
    const int flat_tables = rndi(12) == 0; /* every table constant: every row ties */
    const int with_ids = rndi(2);
    const int with_allow = rndi(3) == 0;
    const int n_runs = 1 + rndi(4);
    const float bound = rndi(4) == 0 ? (float)(rndu() * 50.0) : INFINITY;
    const int W = p.W;
    p.codes = malloc(p.N * W + 1);
    for (size_t i = 0; i < p.N * (size_t)W; i++) p.codes[i] = (uint8_t)rndi(p.K);
    if (p.K < 16 && rndi(4) == 0)  /* a damaged file: words >= K (infinite distances, never returned) */
        for (size_t i = 0; i < p.N * (size_t)W; i++)
            if (rndi(50) == 0) p.codes[i] = (uint8_t)(p.K + rndi(16 - p.K));
    p.lut = malloc(sizeof(float) * 16 * W);
    for (int w = 0; w < W; w++)
        for (int j = 0; j < 16; j++) {
            float v = ties ? (float)rndi(4) : (float)((rndu() - 0.3) * (1 + w % 5));
            if (flat_tables) v = 0.25f;
            p.lut[w * 16 + j] = j < p.K ? v : INFINITY;
        }
    for (int c = 0; c < 256; c++) p.levels[c] = (float)(c * 0.05 + (c > 128 ? (c - 128) * 0.03 : 0.0));
    p.norm_codes = malloc(p.N + 1);
    p.norms = malloc(sizeof(float) * (p.N + 1));
    for (size_t i = 0; i < p.N; i++) {
        p.norm_codes[i] = (uint8_t)rndi(256);
        p.norms[i] = ties ? (float)rndi(3) : (float)(rndu() * 14.0 - 1.0);  /* some below levels[0] */
    }
    if (with_ids) {
        p.ids = malloc(sizeof(int64_t) * (p.N + 1));
        for (size_t i = 0; i < p.N; i++) p.ids[i] = rndi(3) == 0 ? (int64_t)rndi(10) : (int64_t)(rnd() % 1000000);
    }
    const size_t words = (p.N + 63) / 64;
    if (with_allow) {
        p.allow = calloc(words + 1, 8);
        for (size_t i = 0; i < p.N; i++)
            if (rndi(3)) p.allow[i >> 6] |= 1ull << (i & 63);
    }
    /* runs: consecutive row ranges, each packed into blocks of its own (as inverted lists are) */
    size_t starts[6];
    float terms[5];
    starts[0] = 0;
    for (int r = 1; r < n_runs; r++) starts[r] = p.N ? (size_t)rndi((int)p.N + 1) : 0;
    starts[n_runs] = p.N;
    for (int i = 1; i < n_runs; i++)  /* sort */
        for (int j = i; j > 0 && starts[j] < starts[j - 1]; j--) {
            size_t t = starts[j];
            starts[j] = starts[j - 1];
            starts[j - 1] = t;
        }
    const float qconst = (float)(rndu() * 3.0);
    for (int r = 0; r < n_runs; r++) terms[r] = n_runs == 1 ? qconst : (float)(qconst + (rndu() - 0.5) * 4.0);
    size_t total_blocks = 0, run_block[6];
    for (int r = 0; r < n_runs; r++) {
        run_block[r] = total_blocks;
        total_blocks += ock_fs_blocks(starts[r + 1] - starts[r]);
    }
    const size_t bb = ock_fs_block_bytes(W);
    p.blocks = malloc(total_blocks * bb + 1);
    for (int r = 0; r < n_runs; r++)
        ock_fs_pack(p.codes + starts[r] * W, starts[r + 1] - starts[r], W, p.blocks + run_block[r] * bb);
    int failures = 0;
    /* the layout round trip */
    for (int r = 0; r < n_runs; r++) {
        const size_t n = starts[r + 1] - starts[r];
        uint8_t *back = malloc(n * W + 1);
        ock_fs_unpack(p.blocks + run_block[r] * bb, W, 0, n, back);
        if (n && memcmp(back, p.codes + starts[r] * W, n * W) != 0) {
            printf("case %d: unpack differs from the packed codes\n", seed_case);
            failures++;
        }
        free(back);
    }
    /* tables */
    ock_fs_norm norm;
    ock_fs_norm_init(p.levels, &norm);
    const ock_fs_norm *nrm = p.norm_mode == 1 ? &norm : NULL;
    uint8_t *qlut = malloc(16 * ock_fs_columns(W) + 64);
    ock_fs_tables t;
    if (ock_fs_quantize(p.lut, W, qconst, nrm, qlut, &t) != 0) {
        printf("case %d: quantize failed\n", seed_case);
        return 1;
    }
    /* the lower bound holds for every row (norm included for u8) */
    for (size_t row = 0; row < p.N && p.norm_mode != 2; row++) {
        unsigned s = 0;
        for (int w = 0; w < W; w++) s += qlut[w * 16 + p.codes[row * W + w]];
        if (p.norm_mode == 1) s += t.norm_lo[p.norm_codes[row] & 15] + t.norm_hi[p.norm_codes[row] >> 4];
        const double lb = t.c0 + t.scale * s;
        const double exact = (double)exact_distance(&p, qconst, row);
        /* (a row of a damaged file, with a word >= K, has an infinite exact distance: no upper bound holds it) */
        const double rho = ock_fs_rounding(&t, 0.0);
        if (lb > exact + rho || (isfinite(exact) && lb + t.slack < exact - rho)) {
            printf("case %d: bounds [%.9g, %.9g] miss exact %.9g (row %zu)\n", seed_case, lb, lb + t.slack, exact,
                   row);
            failures++;
            break;
        }
    }
    p.id_parts[0] = p.ids;
    const int64_t **ids = p.ids != NULL ? p.id_parts : NULL;
    ock_fs_base base = {.W = W, .norms_f32 = p.norm_mode == 2 ? p.norms : NULL,
                        .norm_codes = p.norm_mode == 1 ? p.norm_codes : NULL, .norm_levels = p.levels, .ids = ids,
                        .allow = p.allow, .N = p.N};
    ock_fs_query q = {p.lut, qlut, &t};
    float *want_d = malloc(sizeof(float) * p.k), *got_d = malloc(sizeof(float) * p.k);
    int64_t *want_r = malloc(sizeof(int64_t) * p.k), *got_r = malloc(sizeof(int64_t) * p.k);
    float *hd = malloc(sizeof(float) * p.k);
    int64_t *hr = malloc(sizeof(int64_t) * p.k);
    brute_force(&p, n_runs, starts, terms, bound, want_d, want_r);
    uint16_t ref_sums[32], sums[32];
    for (int level = 0; level <= OCK_LEVEL_AVX512; level++) {
        if (!ock_fs_level_supported(level)) continue;
        /* block sums equal the portable ones */
        if (p.norm_mode != 2) {
            for (size_t blk = 0; blk < total_blocks; blk++) {
                uint8_t nbytes[32];
                for (int i = 0; i < 32; i++) nbytes[i] = (uint8_t)rndi(256);
                kernels_of(OCK_LEVEL_PORTABLE)->fs_block_sums(p.blocks + blk * bb, qlut, &t, nbytes, ref_sums);
                kernels_of(level)->fs_block_sums(p.blocks + blk * bb, qlut, &t, nbytes, sums);
                if (memcmp(ref_sums, sums, sizeof(sums)) != 0) {
                    printf("case %d: %s block sums differ from portable (block %zu)\n", seed_case,
                           level_name[level], blk);
                    failures++;
                    break;
                }
            }
        }
        /* the scan: a small buffer of candidates (refined often) or a large one */
        ock_fs_collector col;
        const int cap = 2 * p.k + (rndi(2) ? rndi(8) : 300);
        ock_fs_cand *cand = malloc(sizeof(ock_fs_cand) * cap);
        double *ubh = malloc(sizeof(double) * 2 * p.k);
        ock_fs_collector_init(&col, hd, hr, p.k, ids, cand, cap, ubh, bound);
        /* a flat scan: half the time a limit from a sample of s of its blocks first (any s: the size rule of
         * ock_fs_sample_blocks is for speed alone) */
        const size_t nb_all = ock_fs_blocks(p.N);
        if (n_runs == 1 && nb_all > 0 && rndi(2) && ock_fs_sample_applies(&base, &q)) {
            const size_t s = 1 + (size_t)rndi((int)nb_all);
            uint16_t *ssums = malloc(sizeof(uint16_t) * 32 * s);
            const ock_fs_run whole = {.blocks = p.blocks, .row0 = 0, .n_rows = p.N, .start_term = terms[0],
                                      .c0 = t.c0, .rho = ock_fs_rounding(&t, 0.0)};
            for (size_t x = 0; x < s; x++) {
                const size_t bi = ock_fs_sample_block(x, s, nb_all);
                uint8_t nbytes[32];
                const uint8_t *nb8 = p.norm_mode == 1 ? ock_fs_norm_bytes(&base, bi * 32, nbytes) : NULL;
                kernels_of(level)->fs_block_sums(p.blocks + bi * bb, qlut, &t, nb8, ssums + 32 * x);
            }
            ock_fs_sample_limit(&col, &base, &q, &whole, ssums, s, nb_all);
            free(ssums);
        }
        for (int r = 0; r < n_runs; r++) {
            const double term = (double)terms[r] - (double)qconst;  /* the list term, as run->c0 adds it */
            ock_fs_run run = {.blocks = p.blocks + run_block[r] * bb, .row0 = starts[r],
                              .n_rows = starts[r + 1] - starts[r], .start_term = terms[r], .c0 = t.c0 + term,
                              .rho = ock_fs_rounding(&t, term)};
            kernels_of(level)->fs_scan_run(&base, &q, &run, &col);
        }
        ock_fs_refine(&col, &base, &q);
        ock_fs_heap_sort_into(&col.heap, got_d, got_r);
        free(cand);
        free(ubh);
        for (int j = 0; j < p.k; j++) {
            /* rows of equal distance and equal id may come in any order: compare (distance, id) */
            if (memcmp(&got_d[j], &want_d[j], sizeof(float)) != 0 || id_of(&p, got_r[j]) != id_of(&p, want_r[j])) {
                printf("case %d (%s, W=%d K=%d N=%zu k=%d norm=%d ties=%d runs=%d): result %d is (%.9g, row %lld),"
                       " brute force (%.9g, row %lld)\n", seed_case, level_name[level], W, p.K, p.N, p.k,
                       p.norm_mode, ties, n_runs, j, got_d[j], (long long)got_r[j], want_d[j],
                       (long long)want_r[j]);
                failures++;
                break;
            }
        }
    }
    /* two queries at once (fs_scan_run2): the first query again, with a second one of other tables */
    for (int level = 0; level <= OCK_LEVEL_AVX512; level++) {
        if (!ock_fs_level_supported(level)) continue;
        problem p2 = p;
        p2.lut = malloc(sizeof(float) * 16 * W);
        for (int w = 0; w < W; w++)
            for (int j = 0; j < 16; j++)
                p2.lut[w * 16 + j] = j < p.K ? (ties ? (float)rndi(3) : (float)(rndu() * 2.0)) : INFINITY;
        const float qconst2 = (float)(rndu() * 3.0);
        float terms2[5];
        for (int r = 0; r < n_runs; r++) terms2[r] = n_runs == 1 ? qconst2 : (float)(qconst2 + (rndu() - 0.5) * 4.0);
        float *want2_d = malloc(sizeof(float) * p.k), *got2_d = malloc(sizeof(float) * p.k);
        int64_t *want2_r = malloc(sizeof(int64_t) * p.k), *got2_r = malloc(sizeof(int64_t) * p.k);
        float *hd2 = malloc(sizeof(float) * p.k);
        int64_t *hr2 = malloc(sizeof(int64_t) * p.k);
        brute_force(&p2, n_runs, starts, terms2, bound, want2_d, want2_r);
        uint8_t *qlut2 = malloc(16 * ock_fs_columns(W) + 64);
        ock_fs_tables t2;
        ock_fs_quantize(p2.lut, W, qconst2, nrm, qlut2, &t2);
        ock_fs_query q2 = {p2.lut, qlut2, &t2};
        const int cap = 2 * p.k + rndi(20);
        ock_fs_cand *ca = malloc(sizeof(ock_fs_cand) * cap), *cb = malloc(sizeof(ock_fs_cand) * cap);
        ock_fs_collector cola, colb;
        double *uba = malloc(sizeof(double) * 2 * p.k), *ubb = malloc(sizeof(double) * 2 * p.k);
        ock_fs_collector_init(&cola, hd, hr, p.k, ids, ca, cap, uba, bound);
        ock_fs_collector_init(&colb, hd2, hr2, p.k, ids, cb, cap, ubb, bound);
        for (int r = 0; r < n_runs; r++) {
            const double ta = (double)terms[r] - (double)qconst, tb = (double)terms2[r] - (double)qconst2;
            ock_fs_run ra = {.blocks = p.blocks + run_block[r] * bb, .row0 = starts[r],
                             .n_rows = starts[r + 1] - starts[r], .start_term = terms[r], .c0 = t.c0 + ta,
                             .rho = ock_fs_rounding(&t, ta)};
            ock_fs_run rb = {.blocks = p.blocks + run_block[r] * bb, .row0 = starts[r],
                             .n_rows = starts[r + 1] - starts[r], .start_term = terms2[r], .c0 = t2.c0 + tb,
                             .rho = ock_fs_rounding(&t2, tb)};
            kernels_of(level)->fs_scan_run2(&base, &q, &q2, &ra, &rb, &cola, &colb);
        }
        ock_fs_refine(&cola, &base, &q);
        ock_fs_refine(&colb, &base, &q2);
        ock_fs_heap_sort_into(&cola.heap, got_d, got_r);
        ock_fs_heap_sort_into(&colb.heap, got2_d, got2_r);
        for (int j = 0; j < p.k; j++) {
            if (memcmp(&got_d[j], &want_d[j], sizeof(float)) != 0 || id_of(&p, got_r[j]) != id_of(&p, want_r[j]) ||
                memcmp(&got2_d[j], &want2_d[j], sizeof(float)) != 0 || id_of(&p, got2_r[j]) != id_of(&p, want2_r[j])) {
                printf("case %d (%s pairs, W=%d N=%zu k=%d norm=%d): result %d differs from brute force\n",
                       seed_case, level_name[level], W, p.N, p.k, p.norm_mode, j);
                failures++;
                break;
            }
        }
        free(p2.lut);
        free(want2_d);
        free(got2_d);
        free(want2_r);
        free(got2_r);
        free(hd2);
        free(hr2);
        free(qlut2);
        free(ca);
        free(cb);
        free(uba);
        free(ubb);
    }
    free(p.codes);
    free(p.blocks);
    free(p.norm_codes);
    free(p.norms);
    free(p.lut);
    free(p.ids);
    free(p.allow);
    free(qlut);
    free(want_d);
    free(got_d);
    free(want_r);
    free(got_r);
    free(hd);
    free(hr);
    return failures;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);  /* CPU time: other processes on a loaded machine do not count */
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* The 8-bit scan's inner loop over the same words (one float table load per byte), for comparison. */
static float scan8(const uint8_t *codes, const uint8_t *norm_codes, const float *levels, size_t N, int W,
                   const float *lut256, float qconst, int64_t *best) {
    float bd = INFINITY;
    size_t i = 0;
    for (; i + 4 <= N; i += 4) {
        const uint8_t *c = codes + i * W;
        float d0 = qconst + levels[norm_codes[i]], d1 = qconst + levels[norm_codes[i + 1]];
        float d2 = qconst + levels[norm_codes[i + 2]], d3 = qconst + levels[norm_codes[i + 3]];
        for (int w = 0; w < W; w++) {
            const float *l = lut256 + w * 256;
            d0 += l[c[w]];
            d1 += l[c[W + w]];
            d2 += l[c[2 * W + w]];
            d3 += l[c[3 * W + w]];
        }
        if (d0 < bd) { bd = d0; *best = (int64_t)i; }
        if (d1 < bd) { bd = d1; *best = (int64_t)i + 1; }
        if (d2 < bd) { bd = d2; *best = (int64_t)i + 2; }
        if (d3 < bd) { bd = d3; *best = (int64_t)i + 3; }
    }
    return bd;
}

static int bench(size_t N, int W, int nq, int k) {
    uint8_t *codes = malloc(N * W), *norm_codes = malloc(N), *blocks = malloc(ock_fs_blocks(N) * ock_fs_block_bytes(W));
    float levels[256], *luts = malloc(sizeof(float) * 16 * W * nq), *lut256 = malloc(sizeof(float) * 256 * W);
    for (size_t i = 0; i < N * (size_t)W; i++) codes[i] = (uint8_t)rndi(16);
    for (size_t i = 0; i < N; i++) norm_codes[i] = (uint8_t)rndi(256);
    for (int c = 0; c < 256; c++) levels[c] = (float)(100.0 + c);
    /* tables shaped like real ones: each query favours a few words per column, so few rows score well */
    for (int qi = 0; qi < nq; qi++)
        for (int w = 0; w < W; w++)
            for (int j = 0; j < 16; j++) luts[(qi * W + w) * 16 + j] = (float)(rndu() * rndu() * 60.0);
    ock_fs_pack(codes, N, W, blocks);
    ock_fs_norm norm;
    ock_fs_norm_init(levels, &norm);
    uint8_t *qlut = malloc(16 * ock_fs_columns(W) + 64);
    float hd[1024];
    int64_t hr[1024];
    ock_fs_cand cand[2 * 1024 + 512];
    double ubh[2048];
    ock_fs_base base = {.W = W, .norm_codes = norm_codes, .norm_levels = levels, .N = N};
    printf("N=%zu W=%d queries=%d k=%d (one-byte norms)\n", N, W, nq, k);
    for (int level = 0; level <= OCK_LEVEL_AVX512; level++) {
        if (!ock_fs_level_supported(level)) continue;
        const double t0 = now_s();
        double sink = 0.0;
        for (int qi = 0; qi < nq; qi++) {
            ock_fs_tables t;
            ock_fs_quantize(luts + (size_t)qi * W * 16, W, 0.0f, &norm, qlut, &t);
            ock_fs_query q = {luts + (size_t)qi * W * 16, qlut, &t};
            ock_fs_collector col;
            ock_fs_collector_init(&col, hd, hr, k, NULL, cand, ock_fs_collector_cap(k), ubh, INFINITY);
            ock_fs_run run = {.blocks = blocks, .row0 = 0, .n_rows = N, .start_term = 0.0f, .c0 = t.c0,
                              .rho = ock_fs_rounding(&t, 0.0)};
            kernels_of(level)->fs_scan_run(&base, &q, &run, &col);
            ock_fs_refine(&col, &base, &q);
            sink += hd[0];
        }
        const double dt = now_s() - t0;
        printf("  %-8s %8.1f us/query  %6.3f ns/row  %lld exact distances per query (%g)\n", level_name[level],
               1e6 * dt / nq, 1e9 * dt / nq / N, exact_count / nq, sink);
        exact_count = 0;
    }
    /* the block sums alone (no threshold, no exact stage): the throughput of the shuffles */
    for (int level = 0; level <= OCK_LEVEL_AVX512; level++) {
        if (!ock_fs_level_supported(level)) continue;
        ock_fs_tables t;
        ock_fs_quantize(luts, W, 0.0f, &norm, qlut, &t);
        const size_t nb = ock_fs_blocks(N), bb = ock_fs_block_bytes(W);
        uint16_t sums[32];
        unsigned sink = 0;
        const int passes = level == 0 ? 1 : 10;
        const double t0 = now_s();
        for (int pass = 0; pass < passes; pass++)
            for (size_t b = 0; b < nb; b++) {
                kernels_of(level)->fs_block_sums(blocks + b * bb, qlut, &t, norm_codes + b * 32, sums);
                sink += sums[b & 31];
            }
        const double dt = (now_s() - t0) / passes;
        printf("  %-8s %8.1f us/pass   %6.3f ns/row  block sums only (%u)\n", level_name[level], 1e6 * dt,
               1e9 * dt / N, sink);
    }
    const double t0 = now_s();
    double sink = 0.0;
    for (int qi = 0; qi < nq; qi++) {
        for (int w = 0; w < W; w++)
            for (int j = 0; j < 256; j++) lut256[w * 256 + j] = j < 16 ? luts[(qi * W + w) * 16 + j] : INFINITY;
        int64_t best = -1;
        sink += scan8(codes, norm_codes, levels, N, W, lut256, 0.0f, &best);
    }
    const double dt = now_s() - t0;
    printf("  %-8s %8.1f us/query  %6.3f ns/row  (%g)\n", "8-bit", 1e6 * dt / nq, 1e9 * dt / nq / N, sink);
    return 0;
}

/* Real data written by a script: PREFIX.blocks (packed rows), PREFIX.luts (nq x W x 16 float32), PREFIX.qconst
 * (nq float32), PREFIX.nc (N one-byte norm codes), PREFIX.levels (256 float32). Scans `nq` queries in groups sharing
 * chunks of rows, the way a batch is searched, and prints CPU time per query (best of `reps`). */
static void *read_all(const char *prefix, const char *ext, size_t *size) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%s", prefix, ext);
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(*size + 64);
    if (fread(p, 1, *size, f) != *size) { perror(path); exit(2); }
    fclose(f);
    return p;
}

typedef struct {
    size_t N;
    int W, k, group, cap;
    size_t chunk;
    uint8_t *blocks, *nc;
    float *luts, *qconst, *levels;
    ock_fs_norm norm;
    uint8_t *qlut;
    ock_fs_tables *t;
    ock_fs_collector *col;
    ock_fs_cand *cand;
    double *ubh;
    float *hd, *outd;
    int64_t *hr, *outr;
    int sample;                 /* the limit from a sample before each scan (FASTSCAN_SAMPLE=0: none) */
    uint16_t *sample_sums;
} real_data;

/* Search queries 0..nq-1 in groups sharing chunks of rows (mode: a level, or OCK_LEVEL_AVX512 + 1 for AVX2 in pairs);
 * returns the CPU time. */
static double real_run(real_data *r, int nq, int mode) {
    const int pairs = mode == OCK_LEVEL_AVX512 + 1;
    const int level = pairs ? OCK_LEVEL_AVX2 : mode;
    const int W = r->W, k = r->k;
    const size_t bb = ock_fs_block_bytes(W), qstride = 16 * ock_fs_columns(W) + 64;
    ock_fs_base base = {.W = W, .norm_codes = r->nc, .norm_levels = r->levels, .N = r->N};
    const double t0 = now_s();
    for (int g0 = 0; g0 < nq; g0 += r->group) {
        const int g1 = g0 + r->group < nq ? g0 + r->group : nq;
        for (int qi = g0; qi < g1; qi++) {
            const int j = qi - g0;
            ock_fs_quantize(r->luts + (size_t)qi * W * 16, W, r->qconst[qi], &r->norm, r->qlut + j * qstride,
                            &r->t[j]);
            ock_fs_collector_init(&r->col[j], r->hd + (size_t)j * k, r->hr + (size_t)j * k, k, NULL,
                                  r->cand + (size_t)j * r->cap, r->cap, r->ubh + (size_t)j * 2 * k, INFINITY);
            /* the limit from a sample of the blocks, as fastscan_scan sets it before a batch's scan */
            const ock_fs_query q = {r->luts + (size_t)qi * W * 16, r->qlut + j * qstride, &r->t[j]};
            const ock_fs_run whole = {.blocks = r->blocks, .row0 = 0, .n_rows = r->N, .start_term = r->qconst[qi],
                                      .c0 = r->t[j].c0, .rho = ock_fs_rounding(&r->t[j], 0.0)};
            const size_t nb = ock_fs_blocks(r->N), s = r->sample ? ock_fs_sample_blocks(&base, &q, k, nb) : 0;
            for (size_t x = 0; x < s; x++) {
                const size_t bi = ock_fs_sample_block(x, s, nb);
                kernels_of(level)->fs_block_sums(r->blocks + bi * bb, q.qlut, q.t, r->nc + bi * 32, r->sample_sums + 32 * x);
            }
            if (s > 0) ock_fs_sample_limit(&r->col[j], &base, &q, &whole, r->sample_sums, s, nb);
        }
        for (size_t c0 = 0; c0 < r->N; c0 += r->chunk) {
            const size_t c1 = c0 + r->chunk < r->N ? c0 + r->chunk : r->N;
            ock_fs_query q[2];
            ock_fs_run run[2];
            int qi = g0;
            while (qi < g1) {
                const int m = pairs && qi + 2 <= g1 ? 2 : 1;
                for (int x = 0; x < m; x++) {
                    const int j = qi + x - g0;
                    q[x] = (ock_fs_query){r->luts + (size_t)(qi + x) * W * 16, r->qlut + j * qstride, &r->t[j]};
                    run[x] = (ock_fs_run){.blocks = r->blocks + (c0 / 32) * bb, .row0 = c0, .n_rows = c1 - c0,
                                          .start_term = r->qconst[qi + x], .c0 = r->t[j].c0,
                                          .rho = ock_fs_rounding(&r->t[j], 0.0)};
                }
                if (m == 2)
                    kernels_of(level)->fs_scan_run2(&base, &q[0], &q[1], &run[0], &run[1], &r->col[qi - g0],
                                                    &r->col[qi - g0 + 1]);
                else
                    kernels_of(level)->fs_scan_run(&base, &q[0], &run[0], &r->col[qi - g0]);
                qi += m;
            }
        }
        for (int qi = g0; qi < g1; qi++) {
            const int j = qi - g0;
            ock_fs_query q = {r->luts + (size_t)qi * W * 16, r->qlut + j * qstride, &r->t[j]};
            ock_fs_refine(&r->col[j], &base, &q);
            ock_fs_heap_sort_into(&r->col[j].heap, r->outd, r->outr);
        }
    }
    return now_s() - t0;
}

static int bench_real(const char *prefix, int W, int nq, int k, int reps, int group, size_t chunk) {
    size_t sb, sl, sq, sn, sv;
    real_data r;
    r.blocks = read_all(prefix, "blocks", &sb);
    r.nc = read_all(prefix, "nc", &sn);
    r.luts = read_all(prefix, "luts", &sl);
    r.qconst = read_all(prefix, "qconst", &sq);
    r.levels = read_all(prefix, "levels", &sv);
    r.N = getenv("FASTSCAN_ROWS") ? (size_t)atol(getenv("FASTSCAN_ROWS")) : sn;  /* fewer rows: a scan in cache */
    if (r.N > sn) r.N = sn;
    r.W = W;
    r.k = k;
    r.group = group;
    r.chunk = chunk;
    r.cap = ock_fs_collector_cap(k);
    r.sample = getenv("FASTSCAN_SAMPLE") == NULL || atoi(getenv("FASTSCAN_SAMPLE")) != 0;
    r.sample_sums = malloc(sizeof(uint16_t) * 32 * (size_t)k + 64);
    if (nq > (int)(sq / 4)) nq = (int)(sq / 4);
    ock_fs_norm_init(r.levels, &r.norm);
    r.qlut = malloc((size_t)group * (16 * ock_fs_columns(W) + 64));
    r.t = malloc(sizeof(ock_fs_tables) * group);
    r.col = malloc(sizeof(ock_fs_collector) * group);
    r.cand = malloc(sizeof(ock_fs_cand) * (size_t)r.cap * group);
    r.hd = malloc(sizeof(float) * k * group);
    r.ubh = malloc(sizeof(double) * 2 * k * group);
    r.outd = malloc(sizeof(float) * k);
    r.hr = malloc(sizeof(int64_t) * k * group);
    r.outr = malloc(sizeof(int64_t) * k);
    printf("%s: N=%zu W=%d queries=%d k=%d group=%d chunk=%zu, best of %d (CPU time)\n", prefix, r.N, W, nq, k,
           group, chunk, reps);
    /* the calibration: the 8-bit scan's loop over 64-bit codes (8 bytes + a norm byte per row), timed between the
     * fast scan's runs, so that both see the same machine load */
    uint8_t *codes8 = malloc(r.N * 8);
    float *lut8 = malloc(sizeof(float) * 256 * 8);
    for (size_t i = 0; i < r.N * 8; i++) codes8[i] = (uint8_t)rndi(256);
    for (int i = 0; i < 256 * 8; i++) lut8[i] = (float)rndu();
    const int nq8 = nq < 10 ? nq : 10;
    double best[OCK_LEVEL_AVX512 + 3], best8 = 1e30;
    for (int m = 0; m < OCK_LEVEL_AVX512 + 3; m++) best[m] = 1e30;
    long long exact[OCK_LEVEL_AVX512 + 3] = {0};
    for (int rep = 0; rep < reps; rep++) {
        for (int mode = 1; mode <= OCK_LEVEL_AVX512 + 1; mode++) {
            if (!ock_fs_level_supported(mode > OCK_LEVEL_AVX512 ? OCK_LEVEL_AVX2 : mode)) continue;
            exact_count = 0;
            const double dt = real_run(&r, nq, mode) / nq;
            if (dt < best[mode]) best[mode] = dt;
            exact[mode] = exact_count / nq;
        }
        const double s0 = now_s();
        double sink8 = 0.0;
        for (int qi = 0; qi < nq8; qi++) {
            int64_t bestrow = -1;
            sink8 += scan8(codes8, r.nc, r.levels, r.N, 8, lut8, r.qconst[qi], &bestrow);
        }
        const double d8 = (now_s() - s0) / nq8;
        if (d8 < best8 && sink8 == sink8) best8 = d8;
    }
    printf("  %-8s %8.1f us/query  %6.3f ns/row\n", "8-bit", 1e6 * best8, 1e9 * best8 / r.N);
    for (int mode = 1; mode <= OCK_LEVEL_AVX512 + 1; mode++) {
        if (best[mode] >= 1e29) continue;
        printf("  %-8s %8.1f us/query  %6.3f ns/row  %lld exact distances per query; %.2fx the 8-bit loop's speed\n",
               mode > OCK_LEVEL_AVX512 ? "avx2x2" : level_name[mode], 1e6 * best[mode], 1e9 * best[mode] / r.N,
               exact[mode], best8 / best[mode]);
    }
    (void)sb; (void)sl; (void)sv;
    return 0;
}

int main(int argc, char **argv) {
    ock_simd_init();
    if (argc >= 3 && strcmp(argv[1], "real") == 0) {
        return bench_real(argv[2], argc > 3 ? atoi(argv[3]) : 16, argc > 4 ? atoi(argv[4]) : 200,
                          argc > 5 ? atoi(argv[5]) : 10, argc > 6 ? atoi(argv[6]) : 3, argc > 7 ? atoi(argv[7]) : 16,
                          argc > 8 ? (size_t)atol(argv[8]) : 32768);
    }
    if (argc >= 2 && strcmp(argv[1], "bench") == 0) {
        const size_t N = argc > 2 ? (size_t)atol(argv[2]) : 1000000;
        const int W = argc > 3 ? atoi(argv[3]) : 16;
        const int nq = argc > 4 ? atoi(argv[4]) : 100;
        const int k = argc > 5 ? atoi(argv[5]) : 10;
        return bench(N, W, nq, k);
    }
    const int cases = argc > 2 ? atoi(argv[2]) : 3000;
    int failures = 0;
    for (int level = 0; level <= OCK_LEVEL_AVX512; level++)
        printf("%s: %s\n", level_name[level], ock_fs_level_supported(level) ? "checked" : "not on this CPU");
    for (int c = 0; c < cases && failures < 10; c++) failures += check_case(c);
    printf("%d cases, %d failures\n", cases, failures);
    return failures != 0;
}
