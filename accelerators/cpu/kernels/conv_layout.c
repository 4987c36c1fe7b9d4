/* Phase-plane packing, row copy-out with the fused epilogue, per-thread
 * buffers: the parts the direct and depthwise convolution kernels share. */
#include <pthread.h>
#include <stdatomic.h>

#include "conv_vec.h"

/* The buffers of a thread that exits are freed (a caller's thread too:
 * gemm_packed.c copies A in the calling thread, which a server may start
 * per request). */
typedef struct {
    float *buf[7];
    size_t cap[7];
} tls_buffers;
static pthread_key_t g_tls_key;
static pthread_once_t g_tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *p) {
    tls_buffers *t = p;
    for (int i = 0; i < 7; i++) free(t->buf[i]);
    free(t);
}

static void tls_key(void) { pthread_key_create(&g_tls_key, tls_free); }

unsigned long cv_call_number(void) {
    static _Atomic unsigned long calls;
    return atomic_fetch_add(&calls, 1) + 1;
}

float *cv_tls_buffer(int which, size_t n) {
    static __thread tls_buffers *t;
    if (!t) {
        pthread_once(&g_tls_once, tls_key);
        t = calloc(1, sizeof *t);
        if (!t) return NULL;
        pthread_setspecific(g_tls_key, t);
    }
    if (n > t->cap[which]) {
        free(t->buf[which]);
        t->cap[which] = n + n / 4;
        t->buf[which] = aligned_alloc(64, (t->cap[which] * sizeof(float) + 63) / 64 * 64);
        if (!t->buf[which]) t->cap[which] = 0;
    }
    return t->buf[which];
}

static void act_inplace(float *d, long n, const cv_ep *e) {
    const float a0 = e->a0, a1 = e->a1;
    switch (e->act) {
    case TCC_ACT_RELU:
        for (long i = 0; i < n; i++) d[i] = d[i] < 0.f ? 0.f : d[i]; /* NaN stays NaN */
        break;
    case TCC_ACT_CLIP:
        for (long i = 0; i < n; i++) d[i] = d[i] < a0 ? a0 : (d[i] > a1 ? a1 : d[i]);
        break;
    case TCC_ACT_LEAKY:
        for (long i = 0; i < n; i++) d[i] = d[i] >= 0.f ? d[i] : d[i] * a0;
        break;
    case TCC_ACT_SIGMOID:
        for (long i = 0; i < n; i++) d[i] = tcc_sigmoidf(d[i]);
        break;
    case TCC_ACT_TANH:
        for (long i = 0; i < n; i++) d[i] = tcc_tanhf(d[i]);
        break;
    case TCC_ACT_SILU:
        for (long i = 0; i < n; i++) d[i] = d[i] * tcc_sigmoidf(d[i]);
        break;
    case TCC_ACT_QDQ8:
        for (long i = 0; i < n; i++) {
            float q = d[i] / a0 + TCC_QDQ_M;
            q = q >= a1 ? q : a1; /* NaN -> a1, as the vector form */
            q = q <= a1 + 255.f ? q : a1 + 255.f;
            d[i] = (q - TCC_QDQ_M) * a0;
        }
        break;
    default:
        break;
    }
}

void cv_ep_run(float *dst, const float *src, long n, float bias, const float *res, const cv_ep *e) {
    if (res) {
        for (long i = 0; i < n; i++) dst[i] = src[i] + bias + res[i];
    } else {
        for (long i = 0; i < n; i++) dst[i] = src[i] + bias;
    }
    act_inplace(dst, n, e);
}

/* The channel stride, the taps' offsets and the flat outputs, for l->wq. */
static void set_offsets(cv_layout *l, const tcc_conv_params *p) {
    const long plane = l->hq * l->wq;
    l->cs = l->direct ? p->h * p->w : l->nph * plane;
    for (long ki = 0; ki < p->kh; ki++)
        for (long kj = 0; kj < p->kw; kj++) {
            long ph = (ki * p->dh % p->sh) * p->sw + kj * p->dw % p->sw;
            l->off[ki * p->kw + kj] = l->slot[ph] * plane + (ki * p->dh / p->sh) * l->wq + kj * p->dw / p->sw;
        }
    l->q = (p->oh - 1) * l->wq + p->ow;
}

int cv_layout_init(cv_layout *l, const tcc_conv_params *p, long *off) {
    const long sh = p->sh, sw = p->sw, dh = p->dh, dw = p->dw;
    if (sh * sw > 64 || sh < 1 || sw < 1) return 0;
    l->hq = p->oh + (p->kh - 1) * dh / sh;
    l->wq = l->wr = p->ow + (p->kw - 1) * dw / sw;
    l->taps = p->kh * p->kw;
    l->direct = sh == 1 && sw == 1 && p->pt == 0 && p->pl == 0 && p->h == l->hq && p->w == l->wq;
    for (int i = 0; i < 64; i++) l->slot[i] = -1;
    l->nph = 0;
    for (long ki = 0; ki < p->kh; ki++)
        for (long kj = 0; kj < p->kw; kj++) {
            long ph = (ki * dh % sh) * sw + kj * dw % sw;
            if (l->slot[ph] < 0) l->slot[ph] = (int)l->nph++;
        }
    l->off = off;
    set_offsets(l, p);
    return 1;
}

void cv_layout_align_rows(cv_layout *l, const tcc_conv_params *p) {
    if (l->direct) return;
    l->wq = (l->wq + VL - 1) / VL * VL;
    set_offsets(l, p);
}

static long clampl(long v, long lo, long hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* d[0, n) = s[0, n), short rows without a libc call per row. */
static void copy_row(float *d, const float *s, long n) {
    long i = 0;
    for (; i + VL <= n; i += VL) v_st(d + i, v_ld(s + i));
    if (i < n) v_st_n(d + i, v_ld_n(s + i, (int)(n - i)), (int)(n - i));
}

/* ev[m] = s[2m] for m < nev, od[m] = s[2m+1] for m < nod (NULL: skipped);
 * s holds n floats. */
static void deinterleave_row(float *ev, long nev, float *od, long nod, const float *s, long n) {
    if (!ev) nev = 0;
    if (!od) nod = 0;
    long m = 0;
#if defined(__AVX512F__)
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (; m < nev || m < nod; m += VL) {
        int na = (int)clampl(n - 2 * m, 0, VL), nb = (int)clampl(n - 2 * m - VL, 0, VL);
        __m512 a = (__m512)v_ld_n(s + 2 * m, na), b = (__m512)v_ld_n(s + 2 * m + VL, nb);
        int ce = (int)clampl(nev - m, 0, VL), co = (int)clampl(nod - m, 0, VL);
        if (ce) v_st_n(ev + m, (vf)_mm512_permutex2var_ps(a, ie, b), ce);
        if (co) v_st_n(od + m, (vf)_mm512_permutex2var_ps(a, io, b), co);
    }
#elif defined(__AVX2__)
    /* in-lane shuffles (a0 a2 b0 b2 | a4 a6 b4 b6), then the middle 64-bit
     * lanes swapped: scalar, the stride-2 packing was a tenth of
     * MobileNetV2's stride-2 blocks on AVX2 */
    for (; m < nev || m < nod; m += VL) {
        const int na = (int)clampl(n - 2 * m, 0, VL), nb = (int)clampl(n - 2 * m - VL, 0, VL);
        const __m256 a = na == VL ? _mm256_loadu_ps(s + 2 * m) : (__m256)v_ld_n(s + 2 * m, na);
        const __m256 b = nb == VL ? _mm256_loadu_ps(s + 2 * m + VL) : nb ? (__m256)v_ld_n(s + 2 * m + VL, nb)
                                                                        : _mm256_setzero_ps();
        const int ce = (int)clampl(nev - m, 0, VL), co = (int)clampl(nod - m, 0, VL);
        if (ce) {
            const vf e = (vf)_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8);
            if (ce == VL) v_st(ev + m, e);
            else v_st_n(ev + m, e, ce);
        }
        if (co) {
            const vf o = (vf)_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8);
            if (co == VL) v_st(od + m, o);
            else v_st_n(od + m, o, co);
        }
    }
#else
    for (; m < nev; m++) ev[m] = s[2 * m];
    for (m = 0; m < nod; m++) od[m] = s[2 * m + 1];
#endif
}

#if defined(__AVX512F__)
/* d_k[m] = padded row column 4m + k for m < n (k = 0..3; NULL: skipped),
 * where padded column c is s[c - pl] inside [0, W) and zero outside: four
 * masked loads and eight two-source permutes per 16 columns of each phase. */
static void deinterleave4_row(float *d0, float *d1, float *d2, float *d3, long n, const float *s, long pl, long W) {
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (long m = 0; m < n; m += VL) {
        __m512 v[4];
        for (int k = 0; k < 4; k++) {
            const long c0 = 4 * m + k * VL - pl; /* input column of lane 0 */
            const long lo = clampl(-c0, 0, VL), hi = clampl(W - c0, 0, VL);
            const __mmask16 mk = hi > lo ? (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1)) : 0;
            v[k] = _mm512_maskz_loadu_ps(mk, s + c0);
        }
        const __m512 e01 = _mm512_permutex2var_ps(v[0], ie, v[1]), o01 = _mm512_permutex2var_ps(v[0], io, v[1]);
        const __m512 e23 = _mm512_permutex2var_ps(v[2], ie, v[3]), o23 = _mm512_permutex2var_ps(v[2], io, v[3]);
        const int c = (int)clampl(n - m, 0, VL);
        if (d0) v_st_n(d0 + m, (vf)_mm512_permutex2var_ps(e01, ie, e23), c);
        if (d2) v_st_n(d2 + m, (vf)_mm512_permutex2var_ps(e01, io, e23), c);
        if (d1) v_st_n(d1 + m, (vf)_mm512_permutex2var_ps(o01, ie, o23), c);
        if (d3) v_st_n(d3 + m, (vf)_mm512_permutex2var_ps(o01, io, o23), c);
    }
}
#elif defined(__AVX2__)
/* The same with 8 columns of each phase a step: four masked loads, a 4 x 4
 * transpose inside each 128-bit half (r_k = columns k, k+8, k+16, k+24 |
 * k+4, k+12, k+20, k+28) and one permute per phase. The generic path (a
 * padded copy and three even/odd splits) was 8 % of ResNet-18's 56x56
 * F(4x4) Winograd layers on AVX2. */
static void deinterleave4_row(float *d0, float *d1, float *d2, float *d3, long n, const float *s, long pl, long W) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (long m = 0; m < n; m += VL) {
        __m256 v[4];
        for (int k = 0; k < 4; k++) {
            const long c0 = 4 * m + k * VL - pl; /* input column of lane 0 */
            const int lo = (int)clampl(-c0, 0, VL), hi = (int)clampl(W - c0, 0, VL);
            const __m256i mk = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), lane),
                                                   _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), lane));
            v[k] = hi - lo == VL ? _mm256_loadu_ps(s + c0) : hi > lo ? _mm256_maskload_ps(s + c0, mk) : _mm256_setzero_ps();
        }
        const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
        const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
        const int c = (int)clampl(n - m, 0, VL);
        if (d0) v_st_n(d0 + m, (vf)_mm256_permutevar8x32_ps(_mm256_shuffle_ps(t0, t2, 0x44), order), c);
        if (d1) v_st_n(d1 + m, (vf)_mm256_permutevar8x32_ps(_mm256_shuffle_ps(t0, t2, 0xEE), order), c);
        if (d2) v_st_n(d2 + m, (vf)_mm256_permutevar8x32_ps(_mm256_shuffle_ps(t1, t3, 0x44), order), c);
        if (d3) v_st_n(d3 + m, (vf)_mm256_permutevar8x32_ps(_mm256_shuffle_ps(t1, t3, 0xEE), order), c);
    }
}
#endif

static float *plane_row(const cv_layout *l, const tcc_conv_params *p, float *dst, long pr, long pc, long i) {
    int slot = l->slot[pr * p->sw + pc];
    return slot < 0 ? NULL : dst + (slot * l->hq + i) * l->wq;
}

/* One channel's input rows [r0, r1): each goes once to the phase planes of
 * its row parity; padding positions are left as they are. */
static void pack_channel(const cv_layout *l, const tcc_conv_params *p, const float *src, float *dst, long r0,
                         long r1) {
    const long sh = p->sh, sw = p->sw, wq = l->wq, pl = p->pl, W = p->w;
    long pr = (p->pt + r0) % sh, i = (p->pt + r0) / sh; /* phase row of input row r, kept incrementally */
    for (long r = r0; r < r1; r++, pr = pr + 1 == sh ? 0 : pr + 1, i += pr == 0) {
        if (i >= l->hq) break;
        const float *s = src + r * W;
        if (sw == 1) {
            float *d = plane_row(l, p, dst, pr, 0, i);
            if (d && wq > pl) copy_row(d + pl, s, W < wq - pl ? W : wq - pl);
        } else if (sw == 2) {
            /* input column 2m + e lands in phase (e + pl) % 2 at m + (e + pl) / 2 */
            float *d0 = plane_row(l, p, dst, pr, pl % 2, i), *d1 = plane_row(l, p, dst, pr, (1 + pl) % 2, i);
            const long o0 = pl / 2, o1 = (1 + pl) / 2;
            deinterleave_row(d0 ? d0 + o0 : NULL, clampl(wq - o0, 0, (W + 1) / 2), d1 ? d1 + o1 : NULL,
                             clampl(wq - o1, 0, W / 2), s, W);
        } else if (sw == 4 && wq <= 1024) {
            /* whole phase rows, the padding columns included (zero_padding leaves them) */
#if defined(__AVX512F__) || defined(__AVX2__)
            deinterleave4_row(plane_row(l, p, dst, pr, 0, i), plane_row(l, p, dst, pr, 1, i),
                              plane_row(l, p, dst, pr, 2, i), plane_row(l, p, dst, pr, 3, i), wq, s, pl, W);
#else
            /* the padded row, then two even/odd splits: phase c % 4 of column c */
            float t[4 * 1024], ev[2 * 1024], od[2 * 1024];
            const long L = 4 * wq, n = W < L - pl ? W : L - pl;
            memset(t, 0, L * sizeof(float));
            if (n > 0) copy_row(t + pl, s, n);
            deinterleave_row(ev, 2 * wq, od, 2 * wq, t, L);
            deinterleave_row(plane_row(l, p, dst, pr, 0, i), wq, plane_row(l, p, dst, pr, 2, i), wq, ev, 2 * wq);
            deinterleave_row(plane_row(l, p, dst, pr, 1, i), wq, plane_row(l, p, dst, pr, 3, i), wq, od, 2 * wq);
#endif
        } else {
            /* any other stride: each phase's columns as one strided run. Per
             * element (a plane row looked up and two divisions for each) a
             * ViT's 8x8 stride-8 patch embedding spent 55 % of its time here
             * (clip_vision's, 3x32x32, avx2: 0.017 ms an image) */
            for (long pc = 0; pc < sw; pc++) {
                float *d = plane_row(l, p, dst, pr, pc, i);
                if (!d) continue;
                long col = ((pc - pl) % sw + sw) % sw, j = (col + pl) / sw; /* the first column of phase pc */
                for (; col < W && j < wq; col += sw, j++) d[j] = s[col];
            }
        }
    }
}

/* ceil(a / b) for any sign of a, b > 0, clamped to [0, n] */
static long cdiv_clamp(long a, long b, long n) { return clampl(a >= 0 ? (a + b - 1) / b : -(-a / b), 0, n); }

/* Zeroes what pack_channel leaves alone, and only that: per phase plane,
 * the rows and the column margins no input element lands on. */
static void zero_padding(const cv_layout *l, const tcc_conv_params *p, float *dst) {
    const long hq = l->hq, wq = l->wq;
    for (long pr = 0; pr < p->sh; pr++)
        for (long pc = 0; pc < p->sw; pc++) {
            float *d = plane_row(l, p, dst, pr, pc, 0);
            if (!d) continue;
            const long i0 = cdiv_clamp(p->pt - pr, p->sh, hq), i1 = cdiv_clamp(p->pt + p->h - pr, p->sh, hq);
            const long wr = l->wr; /* columns past it are never read */
            const long j0 = cdiv_clamp(p->pl - pc, p->sw, wr), j1 = cdiv_clamp(p->pl + p->w - pc, p->sw, wr);
            if (j0 >= j1 || i0 >= i1) {
                memset(d, 0, hq * wq * sizeof(float));
                continue;
            }
            memset(d, 0, i0 * wq * sizeof(float));
            memset(d + i1 * wq, 0, (hq - i1) * wq * sizeof(float));
            if (p->sw == 4 && wq <= 1024) continue; /* pack_channel writes whole rows there */
            for (long i = i0; i < i1; i++) {
                for (long j = 0; j < j0; j++) d[i * wq + j] = 0.f;
                for (long j = j1; j < wr; j++) d[i * wq + j] = 0.f;
            }
        }
}

void cv_pack(const cv_layout *l, const tcc_conv_params *p, const float *x, float *dst, long c0, long c1, int zero) {
    for (long c = c0; c < c1; c++) {
        if (zero) zero_padding(l, p, dst + c * l->cs);
        pack_channel(l, p, x + c * p->h * p->w, dst + c * l->cs, 0, p->h);
    }
}

void cv_pack_rows(const cv_layout *l, const tcc_conv_params *p, const float *x, float *dst, long r0, long r1) {
    pack_channel(l, p, x, dst, r0 < 0 ? 0 : r0, r1 > p->h ? p->h : r1);
}

void cv_store_rows(const cv_layout *l, const tcc_conv_params *p, float *y, const float *src, long q0, long n,
                   float bias, const float *res, const cv_ep *e) {
    const long wq = l->wq, ow = p->ow, q1 = q0 + n;
    for (long oh = q0 / wq; oh * wq < q1; oh++) {
        long a = oh * wq, c0 = q0 - a > 0 ? q0 - a : 0, c1 = q1 - a < ow ? q1 - a : ow;
        if (c1 > c0)
            cv_ep_run(y + oh * ow + c0, src + a + c0 - q0, c1 - c0, bias, res ? res + oh * ow + c0 : NULL, e);
    }
}

void cv_copy_rows(const cv_layout *l, const tcc_conv_params *p, float *y, const float *src, long q0, long n) {
    const long wq = l->wq, ow = p->ow, q1 = q0 + n;
    for (long oh = q0 / wq; oh * wq < q1; oh++) {
        long a = oh * wq, c0 = q0 - a > 0 ? q0 - a : 0, c1 = q1 - a < ow ? q1 - a : ow;
        if (c1 > c0) copy_row(y + oh * ow + c0, src + a + c0 - q0, c1 - c0);
    }
}

typedef struct {
    const cv_layout *l;
    const tcc_conv_params *p;
    const float *x;
    float *dst;
    long channels;
} pack_job;

static void pack_task(void *arg, long b, long e) {
    pack_job *j = arg;
    cv_pack(j->l, j->p, j->x, j->dst, b, e, 1);
}

#define PACK_GRAIN 8 /* channels per item */

void cv_pack_all(const cv_layout *l, const tcc_conv_params *p, const float *x, float *dst, long channels) {
    /* too few channels to give every thread a share (a stem's 3 went to one
     * thread): every thread packs a slice of the rows instead */
    if (channels < PACK_GRAIN * (long)tcc_cpu_num_threads()) {
        cv_pack_all_rows(l, p, x, dst, channels);
        return;
    }
    pack_job j = {l, p, x, dst, channels};
    tcc_cpu_parallel_for(channels, PACK_GRAIN, pack_task, &j);
}

/* Thread t packs input rows [t h / nt, (t + 1) h / nt) of every channel,
 * and zeroes the padding of channels [t c / nt, (t + 1) c / nt) (elements
 * no input lands on: none of them the rows write). */
static void pack_rows_task(void *arg, long b, long e) {
    pack_job *j = arg;
    const int nt = tcc_cpu_num_threads();
    for (long t = b; t < e; t++) {
        for (long c = t * j->channels / nt; c < (t + 1) * j->channels / nt; c++)
            zero_padding(j->l, j->p, j->dst + c * j->l->cs);
        const long r0 = t * j->p->h / nt, r1 = (t + 1) * j->p->h / nt;
        for (long c = 0; c < j->channels; c++)
            pack_channel(j->l, j->p, j->x + c * j->p->h * j->p->w, j->dst + c * j->l->cs, r0, r1);
    }
}

void cv_pack_all_rows(const cv_layout *l, const tcc_conv_params *p, const float *x, float *dst, long channels) {
    pack_job j = {l, p, x, dst, channels};
    tcc_cpu_parallel_for(tcc_cpu_num_threads(), 1, pack_rows_task, &j);
}
