/* 2-D convolution, NCHW / OIHW.
 *
 * Depthwise convolutions run conv_dw.c's kernel. Everything else runs a
 * direct kernel: per image and group, the input is packed once into phase
 * planes (conv_vec.h: padding, strides and dilations become constant
 * offsets along one flat row of outputs; stride-1 unpadded inputs are used
 * in place), then a register tile of MR output channels x NR vectors of
 * flat outputs accumulates over channels and taps, weights broadcast from
 * the OIHW rows as they are, and the epilogue runs on the tile before it is
 * stored. Strides beyond the phase table fall back to im2col + GEMM. */
#include "conv_vec.h"

#if defined(__AVX512F__)
#define MR 6 /* 24 accumulators + 4 inputs + 1 broadcast of 32 registers */
#define NR 4
#else
#define MR 4 /* 12 + 3 + 1 of 16 */
#define NR 3
#endif
#define TW (NR * VL)
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
} dk_job;

CV_INLINE void dk_accum(const dk_job *j, const float *const wr[MR], long q0, const int nr, const int masked,
                        int rem, vf acc[MR][NR]) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 8
        for (int v = 0; v < NR; v++) acc[i][v] = (vf){0};
    const long T = j->l->taps, cs = j->l->cs, *off = j->l->off, K = j->k;
    const float *xc = j->x + q0;
    long t = 0;
    /* one flat loop over (channel, tap): a nested one makes GCC keep the
     * accumulators in memory around the inner loop */
    for (long k = 0; k < K; k++) {
        const float *s = xc + off[t];
        if (++t == T) {
            t = 0;
            xc += cs;
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

CV_INLINE void dk_tile(const dk_job *j, long m0, long q0, const int nr, const int masked, int rem) {
    const float *wr[MR];
    int mv = 0;
    for (int i = 0; i < MR; i++) {
        long m = m0 + i < j->mg ? m0 + i : j->mg - 1; /* tail rows repeat the last one, never stored */
        wr[i] = j->w + m * j->k;
        mv += m0 + i < j->mg;
    }
    vf acc[MR][NR];
    dk_accum(j, wr, q0, nr, masked, rem, acc);
    if (j->l->wq == j->p->ow && cv_vec_act(j->e->act)) {
        dk_store_flat(j, m0, mv, q0, nr, masked, rem, acc);
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

__attribute__((noinline)) static void dk_tile_full(const dk_job *j, long m0, long q0) { dk_tile(j, m0, q0, NR, 0, VL); }

#define DK_TAIL(n)                                                                                                  \
    __attribute__((noinline)) static void dk_tile_tail##n(const dk_job *j, long m0, long q0, int rem) {            \
        dk_tile(j, m0, q0, n, 1, rem);                                                                              \
    }
DK_TAIL(1)
DK_TAIL(2)
DK_TAIL(3)
#if NR > 3
DK_TAIL(4)
#endif

static void dk_tile_any(const dk_job *j, long m0, long q0) {
    const long n = j->l->q - q0 < TW ? j->l->q - q0 : TW;
    if (n == TW) {
        dk_tile_full(j, m0, q0);
        return;
    }
    const int nr = (int)((n + VL - 1) / VL), rem = (int)(n - (nr - 1) * VL);
    switch (nr) {
    case 1: dk_tile_tail1(j, m0, q0, rem); break;
    case 2: dk_tile_tail2(j, m0, q0, rem); break;
    case 3: dk_tile_tail3(j, m0, q0, rem); break;
#if NR > 3
    default: dk_tile_tail4(j, m0, q0, rem); break;
#endif
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
        for (long mt = mt0; mt < mt1; mt++)
            for (long qt = qt0; qt < qt1; qt++) dk_tile_any(j, mt * MR, qt * TW);
    }
}

typedef struct {
    const cv_layout *l;
    const tcc_conv_params *p;
    const float *x;
    float *dst;
} pack_job;

static void pack_task(void *arg, long b, long e) {
    pack_job *j = arg;
    cv_pack(j->l, j->p, j->x, j->dst, b, e, 1);
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
                pack_job pj = {l, p, xg, xp};
                tcc_cpu_parallel_for(cg, 8, pack_task, &pj);
            }
            long yoff = (n * p->m + g * mg) * ohw;
            dk_job j = {p, l, l->direct ? xg : xp, w + g * mg * k, y + yoff, e->res ? e->res + yoff : NULL, e,
                        mg, cg, k, g * mg, 0, 0, 0, 0};
            dk_schedule(&j, cg * l->cs * (long)sizeof(float));
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
                pe = &e2;
            }
            tcc_cpu_gemm(0, 0, mg, ohw, k, 1.f, w + g * mg * k, k, col, ohw, y + (n * p->m + g * mg) * ohw, ohw, pe);
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
