/* 2-D convolution, NCHW / OIHW: depthwise convolutions run a direct kernel
 * (one channel plane per task, padded once, vectorized along the output
 * row); everything else is im2col (skipped for 1x1 stride-1 unpadded
 * convolutions, whose input already is the GEMM operand) and one GEMM per
 * image and group, with bias, residual and activation fused into the GEMM's
 * epilogue. */
#include <stdlib.h>
#include <string.h>

#include "tcc_cpu.h"

void tcc_cpu_epilogue(const tcc_epilogue *ep, float *C, long ldc, long N, long r0, long r1, long c0, long c1);
void tcc_cpu_blas(int ta, int tb, long M, long N, long K, float alpha, const float *A, long lda, const float *B,
                  long ldb, float *C, long ldc);

/* A per-thread buffer that only grows (pool threads live for the process). */
static float *tls_buffer(size_t n) {
    static __thread float *buf = NULL;
    static __thread size_t cap = 0;
    if (n > cap) {
        free(buf);
        cap = n + n / 4;
        buf = aligned_alloc(64, (cap * sizeof(float) + 63) / 64 * 64);
    }
    return buf;
}

static inline float conv_act(float v, int act, float a0, float a1);

/* Output-transposed GEMM: OpenBLAS runs Y^T[P, M] = B^T[P, K] @ W^T[K, M]
 * (many rows, few columns: its fast shape for convolutions whose output
 * planes are larger than their channel count, measured 1.5-2x faster than
 * Y = W @ B there), one tile of output pixels per task, and the transpose
 * back to NCHW applies the epilogue while the tile is in cache. */
typedef struct {
    const float *B, *W;
    float *Y;
    const tcc_epilogue *ep;
    long M, K, P, tile;
} convt_job;

static void convt_task(void *arg, long b, long e) {
    convt_job *j = arg;
    const long M = j->M, P = j->P;
    for (long t = b; t < e; t++) {
        long p0 = t * j->tile, p1 = p0 + j->tile < P ? p0 + j->tile : P, np = p1 - p0;
        if (np <= 0) continue;
        float *buf = tls_buffer((size_t)np * M);
        tcc_cpu_blas(1, 1, np, M, j->K, 1.f, j->B + p0, P, j->W, j->K, buf, M);
        const tcc_epilogue *ep = j->ep;
        const int act = ep ? ep->act : TCC_ACT_NONE;
        const float a0 = ep ? ep->a0 : 0.f, a1 = ep ? ep->a1 : 0.f;
        for (long m = 0; m < M; m++) {
            float *y = j->Y + m * P + p0;
            const float bias = (ep && ep->bias) ? ep->bias[m] * ep->bias_scale : 0.f;
            const float *res = (ep && ep->residual) ? ep->residual + m * P + p0 : NULL;
            const float *src = buf + m;
            if (res) {
                for (long i = 0; i < np; i++) y[i] = conv_act(src[i * M] + bias + res[i], act, a0, a1);
            } else {
                for (long i = 0; i < np; i++) y[i] = conv_act(src[i * M] + bias, act, a0, a1);
            }
        }
    }
}


static int is_pointwise(const tcc_conv_params *p) {
    return p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->pt == 0 && p->pl == 0 && p->pb == 0 &&
           p->pr == 0 && p->oh == p->h && p->ow == p->w;
}

static int is_depthwise(const tcc_conv_params *p) { return p->group == p->c && p->m == p->c && p->group > 1; }

size_t tcc_cpu_conv2d_scratch(const tcc_conv_params *p) {
    if (is_pointwise(p) || is_depthwise(p)) return 0;
    return (size_t)(p->c / p->group) * p->kh * p->kw * p->oh * p->ow;
}

typedef struct {
    const tcc_conv_params *p;
    const float *x; /* one image, group's first channel */
    float *col;
} im2col_job;

static void im2col_task(void *arg, long b, long e) {
    im2col_job *j = arg;
    const tcc_conv_params *p = j->p;
    const long OHW = p->oh * p->ow;
    for (long r = b; r < e; r++) {
        long c = r / (p->kh * p->kw), ij = r % (p->kh * p->kw), ki = ij / p->kw, kj = ij % p->kw;
        const float *src = j->x + c * p->h * p->w;
        float *dst = j->col + r * OHW;
        /* valid output columns for this kj: 0 <= ow*sw - pl + kj*dw < w */
        long off = kj * p->dw - p->pl;
        long lo = off >= 0 ? 0 : (-off + p->sw - 1) / p->sw;
        long hi = (p->w - off + p->sw - 1) / p->sw;
        if (hi > p->ow) hi = p->ow;
        if (hi < lo) hi = lo;
        for (long oh = 0; oh < p->oh; oh++) {
            long ih = oh * p->sh - p->pt + ki * p->dh;
            float *d = dst + oh * p->ow;
            if (ih < 0 || ih >= p->h) {
                memset(d, 0, p->ow * sizeof(float));
                continue;
            }
            const float *s = src + ih * p->w + off;
            for (long ow = 0; ow < lo; ow++) d[ow] = 0.f;
            if (p->sw == 1) {
                memcpy(d + lo, s + lo, (hi - lo) * sizeof(float));
            } else {
                for (long ow = lo; ow < hi; ow++) d[ow] = s[ow * p->sw];
            }
            for (long ow = hi; ow < p->ow; ow++) d[ow] = 0.f;
        }
    }
}

typedef struct {
    const tcc_conv_params *p;
    const float *x, *w;
    float *y;
    const tcc_epilogue *ep;
} dw_job;

static void dw_task(void *arg, long b, long e) {
    dw_job *j = arg;
    const tcc_conv_params *p = j->p;
    const long Hp = p->h + p->pt + p->pb, Wp = p->w + p->pl + p->pr;
    /* rows of the padded plane actually read may exceed Hp when strides do
     * not divide evenly; size for the furthest read. */
    long needh = (p->oh - 1) * p->sh + (p->kh - 1) * p->dh + 1, needw = (p->ow - 1) * p->sw + (p->kw - 1) * p->dw + 1;
    long PH = Hp > needh ? Hp : needh, PW = Wp > needw ? Wp : needw;
    float *pad = aligned_alloc(64, ((PH * PW * sizeof(float)) + 63) / 64 * 64);
    const long OHW = p->oh * p->ow;
    for (long pc = b; pc < e; pc++) {
        long c = pc % p->c;
        const float *src = j->x + pc * p->h * p->w;
        memset(pad, 0, PH * PW * sizeof(float));
        for (long i = 0; i < p->h; i++) memcpy(pad + (i + p->pt) * PW + p->pl, src + i * p->w, p->w * sizeof(float));
        const float *wc = j->w + c * p->kh * p->kw;
        float *yc = j->y + pc * OHW;
        for (long oh = 0; oh < p->oh; oh++) {
            float *yr = yc + oh * p->ow;
            for (long ow = 0; ow < p->ow; ow++) yr[ow] = 0.f;
            for (long ki = 0; ki < p->kh; ki++) {
                const float *row = pad + (oh * p->sh + ki * p->dh) * PW;
                for (long kj = 0; kj < p->kw; kj++) {
                    const float wv = wc[ki * p->kw + kj];
                    const float *s = row + kj * p->dw;
                    if (p->sw == 1) {
                        for (long ow = 0; ow < p->ow; ow++) yr[ow] += wv * s[ow];
                    } else if (p->sw == 2) {
                        for (long ow = 0; ow < p->ow; ow++) yr[ow] += wv * s[2 * ow];
                    } else {
                        for (long ow = 0; ow < p->ow; ow++) yr[ow] += wv * s[ow * p->sw];
                    }
                }
            }
        }
        if (j->ep) {
            tcc_epilogue ep = *j->ep;
            if (ep.bias) {
                ep.bias += c;
                ep.bias_mode = 4;
            }
            if (ep.residual) ep.residual += pc * OHW;
            tcc_cpu_epilogue(&ep, yc, OHW, OHW, 0, 1, 0, OHW);
        }
    }
    free(pad);
}

void tcc_cpu_conv2d(const tcc_conv_params *p, const float *x, const float *w, float *y, float *scratch,
                    const tcc_epilogue *ep) {
    if (is_depthwise(p)) {
        dw_job j = {p, x, w, y, ep};
        tcc_cpu_parallel_for(p->n * p->c, 1, dw_task, &j);
        return;
    }
    const long G = p->group, Cg = p->c / G, Mg = p->m / G, K = Cg * p->kh * p->kw, OHW = p->oh * p->ow;
    const int pw = is_pointwise(p);
    for (long n = 0; n < p->n; n++) {
        for (long g = 0; g < G; g++) {
            const float *xg = x + (n * p->c + g * Cg) * p->h * p->w;
            const float *B = xg;
            if (!pw) {
                im2col_job j = {p, xg, scratch};
                tcc_cpu_parallel_for(K, 4, im2col_task, &j);
                B = scratch;
            }
            float *yg = y + (n * p->m + g * Mg) * OHW;
            tcc_epilogue e2, *pe = NULL;
            if (ep) {
                e2 = *ep;
                if (e2.bias) e2.bias += g * Mg;
                if (e2.residual) e2.residual += (n * p->m + g * Mg) * OHW;
                pe = &e2;
            }
            if (OHW >= 2 * Mg && Mg >= 8 && (!pe || pe->act <= TCC_ACT_CLIP || pe->act == TCC_ACT_LEAKY)) {
                int nt = tcc_cpu_num_threads();
                long tile = ((OHW + nt - 1) / nt + 15) / 16 * 16;
                if (tile > 2048) tile = 2048;
                convt_job cj = {B, w + g * Mg * K, yg, pe, Mg, K, OHW, tile};
                tcc_cpu_parallel_for((OHW + tile - 1) / tile, 1, convt_task, &cj);
            } else {
                tcc_cpu_gemm(0, 0, Mg, OHW, K, 1.f, w + g * Mg * K, K, B, OHW, yg, OHW, pe);
            }
        }
    }
}

static inline float conv_act(float v, int act, float a0, float a1) {
    if (act == TCC_ACT_RELU) return v > 0.f ? v : 0.f;
    if (act == TCC_ACT_CLIP) return v < a0 ? a0 : (v > a1 ? a1 : v);
    if (act == TCC_ACT_LEAKY) return v >= 0.f ? v : v * a0;
    return v;
}
