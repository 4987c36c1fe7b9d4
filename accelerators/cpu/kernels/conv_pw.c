/* Pointwise convolution (1x1, stride 1, unpadded, one group) against
 * weights packed at compile time (codegen.pack_pw): [ceil(M/8)][C][8],
 * rows past M zero. y[m][q] = sum_c W[m][c] x[c][q] over each image's
 * planes of q = h*w positions.
 *
 * Reading the OIHW rows as they are, a tile of rows broadcasts from several
 * short strided runs: on the late small-plane layers, whose weights are
 * read once per run and come from L3, the prefetchers never caught on (2x
 * slower than with the weights in L2). Packed, a tile of 8 rows reads one
 * contiguous stream.
 *
 * Tiles of TR rows x NR vectors of positions over all of C (the tile's
 * weights stay in L1 while it sweeps a chunk of positions that stays in
 * L2); the epilogue runs in registers before the store. A plane's last
 * P % VL <= 4 positions are dot products with the rows in lanes instead
 * (one masked vector over all of C would waste most of its lanes: 7x7
 * planes are 3 vectors and one position). */
#include "conv_vec.h"

#define PR 8 /* rows per packed block: fixed, so an artifact's layout does not depend on the ISA */
#if defined(__AVX512F__)
#define TR 8 /* 24 accumulators + 3 inputs + 1 broadcast of 32 registers */
#else
#define TR 4 /* 12 + 3 + 1 of 16; a block's halves are two tiles */
#endif
#define NR 3
#define TW (NR * VL)
#define REST_MAX 4
#define RB 4 /* packed blocks per rest pass */
#define PW_PFD 6 /* pw_tile (AVX2): channels ahead of the input prefetch */
/* pw_tile: input channels ahead of the weight prefetch, at least the L3
 * latency ahead (a model's weights come from L3). A 4-row tile (AVX2)
 * takes a quarter of an 8-row one's time a channel: 64 there, not 32, ran
 * MobileNetV2's 7x7 projections 3-8 % faster in the model (AMD EPYC Zen 4,
 * 1 thread: 320 -> 1280 0.49-0.51 -> 0.47 ms). */
#if TR < PR
#define PW_WPFD 64
#else
#define PW_WPFD 32
#endif
#define L2_BUDGET (512 * 1024) /* bytes of one image's input a chunk of positions may touch */
#define PW_L1_COLUMN (32 * 1024) /* pw_block: bytes of a run's input column kept in L1 across a block's tiles */
/* Row blocks (M <= 32) that an AVX2 item runs run by run (pw_cols), a
 * run's input column read from L2 once for all of them, not once a block.
 * AMD EPYC Zen 4, AVX2 library, MobileNetV2 per-call profile: 1 thread
 * 144 -> 24 at 56x56 0.250 -> 0.233 ms, 192 -> 32 at 28x28 0.110 ->
 * 0.098; 2 threads 144 -> 24 0.125 -> 0.114; up to 8 blocks or on
 * AVX-512 (one tile a block) no change. */
#define PW_COLS 4

typedef float v8 __attribute__((vector_size(32)));

typedef struct {
    const float *x, *wp, *res;
    float *y;
    const cv_ep *e;
    long C, M, P;    /* C: the input channels a tile sums over */
    long xs, wc;     /* x's image stride; channels per packed weight block (C unless a slice of them) */
    long ys;         /* output (and residual) row stride: P, or a plane's when P is a band's */
    long qmain;      /* positions the tiles cover; the rest are dot products */
    long qchunk;     /* positions per chunk (a multiple of VL) */
    long nqc, nblk;  /* chunks per image, packed row blocks */
    int pf;          /* prefetch the next tile (pw_full_pf) */
    int cols;        /* an item is a chunk of positions over every row block, run by run (pw_cols) */
} pw_job;

/* y0, res0: the tile's first output row at q0 (rows ys apart), res0 NULL when none. */
CV_INLINE void pw_tile(const pw_job *j, long img, long m0, const float *w, long q0, float *y0, const float *res0,
                       const int nr, const int masked, int rem, const int pf) {
    const long C = j->C, P = j->P;
    const float *x = j->x + img * j->xs + q0;
    vf acc[TR][NR];
#pragma GCC unroll 8
    for (int i = 0; i < TR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NR; v++) acc[i][v] = (vf){0};
    for (long c = 0; c < C; c++, x += P, w += PR) {
        vf xv[NR];
#pragma GCC unroll 4
        for (int v = 0; v < nr; v++) xv[v] = (masked && v == nr - 1) ? v_ld_n(x + v * VL, rem) : v_ld(x + v * VL);
        __builtin_prefetch(w + PW_WPFD * PR); /* a model's weights come from L3: cold, they cost the projections 25 % */
        /* pf 2: the next packed block's line for every other channel, into L2 */
        if (pf == 2 && !(c & 1)) __builtin_prefetch(w + j->wc * PR, 0, 2);
        if (pf == 1)
#pragma GCC unroll 4
            for (int v = 0; v <= NR; v++) __builtin_prefetch(x + TW + v * VL);
#if TR < PR
        else if (!masked) {
            /* the input PW_PFD channels ahead: a 4-row tile's 12 FMAs a
             * channel (6 cycles) left the L2 latency of the next channel's
             * lines exposed where the column is not in L1 (the AVX-512
             * tile does 4x the work a channel and gains nothing). AMD EPYC
             * Zen 4, AVX2 library, 1 thread, one-op models, alternating
             * runs: 320 -> 1280 at 7x7 0.454 -> 0.417 ms, 960 -> 320 at
             * 7x7 0.330 -> 0.299, 576 -> 96 at 14x14 0.217 -> 0.203, 144 ->
             * 24 at 56x56 0.293 -> 0.283; 4 to 8 channels ahead alike, 12
             * worse. */
#pragma GCC unroll 4
            for (int o = 0; o < TW; o += 16) __builtin_prefetch(x + PW_PFD * P + o);
            __builtin_prefetch(x + PW_PFD * P + TW - 1);
        }
#endif
#pragma GCC unroll 8
        for (int i = 0; i < TR; i++) {
            const float wv = w[i];
#pragma GCC unroll 4
            for (int v = 0; v < nr; v++) acc[i][v] += xv[v] * wv;
        }
    }
    const long n = (nr - 1) * VL + rem;
    /* the epilogue's parameters read once, before the first store (y may
     * alias them, so GCC reloaded them after every store: with few input
     * channels, MobileNetV2's 16-channel expansion, the epilogue was a
     * third of the tile's time) */
    const cv_ep *e = j->e;
    const int act = e->act, vact = cv_vec_act(act);
    const float a0 = e->a0, a1 = e->a1;
    float bias[TR];
#pragma GCC unroll 8
    for (int i = 0; i < TR; i++) bias[i] = m0 + i < j->M ? cv_bias(e, m0 + i) : 0.f;
#pragma GCC unroll 8
    for (int i = 0; i < TR; i++) {
        const long m = m0 + i;
        if (m >= j->M) break;
        float *yr = y0 + i * j->ys;
        const float *rr = res0 ? res0 + i * j->ys : NULL;
#pragma GCC unroll 4
        for (int v = 0; v < nr; v++) {
            const int k = masked && v == nr - 1 ? rem : VL;
            vf a = acc[i][v] + bias[i];
            if (rr) a += k < VL ? v_ld_n(rr + v * VL, k) : v_ld(rr + v * VL);
            if (vact) a = cv_act_v(a, act, a0, a1);
            if (k < VL) v_st_n(yr + v * VL, a, k);
            else v_st(yr + v * VL, a);
        }
        if (!vact) cv_ep_run(yr, yr, n, 0.f, NULL, e);
    }
}

__attribute__((noinline)) static void pw_full(const pw_job *j, long img, long m0, const float *w, long q0, float *y0,
                                              const float *res0) {
    pw_tile(j, img, m0, w, q0, y0, res0, NR, 0, VL, 0);
}
/* The same, the next tile's input prefetched along the way: pays when that
 * comes from L3 (an input larger than L2: 5-15 % on those layers), while
 * from L2 it only evicts this tile's input from L1. */
__attribute__((noinline)) static void pw_full_pf(const pw_job *j, long img, long m0, const float *w, long q0,
                                                 float *y0, const float *res0) {
    pw_tile(j, img, m0, w, q0, y0, res0, NR, 0, VL, 1);
}
/* The same, the next packed block's weights brought into L2 along the way
 * (pw_block's first tile of a block). A late layer's weights come from
 * memory, not L3, in a whole model (its 14 MB and the activations between
 * two runs of a layer): MobileNetV2's 7x7 projections took 12 % longer
 * there than in a model of their stage alone, and one-op models 21-29 %
 * longer with 64 MB read between runs. The tile's own prefetch (PW_WPFD
 * channels ahead) at 128 or 256 did not help; this does: AMD EPYC Zen 4,
 * AVX2 library, 1 thread, per-call profile in the model (4 alternating
 * runs): 960 -> 320 at 7x7 0.329-0.340 -> 0.310-0.313 ms, 320 -> 1280
 * 0.461-0.472 -> 0.430-0.435, 960 -> 160 0.166-0.171 -> 0.157-0.158,
 * 576 -> 96 at 14x14 0.209-0.217 -> 0.205-0.210; the whole run 6.95-7.37
 * -> 6.94-7.07 ms. AVX-512 (an 8-row tile: 4x the work a channel) within
 * 1 %. Into L1 (hint 3) instead: no better on one-op models. */
__attribute__((noinline)) static void pw_full_nb(const pw_job *j, long img, long m0, const float *w, long q0,
                                                 float *y0, const float *res0) {
    pw_tile(j, img, m0, w, q0, y0, res0, NR, 0, VL, 2);
}
#define PW_TAIL(nr)                                                                                                \
    __attribute__((noinline)) static void pw_tail##nr(const pw_job *j, long img, long m0, const float *w, long q0, \
                                                      float *y0, const float *res0, int rem) {                     \
        pw_tile(j, img, m0, w, q0, y0, res0, nr, 1, rem, 0);                                                       \
    }
PW_TAIL(1)
PW_TAIL(2)
PW_TAIL(3)

/* The rest positions [qmain, P) (nr of them) of NB packed blocks from blk
 * (nb of them real: the last is repeated, not stored), run after the main
 * tiles of the last of them (their weights still in L2): rows in lanes,
 * each x value broadcast once for every block, CH chains along C per
 * block and position so enough FMAs are in flight. yb, resb: block blk's
 * first row at position 0, rows ys apart (blocks PR rows). */
CV_INLINE void pw_rest(const pw_job *j, long img, long blk, long nb, float *yb, const float *resb, const int NB,
                       const int nr, const int CH) {
    const long C = j->C, P = j->P, q0 = j->qmain;
    const float *x = j->x + img * j->xs + q0, *w[RB];
    for (int b = 0; b < NB; b++) w[b] = j->wp + (blk + (b < nb ? b : nb - 1)) * j->wc * PR;
    v8 acc[RB][REST_MAX][2];
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++)
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++)
#pragma GCC unroll 2
            for (int h = 0; h < CH; h++) acc[b][r][h] = (v8){0};
    long c = 0;
    for (; c + CH <= C; c += CH)
#pragma GCC unroll 2
        for (int h = 0; h < CH; h++)
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) {
                v8 wv;
                memcpy(&wv, w[b] + (c + h) * PR, sizeof wv);
#pragma GCC unroll 4
                for (int r = 0; r < nr; r++) acc[b][r][h] += wv * x[(c + h) * P + r];
            }
    for (; c < C; c++)
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            v8 wv;
            memcpy(&wv, w[b] + c * PR, sizeof wv);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) acc[b][r][0] += wv * x[c * P + r];
        }
    for (int b = 0; b < nb; b++) {
        const long m0 = (blk + b) * PR;
        float s[REST_MAX][PR];
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const v8 t = CH == 2 ? acc[b][r][0] + acc[b][r][1] : acc[b][r][0];
            memcpy(s[r], &t, sizeof t);
        }
        for (int i = 0; i < PR && m0 + i < j->M; i++) {
            const long o = (b * PR + i) * j->ys + q0;
            const float bias = cv_bias(j->e, m0 + i);
            for (int r = 0; r < nr; r++) {
                const float v = s[r][i] + bias + (resb ? resb[o + r] : 0.f);
                yb[o + r] = cv_vec_act(j->e->act) ? cv_act_v((vf){0} + v, j->e->act, j->e->a0, j->e->a1)[0] : v;
            }
            if (!cv_vec_act(j->e->act)) cv_ep_run(yb + o, yb + o, nr, 0.f, NULL, j->e);
        }
    }
}

/* RB blocks of the NCHW output from blk. */
static void pw_rest_any(const pw_job *j, long img, long blk) {
    const long nb = j->nblk - blk < RB ? j->nblk - blk : RB, o = (img * j->M + blk * PR) * j->ys;
    float *yb = j->y + o;
    const float *rb = j->res ? j->res + o : NULL;
    switch (j->P - j->qmain) {
    case 1: pw_rest(j, img, blk, nb, yb, rb, RB, 1, 2); break;
    case 2: pw_rest(j, img, blk, nb, yb, rb, RB, 2, 1); break;
    case 3: pw_rest(j, img, blk, nb, yb, rb, RB, 3, 1); break;
    case 4: pw_rest(j, img, blk, nb, yb, rb, RB, 4, 1); break;
    default: break;
    }
}

/* One block into its own buffer yb (no residual). */
static void pw_rest_one(const pw_job *j, long img, long blk, float *yb) {
    switch (j->P - j->qmain) {
    case 1: pw_rest(j, img, blk, 1, yb, NULL, 1, 1, 2); break;
    case 2: pw_rest(j, img, blk, 1, yb, NULL, 1, 2, 2); break;
    case 3: pw_rest(j, img, blk, 1, yb, NULL, 1, 3, 2); break;
    case 4: pw_rest(j, img, blk, 1, yb, NULL, 1, 4, 2); break;
    default: break;
    }
}

/* The full run of TW positions from q of packed block blk's rows
 * [h TR, (h + 1) TR); the next run's input prefetched where pf allows (pf
 * 1 and j->pf), or the next block's weights (pf 2: pw_full_nb). */
CV_INLINE void pw_run(const pw_job *j, long img, long blk, int h, long q, long q1, int pf, float *yb,
                      const float *resb) {
    const long m0 = blk * PR + h * TR, o = h * TR * j->ys + q;
    const float *w = j->wp + blk * j->wc * PR + h * TR, *r = resb ? resb + o : NULL;
    if (pf && j->pf && q + 2 * TW <= q1) pw_full_pf(j, img, m0, w, q, yb + o, r);
    else if (pf == 2 && blk + 1 < j->nblk) pw_full_nb(j, img, m0, w, q, yb + o, r);
    else pw_full(j, img, m0, w, q, yb + o, r);
}

/* Positions [q0, q1) of packed block blk: yb, resb its first row at
 * position 0 (rows P apart). Where a block is two tiles of rows (AVX2) and
 * a run's input column (2 lines a channel) fits in L1, both tiles run on
 * one run of positions before the next: the second reads the input where
 * the first brought it. One half over the whole chunk, then the other,
 * read it from L2 twice, and past ~128 input channels (the column no
 * longer in L1 for the next run's shared line) the projections ran at
 * 60-75 % of the FMA peak. AMD EPYC Zen 4, AVX2 library, 1 thread, before
 * and after: 144 -> 24 at 56x56 65 -> 75 GFLOP/s, 192 -> 32 at 28x28 66 ->
 * 74, 192 -> 64 at 28x28 76 -> 88; with a larger column (576 -> 96 at
 * 14x14) the halves in turn were 2-5 % faster, so they stay so there. */
static void pw_block(const pw_job *j, long img, long blk, long q0, long q1, float *yb, const float *resb) {
    int nh = 0;
    while (nh < PR / TR && blk * PR + nh * TR < j->M) nh++;
    const long qe = q0 + (q1 - q0) / TW * TW;
    if (j->C * 128 <= PW_L1_COLUMN)
        for (long q = q0; q < qe; q += TW)
            for (int h = 0; h < nh; h++) pw_run(j, img, blk, h, q, q1, h == 0, yb, resb);
    else
        for (int h = 0; h < nh; h++)
            for (long q = q0; q < qe; q += TW) pw_run(j, img, blk, h, q, q1, h == 0 && q == q0 ? 2 : 1, yb, resb);
    if (qe < q1) {
        const long n = q1 - qe;
        const int nr = (int)((n + VL - 1) / VL), rem = (int)(n - (nr - 1) * VL);
        for (int h = 0; h < nh; h++) {
            const long m0 = blk * PR + h * TR, o = h * TR * j->ys + qe;
            const float *w = j->wp + blk * j->wc * PR + h * TR, *r = resb ? resb + o : NULL;
            if (nr == 1) pw_tail1(j, img, m0, w, qe, yb + o, r, rem);
            else if (nr == 2) pw_tail2(j, img, m0, w, qe, yb + o, r, rem);
            else pw_tail3(j, img, m0, w, qe, yb + o, r, rem);
        }
    }
}

/* Positions [q0, q1) of every row block, one run of positions at a time:
 * the run's input column comes from L2 or memory once and from L1 for the
 * other blocks' tiles. */
static void pw_cols(const pw_job *j, long img, long q0, long q1) {
    const long qe = q0 + (q1 - q0) / TW * TW, ob = img * j->M * j->ys;
    for (long q = q0; q < qe; q += TW)
        for (long blk = 0; blk < j->nblk; blk++) {
            const long o = ob + blk * PR * j->ys;
            for (int h = 0; h < PR / TR && blk * PR + h * TR < j->M; h++)
                pw_run(j, img, blk, h, q, q1, blk == 0 && h == 0, j->y + o, j->res ? j->res + o : NULL);
        }
    if (qe < q1)
        for (long blk = 0; blk < j->nblk; blk++) {
            const long o = ob + blk * PR * j->ys;
            pw_block(j, img, blk, qe, q1, j->y + o, j->res ? j->res + o : NULL);
        }
}

/* One item: one packed row block over one chunk of one image's positions. */
static void pw_task(void *arg, long b, long e) {
    const pw_job *j = arg;
    if (j->cols) {
        for (long it = b; it < e; it++) {
            const long qc = it % j->nqc, img = it / j->nqc;
            const long q0 = qc * j->qchunk, q1 = q0 + j->qchunk < j->qmain ? q0 + j->qchunk : j->qmain;
            pw_cols(j, img, q0, q1);
            if (qc == j->nqc - 1 && j->qmain < j->P)
                for (long blk = 0; blk < j->nblk; blk += RB) pw_rest_any(j, img, blk);
        }
        return;
    }
    for (long it = b; it < e; it++) {
        const long blk = it % j->nblk, qc = it / j->nblk % j->nqc, img = it / j->nblk / j->nqc;
        const long q0 = qc * j->qchunk, q1 = q0 + j->qchunk < j->qmain ? q0 + j->qchunk : j->qmain;
        const long o = (img * j->M + blk * PR) * j->ys;
        pw_block(j, img, blk, q0, q1, j->y + o, j->res ? j->res + o : NULL);
        if (qc == j->nqc - 1 && j->qmain < j->P && (blk % RB == RB - 1 || blk == j->nblk - 1))
            pw_rest_any(j, img, blk - blk % RB);
    }
}

void cv_pointwise(const tcc_conv_params *p, const float *x, const float *wp, float *y, const cv_ep *e) {
    const long C = p->c, M = p->m, P = p->oh * p->ow;
    const long xbytes = C * P * (long)sizeof(float), wbytes = (M + PR - 1) / PR * PR * C * (long)sizeof(float);
    const int nt = tcc_cpu_num_threads();
    pw_job j = {.x = x, .wp = wp, .res = e->res, .y = y, .e = e, .C = C, .M = M, .P = P, .xs = C * P, .wc = C,
                .ys = P, .qmain = P, .nqc = 1, .nblk = (M + PR - 1) / PR, .pf = xbytes > L2_BUDGET};
    const long rest = P % VL;
    if (rest <= REST_MAX) j.qmain = P - rest;
    const long nvec = (j.qmain + VL - 1) / VL;
    long nqc = (xbytes + L2_BUDGET - 1) / L2_BUDGET;
    /* Threads split the positions when the input outweighs the weights
     * (each reads a part of the input and all weights), else the row blocks
     * (all of the input, a part of the weights); chunks then spread evenly. */
    if (nt > 1 && (nqc > 1 || xbytes > wbytes)) nqc = (nqc + nt - 1) / nt * nt;
    if (nqc > nvec) nqc = nvec;
    if (nqc < 1) nqc = 1;
    j.qchunk = (nvec + nqc - 1) / nqc * VL;
    j.nqc = j.qmain ? (j.qmain + j.qchunk - 1) / j.qchunk : 1;
    j.cols = TR < PR && j.nblk <= PW_COLS && C * 128 <= PW_L1_COLUMN && j.nqc >= nt;
    tcc_cpu_parallel_for(p->n * j.nqc * (j.cols ? 1 : j.nblk), 1, pw_task, &j);
}

/* ---- pointwise -> depthwise -----------------------------------------------------
 * An inverted residual block's expansion: a pointwise convolution read only
 * by a depthwise one. One item computes one packed block of PR expanded
 * channels over a whole plane into a per-thread buffer (it stays in L2),
 * then the depthwise convolution of those PR planes: the expanded tensor,
 * the block's largest, never goes to memory and back. */
typedef struct {
    pw_job pw;
    const cv_dw *dw;
    float *y;
} pwdw_job;

static void pwdw_task(void *arg, long b, long e) {
    const pwdw_job *f = arg;
    const pw_job *j = &f->pw;
    const long ohw = f->dw->p->oh * f->dw->p->ow;
    const float *res = f->dw->e->res;
    float *buf = cv_tls_buffer(2, (size_t)(PR * j->P));
    float *pack = cv_dw_pack_buffer(f->dw);
    for (long it = b; it < e; it++) {
        const long blk = it % j->nblk, img = it / j->nblk;
        pw_block(j, img, blk, 0, j->qmain, buf, NULL);
        if (j->qmain < j->P) pw_rest_one(j, img, blk, buf);
        for (long i = 0; i < PR && blk * PR + i < j->M; i++) {
            const long c = blk * PR + i, o = (img * j->M + c) * ohw;
            cv_dw_plane(f->dw, buf + i * j->P, c, f->y + o, res ? res + o : NULL, pack);
        }
    }
}

void cv_pointwise_depthwise(const tcc_conv_params *p, const float *x, const float *wp, const cv_ep *e,
                            const cv_dw *dw, float *y) {
    if (cv_pwdw8(p, x, wp, e, dw->p, dw->w, dw->e, y)) return; /* AVX2, AVX-512: channels in the lanes (conv_pwdw8.c) */
    const long C = p->c, M = p->m, P = p->oh * p->ow, rest = P % VL;
    pwdw_job f = {{.x = x, .wp = wp, .e = e, .C = C, .M = M, .P = P, .xs = C * P, .wc = C, .ys = P, .qmain = P,
                   .qchunk = P, .nqc = 1, .nblk = (M + PR - 1) / PR, .pf = C * P * (long)sizeof(float) > L2_BUDGET},
                  dw, y};
    if (rest <= REST_MAX) f.pw.qmain = P - rest;
    tcc_cpu_parallel_for(p->n * f.pw.nblk, 1, pwdw_task, &f);
}

/* ---- depthwise -> pointwise ---------------------------------------------------------
 * A depthwise convolution read only by a pointwise one (a depthwise-
 * separable convolution: MobileNet's first block, all of MobileNet v1's).
 * An item is a band of output rows of one image: the depthwise outputs of
 * every channel for the band go to a per-thread buffer (L2), which the
 * pointwise convolution reads as its input. The depthwise output never
 * reaches memory, and each thread reads back only what it computed. */
#define DWPW_BUF_BYTES (256 * 1024)

typedef struct {
    const cv_dw *dw;
    const float *x;   /* the depthwise input */
    pw_job pw;        /* its x, P, qmain, y and res are set per band */
    long rows, nband; /* output rows per band, bands per image */
} dwpw_job;

static void dwpw_task(void *arg, long b, long e) {
    const dwpw_job *f = arg;
    const tcc_conv_params *pd = f->dw->p;
    const long C = pd->c, OW = pd->ow, OH = pd->oh, hw = pd->h * pd->w, ohw = OH * OW, M = f->pw.M;
    float *buf = cv_tls_buffer(2, (size_t)(C * f->rows * OW));
    float *pack = cv_dw_pack_buffer(f->dw);
    for (long it = b; it < e; it++) {
        const long img = it / f->nband, r0 = it % f->nband * f->rows, r1 = r0 + f->rows < OH ? r0 + f->rows : OH;
        const long npos = (r1 - r0) * OW, rest = npos % VL;
        for (long c = 0; c < C; c++)
            cv_dw_rows(f->dw, f->x + (img * C + c) * hw, c, buf + c * npos - r0 * OW, NULL, r0, r1, pack);
        pw_job j = f->pw;
        j.x = buf;
        j.P = npos;
        j.xs = C * npos;
        j.qmain = rest <= REST_MAX ? npos - rest : npos;
        j.y = j.y + img * M * ohw + r0 * OW;
        j.res = j.res ? j.res + img * M * ohw + r0 * OW : NULL;
        for (long blk = 0; blk < j.nblk; blk++) {
            pw_block(&j, 0, blk, 0, j.qmain, j.y + blk * PR * ohw, j.res ? j.res + blk * PR * ohw : NULL);
            if (j.qmain < npos && (blk % RB == RB - 1 || blk == j.nblk - 1)) pw_rest_any(&j, 0, blk - blk % RB);
        }
    }
}

void cv_depthwise_pointwise(const cv_dw *dw, const float *x, const tcc_conv_params *pq, const float *wq,
                            const cv_ep *eq, float *y) {
    const tcc_conv_params *pd = dw->p;
    const long C = pd->c, OH = pd->oh, OW = pd->ow;
    const int nt = tcc_cpu_num_threads();
    /* bands as tall as fit the buffer, in a multiple of the thread count */
    long rmax = DWPW_BUF_BYTES / (C * OW * (long)sizeof(float));
    if (rmax < 1) rmax = 1;
    long nband = (OH + rmax - 1) / rmax;
    nband = (nband + nt - 1) / nt * nt;
    if (nband > OH) nband = OH;
    const long rows = (OH + nband - 1) / nband;
    dwpw_job f = {dw, x,
                  {.wp = wq, .res = eq->res, .y = y, .e = eq, .C = C, .M = pq->m, .wc = C, .ys = OH * OW, .nqc = 1,
                   .nblk = (pq->m + PR - 1) / PR},
                  rows, (OH + rows - 1) / rows};
    tcc_cpu_parallel_for(pd->n * f.nband, 1, dwpw_task, &f);
}

/* ---- pointwise, input channels split over the threads -------------------------------
 * For an input written by cv_pointwise_depthwise, whose items (blocks of
 * PR channels) the pool hands out in contiguous ranges, one per thread:
 * range t here sums over the channels of that thread's range (they are in
 * its own cache) into partial sums of its own, and a last pass adds the
 * partials up with the epilogue. Split over positions instead, each thread
 * read half of its input from the other core's cache, which here runs at a
 * few GB/s: a MobileNetV2 projection was no faster on two threads than on
 * one. A range's items are its output blocks, so a thread done early
 * steals blocks of another's range (reading that range's input from the
 * other core) rather than waiting: with one item per range, a core slowed
 * by the machine's other load held the call up by a third of its time.
 * (Stealing chunks of channels instead, each thread adding them to sums of
 * its own, cost more than it saved: every chunk is one more pass over the
 * partial sums.) */
typedef struct {
    pw_job pw;       /* the whole product, its epilogue off */
    const cv_ep *e;  /* applied when the partials are added up */
    float *y, *part; /* range 0's partial is y itself; range r > 0's is part + (r - 1) * M * P */
    long nrange, kblk;
} pwk_job;

static void pwk_task(void *arg, long b, long e) {
    const pwk_job *f = arg;
    for (long t = b; t < e; t++) {
        /* an item: a row block, or with cols a chunk of positions over every block */
        const long r = t / f->pw.nblk, blk = t % f->pw.nblk;
        pw_job j = f->pw;
        const long k0 = r * f->kblk * PR, k1 = (r + 1) * f->kblk * PR < j.C ? (r + 1) * f->kblk * PR : j.C;
        j.x += k0 * j.P;
        j.wp += k0 * PR;
        j.C = k1 - k0;
        j.y = r == 0 ? f->y : f->part + (r - 1) * j.M * j.P;
        if (j.cols) {
            const long qc = (j.qmain / TW + j.nblk - 1) / j.nblk * TW, q0 = blk * qc;
            const long q1 = blk == j.nblk - 1 ? j.qmain : q0 + qc < j.qmain ? q0 + qc : j.qmain;
            if (q0 < q1) pw_cols(&j, 0, q0, q1);
            if (blk == j.nblk - 1 && j.qmain < j.P)
                for (long bb = 0; bb < j.nblk; bb += RB) pw_rest_any(&j, 0, bb);
            continue;
        }
        pw_block(&j, 0, blk, 0, j.qmain, j.y + blk * PR * j.P, NULL);
        if (j.qmain < j.P && (blk % RB == RB - 1 || blk == j.nblk - 1)) pw_rest_any(&j, 0, blk - blk % RB);
    }
}

static void pwk_reduce_task(void *arg, long b, long e) {
    const pwk_job *f = arg;
    const long P = f->pw.P, M = f->pw.M;
    const cv_ep *ep = f->e;
    const int act = cv_vec_act(ep->act) ? ep->act : TCC_ACT_NONE;
    for (long r = b; r < e; r++) {
        float *yr = f->y + r * P;
        const float *res = ep->res ? ep->res + r * P : NULL, bias = cv_bias(ep, r);
        for (long q = 0; q < P; q += VL) {
            const int k = P - q < VL ? (int)(P - q) : VL;
            vf a = v_ld_n(yr + q, k);
            for (long t = 1; t < f->nrange; t++) a += v_ld_n(f->part + (t - 1) * M * P + r * P + q, k);
            a += bias;
            if (res) a += v_ld_n(res + q, k);
            v_st_n(yr + q, cv_act_v(a, act, ep->a0, ep->a1), k);
        }
        if (!cv_vec_act(ep->act)) cv_ep_run(yr, yr, P, 0.f, NULL, ep);
    }
}

void cv_pointwise_split_c(const tcc_conv_params *p, const float *x, const float *wp, float *y, const cv_ep *e) {
    const long C = p->c, M = p->m, P = p->oh * p->ow, rest = P % VL, cblk = (C + PR - 1) / PR;
    const int nt = tcc_cpu_num_threads();
    /* the producer's ranges are per image for one image only; an input past
     * L2 comes from L3 on either split, and the partials' pass then costs more */
    if (nt <= 1 || p->n > 1 || cblk < nt || C * P * (long)sizeof(float) > 2 * L2_BUDGET) {
        cv_pointwise(p, x, wp, y, e);
        return;
    }
    static const cv_ep none = {NULL, 1.f, 0, NULL, TCC_ACT_NONE, 0.f, 0.f};
    const long kblk = (cblk + nt - 1) / nt; /* the producer's range length for cblk items */
    pwk_job f = {{.x = x, .wp = wp, .e = &none, .C = C, .M = M, .P = P, .xs = C * P, .wc = C, .ys = P, .qmain = P,
                  .nqc = 1, .nblk = (M + PR - 1) / PR},
                 e, y, NULL, (cblk + kblk - 1) / kblk, kblk};
    if (rest <= REST_MAX) f.pw.qmain = P - rest;
    f.pw.cols = TR < PR && f.pw.nblk <= PW_COLS && f.kblk * PR * 128 <= PW_L1_COLUMN;
    f.part = cv_tls_buffer(3, (size_t)((f.nrange - 1) * M * P));
    /* nt ranges of nblk items each when nrange == nt (else any thread's items are still right) */
    tcc_cpu_parallel_for(f.nrange * f.pw.nblk, 1, pwk_task, &f);
    const long grain = P >= 1024 ? 1 : 1024 / P;
    tcc_cpu_parallel_for(M, grain, pwk_reduce_task, &f);
}
