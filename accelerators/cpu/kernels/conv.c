/* 2-D convolution, NCHW / OIHW.
 *
 * Depthwise convolutions run conv_dw.c's kernel; pointwise ones with packed
 * weights (tcc_cpu_conv2d_pw) conv_pw.c's. Everything else runs a
 * direct kernel: per image and group, the input is packed once into phase
 * planes (conv_vec.h: padding, strides and dilations become constant
 * offsets along one flat row of outputs; stride-1 unpadded inputs are used
 * in place), then a register tile of MR output channels x NR vectors of
 * flat outputs accumulates over channels and taps, weights broadcast from
 * the OIHW rows as they are, and the epilogue runs on the tile before it is
 * stored (AVX-512: straight into y even across the dropped columns of flat
 * rows). Pointwise convolutions take their own tile instances (no tap
 * table), go one q tile at a time with the input channels in L1-sized
 * blocks when k is long (partial sums kept per thread between blocks) or m
 * is small, and finish a plane's last few outputs as dot products along k
 * when a masked vector would waste most of its lanes. Strides beyond the
 * phase table fall back to im2col + GEMM. Constant weights on AVX-512 are
 * packed at compile time for conv_ocv.c instead (output channels in the
 * lanes), except pointwise and depthwise convolutions. */
#include <stdatomic.h>

#include "conv_vec.h"

#if defined(__AVX512F__)
#define MR 6 /* 24 accumulators + 4 inputs + 1 broadcast of 32 registers */
#define NR 4
#else
#define MR 4 /* 12 + 3 + 1 of 16 */
#define NR 3
#endif
#define TW (NR * VL)
#define KB_MAX (24 * 1024 / (TW * 4)) /* pointwise: channels of one q tile kept in L1 */
#define L2_BUDGET (512 * 1024) /* bytes of packed input one q-chunk may touch */

static int is_depthwise(const tcc_conv_params *p) { return p->group == p->c && p->m == p->c && p->group > 1; }

static int is_pointwise(const tcc_conv_params *p) {
    return p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->pt == 0 && p->pl == 0 && p->pb == 0 &&
           p->pr == 0 && p->oh == p->h && p->ow == p->w;
}

/* What the generated code reserves (codegen.conv_scratch): the im2col matrix. */
size_t tcc_cpu_conv2d_scratch(const tcc_conv_params *p) {
    if (is_pointwise(p) || is_depthwise(p)) return 0;
    return (size_t)(p->c / p->group) * p->kh * p->kw * p->oh * p->ow;
}

static cv_ep resolve_ep(const tcc_epilogue *ep) {
    cv_ep e = {NULL, 1.f, 0, NULL, TCC_ACT_NONE, 0.f, 0.f};
    if (ep) {
        e.bias = ep->bias;
        e.bias_scale = ep->bias_scale;
        e.bias_scalar = ep->bias_mode == 4;
        e.res = ep->residual;
        e.act = ep->act;
        e.a0 = ep->a0;
        e.a1 = ep->a1;
    }
    return e;
}

/* ---- direct kernel ------------------------------------------------------------ */
typedef struct {
    const tcc_conv_params *p;
    const cv_layout *l;
    const float *x;   /* packed input of this image/group */
    const float *w;   /* this group's weights: mg rows of k */
    float *y;         /* this image/group's first output channel */
    const float *res; /* its residual, or NULL */
    const cv_ep *e;
    long mg, cg, k, m_base; /* m_base: the group's first channel (bias index) */
    long nq, qchunk, nmb, mpb;
    long kb; /* pointwise: q tiles one at a time, k in blocks of kb (0: m tiles sweep the chunk, all of k) */
    long qmain; /* flat outputs the tiles cover; the rest (pointwise, < VL/2) are dot products */
} dk_job;

/* A tile's part of k: [k0, k1); partial sums of earlier blocks come from
 * part (MR rows of TW) unless first, and go back to it unless last. */
typedef struct {
    long k0, k1;
    float *part;
    int first, last;
} dk_kr;

CV_INLINE void dk_accum(const dk_job *j, const float *const wr[MR], long q0, const int nr, const int masked,
                        int rem, vf acc[MR][NR], const dk_kr *kr, const int tm) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 8
        for (int v = 0; v < NR; v++) acc[i][v] = kr->first ? (vf){0} : v_ld(kr->part + i * TW + v * VL);
    const long T = j->l->taps, cs = j->l->cs, *off = j->l->off, K = kr->k1;
    const float *xc = j->x + q0 + kr->k0 / T * cs + (tm == 1 ? off[0] : 0);
    if (tm == 9) {
        /* 3x3, all of k: channels outer, the taps unrolled (no tap counter) */
        for (long k = 0; k < K; k += 9, xc += cs) {
#pragma GCC unroll 9
            for (int tt = 0; tt < 9; tt++) {
                const float *s = xc + off[tt];
                vf xv[NR];
#pragma GCC unroll 8
                for (int v = 0; v < nr; v++)
                    xv[v] = (masked && v == nr - 1) ? v_ld_n(s + v * VL, rem) : v_ld(s + v * VL);
#pragma GCC unroll 8
                for (int i = 0; i < MR; i++) {
                    const float wv = wr[i][k + tt];
#pragma GCC unroll 8
                    for (int v = 0; v < nr; v++) acc[i][v] += xv[v] * wv;
                }
            }
        }
        return;
    }
    long t = kr->k0 % T;
    /* one flat loop over (channel, tap): a nested one makes GCC keep the
     * accumulators in memory around the inner loop; one tap (tm 1): no tap
     * table lookups in the loop */
    for (long k = kr->k0; k < K; k++) {
        const float *s;
        if (tm == 1) {
            s = xc;
            xc += cs;
        } else {
            s = xc + off[t];
            if (++t == T) {
                t = 0;
                xc += cs;
            }
        }
        vf xv[NR];
#pragma GCC unroll 8
        for (int v = 0; v < nr; v++) xv[v] = (masked && v == nr - 1) ? v_ld_n(s + v * VL, rem) : v_ld(s + v * VL);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            const float wv = wr[i][k];
#pragma GCC unroll 8
            for (int v = 0; v < nr; v++) acc[i][v] += xv[v] * wv;
        }
    }
}

/* Epilogue in registers, straight into y: flat outputs are y's own layout
 * when the planes carry no extra columns (wq == ow). */
CV_INLINE void dk_store_flat(const dk_job *j, long m0, int mv, long q0, const int nr, const int masked, int rem,
                             vf acc[MR][NR]) {
    const long ohw = j->p->oh * j->p->ow;
    const cv_ep *e = j->e;
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (i >= mv) break;
        const long m = m0 + i;
        float *y = j->y + m * ohw + q0;
        const float *res = j->res ? j->res + m * ohw + q0 : NULL;
        const float b = cv_bias(e, j->m_base + m);
#pragma GCC unroll 8
        for (int v = 0; v < nr; v++) {
            const int last = masked && v == nr - 1;
            vf a = acc[i][v] + b;
            if (res) a += last ? v_ld_n(res + v * VL, rem) : v_ld(res + v * VL);
            a = cv_act_v(a, e->act, e->a0, e->a1);
            if (last) v_st_n(y + v * VL, a, rem);
            else v_st(y + v * VL, a);
        }
    }
}

#if defined(__AVX512F__)
/* Flat rows with dropped columns (wq > ow), rows of at least one vector: a
 * vector covers the end of one output row and the start of the next, so two
 * masked stores (or loads) per vector put it in place, epilogue in registers. */
CV_INLINE void dk_store_gap(const dk_job *j, long m0, int mv, long q0, const int nr, vf acc[MR][NR]) {
    const long wq = j->l->wq, OW = j->p->ow, OH = j->p->oh, ohw = OH * OW;
    const cv_ep *e = j->e;
    __mmask16 k1[NR], k2[NR];
    long o1[NR], o2[NR];
#pragma GCC unroll 8
    for (int v = 0; v < nr; v++) {
        const long q = q0 + v * VL, oh = q / wq, c = q - oh * wq, st = wq - c; /* lane of the next row's start */
        const long n1 = OW - c < 0 ? 0 : (OW - c < VL ? OW - c : VL);
        k1[v] = (__mmask16)((1u << n1) - 1);
        o1[v] = oh * OW + c;
        k2[v] = 0;
        o2[v] = o1[v];
        if (st < VL && oh + 1 < OH) {
            const long hi = st + OW < VL ? st + OW : VL;
            k2[v] = (__mmask16)(((1u << hi) - 1) & ~((1u << st) - 1));
            o2[v] = (oh + 1) * OW - st;
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (i >= mv) break;
        const long m = m0 + i;
        float *y = j->y + m * ohw;
        const float *res = j->res ? j->res + m * ohw : NULL;
        const float b = cv_bias(e, j->m_base + m);
#pragma GCC unroll 8
        for (int v = 0; v < nr; v++) {
            __m512 a = (__m512)(acc[i][v] + b);
            if (res)
                a = _mm512_add_ps(a, _mm512_mask_loadu_ps(_mm512_maskz_loadu_ps(k1[v], res + o1[v]), k2[v],
                                                          res + o2[v]));
            a = (__m512)cv_act_v((vf)a, e->act, e->a0, e->a1);
            _mm512_mask_storeu_ps(y + o1[v], k1[v], a);
            _mm512_mask_storeu_ps(y + o2[v], k2[v], a);
        }
    }
}
#endif

/* Tiles whose flat rows carry dropped columns go through tb, row by row. */
static void dk_store_rows(const dk_job *j, long m0, int mv, long q0, long n, float tb[MR][TW], int done) {
    const long ohw = j->p->oh * j->p->ow;
    for (int i = 0; i < mv; i++) {
        const long m = m0 + i;
        if (done) {
            cv_copy_rows(j->l, j->p, j->y + m * ohw, tb[i], q0, n);
        } else {
            cv_store_rows(j->l, j->p, j->y + m * ohw, tb[i], q0, n, cv_bias(j->e, j->m_base + m),
                          j->res ? j->res + m * ohw : NULL, j->e);
        }
    }
}

CV_INLINE void dk_tile(const dk_job *j, long m0, long q0, const int nr, const int masked, int rem, const dk_kr *kr,
                       const int tm) {
    const float *wr[MR];
    int mv = 0;
    for (int i = 0; i < MR; i++) {
        long m = m0 + i < j->mg ? m0 + i : j->mg - 1; /* tail rows repeat the last one, never stored */
        wr[i] = j->w + m * j->k;
        mv += m0 + i < j->mg;
    }
    vf acc[MR][NR];
    dk_accum(j, wr, q0, nr, masked, rem, acc, kr, tm);
    if (!kr->last) {
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 8
            for (int v = 0; v < nr; v++) v_st(kr->part + i * TW + v * VL, acc[i][v]);
        return;
    }
    if (j->l->wq == j->p->ow && cv_vec_act(j->e->act)) {
        dk_store_flat(j, m0, mv, q0, nr, masked, rem, acc);
#if defined(__AVX512F__)
    } else if (j->l->wq >= VL && cv_vec_act(j->e->act)) {
        dk_store_gap(j, m0, mv, q0, nr, acc);
#endif
    } else {
        /* acc must not escape (GCC would then keep it in memory) */
        float tb[MR][TW] __attribute__((aligned(64)));
        const cv_ep *e = j->e;
        const int done = !j->res && cv_vec_act(e->act); /* epilogue in registers: rows are plain copies */
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            const float b = done ? cv_bias(e, j->m_base + (m0 + i < j->mg ? m0 + i : j->mg - 1)) : 0.f;
#pragma GCC unroll 8
            for (int v = 0; v < nr; v++)
                v_st(tb[i] + v * VL, done ? cv_act_v(acc[i][v] + b, e->act, e->a0, e->a1) : acc[i][v]);
        }
        dk_store_rows(j, m0, mv, q0, masked ? (nr - 1) * VL + rem : nr * VL, tb, done);
    }
}

/* Instances per tile width (full, tails of 1..NR vectors) and tap mode tm:
 * 0 any taps (tap table), 1 pointwise, 9 3x3 over all of k. */
#define DK_TILES(sfx, tm)                                                                                           \
    __attribute__((noinline)) static void dk_tile_full##sfx(const dk_job *j, long m0, long q0, const dk_kr *kr) {  \
        dk_tile(j, m0, q0, NR, 0, VL, kr, tm);                                                                      \
    }                                                                                                               \
    DK_TAIL(1, sfx, tm)                                                                                             \
    DK_TAIL(2, sfx, tm)                                                                                             \
    DK_TAIL(3, sfx, tm)                                                                                             \
    DK_TAIL4(sfx, tm)                                                                                               \
    static void dk_tile_any##sfx(const dk_job *j, long m0, long q0, const dk_kr *kr) {                             \
        const long n = j->qmain - q0 < TW ? j->qmain - q0 : TW;                                                     \
        if (n <= 0) return;                                                                                         \
        if (n == TW) {                                                                                              \
            dk_tile_full##sfx(j, m0, q0, kr);                                                                       \
            return;                                                                                                 \
        }                                                                                                           \
        const int nr = (int)((n + VL - 1) / VL), rem = (int)(n - (nr - 1) * VL);                                    \
        switch (nr) {                                                                                               \
        case 1: dk_tile_tail1##sfx(j, m0, q0, rem, kr); break;                                                      \
        case 2: dk_tile_tail2##sfx(j, m0, q0, rem, kr); break;                                                      \
        case 3: dk_tile_tail3##sfx(j, m0, q0, rem, kr); break;                                                      \
        default: DK_CALL4(sfx); break;                                                                              \
        }                                                                                                           \
    }
#define DK_TAIL(n, sfx, tm)                                                                                         \
    __attribute__((noinline)) static void dk_tile_tail##n##sfx(const dk_job *j, long m0, long q0, int rem,         \
                                                               const dk_kr *kr) {                                   \
        dk_tile(j, m0, q0, n, 1, rem, kr, tm);                                                                      \
    }
#if NR > 3
#define DK_TAIL4(sfx, tm) DK_TAIL(4, sfx, tm)
#define DK_CALL4(sfx) dk_tile_tail4##sfx(j, m0, q0, rem, kr)
#else
#define DK_TAIL4(sfx, tm)
#define DK_CALL4(sfx) dk_tile_tail3##sfx(j, m0, q0, rem, kr)
#endif
DK_TILES(_taps, 0)
DK_TILES(_pw, 1)
DK_TILES(_t9, 9)

static void dk_tile_any(const dk_job *j, long m0, long q0, const dk_kr *kr) {
    if (j->l->taps == 1) dk_tile_any_pw(j, m0, q0, kr);
    else if (j->l->taps == 9 && !j->kb) dk_tile_any_t9(j, m0, q0, kr);
    else dk_tile_any_taps(j, m0, q0, kr);
}

/* Pointwise, the last few (< VL/2) outputs of rows [m0, m1) of the plane:
 * one masked vector each would waste most of its lanes over all of k, so
 * they are dot products along k instead (weights rows read as they are,
 * the input columns gathered once). */
static void dk_pw_rest(const dk_job *j, long m0, long m1) {
    const long q0 = j->qmain, nr = j->l->q - q0, K = j->k, cs = j->l->cs, ohw = j->p->oh * j->p->ow;
    const long kp = (K + VL - 1) / VL * VL;
    if (nr <= 0 || m1 <= m0) return;
    float *xc = cv_tls_buffer(0, (size_t)(nr * kp));
    for (long r = 0; r < nr; r++) {
        for (long k = 0; k < K; k++) xc[r * kp + k] = j->x[k * cs + q0 + r];
        for (long k = K; k < kp; k++) xc[r * kp + k] = 0.f;
    }
    const int kt = (int)(K - (kp - VL)); /* lanes of the last k vector */
    for (long m = m0; m < m1; m += 4) {
        const float *wr[4];
        for (int i = 0; i < 4; i++) wr[i] = j->w + (m + i < m1 ? m + i : m1 - 1) * K;
        for (long r = 0; r < nr; r++) {
            const float *xr = xc + r * kp;
            /* two chains per row (even and odd k vectors): eight in flight */
            vf acc[4][2] = {{{0}, {0}}, {{0}, {0}}, {{0}, {0}}, {{0}, {0}}};
            long k = 0;
            for (; k + 2 * VL < K; k += 2 * VL) {
                const vf x0 = v_ld(xr + k), x1 = v_ld(xr + k + VL);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    acc[i][0] += v_ld(wr[i] + k) * x0;
                    acc[i][1] += v_ld(wr[i] + k + VL) * x1;
                }
            }
            for (; k + VL < K; k += VL) {
                const vf xv = v_ld(xr + k);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) acc[i][0] += v_ld(wr[i] + k) * xv;
            }
            const vf xv = v_ld(xr + k);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) acc[i][1] += v_ld_n(wr[i] + k, kt) * xv;
            float sums[4];
#if defined(__AVX512F__)
            __m256 h[4];
            for (int i = 0; i < 4; i++) {
                __m512 a = (__m512)(acc[i][0] + acc[i][1]);
                h[i] = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
            }
            const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
            _mm_storeu_ps(sums, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
#else
            for (int i = 0; i < 4; i++) {
                const vf a = acc[i][0] + acc[i][1];
                sums[i] = 0.f;
                for (int l = 0; l < VL; l++) sums[i] += a[l];
            }
#endif
            for (int i = 0; i < 4 && m + i < m1; i++) {
                const long mi = m + i, o = mi * ohw + q0 + r;
                float sum = sums[i] + cv_bias(j->e, j->m_base + mi) + (j->res ? j->res[o] : 0.f);
                if (cv_vec_act(j->e->act)) j->y[o] = cv_act_v((vf){0} + sum, j->e->act, j->e->a0, j->e->a1)[0];
                else cv_ep_run(j->y + o, &sum, 1, 0.f, NULL, j->e);
            }
        }
    }
}

/* One item: a block of m tiles over one chunk of q tiles; the chunk's input
 * stays in L2 while the m tiles sweep it, each m tile's weights stay in
 * L1/L2 while it sweeps the chunk. */
static void dk_task(void *arg, long b, long e) {
    const dk_job *j = arg;
    const long nm = (j->mg + MR - 1) / MR;
    for (long it = b; it < e; it++) {
        long qc = it / j->nmb, mb = it % j->nmb;
        long qt0 = qc * j->qchunk, qt1 = qt0 + j->qchunk < j->nq ? qt0 + j->qchunk : j->nq;
        long mt0 = mb * j->mpb, mt1 = mt0 + j->mpb < nm ? mt0 + j->mpb : nm;
        if (!j->kb) {
            const dk_kr kr = {0, j->k, NULL, 1, 1};
            for (long mt = mt0; mt < mt1; mt++)
                for (long qt = qt0; qt < qt1; qt++) dk_tile_any(j, mt * MR, qt * TW, &kr);
            if (qt1 == j->nq) dk_pw_rest(j, mt0 * MR, mt1 * MR < j->mg ? mt1 * MR : j->mg);
            continue;
        }
        /* pointwise: one q tile at a time, its input one block of channels
         * at a time (kept in L1 while every m tile of the block reads it) */
        float *part = cv_tls_buffer(1, (size_t)(mt1 - mt0) * MR * TW);
        for (long qt = qt0; qt < qt1; qt++)
            for (long k0 = 0; k0 < j->k; k0 += j->kb) {
                dk_kr kr = {k0, k0 + j->kb < j->k ? k0 + j->kb : j->k, NULL, k0 == 0, k0 + j->kb >= j->k};
                for (long mt = mt0; mt < mt1; mt++) {
                    kr.part = part + (mt - mt0) * MR * TW;
                    dk_tile_any(j, mt * MR, qt * TW, &kr);
                }
            }
        if (qt1 == j->nq) dk_pw_rest(j, mt0 * MR, mt1 * MR < j->mg ? mt1 * MR : j->mg);
    }
}

/* Splits q into chunks whose input fits the L2 budget and, when the chunks
 * alone do not spread evenly over the threads, m into one block per thread. */
static void dk_schedule(dk_job *j, long in_bytes) {
    const int nt = tcc_cpu_num_threads();
    const long nm = (j->mg + MR - 1) / MR;
    j->nq = (j->l->q + TW - 1) / TW;
    long nqc = (in_bytes + L2_BUDGET - 1) / L2_BUDGET;
    if (nqc < 1) nqc = 1;
    if (nqc > j->nq) nqc = j->nq;
    if (nt > 1 && nqc > 1) nqc = (nqc + nt - 1) / nt * nt;
    j->qchunk = (j->nq + nqc - 1) / nqc;
    nqc = (j->nq + j->qchunk - 1) / j->qchunk;
    j->nmb = (nt > 1 && nqc % nt != 0) ? nt : 1;
    if (j->nmb > nm) j->nmb = nm;
    j->mpb = (nm + j->nmb - 1) / j->nmb;
    j->nmb = (nm + j->mpb - 1) / j->mpb;
}

static void conv_direct(const tcc_conv_params *p, const cv_layout *l, const float *x, const float *w, float *y,
                        float *scratch, const cv_ep *e) {
    const long G = p->group, cg = p->c / G, mg = p->m / G, k = cg * l->taps;
    const long ohw = p->oh * p->ow, hw = p->h * p->w;
    float *xp = NULL;
    if (!l->direct) {
        size_t need = (size_t)cg * l->cs;
        xp = need <= tcc_cpu_conv2d_scratch(p) ? scratch : cv_tls_buffer(0, need);
    }
    for (long n = 0; n < p->n; n++) {
        for (long g = 0; g < G; g++) {
            const float *xg = x + (n * p->c + g * cg) * hw;
            if (!l->direct) {
                cv_pack_all(l, p, xg, xp, cg);
            }
            long yoff = (n * p->m + g * mg) * ohw;
            dk_job j = {p, l, l->direct ? xg : xp, w + g * mg * k, y + yoff, e->res ? e->res + yoff : NULL, e,
                        mg, cg, k, g * mg, 0, 0, 0, 0, 0, l->q};
            dk_schedule(&j, cg * l->cs * (long)sizeof(float));
            if (l->taps == 1 && l->direct) {
                /* dot products: about k/VL FMAs and a reduction per output, against
                 * k FMAs for the whole masked vector */
                const long rest = l->q % VL;
                if (rest && rest * (k / VL + 32) < k) j.qmain = l->q - rest;
                /* q tile by q tile when k does not fit in L1 or m is small (the
                 * tile's input read once); else m tiles sweeping contiguous q
                 * store better (rows written in long runs) */
                long nkb = (k + KB_MAX - 1) / KB_MAX;
                if (nkb > 1) j.kb = (k + nkb - 1) / nkb;
                else if (mg <= 4 * MR) j.kb = k;
            }
            tcc_cpu_parallel_for(((j.nq + j.qchunk - 1) / j.qchunk) * j.nmb, 1, dk_task, &j);
        }
    }
}

/* ---- fallback: im2col + GEMM (strides beyond the phase table) ------------------- */
typedef struct {
    const tcc_conv_params *p;
    const float *x; /* one image, group's first channel */
    float *col;
} im2col_job;

static void im2col_task(void *arg, long b, long e) {
    im2col_job *j = arg;
    const tcc_conv_params *p = j->p;
    const long ohw = p->oh * p->ow;
    for (long r = b; r < e; r++) {
        long c = r / (p->kh * p->kw), ij = r % (p->kh * p->kw), ki = ij / p->kw, kj = ij % p->kw;
        const float *src = j->x + c * p->h * p->w;
        float *dst = j->col + r * ohw;
        for (long oh = 0; oh < p->oh; oh++) {
            long ih = oh * p->sh - p->pt + ki * p->dh;
            for (long ow = 0; ow < p->ow; ow++) {
                long iw = ow * p->sw - p->pl + kj * p->dw;
                int in = ih >= 0 && ih < p->h && iw >= 0 && iw < p->w;
                dst[oh * p->ow + ow] = in ? src[ih * p->w + iw] : 0.f;
            }
        }
    }
}

static void conv_im2col(const tcc_conv_params *p, const float *x, const float *w, float *y, float *scratch,
                        const tcc_epilogue *ep) {
    const long G = p->group, cg = p->c / G, mg = p->m / G, k = cg * p->kh * p->kw, ohw = p->oh * p->ow;
    float *col = cv_tls_buffer(0, (size_t)k * ohw);
    (void)scratch;
    for (long n = 0; n < p->n; n++) {
        for (long g = 0; g < G; g++) {
            im2col_job j = {p, x + (n * p->c + g * cg) * p->h * p->w, col};
            tcc_cpu_parallel_for(k, 4, im2col_task, &j);
            tcc_epilogue e2, *pe = NULL;
            if (ep) {
                e2 = *ep;
                if (e2.bias && e2.bias_mode != 4) e2.bias += g * mg;
                if (e2.residual) e2.residual += (n * p->m + g * mg) * ohw;
                if (e2.act == TCC_ACT_QDQ8) e2.act = TCC_ACT_NONE; /* the GEMM's epilogues have no pair: after */
                pe = &e2;
            }
            float *yg = y + (n * p->m + g * mg) * ohw;
            tcc_cpu_gemm(0, 0, mg, ohw, k, 1.f, w + g * mg * k, k, col, ohw, yg, ohw, pe);
            if (ep && ep->act == TCC_ACT_QDQ8) {
                const cv_ep e = resolve_ep(ep);
                cv_ep_run(yg, yg, mg * ohw, 0.f, NULL, &e); /* bias and residual are in already */
            }
        }
    }
}

void tcc_cpu_conv2d(const tcc_conv_params *p, const float *x, const float *w, float *y, float *scratch,
                    const tcc_epilogue *ep) {
    long off_stack[64], *off = p->kh * p->kw <= 64 ? off_stack : malloc(p->kh * p->kw * sizeof(long));
    cv_layout l;
    if (cv_layout_init(&l, p, off)) {
        cv_ep e = resolve_ep(ep);
        if (is_depthwise(p)) cv_depthwise(p, &l, x, w, y, &e);
        else conv_direct(p, &l, x, w, y, scratch, &e);
    } else {
        conv_im2col(p, x, w, y, scratch, ep);
    }
    if (off != off_stack) free(off);
}

void tcc_cpu_conv2d_pw(const tcc_conv_params *p, const float *x, const float *wp, float *y, const tcc_epilogue *ep) {
    cv_ep e = resolve_ep(ep);
    cv_pointwise(p, x, wp, y, &e);
}

void tcc_cpu_conv2d_pw_split_c(const tcc_conv_params *p, const float *x, const float *wp, float *y,
                               const tcc_epilogue *ep) {
    cv_ep e = resolve_ep(ep);
    cv_pointwise_split_c(p, x, wp, y, &e);
}

/* ---- strided 1x1 ---------------------------------------------------------------
 * A 1x1 convolution with strides and no padding (ResNet's downsampling
 * shortcuts) is a pointwise one over its input's subsampled positions: the
 * image is subsampled into scratch (C x OH x OW, a quarter of the input at
 * stride 2), then conv_pw.c's kernel runs. */
typedef struct {
    const tcc_conv_params *p;
    const float *x;
    float *xs;
} pw_sub_job;

static void pw_sub_task(void *arg, long b, long e) {
    const pw_sub_job *j = arg;
    const tcc_conv_params *p = j->p;
    for (long c = b; c < e; c++) {
        const float *src = j->x + c * p->h * p->w;
        float *dst = j->xs + c * p->oh * p->ow;
        for (long i = 0; i < p->oh; i++) {
            const float *r = src + i * p->sh * p->w;
            for (long k = 0; k < p->ow; k++) dst[i * p->ow + k] = r[k * p->sw];
        }
    }
}

void tcc_cpu_conv2d_pw_strided(const tcc_conv_params *p, const float *x, const float *wp, float *y, float *scratch,
                               const tcc_epilogue *ep) {
    const long ohw = p->oh * p->ow;
    tcc_conv_params q = *p;
    q.n = 1;
    for (long n = 0; n < p->n; n++) {
        pw_sub_job j = {p, x + n * p->c * p->h * p->w, scratch};
        tcc_cpu_parallel_for(p->c, 1, pw_sub_task, &j);
        cv_ep e = resolve_ep(ep);
        if (e.res) e.res += n * p->m * ohw;
        cv_pointwise(&q, scratch, wp, y + n * p->m * ohw, &e);
    }
}

/* A depthwise call prepared for the fused kernels; l, off and ed must outlive d. */
static void prepare_dw(cv_dw *d, cv_layout *l, long *off, const tcc_conv_params *pd, const float *wd,
                       const cv_ep *ed) {
    cv_layout_init(l, pd, off); /* codegen fuses only depthwise convolutions the phase table covers */
    cv_dw_init(d, pd, l, wd, ed);
}

void tcc_cpu_conv2d_pw_dw(const tcc_conv_params *pp, const float *x, const float *wp, const tcc_epilogue *epp,
                          const tcc_conv_params *pd, const float *wd, float *y, const tcc_epilogue *epd) {
    long off[64];
    cv_layout l;
    cv_dw d;
    const cv_ep ep = resolve_ep(epp), ed = resolve_ep(epd);
    prepare_dw(&d, &l, off, pd, wd, &ed);
    cv_pointwise_depthwise(pp, x, wp, &ep, &d, y);
}

static _Atomic int g_q8dw_apart;
int tcc_cpu_conv2d_q8_dw_apart(int on) {
    return atomic_exchange(&g_q8dw_apart, on);
}

void tcc_cpu_conv2d_q8_dw(const int64_t *p, const float *qp, const float *x, const void *wq, const float *scale,
                          const float *bias, const tcc_conv_params *pd, const float *wd, float *y,
                          const tcc_epilogue *epd, tcc_conv_q8_fn q8) {
    const cv_ep ed = resolve_ep(epd);
    if (!g_q8dw_apart && cv_q8dw(p, qp, x, wq, scale, bias, pd, wd, &ed, y)) return;
    /* apart: a CPU without VNNI running an artifact built on one, another build */
    const size_t mid = (size_t)(pd->n * pd->c * pd->h * pd->w), sc = tcc_cpu_conv2d_scratch(pd);
    float *t = malloc(mid * sizeof(float)), *s = sc ? malloc(sc * sizeof(float)) : NULL;
    if (!t || (sc && !s)) abort();
    q8(p, qp, t, x, wq, scale, bias);
    tcc_cpu_conv2d(pd, t, wd, y, s, epd);
    free(s);
    free(t);
}

const char *tcc_cpu_conv2d_q8_dw_path(const int64_t *p, const tcc_conv_params *pd) {
    return !g_q8dw_apart && cv_q8dw_takes(p, pd) ? "fused-vnni" : "apart";
}

void tcc_cpu_conv2d_dw_pw(const tcc_conv_params *pd, const float *x, const float *wd, const tcc_epilogue *epd,
                          const tcc_conv_params *pq, const float *wq, float *y, const tcc_epilogue *epq) {
    long off[64];
    cv_layout l;
    cv_dw d;
    const cv_ep ed = resolve_ep(epd), eq = resolve_ep(epq);
    prepare_dw(&d, &l, off, pd, wd, &ed);
    cv_depthwise_pointwise(&d, x, pq, wq, &eq, y);
}
