/* Pooling over NCHW planes, one plane per task. */
#include <float.h>

#include "tcc_cpu.h"

typedef struct {
    const tcc_pool_params *p;
    const float *x;
    float *y;
    int avg;
} pool_job;

static void pool_task(void *arg, long b, long e) {
    pool_job *j = arg;
    const tcc_pool_params *p = j->p;
    for (long pc = b; pc < e; pc++) {
        const float *src = j->x + pc * p->h * p->w;
        float *dst = j->y + pc * p->oh * p->ow;
        for (long oh = 0; oh < p->oh; oh++) {
            long h0 = oh * p->sh - p->pt;
            for (long ow = 0; ow < p->ow; ow++) {
                long w0 = ow * p->sw - p->pl;
                float acc = j->avg ? 0.f : -FLT_MAX;
                int any = 0;
                long cnt = 0;
                for (long i = 0; i < p->kh; i++) {
                    long ih = h0 + i * p->dh;
                    if (ih < 0 || ih >= p->h) continue;
                    for (long k = 0; k < p->kw; k++) {
                        long iw = w0 + k * p->dw;
                        if (iw < 0 || iw >= p->w) continue;
                        float v = src[ih * p->w + iw];
                        if (j->avg) acc += v;
                        else if (v > acc || (!any && v != v)) acc = v;
                        else if (v != v) acc = v;
                        any = 1;
                        cnt++;
                    }
                }
                if (j->avg) {
                    long div = cnt;
                    if (p->count_include_pad) {
                        /* window clipped to the padded input (ceil_mode windows may pass it) */
                        long hs = h0, he = h0 + (p->kh - 1) * p->dh + 1, ws = w0, we = w0 + (p->kw - 1) * p->dw + 1;
                        if (he > p->h + p->pb) he = p->h + p->pb;
                        if (we > p->w + p->pr) we = p->w + p->pr;
                        div = ((he - hs + p->dh - 1) / p->dh) * ((we - ws + p->dw - 1) / p->dw);
                    }
                    dst[oh * p->ow + ow] = div > 0 ? acc / (float)div : 0.f;
                } else {
                    dst[oh * p->ow + ow] = acc;
                }
            }
        }
    }
}

void tcc_cpu_maxpool2d(const tcc_pool_params *p, const float *x, float *y) {
    pool_job j = {p, x, y, 0};
    tcc_cpu_parallel_for(p->n * p->c, 1, pool_task, &j);
}

void tcc_cpu_avgpool2d(const tcc_pool_params *p, const float *x, float *y) {
    pool_job j = {p, x, y, 1};
    tcc_cpu_parallel_for(p->n * p->c, 1, pool_task, &j);
}

typedef struct {
    long hw;
    const float *x;
    float *y;
} gap_job;

static void gap_task(void *arg, long b, long e) {
    gap_job *j = arg;
    for (long i = b; i < e; i++) {
        const float *s = j->x + i * j->hw;
        float acc = 0.f;
        for (long k = 0; k < j->hw; k++) acc += s[k];
        j->y[i] = acc / (float)j->hw;
    }
}

void tcc_cpu_global_avgpool(long planes, long hw, const float *x, float *y) {
    gap_job j = {hw, x, y};
    tcc_cpu_parallel_for(planes, 16, gap_task, &j);
}
