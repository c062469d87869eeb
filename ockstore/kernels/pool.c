/* The kernels' thread pool (pool.h says what it promises; docs/ARCHITECTURE.md, "Threads", why it exists).
 *
 * One pool per process: a lock, the job being run, and the workers, each with its own condition variable. A job is
 * published under the lock with a new generation number; a worker that sees it (spinning for a little while after
 * its last job, else woken from its condition variable) joins it under the lock while it is open, then claims units
 * of tasks from an atomic counter until none is left. The caller runs units too, then closes the job (no worker
 * joins after that) and waits only for the workers that joined: a worker the scheduler has not run yet (on a machine
 * whose other cores are busy) costs the caller nothing but its wake-up call.
 *
 * Atomics are GCC's __atomic builtins (gcc and clang, MinGW included): the counter and the generation are read
 * outside the lock; everything else of a job is written under the lock before the generation changes.
 */
#include "pool.h"

#include <string.h>

#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
typedef SRWLOCK ock_mutex;
typedef CONDITION_VARIABLE ock_cond;
#define OCK_MUTEX_INIT SRWLOCK_INIT
#define ock_lock(m) AcquireSRWLockExclusive(m)
#define ock_unlock(m) ReleaseSRWLockExclusive(m)
#define ock_cond_init(c) InitializeConditionVariable(c)
#define ock_cond_wait(c, m) SleepConditionVariableSRW((c), (m), INFINITE, 0)
#define ock_cond_signal(c) WakeConditionVariable(c)
#else
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
typedef pthread_mutex_t ock_mutex;
typedef pthread_cond_t ock_cond;
#define OCK_MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
#define ock_lock(m) pthread_mutex_lock(m)
#define ock_unlock(m) pthread_mutex_unlock(m)
#define ock_cond_init(c) pthread_cond_init((c), NULL)
#define ock_cond_wait(c, m) pthread_cond_wait((c), (m))
#define ock_cond_signal(c) pthread_cond_signal(c)
#endif

/* Give the CPU to another thread that is ready to run on it, if any (returns at once otherwise). */
#ifdef _WIN32
#define ock_yield() ((void)SwitchToThread())
#else
#define ock_yield() ((void)sched_yield())
#endif

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#define ock_cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__) || defined(__arm__)
#define ock_cpu_relax() __asm__ __volatile__("yield")
#else
#define ock_cpu_relax() ((void)0)
#endif

/* Stack of a worker: the kernels' frames are small, but some platforms' default for threads is (macOS 512 KiB, musl
 * 128 KiB); Linux's is 8 MiB of address space. */
#define OCK_POOL_STACK_BYTES ((size_t)4 << 20)

/* How long a worker spins after a job before it sleeps (and the caller, waiting for the last workers, before it
 * sleeps): long enough that the parallel regions of one search or one encoding, a few microseconds apart, find the
 * workers awake; short enough that an idle pool leaves a busy machine's other cores alone
 * (tools/bench_threads.py measures both). */
#define OCK_POOL_SPIN_US 50

/* Crowding: a job on threads gained time only if its threads, together, ran for longer than it took; when they ran
 * for less than OCK_POOL_GAIN times as long (the CPU time of every thread against the caller's wall time), the
 * machine had no core to spare (another process keeping the other cores busy: the scheduler runs a woken worker on
 * the caller's core, or after the caller is done). While most recent jobs were such, the pool is "crowded": a job
 * gets threads only for OCK_POOL_BUSY_FACTOR times the usual work per thread, 5 ms each (with a busy loop on the other
 * core of two, two threads gained nothing below 2-5 ms of work: a worker gets a core only when the scheduler ends the
 * busy loop's turn, and the caller then waits for the task the worker took), and one small job in
 * OCK_POOL_PROBE_EVERY still runs on threads, to notice when cores are free again. */
#define OCK_POOL_GAIN 1.25
#define OCK_POOL_BUSY_FACTOR 50.0
#define OCK_POOL_PROBE_EVERY 16

typedef struct {
    ock_cond wake;       /* the worker sleeps here (under pool_lock) */
    int sleeping;        /* under pool_lock */
    uint64_t created;    /* the generation before the job whose caller created it */
} ock_worker;

typedef struct {
    ock_pool_task fn;
    void *ctx;
    int64_t n_tasks;
    int64_t unit;    /* tasks per claim: 1 (dynamic), or a quarter of a thread's share (static) */
    int n_threads;
} ock_job;

static ock_mutex pool_lock = OCK_MUTEX_INIT;

static struct {
    ock_cond done;          /* the caller waits here for the workers that joined */
    int caller_waiting;     /* under lock */
    ock_job job;            /* under lock */
    int open;               /* under lock: workers may join the job */
    int active;             /* atomic (changed under lock): workers running the job */
    uint64_t generation;    /* atomic (changed under lock): one more for every job */
    int64_t next;           /* atomic: the next unit to claim */
    int busy;               /* atomic: a caller is running a job */
    int n_workers;          /* under lock: workers created (ids 1 .. n_workers) */
    int spin_us;            /* atomic */
    double work_per_thread; /* atomic (__atomic_load / __atomic_store of a double) */
    int64_t parallel_jobs;  /* atomic */
    int crowding;           /* atomic (written by the caller of a job): 1024 x a moving average (weight 1/8) of the
                             * parallel jobs whose threads gained nothing (see OCK_POOL_GAIN) */
    int64_t cpu_ns;         /* atomic: the CPU time the workers that joined the job spent in it */
    unsigned probes;        /* atomic: small jobs asked for while crowded (every PROBE_EVERY-th runs on threads) */
    ock_worker workers[OCK_POOL_MAX_THREADS];
} pool;

/* The CPU time of the calling thread in nanoseconds (-1 where it cannot be read precisely: Windows counts it in clock
 * ticks, so the pool there never finds itself crowded). */
static inline int64_t ock_thread_cpu_ns(void) {
#if defined(_WIN32) || !defined(CLOCK_THREAD_CPUTIME_ID)
    return -1;
#else
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return -1;
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
#endif
}

static inline int64_t ock_now_ns(void) {
#ifdef _WIN32
    LARGE_INTEGER count, frequency;
    QueryPerformanceCounter(&count);
    QueryPerformanceFrequency(&frequency);
    return (int64_t)((double)count.QuadPart * 1e9 / (double)frequency.QuadPart);
#else
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
#endif
}

/* Spin until *value != unwanted (64-bit) or the spin time is over; returns the last value read. Every 64 reads the
 * thread yields: where the CPU is shared (the caller's thread waiting for it, other processes), a spinning thread
 * must not hold it. */
static uint64_t ock_spin_while_u64(const uint64_t *value, uint64_t unwanted) {
    int64_t limit = (int64_t)__atomic_load_n(&pool.spin_us, __ATOMIC_RELAXED) * 1000;
    int64_t start = 0;
    uint64_t v = unwanted;
    int i;
    if (limit <= 0) return __atomic_load_n(value, __ATOMIC_ACQUIRE);
    for (;;) {
        for (i = 0; i < 64; i++) {
            v = __atomic_load_n(value, __ATOMIC_ACQUIRE);
            if (v != unwanted) return v;
            ock_cpu_relax();
        }
        ock_yield();
        if (start == 0) start = ock_now_ns();
        else if (ock_now_ns() - start > limit) return v;
    }
}

static int ock_spin_while_nonzero(const int *value) {
    int64_t limit = (int64_t)__atomic_load_n(&pool.spin_us, __ATOMIC_RELAXED) * 1000;
    int64_t start = 0;
    int v = 1, i;
    if (limit <= 0) return __atomic_load_n(value, __ATOMIC_ACQUIRE);
    for (;;) {
        for (i = 0; i < 64; i++) {
            v = __atomic_load_n(value, __ATOMIC_ACQUIRE);
            if (v == 0) return 0;
            ock_cpu_relax();
        }
        ock_yield();
        if (start == 0) start = ock_now_ns();
        else if (ock_now_ns() - start > limit) return v;
    }
}

/* Claim units of the job and run their tasks until none is left; returns the units run. */
static int64_t ock_run_units(const ock_job *job, int tid) {
    int64_t unit, first, last, task, ran = 0;
    for (;;) {
        unit = __atomic_fetch_add(&pool.next, 1, __ATOMIC_RELAXED);
        if (unit >= (job->n_tasks + job->unit - 1) / job->unit) return ran;
        ran++;
        first = unit * job->unit;
        last = first + job->unit < job->n_tasks ? first + job->unit : job->n_tasks;
        for (task = first; task < last; task++) job->fn(job->ctx, task, tid);
    }
}

#ifdef _WIN32
static DWORD WINAPI ock_worker_main(LPVOID arg)
#else
static void *ock_worker_main(void *arg)
#endif
{
    ock_worker *w = (ock_worker *)arg;
    int id = (int)(w - pool.workers);
    uint64_t seen = w->created;   /* written before the thread was created */
    ock_job job;
    int64_t cpu;
    int spin = 0;   /* a new worker goes to the lock at once: its creator publishes a job as it releases it */
    for (;;) {
        if (spin) ock_spin_while_u64(&pool.generation, seen);
        ock_lock(&pool_lock);
        while (__atomic_load_n(&pool.generation, __ATOMIC_RELAXED) == seen) {
            w->sleeping = 1;
            ock_cond_wait(&w->wake, &pool_lock);
        }
        w->sleeping = 0;
        seen = __atomic_load_n(&pool.generation, __ATOMIC_RELAXED);
        if (!pool.open || id >= pool.job.n_threads) {
            ock_unlock(&pool_lock);
            spin = 0;   /* not wanted: sleep until called */
            continue;
        }
        __atomic_fetch_add(&pool.active, 1, __ATOMIC_RELAXED);
        job = pool.job;
        ock_unlock(&pool_lock);
        cpu = ock_thread_cpu_ns();
        ock_run_units(&job, id);
        if (cpu >= 0) __atomic_fetch_add(&pool.cpu_ns, ock_thread_cpu_ns() - cpu, __ATOMIC_RELAXED);
        ock_lock(&pool_lock);
        if (__atomic_sub_fetch(&pool.active, 1, __ATOMIC_ACQ_REL) == 0 && pool.caller_waiting)
            ock_cond_signal(&pool.done);
        ock_unlock(&pool_lock);
        spin = 1;
    }
#ifdef _WIN32
    return 0;
#else
    return NULL;
#endif
}

/* Start worker `id` (under the lock); 0 on success. */
static int ock_start_worker(int id) {
    void *arg = &pool.workers[id];
    ock_cond_init(&pool.workers[id].wake);
    pool.workers[id].sleeping = 0;
    pool.workers[id].created = __atomic_load_n(&pool.generation, __ATOMIC_RELAXED);
#ifdef _WIN32
    {
        HANDLE h = CreateThread(NULL, OCK_POOL_STACK_BYTES, ock_worker_main, arg, STACK_SIZE_PARAM_IS_A_RESERVATION,
                                NULL);
        if (h == NULL) return -1;
        CloseHandle(h);
        return 0;
    }
#else
    {
        pthread_t thread;
        pthread_attr_t attr;
        sigset_t all, previous;
        int rc;
        if (pthread_attr_init(&attr) != 0) return -1;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, OCK_POOL_STACK_BYTES);
        /* signals go to the threads Python knows, never to a worker */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &previous);
        rc = pthread_create(&thread, &attr, ock_worker_main, arg);
        pthread_sigmask(SIG_SETMASK, &previous, NULL);
        pthread_attr_destroy(&attr);
        return rc == 0 ? 0 : -1;
    }
#endif
}

void ock_pool_run(ock_pool_task fn, void *ctx, int64_t n_tasks, int n_threads, int schedule) {
    ock_job job;
    int64_t task, wall, cpu;
    int i, expected = 0;
    if (n_tasks <= 0) return;
    if (n_threads > n_tasks) n_threads = (int)n_tasks;
    if (n_threads > OCK_POOL_MAX_THREADS) n_threads = OCK_POOL_MAX_THREADS;
    if (n_threads <= 1 || !__atomic_compare_exchange_n(&pool.busy, &expected, 1, 0, __ATOMIC_ACQUIRE,
                                                       __ATOMIC_RELAXED)) {
        for (task = 0; task < n_tasks; task++) fn(ctx, task, 0);
        return;
    }
    job.fn = fn;
    job.ctx = ctx;
    job.n_tasks = n_tasks;
    /* static: contiguous runs, claimed in order; a quarter of a thread's share each, so that a thread the scheduler
     * holds back (a machine busy with other work) delays the job by a quarter of its share at most, not all of it:
     * the others take over its runs not yet claimed */
    job.unit = schedule == OCK_POOL_STATIC ? (n_tasks + 4 * (int64_t)n_threads - 1) / (4 * (int64_t)n_threads) : 1;
    wall = ock_now_ns();
    ock_lock(&pool_lock);
    while (pool.n_workers < n_threads - 1 && ock_start_worker(pool.n_workers + 1) == 0) pool.n_workers++;
    if (n_threads > pool.n_workers + 1) n_threads = pool.n_workers + 1;  /* threads that could not be created */
    job.n_threads = n_threads;
    pool.job = job;
    __atomic_store_n(&pool.next, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pool.cpu_ns, 0, __ATOMIC_RELAXED);
    pool.open = 1;
    __atomic_store_n(&pool.active, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pool.generation, pool.generation + 1, __ATOMIC_RELEASE);
    for (i = 1; i < n_threads; i++)
        if (pool.workers[i].sleeping) ock_cond_signal(&pool.workers[i].wake);
    ock_unlock(&pool_lock);
    __atomic_fetch_add(&pool.parallel_jobs, 1, __ATOMIC_RELAXED);
    cpu = ock_thread_cpu_ns();
    ock_run_units(&job, 0);
    if (cpu >= 0) cpu = ock_thread_cpu_ns() - cpu;  /* the caller's time in tasks, not in waiting for workers */
    /* every unit is claimed: close the job, then wait for the workers that joined it */
    ock_lock(&pool_lock);
    pool.open = 0;
    if (__atomic_load_n(&pool.active, __ATOMIC_ACQUIRE) > 0) {
        ock_unlock(&pool_lock);
        ock_spin_while_nonzero(&pool.active);
        ock_lock(&pool_lock);
        while (__atomic_load_n(&pool.active, __ATOMIC_ACQUIRE) > 0) {
            pool.caller_waiting = 1;
            ock_cond_wait(&pool.done, &pool_lock);
        }
        pool.caller_waiting = 0;
    }
    ock_unlock(&pool_lock);
    if (cpu >= 0) {  /* did the threads gain time (OCK_POOL_GAIN)? */
        cpu += __atomic_load_n(&pool.cpu_ns, __ATOMIC_RELAXED);
        wall = ock_now_ns() - wall;
        i = __atomic_load_n(&pool.crowding, __ATOMIC_RELAXED);
        __atomic_store_n(&pool.crowding, i + (((double)cpu < OCK_POOL_GAIN * (double)wall ? 1024 : 0) - i) / 8,
                         __ATOMIC_RELAXED);
    }
    __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
}

int ock_pool_threads(int n_threads, double work) {
    double per_thread;
    double most;
    __atomic_load(&pool.work_per_thread, &per_thread, __ATOMIC_RELAXED);
    if (n_threads <= 1) return 1;
    if (!(per_thread > 0)) return n_threads;
    most = work / per_thread;
    if (!(most >= 2.0)) return 1;   /* NaN work too */
    if (__atomic_load_n(&pool.crowding, __ATOMIC_RELAXED) > 512) {
        /* Crowded: threads have mostly gained nothing (the other cores busy), and a job on threads costs its
         * wake-up calls unless it lasts long enough for the scheduler to give a worker a core of its own. */
        most /= OCK_POOL_BUSY_FACTOR;
        if (!(most >= 2.0))
            return __atomic_fetch_add(&pool.probes, 1, __ATOMIC_RELAXED) % OCK_POOL_PROBE_EVERY == 0 ? 2 : 1;
    }
    return most < (double)n_threads ? (int)most : n_threads;
}

int ock_pool_set_crowding(int per_1024) {
    return __atomic_exchange_n(&pool.crowding, per_1024 < 0 ? 0 : per_1024 > 1024 ? 1024 : per_1024,
                               __ATOMIC_RELAXED);
}

double ock_pool_set_work_per_thread(double units) {
    double previous;
    ock_lock(&pool_lock);
    if (!(units > 0)) units = 0;
    __atomic_exchange(&pool.work_per_thread, &units, &previous, __ATOMIC_RELAXED);
    ock_unlock(&pool_lock);
    return previous;
}

int64_t ock_pool_parallel_jobs(void) { return __atomic_load_n(&pool.parallel_jobs, __ATOMIC_RELAXED); }

int ock_pool_workers(void) {
    int n;
    ock_lock(&pool_lock);
    n = pool.n_workers;
    ock_unlock(&pool_lock);
    return n;
}

int ock_pool_set_spin_us(int us) {
    return __atomic_exchange_n(&pool.spin_us, us < 0 ? 0 : us, __ATOMIC_RELAXED);
}

#ifndef _WIN32
/* Fork: the child has none of the workers, nor the thread of a job in progress. The lock is taken before the fork (so
 * that no other thread holds it then); the parent releases it, the child initialises it anew (its owner, a thread of
 * the parent, is not the child's thread: unlocking it there is not portable), forgets the workers and any job, and
 * starts its own workers on its first job. */
static void ock_pool_before_fork(void) { ock_lock(&pool_lock); }

static void ock_pool_after_fork_parent(void) { ock_unlock(&pool_lock); }

static void ock_pool_after_fork_child(void) {
    pool.n_workers = 0;
    pool.open = 0;
    pool.caller_waiting = 0;
    __atomic_store_n(&pool.active, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pool.busy, 0, __ATOMIC_RELAXED);
    ock_cond_init(&pool.done);
    pthread_mutex_init(&pool_lock, NULL);
}
#endif

int ock_pool_init(void) {
    static int registered = 0;
    int rc = 0;
    ock_lock(&pool_lock);
    if (!registered) {
        ock_cond_init(&pool.done);
        __atomic_store_n(&pool.spin_us, OCK_POOL_SPIN_US, __ATOMIC_RELAXED);
        {
            double units = OCK_POOL_WORK_PER_THREAD;
            __atomic_store(&pool.work_per_thread, &units, __ATOMIC_RELAXED);
        }
#ifndef _WIN32
        rc = pthread_atfork(ock_pool_before_fork, ock_pool_after_fork_parent, ock_pool_after_fork_child);
#endif
        registered = rc == 0;
    }
    ock_unlock(&pool_lock);
    return rc;
}
