/* The kernels' threads: a small pool of our own, in place of OpenMP (docs/ARCHITECTURE.md, "Threads").
 *
 * ock_pool_run(fn, ctx, n_tasks, n_threads, schedule) calls fn(ctx, task, tid) once for every task in
 * 0 .. n_tasks - 1, on at most n_threads threads, and returns when every call has returned. The caller's thread takes
 * part (tid 0); the others are persistent workers (tid 1, 2, ...), created on first use and kept, which spin briefly
 * after a job and then sleep. A tid is unique among the threads running one job at the same moment, and below
 * n_threads, so it indexes per-thread scratch; which thread runs which task is not fixed (a worker that has not
 * woken by the time the others ran out of tasks is not waited for), so a kernel's results must not depend on it, as
 * they must not depend on the number of threads.
 *
 * Schedules: OCK_POOL_STATIC hands out contiguous runs of tasks in order, each a quarter of a thread's share (like
 * OpenMP's schedule(static), a thread runs neighbouring tasks, and a thread held back by the scheduler leaves the
 * runs it has not claimed to the others); OCK_POOL_DYNAMIC hands out one task at a time from a counter (OpenMP's
 * schedule(dynamic)).
 *
 * One job at a time: a call made while another is running (another Python thread's kernel, released GIL) runs its
 * tasks on its own thread (tid 0), as does any call with n_threads <= 1 or a single task.
 *
 * Fork: the pool registers pthread_atfork handlers (ock_pool_init, when the module loads): a child starts with an
 * empty pool and no lock held, and creates its workers again on its first job. (GNU OpenMP's threads hang a child
 * forked after a parallel region: this is why the kernels have their own.)
 *
 * Windows: the same pool on Win32 threads (slim reader/writer locks, condition variables); there is no fork.
 */
#ifndef OCKSTORE_POOL_H
#define OCKSTORE_POOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*ock_pool_task)(void *ctx, int64_t task, int tid);

#define OCK_POOL_STATIC 0
#define OCK_POOL_DYNAMIC 1

/* Threads of one job at most (as _validation.MAX_THREADS): workers 1 .. OCK_POOL_MAX_THREADS - 1. */
#define OCK_POOL_MAX_THREADS 1024

/* Work units (about a nanosecond of one core's work each, as the kernels estimate them) that each thread of a job
 * must get before ock_pool_threads gives the job another thread: below that, waking a worker costs more than it
 * saves, and on a machine whose other cores are busy much more (docs/ARCHITECTURE.md, "Threads", and
 * tools/bench_threads.py, which measured it). */
#define OCK_POOL_WORK_PER_THREAD 100000.0

/* Register the fork handlers; 0 on success. Called once, when the module loads. */
int ock_pool_init(void);

/* Run fn(ctx, task, tid) for task in 0 .. n_tasks - 1 on at most n_threads threads (see above). */
void ock_pool_run(ock_pool_task fn, void *ctx, int64_t n_tasks, int n_threads, int schedule);

/* The small-work rule, one for every kernel: the threads a job of `work` units gets when n_threads are allowed: at
 * least 1, at most n_threads, and no more than work / OCK_POOL_WORK_PER_THREAD (or the value tests set). While the
 * pool is crowded (recent jobs' threads gained no time: the machine's other cores busy), 50 times as much work per
 * thread, except for one small job in 16 (pool.c, "Crowding"). */
int ock_pool_threads(int n_threads, double work);

/* For tests: set how crowded the pool is (1024 x the share of recent jobs whose threads gained no time; above 512
 * the rule asks for more work per thread); returns the previous value. */
int ock_pool_set_crowding(int per_1024);

/* For tests: the units per thread of the small-work rule from now on (0: every job gets the threads it is allowed,
 * however small); returns the previous value. */
double ock_pool_set_work_per_thread(double units);

/* For tests: the workers this process has created (0 in a child forked since, until its first job), and the jobs it
 * has run on more than one thread (the caller's and at least one worker's, as far as the caller could tell: the jobs
 * it published to workers). */
int ock_pool_workers(void);
int64_t ock_pool_parallel_jobs(void);

/* For tests and measurements: the spin of a worker after a job before it sleeps, in microseconds (0: sleep at once);
 * returns the previous value. */
int ock_pool_set_spin_us(int us);

#ifdef __cplusplus
}
#endif

#endif
