/* Pooling over NCHW planes.
 *
 * MaxPool / AveragePool are separable: the window's max (or sum) is the max
 * (sum) along the row of the per-column max (sum) down the window's valid
 * input rows. Per output row, the kernel
 *   1. reduces the window's valid input rows into one row buffer, in vectors,
 *      with the left/right padding (and anything a ceil_mode window reads
 *      past the padded input) filled with -FLT_MAX (max) or 0 (sum);
 *   2. for strides > 1, splits that row into phase rows P_r[j] = row[j*sw + r]
 *      (AVX-512/AVX2: two-vector deinterleave for stride 2), so tap k of
 *      output ow reads phase (k*dw) % sw at ow + (k*dw) / sw: a constant
 *      offset, i.e. one unaligned vector load per tap for VL outputs;
 *   3. sweeps the output row in vectors (masked tail); averages divide by
 *      (valid or padded-window rows) x (same for columns).
 * No bounds checks in the inner loops: borders live in the row buffer.
 * Work items are (plane, block of output rows), so a few large planes still
 * spread over the threads. As in onnxruntime (MLAS), max padding columns
 * read as -FLT_MAX and padding rows are skipped: a window of -inf inputs
 * gives -inf unless it overlaps the left/right padding (then -FLT_MAX), and
 * a window of only padding gives -FLT_MAX. */
#include <float.h>

#include "conv_vec.h"

typedef struct {
    const tcc_pool_params *p;
    const float *x;
    float *y;
    int avg;
    long rblocks, rows_per_block; /* output rows split into blocks per plane */
    long wt;                      /* row buffer width: (ow-1)*sw + (kw-1)*dw + 1 */
    long lq;                      /* phase row length (with slack for full vectors) */
    const float *coldiv;          /* avg: per output column window width (>= 1) */
} pool_job;

/* Valid rows [i0, i1) of the window starting at input row h0. */
static void window_range(long h0, long k, long d, long n, long *i0, long *i1) {
    long lo = h0 < 0 ? (-h0 + d - 1) / d : 0;
    long hi = n - h0 <= 0 ? 0 : (n - h0 + d - 1) / d;
    if (hi > k) hi = k;
    if (lo > hi) lo = hi;
    *i0 = lo;
    *i1 = hi;
}

/* Averaging divisor along one axis for the window starting at s0. */
static long axis_div(long s0, long k, long d, long n, long pad_end, int include_pad) {
    if (include_pad) {
        long e = s0 + (k - 1) * d + 1;
        if (e > n + pad_end) e = n + pad_end;
        long c = e - s0 <= 0 ? 0 : (e - s0 + d - 1) / d;
        return c;
    }
    long i0, i1;
    window_range(s0, k, d, n, &i0, &i1);
    return i1 - i0;
}

CV_INLINE void fill_row(float *d, long n, float v) {
    const vf fv = (vf){0} + v;
    long i = 0;
    for (; i + VL <= n; i += VL) v_st(d + i, fv);
    for (; i < n; i++) d[i] = v;
}

/* ev[m] = s[2m], od[m] = s[2m+1] for m < n; s holds at least 2n + 2*VL floats
 * (callers' buffers carry the slack). */
static void split2(float *ev, float *od, const float *s, long n) {
    long m = 0;
#if defined(__AVX512F__)
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (; m < n; m += VL) {
        __m512 a = _mm512_loadu_ps(s + 2 * m), b = _mm512_loadu_ps(s + 2 * m + VL);
        _mm512_storeu_ps(ev + m, _mm512_permutex2var_ps(a, ie, b));
        _mm512_storeu_ps(od + m, _mm512_permutex2var_ps(a, io, b));
    }
#elif defined(__AVX2__)
    for (; m < n; m += VL) {
        __m256 a = _mm256_loadu_ps(s + 2 * m), b = _mm256_loadu_ps(s + 2 * m + VL);
        __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xDD); /* a0 a2 b0 b2 a4 a6 b4 b6 */
        _mm256_storeu_ps(ev + m, (__m256)_mm256_permute4x64_pd((__m256d)e, 0xD8));
        _mm256_storeu_ps(od + m, (__m256)_mm256_permute4x64_pd((__m256d)o, 0xD8));
    }
#else
    for (; m < n; m++) {
        ev[m] = s[2 * m];
        od[m] = s[2 * m + 1];
    }
#endif
}

/* max(a, b) that is NaN when either is (as numpy's and the ONNX reference's
 * MaxPool, and the host path): max_ps returns its second operand when
 * either is NaN, so a plain reduction kept a NaN only from the last
 * element it read (onnxruntime's MLAS does the same). It costs the kernel
 * 5-20 % (ResNet-18's 3x3 stride-2 pool, Intel Xeon: 207 -> 226-229 us
 * with `avx512`, 206 -> 247 with `avx2` at 1 thread), ~0.1 % of the model. */
CV_INLINE vf v_maxn(vf a, vf b) {
#if defined(__AVX512F__)
    return (vf)_mm512_mask_mov_ps(_mm512_max_ps((__m512)b, (__m512)a),
                                  _mm512_cmp_ps_mask((__m512)b, (__m512)b, _CMP_UNORD_Q), (__m512)b);
#elif defined(__AVX2__)
    /* max_ps(a, b) is b when either is NaN; a NaN a then sets every bit (a
     * NaN too). Three single-uop instructions where a blendv took more:
     * ResNet-18's pool 0.262 -> 0.232 ms at 1 thread, 0.131 -> 0.115 at 2 */
    return (vf)_mm256_or_ps(_mm256_max_ps((__m256)a, (__m256)b), _mm256_cmp_ps((__m256)a, (__m256)a, _CMP_UNORD_Q));
#else
    return v_sel(b != b, b, v_sel(a != a, a, v_sel(a > b, a, b)));
#endif
}

/* dst = max/sum of the nr rows src, src + rs, ... over n columns, into d. */
CV_INLINE void vert(float *d, const float *src, long rs, long nr, long n, int avg) {
    long i = 0;
    if (avg) {
        for (; i + 2 * VL <= n; i += 2 * VL) {
            vf a = (vf){0}, b = (vf){0};
            for (long r = 0; r < nr; r++) {
                a += v_ld(src + r * rs + i);
                b += v_ld(src + r * rs + i + VL);
            }
            v_st(d + i, a);
            v_st(d + i + VL, b);
        }
        for (; i < n; i += VL) {
            int c = n - i < VL ? (int)(n - i) : VL;
            vf a = (vf){0};
            for (long r = 0; r < nr; r++) a += v_ld_n(src + r * rs + i, c);
            v_st_n(d + i, a, c);
        }
    } else {
        const vf lo = (vf){0} - FLT_MAX;
        for (; i + 2 * VL <= n; i += 2 * VL) {
            vf a = lo, b = lo;
            if (nr > 0) {
                a = v_ld(src + i);
                b = v_ld(src + i + VL);
            }
            for (long r = 1; r < nr; r++) {
                a = v_maxn(a, v_ld(src + r * rs + i));
                b = v_maxn(b, v_ld(src + r * rs + i + VL));
            }
            v_st(d + i, a);
            v_st(d + i + VL, b);
        }
        for (; i < n; i += VL) {
            int c = n - i < VL ? (int)(n - i) : VL;
            vf a = nr > 0 ? v_ld_n(src + i, c) : lo;
            for (long r = 1; r < nr; r++) a = v_maxn(a, v_ld_n(src + r * rs + i, c));
            v_st_n(d + i, a, c);
        }
    }
}

/* One output row from the phase rows: y[ow] = reduce_k ph[off[k] + ow]. */
CV_INLINE void horiz(float *y, long ow, const float *ph, const long *off, long kw, int avg, float rdiv,
                     const float *coldiv) {
    for (long o = 0; o < ow; o += VL) {
        vf a;
        if (avg) {
            a = (vf){0};
            for (long k = 0; k < kw; k++) a += v_ld(ph + off[k] + o);
        } else {
            a = v_ld(ph + off[0] + o);
            for (long k = 1; k < kw; k++) a = v_maxn(a, v_ld(ph + off[k] + o));
        }
        int c = ow - o < VL ? (int)(ow - o) : VL;
        if (avg) a = a / (v_ld(coldiv + o) * rdiv);
        if (c == VL) v_st(y + o, a);
        else v_st_n(y + o, a, c);
    }
}

CV_INLINE void horiz_k3(float *y, long ow, const float *ph, const long *off, int avg, float rdiv,
                        const float *coldiv) {
    const float *p0 = ph + off[0], *p1 = ph + off[1], *p2 = ph + off[2];
    for (long o = 0; o < ow; o += VL) {
        vf a;
        if (avg) a = v_ld(p0 + o) + v_ld(p1 + o) + v_ld(p2 + o);
        else a = v_maxn(v_maxn(v_ld(p0 + o), v_ld(p1 + o)), v_ld(p2 + o));
        int c = ow - o < VL ? (int)(ow - o) : VL;
        if (avg) a = a / (v_ld(coldiv + o) * rdiv);
        if (c == VL) v_st(y + o, a);
        else v_st_n(y + o, a, c);
    }
}

static void pool_task(void *arg, long b, long e) {
    const pool_job *j = arg;
    const tcc_pool_params *p = j->p;
    const int avg = j->avg;
    const long sw = p->sw, dw = p->dw, kw = p->kw, wt = j->wt, lq = j->lq, W = p->w, pl = p->pl;
    const float fill = avg ? 0.f : -FLT_MAX;
    /* row buffer (wt, plus slack for the whole-vector reads of the split and
     * the sweep) then sw phase rows of lq floats */
    const long rowlen = wt + sw * lq + 4 * VL;
    float *buf = cv_tls_buffer(1, (size_t)(rowlen + (sw > 1 ? sw * lq : 0)));
    float *row = buf, *phase = buf + rowlen;
    long off[64], *offp = off, *offheap = NULL;
    if (kw > 64) offp = offheap = malloc(kw * sizeof(long));
    for (long k = 0; k < kw; k++) {
        long t = k * dw;
        offp[k] = sw > 1 ? (t % sw) * lq + t / sw : t;
    }
    const float *ph = sw > 1 ? phase : row;
    /* columns [c0, c1) of the row buffer hold input columns [c0 - pl, c1 - pl) */
    long c0 = pl < wt ? pl : wt, c1 = pl + W < wt ? pl + W : wt;
    if (c1 < c0) c1 = c0;
    fill_row(row, c0, fill);
    fill_row(row + c1, rowlen - c1, fill);

    for (long it = b; it < e; it++) {
        const long pc = it / j->rblocks, rb = it % j->rblocks;
        long r0 = rb * j->rows_per_block, r1 = r0 + j->rows_per_block;
        if (r1 > p->oh) r1 = p->oh;
        const float *src = j->x + pc * p->h * W;
        float *dst = j->y + pc * p->oh * p->ow;
        for (long oh = r0; oh < r1; oh++) {
            const long h0 = oh * p->sh - p->pt;
            long i0, i1;
            window_range(h0, p->kh, p->dh, p->h, &i0, &i1);
            if (c1 > c0) {
                const float *s0 = i1 > i0 ? src + (h0 + i0 * p->dh) * W + (c0 - pl) : src;
                vert(row + c0, s0, p->dh * W, i1 - i0, c1 - c0, avg);
            }
            if (sw == 2) {
                split2(phase, phase + lq, row, lq);
            } else if (sw > 2) {
                for (long r = 0; r < sw; r++) {
                    float *d = phase + r * lq;
                    for (long m = 0; m < lq; m++) d[m] = row[m * sw + r];
                }
            }
            float rdiv = 1.f;
            if (avg) {
                long rd = axis_div(h0, p->kh, p->dh, p->h, p->pb, p->count_include_pad);
                rdiv = rd > 0 ? (float)rd : 1.f;
            }
            if (kw == 3) horiz_k3(dst + oh * p->ow, p->ow, ph, offp, avg, rdiv, j->coldiv);
            else horiz(dst + oh * p->ow, p->ow, ph, offp, kw, avg, rdiv, j->coldiv);
        }
    }
    free(offheap);
}

static void pool2d(const tcc_pool_params *p, const float *x, float *y, int avg) {
    const long planes = p->n * p->c;
    if (planes <= 0 || p->oh <= 0 || p->ow <= 0) return;
    pool_job j;
    j.p = p;
    j.x = x;
    j.y = y;
    j.avg = avg;
    j.wt = (p->ow - 1) * p->sw + (p->kw - 1) * p->dw + 1;
    /* phase row m covers row[m*sw + r]; taps reach m = ow - 1 + (kw-1)*dw/sw,
     * the vector sweep up to VL - 1 past ow */
    j.lq = (p->ow + (p->kw - 1) * p->dw / p->sw + 2 * VL) / VL * VL;
    float *coldiv = NULL;
    if (avg) {
        coldiv = malloc((size_t)(p->ow + VL) * sizeof(float));
        for (long o = 0; o < p->ow; o++) {
            long c = axis_div(o * p->sw - p->pl, p->kw, p->dw, p->w, p->pr, p->count_include_pad);
            coldiv[o] = c > 0 ? (float)c : 1.f;
        }
        for (long o = p->ow; o < p->ow + VL; o++) coldiv[o] = 1.f;
    }
    j.coldiv = coldiv;
    /* enough items for every thread: split planes into row blocks when few */
    const long nt = tcc_cpu_num_threads();
    long rb = 1;
    if (nt > 1 && planes < 4 * nt) {
        rb = (4 * nt + planes - 1) / planes;
        if (rb > p->oh) rb = p->oh;
    }
    j.rows_per_block = (p->oh + rb - 1) / rb;
    j.rblocks = (p->oh + j.rows_per_block - 1) / j.rows_per_block;
    /* grain: about 64K output-row elements of work per chunk at least */
    long per_item = j.rows_per_block * (p->kh * p->w + p->kw * p->ow);
    long grain = per_item > 0 ? 32768 / per_item : 1;
    if (grain < 1) grain = 1;
    tcc_cpu_parallel_for(planes * j.rblocks, grain, pool_task, &j);
    free(coldiv);
}

void tcc_cpu_maxpool2d(const tcc_pool_params *p, const float *x, float *y) { pool2d(p, x, y, 0); }

void tcc_cpu_avgpool2d(const tcc_pool_params *p, const float *x, float *y) { pool2d(p, x, y, 1); }

/* ---- GlobalAveragePool ----------------------------------------------------------- */
typedef struct {
    long hw;
    const float *x;
    float *y;
} gap_job;

static void gap_task(void *arg, long b, long e) {
    const gap_job *j = arg;
    const long hw = j->hw;
    for (long i = b; i < e; i++) {
        j->y[i] = cv_sum(j->x + i * hw, hw) / (float)hw;
    }
}

void tcc_cpu_global_avgpool(long planes, long hw, const float *x, float *y) {
    gap_job j = {hw, x, y};
    long grain = hw > 0 ? 16384 / hw : planes;
    if (grain < 1) grain = 1;
    tcc_cpu_parallel_for(planes, grain, gap_task, &j);
}
