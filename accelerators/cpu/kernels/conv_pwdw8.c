/* Pointwise -> depthwise (an inverted residual block's expansion) with the
 * expanded channels in the lanes: tcc_cpu_conv2d_pw_dw on AVX2 and AVX-512.
 *
 * The plane-by-plane kernel (conv_pw.c's pwdw_task) writes each expanded
 * channel as a plane, packs it into a padded phase plane and sweeps its rows
 * in 8-lane vectors: on MobileNetV2's 7x7 and 14x14 planes the rows are one
 * or two vectors (a 7-column row wastes a lane, a stride-2 output row of 7
 * more), the packing is a pass per plane, and every plane pays the per-row
 * setup. Here an item is two blocks of 8 expanded channels (the packed
 * weights' PR-row blocks, codegen.pack_pw) over a whole plane:
 * - the pointwise part runs tiles of 6 positions x 16 channels (12
 *   accumulators, 2 weight vectors, a broadcast of the input: the 6 x 16
 *   shape of conv_ocv.c) and stores each position's 8 channels as one
 *   vector into a per-thread buffer [2][Hp][Wp][8], the plane already
 *   padded (its border zeroed once per task), so nothing is packed;
 * - the depthwise part computes 8 consecutive output positions (across row
 *   ends, so no lane is idle on short rows) x 8 channels: every tap one
 *   aligned vector load and one multiply-add per position, at any stride or
 *   dilation (the tap is a constant offset in the padded buffer), then an
 *   8 x 8 register transpose turns the 8 channel vectors into 8 NCHW row
 *   pieces, stored with bias, residual and activation applied.
 * The AVX-512 build (CB 16): an item is four blocks, 32 channels, two zmm
 * per position. Its pointwise tiles are 12 positions x 32 channels (24
 * accumulators; with one zmm of 16 channels a tile was 12 multiply-adds to
 * 13 loads, and the pair ran no faster than the planar kernel), stored as
 * two halves [2][Hp][Wp][16]; its depthwise tiles 8 positions x 16
 * channels, one aligned 64-byte load per tap and position, transposed as
 * two 8 x 8 halves. Against the planar kernel (in-place masked rows), one
 * thread, MobileNetV2's pairs: 0.74-0.92x its time (the stride-2 14x14 and
 * 28x28 ones 0.74-0.77x, the 7x7 0.92x, the 56x56 and 112x112 0.92x).
 * The generic build keeps the planar kernel. */
#include "conv_vec.h"

#if defined(__AVX2__)
#define PR 8     /* channels per packed weight block (conv_pw.c) */
#if defined(__AVX512F__)
#define CB 16    /* channels per position in a padded buffer: two blocks, one zmm (an item: two buffers) */
#else
#define CB 8     /* one block's: a ymm (an item of two blocks: two buffers) */
#endif
#if CB == 16
#define PWN 12   /* positions per pointwise tile: 24 zmm accumulators */
#else
#define PWN 6    /* positions per pointwise tile */
#endif
#define DWN 8    /* output positions per depthwise tile: one 8 x 8 transpose */
#define TMAX 64  /* taps: the phase table's limit */
/* An item's buffers (two, padded) up to this many bytes: measured on
 * MobileNetV2 (Zen 2, 1 thread) against the planar kernel, see
 * accelerators/cpu/README.md; AVX-512's 112x112 pair (1.6 MB) still 0.92x
 * the planar kernel's time (Intel Xeon, 2 MB of L2). */
#define PWDW8_BUF_BYTES (2048 * 1024)
/* AVX2: output planes of at least this many rows are split into a band of
 * rows a thread even where the items divide evenly. Split by channels, each
 * thread read the whole input and wrote every row of its channels, so the
 * pointwise convolution after it (its threads split positions) read half
 * its input from the other core. In bands both stay in their thread's
 * cache, at the price of the halo rows' expansion computed twice.
 * MobileNetV2 on 2 threads, avx2, Xeon family 6 model 167, medians of 7
 * interleaved runs: the 16 -> 96 pair at 112x112 -> 56x56 0.361 -> 0.323
 * ms, the pointwise layers after the 56x56 pairs 0.098 -> 0.089 and 0.148
 * -> 0.136, the model 4.23 -> 4.11 ms; from 28 rows the 28x28 pairs' next
 * layers lost as much (0.062 -> 0.073), from 14 the 14x14 pairs 20 %. */
#define P8_BAND_ROWS 56

typedef struct {
    const tcc_conv_params *p, *pd;
    const float *x, *wp, *wd; /* pointwise input, packed weights; depthwise weights [M][T] */
    const cv_ep *e, *ed;      /* the two epilogues */
    float *y;
    long C, M, P, H, W, Hp, Wp, OHW, nblk, npair; /* npair: items per image (pairs; AVX-512: quads) */
    long nband;               /* bands of output rows an item of blocks is split into */
    unsigned long call;       /* cv_call_number: whether this thread's buffers have their borders zeroed */
    long toff[TMAX];          /* tap (ki, kj): its offset in a padded block, in floats */
    const int *ptab, *dtab;   /* per input / output position: its offset in a block (a pointwise store, a
                               * depthwise tile's tap 0), the last repeated to whole tiles; built once per
                               * call (a division per tile cost as much as a 14x14 tile's multiply-adds) */
    const struct q8_part *q8; /* tcc_cpu_conv2d_q8_dw: the pointwise part in int8 (NULL: f32) */
} p8_job;

typedef __m256 v8f;

/* tcc_cpu_conv2d_q8_dw's pointwise part: tcc_conv_q8's int8 1x1 (gemm_int.c)
 * with its arguments. qp's fields as gemm_int.c's QP_ enum. */
enum { Q8_SX, Q8_ZX, Q8_LO, Q8_HI, Q8_ACT, Q8_ACT_S, Q8_ACT_LO };
struct q8_part {
    const float *qp;
    const int32_t *wq;  /* tcc_conv_q8's packed weights: per panel of 32 output channels [KQ][32] words of 4 */
    const int32_t *init; /* per output channel, whole panels: -za * its column sum (mod 2^32) */
    const float *scale, *bias; /* per output channel, whole panels (zero past M) */
    int has_bias;
    uint32_t *xi;       /* the images quantized: [N][KQ4][PP] words of 4 channels' bytes */
    const float *fx;    /* the float images being quantized [N][C][P] */
    long KQ, KQ4, PP;
    uint32_t flip;      /* 0x80 where x is signed: moved up by 128 for vpdpbusd's unsigned operand */
};

/* A depthwise tile's multiply-adds into acc[DWN] (vectors of type VT):
 * DWN output positions from dt (offsets in the padded buffer buf), taps wt.
 * 3x3 without column dilation: a pointer per position, the columns
 * immediate offsets. */
#define P8_DW_TAPS(VT, ZERO, LOAD, FMA)                                                                    \
    do {                                                                                                   \
        _Pragma("GCC unroll 8") for (int i = 0; i < DWN; i++) acc[i] = ZERO();                             \
        if (T == 9 && j->pd->dw == 1) {                                                                    \
            const float *s[DWN];                                                                           \
            const long rs = j->pd->dh * j->Wp * CB;                                                        \
            _Pragma("GCC unroll 8") for (int i = 0; i < DWN; i++) s[i] = buf + dt[i];                      \
            _Pragma("GCC unroll 3") for (int ki = 0; ki < 3; ki++) {                                       \
                _Pragma("GCC unroll 3") for (int kj = 0; kj < 3; kj++) {                                   \
                    const VT wv = wt[ki * 3 + kj];                                                         \
                    _Pragma("GCC unroll 8") for (int i = 0; i < DWN; i++) acc[i] = FMA(LOAD(s[i] + kj * CB), wv, acc[i]); \
                }                                                                                          \
                _Pragma("GCC unroll 8") for (int i = 0; i < DWN; i++) s[i] += rs;                          \
            }                                                                                              \
        } else {                                                                                           \
            for (long t = 0; t < T; t++) {                                                                 \
                const float *s = buf + j->toff[t];                                                         \
                const VT wv = wt[t];                                                                       \
                _Pragma("GCC unroll 8") for (int i = 0; i < DWN; i++) acc[i] = FMA(LOAD(s + dt[i]), wv, acc[i]); \
            }                                                                                              \
        }                                                                                                  \
    } while (0)

#if CB == 8
/* Positions [q, q + n) (n <= PWN) of blocks (w0, w1) into buf0/buf1: the
 * pointwise part with its epilogue. full: n == PWN, positions contiguous
 * (constant offsets); else the last position repeated, stored once. */
CV_INLINE void p8_pw_tile(const p8_job *j, const float *x, const float *w0, const float *w1, long q, int n,
                          float *buf0, float *buf1, v8f b0, v8f b1, const int full, const float *pf, long pfs) {
    const long C = j->C, P = j->P;
    long qi[PWN];
    for (int i = 0; i < PWN; i++) qi[i] = full ? i : (i < n ? i : n - 1);
    const float *xq = x + q;
    v8f a0[PWN], a1[PWN];
#pragma GCC unroll 6
    for (int i = 0; i < PWN; i++) a0[i] = a1[i] = _mm256_setzero_ps();
    for (long c = 0; c < C; c++, xq += P) {
        const v8f u0 = _mm256_loadu_ps(w0 + c * PR), u1 = _mm256_loadu_ps(w1 + c * PR);
        if (pf) __builtin_prefetch(pf + c * pfs);
#pragma GCC unroll 6
        for (int i = 0; i < PWN; i++) {
            const v8f xb = _mm256_broadcast_ss(xq + (full ? i : qi[i]));
            a0[i] = _mm256_fmadd_ps(xb, u0, a0[i]);
            a1[i] = _mm256_fmadd_ps(xb, u1, a1[i]);
        }
    }
    const cv_ep *e = j->e;
    const int act = e->act;
    const float e0 = e->a0, e1 = e->a1;
    const int *pt = j->ptab + q;
#pragma GCC unroll 6
    for (int i = 0; i < PWN; i++) {
        if (!full && i >= n) break;
        _mm256_storeu_ps(buf0 + pt[i], (__m256)cv_act_v((vf)(a0[i] + b0), act, e0, e1));
        _mm256_storeu_ps(buf1 + pt[i], (__m256)cv_act_v((vf)(a1[i] + b1), act, e0, e1));
    }
}

/* pf: where to prefetch a line every pfs floats, one per input channel */
__attribute__((noinline)) static void p8_pw_full(const p8_job *j, const float *x, const float *w0, const float *w1, long q, float *buf0,
                       float *buf1, v8f b0, v8f b1, const float *pf, long pfs) {
    p8_pw_tile(j, x, w0, w1, q, PWN, buf0, buf1, b0, b1, 1, pf, pfs);
}
__attribute__((noinline)) static void p8_pw_tail(const p8_job *j, const float *x, const float *w0, const float *w1, long q, int n,
                       float *buf0, float *buf1, v8f b0, v8f b1, const float *pf, long pfs) {
    p8_pw_tile(j, x, w0, w1, q, n, buf0, buf1, b0, b1, 0, pf, pfs);
}

/* Output positions [o, o + n) (n <= DWN; full: n == DWN) of channels
 * m0.. (block buf, its tap weights wt[T][8], biases bc[8]) to y (NCHW,
 * this image). T: taps (9: 3x3 without column dilation); act a constant:
 * with the epilogue's branches per channel (and the accumulators spilled
 * around them) the 7x7 and 14x14 tiles ran at a third of the FMA rate. */
CV_INLINE void p8_dw_tile(const p8_job *j, const float *buf, const v8f *wt, const float *bc, const long T, long o,
                          int n, long nc, float *y, const float *res, const int full, const int act) {
    const int *dt = j->dtab + o;
    v8f acc[DWN];
    P8_DW_TAPS(v8f, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_fmadd_ps);
    cv_tr8(acc); /* acc[c]: channel m0 + c at positions o.. */
    const float e0 = j->ed->a0, e1 = j->ed->a1;
    const long OHW = j->OHW;
#pragma GCC unroll 8
    for (int c = 0; c < PR; c++) {
        if (c >= nc) break;
        const long off = c * OHW + o;
        vf a = (vf)acc[c] + bc[c];
        if (res) a += full ? v_ld(res + off) : v_ld_n(res + off, n);
        a = cv_act_v(a, act, e0, e1);
        if (full) v_st(y + off, a);
        else v_st_n(y + off, a, n);
    }
}

/* Output positions [ob, oe) of channels m0.. (y, res: channel m0's planes). */
CV_INLINE void p8_dw_plane(const p8_job *j, const float *buf, const v8f *wt, const float *bc, const long T, long nc,
                           float *y, const float *res, long ob, long oe, const int act) {
    long o = ob;
    for (; o + DWN <= oe; o += DWN) p8_dw_tile(j, buf, wt, bc, T, o, DWN, nc, y, res, 1, act);
    if (o < oe) p8_dw_tile(j, buf, wt, bc, T, o, (int)(oe - o), nc, y, res, 0, act);
}
#define P8_DW(name, T, ACT)                                                                                      \
    __attribute__((noinline)) static void name(const p8_job *j, const float *buf, const v8f *wt, const float *bc, \
                                               long nc, float *y, const float *res, long ob, long oe) {        \
        p8_dw_plane(j, buf, wt, bc, T, nc, y, res, ob, oe, ACT);                                                 \
    }
P8_DW(p8_dw_3x3_clip, 9, TCC_ACT_CLIP)
P8_DW(p8_dw_3x3_relu, 9, TCC_ACT_RELU)
P8_DW(p8_dw_3x3_none, 9, TCC_ACT_NONE)
P8_DW(p8_dw_3x3_silu, 9, TCC_ACT_SILU)
P8_DW(p8_dw_3x3_act, 9, j->ed->act)
P8_DW(p8_dw_any, j->pd->kh * j->pd->kw, j->ed->act) /* T == 9 here: dilated columns */

#else
typedef __m512 v16f;

/* Positions [q, q + N) (N <= PWN, a constant in each instance below) of
 * the item's 16 channels (weights wi [C][16], its two blocks interleaved)
 * into buf: N accumulators, one weight vector and a broadcast of the input
 * per position and channel. The tail has its own N: a 7x7 plane is 4 tiles
 * of 12 and one of 1, which as a whole tile of 12 was 18 % of the work. */
CV_INLINE void p16_pw_tile(const p8_job *j, const float *x, const float *wi, long q, const int N, float *buf,
                           vf bias0, vf bias1, const float *pf, const int both) {
    const long C = j->C, P = j->P, blkf = j->Hp * j->Wp * CB;
    const float *xq = x + q;
    v16f a[PWN], b[PWN];
#pragma GCC unroll 12
    for (int i = 0; i < N; i++) a[i] = b[i] = _mm512_setzero_ps();
    for (long c = 0; c < C; c++, xq += P) {
        const v16f u = _mm512_load_ps(wi + c * 2 * CB), v = both ? _mm512_load_ps(wi + c * 2 * CB + CB) : u;
        if (pf) __builtin_prefetch(pf + c * 16);
#pragma GCC unroll 12
        for (int i = 0; i < N; i++) {
            const v16f xb = _mm512_set1_ps(xq[i]);
            a[i] = _mm512_fmadd_ps(xb, u, a[i]);
            if (both) b[i] = _mm512_fmadd_ps(xb, v, b[i]);
        }
    }
    const cv_ep *e = j->e;
    const int act = e->act;
    const float e0 = e->a0, e1 = e->a1;
    const int *pt = j->ptab + q;
#pragma GCC unroll 12
    for (int i = 0; i < N; i++) {
        _mm512_store_ps(buf + pt[i], (__m512)cv_act_v((vf)a[i] + bias0, act, e0, e1));
        if (both) _mm512_store_ps(buf + blkf + pt[i], (__m512)cv_act_v((vf)b[i] + bias1, act, e0, e1));
    }
}

/* p16_pw[h][N]: N positions of both halves (h = 1) or the first alone (h =
 * 0: the last item of a channel count that is 16 mod 32, whose second half
 * would be blocks past the last, computed for nothing: MobileNetV2's 144
 * channels are 4.5 items of 32, a tenth of their pointwise work) */
typedef void (*p16_pw_fn)(const p8_job *, const float *, const float *, long, float *, vf, vf, const float *);
#define P16_PW(N)                                                                                              \
    __attribute__((noinline)) static void p16_pw_##N(const p8_job *j, const float *x, const float *wi, long q,  \
                                                     float *buf, vf b0, vf b1, const float *pf) {              \
        p16_pw_tile(j, x, wi, q, N, buf, b0, b1, pf, 1);                                                       \
    }                                                                                                          \
    __attribute__((noinline)) static void p16_pw1_##N(const p8_job *j, const float *x, const float *wi, long q, \
                                                      float *buf, vf b0, vf b1, const float *pf) {             \
        p16_pw_tile(j, x, wi, q, N, buf, b0, b1, pf, 0);                                                       \
    }
P16_PW(1) P16_PW(2) P16_PW(3) P16_PW(4) P16_PW(5) P16_PW(6) P16_PW(7) P16_PW(8) P16_PW(9) P16_PW(10) P16_PW(11)
P16_PW(12)
/* [h][N] of a family P's tile instances (P##_pw1_N: the first half alone) */
#define PW_TILE_TABLE(P)                                                                                          \
    {{NULL, P##_pw1_1, P##_pw1_2, P##_pw1_3, P##_pw1_4, P##_pw1_5, P##_pw1_6, P##_pw1_7, P##_pw1_8, P##_pw1_9,   \
      P##_pw1_10, P##_pw1_11, P##_pw1_12},                                                                        \
     {NULL, P##_pw_1, P##_pw_2, P##_pw_3, P##_pw_4, P##_pw_5, P##_pw_6, P##_pw_7, P##_pw_8, P##_pw_9, P##_pw_10,  \
      P##_pw_11, P##_pw_12}}
static const p16_pw_fn p16_pw[2][PWN + 1] = PW_TILE_TABLE(p16);

/* Output positions [o, o + n) (n <= DWN) of the item's 16 channels (nc of
 * them real) to y (NCHW, channel m0's plane): one aligned 64-byte load and
 * multiply-add per tap and position, then the 8 x 16 block as two 8 x 8
 * transposes (the low and high channels) into row pieces of 8 positions. */
CV_INLINE void p16_dw_tile(const p8_job *j, const float *buf, const v16f *wt, const float *bc, const long T, long o,
                           int n, long nc, float *y, const float *res, const int full, const int act) {
    const int *dt = j->dtab + o;
    v16f acc[DWN];
    P8_DW_TAPS(v16f, _mm512_setzero_ps, _mm512_load_ps, _mm512_fmadd_ps);
    __m256 lo[DWN], hi[DWN];
#pragma GCC unroll 8
    for (int i = 0; i < DWN; i++) {
        lo[i] = _mm512_castps512_ps256(acc[i]);
        hi[i] = _mm512_extractf32x8_ps(acc[i], 1);
    }
    cv_tr8(lo); /* lo[c]: channel m0 + c at positions o.., hi[c]: channel m0 + 8 + c */
    cv_tr8(hi);
    const float e0 = j->ed->a0, e1 = j->ed->a1;
    const long OHW = j->OHW;
    const __mmask8 km = full ? 0xff : (__mmask8)((1u << n) - 1);
    /* the rows are 8 wide: their epilogue in ymm (a zmm op of 8 live lanes
     * costs Zen 4's 256-bit units two), 512-bit only for SiLU's exp */
#pragma GCC unroll 16
    for (int c = 0; c < CB; c++) {
        if (c >= nc) break;
        const long off = c * OHW + o;
        __m256 a = _mm256_add_ps(c < 8 ? lo[c] : hi[c - 8], _mm256_set1_ps(bc[c]));
        if (res) a = _mm256_add_ps(a, full ? _mm256_loadu_ps(res + off) : _mm256_maskz_loadu_ps(km, res + off));
        /* operand order: NaN passes through (max and min return their second operand) */
        if (act == TCC_ACT_CLIP) a = _mm256_min_ps(_mm256_set1_ps(e1), _mm256_max_ps(_mm256_set1_ps(e0), a));
        else if (act == TCC_ACT_RELU) a = _mm256_max_ps(_mm256_setzero_ps(), a);
        else if (act != TCC_ACT_NONE) a = _mm512_castps512_ps256((__m512)cv_act_v((vf)_mm512_castps256_ps512(a), act, e0, e1));
        if (full) _mm256_storeu_ps(y + off, a);
        else _mm256_mask_storeu_ps(y + off, km, a);
    }
}

/* Output positions [ob, oe) (a band of whole output rows). */
CV_INLINE void p16_dw_plane(const p8_job *j, const float *buf, const v16f *wt, const float *bc, const long T, long nc,
                            float *y, const float *res, const int act, long ob, long oe) {
    long o = ob;
    for (; o + DWN <= oe; o += DWN) p16_dw_tile(j, buf, wt, bc, T, o, DWN, nc, y, res, 1, act);
    if (o < oe) p16_dw_tile(j, buf, wt, bc, T, o, (int)(oe - o), nc, y, res, 0, act);
}
#define P16_DW(name, T, ACT)                                                                                      \
    __attribute__((noinline)) static void name(const p8_job *j, const float *buf, const v16f *wt, const float *bc, \
                                               long nc, float *y, const float *res, long ob, long oe) {         \
        p16_dw_plane(j, buf, wt, bc, T, nc, y, res, ACT, ob, oe);                                                 \
    }
P16_DW(p16_dw_3x3_clip, 9, TCC_ACT_CLIP)
P16_DW(p16_dw_3x3_relu, 9, TCC_ACT_RELU)
P16_DW(p16_dw_3x3_none, 9, TCC_ACT_NONE)
P16_DW(p16_dw_3x3_silu, 9, TCC_ACT_SILU)
P16_DW(p16_dw_3x3_act, 9, j->ed->act)
P16_DW(p16_dw_any, j->pd->kh * j->pd->kw, j->ed->act)

/* ---- the pointwise part in int8: AVX-512 VNNI (tcc_cpu_conv2d_q8_dw) ---- */
#define Q8_TARGET "avx512f,avx512bw,avx512vnni"

/* Rows [b, e) of the quantized images: QuantizeLinear's bytes as tcc_conv_q8
 * computes them (x / s + M + z clamped to [M + qmin, M + qmax], NaN to the
 * low end, the sum's low mantissa bits), 4 channels a word, 16 positions
 * at a time */
__attribute__((target(Q8_TARGET))) static void q8_quantize_rows(void *arg, long b, long e) {
    const p8_job *j = arg;
    const struct q8_part *z = j->q8;
    const long P = j->P, C = j->C;
    const float *qp = z->qp;
    const __m512 vs = _mm512_set1_ps(qp[Q8_SX]), vm = _mm512_set1_ps(TCC_QDQ_M), vz = _mm512_set1_ps(qp[Q8_ZX]);
    const __m512 vlo = _mm512_set1_ps(qp[Q8_LO]), vhi = _mm512_set1_ps(qp[Q8_HI]);
    const __m512i byte = _mm512_set1_epi32(0xFF), flip = _mm512_set1_epi32((int)z->flip);
    for (long r = b; r < e; r++) { /* r: image r / KQ4, its channels 4 (r % KQ4).. */
        const long kq = r % z->KQ4, img = r / z->KQ4;
        const float *src[4];
        for (int i = 0; i < 4; i++) src[i] = 4 * kq + i < C ? z->fx + (img * C + 4 * kq + i) * P : NULL;
        uint32_t *d = z->xi + r * z->PP;
        for (long q = 0; q < P; q += 16) {
            const __mmask16 k = P - q >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (P - q)) - 1);
            __m512i w = _mm512_setzero_si512();
            for (int i = 0; i < 4; i++) {
                if (!src[i]) continue;
                __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(k, src[i] + q), vs), vm), vz);
                t = _mm512_min_ps(_mm512_max_ps(t, vlo), vhi); /* max: NaN -> lo */
                const __m512i v = _mm512_xor_si512(_mm512_and_si512(_mm512_castps_si512(t), byte), flip);
                w = _mm512_or_si512(w, _mm512_slli_epi32(v, 8 * i));
            }
            _mm512_storeu_si512((void *)(d + q), w); /* PP: whole vectors */
        }
    }
}

/* vpdpbusd through asm (a: unsigned bytes, b: signed), as gemm_int.c's: with
 * GCC 12's intrinsic the accumulators went to the stack and back every step
 * (its accumulator not tied to its result) */
__attribute__((target(Q8_TARGET), always_inline)) static inline __m512i q8_dpbusd(__m512i c, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(c) : "v"(a), "v"(b));
    return c;
}

/* 16 output channels' sums as tcc_conv_q8's stores make them: Cast, Mul by
 * the scale, [Add the bias], [the pair], op by op in f32 (the empty asm:
 * no FMA of the product and the bias) */
/* The pair is cv_act_v's TCC_ACT_QDQ8 op for op, with its constants kept as
 * vectors: through cv_act_v's scalars GCC broadcast them again for each of
 * the 24 stores (114 broadcasts a tile against 47), and the fused calls of
 * mobilenetv2_qdq ran 5-8 % slower (AMD EPYC family 25 model 17, 1 thread). */
typedef struct {
    int bias, pair;
    __m512 s, lo, hi; /* the pair's scale, M + qmin - zero point, that + 255 */
} q8_ep;
__attribute__((target(Q8_TARGET), always_inline)) static inline q8_ep q8_ep_of(const struct q8_part *z) {
    q8_ep e = {z->has_bias, z->qp[Q8_ACT] != 0.f, _mm512_set1_ps(z->qp[Q8_ACT_S]), _mm512_set1_ps(z->qp[Q8_ACT_LO]),
               _mm512_set1_ps(z->qp[Q8_ACT_LO] + 255.f)};
    return e;
}
__attribute__((target(Q8_TARGET), always_inline)) static inline __m512 q8_requant(const q8_ep *e, __m512i acc, __m512 sc,
                                                                                   __m512 bi) {
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), sc);
    if (e->bias) {
        __asm__("" : "+v"(f));
        f = _mm512_add_ps(f, bi);
    }
    if (e->pair) {
        const __m512 big = _mm512_set1_ps(TCC_QDQ_M);
        __m512 t = _mm512_add_ps(_mm512_div_ps(f, e->s), big);
        t = _mm512_min_ps(_mm512_max_ps(t, e->lo), e->hi); /* max: NaN -> lo */
        f = _mm512_mul_ps(_mm512_sub_ps(t, big), e->s);
    }
    return f;
}

/* Positions [q, q + N) of the item's 32 channels (panel `quad` of the packed
 * weights: two vectors of 16 channels' 4-byte words per 4 input channels)
 * into buf: as p16_pw_tile, a broadcast word of the image's 4 channels per
 * position and vpdpbusd in place of the FMAs, a quarter of the steps. */
__attribute__((target(Q8_TARGET), always_inline)) static inline void q16_pw_tile(const p8_job *j, long quad,
                                                                                const uint32_t *xi, long q, const int N,
                                                                                float *buf, const int both) {
    const struct q8_part *z = j->q8;
    const long blkf = j->Hp * j->Wp * CB, m0 = quad * 32;
    const int32_t *w = z->wq + quad * z->KQ * 32;
    const uint32_t *xq = xi + q; /* this image's */
    const __m512i i0 = _mm512_loadu_si512(z->init + m0), i1 = _mm512_loadu_si512(z->init + m0 + 16);
    __m512i a[PWN], b[PWN];
#pragma GCC unroll 12
    for (int i = 0; i < N; i++) a[i] = i0, b[i] = i1;
    for (long kq = 0; kq < z->KQ4; kq++, w += 32, xq += z->PP) {
        const __m512i u = _mm512_loadu_si512(w), v = both ? _mm512_loadu_si512(w + 16) : u;
#pragma GCC unroll 12
        for (int i = 0; i < N; i++) {
            const __m512i xb = _mm512_set1_epi32((int)xq[i]);
            a[i] = q8_dpbusd(a[i], xb, u);
            if (both) b[i] = q8_dpbusd(b[i], xb, v);
        }
    }
    const __m512 s0 = _mm512_loadu_ps(z->scale + m0), s1 = _mm512_loadu_ps(z->scale + m0 + 16);
    const __m512 c0 = _mm512_loadu_ps(z->bias + m0), c1 = _mm512_loadu_ps(z->bias + m0 + 16);
    const int *pt = j->ptab + q;
    const q8_ep e = q8_ep_of(z); /* read once: the stores below may alias z's floats for all GCC knows */
#pragma GCC unroll 12
    for (int i = 0; i < N; i++) {
        _mm512_store_ps(buf + pt[i], q8_requant(&e, a[i], s0, c0));
        if (both) _mm512_store_ps(buf + blkf + pt[i], q8_requant(&e, b[i], s1, c1));
    }
}
typedef void (*q16_pw_fn)(const p8_job *, long, const uint32_t *, long, float *);
#define Q16_PW(N)                                                                                              \
    __attribute__((target(Q8_TARGET), noinline)) static void q16_pw_##N(const p8_job *j, long quad,             \
                                                                         const uint32_t *xi, long q, float *buf) { \
        q16_pw_tile(j, quad, xi, q, N, buf, 1);                                                                \
    }                                                                                                          \
    __attribute__((target(Q8_TARGET), noinline)) static void q16_pw1_##N(const p8_job *j, long quad,            \
                                                                          const uint32_t *xi, long q, float *buf) { \
        q16_pw_tile(j, quad, xi, q, N, buf, 0);                                                                \
    }
Q16_PW(1) Q16_PW(2) Q16_PW(3) Q16_PW(4) Q16_PW(5) Q16_PW(6) Q16_PW(7) Q16_PW(8) Q16_PW(9) Q16_PW(10) Q16_PW(11)
Q16_PW(12)
static const q16_pw_fn q16_pw[2][PWN + 1] = PW_TILE_TABLE(q16);
#endif

/* Zeroes what is not the plane's interior in a block of the padded buffer. */
static void p8_zero_border(const p8_job *j, float *b) {
    const tcc_conv_params *pd = j->pd;
    const long Wp = j->Wp, pt = pd->pt, pl = pd->pl, rest = Wp - pl - j->W;
    memset(b, 0, (size_t)(pt * Wp * CB) * sizeof(float));
    for (long r = pt; r < pt + j->H; r++) {
        memset(b + r * Wp * CB, 0, (size_t)(pl * CB) * sizeof(float));
        memset(b + (r * Wp + pl + j->W) * CB, 0, (size_t)(rest * CB) * sizeof(float));
    }
    memset(b + (pt + j->H) * Wp * CB, 0, (size_t)((j->Hp - pt - j->H) * Wp * CB) * sizeof(float));
}

/* The borders of this thread's two buffers zeroed once per call, not once per
 * task: with two threads a task is a chunk of often one item, and each ran
 * the per-row memsets (four a row) again. MobileNetV2 on 2 threads, Xeon
 * family 6 model 167, medians of 7 interleaved runs: every pair 1-6 %
 * faster (avx512 0.170 -> 0.160 ms at 56x56, 0.072 -> 0.070 at 28x28;
 * avx2 0.306 -> 0.300 at 112x112), the model 2.83 -> 2.74 ms (avx512) and
 * 4.02 -> 3.92 (avx2). */
static __thread unsigned long t_p8_call;
static void p8_zero_borders(const p8_job *j, float *buf, long blkf) {
    if (t_p8_call == j->call) return;
    p8_zero_border(j, buf);
    p8_zero_border(j, buf + blkf);
    t_p8_call = j->call;
}

#if CB == 8
static void p8_task(void *arg, long b, long e) {
    const p8_job *j = arg;
    const tcc_conv_params *pd = j->pd;
    const long T = pd->kh * pd->kw, blkf = j->Hp * j->Wp * PR, C = j->C, P = j->P, M = j->M;
    float *buf = cv_tls_buffer(2, (size_t)(2 * blkf));
    p8_zero_borders(j, buf, blkf);
    for (long it = b; it < e; it++) {
        /* band-major, as on AVX-512: a thread's range is one band of every
         * pair, its rows (P8_BAND_ROWS) */
        const long pair = it % j->npair, band = it / j->npair % j->nband, img = it / j->nband / j->npair;
        const long blk0 = 2 * pair;
        const long blk1 = blk0 + 1 < j->nblk ? blk0 + 1 : blk0; /* an odd last block: computed twice, used once */
        /* the band's output rows, and the input rows its taps read (the halo rows computed twice) */
        const long o0 = band * pd->oh / j->nband, o1 = (band + 1) * pd->oh / j->nband;
        long r0 = o0 * pd->sh - pd->pt, r1 = (o1 - 1) * pd->sh + (pd->kh - 1) * pd->dh - pd->pt + 1;
        r0 = r0 < 0 ? 0 : r0;
        r1 = r1 > j->H ? j->H : r1;
        const float *x = j->x + img * C * P, *w0 = j->wp + blk0 * C * PR, *w1 = j->wp + blk1 * C * PR;
        float bb[2][PR];
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < PR; i++) {
                const long m = (blk0 + h) * PR + i;
                bb[h][i] = m < M ? cv_bias(j->e, m) : 0.f;
            }
        const v8f b0 = _mm256_loadu_ps(bb[0]), b1 = _mm256_loadu_ps(bb[1]);
        /* the next item's two weight blocks (2 C x 8 floats: C lines),
         * spread over the first npf tiles: all of them in the first tile
         * (a line per input channel, 6 cycles apart) ran the 7x7 pairs
         * 30 % slower in the model than alone (their weights come from L3
         * there). AMD EPYC Zen 4, AVX2 library, 1 thread, MobileNetV2's
         * 160 -> 960 pairs: 0.228 ms in one tile, 0.205 in two, 0.191 in
         * four or eight (0.176 with the AVX-512 library). */
        const long qb = r0 * j->W, qe = r1 * j->W;
        const long npair = (it + 1) % j->npair, ntile = (qe - qb) / PWN;
        const long npf = ntile >= 4 ? 4 : ntile >= 2 ? 2 : 1;
        const float *pf = it + 1 < e && npair != pair ? j->wp + 2 * npair * C * PR : NULL;
        long q = qb;
        for (long t = 0; q + PWN <= qe; q += PWN, t++)
            p8_pw_full(j, x, w0, w1, q, buf, buf + blkf, b0, b1, pf && t < npf ? pf + t * (16 / npf) * C : NULL,
                       16 / npf);
        if (q < qe) p8_pw_tail(j, x, w0, w1, q, (int)(qe - q), buf, buf + blkf, b0, b1, q > qb ? NULL : pf, 16);
        float *y = j->y + img * M * j->OHW;
        const float *res = j->ed->res ? j->ed->res + img * M * j->OHW : NULL;
        for (int h = 0; h < 2 && blk0 + h < j->nblk; h++) {
            const long m0 = (blk0 + h) * PR;
            v8f wt[TMAX];
            for (long t = 0; t < T; t++) {
                float wl[PR];
                for (int i = 0; i < PR; i++) wl[i] = m0 + i < M ? j->wd[(m0 + i) * T + t] : 0.f;
                wt[t] = _mm256_loadu_ps(wl);
            }
            float bc[PR];
            for (int i = 0; i < PR; i++) bc[i] = m0 + i < M ? cv_bias(j->ed, m0 + i) : 0.f;
            const long nc = M - m0 < PR ? M - m0 : PR;
            float *yb = y + m0 * j->OHW;
            const float *rb = res ? res + m0 * j->OHW : NULL, *bh = buf + h * blkf;
            if (T == 9 && pd->dw == 1) {
                const int act = j->ed->act;
                const long ob = o0 * pd->ow, oe = o1 * pd->ow;
                if (act == TCC_ACT_CLIP) p8_dw_3x3_clip(j, bh, wt, bc, nc, yb, rb, ob, oe);
                else if (act == TCC_ACT_RELU) p8_dw_3x3_relu(j, bh, wt, bc, nc, yb, rb, ob, oe);
                else if (act == TCC_ACT_NONE) p8_dw_3x3_none(j, bh, wt, bc, nc, yb, rb, ob, oe);
                else if (act == TCC_ACT_SILU) p8_dw_3x3_silu(j, bh, wt, bc, nc, yb, rb, ob, oe);
                else p8_dw_3x3_act(j, bh, wt, bc, nc, yb, rb, ob, oe);
            } else {
                p8_dw_any(j, bh, wt, bc, nc, yb, rb, o0 * pd->ow, o1 * pd->ow);
            }
        }
    }
}

#else
/* An item: four blocks of 8 expanded channels (32: two zmm per position)
 * over a band of output rows (the whole plane but where the items are too
 * few to share evenly: then nband bands, each computing the input rows its
 * taps read, the halo rows twice). */
static void p8_task(void *arg, long b, long e) {
    const p8_job *j = arg;
    const tcc_conv_params *pd = j->pd;
    const long T = pd->kh * pd->kw, C = j->C, P = j->P, M = j->M, blkf = j->Hp * j->Wp * CB;
    float *buf = cv_tls_buffer(2, (size_t)(2 * blkf));
    float *wi = j->q8 ? NULL : cv_tls_buffer(4, (size_t)(C * 2 * CB));
    p8_zero_borders(j, buf, blkf);
    for (long it = b; it < e; it++) {
        /* band-major: a thread's range is one band of every item (its
         * input rows stay in its cache), and a cheaper last item (single-zmm
         * tiles, above) no longer leaves one thread the longer share.
         * MobileNetV2's 144-channel pairs, 2 threads, Zen 4: 0.206 -> 0.189
         * ms at 56x56, 0.146 -> 0.139 at stride 2 (the AVX2 items of two
         * blocks: within 3 % either way) */
        const long quad = it % j->npair, band = it / j->npair % j->nband, img = it / j->nband / j->npair;
        const long blk0 = 4 * quad, OH = pd->oh, OW = pd->ow;
        const long o0 = band * OH / j->nband, o1 = (band + 1) * OH / j->nband; /* output rows */
        long r0 = o0 * pd->sh - pd->pt, r1 = (o1 - 1) * pd->sh + (pd->kh - 1) * pd->dh - pd->pt + 1; /* input rows */
        r0 = r0 < 0 ? 0 : r0;
        r1 = r1 > j->H ? j->H : r1;
        const long m0 = blk0 * PR;
        const int both = blk0 + 2 < j->nblk;
        if (j->q8) {
            long q = r0 * j->W;
            const long qe = r1 * j->W;
            const uint32_t *xi = j->q8->xi + img * j->q8->KQ4 * j->q8->PP;
            for (; q + PWN <= qe; q += PWN) q16_pw[both][PWN](j, quad, xi, q, buf);
            if (q < qe) q16_pw[both][qe - q](j, quad, xi, q, buf);
        } else {
        const float *x = j->x + img * C * P;
        for (int k = 0; k < 4; k++) { /* blocks past the last: the first again, computed, never stored */
            const float *w = j->wp + (blk0 + k < j->nblk ? blk0 + k : blk0) * C * PR;
            for (long c = 0; c < C; c++) memcpy(wi + c * 2 * CB + k * PR, w + c * PR, PR * sizeof(float));
        }
        float bb[2 * CB] __attribute__((aligned(64)));
        for (int i = 0; i < 2 * CB; i++) bb[i] = m0 + i < M ? cv_bias(j->e, m0 + i) : 0.f;
        const vf bias0 = v_ld(bb), bias1 = v_ld(bb + CB);
        /* the next item's weights (another four blocks: 4 C x 8 floats, 2 C
         * lines), prefetched a line per input channel over the first tiles */
        const long nquad = (it + 1) % j->npair;
        const float *pf = it + 1 < e && nquad != quad ? j->wp + 4 * nquad * C * PR : NULL;
        const float *pfe = pf ? j->wp + (4 * nquad + 4 < j->nblk ? 4 * nquad + 4 : j->nblk) * C * PR : NULL;
        long q = r0 * j->W;
        const long qe = r1 * j->W;
        const p16_pw_fn full = p16_pw[both][PWN];
        for (; q + PWN <= qe; q += PWN, pf = pf && pf + C * 16 < pfe ? pf + C * 16 : NULL)
            full(j, x, wi, q, buf, bias0, bias1, pf);
        if (q < qe) p16_pw[both][qe - q](j, x, wi, q, buf, bias0, bias1, pf);
        }
        for (int h = 0; h < 2; h++) {
            const long mh = m0 + h * CB;
            if (mh >= M) break;
            float *y = j->y + img * M * j->OHW + mh * j->OHW;
            const float *res = j->ed->res ? j->ed->res + img * M * j->OHW + mh * j->OHW : NULL;
            v16f wt[TMAX];
            for (long t = 0; t < T; t++) {
                float wl[CB] __attribute__((aligned(64)));
                for (int i = 0; i < CB; i++) wl[i] = mh + i < M ? j->wd[(mh + i) * T + t] : 0.f;
                wt[t] = _mm512_load_ps(wl);
            }
            float bc[CB];
            for (int i = 0; i < CB; i++) bc[i] = mh + i < M ? cv_bias(j->ed, mh + i) : 0.f;
            const long nc = M - mh < CB ? M - mh : CB;
            const float *bh = buf + h * blkf;
            if (T == 9 && pd->dw == 1) {
                const int act = j->ed->act;
                if (act == TCC_ACT_CLIP) p16_dw_3x3_clip(j, bh, wt, bc, nc, y, res, o0 * OW, o1 * OW);
                else if (act == TCC_ACT_RELU) p16_dw_3x3_relu(j, bh, wt, bc, nc, y, res, o0 * OW, o1 * OW);
                else if (act == TCC_ACT_NONE) p16_dw_3x3_none(j, bh, wt, bc, nc, y, res, o0 * OW, o1 * OW);
                else if (act == TCC_ACT_SILU) p16_dw_3x3_silu(j, bh, wt, bc, nc, y, res, o0 * OW, o1 * OW);
                else p16_dw_3x3_act(j, bh, wt, bc, nc, y, res, o0 * OW, o1 * OW);
            } else {
                p16_dw_any(j, bh, wt, bc, nc, y, res, o0 * OW, o1 * OW);
            }
        }
    }
}
#endif

/* Geometry of the padded buffer; 0 when this kernel does not take the pair.
 * q8 (tcc_cpu_conv2d_q8_dw): no other kernel fuses the pair, so the buffer's
 * size and the threads' balance do not send it elsewhere (apart, the
 * expanded tensor would go through memory). */
static int p8_init(p8_job *j, const tcc_conv_params *p, const tcc_conv_params *pd, const cv_ep *e,
                   const cv_ep *ed, int width, int q8) {
    memset(j, 0, sizeof *j);
    const long T = pd->kh * pd->kw;
    if (T > TMAX || !cv_vec_act(e->act) || !cv_vec_act(ed->act) || e->res) return 0;
    j->p = p;
    j->pd = pd;
    j->C = p->c;
    j->M = p->m;
    j->H = p->h;
    j->W = p->w;
    j->P = p->h * p->w;
    j->OHW = pd->oh * pd->ow;
    const long hr = (pd->oh - 1) * pd->sh + (pd->kh - 1) * pd->dh + 1, wr = (pd->ow - 1) * pd->sw + (pd->kw - 1) * pd->dw + 1;
    j->Hp = pd->pt + j->H > hr ? pd->pt + j->H : hr;
    j->Wp = pd->pl + j->W > wr ? pd->pl + j->W : wr;
    if (!q8 && 2 * j->Hp * j->Wp * CB * (long)sizeof(float) > PWDW8_BUF_BYTES) return 0;
    for (long ki = 0; ki < pd->kh; ki++)
        for (long kj = 0; kj < pd->kw; kj++) j->toff[ki * pd->kw + kj] = (ki * pd->dh * j->Wp + kj * pd->dw) * CB;
    j->nblk = (j->M + PR - 1) / PR;
#if CB == 16
    j->npair = (j->nblk + 3) / 4; /* items of four blocks */
#else
    j->npair = (j->nblk + 1) / 2;
#endif
    /* Few items that the threads cannot share evenly: split into a band of
     * output rows a thread, each band computing the expansion of the input
     * rows its taps read. MobileNetV2's 144-channel pair at 56x56 on 2
     * threads: AVX-512, 5 items of four blocks (3 on one thread), 0.211 ms
     * against the planar kernel's 0.198, in bands 0.210 against 0.219-0.227
     * (Intel Xeon); AVX2, 9 items of two, 1.68x its 1-thread speed as
     * items (AMD EPYC Zen 4). */
    const long items = p->n * j->npair;
    j->nband = 1;
#if CB == 8
    if (width > 1 && pd->oh >= P8_BAND_ROWS) j->nband = width;
#endif
    if (width > 1 && items % width && items < 8 * width) {
#if CB == 16
        if (pd->oh < 4 * width) { /* the planar kernel (its items single blocks); q8: whole items */
            if (!q8) return 0;
        } else
#else
        if (pd->oh >= 4 * width) /* else whole items (a 2-block item is no worse than planes) */
#endif
        j->nband = width;
    }
    j->e = e;
    j->ed = ed;
    return 1;
}

/* The pair's call once j is set up (p8_init, and the pointwise part's). */
static int cv_pwdw8_run(p8_job *jp, const tcc_conv_params *p, const float *wd, float *y) {
    p8_job j = *jp;
    j.wd = wd;
    j.y = y;
    const tcc_conv_params *q = j.pd;
    /* a depthwise tile reads DWN entries from its first position, which a
     * band of rows (AVX-512) starts anywhere: DWN more, the last repeated */
    const long np = (j.P + PWN - 1) / PWN * PWN, nd = (j.OHW + DWN - 1) / DWN * DWN + DWN;
    int *tab = (int *)cv_tls_buffer(3, (size_t)(np + nd));
    for (long i = 0, r = 0, c = 0; i < np; i++) { /* row and column counted: no division per entry */
        tab[i] = i < j.P ? (int)(((r + q->pt) * j.Wp + c + q->pl) * CB) : tab[i - 1];
        if (++c == j.W) c = 0, r++;
    }
    for (long i = 0, r = 0, c = 0; i < nd; i++) {
        tab[np + i] = i < j.OHW ? (int)((r * q->sh * j.Wp + c * q->sw) * CB) : tab[np + i - 1];
        if (++c == q->ow) c = 0, r++;
    }
    j.ptab = tab;
    j.dtab = tab + np;
    j.call = cv_call_number();
    tcc_cpu_parallel_for(p->n * j.npair * j.nband, 1, p8_task, &j);
    return 1;
}

int cv_pwdw8(const tcc_conv_params *p, const float *x, const float *wp, const cv_ep *e, const tcc_conv_params *pd,
             const float *wd, const cv_ep *ed, float *y) {
    p8_job j;
    if (!p8_init(&j, p, pd, e, ed, cv_pool_width(), 0)) return 0;
    j.x = x;
    j.wp = wp;
    return cv_pwdw8_run(&j, p, wd, y);
}

int cv_pwdw8_takes(const tcc_conv_params *p, const tcc_conv_params *pd) {
    static const cv_ep none = {NULL, 1.f, 0, NULL, TCC_ACT_NONE, 0.f, 0.f};
    p8_job j;
    return p8_init(&j, p, pd, &none, &none, cv_pool_width(), 0);
}

/* tcc_conv_q8's p as the pointwise tcc_conv_params, where this kernel takes
 * it: a 1x1 of stride 1 without pads, weights packed for VNNI (layout 2),
 * and the AVX-512 build on a CPU with VNNI. gemm_int.c's CI_ order. */
static int q8_params(const int64_t *p, tcc_conv_params *pp) {
#if CB == 16
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) return 0;
    if (p[5] != 1 || p[6] != 1 || p[9] != 1 || p[10] != 1 || p[11] != 0 || p[12] != 0 || p[19] != 2) return 0;
    const tcc_conv_params q = {p[0], p[1], p[2], p[3], p[4], 1, 1, p[2], p[3], 1, 1, 1, 1, 0, 0, 0, 0, 1};
    *pp = q;
    return 1;
#else
    (void)p, (void)pp;
    return 0;
#endif
}

int cv_q8dw_takes(const int64_t *p, const tcc_conv_params *pd) {
    static const cv_ep none = {NULL, 1.f, 0, NULL, TCC_ACT_NONE, 0.f, 0.f};
    tcc_conv_params pp;
    p8_job j;
    return q8_params(p, &pp) && p8_init(&j, &pp, pd, &none, &none, cv_pool_width(), 1);
}

int cv_q8dw(const int64_t *p, const float *qp, const float *x, const void *wq, const float *scale, const float *bias,
            const tcc_conv_params *pd, const float *wd, const cv_ep *ed, float *y) {
#if CB == 16
    static const cv_ep none = {NULL, 1.f, 0, NULL, TCC_ACT_NONE, 0.f, 0.f};
    tcc_conv_params pp;
    p8_job j;
    if (!q8_params(p, &pp) || !p8_init(&j, &pp, pd, &none, ed, cv_pool_width(), 1)) return 0;
    struct q8_part z = {.qp = qp, .wq = wq, .has_bias = bias != NULL, .fx = x, .flip = p[15] ? 0x80u : 0u};
    const long C = pp.c, M = pp.m, P = j.P, npan = (M + 31) / 32;
    z.KQ4 = (C + 3) / 4;
    z.KQ = (z.KQ4 + 15) / 16 * 16; /* pack_u8s8's */
    z.PP = (P + 15) / 16 * 16;
    const int32_t *colsum = z.wq + npan * z.KQ * 32;
    /* the caller's buffer 0 (no task of this call uses it): per channel the
     * sums' start, scale and bias (whole panels), then the quantized images */
    float *t = cv_tls_buffer(0, (size_t)(3 * npan * 32 + pp.n * z.KQ4 * z.PP));
    if (!t) abort();
    int32_t *init = (int32_t *)t;
    float *sc = t + npan * 32, *bi = sc + npan * 32;
    const uint32_t za = (uint32_t)(int32_t)qp[Q8_ZX] + (p[15] ? 128u : 0u);
    for (long m = 0; m < npan * 32; m++) {
        init[m] = (int32_t)(0u - za * (uint32_t)colsum[m]);
        sc[m] = m < M ? scale[m] : 0.f;
        bi[m] = bias && m < M ? bias[m] : 0.f;
    }
    z.init = init, z.scale = sc, z.bias = bi;
    z.xi = (uint32_t *)(bi + npan * 32);
    j.q8 = &z;
    tcc_cpu_parallel_for(pp.n * z.KQ4, 1, q8_quantize_rows, &j);
    return cv_pwdw8_run(&j, &pp, wd, y);
#else
    (void)p, (void)qp, (void)x, (void)wq, (void)scale, (void)bias, (void)pd, (void)wd, (void)ed, (void)y;
    return 0;
#endif
}
#else
int cv_pwdw8(const tcc_conv_params *p, const float *x, const float *wp, const cv_ep *e, const tcc_conv_params *pd,
             const float *wd, const cv_ep *ed, float *y) {
    (void)p, (void)x, (void)wp, (void)e, (void)pd, (void)wd, (void)ed, (void)y;
    return 0;
}
int cv_pwdw8_takes(const tcc_conv_params *p, const tcc_conv_params *pd) {
    (void)p, (void)pd;
    return 0;
}
int cv_q8dw_takes(const int64_t *p, const tcc_conv_params *pd) {
    (void)p, (void)pd;
    return 0;
}
int cv_q8dw(const int64_t *p, const float *qp, const float *x, const void *wq, const float *scale, const float *bias,
            const tcc_conv_params *pd, const float *wd, const cv_ep *ed, float *y) {
    (void)p, (void)qp, (void)x, (void)wq, (void)scale, (void)bias, (void)pd, (void)wd, (void)ed, (void)y;
    return 0;
}
#endif

/* Which kernel tcc_cpu_conv2d_pw_dw runs for the pair (pp, pd): "blocked8"
 * (this file) or "planes" (conv_pw.c's plane-by-plane kernel). The tests
 * check each build takes the one documented for it. */
const char *tcc_cpu_conv2d_pw_dw_path(const tcc_conv_params *pp, const tcc_conv_params *pd) {
    return cv_pwdw8_takes(pp, pd) ? "blocked8" : "planes";
}
