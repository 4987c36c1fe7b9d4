/* Data movement: parallel copy and N-d transpose (blocked over the last two
 * output dimensions' source strides by iterating the output in order). */
#include <string.h>

#include "tcc_cpu.h"

typedef struct {
    float *dst;
    const float *src;
} copy_job;

static void copy_task(void *arg, long b, long e) {
    copy_job *j = arg;
    memcpy(j->dst + b, j->src + b, (e - b) * sizeof(float));
}

void tcc_cpu_copy(float *dst, const float *src, long n) {
    if (dst == src) return;
    copy_job j = {dst, src};
    tcc_cpu_parallel_for(n, 1 << 16, copy_task, &j);
}

typedef struct {
    int rank;
    long oshape[8], istride[8]; /* output shape, input stride of each output dim */
    const float *src;
    float *dst;
    long inner; /* product of the output's last dim */
} tr_job;

static void tr_task(void *arg, long b, long e) {
    tr_job *j = arg;
    const int r = j->rank;
    const long last = j->oshape[r - 1], ls = j->istride[r - 1];
    for (long row = b; row < e; row++) {
        long rem = row, off = 0;
        for (int d = r - 2; d >= 0; d--) {
            long i = rem % j->oshape[d];
            rem /= j->oshape[d];
            off += i * j->istride[d];
        }
        const float *s = j->src + off;
        float *o = j->dst + row * last;
        if (ls == 1) memcpy(o, s, last * sizeof(float));
        else for (long k = 0; k < last; k++) o[k] = s[k * ls];
    }
}

void tcc_cpu_transpose(int rank, const long *in_shape, const long *perm, const float *src, float *dst) {
    tr_job j;
    long istr[8], s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        istr[d] = s;
        s *= in_shape[d];
    }
    j.rank = rank;
    long rows = 1;
    for (int d = 0; d < rank; d++) {
        j.oshape[d] = in_shape[perm[d]];
        j.istride[d] = istr[perm[d]];
        if (d < rank - 1) rows *= j.oshape[d];
    }
    j.src = src;
    j.dst = dst;
    if (rank == 0) {
        dst[0] = src[0];
        return;
    }
    tcc_cpu_parallel_for(rows, 64, tr_task, &j);
}
