/* Softmax, LogSoftmax and LayerNormalization: one pass over each row with
 * vectorizable exp (mathfun.h), rows split across the pool. */
#include <math.h>
#include <float.h>
#include <string.h>

#include "conv_vec.h"
#include "tcc_cpu.h"
#include "mathfun.h"

float tcc_cpu_expf(float x) { return tcc_exp_(x); }

typedef struct {
    long axis, inner;
    const float *x;
    float *y;
    int log;
    const float *scale, *bias;
    float eps;
} row_job;

/* Row reductions in explicit vectors: the compiler keeps float sums and
 * maxima in source order (no -ffast-math), i.e. scalar. Four vectors in
 * flight: with one, each add waited on the last (3-5 cycles per vector), and
 * a 1024-float row's max, sum and variance passes took more than its
 * exponentials (perf, AVX2 EPYC: Softmax + LayerNormalization 1.5x the host
 * path's time). */
static inline float row_max(const float *x, long n) {
    vf m0 = v_ld(x), m1 = m0, m2 = m0, m3 = m0;
    long k = VL;
    for (; k + 4 * VL <= n; k += 4 * VL) {
        m0 = v_max(m0, v_ld(x + k));
        m1 = v_max(m1, v_ld(x + k + VL));
        m2 = v_max(m2, v_ld(x + k + 2 * VL));
        m3 = v_max(m3, v_ld(x + k + 3 * VL));
    }
    for (; k + VL <= n; k += VL) m0 = v_max(m0, v_ld(x + k));
    const vf mv = v_max(v_max(m0, m1), v_max(m2, m3));
    float m = mv[0];
    for (int l = 1; l < VL; l++) m = mv[l] > m ? mv[l] : m;
    for (; k < n; k++) m = x[k] > m ? x[k] : m;
    return m;
}

/* Any row length (row_max needs one full vector). */
static inline float row_max_any(const float *x, long n) {
    if (n >= VL) return row_max(x, n);
    float m = -INFINITY;
    for (long k = 0; k < n; k++) m = x[k] > m ? x[k] : m;
    return m;
}

/* sum of (x[k] * mul - mean)^2 over a row, four vectors in flight */
static inline float row_sq_dev(const float *x, long C, float mul, float mean) {
    vf v0 = (vf){0}, v1 = v0, v2 = v0, v3 = v0;
    long k = 0;
    for (; k + 4 * VL <= C; k += 4 * VL) {
        const vf d0 = v_ld(x + k) * mul - mean, d1 = v_ld(x + k + VL) * mul - mean;
        const vf d2 = v_ld(x + k + 2 * VL) * mul - mean, d3 = v_ld(x + k + 3 * VL) * mul - mean;
        v0 += d0 * d0;
        v1 += d1 * d1;
        v2 += d2 * d2;
        v3 += d3 * d3;
    }
    for (; k + VL <= C; k += VL) {
        const vf d = v_ld(x + k) * mul - mean;
        v0 += d * d;
    }
    const vf vs = (v0 + v1) + (v2 + v3);
    float v = 0.f;
    for (int l = 0; l < VL; l++) v += vs[l];
    for (; k < C; k++) v += (x[k] * mul - mean) * (x[k] * mul - mean);
    return v;
}

/* LayerNormalization's statistics of one row: the mean, and 1/std in *rstd
 * (x * 1.f is exact: the same sums as without the factor). */
static inline float row_mean_rstd(const float *x, long C, float eps, float *rstd) {
    const float mean = cv_sum(x, C) / (float)C;
    *rstd = 1.f / sqrtf(row_sq_dev(x, C, 1.f, mean) / (float)C + eps);
    return mean;
}

#if defined(__AVX512F__)
#define V_STREAM(p, v) _mm512_stream_ps(p, (__m512)(v))
#elif defined(__AVX2__)
#define V_STREAM(p, v) _mm256_stream_ps(p, (__m256)(v))
#endif

/* y = (x * mul - mean) * rstd * scale (+ bias) (mul: the softmax's 1 / sum
 * when x holds its exponentials, else 1: x * 1.f is exact); non-temporal
 * stores (AVX-512, AVX2) when `stream`, from the first vector-aligned element
 * of y (numpy aligns its arrays to 16 bytes only). */
static inline void row_affine(float *y, const float *x, long C, float mul, float mean, float rstd,
                              const float *scale, const float *bias, int stream) {
    long k = 0;
#if defined(V_STREAM)
    if (stream && ((unsigned long)y & 3) == 0) {
        for (; k < C && ((unsigned long)(y + k) & (VL * 4 - 1)); k++)
            y[k] = (x[k] * mul - mean) * rstd * scale[k] + (bias ? bias[k] : 0.f);
        /* (x * mul - mean) * (rstd * scale) + bias: three instructions
         * (the last an FMA), one fewer than in source order */
        if (bias)
            for (; k + VL <= C; k += VL)
                V_STREAM(y + k, (v_ld(x + k) * mul - mean) * (rstd * v_ld(scale + k)) + v_ld(bias + k));
        else
            for (; k + VL <= C; k += VL) V_STREAM(y + k, (v_ld(x + k) * mul - mean) * (rstd * v_ld(scale + k)));
    }
#else
    (void)stream;
#endif
    if (bias)
        for (; k < C; k++) y[k] = (x[k] * mul - mean) * rstd * scale[k] + bias[k];
    else
        for (; k < C; k++) y[k] = (x[k] * mul - mean) * rstd * scale[k];
}

static void softmax_rows(void *arg, long b, long e) {
    row_job *j = arg;
    const long A = j->axis;
    for (long r = b; r < e; r++) {
        const float *x = j->x + r * A;
        float *y = j->y + r * A;
        const float m = row_max_any(x, A);
        if (j->log) { /* y may be x: nothing stored before the sum */
            /* lane-wise partial sums: one running float sum over a long row
             * drifts by ~sqrt(A) ulps, which log(s) turns into absolute error */
            vf acc = (vf){0};
            long k = 0;
            for (; k + VL <= A; k += VL) {
                vf t;
                for (int l = 0; l < VL; l++) t[l] = tcc_exp_(x[k + l] - m);
                acc += t;
            }
            float s = 0.f;
            for (; k < A; k++) s += tcc_exp_(x[k] - m);
            for (int l = 0; l < VL; l++) s += acc[l];
            const float ls = logf(s);
            for (long k = 0; k < A; k++) y[k] = x[k] - m - ls;
            continue;
        }
        /* exponentials stored first (a loop the compiler vectorizes), summed after */
        for (long k = 0; k < A; k++) y[k] = tcc_exp_(x[k] - m);
        const float inv = 1.f / cv_sum(y, A);
        for (long k = 0; k < A; k++) y[k] *= inv;
    }
}

/* softmax along a non-innermost axis: tasks over `outer`, vectors along inner */
static void softmax_strided(void *arg, long b, long e) {
    row_job *j = arg;
    const long A = j->axis, I = j->inner;
    for (long o = b; o < e; o++) {
        const float *x = j->x + o * A * I;
        float *y = j->y + o * A * I;
        for (long i = 0; i < I; i++) {
            float m = -INFINITY, s = 0.f;
            for (long k = 0; k < A; k++) m = x[k * I + i] > m ? x[k * I + i] : m;
            for (long k = 0; k < A; k++) s += tcc_exp_(x[k * I + i] - m);
            if (j->log) {
                float ls = logf(s);
                for (long k = 0; k < A; k++) y[k * I + i] = x[k * I + i] - m - ls;
            } else {
                float inv = 1.f / s;
                for (long k = 0; k < A; k++) y[k * I + i] = tcc_exp_(x[k * I + i] - m) * inv;
            }
        }
    }
}

void tcc_cpu_softmax(long outer, long axis, long inner, const float *x, float *y, int log) {
    row_job j = {axis, inner, x, y, log, NULL, NULL, 0.f};
    if (inner == 1)
        tcc_cpu_parallel_for(outer, 4096 / (axis + 1) + 1, softmax_rows, &j);
    else
        tcc_cpu_parallel_for(outer, 1, softmax_strided, &j);
}

static void layernorm_rows(void *arg, long b, long e) {
    row_job *j = arg;
    const long C = j->axis;
    for (long r = b; r < e; r++) {
        const float *x = j->x + r * C;
        float *y = j->y + r * C;
        float rstd;
        const float mean = row_mean_rstd(x, C, j->eps, &rstd);
        row_affine(y, x, C, 1.f, mean, rstd, j->scale, j->bias, 0);
    }
}

void tcc_cpu_layernorm(long rows, long cols, const float *x, const float *scale, const float *bias, float eps,
                       float *y) {
    row_job j = {cols, 1, x, y, 0, scale, bias, eps};
    tcc_cpu_parallel_for(rows, 4096 / (cols + 1) + 1, layernorm_rows, &j);
}

/* LayerNormalization of a Softmax over the same rows in one pass: the
 * probabilities stay in a row buffer (L1), so the tensor is read once and
 * written once instead of twice each. Large outputs are written with
 * non-temporal stores on AVX-512 and AVX2 (no read for ownership of lines
 * that are only written), as the host path's stream-outputs does. */
typedef struct {
    long C;
    const float *x, *scale, *bias;
    float *y;
    float eps;
    int stream;
} smln_job;

/* Four passes over a row, three of them over the L1 row buffer: max; the
 * exponentials t (stored) and their sum s, in vectors; the variance of
 * p = t / s around its mean, which is sum(p) / C = 1 / C (up to rounding:
 * no pass for it); and y = (t / s - mean) * rstd * scale + bias. The
 * softmax's normalizing pass and LayerNormalization's mean pass are folded
 * away (seven passes before), and the sum into the exponentials' pass, in
 * vectors (a pass of its own before: the bench model's 8192 x 1024 went
 * 0.51x -> 0.46-0.48x onnxruntime's time at 1 thread, 0.48x -> 0.42-0.44x
 * at 2; Zen 2, AVX2). The variance stays a pass around the mean: from
 * sums of t and t^2 (or of t - t[0] and its squares) taken in the same
 * pass, cancellation cost near-uniform (or peaked) rows up to a percent of
 * their variance, visible against float64 at eps = 1e-8 (or 1e-5). */
static void softmax_layernorm_rows(void *arg, long b, long e) {
    const smln_job *j = arg;
    const long C = j->C;
    float *t = cv_tls_buffer(1, (size_t)C + VL);
    for (long r = b; r < e; r++) {
        const float *x = j->x + r * C;
        float *y = j->y + r * C;
        const float m = row_max_any(x, C);
        /* the next row is prefetched while this one's exponentials are
         * computed: its max pass, the only one reading memory, waited on
         * it (a quarter of the time, perf, 1 thread, AVX2 EPYC) */
        const float *nx = r + 1 < e ? x + C : x;
        const vf mv = (vf){0} + m;
        vf s0 = (vf){0}, s1 = s0;
        long k = 0;
        for (; k + 2 * VL <= C; k += 2 * VL) {
            __builtin_prefetch(nx + k);
#if VL == 16
            __builtin_prefetch(nx + k + 16); /* a line per prefetch: 2 VL floats are 2 lines here */
#endif
            const vf e0 = cv_exp_nonpos_v(v_ld(x + k) - mv), e1 = cv_exp_nonpos_v(v_ld(x + k + VL) - mv);
            v_st(t + k, e0);
            v_st(t + k + VL, e1);
            s0 += e0;
            s1 += e1;
        }
        const vf sv = s0 + s1;
        float s = 0.f;
        for (int l = 0; l < VL; l++) s += sv[l];
        for (; k < C; k++) {
            t[k] = tcc_exp_(x[k] - m);
            s += t[k];
        }
        const float inv = 1.f / s, mean = 1.f / (float)C;
        const float var = row_sq_dev(t, C, inv, mean);
        const float rstd = 1.f / sqrtf(var / (float)C + j->eps);
        row_affine(y, t, C, inv, mean, rstd, j->scale, j->bias, j->stream);
    }
#if defined(V_STREAM)
    if (j->stream) _mm_sfence();
#endif
}

void tcc_cpu_softmax_layernorm(long rows, long cols, const float *x, const float *scale, const float *bias, float eps,
                               float *y) {
    /* past 8 MB the output would only evict what is still to be read */
    smln_job j = {cols, x, scale, bias, y, eps, (double)rows * cols * sizeof(float) > 8e6 && x != y};
    tcc_cpu_parallel_for(rows, 4096 / (cols + 1) + 1, softmax_layernorm_rows, &j);
}
