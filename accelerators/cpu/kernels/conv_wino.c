/* 3x3, stride-1 convolutions (group 1) as Winograd F(2x2, 3x3) or
 * F(4x4, 3x3): each T x T block of outputs ("tile") is A^T [U (.) V] A,
 * with U = G w G^T the weights transformed at compile time
 * (codegen.pack_wino: per xi, per block of output channels, [C][rows]) and
 * V = B^T d B the tile's (T+2)^2 input patch transformed here. The NX =
 * (T+2)^2 products of U and V summed over input channels are NX independent
 * GEMMs (M x C times C x tiles): 16 multiply-adds per 4 outputs (F(2x2)) or
 * 36 per 16 (F(4x4)) and channel pair where the direct kernels do 36 and
 * 144; the rest is additions. F(4x4)'s transforms also move half as much
 * data per output; its larger constants cost ~10x F(2x2)'s rounding error,
 * still ~1e-6 of the output's scale.
 *
 * The input is packed into the phase planes (conv_vec.h) of a stride-T,
 * (T+2)^2-tap convolution over TH x TW tiles: patch element (a, b) of tile
 * (ti, tj) is at a constant offset from ti * wq + tj in one of T*T planes
 * (wq = TW + 1). Tiles are numbered ti * TW + tj, so no lane is spent on
 * the planes' last column; on AVX-512 a vector of 16 tiles is one permute
 * of a 32-float window of a plane row pair (AVX2: two permutes and a
 * blend of a 16-float window; generic: scalar gathers). A
 * panel is 32 consecutive tiles (16 when a plane has at most 16: 7x7 with
 * F(2x2), 14x14 with F(4x4)); a task transforms one panel's input for
 * all channels (it stays in L2), then runs each block of up to WR output
 * channels through the NX GEMMs (tiles in the vector lanes, weights
 * broadcast) and the output transform, which stores each run of tiles of
 * one tile row as T interleaved output rows with the epilogue.
 * Codegen chooses it on AVX-512 and AVX2 (there a vector of 8 tiles is two
 * one-source permutes of a 16-float window and a blend, and the GEMM tiles
 * are 14 rows x one vector: 14 accumulators) for planes whose tiles fill the
 * panels; the generic build carries it for artifacts compiled elsewhere. */

#include "conv_vec.h"

#define WT 32           /* tiles per panel */
#define WTN 16          /* tiles per narrow panel (planes of at most 16 tiles) */
#define WR 14           /* output channels per register tile */
/* Weight rows the first pass over a panel's vectors prefetches ahead (into
 * L1; past the end of the weights is harmless). A model's weights come from
 * L3 or memory, and the hardware prefetchers left the GEMMs waiting on them:
 * in ResNet-18 (Intel Xeon family 6 model 167, 1 thread) the 14x14 layers
 * (4.2 MB of transformed weights each) ran 1.23 -> 0.96 ms with avx512 and
 * 1.87 -> 1.64 with avx2, the 28x28 ones 0.82 -> 0.69 and 1.25 -> 1.16;
 * 8, 12, 16, 24 and 32 rows ahead tried, 24-32 best; prefetching on every
 * pass no better. */
#define WG_PF 24
/* Floats of padding between one xi's [C][wt] block of the transformed input
 * and the next. Unpadded, 64 channels x 32 tiles put the NX blocks 8 KB
 * apart: the transform's NX stores per (channel, vector) all fell in one
 * L1 set (12 ways), so lines went back to L2 between the two stores that
 * fill them. One line of padding spreads them over NX sets: ResNet-18's
 * 56x56 layers (F(4x4)), Xeon family 6 model 167, avx2, 1 thread 1.10-1.25
 * -> 1.01-1.15 ms, 2 threads 0.64-0.67 -> 0.59-0.61; the 28x28 and 14x14
 * layers 1-4 %; the model 15.2 -> 14.9 ms at 2 threads; avx512 56x56
 * 0.65-0.69 -> 0.62-0.65. Two lines no better. */
#ifndef WG_XPAD
#define WG_XPAD 16
#endif

typedef void (*wg_fn)(const float *u, long ldu, const float *v, long K, float *out);

typedef struct {
    const tcc_conv_params *p;
    const cv_layout *l;
    const float *x;  /* this image's packed input */
    float *v;        /* its transform, [panel][nx][C][wt], or NULL: each item transforms its own */
    const float *u;  /* per xi, per block of rows [m0, m1): [C][m1 - m0] */
    float *y;        /* this image's output */
    const float *res;
    const cv_ep *e;
    int T, nx;       /* tile size, transformed patch size (T + 2)^2 */
    int wt, nv;      /* tiles per panel (WT or WTN), vectors per panel */
    long C, M, th, tw, ntiles, npan, nblk, pg, ngrp, nsplit, csplit;
    long xs;         /* floats from one xi's [C][wt] to the next: C * wt plus a line (WG_XPAD) */
    unsigned long call; /* tells a thread's cached transform from an earlier call's */
} wg_job;

#define REP14(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)

/* out[i][W] = sum_k u[k * ldu + i] * v[k][W] for i < MR: rows broadcast,
 * tiles in the lanes; two vectors at a time on AVX-512 (28 accumulators),
 * one elsewhere (14 fit 16 registers). Named accumulators: GCC keeps large
 * arrays of vectors in memory. */
CV_INLINE void wg_tile(const float *u, long ldu, const float *v, long K, float *out, const int MR, const int W) {
#if defined(__AVX512F__)
    const int NVT = W / VL >= 2 ? 2 : 1;
#else
    const int NVT = 1;
#endif
    for (int v0 = 0; v0 < W / VL; v0 += NVT) {
        const float *b = v + v0 * VL, *a = u;
#define WG_DECL(i) vf a##i##0 = (vf){0}, a##i##1 = (vf){0};
        REP14(WG_DECL)
        for (long k = 0; k < K; k++, a += ldu, b += W) {
            if (v0 == 0) __builtin_prefetch(a + WG_PF * ldu, 0, 3);
            const vf b0 = v_ld(b), b1 = NVT > 1 ? v_ld(b + VL) : (vf){0};
#define WG_FMA(i)                       \
    if (MR > i) {                       \
        const float s = a[i];           \
        a##i##0 += s * b0;              \
        if (NVT > 1) a##i##1 += s * b1; \
    }
            REP14(WG_FMA)
        }
#define WG_ST(i)                                                \
    if (MR > i) {                                               \
        v_st(out + i * W + v0 * VL, a##i##0);                   \
        if (NVT > 1) v_st(out + i * W + v0 * VL + VL, a##i##1); \
    }
        REP14(WG_ST)
    }
}

#define WG_INST(R)                                                                                                \
    __attribute__((noinline)) static void wg_##R(const float *u, long ldu, const float *v, long K, float *out) {  \
        wg_tile(u, ldu, v, K, out, R, WT);                                                                         \
    }                                                                                                             \
    __attribute__((noinline)) static void wgn_##R(const float *u, long ldu, const float *v, long K, float *out) { \
        wg_tile(u, ldu, v, K, out, R, WTN);                                                                        \
    }
WG_INST(1) WG_INST(2) WG_INST(3) WG_INST(4) WG_INST(5) WG_INST(6) WG_INST(7) WG_INST(8) WG_INST(9) WG_INST(10)
WG_INST(11) WG_INST(12) WG_INST(13) WG_INST(14)
static const wg_fn WG_FNS[2][WR + 1] = {
    {NULL, wg_1, wg_2, wg_3, wg_4, wg_5, wg_6, wg_7, wg_8, wg_9, wg_10, wg_11, wg_12, wg_13, wg_14},
    {NULL, wgn_1, wgn_2, wgn_3, wgn_4, wgn_5, wgn_6, wgn_7, wgn_8, wgn_9, wgn_10, wgn_11, wgn_12, wgn_13, wgn_14}};

/* Where a vector of tiles from t0 reads: plane index q0 of its first tile
 * and each lane's distance from it (< 32: a vector spans at most 15 row
 * ends); lanes past the last tile repeat it. */
typedef struct {
    long q0;
#if defined(__AVX512F__)
    __m512i idx;
#elif defined(__AVX2__)
    __m256i idx, hi; /* lane distances (< 16: 8 tiles span at most 7 row ends), and which are >= 8 */
#else
    int idx[VL];
#endif
} wg_lanes;

static void wg_lanes_at(const wg_job *j, long t0, wg_lanes *ln) {
    const long tw = j->tw, wq = j->l->wq;
    if (t0 >= j->ntiles) t0 = j->ntiles - 1; /* a vector wholly past the end: reads stay in the buffer */
    ln->q0 = t0 / tw * wq + t0 % tw;
    int idx[VL];
    for (int l = 0; l < VL; l++) {
        const long t = t0 + l < j->ntiles ? t0 + l : j->ntiles - 1;
        idx[l] = (int)(t / tw * wq + t % tw - ln->q0);
    }
#if defined(__AVX512F__)
    ln->idx = _mm512_loadu_si512(idx);
#elif defined(__AVX2__)
    ln->idx = _mm256_loadu_si256((const __m256i *)idx);
    ln->hi = _mm256_cmpgt_epi32(ln->idx, _mm256_set1_epi32(VL - 1));
#else
    memcpy(ln->idx, idx, sizeof idx);
#endif
}

CV_INLINE vf wg_ld(const float *x, const wg_lanes *ln) {
#if defined(__AVX512F__)
    return (vf)_mm512_permutex2var_ps(_mm512_loadu_ps(x), ln->idx, _mm512_loadu_ps(x + VL));
#elif defined(__AVX2__)
    /* a 16-float window: two one-source permutes (by idx mod 8) and a blend,
     * instead of 8 scalar loads and inserts */
    const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x), ln->idx);
    const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + VL), ln->idx);
    return (vf)_mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(ln->hi));
#else
    vf v;
    for (int l = 0; l < VL; l++) v[l] = x[ln->idx[l]];
    return v;
#endif
}

#define WG_MAXV (WT / VL)

/* B^T times one column of a patch. F(2x2): B^T = [1 0 -1 0; 0 1 1 0;
 * 0 -1 1 0; 0 1 0 -1]. F(4x4), rows: [4 0 -5 0 1 0], [0 -4 -4 1 1 0],
 * [0 4 -4 -1 1 0], [0 -2 -1 2 1 0], [0 2 -1 -2 1 0], [0 4 0 -5 0 1]. */
CV_INLINE void wg_bt(const vf d[6], vf r[6], const int T) {
    if (T == 2) {
        r[0] = d[0] - d[2];
        r[1] = d[1] + d[2];
        r[2] = d[2] - d[1];
        r[3] = d[1] - d[3];
        return;
    }
    const vf t1 = d[4] - 4.f * d[2], t2 = d[3] - 4.f * d[1], t3 = d[4] - d[2], t4 = 2.f * (d[3] - d[1]);
    r[0] = 4.f * d[0] - 5.f * d[2] + d[4];
    r[1] = t1 + t2;
    r[2] = t1 - t2;
    r[3] = t3 + t4;
    r[4] = t3 - t4;
    r[5] = 4.f * d[1] - 5.f * d[3] + d[5];
}

/* V[xi][c][wt] = B^T d B for the panel's tiles, channels [c0, c1): B^T
 * down each column of the (T+2)^2 patch, then along each row. */
CV_INLINE void wg_input_t(const wg_job *j, long pn, float *vb, long c0, long c1, const int T) {
    const int N = T + 2;
    const cv_layout *l = j->l;
    const long C = j->C, cs = l->cs, *off = l->off, W = j->wt, xs = j->xs; /* xs: one xi to the next */
    wg_lanes ln[WG_MAXV];
    for (int v = 0; v < j->nv; v++) wg_lanes_at(j, pn * W + v * VL, &ln[v]);
    const float *x = j->x + c0 * cs;
    for (long c = c0; c < c1; c++, x += cs) {
        for (int v = 0; v < j->nv; v++) {
            const float *xv = x + ln[v].q0;
            vf t[6][6]; /* t[a][b]: B^T applied down column b */
            for (int b = 0; b < N; b++) {
                vf d[6], r[6];
                for (int a = 0; a < N; a++) d[a] = wg_ld(xv + off[a * N + b], &ln[v]);
                wg_bt(d, r, T);
                for (int a = 0; a < N; a++) t[a][b] = r[a];
            }
            float *o = vb + c * W + v * VL;
            for (int a = 0; a < N; a++) {
                vf r[6];
                wg_bt(t[a], r, T);
                for (int b = 0; b < N; b++) v_st(o + (a * N + b) * xs, r[b]);
            }
        }
    }
}

static void wg_input(const wg_job *j, long pn, float *vb, long c0, long c1) {
    if (j->T == 2) wg_input_t(j, pn, vb, c0, c1, 2);
    else wg_input_t(j, pn, vb, c0, c1, 4);
}

/* Runs of a panel's tiles within one tile row: lanes [l, l + len) are tiles
 * (ti, tj..), output columns [c0, c0 + ncol) of rows T*ti .. T*ti + T - 1. */
typedef struct {
    long l, ti, c0, ncol;
} wg_run;

static int wg_runs(const wg_job *j, long pn, wg_run *runs) {
    const long W = j->wt, t0 = pn * W, OW = j->p->ow, T = j->T;
    int n = 0;
    for (long l = 0; l < W && t0 + l < j->ntiles;) {
        const long t = t0 + l, ti = t / j->tw, tj = t % j->tw;
        long len = j->tw - tj < W - l ? j->tw - tj : W - l;
        if (len > j->ntiles - t) len = j->ntiles - t;
        const long c0 = T * tj, c1 = T * (tj + len) < OW ? T * (tj + len) : OW;
        runs[n++] = (wg_run){l, ti, c0, c1 - c0};
        l += len;
    }
    return n;
}

#if defined(__AVX512F__)
/* (a0 b0 a1 b1 ...): lanes 0-7 of a and b, then 8-15 */
CV_INLINE void wg_zip(__m512 a, __m512 b, __m512 *lo, __m512 *hi) {
    const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ih = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    *lo = _mm512_permutex2var_ps(a, il, b);
    *hi = _mm512_permutex2var_ps(a, ih, b);
}
#endif

/* F(4x4)'s A^T, rows: [1 1 1 1 1 0], [0 1 -1 2 -2 0], [0 1 1 4 4 0], [0 1 -1 8 -8 1]. */
CV_INLINE void wg_at6(const vf m[6], vf o[4]) {
    const vf s1 = m[1] + m[2], d1 = m[1] - m[2], s2 = m[3] + m[4], d2 = m[3] - m[4];
    o[0] = m[0] + s1 + s2;
    o[1] = d1 + 2.f * d2;
    o[2] = s1 + 4.f * s2;
    o[3] = d1 + 8.f * d2 + m[5];
}

/* Output channels [m0, m0 + MR) of panel pn from mb[xi][MR][wt]: A^T M A
 * (F(2x2): A^T = [1 1 1 0; 0 1 -1 -1]), then the epilogue, stored as rows
 * T*ti .. T*ti + T - 1 of each run of tiles. */
CV_INLINE void wg_output_t(const wg_job *j, long pn, long m0, int MR, const float *mb, const int T) {
    const tcc_conv_params *p = j->p;
    const long OH = p->oh, OW = p->ow, W = j->wt, xs = (long)MR * W;
    const cv_ep *e = j->e;
    const int act = e->act, inreg = cv_vec_act(act);
    const float a0 = e->a0, a1 = e->a1;
    wg_run runs[WT];
    const int nrun = wg_runs(j, pn, runs);
    /* row[rr][T*l + c]: output row rr, column c of lane l's tile */
    vf row[4][4 * WG_MAXV] __attribute__((aligned(64)));
    for (int i = 0; i < MR; i++) {
        const long m = m0 + i;
        const float bias = cv_bias(e, m);
        for (int v = 0; v < j->nv; v++) {
            const float *s = mb + i * W + v * VL;
            vf y[4][4]; /* y[rr][c] */
            if (T == 2) {
                vf r[4][2];
                for (int a = 0; a < 4; a++) {
                    const vf x0 = v_ld(s + (a * 4 + 0) * xs), x1 = v_ld(s + (a * 4 + 1) * xs),
                             x2 = v_ld(s + (a * 4 + 2) * xs), x3 = v_ld(s + (a * 4 + 3) * xs);
                    r[a][0] = x0 + x1 + x2;
                    r[a][1] = x1 - x2 - x3;
                }
                for (int c = 0; c < 2; c++) {
                    y[0][c] = r[0][c] + r[1][c] + r[2][c];
                    y[1][c] = r[1][c] - r[2][c] - r[3][c];
                }
            } else {
                vf r[6][4]; /* A^T along each patch row a */
                for (int a = 0; a < 6; a++) {
                    vf mv[6];
                    for (int b = 0; b < 6; b++) mv[b] = v_ld(s + (a * 6 + b) * xs);
                    wg_at6(mv, r[a]);
                }
                for (int c = 0; c < 4; c++) {
                    vf mv[6], o[4];
                    for (int a = 0; a < 6; a++) mv[a] = r[a][c];
                    wg_at6(mv, o);
                    for (int rr = 0; rr < 4; rr++) y[rr][c] = o[rr];
                }
            }
            for (int rr = 0; rr < T; rr++) {
                if (inreg) /* bias before the interleave */
                    for (int c = 0; c < T; c++) y[rr][c] += bias;
#if defined(__AVX512F__)
                __m512 *o = (__m512 *)&row[rr][T * v];
                if (T == 2) {
                    wg_zip((__m512)y[rr][0], (__m512)y[rr][1], &o[0], &o[1]);
                } else { /* zip(zip(c0, c2), zip(c1, c3)): columns 0 1 2 3 of each lane in turn */
                    __m512 p0, p1, q0, q1;
                    wg_zip((__m512)y[rr][0], (__m512)y[rr][2], &p0, &p1);
                    wg_zip((__m512)y[rr][1], (__m512)y[rr][3], &q0, &q1);
                    wg_zip(p0, q0, &o[0], &o[1]);
                    wg_zip(p1, q1, &o[2], &o[3]);
                }
#elif defined(__AVX2__)
                /* the same interleave as in-lane unpacks and shuffles, then
                 * 128-bit halves recombined: GCC made the scalar loop below
                 * spills and single-float inserts, a third of wg_output */
                __m256 *o = (__m256 *)&row[rr][T * v];
                const __m256 c0 = (__m256)y[rr][0], c1 = (__m256)y[rr][1];
                const __m256 l01 = _mm256_unpacklo_ps(c0, c1), h01 = _mm256_unpackhi_ps(c0, c1);
                if (T == 2) { /* l01: tiles 0 1 | 4 5, h01: 2 3 | 6 7 */
                    o[0] = _mm256_permute2f128_ps(l01, h01, 0x20);
                    o[1] = _mm256_permute2f128_ps(l01, h01, 0x31);
                } else {
                    const __m256 c2 = (__m256)y[rr][2], c3 = (__m256)y[rr][3];
                    const __m256 l23 = _mm256_unpacklo_ps(c2, c3), h23 = _mm256_unpackhi_ps(c2, c3);
                    /* tile k's four columns in the half k / 4 of s[k % 4] */
                    const __m256 s0 = _mm256_shuffle_ps(l01, l23, 0x44), s1 = _mm256_shuffle_ps(l01, l23, 0xEE),
                                 s2 = _mm256_shuffle_ps(h01, h23, 0x44), s3 = _mm256_shuffle_ps(h01, h23, 0xEE);
                    o[0] = _mm256_permute2f128_ps(s0, s1, 0x20);
                    o[1] = _mm256_permute2f128_ps(s2, s3, 0x20);
                    o[2] = _mm256_permute2f128_ps(s0, s1, 0x31);
                    o[3] = _mm256_permute2f128_ps(s2, s3, 0x31);
                }
#else
                float *o = (float *)&row[rr][T * v];
                for (int l = 0; l < VL; l++)
                    for (int c = 0; c < T; c++) o[T * l + c] = y[rr][c][l];
#endif
            }
        }
        float *ym = j->y + m * OH * OW;
        const float *rm = j->res ? j->res + m * OH * OW : NULL;
        for (int k = 0; k < nrun; k++) {
            const wg_run *u = &runs[k];
            for (int rr = 0; rr < T && T * u->ti + rr < OH; rr++) {
                const long o = (T * u->ti + rr) * OW + u->c0;
                if (!inreg) {
                    cv_ep_run(ym + o, (const float *)row[rr] + T * u->l, u->ncol, bias, rm ? rm + o : NULL, e);
                    continue;
                }
#if defined(__AVX512F__)
                /* the run's part of each vector stored in place through a
                 * mask (a load at an unaligned offset of what was just
                 * stored would miss store forwarding: ~20 cycles each) */
                const long s0 = T * u->l, s1 = s0 + u->ncol;
                float *dst = ym + o - s0;
                const float *rs = rm ? rm + o - s0 : NULL;
                for (long vv = s0 / VL; vv * VL < s1; vv++) {
                    const long lo = s0 - vv * VL > 0 ? s0 - vv * VL : 0, hi = s1 - vv * VL < VL ? s1 - vv * VL : VL;
                    const __mmask16 mk = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
                    __m512 a = (__m512)row[rr][vv];
                    if (rs) a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(mk, rs + vv * VL));
                    _mm512_mask_storeu_ps(dst + vv * VL, mk, (__m512)cv_act_v((vf)a, act, a0, a1));
                }
#else
                const float *src = (const float *)row[rr] + T * u->l;
                for (long c = 0; c < u->ncol; c += VL) {
                    const int n = u->ncol - c < VL ? (int)(u->ncol - c) : VL;
                    vf a = v_ld_n(src + c, n);
                    if (rm) a += v_ld_n(rm + o + c, n);
                    v_st_n(ym + o + c, cv_act_v(a, act, a0, a1), n);
                }
#endif
            }
        }
    }
}

static void wg_output(const wg_job *j, long pn, long m0, int MR, const float *mb) {
    if (j->T == 2) wg_output_t(j, pn, m0, MR, mb, 2);
    else wg_output_t(j, pn, m0, MR, mb, 4);
}

/* The shared transform: items are (panel, share of the channels), so that
 * one or two panels still keep every thread busy. */
static void wg_input_task(void *arg, long b, long e) {
    const wg_job *j = arg;
    for (long it = b; it < e; it++) {
        const long pn = it / j->csplit, cp = it % j->csplit;
        wg_input(j, pn, j->v + pn * j->nx * j->xs, cp * j->C / j->csplit, (cp + 1) * j->C / j->csplit);
    }
}

/* Which group's transform this thread's buffer holds, and for which call:
 * a thread's items are consecutive shares of a group's output-channel
 * blocks, so it transforms a group once, and again only where its range
 * starts inside a group or it steals one. */
static __thread unsigned long t_wg_call;
static __thread long t_wg_grp = -1;

/* Items: (group of pg panels, share of the output-channel blocks). A block's
 * weights for one xi (C x MR, one stream) serve the group's panels from L1:
 * with weights beyond L2 (256 channels: 4 MB with F(2x2)) each group
 * streams them from memory once. */
static void wg_task(void *arg, long b, long e) {
    const wg_job *j = arg;
    const long C = j->C, M = j->M, pg = j->pg, NX = j->nx, W = j->wt;
    const wg_fn *fns = WG_FNS[W == WTN];
    float *mb = cv_tls_buffer(1, pg * NX * WR * W);
    /* the group's transform goes to this thread's buffer (L2) rather than
     * through a shared one (L3: ResNet's 56x56 layers spent twice as long
     * in the transform writing it) */
    float *vown = j->v ? NULL : cv_tls_buffer(2, pg * NX * j->xs);
    for (long it = b; it < e; it++) {
        const long g = it / j->nsplit, sp = it % j->nsplit;
        const long b0 = sp * j->nblk / j->nsplit, b1 = (sp + 1) * j->nblk / j->nsplit;
        const long p0 = g * pg, np = j->npan - p0 < pg ? j->npan - p0 : pg;
        const float *v = j->v ? j->v + p0 * NX * j->xs : vown;
        if (vown && (t_wg_call != j->call || t_wg_grp != g)) {
            for (long k = 0; k < np; k++) wg_input(j, p0 + k, vown + k * NX * j->xs, 0, C);
            t_wg_call = j->call;
            t_wg_grp = g;
        }
        for (long blk = b0; blk < b1; blk++) {
            const long m0 = blk * M / j->nblk, m1 = (blk + 1) * M / j->nblk;
            const int MR = (int)(m1 - m0);
            for (int xi = 0; xi < NX; xi++)
                for (long k = 0; k < np; k++)
                    fns[MR](j->u + (xi * M + m0) * C, MR, v + (k * NX + xi) * j->xs, C, mb + (k * NX + xi) * MR * W);
            for (long k = 0; k < np; k++) wg_output(j, p0 + k, m0, MR, mb + k * NX * MR * W);
        }
    }
}

void tcc_cpu_conv2d_wino(const tcc_conv_params *p, int tile, const float *x, const float *u, float *y,
                         const tcc_epilogue *ep) {
    cv_ep e = {NULL, 1.f, 0, NULL, TCC_ACT_NONE, 0.f, 0.f};
    if (ep) e = (cv_ep){ep->bias, ep->bias_scale, ep->bias_mode == 4, ep->residual, ep->act, ep->a0, ep->a1};
    const int T = tile == 4 ? 4 : 2, N = T + 2;
    const long C = p->c, M = p->m, th = (p->oh + T - 1) / T, tw = (p->ow + T - 1) / T;
    /* the input as an N x N-tap, stride-T convolution over the tiles */
    const tcc_conv_params q = {1, C, p->h, p->w, M, N, N, th, tw, T, T, 1, 1, p->pt, p->pl, p->pb, p->pr, 1};
    long off[36];
    cv_layout l;
    cv_layout_init(&l, &q, off);
    wg_job j = {.p = p, .l = &l, .u = u, .e = &e, .T = T, .nx = N * N, .C = C, .M = M, .th = th, .tw = tw};
    j.ntiles = th * tw;
    j.wt = j.ntiles <= WTN ? WTN : WT;
    j.nv = j.wt / VL;
    j.xs = C * j.wt + WG_XPAD;
    j.npan = (j.ntiles + j.wt - 1) / j.wt;
    j.nblk = (M + WR - 1) / WR;
    /* Several items per thread (stealing evens out the last ones), each
     * thread transforming the groups it works on. With fewer groups than
     * threads, every thread would transform all of them: one shared
     * transform, split over channels too, goes first instead. */
    const int nt = tcc_cpu_num_threads();
    /* Weights past L2 are shared by pairs of panels, where that still leaves
     * every thread a group of its own: a shared transform is read across
     * cores. ResNet-18's 28x28 and 14x14 layers (2 panels) at 2 threads,
     * Xeon family 6 model 167, pairs (one shared transform) -> a panel per
     * thread: avx2 0.66-0.68 -> 0.56-0.58 ms and 0.93-0.95 -> 0.85-0.88 in
     * the model (tcc-run --profile), the model 14.6-15.2 -> 14.1-14.7 ms;
     * avx512 8.9-9.2 -> 8.3-8.8 ms. */
    j.pg = j.nx * C * M * (long)sizeof(float) > (1L << 20) && j.npan >= 2L * nt ? 2 : 1;
    j.ngrp = (j.npan + j.pg - 1) / j.pg;
    const long want = 4L * nt;
    j.nsplit = j.ngrp >= want ? 1 : (want + j.ngrp - 1) / j.ngrp;
    if (j.nsplit > j.nblk) j.nsplit = j.nblk;
    const int shared = j.nsplit > 1 && j.ngrp < nt;
    j.csplit = (want + j.npan - 1) / j.npan;
    if (j.csplit > C) j.csplit = C;
    /* a vector's 32-float window starts at most at the last tile */
    const size_t packed = (size_t)C * l.cs, slack = 2 * VL + l.wq + 32;
    float *xp = cv_tls_buffer(0, packed + slack);
    j.v = shared ? cv_tls_buffer(2, (size_t)j.npan * j.nx * j.xs) : NULL;
    const long hw = p->h * p->w, ohw = p->oh * p->ow;
    for (long n = 0; n < p->n; n++) {
        cv_pack_all(&l, &q, x + n * C * hw, xp, C);
        memset(xp + packed, 0, slack * sizeof(float));
        j.x = xp;
        j.y = y + n * M * ohw;
        j.res = e.res ? e.res + n * M * ohw : NULL;
        j.call = cv_call_number();
        if (j.v) tcc_cpu_parallel_for(j.npan * j.csplit, 1, wg_input_task, &j);
        tcc_cpu_parallel_for(j.ngrp * j.nsplit, 1, wg_task, &j);
    }
}
