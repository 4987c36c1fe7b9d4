/* Convolution against conv_ocv.c's packed weights with output positions in
 * the vector lanes, for convolutions of few input channels and taps (a
 * CNN's 3x3 stem: K = cg*kh*kw = 27). conv_ocv.c puts output channels
 * in the lanes and transposes every tile into NCHW rows; with K = 27 those
 * transposes and per-channel stores cost as much as the multiply-adds.
 * Here a tile is MT output channels x R output rows x NV vectors of one
 * row segment: each (input channel, tap) loads R*NV vectors from the phase
 * planes (conv_vec.h) and broadcasts MT weights from the panel, and the
 * epilogue stores whole vectors of NCHW rows. A thread takes groups of R
 * output rows and runs every channel over them, so the rows' input stays
 * in L1. Loads split no cache line on most taps: the packed rows are
 * rounded up to whole vectors (cv_layout_align_rows). AVX-512 (28
 * accumulators) and AVX2 (12: 2 channels x 6 vectors, a loaded vector and
 * the 2 broadcasts in the other 3 of 16 registers); the generic build runs
 * conv_ocv.c. */
#include "conv_vec.h"

#define PN 32 /* panel width of the packed weights (conv_ocv.c) */

#if defined(__AVX512F__) || defined(__AVX2__)
#define MT 2      /* output channels per tile */
#define R_MAX 3   /* rows per tile (row offsets r1..r3 below) */
#if defined(__AVX512F__)
#define NACC 14   /* vectors per channel: R * NV */
#define NV_MIN 4  /* narrower rows: conv_ocv.c (R <= 3 row offsets) */
#define NV_MAX 7
#define K_MAX 64 /* ResNet's 7x7 stem (K = 147) ran 6-14 % slower here than in conv_ocv.c */
#define K_MAX_WIDE K_MAX /* no wider K on wide rows */
#define WIDE_OW 0
#define TAPS_MIN 1
typedef __mmask16 cr_mask;
CV_INLINE cr_mask cr_mask_n(long n) { return (__mmask16)((1u << n) - 1); }
CV_INLINE vf cr_ld_m(cr_mask k, const float *p) { return (vf)_mm512_maskz_loadu_ps(k, p); }
CV_INLINE void cr_st_m(float *p, cr_mask k, vf v) { _mm512_mask_storeu_ps(p, k, (__m512)v); }
#else
#define NACC 6    /* 2 x 6 accumulators: rows of 2 vectors x 3 rows, 3 x 2 or 6 x 1 */
#define NV_MIN 2
#define NV_MAX 6
/* Against conv_ocv.c's 6 x 16 tiles (Zen 2, 1 thread, in-process A/B,
 * medians of 30-80 rounds): K = 27..54 0.6-0.9x its time (MobileNetV2's
 * stem 0.6x), and up to K = 147 on rows of at least 96 columns (ResNet's
 * 7x7 stem, 112 columns: 0.84-1.0x, ~0.92 typical); on 28- and 56-column
 * rows K = 144 ran 1.0-1.06x, and K = 288 (a 3x3 of 32 channels) 1.2x. */
#define K_MAX 64
#define K_MAX_WIDE 160
#define WIDE_OW 96
#define TAPS_MIN 2 /* a 1x1 stride-2 of 64 channels (28 columns) ran 1.1x conv_ocv.c's time */
typedef __m256i cr_mask;
CV_INLINE cr_mask cr_mask_n(long n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
CV_INLINE vf cr_ld_m(cr_mask k, const float *p) { return (vf)_mm256_maskload_ps(p, k); }
CV_INLINE void cr_st_m(float *p, cr_mask k, vf v) { _mm256_maskstore_ps(p, k, (__m256)v); }
#endif

typedef struct {
    const tcc_conv_params *p;
    const cv_layout *l;
    const float *x, *wp, *res;
    float *y;
    const cv_ep *e;
    long mg, K, m_base;
    long cw, nseg, nv, R, nrg; /* segment width, segments per row, vectors per segment, rows per tile, row groups */
    int over;                  /* last vectors loaded whole (cr_tile's full = 2) */
    /* bytes from a tile's first input to (channel, tap) k's, for every k:
     * a (tap, channel) counter in the loop and index arithmetic were 14
     * scalar instructions to its 20 vector ones (2 broadcasts, 6 loads, 12
     * FMAs), 7 with the table (ResNet-18's 7x7 stem, Xeon family 6 model
     * 167, avx2: 2.65 -> 2.51 ms at 1 thread, 1.42 -> 1.31 at 2;
     * MobileNetV2's 3x3 stem 0.352 -> 0.327 and 0.240 -> 0.230, avx512
     * 0.226 -> 0.228 and 0.172 -> 0.159) */
    const long *koff;
} cr_job;

/* Channels m0, m0 + 1 (the second clamped to the last channel), rows
 * [oh0, oh0 + nr), columns [ow0, ow0 + w) of the output; NV vectors per
 * row, the last one masked to w - (NV - 1) * VL lanes (full = 0), whole
 * (1: w = NV * VL), or loaded whole and stored masked (2: packed input,
 * whose buffer has VL floats of slack past its end; the lanes past w read
 * the next row's columns or that slack and are never stored). Accumulator
 * i*R + r is channel m0 + i's row r. */
CV_INLINE void cr_tile(const cr_job *j, long m0, long oh0, long nr, long ow0, long w, const int NV, const int R,
                       const int full) {
    const cv_layout *l = j->l;
    const long wq = l->wq;
    const cr_mask km = cr_mask_n(w - (NV - 1) * VL);
    const long m1 = m0 + 1 < j->mg ? m0 + 1 : m0;
    const float *w0 = j->wp + m0 / PN * j->K * PN + m0 % PN, *w1 = j->wp + m1 / PN * j->K * PN + m1 % PN;
    /* past the last output row, read the last one again (never stored) */
    const long r1 = (1 < nr ? 1 : nr - 1) * wq, r2 = (2 < nr ? 2 : nr - 1) * wq, r3 = (3 < nr ? 3 : nr - 1) * wq;
    const float *xs = j->x + oh0 * wq + ow0;
    vf acc[2 * R_MAX][NV_MAX]; /* fixed sizes: GCC keeps no variable-length array in registers */
#pragma GCC unroll 8
    for (int i = 0; i < 2 * R; i++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) acc[i][v] = (vf){0};
    const char *xb = (const char *)xs;
    const float *wk0 = w0, *wk1 = w1;
    for (long k = 0; k < j->K; k++, wk0 += PN, wk1 += PN) {
        const float *s = (const float *)(xb + j->koff[k]);
        const float b0 = *wk0, b1 = *wk1;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const float *sr = s + (r == 0 ? 0 : r == 1 ? r1 : r == 2 ? r2 : r3);
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++) {
                vf xv = !full && v == NV - 1 ? cr_ld_m(km, sr + v * VL) : v_ld(sr + v * VL);
                __asm__("" : "+v"(xv)); /* one load for both channels: GCC read it twice, as FMA operands */
                acc[r][v] += xv * b0;
                acc[R + r][v] += xv * b1;
            }
        }
    }
    const long OW = j->p->ow, ohw = j->p->oh * OW;
    const cv_ep *e = j->e;
    /* the epilogue's parameters read once, before the first store (y may
     * alias them: GCC reloaded them and tested the activation again for
     * every vector stored, ~150 instructions a tile against K = 27's ~840) */
    const int act = e->act, vact = cv_vec_act(act);
    const float a0 = e->a0, a1 = e->a1;
    float *const yb = j->y;
    const float *const rb = j->res;
    const vf bias0 = (vf){0} + cv_bias(e, j->m_base + m0), bias1 = (vf){0} + cv_bias(e, j->m_base + m1);
#pragma GCC unroll 8
    for (int i = 0; i < 2 * R; i++) {
        const int r = i % R;
        const long m = i < R ? m0 : m1;
        if (r >= nr || (i >= R && m1 == m0)) continue;
        const long o = m * ohw + (oh0 + r) * OW + ow0;
        float *y = yb + o;
        const float *rs = rb ? rb + o : NULL;
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) {
            const int part = full != 1 && v == NV - 1; /* else every lane is an output */
            vf a = acc[i][v] + (i < R ? bias0 : bias1);
            if (rs) a += part ? cr_ld_m(km, rs + v * VL) : v_ld(rs + v * VL);
            if (vact) a = cv_act_v(a, act, a0, a1);
            if (part) cr_st_m(y + v * VL, km, a);
            else v_st(y + v * VL, a);
        }
        if (!vact) cv_ep_run(y, y, w, 0.f, NULL, e);
    }
}

/* per vector count: the last vector masked, or all full (a masked load
 * costs a second uop, on the FMAs' ports), and on AVX2 loaded whole where
 * the input is packed: AVX2's masked loads in the tap loop made 56-column
 * rows (2 vectors of 14) 1.2x slower than whole ones, and slower than
 * conv_ocv.c (Zen 2, 1 thread, K = 54..147). One call runs a segment's
 * every channel pair: the tile's set-up (row offsets, mask, input pointer)
 * is then hoisted out of the channel loop, and K = 27 left it a visible
 * share. With the epilogue's parameters read once (cr_tile), MobileNetV2's
 * stem (3 -> 32, 3x3/2, 224), AMD EPYC Zen 4, 1 / 2 threads: AVX2 library
 * 0.320 / 0.170 -> 0.298 / 0.158 ms, AVX-512 0.253 / 0.134 -> 0.244 /
 * 0.130; ResNet-18's 7x7 stem (AVX2 only runs it here) 2.39 -> 2.32. */
#define CR_INST(NV)                                                                                           \
    __attribute__((noinline)) static void cr_tile##NV(const cr_job *j, long oh0, long nr, long ow0, long w) { \
        for (long m0 = 0; m0 < j->mg; m0 += MT) cr_tile(j, m0, oh0, nr, ow0, w, NV, NACC / NV, 0);              \
    }                                                                                                       \
    __attribute__((noinline)) static void cr_full##NV(const cr_job *j, long oh0, long nr, long ow0, long w) { \
        for (long m0 = 0; m0 < j->mg; m0 += MT) cr_tile(j, m0, oh0, nr, ow0, w, NV, NACC / NV, 1);              \
    }
#define CR_OVER(NV)                                                                                           \
    __attribute__((noinline)) static void cr_over##NV(const cr_job *j, long oh0, long nr, long ow0, long w) { \
        for (long m0 = 0; m0 < j->mg; m0 += MT) cr_tile(j, m0, oh0, nr, ow0, w, NV, NACC / NV, 2);              \
    }
typedef void (*cr_fn)(const cr_job *, long, long, long, long);
#if defined(__AVX512F__)
CR_INST(4) CR_INST(5) CR_INST(6) CR_INST(7)
#define CR_LOAD_PAST 0 /* masked loads are one uop more here: never measured against whole ones */
static const cr_fn CR_FNS[3][NV_MAX + 1] = {{[4] = cr_tile4, [5] = cr_tile5, [6] = cr_tile6, [7] = cr_tile7},
                                            {[4] = cr_full4, [5] = cr_full5, [6] = cr_full6, [7] = cr_full7}};
#else
CR_INST(2) CR_INST(3) CR_INST(4) CR_INST(5) CR_INST(6)
CR_OVER(2) CR_OVER(3) CR_OVER(4) CR_OVER(5) CR_OVER(6)
#define CR_LOAD_PAST 1
static const cr_fn CR_FNS[3][NV_MAX + 1] = {
    {[2] = cr_tile2, [3] = cr_tile3, [4] = cr_tile4, [5] = cr_tile5, [6] = cr_tile6},
    {[2] = cr_full2, [3] = cr_full3, [4] = cr_full4, [5] = cr_full5, [6] = cr_full6},
    {[2] = cr_over2, [3] = cr_over3, [4] = cr_over4, [5] = cr_over5, [6] = cr_over6}};
#endif

static void cr_task(void *arg, long b, long e) {
    const cr_job *j = arg;
    for (long g = b; g < e; g++) {
        const long oh0 = g * j->R, nr = j->p->oh - oh0 < j->R ? j->p->oh - oh0 : j->R;
        for (long s = 0; s < j->nseg; s++) {
            const long ow0 = s * j->cw, w = j->p->ow - ow0 < j->cw ? j->p->ow - ow0 : j->cw;
            const cr_fn fn = CR_FNS[w == j->nv * VL ? 1 : j->over ? 2 : 0][j->nv];
            fn(j, oh0, nr, ow0, w);
        }
    }
}

/* Segments of equal vector count whose last vector holds at least one
 * column each; 0 when the rows are too narrow. AVX-512: the fewest
 * segments (R = 14 / NV rows follow). */
static long cr_segments(long ow, long oh, long *cw, long *nv) {
#if defined(__AVX512F__)
    (void)oh;
    for (long nseg = (ow + NV_MAX * VL - 1) / (NV_MAX * VL); nseg <= ow; nseg++) {
        const long c = (ow + nseg - 1) / nseg, v = (c + VL - 1) / VL, last = ow - (nseg - 1) * c;
        if (v < NV_MIN) return 0;
        if (last > (v - 1) * VL) {
            *cw = c;
            *nv = v;
            return nseg;
        }
    }
    return 0;
#else
    /* AVX2: 6 vectors per channel make 3 rows of 2, 2 of 3 or 1 row of up
     * to 6, so the fewest segments is not the fewest vectors: the split
     * with the fewest vectors computed (lanes past a row's end and rows
     * past the plane's included), plus one per tile for its broadcasts
     * and epilogue. MobileNetV2's 112 columns: 7 segments of 2 whole
     * vectors x 3 rows. */
    long best = 0, best_cost = 0;
    for (long n = NV_MIN; n <= NV_MAX; n++) {
        const long nseg = (ow + n * VL - 1) / (n * VL), c = (ow + nseg - 1) / nseg, v = (c + VL - 1) / VL;
        if (v < NV_MIN || ow - (nseg - 1) * c <= (v - 1) * VL) continue;
        const long R = NACC / v, cost = nseg * ((oh + R - 1) / R) * (R * v + 1);
        if (!best || cost < best_cost) {
            best = nseg, best_cost = cost;
            *cw = c;
            *nv = v;
        }
    }
    return best;
#endif
}

int cv_rows_eligible(const tcc_conv_params *p, const cv_layout *l) {
    long cw, nv;
    const long K = l->taps * (p->c / p->group);
    if (l->taps < TAPS_MIN || (K > K_MAX && (K > K_MAX_WIDE || p->ow < WIDE_OW))) return 0;
    return cr_segments(p->ow, p->oh, &cw, &nv) > 0;
}

void cv_conv_rows(const tcc_conv_params *p, const cv_layout *l, const float *x, const float *wp, float *y,
                  const float *res, const cv_ep *e, long m_base) {
    cr_job j = {.p = p, .l = l, .x = x, .wp = wp, .res = res, .y = y, .e = e, .mg = p->m / p->group,
                .K = l->taps * (p->c / p->group), .m_base = m_base, .over = CR_LOAD_PAST && !l->direct};
    long koff[K_MAX_WIDE > K_MAX ? K_MAX_WIDE : K_MAX]; /* cv_rows_eligible: K is at most that */
    for (long k = 0; k < j.K; k++) koff[k] = (k / l->taps * l->cs + l->off[k % l->taps]) * (long)sizeof(float);
    j.koff = koff;
    j.nseg = cr_segments(p->ow, p->oh, &j.cw, &j.nv);
    j.R = NACC / j.nv;
    j.nrg = (p->oh + j.R - 1) / j.R;
    tcc_cpu_parallel_for(j.nrg, 1, cr_task, &j);
}
#else
int cv_rows_eligible(const tcc_conv_params *p, const cv_layout *l) {
    (void)p;
    (void)l;
    return 0;
}

void cv_conv_rows(const tcc_conv_params *p, const cv_layout *l, const float *x, const float *wp, float *y,
                  const float *res, const cv_ep *e, long m_base) {
    (void)p, (void)l, (void)x, (void)wp, (void)y, (void)res, (void)e, (void)m_base;
}
#endif
