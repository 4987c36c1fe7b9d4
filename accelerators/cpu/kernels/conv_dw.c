/* Depthwise convolution (group == c == m), one channel plane per step: the
 * plane is packed into per-thread phase planes (conv_vec.h; stride-1
 * unpadded planes are read in place; the padding is zeroed once per task),
 * then each output row is swept in vectors, DG independent vectors at a time
 * (short rows would otherwise leave one FMA chain latency-bound), taps as
 * shifted loads times a broadcast weight, the epilogue applied in registers
 * before a (masked) store straight into y. */
#include "conv_vec.h"

#define DG 4 /* output vectors in flight: independent FMA chains */

typedef struct {
    const tcc_conv_params *p;
    const cv_layout *l;
    const float *x, *w;
    float *y;
    const cv_ep *e;
} dw_job;

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

CV_INLINE void dw_group_body(const dw_plane *d, const long taps) {
    vf acc[DG];
#pragma GCC unroll 8
    for (int g = 0; g < DG; g++) acc[g] = (vf){0};
#pragma GCC unroll 9
    for (long t = 0; t < taps; t++) {
        const float *s = d->xp + d->off[t];
        const float wv = d->w[t];
#pragma GCC unroll 8
        for (int g = 0; g < DG; g++) acc[g] += ld_m(s + d->q[g], d->n[g]) * wv;
    }
    const cv_ep *e = d->e;
    const int act = cv_vec_act(e->act) ? e->act : TCC_ACT_NONE; /* others: a pass over the plane after */
#pragma GCC unroll 8
    for (int g = 0; g < DG; g++) {
        vf a = acc[g] + d->bias;
        if (d->res) a += ld_m(d->res + d->yo[g], d->n[g]);
        st_m(d->y + d->yo[g], cv_act_v(a, act, e->a0, e->a1), d->n[g]);
    }
}

static void dw_group_3x3(const dw_plane *d) { dw_group_body(d, 9); }
static void dw_group_any(const dw_plane *d) { dw_group_body(d, d->taps); }

static void dw_flush(dw_plane *d) {
    if (!d->cnt) return;
    for (int g = d->cnt; g < DG; g++) {
        d->q[g] = d->yo[g] = 0;
        d->n[g] = 0;
    }
    if (d->taps == 9) dw_group_3x3(d);
    else dw_group_any(d);
    d->cnt = 0;
}

/* Every output row in vectors of VL columns, DG vectors per step. */
static void dw_run_plane(dw_plane *d, const cv_layout *l, const tcc_conv_params *p) {
    d->cnt = 0;
    for (long oh = 0; oh < p->oh; oh++) {
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

static void dw_task(void *arg, long b, long e) {
    const dw_job *j = arg;
    const tcc_conv_params *p = j->p;
    const cv_layout *l = j->l;
    const long hw = p->h * p->w, ohw = p->oh * p->ow;
    float *pack = NULL;
    if (!l->direct) {
        pack = cv_tls_buffer(0, l->cs);
        memset(pack, 0, l->cs * sizeof(float)); /* padding stays zero: only the interior is repacked */
    }
    dw_plane d;
    d.off = l->off;
    d.taps = l->taps;
    d.e = j->e;
    for (long pc = b; pc < e; pc++) {
        const long c = pc % p->c;
        d.xp = j->x + pc * hw;
        if (pack) {
            cv_pack(l, p, d.xp, pack, 0, 1, 0);
            d.xp = pack;
        }
        d.w = j->w + c * l->taps;
        d.y = j->y + pc * ohw;
        d.res = j->e->res ? j->e->res + pc * ohw : NULL;
        d.bias = cv_bias(j->e, c);
        dw_run_plane(&d, l, p);
        if (!cv_vec_act(j->e->act)) cv_ep_run(d.y, d.y, ohw, 0.f, NULL, j->e);
    }
}

void cv_depthwise(const tcc_conv_params *p, const cv_layout *l, const float *x, const float *w, float *y,
                  const cv_ep *e) {
    dw_job j = {p, l, x, w, y, e};
    tcc_cpu_parallel_for(p->n * p->c, 1, dw_task, &j);
}
