/* Depthwise convolution (group == c == m), one channel plane per step.
 *
 * AVX2 and AVX-512 builds run "same" 3x3 stride-1 planes (pads of 1) as
 * row tiles on the plane in place (dw3_*: zero rows above and below, lane
 * masks at the row ends). AVX-512 builds also read the input in place for
 * the other common shapes: stride 1 with the output the input's size (dwf_*:
 * the plane swept flat, taps outside it masked to zero) and column stride 2
 * with 3 taps per row (dws2_*: even/odd splits of the row in registers);
 * 3x3 stride-1 planes of other pads, on rows of 48 columns or more, run
 * the same row tiles packed, as the 16-register builds do on any.
 * Otherwise the plane is packed into per-thread phase planes (conv_vec.h;
 * stride-1 unpadded planes are read in place; the padding is zeroed once
 * per task), then each output row is swept in vectors. The sweeps keep DG
 * independent vectors in flight (short rows would otherwise leave one FMA
 * chain latency-bound), the row tiles R rows of accumulators. Taps are
 * shifted loads times a broadcast weight, and the epilogue is applied in
 * registers before a (masked) store straight into y.
 *
 * A call is prepared once (cv_dw_init: the path and its tables), then any
 * plane runs on its own (cv_dw_plane), so conv_pw.c's fused pointwise ->
 * depthwise kernel feeds planes it has just computed into L2. */
#include "conv_vec.h"

#define DG 4 /* output vectors in flight: independent FMA chains (AVX2: 8 measured no faster) */


/* One channel plane's state while its outputs are computed. */
typedef struct {
    const float *xp, *w, *res;
    const long *off;
    float *y;
    long taps;
    float bias;
    const cv_ep *e;
    long q[DG], yo[DG]; /* flat input index, output index of each vector */
    int n[DG];          /* valid lanes (0: unused slot) */
    int cnt;
    int full; /* whole-vector loads (dw_group_body) */
} dw_plane;

/* n lanes, n in [0, VL]; full vectors take the plain load off AVX-512. */
CV_INLINE vf ld_m(const float *p, int n) {
#if defined(__AVX512F__)
    return v_ld_n(p, n);
#else
    return n >= VL ? v_ld(p) : v_ld_n(p, n);
#endif
}
CV_INLINE void st_m(float *p, vf v, int n) {
#if defined(__AVX512F__)
    v_st_n(p, v, n);
#else
    if (n >= VL) v_st(p, v);
    else v_st_n(p, v, n);
#endif
}

/* full: every load a whole vector (a packed plane with slack after it,
 * cv_dw_pack_buffer), else lanes past the row's end masked. Variants per
 * flag and not a test per load: with the test GCC kept branches and
 * per-load mask arithmetic in the tap loop (AVX2: most of the depthwise
 * time, MobileNetV2's 112x112 block at 7x onnxruntime's time). */
CV_INLINE void dw_group_body(const dw_plane *d, const long taps, const int full) {
    vf acc[DG];
#pragma GCC unroll 8
    for (int g = 0; g < DG; g++) acc[g] = (vf){0};
#pragma GCC unroll 9
    for (long t = 0; t < taps; t++) {
        const float *s = d->xp + d->off[t];
        const float wv = d->w[t];
#pragma GCC unroll 8
        for (int g = 0; g < DG; g++) acc[g] += (full ? v_ld(s + d->q[g]) : ld_m(s + d->q[g], d->n[g])) * wv;
    }
    /* read once, before the first store (y may alias them: dw3_ep) */
    const cv_ep *e = d->e;
    const int act = cv_vec_act(e->act) ? e->act : TCC_ACT_NONE; /* others: a pass over the plane after */
    const float a0 = e->a0, a1 = e->a1, *const res = d->res;
    float *const y = d->y;
    const vf bias = (vf){0} + d->bias;
    long yo[DG];
    int n[DG];
#pragma GCC unroll 8
    for (int g = 0; g < DG; g++) yo[g] = d->yo[g], n[g] = d->n[g];
#pragma GCC unroll 8
    for (int g = 0; g < DG; g++) {
        if (!n[g]) continue; /* an unused slot (q 0: in bounds) */
        vf a = acc[g] + bias;
        if (res) a += ld_m(res + yo[g], n[g]);
        st_m(y + yo[g], cv_act_v(a, act, a0, a1), n[g]);
    }
}

static void dw_group_3x3(const dw_plane *d) { dw_group_body(d, 9, 0); }
static void dw_group_any(const dw_plane *d) { dw_group_body(d, d->taps, 0); }
#if !defined(__AVX512F__)
static void dw_group_3x3_full(const dw_plane *d) { dw_group_body(d, 9, 1); }
static void dw_group_any_full(const dw_plane *d) { dw_group_body(d, d->taps, 1); }
#endif

static void dw_flush(dw_plane *d) {
    if (!d->cnt) return;
    for (int g = d->cnt; g < DG; g++) {
        d->q[g] = d->yo[g] = 0;
        d->n[g] = 0;
    }
#if !defined(__AVX512F__)
    if (d->full) {
        if (d->taps == 9) dw_group_3x3_full(d);
        else dw_group_any_full(d);
    } else
#endif
    if (d->taps == 9) dw_group_3x3(d);
    else dw_group_any(d);
    d->cnt = 0;
}

/* Output rows [r0, r1) in vectors of VL columns, DG vectors per step. */
static void dw_run_plane(dw_plane *d, const cv_layout *l, const tcc_conv_params *p, long r0, long r1) {
    d->cnt = 0;
    for (long oh = r0; oh < r1; oh++) {
        for (long c0 = 0; c0 < p->ow; c0 += VL) {
            int g = d->cnt++;
            d->q[g] = oh * l->wq + c0;
            d->yo[g] = oh * p->ow + c0;
            d->n[g] = p->ow - c0 < VL ? (int)(p->ow - c0) : VL;
            if (d->cnt == DG) dw_flush(d);
        }
    }
    dw_flush(d);
}

/* ---- packed, 3x3, stride 1, no dilation: rows in registers -------------------
 * A tile is D3_R output rows x D3_NV vectors along them, so each of the R + 2
 * input rows' 3 shifted loads feeds every output row it is a tap row of.
 * Loads are whole vectors from the packed plane (its padding columns, the
 * next row, or the buffer's slack past its end: never stored).
 * A call runs a band of rows, its 9 weights broadcast once into registers
 * (with them reloaded per tile, 3 x 2 had been the best AVX2 tile: 6
 * accumulators + 9 weights in the 16 registers). AVX2 and AVX-512: 4 rows
 * x 1 vector; AMD EPYC Zen 4, 1 thread, one-op models, AVX2 against 3 x 2:
 * 32 channels at 112x112 0.181 -> 0.178 ms, 144 at 56x56 0.23-0.24 ->
 * 0.21, 192 at 28x28 0.110 -> 0.096 (3 x 1, 2 x 2, 2 x 3, 4 x 2 within
 * 0.97-1.1x of 4 x 1); AVX-512 3 x 1, 2 x 2, 4 x 2 and 3 x 3 2-15 % slower,
 * and from 5 rows GCC kept the tile in memory. SSE2: 4 x 2 (0.95x 2 x 4's
 * time). AVX-512 runs them only on rows of at least D3_MIN_OW columns. */
#if defined(__AVX512F__) || defined(__AVX2__)
#define D3_R 4
#define D3_NV 1
#else
#define D3_R 4
#define D3_NV 2
#endif
/* The epilogue's parameters, read once per band of tiles: read in the tile,
 * GCC reloaded them (and tested the activation again) after every store,
 * since y may alias them: ~15 instructions an output vector against the 9
 * multiply-adds it takes. */
typedef struct {
    const float *res;
    float *y;
    vf bias;
    int act;
    float a0, a1;
} dw3_ep;

/* lanes [lo, hi) of p (0 <= lo <= hi <= VL), the rest 0 (masked-off lanes
 * never fault) */
CV_INLINE vf dw3_ld_lanes(const float *p, long lo, long hi) {
#if defined(__AVX512F__)
    return (vf)_mm512_maskz_loadu_ps((__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1)), p);
#elif defined(__AVX2__)
    const __m256i l = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m = _mm256_and_si256(_mm256_cmpgt_epi32(l, _mm256_set1_epi32((int)lo - 1)),
                                       _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), l));
    return (vf)_mm256_maskload_ps(p, m);
#else
    vf v = {0};
    for (long i = lo; i < hi; i++) v[i] = p[i];
    return v;
#endif
}

/* R output rows from oh x NV vectors from column c0 (the last with `last`
 * output lanes). rows[i]: tap row i of the band (input row oh - 1 + i):
 * packed, output column c's tap column kj is rows[i][c + kj]; in place,
 * rows[i][c + kj - 1]. edge (in place only): some tap column lies outside
 * the plane's [0, OW) columns, those lanes load masked as zero; else whole
 * vectors (a packed plane's padding, the next row, or its buffer's slack:
 * never stored). */
CV_INLINE void dw3_tile(const float *const *rows, const vf *w, const dw3_ep *ep, long OW, long oh, long c0,
                        const int R, const int NV, int last, const int edge, const int inplace) {
    vf acc[D3_R][D3_NV];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[r][v] = (vf){0};
#pragma GCC unroll 6
    for (int i = 0; i < R + 2; i++) {
        const float *s = rows[i] + c0 - inplace;
#pragma GCC unroll 3
        for (int kj = 0; kj < 3; kj++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                vf xv;
                if (edge) { /* lane l reads input column c0 + v VL + kj - 1 + l */
                    const long c = c0 + v * VL;
                    const long lo = 1 - kj - c > 0 ? 1 - kj - c : 0, hi = OW - c - kj + 1 < VL ? OW - c - kj + 1 : VL;
                    xv = dw3_ld_lanes(s + v * VL + kj, lo, hi);
                } else
                    xv = v_ld(s + v * VL + kj);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++)
                    if (i - r >= 0 && i - r < 3) acc[r][v] += xv * w[(i - r) * 3 + kj];
            }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const long o = (oh + r) * OW + c0 + v * VL;
            const int n = v == NV - 1 ? last : VL;
            vf a = acc[r][v] + ep->bias;
            if (ep->res) a += ld_m(ep->res + o, n);
            st_m(ep->y + o, cv_act_v(a, ep->act, ep->a0, ep->a1), n);
        }
}

/* R output rows from oh of channel plane x, every vector along them, the
 * weights in registers throughout. Packed (x the packed plane, wq floats a
 * row): tiles of D3_NV vectors, then the row's rest (nv vectors). In place
 * (x the input plane; one vector a tile: AVX2 and AVX-512): tap rows
 * outside the plane read d->zr, and the first and last vectors, whose taps
 * reach past the row's ends, load masked. */
CV_INLINE void dw3_band(const cv_dw *d, const float *x, long wq, const float *wt, float *y, const float *res,
                        float bias, long oh, const int R, const int inplace) {
    const tcc_conv_params *p = d->p;
    const long OW = p->ow;
    vf w[9];
#pragma GCC unroll 9
    for (int t = 0; t < 9; t++) w[t] = (vf){0} + wt[t];
    const cv_ep *e = d->e;
    const dw3_ep ep = {res, y, (vf){0} + bias, cv_vec_act(e->act) ? e->act : TCC_ACT_NONE, e->a0, e->a1};
    const float *rows[D3_R + 2];
#pragma GCC unroll 6
    for (int i = 0; i < R + 2; i++) {
        const long ri = oh - 1 + i;
        rows[i] = inplace ? (ri >= 0 && ri < p->h ? x + ri * p->w : d->zr) : x + (oh + i) * wq;
    }
    long c0 = 0;
    if (inplace) {
        if (OW <= VL) {
            dw3_tile(rows, w, &ep, OW, oh, 0, R, 1, (int)OW, 1, inplace);
            return;
        }
        dw3_tile(rows, w, &ep, OW, oh, 0, R, 1, VL, 1, inplace);
        for (c0 = VL; c0 + VL + 1 <= OW; c0 += VL) dw3_tile(rows, w, &ep, OW, oh, c0, R, 1, VL, 0, inplace);
        for (; c0 < OW; c0 += VL)
            dw3_tile(rows, w, &ep, OW, oh, c0, R, 1, OW - c0 < VL ? (int)(OW - c0) : VL, 1, inplace);
        return;
    }
    for (; c0 + D3_NV * VL <= OW; c0 += D3_NV * VL) dw3_tile(rows, w, &ep, OW, oh, c0, R, D3_NV, VL, 0, inplace);
    if (c0 < OW) {
        const long nv = (OW - c0 + VL - 1) / VL;
        const int last = (int)(OW - c0 - (nv - 1) * VL);
#pragma GCC unroll 4
        for (int v = 1; v <= D3_NV; v++)
            if (nv == v) dw3_tile(rows, w, &ep, OW, oh, c0, R, v, last, 0, inplace);
    }
}

typedef void (*dw3_fn)(const cv_dw *, const float *, long, const float *, float *, const float *, float, long);
#define DW3(R, IP, NAME)                                                                                        \
    static void NAME(const cv_dw *d, const float *x, long wq, const float *wt, float *y, const float *res,      \
                     float bias, long oh) {                                                                     \
        dw3_band(d, x, wq, wt, y, res, bias, oh, R, IP);                                                        \
    }
DW3(1, 0, dw3_1) DW3(2, 0, dw3_2) DW3(3, 0, dw3_3) DW3(4, 0, dw3_4)
#if defined(__AVX2__)
DW3(1, 1, dw3i_1) DW3(2, 1, dw3i_2) DW3(3, 1, dw3i_3) DW3(4, 1, dw3i_4)
static const dw3_fn dw3_bands[2][D3_R] = {{dw3_1, dw3_2, dw3_3, dw3_4}, {dw3i_1, dw3i_2, dw3i_3, dw3i_4}};
#else
static const dw3_fn dw3_bands[1][D3_R] = {{dw3_1, dw3_2, dw3_3, dw3_4}};
#endif

static int dw3_fits(const tcc_conv_params *p) {
    return p->kh == 3 && p->kw == 3 && p->sh == 1 && p->sw == 1 && p->dh == 1 && p->dw == 1;
}

/* Output rows [r0, r1) of channel plane x: in place (AVX2, AVX-512), or
 * packed (wq floats a row). */
static void dw3_rows(const cv_dw *d, const float *x, long wq, const int inplace, const float *w, float *y,
                     const float *res, float bias, long r0, long r1) {
    for (long oh = r0; oh < r1; oh += D3_R)
        dw3_bands[inplace][(r1 - oh < D3_R ? r1 - oh : D3_R) - 1](d, x, wq, w, y, res, bias, oh);
}

#if defined(__AVX2__)
/* ---- the same tiles, the plane read in place: 3x3, stride 1, pads 1 ---------
 * A "same" 3x3 depthwise convolution (MobileNets' stride-1 layers) needs no
 * packed copy: tap rows outside the plane read a zero row (zr), and only a
 * row's first and last vectors, whose shifted loads would reach past the
 * row's ends, load through lane masks (masked-off lanes never fault).
 * Packing was a quarter of the packed tiles' time on MobileNetV2's 112x112
 * plane. AMD EPYC Zen 4, 1 thread, one-op models, packed -> in place: AVX2
 * 32 channels at 112x112 0.175 -> 0.130 ms, 144 at 56x56 0.21 -> 0.15,
 * 192 at 28x28 0.096 -> 0.066, 384 at 14x14 0.067 -> 0.047, 960 at 7x7
 * 0.071 -> 0.043; AVX-512 against its own best (packed rows from 48
 * columns, else the flat sweep): 0.134 -> 0.098, 0.186 -> 0.132, 0.074 ->
 * 0.055, 0.044 -> 0.036, and at 7x7 0.044 against the sweep's 0.041, whose
 * vectors run across row ends: AVX-512 keeps it below DWI_MIN_OW columns. */
#if defined(__AVX512F__)
#define DWI_MIN_OW 12
#else
#define DWI_MIN_OW 1
#endif
static int dw3_inplace_fits(const tcc_conv_params *p) {
    return dw3_fits(p) && p->pt == 1 && p->pl == 1 && p->oh == p->h && p->ow == p->w;
}
#endif

#if defined(__AVX512F__)
/* AVX-512: the row tiles or the in-place flat sweep (dwf_plane), which packs
 * nothing and fills every lane across row ends. AMD EPYC Zen 4, 1 thread,
 * one-op models (flat -> rows): 32 channels at 112x112 0.194 -> 0.133 ms,
 * 144 at 56x56 0.200 -> 0.175; 192 at 28x28 0.073 -> 0.077-0.082, 384 at
 * 14x14 0.044 -> 0.056, 960 at 7x7 0.041-0.057 -> 0.076. */
#define D3_MIN_OW 48
static int dw3_over_flat(const tcc_conv_params *p) { return dw3_fits(p) && p->ow >= D3_MIN_OW; }
#endif

static void dw_packed_rows(const cv_dw *d, const float *x, long c, float *y, const float *res, long r0, long r1,
                           float *pack) {
    const tcc_conv_params *p = d->p;
    const cv_layout *l = d->l;
    dw_plane s;
    s.off = l->off;
    s.taps = l->taps;
    s.e = d->e;
    s.xp = x;
    if (pack) {
        /* the input rows the band reads: a band of a fused depthwise ->
         * pointwise call costs its rows, not the whole plane */
        cv_pack_rows(l, p, x, pack, r0 * p->sh - p->pt, (r1 - 1) * p->sh - p->pt + (p->kh - 1) * p->dh + 1);
        s.xp = pack;
    }
    s.w = d->w + c * l->taps;
    s.y = y;
    s.res = res;
    s.bias = cv_bias(d->e, c);
    if (pack && dw3_fits(p)) {
        dw3_rows(d, pack, l->wq, 0, s.w, y, res, s.bias, r0, r1);
        return;
    }
#if !defined(__AVX512F__)
    s.full = pack != NULL;
#else
    s.full = 0; /* AVX-512: masked loads cost what plain ones do */
#endif
    dw_run_plane(&s, l, p, r0, r1);
}

#if defined(__AVX512F__)
/* ---- in place: stride 1, output plane the size of the input -----------------
 * The plane is swept flat as it lies in memory (output q reads input
 * q + off[t] for tap t); lanes whose tap falls outside the plane (padding,
 * or the neighbouring row at a row end) load as zero through per-(vector,
 * tap) masks computed once per call, so nothing is packed and every lane but
 * the plane's last vector's tail is a real output. Masked-off lanes never
 * fault, so reads past the tensor's ends are safe. */
static int dwf_fits(const tcc_conv_params *p) {
    return p->sh == 1 && p->sw == 1 && p->oh == p->h && p->ow == p->w && p->kh * p->kw <= 64 &&
           p->h * p->w < (1L << 22);
}


/* mk[v * taps + t]: lanes of output vector v whose tap t lies in the plane. */
static void dwf_masks(const tcc_conv_params *p, long taps, long nv, __mmask16 *mk) {
    const long H = p->h, W = p->w, HW = H * W;
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 wf = _mm512_set1_ps((float)W);
    const __m512i vH = _mm512_set1_epi32((int)H), vW = _mm512_set1_epi32((int)W);
    for (long v = 0; v < nv; v++) {
        __m512i q = _mm512_add_epi32(_mm512_set1_epi32((int)(v * VL)), iota);
        __mmask16 in = _mm512_cmplt_epi32_mask(q, _mm512_set1_epi32((int)HW));
        /* q + 0.5 and the quotient are far enough from integers for float division */
        __m512 qf = _mm512_add_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(0.5f));
        __m512i r = _mm512_cvttps_epi32(_mm512_div_ps(qf, wf));
        __m512i c = _mm512_sub_epi32(q, _mm512_mullo_epi32(r, vW));
        for (long ki = 0; ki < p->kh; ki++) {
            const __m512i ri = _mm512_add_epi32(r, _mm512_set1_epi32((int)(ki * p->dh - p->pt)));
            const __mmask16 mr = _mm512_mask_cmplt_epu32_mask(in, ri, vH);
            for (long kj = 0; kj < p->kw; kj++) {
                const __m512i ci = _mm512_add_epi32(c, _mm512_set1_epi32((int)(kj * p->dw - p->pl)));
                mk[v * taps + ki * p->kw + kj] = _mm512_mask_cmplt_epu32_mask(mr, ci, vW);
            }
        }
    }
}

/* Lanes of the vector at q inside [qlo, qhi). */
CV_INLINE __mmask16 dwf_window(long q, long qlo, long qhi) {
    const long lo = qlo - q < 0 ? 0 : qlo - q > VL ? VL : qlo - q, hi = qhi - q < 0 ? 0 : qhi - q > VL ? VL : qhi - q;
    return (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

/* Outputs [qlo, qhi) of the plane (the vectors covering them). */
CV_INLINE void dwf_plane(const cv_dw *j, const float *x, const float *w, float *y, const float *res, float bias,
                         const __mmask16 *mk, const long T, long qlo, long qhi) {
    const long nv = (qhi + VL - 1) / VL, *off = j->off;
    const cv_ep *e = j->e;
    const int act = cv_vec_act(e->act) ? e->act : TCC_ACT_NONE;
    const float a0 = e->a0, a1 = e->a1; /* read once: y may alias them (dw3_ep) */
    long v = qlo / VL;
    for (; v + DG <= nv; v += DG) {
        __m512 acc[DG];
#pragma GCC unroll 8
        for (int g = 0; g < DG; g++) acc[g] = _mm512_set1_ps(bias);
#pragma GCC unroll 9
        for (long t = 0; t < T; t++) {
            const float *s = x + v * VL + off[t];
            const __m512 wv = _mm512_set1_ps(w[t]);
#pragma GCC unroll 8
            for (int g = 0; g < DG; g++)
                acc[g] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk[(v + g) * T + t], s + g * VL), wv, acc[g]);
        }
#pragma GCC unroll 8
        for (int g = 0; g < DG; g++) {
            const long q = (v + g) * VL;
            const __mmask16 k = dwf_window(q, qlo, qhi);
            vf a = (vf)acc[g];
            if (res) a += (vf)_mm512_maskz_loadu_ps(k, res + q);
            _mm512_mask_storeu_ps(y + q, k, (__m512)cv_act_v(a, act, a0, a1));
        }
    }
    for (; v < nv; v++) {
        __m512 acc = _mm512_set1_ps(bias);
#pragma GCC unroll 9
        for (long t = 0; t < T; t++)
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk[v * T + t], x + v * VL + off[t]), _mm512_set1_ps(w[t]), acc);
        const long q = v * VL;
        const __mmask16 k = dwf_window(q, qlo, qhi);
        vf a = (vf)acc;
        if (res) a += (vf)_mm512_maskz_loadu_ps(k, res + q);
        _mm512_mask_storeu_ps(y + q, k, (__m512)cv_act_v(a, act, a0, a1));
    }
}

static void dwf_plane_3x3(const cv_dw *j, const float *x, const float *w, float *y, const float *res, float bias,
                          const __mmask16 *mk, long qlo, long qhi) {
    dwf_plane(j, x, w, y, res, bias, mk, 9, qlo, qhi);
}
static void dwf_plane_any(const cv_dw *j, const float *x, const float *w, float *y, const float *res, float bias,
                          const __mmask16 *mk, long qlo, long qhi) {
    dwf_plane(j, x, w, y, res, bias, mk, j->taps, qlo, qhi);
}


/* ---- in place: stride 2 along rows, 3 taps per row --------------------------
 * Output row vectors of VL columns; each tap row loads the 2*VL input
 * columns the vector spans (twice: from the first tap's column and two
 * further) and splits them into even and odd columns (taps 0, 1 and 2).
 * Column masks (per vector position along the row, shared by every row and
 * channel) zero what falls outside the row; a tap row outside the plane
 * reads a zero row instead. DG output rows are in flight at a time. */
#define DWS2_KH 8
static int dws2_fits(const tcc_conv_params *p) { return p->sw == 2 && p->kw == 3 && p->dw == 1 && p->kh <= DWS2_KH; }


/* cm[cv * 4 + i]: lanes of the loads at column 2*cv*VL - pl + {0, VL, 2, VL + 2} inside [0, w). */
static void dws2_masks(const tcc_conv_params *p, long ncv, __mmask16 *cm) {
    static const long adds[4] = {0, VL, 2, VL + 2};
    for (long cv = 0; cv < ncv; cv++)
        for (int i = 0; i < 4; i++) {
            unsigned m = 0;
            for (int l = 0; l < VL; l++) {
                long col = 2 * cv * VL - p->pl + adds[i] + l;
                if (col >= 0 && col < p->w) m |= 1u << l;
            }
            cm[cv * 4 + i] = (__mmask16)m;
        }
}

/* DG output rows from oh0, every vector along them. Tap rows outside the
 * input read zr (a zero row), rows from r1 on (or past the plane's end,
 * which repeat the last one) are not stored: no per-load row masks. */
CV_INLINE void dws2_rows(const cv_dw *j, const float *x, const float *w, float *y, const float *res, float bias,
                         const __mmask16 *cm, const long KH, const long oh0, const long r1) {
    const tcc_conv_params *p = j->p;
    const long H = p->h, W = p->w, OH = p->oh, OW = p->ow, sh = p->sh, dh = p->dh, pt = p->pt;
    const cv_ep *e = j->e;
    const int act = cv_vec_act(e->act) ? e->act : TCC_ACT_NONE;
    const float a0 = e->a0, a1 = e->a1; /* read once: y may alias them (dw3_ep) */
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const float *rows[DWS2_KH][DG];
    for (long ki = 0; ki < KH; ki++)
        for (int g = 0; g < DG; g++) {
            const long ri = (oh0 + g < OH ? oh0 + g : OH - 1) * sh - pt + ki * dh;
            rows[ki][g] = (unsigned long)ri < (unsigned long)H ? x + ri * W : j->zr;
        }
    for (long cv = 0; cv < j->ncv; cv++) {
        const long ow0 = cv * VL, c0 = 2 * ow0 - p->pl;
        const int nout = OW - ow0 < VL ? (int)(OW - ow0) : VL;
        const __mmask16 mA = cm[cv * 4], mB = cm[cv * 4 + 1], mC = cm[cv * 4 + 2], mD = cm[cv * 4 + 3];
        __m512 acc[DG];
#pragma GCC unroll 8
        for (int g = 0; g < DG; g++) acc[g] = _mm512_set1_ps(bias);
#pragma GCC unroll 3
        for (long ki = 0; ki < KH; ki++) {
            const __m512 w0 = _mm512_set1_ps(w[ki * 3]), w1 = _mm512_set1_ps(w[ki * 3 + 1]),
                         w2 = _mm512_set1_ps(w[ki * 3 + 2]);
#pragma GCC unroll 8
            for (int g = 0; g < DG; g++) {
                const float *r = rows[ki][g] + c0;
                __m512 a = _mm512_maskz_loadu_ps(mA, r), b = _mm512_maskz_loadu_ps(mB, r + VL);
                __m512 c = _mm512_maskz_loadu_ps(mC, r + 2), d = _mm512_maskz_loadu_ps(mD, r + VL + 2);
                acc[g] = _mm512_fmadd_ps(_mm512_permutex2var_ps(a, ie, b), w0, acc[g]);
                acc[g] = _mm512_fmadd_ps(_mm512_permutex2var_ps(a, io, b), w1, acc[g]);
                acc[g] = _mm512_fmadd_ps(_mm512_permutex2var_ps(c, ie, d), w2, acc[g]);
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < DG; g++) {
            if (oh0 + g >= r1) break;
            const long o = (oh0 + g) * OW + ow0;
            vf a = (vf)acc[g];
            if (res) a += v_ld_n(res + o, nout);
            v_st_n(y + o, cv_act_v(a, act, a0, a1), nout);
        }
    }
}

/* Output rows [r0, r1). */
CV_INLINE void dws2_plane(const cv_dw *j, const float *x, const float *w, float *y, const float *res, float bias,
                          const __mmask16 *cm, const long KH, long r0, long r1) {
    /* the DG rows' input rows stay in L1 while every vector along them is done */
    for (long oh0 = r0; oh0 < r1; oh0 += DG) dws2_rows(j, x, w, y, res, bias, cm, KH, oh0, r1);
}

static void dws2_plane_3x3(const cv_dw *j, const float *x, const float *w, float *y, const float *res,
                           float bias, const __mmask16 *cm, long r0, long r1) {
    dws2_plane(j, x, w, y, res, bias, cm, 3, r0, r1);
}
static void dws2_plane_any(const cv_dw *j, const float *x, const float *w, float *y, const float *res,
                           float bias, const __mmask16 *cm, long r0, long r1) {
    dws2_plane(j, x, w, y, res, bias, cm, j->p->kh, r0, r1);
}

#endif

enum { DW_PACKED, DW_FLAT, DW_S2, DW_INPLACE3 };

void cv_dw_init(cv_dw *d, const tcc_conv_params *p, const cv_layout *l, const float *w, const cv_ep *e) {
    memset(d, 0, sizeof *d);
    d->p = p;
    d->l = l;
    d->w = w;
    d->e = e;
    d->taps = p->kh * p->kw;
    d->path = DW_PACKED;
#if defined(__AVX2__)
    if (dw3_inplace_fits(p) && p->ow >= DWI_MIN_OW) {
        d->path = DW_INPLACE3;
        /* VL floats before the row (a first vector's masked-off lane) and after it */
        float *zr = cv_tls_buffer(0, (size_t)(p->w + 3 * VL));
        memset(zr, 0, (size_t)(p->w + 3 * VL) * sizeof(float));
        d->zr = zr + VL;
        return;
    }
#endif
#if defined(__AVX512F__)
    if (dwf_fits(p) && !dw3_over_flat(p)) {
        d->path = DW_FLAT;
        d->nv = (p->h * p->w + VL - 1) / VL; /* the output is the input's size */
        __mmask16 *mk = (__mmask16 *)cv_tls_buffer(1, (size_t)(d->nv * d->taps + 1) / 2);
        dwf_masks(p, d->taps, d->nv, mk);
        d->mk = mk;
        for (long ki = 0; ki < p->kh; ki++)
            for (long kj = 0; kj < p->kw; kj++)
                d->off[ki * p->kw + kj] = (ki * p->dh - p->pt) * p->w + kj * p->dw - p->pl;
    } else if (dws2_fits(p)) {
        d->path = DW_S2;
        d->ncv = (p->ow + VL - 1) / VL;
        __mmask16 *cm = (__mmask16 *)cv_tls_buffer(1, (size_t)(d->ncv * 4 + 1) / 2);
        float *zr = cv_tls_buffer(0, (size_t)p->w);
        dws2_masks(p, d->ncv, cm);
        memset(zr, 0, (size_t)p->w * sizeof(float));
        d->mk = cm;
        d->zr = zr;
    }
#endif
}

/* Which path cv_dw_rows takes for a depthwise convolution p (the tests
 * check that each build runs the one documented for it). */
const char *tcc_cpu_conv2d_dw_path(const tcc_conv_params *p) {
    long off[64];
    cv_layout l;
    if (!cv_layout_init(&l, p, off)) return "im2col";
    const cv_ep e = {NULL, 1.f, 0, NULL, TCC_ACT_NONE, 0.f, 0.f};
    cv_dw d;
    cv_dw_init(&d, p, &l, NULL, &e);
    if (d.path == DW_FLAT) return "flat";
    if (d.path == DW_S2) return "s2";
    if (d.path == DW_INPLACE3) return "rows3x3-in-place";
    if (l.direct) return "in-place";
    if (dw3_fits(p)) return "rows3x3";
#if !defined(__AVX512F__)
    return "whole-vectors";
#else
    return "masked";
#endif
}

/* The calling thread's buffer for packed planes, its padding (and slack)
 * zeroed (only the interior is repacked per plane); NULL when planes are read in place. */
float *cv_dw_pack_buffer(const cv_dw *d) {
    if (d->path != DW_PACKED || d->l->direct) return NULL;
    /* slack: whole-vector loads of a plane's last row read up to VL floats past it */
    const size_t n = (size_t)d->l->cs + 2 * VL;
    float *pack = cv_tls_buffer(0, n);
    memset(pack, 0, n * sizeof(float));
    return pack;
}

void cv_dw_rows(const cv_dw *d, const float *x, long c, float *y, const float *res, long r0, long r1, float *pack) {
    const tcc_conv_params *p = d->p;
    const float *w = d->w + c * d->taps, bias = cv_bias(d->e, c);
#if defined(__AVX512F__)
    const __mmask16 *mk = (const __mmask16 *)d->mk;
    if (d->path == DW_FLAT) {
        if (d->taps == 9) dwf_plane_3x3(d, x, w, y, res, bias, mk, r0 * p->ow, r1 * p->ow);
        else dwf_plane_any(d, x, w, y, res, bias, mk, r0 * p->ow, r1 * p->ow);
    } else if (d->path == DW_S2) {
        if (p->kh == 3) dws2_plane_3x3(d, x, w, y, res, bias, mk, r0, r1);
        else dws2_plane_any(d, x, w, y, res, bias, mk, r0, r1);
    } else
#endif
#if defined(__AVX2__)
    if (d->path == DW_INPLACE3) dw3_rows(d, x, 0, 1, w, y, res, bias, r0, r1);
    else
#endif
        dw_packed_rows(d, x, c, y, res, r0, r1, pack);
    (void)bias;
    if (!cv_vec_act(d->e->act)) cv_ep_run(y + r0 * p->ow, y + r0 * p->ow, (r1 - r0) * p->ow, 0.f, NULL, d->e);
}

void cv_dw_plane(const cv_dw *d, const float *x, long c, float *y, const float *res, float *pack) {
    cv_dw_rows(d, x, c, y, res, 0, d->p->oh, pack);
}

typedef struct {
    const cv_dw *d;
    const float *x;
    float *y;
} dw_job;

static void dw_task(void *arg, long b, long e) {
    const dw_job *j = arg;
    const tcc_conv_params *p = j->d->p;
    const long hw = p->h * p->w, ohw = p->oh * p->ow;
    const float *res = j->d->e->res;
    float *pack = cv_dw_pack_buffer(j->d);
    for (long pc = b; pc < e; pc++)
        cv_dw_plane(j->d, j->x + pc * hw, pc % p->c, j->y + pc * ohw, res ? res + pc * ohw : NULL, pack);
}

void cv_depthwise(const tcc_conv_params *p, const cv_layout *l, const float *x, const float *w, float *y,
                  const cv_ep *e) {
    cv_dw d;
    cv_dw_init(&d, p, l, w, e);
    dw_job j = {&d, x, y};
    tcc_cpu_parallel_for(p->n * p->c, 1, dw_task, &j);
}
