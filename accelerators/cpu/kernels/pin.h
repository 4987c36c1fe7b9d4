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

static inline void tcc_pin_thread(pthread_t t, int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(t, sizeof one, &one);
}

/* Called by the caller at each parallel call (cpus[0]: the CPU left for it).
 * The caller is free to move, and it does when it wakes from a sleep: the
 * scheduler may put it on a worker's CPU, which the pinned worker then
 * shares with it while the caller's own CPU idles. On the 2-core Zen 4
 * (family 25 model 17) that lasted seconds: a 14x14 pointwise-depthwise
 * pair ran at 127 us a call instead of 67, its items split 1:13 between
 * the CPUs. That worker moves to the CPU the caller left (one
 * pthread_setaffinity_np; sched_getcpu reads the rseq area, no syscall). */
static inline void tcc_pin_follow_caller(int n, int *cpus, const pthread_t *workers) {
    const int cpu = sched_getcpu();
    if (cpu < 0 || cpu == cpus[0]) return;
    for (int i = 1; i < n; i++)
        if (cpus[i] == cpu) {
            cpus[i] = cpus[0];
            cpus[0] = cpu;
            tcc_pin_thread(workers[i], cpus[i]);
            return;
        }
}
#endif
