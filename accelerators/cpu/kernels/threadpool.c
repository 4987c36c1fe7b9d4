/* The kernel library's thread pool: TCC_NUM_THREADS workers (default: the
 * number of online cores), the calling thread taking part. A parallel_for
 * splits its range into chunks that threads claim from one atomic word
 * (generation | chunk count | next chunk), so a worker that is descheduled
 * (a loaded machine) never stalls a call: the others take its chunks. Idle
 * workers spin briefly (kernels follow each other closely), then sleep on a
 * condition variable, so an idle process costs nothing. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#include "tcc_cpu.h"

#define MAX_THREADS 256
#define SPIN_ITERS 4000   /* ~0.2-0.5 ms of pause before sleeping */
#define MAX_CHUNKS 0xffff

static int g_nthreads = 0, g_limit = 0;
static pthread_t g_workers[MAX_THREADS];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t g_call_mu = PTHREAD_MUTEX_INITIALIZER; /* one parallel_for at a time */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static struct {
    tcc_task_fn fn;
    void *ctx;
    long n, chunk;
} g_job;
static atomic_uint_fast32_t g_generation = 0;
static _Atomic uint64_t g_claim = 0; /* gen << 32 | nchunks << 16 | next */
static atomic_long g_done = 0;
static atomic_int g_sleeping = 0;
static __thread int t_in_task = 0;

static void run_chunks(uint32_t gen) {
    for (;;) {
        uint64_t v = atomic_load_explicit(&g_claim, memory_order_acquire);
        if ((uint32_t)(v >> 32) != gen) return;
        long nchunks = (long)((v >> 16) & 0xffff), i = (long)(v & 0xffff);
        if (i >= nchunks) return;
        if (!atomic_compare_exchange_weak_explicit(&g_claim, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        long b = i * g_job.chunk, e = b + g_job.chunk;
        if (e > g_job.n) e = g_job.n;
        if (b < e) g_job.fn(g_job.ctx, b, e);
        atomic_fetch_add_explicit(&g_done, 1, memory_order_acq_rel);
    }
}

static void *worker(void *arg) {
    (void)arg;
    uint32_t seen = 0; /* workers start before the first job (pthread_once) */
    t_in_task = 1;
    for (;;) {
        uint32_t gen;
        int spins = 0;
        while ((gen = (uint32_t)atomic_load_explicit(&g_generation, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ITERS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&g_mu);
            atomic_fetch_add(&g_sleeping, 1);
            while ((gen = (uint32_t)atomic_load(&g_generation)) == seen) pthread_cond_wait(&g_cv, &g_mu);
            atomic_fetch_sub(&g_sleeping, 1);
            pthread_mutex_unlock(&g_mu);
            break;
        }
        seen = gen;
        run_chunks(gen);
    }
    return NULL;
}

static void start(void) {
    int n = 0;
    const char *env = getenv("TCC_NUM_THREADS");
    if (env && *env) n = atoi(env);
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    g_nthreads = n;
    for (long i = 1; i < n; i++) pthread_create(&g_workers[i], NULL, worker, (void *)i);
}

int tcc_cpu_num_threads(void) {
    pthread_once(&g_once, start);
    return (g_limit > 0 && g_limit < g_nthreads) ? g_limit : g_nthreads;
}

void tcc_cpu_set_num_threads(int n) {
    pthread_once(&g_once, start);
    g_limit = n;
}

void tcc_cpu_parallel_for(long n, long grain, tcc_task_fn fn, void *ctx) {
    if (n <= 0) return;
    int nt = tcc_cpu_num_threads();
    if (grain < 1) grain = 1;
    long nchunks = (n + grain - 1) / grain;
    if (nt <= 1 || nchunks <= 1 || t_in_task) {
        fn(ctx, 0, n);
        return;
    }
    if (nchunks > nt) nchunks = nt;
    pthread_mutex_lock(&g_call_mu);
    g_job.fn = fn;
    g_job.ctx = ctx;
    g_job.n = n;
    g_job.chunk = (n + nchunks - 1) / nchunks;
    nchunks = (n + g_job.chunk - 1) / g_job.chunk;
    atomic_store_explicit(&g_done, 0, memory_order_relaxed);
    uint32_t gen = (uint32_t)atomic_load(&g_generation) + 1;
    if (gen == 0) gen = 1; /* 0 is the workers' initial "seen" */
    atomic_store_explicit(&g_claim, ((uint64_t)gen << 32) | ((uint64_t)nchunks << 16), memory_order_release);
    atomic_store(&g_generation, gen); /* seq_cst: ordered before the g_sleeping load (Dekker) */
    if (atomic_load(&g_sleeping)) {
        pthread_mutex_lock(&g_mu);
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
    }
    t_in_task = 1;
    run_chunks(gen);
    t_in_task = 0;
    int spins = 0;
    while (atomic_load_explicit(&g_done, memory_order_acquire) < nchunks) {
        if (++spins < SPIN_ITERS) CPU_RELAX();
        else sched_yield();
    }
    pthread_mutex_unlock(&g_call_mu);
}

const char *tcc_cpu_isa(void) {
#if defined(__AVX512F__)
    return "avx512";
#elif defined(__AVX2__)
    return "avx2";
#else
    return "generic";
#endif
}
