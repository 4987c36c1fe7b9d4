/* The tcc host runtime's thread pool: runs outlined parallel loop bodies
 * across cores, with no Python involved.
 *
 *   void tcc_parallel_for(int64_t n, tcc_body_fn body, void *ctx);
 *
 * calls body(begin, end, ctx) over disjoint chunks covering [0, n); returns
 * when all are done. The calling thread works too. Workers are created on the
 * first call (TCC_NUM_THREADS, default: the online cores) and then sleep on a
 * condition variable between jobs after a short spin, so back-to-back loops
 * (the common case in one model run) do not pay a wake-up each. The caller
 * returns as soon as every item is done, whichever threads did them. A call made
 * from inside a body, or while another thread owns the pool, runs serially:
 * correctness never depends on the pool being free.
 *
 * One pool per process: when the cpu accelerator's kernel library is loaded
 * it hands its pool over (tcc_use_pool, from Python), and every later loop
 * runs on it, so a placed model alternating host and cpu steps no longer has
 * two sets of threads spinning in turn (this pool's workers, if started,
 * go to sleep after their spin and are not woken again). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../accelerators/cpu/kernels/pin.h"

#include "pool.h"
void tcc_stream_fence(void); /* stream.c: bodies may have streamed stores */

#define SPIN_ITERS 2000

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;  /* one job at a time */
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cond = PTHREAD_COND_INITIALIZER;
static int num_threads = 1;

/* A job lives on its caller's stack. The caller waits for the items to be
 * done, not for every worker: a worker that wakes late (or is descheduled on
 * a loaded machine) finds the items gone and costs the caller nothing. It
 * must not touch a job that has returned, hence `current` and `active`: a
 * worker announces itself in `active` before reading `current`, and the
 * caller clears `current` before waiting for `active` to drain (both
 * sequentially consistent, so one of the two always sees the other). */
typedef struct {
    tcc_body_fn body;
    void *ctx;
    int64_t n, chunk;
    atomic_int_fast64_t next; /* first item not handed out yet */
    atomic_int_fast64_t done; /* items finished */
} job_t;

static _Atomic(job_t *) current;
static atomic_int active;
static atomic_uint_fast64_t generation;

static __thread int in_parallel;

static void work_on(job_t *j) {
    for (;;) {
        int64_t b = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (b >= j->n) return;
        int64_t e = b + j->chunk < j->n ? b + j->chunk : j->n;
        j->body(b, e, j->ctx);
        tcc_stream_fence(); /* streamed stores are visible before `done` says so */
        atomic_fetch_add_explicit(&j->done, e - b, memory_order_release);
    }
}

static int pin_cpu[256];
static pthread_t pin_threads[256];
static int pinned; /* pin.h */

static void *worker(void *arg) {
    (void)arg; /* pinned by pool_init, before any call can re-pin it (pin.h) */
    uint_fast64_t seen = 0;
    in_parallel = 1;
    for (;;) {
        uint_fast64_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&generation, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ITERS) { sched_yield(); continue; }
            pthread_mutex_lock(&wake_lock);
            while ((g = atomic_load_explicit(&generation, memory_order_acquire)) == seen)
                pthread_cond_wait(&wake_cond, &wake_lock);
            pthread_mutex_unlock(&wake_lock);
            break;
        }
        seen = g;
        atomic_fetch_add(&active, 1);
        job_t *j = atomic_load(&current);
        if (j != NULL) work_on(j);
        atomic_fetch_sub_explicit(&active, 1, memory_order_release);
    }
    return NULL;
}

static void pool_init(void) {
    const char *env = getenv("TCC_NUM_THREADS");
    long n = env && *env ? strtol(env, NULL, 10) : 0;
    /* not a positive number (tcc's Python side refuses those): one per core,
     * as the kernel library's pool does */
    if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > 256) n = 256;
    num_threads = (int)n;
    pinned = tcc_pin_plan(num_threads, pin_cpu);
    for (int i = 1; i < num_threads; i++) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 8 << 20);  /* bodies keep small buffers on the stack */
        if (pthread_create(&t, &attr, worker, (void *)(intptr_t)i) != 0) { num_threads = i; pthread_attr_destroy(&attr); break; }
        pin_threads[i] = t;
        if (pinned) tcc_pin_thread(t, pin_cpu[i]);
        pthread_attr_destroy(&attr);
        pthread_detach(t);
    }
}

/* the adopted pool: tcc_cpu_parallel_for(n, grain, fn, ctx), tcc_cpu_num_threads() */
typedef void (*ext_task_fn)(void *ctx, long begin, long end);
typedef void (*ext_for_fn)(long n, long grain, ext_task_fn fn, void *ctx);
typedef int (*ext_nt_fn)(void);
static _Atomic(ext_for_fn) ext_for;
static _Atomic(ext_nt_fn) ext_nt;

void tcc_use_pool(ext_for_fn parallel_for, ext_nt_fn num_threads_fn) {
    atomic_store(&ext_nt, num_threads_fn);
    atomic_store(&ext_for, parallel_for);
}

typedef struct {
    tcc_body_fn body;
    void *ctx;
} ext_job;

static void ext_task(void *arg, long b, long e) {
    const ext_job *j = arg;
    j->body(b, e, j->ctx);
    tcc_stream_fence(); /* as work_on: streamed stores visible before the chunk counts as done */
}

int tcc_num_threads(void) {
    ext_nt_fn nt = atomic_load_explicit(&ext_nt, memory_order_acquire);
    if (nt) return nt();
    pthread_once(&pool_once, pool_init);
    return num_threads;
}

void tcc_parallel_for(int64_t n, tcc_body_fn body, void *ctx) {
    if (n <= 0) return;
    ext_for_fn f = atomic_load_explicit(&ext_for, memory_order_acquire);
    if (f) {
        /* grain 1: a contiguous share per thread in 4 stolen chunks, this pool's own split */
        ext_job j = {body, ctx};
        f((long)n, 1, ext_task, &j);
        return;
    }
    pthread_once(&pool_once, pool_init);
    if (n == 1 || num_threads == 1 || in_parallel || pthread_mutex_trylock(&pool_lock) != 0) {
        body(0, n, ctx);
        return;
    }
    if (pinned) tcc_pin_follow_caller(num_threads, pin_cpu, pin_threads);
    int64_t chunks = (int64_t)num_threads * 4;  /* a little slack for uneven cores */
    int64_t chunk = (n + chunks - 1) / chunks;
    job_t job = {body, ctx, n, chunk < 1 ? 1 : chunk};
    atomic_init(&job.next, 0);
    atomic_init(&job.done, 0);
    atomic_store(&current, &job);
    pthread_mutex_lock(&wake_lock);
    atomic_fetch_add_explicit(&generation, 1, memory_order_release);
    pthread_cond_broadcast(&wake_cond);
    pthread_mutex_unlock(&wake_lock);
    in_parallel = 1;
    work_on(&job);
    in_parallel = 0;
    while (atomic_load_explicit(&job.done, memory_order_acquire) < n) sched_yield();
    atomic_store(&current, NULL);
    while (atomic_load(&active) != 0) sched_yield();
    pthread_mutex_unlock(&pool_lock);
}
