/* The time one core needs just to read a search model once, query after query: a lower bound on the fixed cost of
 * a single-query search, whatever its arithmetic (docs/results.md, "Single-query latency").
 *
 * Every single-query search reads its whole model to build its tables: faiss IndexPQ its codebooks, ockstore OCKM
 * the rotation and C codebooks per subspace (float32 in both). This program sums a float32 array of each size again
 * and again, as a stream of vector loads with independent sums (no arithmetic bound), and prints the median time of
 * one pass. Default sizes: P = 384 at 32 code bytes, IndexPQ 32x8 (393,216 bytes), OPQ + IndexPQ (983,040) and
 * OCKM M=16 C=2 (1,376,256), as bench_options.py's "model_bytes" column reports them.
 *
 *     cc -O3 -march=native -o /tmp/model_read_floor tools/model_read_floor.c && /tmp/model_read_floor [BYTES ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LANES 64     /* floats summed side by side: enough independent adds that only the loads bound the loop */
#define PASSES 4000  /* timed passes per size (after as many untimed ones) */

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One pass over n floats (n a multiple of LANES). */
static float read_once(const float *data, long n) {
    float sums[LANES] = {0};
    for (long i = 0; i < n; i += LANES)
        for (int j = 0; j < LANES; j++) sums[j] += data[i + j];
    float total = 0;
    for (int j = 0; j < LANES; j++) total += sums[j];
    return total;
}

int main(int argc, char **argv) {
    long defaults[] = {393216, 983040, 1376256};
    int count = argc > 1 ? argc - 1 : 3;
    double *times = malloc(sizeof(double) * PASSES);
    float sink = 0;
    printf("| model bytes | one read (us, median of %d) | GB/s |\n|---|---|---|\n", PASSES);
    for (int s = 0; s < count; s++) {
        long bytes = argc > 1 ? atol(argv[s + 1]) : defaults[s];
        long n = (bytes / 4 + LANES - 1) / LANES * LANES;
        float *data = malloc(sizeof(float) * n);
        if (data == NULL || times == NULL) return 1;
        for (long i = 0; i < n; i++) data[i] = (float)(i & 7);
        for (int p = 0; p < PASSES; p++) sink += read_once(data, n);
        for (int p = 0; p < PASSES; p++) {
            double t0 = now_ns();
            sink += read_once(data, n);
            times[p] = now_ns() - t0;
        }
        qsort(times, PASSES, sizeof(double), by_value);
        printf("| %ld | %.2f | %.0f |\n", bytes, times[PASSES / 2] / 1e3, n * 4.0 / times[PASSES / 2]);
        free(data);
    }
    free(times);
    return sink == -1.0f;  /* keeps the sums alive */
}
