/* Pinning a pool's workers, for both thread pools (this library's,
 * threadpool.c, and the host runtime's, runtime/native/threadpool.c): worker
 * i runs on the i-th CPU of the process's set when the pool has one thread
 * per CPU of it (the default), the caller left free (the scheduler puts it
 * on the CPU the workers leave). Unpinned, a worker woken after ~50 ms idle
 * was placed on the caller's CPU: on the 2-core Xeon (family 6 model 167)
 * the next ~15 ms of calls ran at one thread's speed (the MLP of `make
 * bench` 1.58 ms a call after each pause, 0.82 pinned, 0.83 called back to
 * back). TCC_PIN_THREADS=0: never pinned. */
#ifndef TCC_PIN_H
#define TCC_PIN_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

/* cpus[i]: the CPU of worker i (n entries); returns 0 where the pool is not pinned */
static inline int tcc_pin_plan(int n, int *cpus) {
    const char *env = getenv("TCC_PIN_THREADS");
    cpu_set_t set;
    if ((env && env[0] == '0') || n < 2 || sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != n)
        return 0;
    int k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < n; c++)
        if (CPU_ISSET(c, &set)) cpus[k++] = c;
    return k == n;
}

static inline void tcc_pin_self(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
}
#endif
