/* The host runtime's thread pool (threadpool.c), as its kernels call it:
 * body(begin, end, ctx) over shares of [0, n). */
#ifndef TCC_RT_POOL_H
#define TCC_RT_POOL_H
#include <stdint.h>

typedef void (*tcc_body_fn)(int64_t begin, int64_t end, void *ctx);
void tcc_parallel_for(int64_t n, tcc_body_fn body, void *ctx);
int tcc_num_threads(void);

#endif
