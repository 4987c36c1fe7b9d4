/* The kernel library's thread pool: TCC_NUM_THREADS workers (default: the
 * number of online cores), the calling thread taking part. A parallel_for
 * gives each thread one contiguous range of the items (what a static split
 * would), run in a few chunks claimed from that range's atomic word
 * (generation | chunk count | next chunk); a thread done with its own range
 * steals the remaining chunks of the others'. So a worker that is
 * descheduled (a loaded machine) or slower (its data in the other core's
 * cache) never stalls a call for more than one chunk, while each thread
 * still mostly works on adjacent items. Idle workers spin briefly (kernels
 * follow each other closely), then sleep on a condition variable, so an
 * idle process costs nothing. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#include "pin.h"
#include "tcc_cpu.h"

#define MAX_THREADS 256
#define SPIN_ITERS 4000   /* the caller's wait for the last chunks: pauses, then yields */
/* How long an idle worker spins before it sleeps. Waking a sleeping worker
 * (a futex and, on a VM, an idle vCPU) cost the first kernel of a run ~70 us:
 * MobileNetV2's stem on 2 threads, runs 0.2-1 ms apart, 0.19-0.20 ms
 * against 0.12 back to back, where onnxruntime lost nothing up to 2 ms
 * apart (Intel Xeon family 6 model 167, avx512). The former 4000 pauses
 * (~0.1-0.3 ms, less where pause is short, as on AMD) covered gaps of a few
 * tens of us; 2 ms covers 1 ms gaps (0.126 / 0.141 ms on that stem, 0.5 ms
 * of spin 0.130 / 0.188). Back-to-back runs are unchanged. */
#define SPIN_NS 2000000u
#define SPIN_YIELD_EVERY 32
#define CHUNKS_PER_RANGE 4 /* the unit of stealing: a quarter of a thread's share (< 2^16) */

static int g_nthreads = 0;
static atomic_int g_limit = 0;
static pthread_t g_workers[MAX_THREADS];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t g_call_mu = PTHREAD_MUTEX_INITIALIZER; /* one parallel_for at a time */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static struct {
    tcc_task_fn fn;
    void *ctx;
    long n, nranges, rlen, chunk; /* range r: items [r*rlen, (r+1)*rlen) in chunks of `chunk` */
} g_job;
static atomic_uint_fast32_t g_generation = 0;
static struct {
    _Alignas(64) _Atomic uint64_t claim; /* gen << 32 | chunks << 16 | next chunk of the range */
} g_range[MAX_THREADS];
static atomic_long g_done = 0;
static atomic_int g_sleeping = 0;
static __thread int t_in_task = 0;

/* Own range first, then the others' in turn. A claim is a CAS on a word
 * carrying the generation and the range's chunk count, so whether a range
 * is done is read from the word alone: a thread still on a finished call
 * never takes (or computes from) a chunk of the next one. */
static void run_chunks(uint32_t gen, long self) {
    for (long k = 0; k < g_job.nranges; k++) {
        const long r = (self + k) % g_job.nranges;
        for (;;) {
            uint64_t v = atomic_load_explicit(&g_range[r].claim, memory_order_acquire);
            if ((uint32_t)(v >> 32) != gen) return;
            const long i = (long)(v & 0xffff);
            if (i >= (long)((v >> 16) & 0xffff)) break;
            if (!atomic_compare_exchange_weak_explicit(&g_range[r].claim, &v, v + 1, memory_order_acq_rel,
                                                       memory_order_acquire))
                continue;
            const long b = r * g_job.rlen + i * g_job.chunk, e = b + g_job.chunk;
            const long re = (r + 1) * g_job.rlen < g_job.n ? (r + 1) * g_job.rlen : g_job.n;
            g_job.fn(g_job.ctx, b, e < re ? e : re);
            atomic_fetch_add_explicit(&g_done, 1, memory_order_acq_rel);
        }
    }
}

static int g_pin_cpu[MAX_THREADS];
static int g_pin = 0; /* pin.h */

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void *worker(void *arg) {
    const long self = (long)arg; /* pinned by start(), before any call can re-pin it (pin.h) */
    uint32_t seen = 0; /* workers start before the first job (pthread_once) */
    t_in_task = 1;
    for (;;) {
        uint32_t gen;
        int spins = 0;
        const uint64_t t0 = now_ns();
        while ((gen = (uint32_t)atomic_load_explicit(&g_generation, memory_order_acquire)) == seen) {
            if ((++spins & (SPIN_YIELD_EVERY - 1)) != 0 || now_ns() - t0 < SPIN_NS) {
                /* a yield now and then (with a look at the clock): where the caller shares this worker's CPU
                 * (the scheduler put it there), the spin gives it the CPU. With
                 * pause alone, efficientnet (avx2 build, 2 threads, Intel Xeon
                 * family 6 model 167) ran at 0.18 or 0.33 ms from one process to
                 * the next; with the yields 0.17 in three of three, and make
                 * bench's MLP and ResNet-18 kept their ratios (0.89x, 0.92x) */
                if ((spins & (SPIN_YIELD_EVERY - 1)) == 0) sched_yield();
                else CPU_RELAX();
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
        if (self < tcc_cpu_num_threads()) run_chunks(gen, self); /* a limit leaves the others idle */
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
    g_pin = tcc_pin_plan(n, g_pin_cpu);
    for (long i = 1; i < n; i++) {
        pthread_create(&g_workers[i], NULL, worker, (void *)i);
        if (g_pin) tcc_pin_thread(g_workers[i], g_pin_cpu[i]);
    }
}

int tcc_cpu_num_threads(void) {
    pthread_once(&g_once, start);
    return (g_limit > 0 && g_limit < g_nthreads) ? g_limit : g_nthreads;
}

void tcc_cpu_set_num_threads(int n) {
    pthread_once(&g_once, start);
    g_limit = n;
}

/* The threads a parallel_for called here now would use: 1 inside a task or
 * an inline section (conv_pwdw8.c sizes its items by it). */
__attribute__((visibility("hidden"))) int cv_pool_width(void) { return t_in_task ? 1 : tcc_cpu_num_threads(); }

int tcc_cpu_set_inline(int on) {
    const int was = t_in_task;
    t_in_task = on;
    return was;
}

void tcc_cpu_parallel_for(long n, long grain, tcc_task_fn fn, void *ctx) {
    if (n <= 0) return;
    int nt = tcc_cpu_num_threads();
    if (grain < 1) grain = 1;
    long nranges = (n + grain - 1) / grain;
    if (nt <= 1 || nranges <= 1 || t_in_task) {
        fn(ctx, 0, n);
        return;
    }
    if (nranges > nt) nranges = nt;
    pthread_mutex_lock(&g_call_mu);
    if (g_pin) tcc_pin_follow_caller(g_nthreads, g_pin_cpu, g_workers);
    g_job.fn = fn;
    g_job.ctx = ctx;
    g_job.n = n;
    g_job.rlen = (n + nranges - 1) / nranges;
    g_job.nranges = nranges = (n + g_job.rlen - 1) / g_job.rlen;
    g_job.chunk = (g_job.rlen + CHUNKS_PER_RANGE - 1) / CHUNKS_PER_RANGE;
    if (g_job.chunk < grain) g_job.chunk = grain;
    atomic_store_explicit(&g_done, 0, memory_order_relaxed);
    uint32_t gen = (uint32_t)atomic_load(&g_generation) + 1;
    if (gen == 0) gen = 1; /* 0 is the workers' initial "seen" */
    /* every word, not just this call's ranges (the others get no chunks): a
     * thread still on the last call may pick a range by its count */
    long nchunks = 0;
    for (long r = 0; r < g_nthreads; r++) {
        const long len = r >= nranges ? 0 : (r + 1) * g_job.rlen < n ? g_job.rlen : n - r * g_job.rlen;
        const long nc = (len + g_job.chunk - 1) / g_job.chunk;
        nchunks += nc;
        atomic_store_explicit(&g_range[r].claim, (uint64_t)gen << 32 | (uint64_t)nc << 16, memory_order_release);
    }
    atomic_store(&g_generation, gen); /* seq_cst: ordered before the g_sleeping load (Dekker) */
    if (atomic_load(&g_sleeping)) {
        pthread_mutex_lock(&g_mu);
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
    }
    t_in_task = 1;
    run_chunks(gen, 0);
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
