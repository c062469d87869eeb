/* Checks of the kernels' thread pool (ockstore/kernels/pool.c) in C alone, on POSIX threads or Win32 threads.
 *
 *     cc -O2 -pthread -Iockstore/kernels -o /tmp/pool_harness tools/pool_harness.c ockstore/kernels/pool.c
 *     /tmp/pool_harness check        # every task once, tids below n_threads, concurrent callers; forks (POSIX)
 *     /tmp/pool_harness timing [work_us] [tasks]   # one thread against two, jobs 2 ms apart (CPU-time tasks)
 *
 * For Windows, zig's clang builds it (`python -m ziglang cc -target x86_64-windows-gnu -O2 -Iockstore/kernels -o
 * pool_harness.exe tools/pool_harness.c ockstore/kernels/pool.c`); Wine runs it. check: 20,000 jobs of 1-300 tasks on
 * 1-5 threads, both schedules, each task's output checked, every tid in range; two threads calling at once (one
 * runs on the pool, the other alone); on POSIX, children forked after jobs, and while another thread is running
 * jobs, run jobs of their own on up to four threads (a hang is killed by alarm). Exit status 0 when all pass.
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <windows.h>
#else
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#endif

typedef struct {
    int64_t *out;
    int n_threads;
    int bad;
} check_ctx;

static void check_task(void *c, int64_t t, int tid) {
    check_ctx *x = (check_ctx *)c;
    if (tid < 0 || tid >= x->n_threads) __atomic_store_n(&x->bad, 1, __ATOMIC_RELAXED);
    x->out[t] += t * 3 + 1;
}

/* One job of n tasks on th threads: 0 when every task ran once with a tid below th. */
static int check_job(int n, int th, int schedule) {
    int64_t *out = (int64_t *)calloc((size_t)n + 1, sizeof(int64_t));
    check_ctx c;
    int i, failed = 0;
    c.out = out;
    c.n_threads = th;
    c.bad = 0;
    ock_pool_run(check_task, &c, n, th, schedule);
    for (i = 0; i < n; i++)
        if (out[i] != (int64_t)i * 3 + 1) failed = 1;
    free(out);
    if (failed || c.bad) printf("FAILED: a job of %d tasks on %d threads (schedule %d)\n", n, th, schedule);
    return failed || c.bad;
}

static int many_jobs(int count, int seed) {
    int r;
    for (r = 0; r < count; r++)
        if (check_job(1 + (r * 7 + seed) % 300, 1 + (r + seed) % 5, r % 2)) return 1;
    return 0;
}

#ifdef _WIN32
static DWORD WINAPI concurrent_caller(LPVOID arg) { return (DWORD)many_jobs(2000, (int)(intptr_t)arg); }
#else
static void *concurrent_caller(void *arg) { return (void *)(intptr_t)many_jobs(2000, (int)(intptr_t)arg); }
#endif

static int two_callers(void) {
#ifdef _WIN32
    DWORD ra = 1, rb = 1;
    HANDLE a = CreateThread(NULL, 0, concurrent_caller, (LPVOID)1, 0, NULL);
    HANDLE b = CreateThread(NULL, 0, concurrent_caller, (LPVOID)2, 0, NULL);
    WaitForSingleObject(a, INFINITE);
    WaitForSingleObject(b, INFINITE);
    GetExitCodeThread(a, &ra);
    GetExitCodeThread(b, &rb);
    return ra || rb;
#else
    pthread_t a, b;
    void *ra, *rb;
    pthread_create(&a, NULL, concurrent_caller, (void *)1);
    pthread_create(&b, NULL, concurrent_caller, (void *)2);
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    return ra != NULL || rb != NULL;
#endif
}

#ifndef _WIN32
static volatile int stop_jobs = 0;

static void *jobs_until_stopped(void *arg) {
    (void)arg;
    while (!stop_jobs) check_job(64, 3, 1);
    return NULL;
}

/* A child forked now starts with no workers and runs jobs of its own (killed by alarm if it hangs). */
static int fork_child(void) {
    int status;
    pid_t p = fork();
    if (p == 0) {
        alarm(20);
        if (ock_pool_workers() != 0) _exit(3);
        _exit(many_jobs(300, 5) ? 1 : 0);
    }
    if (p < 0 || waitpid(p, &status, 0) != p) return 1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("FAILED: a forked child %s\n", WIFSIGNALED(status) ? "hung (killed by alarm) or crashed"
                                                                   : "failed its jobs");
        return 1;
    }
    return 0;
}

static int forks(void) {
    pthread_t other;
    int i;
    for (i = 0; i < 20; i++) {
        if (check_job(1000, 3, 1) || fork_child()) return 1;  /* after jobs of this thread */
    }
    pthread_create(&other, NULL, jobs_until_stopped, NULL);  /* while another thread runs jobs */
    for (i = 0; i < 50; i++)
        if (fork_child()) break;
    stop_jobs = 1;
    pthread_join(other, NULL);
    return i < 50;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static double cpu_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* A task of work_us of its thread's CPU time (a preempted thread's task takes longer, as real work would). */
static void cpu_task(void *c, int64_t t, int tid) {
    double end = cpu_us() + *(double *)c;
    (void)t;
    (void)tid;
    while (cpu_us() < end) {
    }
}

static int by_value(const void *a, const void *b) {
    double d = *(const double *)a - *(const double *)b;
    return d < 0 ? -1 : d > 0;
}

static void timing(double work, int tasks) {
    enum { N = 200 };
    double t1[N], t2[N], per_task = work / tasks, start;
    int i;
    for (i = 0; i < N; i++) {
        usleep(2000);
        start = now_us();
        ock_pool_run(cpu_task, &per_task, tasks, 1, OCK_POOL_DYNAMIC);
        t1[i] = now_us() - start;
        usleep(2000);
        start = now_us();
        ock_pool_run(cpu_task, &per_task, tasks, 2, OCK_POOL_DYNAMIC);
        t2[i] = now_us() - start;
    }
    qsort(t1, N, sizeof(double), by_value);
    qsort(t2, N, sizeof(double), by_value);
    printf("%.0f us of work in %d tasks: one thread median %.0f us (p90 %.0f), two threads median %.0f us (p90 %.0f)\n",
           work, tasks, t1[N / 2], t1[N * 9 / 10], t2[N / 2], t2[N * 9 / 10]);
}
#endif

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "check";
    if (ock_pool_init() != 0) {
        printf("FAILED: ock_pool_init\n");
        return 1;
    }
    if (strcmp(mode, "check") == 0) {
        if (many_jobs(20000, 0)) return 1;
        printf("jobs: ok (%d workers, %lld jobs on threads)\n", ock_pool_workers(),
               (long long)ock_pool_parallel_jobs());
        if (two_callers()) return 1;
        printf("concurrent callers: ok\n");
#ifndef _WIN32
        if (forks()) return 1;
        printf("forks: ok\n");
#endif
        return 0;
    }
#ifndef _WIN32
    if (strcmp(mode, "timing") == 0) {
        timing(argc > 2 ? atof(argv[2]) : 500, argc > 3 ? atoi(argv[3]) : 2);
        return 0;
    }
#endif
    printf("usage: pool_harness check | timing [work_us] [tasks]\n");
    return 2;
}
