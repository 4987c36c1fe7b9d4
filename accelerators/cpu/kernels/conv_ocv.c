/* 2-D convolution against weights packed at compile time, vectorized along
 * output channels (codegen.pack_conv: per group [ceil(mg/32)][cg*kh*kw][32]
 * panels, k ordered (ic, kh, kw), zero past mg). Codegen picks it for
 * constant weights on AVX-512 (not pointwise or depthwise); the other builds
 * carry it for artifacts compiled elsewhere (tiles of 2 pixels there).
 *
 * The direct kernel (conv.c) vectorizes along flat output rows, whose
 * dropped columns and row tails leave lanes idle on small planes (7x7:
 * 49 of 64 lanes). Here a register tile is up to RMAX output pixels x 32
 * channels: the pixels are a run of one output row (two rows when a row
 * holds at most RMAX/2; rows are split into near-equal runs), so every
 * computed output is a valid one. Pixels are broadcast from the
 * phase-plane input (conv_vec.h) at constant displacements from one
 * pointer per (channel, tap); the two weight vectors per k are aligned
 * loads from the panel. The tile is transposed in registers and stored to
 * NCHW with the epilogue (bias, residual, activation). ResNet-18's 3x3
 * layers run at 93-97 % of the FMA peak on one core. */
#include "conv_vec.h"

#define PN 32         /* output channels per panel */

#if defined(__AVX512F__)
#define RMAX 14 /* 28 accumulators + 2 weight vectors + 1 broadcast */
#define TN PN   /* output channels per tile */
#define KB_BYTES (20 * 1024)
#define TG 8    /* tiles sharing one block of weights */
#elif defined(__AVX2__)
/* 16 ymm registers: 6 pixels x 16 channels (half a panel, one 64-byte line
 * per k), 12 accumulators + 2 weight vectors + 1 broadcast, the shape of
 * the AVX2 GEMM tiles */
#define RMAX 6
#define TN 16
#define KB_BYTES (KB_AVX2 * 1024)
/* 16 tiles (96 pixels) a block of weights, not 8: ResNet-18's 3x3 512 on
 * 7x7 and stride-2 3x3s ran 2-7 % faster (1 thread, Zen 2, means of four
 * runs against onnxruntime: 1.03-1.42x its time from 1.11-1.48x); 32 no
 * better than 16 */
#define TG 16
#else
#define RMAX 2
#define TN PN
#define KB_BYTES (20 * 1024)
#define TG 8
#endif
#ifndef KB_AVX2
#define KB_AVX2 12
#endif
#define NV (TN / VL) /* vectors per tile row */

typedef struct ov_job ov_job;
/* A tile's input channels [c0, c1); partial sums of earlier blocks come from
 * part (R x TN) unless first, and go back to it unless last. */
typedef struct {
    long c0, c1;
    float *part;
    int first, last;
    long pf;       /* how far ahead (floats) to prefetch the panel */
    long pfs, pfn; /* for channels c0 + pfs + i * pfn (ov_task) */
    long ta, tb; /* the taps [ta, tb) that read the input for some pixel of the tile (ov_taps) */
} ov_kr;
typedef void (*ov_fn)(const ov_job *, long pn, long oh0, long ow0, const ov_kr *kr);

struct ov_job {
    const tcc_conv_params *p;
    const cv_layout *l;
    const float *x;   /* packed input of this image/group */
    const float *wp;  /* this group's panels */
    float *y;         /* this image/group's first output channel */
    const float *res; /* its residual, or NULL */
    const cv_ep *e;
    long mg, cg, K, m_base;
    long cw, nrow, ncol, ntile; /* tiles: nrow output rows x cw columns; ncol per row block */
    int flat;                   /* AVX2: tiles of RMAX consecutive outputs, across row ends (ov_tile's A) */
    long cb;                    /* input channels per block */
    long ntn;                   /* tile column groups: ceil(mg / TN) */
    /* priv: with several threads each packs the whole input (x, unpacked
     * then) for itself into its TLS buffer 0 at its first item, rather than
     * reading the share the others packed from their caches: every thread
     * reads all of it, and those lines crossed cores on every run.
     * ResNet-18's 3x3 stride-2 conv on 56x56 x 64, 2 threads, Intel Xeon
     * family 6 model 167: avx2 0.96-1.18 -> 0.77 ms (alone: 0.915 -> 0.674,
     * 1.29 at 1 thread), avx512 0.63 -> 0.47; the model -2.5 % and -4 %. */
    int priv;
    unsigned long call; /* priv: tells a thread's packed copy from an earlier call's (cv_call_number) */
    int t9;                     /* 3x3: OV_FNS's unrolled-taps functions for tiles that need every tap */
    int half_last;              /* the last group holds at most TN / 2 channels: half tiles */
};

#if defined(__AVX512F__)
/* r[i] lane l -> r[l] lane i (16 x 16). */
CV_INLINE void tr16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4g + c]: 128-bit lane L holds column 4L + c of rows 4g..4g+3 */
    __m512 u[16];
    for (int g = 0; g < 4; g++) {
        __m512d a = (__m512d)t[4 * g], b = (__m512d)t[4 * g + 1], c = (__m512d)t[4 * g + 2],
                d = (__m512d)t[4 * g + 3];
        u[4 * g] = (__m512)_mm512_unpacklo_pd(a, c);
        u[4 * g + 1] = (__m512)_mm512_unpackhi_pd(a, c);
        u[4 * g + 2] = (__m512)_mm512_unpacklo_pd(b, d);
        u[4 * g + 3] = (__m512)_mm512_unpackhi_pd(b, d);
    }
    for (int c = 0; c < 4; c++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44),
               v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[8 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}
#elif defined(__AVX2__)
/* Lanes [lo, hi) of a to p + lo, lo and hi constants: 16-, 8- and 4-byte
 * stores. A masked store (vmaskmovps) of each channel's row cost Zen 2 as
 * much: a 1x1 stride-2 layer (K = 64) ran 1.15-1.2x slower with them
 * than with whole-vector stores (tiles at 6 of 8 lanes). */
CV_INLINE void st_lanes(float *p, __m256 a, const int lo, const int hi) {
    const __m128 h[2] = {_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)};
#pragma GCC unroll 8
    for (int i = lo; i < hi;) {
        const __m128 x = h[i / 4];
        if (i % 4 == 0 && hi - i >= 4) {
            _mm_storeu_ps(p + i, x);
            i += 4;
        } else if (i % 2 == 0 && hi - i >= 2) {
            if (i % 4 == 0) _mm_storel_pi((__m64 *)(p + i), x);
            else _mm_storeh_pi((__m64 *)(p + i), x);
            i += 2;
        } else {
            p[i] = a[i];
            i += 1;
        }
    }
}

CV_INLINE __m256i lanes_in(int lo, int hi) { /* lanes [lo, hi) of 8 */
    const __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), i), _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i));
}
#endif

/* The tap's two input rows, opaque to GCC: it would otherwise hoist every
 * (tap, pixel) offset out of the loop and reload them from the stack,
 * instead of one register plus constant displacements. */
CV_INLINE void ov_rows(const float *s[2], const float *a, long wq, const int NR) {
    const float *b = a + wq;
    if (NR == 2) __asm__("" : "+r"(a), "+r"(b));
    else __asm__("" : "+r"(a));
    s[0] = a;
    s[1] = b;
}

/* One panel row (PN floats: two lines) into L2, past the panels' end too
 * (prefetches never fault). Both lines where a tile reads half of it (AVX2,
 * TN = 16): the other half is the next item's, and so not left to the
 * hardware prefetcher (ResNet-18's 7x7 layers in the model, avx2, 1 thread:
 * 2.89 -> 2.73 ms; its 14 -> 7 stride-2 layer 1.58 -> 1.49). */
CV_INLINE void ov_prefetch(const float *row) {
    __builtin_prefetch(row, 0, 2);
    __builtin_prefetch(row + 16, 0, 2);
}

/* Tile of NR rows x W columns of outputs from (oh0, ow0), channels
 * [pn * TN, pn * TN + TN) (TN < PN: part of a panel), or (HALF) the first
 * TN / 2 of them: a last group holding no more (a 16-channel layer on
 * AVX-512 computed 32 lanes a pixel, half of them on zero weights); pixel i
 * is (i / W, i % W). t9: 3x3, channels outer and the taps unrolled.
 * A > 0 (with NR = 1): W consecutive outputs in NCHW order that cross a row
 * end after A of them, pixel i >= A at (oh0 + 1, i - A) (ov_job.flat). */
CV_INLINE void ov_tile(const ov_job *j, long pn, long oh0, long ow0, const ov_kr *kr, const int W, const int NR,
                       const int t9, const int A, const int HALF) {
    const int R = W * NR, nv = HALF ? NV / 2 : NV;
    const cv_layout *l = j->l;
    const long wq = l->wq, cs = l->cs, *off = l->off, T = l->taps;
    /* the second row pointer: the next row's column ow0, or (A > 0) its
     * column ow0 - OW, so that pixel i of either row is s[.][i] */
    const long rs = A ? wq - j->p->ow : wq;
    const int NS = A ? 2 : NR;
    const long wh = pn * TN % PN; /* the tile's half of the panel row */
    const float *xs = j->x + kr->c0 * cs + oh0 * wq + ow0, *w = j->wp + (pn * TN / PN * j->K + kr->c0 * T) * PN + wh;
    vf acc[RMAX][NV];
#pragma GCC unroll 16
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) acc[i][v] = kr->first ? (vf){0} : v_ld(kr->part + i * TN + v * VL);
    if (t9) {
        long pk = kr->pfs;
        for (long c = kr->c0; c < kr->c1; c++, xs += cs, w += 9 * PN) {
            const int dopf = pk == 0;
            pk = pk == 0 ? kr->pfn - 1 : pk - 1;
#pragma GCC unroll 9
            for (int t = 0; t < 9; t++) {
                const float *s[2];
                ov_rows(s, xs + off[t], rs, NS);
                if (dopf) ov_prefetch(w + t * PN + kr->pf - wh);
                vf wv[NV];
#pragma GCC unroll 8
                for (int v = 0; v < nv; v++) wv[v] = v_ld(w + t * PN + v * VL);
#pragma GCC unroll 16
                for (int i = 0; i < R; i++) {
                    const float xv = A ? s[i >= A][i] : s[i / W][i % W];
#pragma GCC unroll 8
                    for (int v = 0; v < nv; v++) acc[i][v] += xv * wv[v];
                }
            }
        }
    } else {
        /* channels outer, the tile's taps inner (the panel read in order) */
        long pk = kr->pfs;
        for (long c = kr->c0; c < kr->c1; c++, xs += cs, w += T * PN) {
            if (pk == 0)
                for (long t = 0; t < T; t++) ov_prefetch(w + t * PN + kr->pf - wh);
            pk = pk == 0 ? kr->pfn - 1 : pk - 1;
            for (long t = kr->ta; t < kr->tb; t++) {
                const float *s[2];
                ov_rows(s, xs + off[t], rs, NS);
                vf wv[NV];
#pragma GCC unroll 8
                for (int v = 0; v < nv; v++) wv[v] = v_ld(w + t * PN + v * VL);
#pragma GCC unroll 16
                for (int i = 0; i < R; i++) {
                    const float xv = A ? s[i >= A][i] : s[i / W][i % W];
#pragma GCC unroll 8
                    for (int v = 0; v < nv; v++) acc[i][v] += xv * wv[v];
                }
            }
        }
    }
    if (!kr->last) {
#pragma GCC unroll 16
        for (int i = 0; i < R; i++)
#pragma GCC unroll 8
            for (int v = 0; v < nv; v++) v_st(kr->part + i * TN + v * VL, acc[i][v]);
        return;
    }
    const tcc_conv_params *p = j->p;
    const long OW = p->ow, ohw = p->oh * OW, o0 = oh0 * OW + ow0;
    const cv_ep *e = j->e;
#if defined(__AVX512F__)
    if (cv_vec_act(e->act)) {
        /* lanes [0, W): row oh0; [W, 2W): row oh0 + 1, stored W lanes back */
        const __mmask16 k1 = (__mmask16)((1u << W) - 1), k2 = NR == 2 ? (__mmask16)(k1 << W) : 0;
        const long o1 = o0 + OW - W;
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
            __m512 r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) r[i] = (__m512)acc[i < R ? i : R - 1][v];
            tr16(r);
            for (int c = 0; c < VL; c++) {
                const long m = pn * PN + v * VL + c;
                if (m >= j->mg) break;
                __m512 a = _mm512_add_ps(r[c], _mm512_set1_ps(cv_bias(e, j->m_base + m)));
                float *y = j->y + m * ohw;
                if (j->res) {
                    const float *rs = j->res + m * ohw;
                    a = _mm512_add_ps(a, _mm512_mask_loadu_ps(_mm512_maskz_loadu_ps(k1, rs + o0), k2, rs + o1));
                }
                a = (__m512)cv_act_v((vf)a, e->act, e->a0, e->a1);
                _mm512_mask_storeu_ps(y + o0, k1, a);
                if (NR == 2) _mm512_mask_storeu_ps(y + o1, k2, a);
            }
        }
        return;
    }
#elif defined(__AVX2__)
    if (cv_vec_act(e->act)) {
        /* as above, 8 x 8: lanes [0, W) row oh0; [W, 2W) row oh0 + 1. The
         * per-channel scalar rows (below) cost a 7x7 stem (K = 147) as much
         * as its multiply-adds. */
        const __m256i k1 = lanes_in(0, W), k2 = lanes_in(W, NR == 2 ? 2 * W : W);
        const long o1 = o0 + OW - W;
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) r[i] = (__m256)acc[i < R ? i : R - 1][v];
            cv_tr8(r);
            for (int c = 0; c < VL; c++) {
                const long m = pn * TN + v * VL + c;
                if (m >= j->mg) break;
                __m256 a = _mm256_add_ps(r[c], _mm256_set1_ps(cv_bias(e, j->m_base + m)));
                float *y = j->y + m * ohw;
                if (j->res) {
                    const float *rs = j->res + m * ohw;
                    a = _mm256_add_ps(a, _mm256_maskload_ps(rs + o0, k1));
                    if (NR == 2) a = _mm256_add_ps(a, _mm256_maskload_ps(rs + o1, k2));
                }
                a = (__m256)cv_act_v((vf)a, e->act, e->a0, e->a1);
                st_lanes(y + o0, a, 0, W);
                if (NR == 2) st_lanes(y + o1, a, W, 2 * W);
            }
        }
        return;
    }
#endif
    /* acc must not escape (GCC would then keep it in memory) */
    float tb[RMAX][TN] __attribute__((aligned(64)));
#pragma GCC unroll 16
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) v_st(tb[i] + v * VL, acc[i][v]);
    for (long c = 0; c < TN && pn * TN + c < j->mg; c++) {
        const long m = pn * TN + c;
        float row[RMAX];
        for (int i = 0; i < R; i++) row[i] = tb[i][c];
        for (int r = 0; r < NR; r++) {
            const long o = m * ohw + o0 + r * OW;
            cv_ep_run(j->y + o, row + r * W, W, cv_bias(e, j->m_base + m), j->res ? j->res + o : NULL, e);
        }
    }
}

#define OV_FN(NAME, W, NR, T9, A, HALF)                                                                   \
    __attribute__((noinline, unused)) static void NAME(const ov_job *j, long pn, long oh0, long ow0,          \
                                                       const ov_kr *kr) {                                 \
        ov_tile(j, pn, oh0, ow0, kr, W, NR, T9, A, HALF);                                                 \
    }
#define OV_INST(W, NR)                                                                                    \
    OV_FN(ov_##W##x##NR, W, NR, 0, 0, 0) OV_FN(ov_##W##x##NR##_t9, W, NR, 1, 0, 0)                         \
    OV_FN(ov_##W##x##NR##_h, W, NR, 0, 0, 1) OV_FN(ov_##W##x##NR##_t9_h, W, NR, 1, 0, 1)
#define OV_PAIR(W) OV_INST(W, 1) OV_INST(W, 2)
#define OV_ROW(W, S) [W] = {ov_##W##x1##S, ov_##W##x2##S}
#define OV_ROW1(W, S) [W] = {ov_##W##x1##S, NULL}
#define OV_TAB(S)                                                                                          \
    {OV_ROW(1, S), OV_ROW(2, S), OV_ROW(3, S), OV_ROW(4, S), OV_ROW(5, S), OV_ROW(6, S), OV_ROW(7, S),     \
     OV_ROW1(8, S), OV_ROW1(9, S), OV_ROW1(10, S), OV_ROW1(11, S), OV_ROW1(12, S), OV_ROW1(13, S), OV_ROW1(14, S)}
OV_PAIR(1)
#if RMAX == 14
OV_PAIR(2) OV_PAIR(3) OV_PAIR(4) OV_PAIR(5) OV_PAIR(6) OV_PAIR(7)
OV_INST(8, 1) OV_INST(9, 1) OV_INST(10, 1) OV_INST(11, 1) OV_INST(12, 1) OV_INST(13, 1) OV_INST(14, 1)
/* [half][t9][width][rows - 1]; two rows only where 2 * width <= RMAX */
static const ov_fn OV_FNS[2][2][RMAX + 1][2] = {{OV_TAB(), OV_TAB(_t9)}, {OV_TAB(_h), OV_TAB(_t9_h)}};
#elif RMAX == 6
OV_PAIR(2) OV_PAIR(3)
OV_INST(4, 1) OV_INST(5, 1) OV_INST(6, 1)
/* Six-pixel tiles keep the flat loop for 3x3 too: with the taps unrolled GCC
 * kept two of the 12 accumulators in memory (16 registers) */
#define OV_TAB6(H, T9H)                                                                                   \
    {{OV_ROW(1, H), OV_ROW(2, H), OV_ROW(3, H), OV_ROW1(4, H), OV_ROW1(5, H), OV_ROW1(6, H)},                    \
     {OV_ROW(1, T9H), OV_ROW(2, T9H), [3] = {ov_3x1##T9H, ov_3x2##H}, OV_ROW1(4, T9H), OV_ROW1(5, T9H),          \
      OV_ROW1(6, H)}}
static const ov_fn OV_FNS[2][2][RMAX + 1][2] = {OV_TAB6(, _t9), OV_TAB6(_h, _t9_h)};
/* W outputs crossing a row end after A of them */
#define OV_SPLIT(W, A) OV_FN(ov_##W##s##A, W, 1, 0, A, 0) OV_FN(ov_##W##s##A##_h, W, 1, 0, A, 1)
OV_SPLIT(2, 1) OV_SPLIT(3, 1) OV_SPLIT(3, 2) OV_SPLIT(4, 1) OV_SPLIT(4, 2) OV_SPLIT(4, 3)
OV_SPLIT(5, 1) OV_SPLIT(5, 2) OV_SPLIT(5, 3) OV_SPLIT(5, 4)
OV_SPLIT(6, 1) OV_SPLIT(6, 2) OV_SPLIT(6, 3) OV_SPLIT(6, 4) OV_SPLIT(6, 5)
/* [half][width][outputs before the row end] */
#define OV_SPLIT_TAB(H)                                                                                   \
    {[2] = {NULL, ov_2s1##H}, [3] = {NULL, ov_3s1##H, ov_3s2##H}, [4] = {NULL, ov_4s1##H, ov_4s2##H, ov_4s3##H},  \
     [5] = {NULL, ov_5s1##H, ov_5s2##H, ov_5s3##H, ov_5s4##H},                                             \
     [6] = {NULL, ov_6s1##H, ov_6s2##H, ov_6s3##H, ov_6s4##H, ov_6s5##H}}
static const ov_fn OV_SPLIT_FNS[2][RMAX + 1][RMAX] = {OV_SPLIT_TAB(), OV_SPLIT_TAB(_h)};
#else
OV_INST(2, 1)
static const ov_fn OV_FNS[2][2][RMAX + 1][2] = {{{OV_ROW(1, ), OV_ROW1(2, )}, {OV_ROW(1, _t9), OV_ROW1(2, _t9)}},
                                                 {{OV_ROW(1, _h), OV_ROW1(2, _h)}, {OV_ROW(1, _t9_h), OV_ROW1(2, _t9_h)}}};
#endif

/* The taps a tile of output rows [r0, r1] needs: those of the kernel rows
 * that read an input row for one of its rows. The rest read only the top or
 * bottom padding (ResNet-18's 7 x 7 layers: a tile in the first or last row
 * skips 3 of 9 taps, 7.5 % of the layer's products). */
static void ov_taps(const tcc_conv_params *p, long r0, long r1, ov_kr *kr) {
    long k0 = 0, k1 = p->kh;
    while (k0 < k1 && r1 * p->sh - p->pt + k0 * p->dh < 0) k0++;
    while (k1 > k0 && r0 * p->sh - p->pt + (k1 - 1) * p->dh >= p->h) k1--;
    kr->ta = k0 * p->kw;
    kr->tb = k1 * p->kw;
}

/* Items are (panel, group of TG tiles), panel-major: a thread's panels stay
 * in its L2 while its tiles sweep the input. A group's tiles take each block
 * of input channels in turn, so the block's weights (KB_BYTES) are read from
 * L1 by all of them rather than from L2 by each. The weights two blocks
 * ahead are prefetched (a model's weights come from memory: ResNet-18's
 * last layers run ~25 % faster with it), each tile of the group taking
 * every n-th channel (ov_kr.pfs, pfn). When the first tile prefetched the
 * whole block, a third of its samples sat on the prefetches (the fill
 * buffers full) while it computed 1/9 of the block. Spread, ResNet-18 in
 * the model, Xeon family 6 model 167, 1 thread: avx2 3x3 layers on 7x7
 * 2.80 -> 2.41 ms, its stride-2 layer into 7x7 1.52 -> 1.33, the model
 * 29.8 -> 28.8 ms (2 threads 17.6 -> 16.6); avx512 18.5 -> 17.3 (10.7 ->
 * 10.2). One, three or four blocks ahead: no better than two. */
static __thread unsigned long t_ov_call; /* the call whose input this thread's TLS buffer 0 holds (priv) */

static void ov_task(void *arg, long b, long e) {
    const ov_job *j = arg;
    ov_job jl;
    if (j->priv) {
        float *mine = cv_tls_buffer(0, (size_t)j->cg * j->l->cs);
        if (t_ov_call != j->call) {
            cv_pack(j->l, j->p, j->x, mine, 0, j->cg, 1);
            t_ov_call = j->call;
        }
        jl = *j;
        jl.x = mine;
        j = &jl;
    }
    const long OH = j->p->oh, OW = j->p->ow, ng = (j->ntile + TG - 1) / TG;
    float *part = cv_tls_buffer(1, TG * RMAX * TN);
    /* the group's tiles placed once per item, not once per block of
     * channels: the divisions were 3 % of ResNet-18's stride-2 layers */
    struct {
        ov_fn fn;
        long oh0, ow0, ta, tb;
    } tl[TG];
    for (long it = b; it < e; it++) {
        const long pn = it / ng, t0 = it % ng * TG, t1 = t0 + TG < j->ntile ? t0 + TG : j->ntile;
        const int last = pn == j->ntn - 1;
        const int half = last && j->half_last;
        for (long t = t0; t < t1; t++) {
            ov_kr kr;
            long oh0, ow0;
            ov_fn fn;
#if RMAX == 6
            if (j->flat) {
                /* near-equal widths: a 7 x 7 plane's 49 outputs as 4 tiles
                 * of 6 and 5 of 5, where 8 of 6 and one of 1 took
                 * ResNet-18's 512-channel 7 x 7 layers ~10 % longer (the
                 * one-output tile runs its whole K for 2 multiply-adds a k) */
                const long q0 = t * OH * OW / j->ntile, w = (t + 1) * OH * OW / j->ntile - q0;
                oh0 = q0 / OW;
                ow0 = q0 % OW;
                ov_taps(j->p, oh0, (q0 + w - 1) / OW, &kr);
                fn = OW - ow0 >= w ? OV_FNS[half][j->t9 && kr.tb - kr.ta == 9][w][0] : OV_SPLIT_FNS[half][w][OW - ow0];
            } else
#endif
            {
                oh0 = t / j->ncol * j->nrow;
                ow0 = t % j->ncol * j->cw;
                const long nr = OH - oh0 < j->nrow ? OH - oh0 : j->nrow, w = OW - ow0 < j->cw ? OW - ow0 : j->cw;
                ov_taps(j->p, oh0, oh0 + nr - 1, &kr);
                fn = OV_FNS[half][j->t9 && kr.tb - kr.ta == 9][w][nr - 1];
            }
            tl[t - t0].fn = fn;
            tl[t - t0].oh0 = oh0;
            tl[t - t0].ow0 = ow0;
            tl[t - t0].ta = kr.ta;
            tl[t - t0].tb = kr.tb;
        }
        for (long c0 = 0; c0 < j->cg; c0 += j->cb) {
            ov_kr kr = {c0, c0 + j->cb < j->cg ? c0 + j->cb : j->cg, NULL, c0 == 0, c0 + j->cb >= j->cg, 0, 0, 0, 0, 0};
            kr.pf = 2 * j->cb * j->l->taps * PN;
            kr.pfn = t1 - t0;
            for (long t = t0; t < t1; t++) {
                kr.pfs = t - t0;
                kr.part = part + (t - t0) * RMAX * TN;
                kr.ta = tl[t - t0].ta;
                kr.tb = tl[t - t0].tb;
                tl[t - t0].fn(j, pn, tl[t - t0].oh0, tl[t - t0].ow0, &kr);
            }
        }
    }
}

const char *tcc_cpu_conv2d_packed_path(const tcc_conv_params *p) {
    const cv_layout l = {.taps = p->kh * p->kw}; /* all cv_rows_eligible reads of it */
    return cv_rows_eligible(p, &l) ? "rows" : "ocv";
}

void tcc_cpu_conv2d_packed(const tcc_conv_params *p, const float *x, const float *wp, float *y, float *scratch,
                           const tcc_epilogue *ep) {
    long off_stack[64], *off = p->kh * p->kw <= 64 ? off_stack : malloc(p->kh * p->kw * sizeof(long));
    cv_layout l;
    cv_layout_init(&l, p, off); /* codegen packs only convolutions the phase table covers */
    const int rows = cv_rows_eligible(p, &l);
    if (rows) cv_layout_align_rows(&l, p); /* its loads then split no cache lines on most taps */
    cv_ep e = {NULL, 1.f, 0, NULL, TCC_ACT_NONE, 0.f, 0.f};
    if (ep) e = (cv_ep){ep->bias, ep->bias_scale, ep->bias_mode == 4, ep->residual, ep->act, ep->a0, ep->a1};
    const long G = p->group, cg = p->c / G, mg = p->m / G, K = cg * l.taps, npan = (mg + PN - 1) / PN;
    const long ohw = p->oh * p->ow, hw = p->h * p->w;
    const int priv = !l.direct && !rows && npan > 1 && tcc_cpu_num_threads() > 1;
    float *xp = NULL;
    if (!l.direct && !priv) {
        const size_t need = (size_t)cg * l.cs + (rows ? CV_ROWS_SLACK : 0);
        xp = need <= tcc_cpu_conv2d_scratch(p) ? scratch : cv_tls_buffer(0, need);
        if (rows && ((uintptr_t)xp & 63)) xp = cv_tls_buffer(0, need); /* aligned rows need an aligned buffer */
    }
    ov_job j = {.p = p, .l = &l, .e = &e, .mg = mg, .cg = cg, .K = K, .priv = priv};
    j.ncol = (p->ow + RMAX - 1) / RMAX;
    j.cw = (p->ow + j.ncol - 1) / j.ncol;
    j.nrow = 2 * j.cw <= RMAX && p->oh > 1 ? 2 : 1;
    j.ntile = (p->oh + j.nrow - 1) / j.nrow * j.ncol;
#if RMAX == 6
    if (p->ow > RMAX && p->ow % RMAX) {
        j.flat = 1;
        j.ntile = (ohw + RMAX - 1) / RMAX;
    }
#endif
    const long nkb = (K * TN * (long)sizeof(float) + KB_BYTES - 1) / KB_BYTES;
    j.ntn = (mg + TN - 1) / TN;
    j.half_last = mg - (j.ntn - 1) * TN <= TN / 2;
    j.t9 = l.taps == 9;
    j.cb = (cg + nkb - 1) / nkb;
    for (long n = 0; n < p->n; n++) {
        for (long g = 0; g < G; g++) {
            const float *xg = x + (n * p->c + g * cg) * hw;
            if (priv) {
                j.call = cv_call_number();
            } else if (!l.direct) {
                /* threads split the output rows (one panel, or the rows kernel) */
                if (npan == 1 || rows) cv_pack_all_rows(&l, p, xg, xp, cg);
                else cv_pack_all(&l, p, xg, xp, cg);
            }
            const long yoff = (n * p->m + g * mg) * ohw;
            j.x = l.direct || priv ? xg : xp;
            j.wp = wp + g * npan * K * PN;
            j.y = y + yoff;
            j.res = e.res ? e.res + yoff : NULL;
            j.m_base = g * mg;
            if (rows) cv_conv_rows(p, &l, j.x, j.wp, j.y, j.res, &e, j.m_base);
            else tcc_cpu_parallel_for(j.ntn * ((j.ntile + TG - 1) / TG), 1, ov_task, &j);
        }
    }
    if (off != off_stack) free(off);
}
