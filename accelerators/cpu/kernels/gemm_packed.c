/* GEMM against a constant B packed at compile time (codegen.pack_b):
 * B as [ceil(N/32)][K][32] panels, columns past N zero. OpenBLAS packs both
 * operands on every call; for a model's weights that is the same work each
 * time (a fifth of a batch-64 MLP's run), so the weights arrive packed and
 * only A is read as it is. The same tiles also read a small row-major B in
 * place (gemm.c: attention's per-head products), its columns masked at N.
 *
 * Tiles of up to MR_MAX rows x 32 columns over the whole K, accumulators in
 * registers; M is cut into equal row blocks (M = 64: 5 blocks of 12-13 rows)
 * with a kernel instance per exact row count, so no row is computed twice and
 * no block is much smaller than the largest. The panel (K x 128 bytes) stays
 * in L2 while the row blocks of a panel pass over it, prefetched 16 rows
 * ahead (measured: K blocking to keep it in L1 gained nothing at K = 1024:
 * ~150 GFLOP/s of ~155 without it). A last panel of at most 16 columns runs
 * a one-vector instance. Tasks are (column panel, row block) pairs on the
 * library's pool; the epilogue runs on each tile right after its store. */
#include <string.h>

#include "conv_vec.h" /* cv_tls_buffer */
#include "tcc_cpu.h"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

void tcc_cpu_epilogue(const tcc_epilogue *ep, float *C, long ldc, long N, long r0, long r1, long c0, long c1);

#define PN 32 /* columns per panel */

typedef struct {
    long M, N, K, rsa, csa, ldb, pstride, ldc, mblocks; /* B: row stride, panel stride */
    long group; /* column units (COLS wide) a group: gemm_panels */
    int padded; /* B's last panel is zero past N (packed), not the end of B */
    float alpha;
    const float *A, *Bp;
    float *C;
    const tcc_epilogue *ep;
} packed_job;

#if defined(__AVX512F__)
/* 14 rows x 2 vectors: 28 accumulators, 2 B vectors and a broadcast fill
 * the 32 registers. */
#define MR_MAX 14
#define COLS PN /* columns per tile */
/* B rows prefetched ahead (past the panel's end: the next panel's first
 * rows); measured 5-10 % faster than the hardware prefetcher alone. */
#define PF_K 16

/* out = act(alpha * acc + bias + residual) on a stored tile, still in L1:
 * cheaper than applying it to the accumulators, which would either spill
 * them around a call per row or copy the epilogue into every tile instance. */
__attribute__((noinline)) static void tile_epilogue(const packed_job *j, long i0, long mr, long c0, long nr) {
    const tcc_epilogue *ep = j->ep;
    const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
    const int act = ep ? ep->act : TCC_ACT_NONE, post = act == TCC_ACT_SIGMOID || act == TCC_ACT_TANH;
    const int bm = ep && ep->bias && !post ? ep->bias_mode : 0;
    const float *res = ep && !post ? ep->residual : NULL;
    const __m512 al = _mm512_set1_ps(j->alpha), z = _mm512_setzero_ps();
    const __m512 bs = _mm512_set1_ps(bm ? ep->bias_scale : 0.f);
    const __m512 lo = _mm512_set1_ps(ep ? ep->a0 : 0.f), hi = _mm512_set1_ps(ep ? ep->a1 : 0.f);
    __m512 b0 = z, b1 = z;
    if (bm == 1) {
        b0 = _mm512_mul_ps(bs, _mm512_maskz_loadu_ps(m0, ep->bias + c0));
        b1 = _mm512_mul_ps(bs, _mm512_maskz_loadu_ps(m1, ep->bias + c0 + 16));
    } else if (bm == 4) {
        b0 = b1 = _mm512_set1_ps(ep->bias_scale * ep->bias[0]);
    }
    for (long i = i0; i < i0 + mr; i++) {
        float *c = j->C + i * j->ldc + c0;
        __m512 v0 = _mm512_maskz_loadu_ps(m0, c), v1 = _mm512_maskz_loadu_ps(m1, c + 16), r0 = b0, r1 = b1;
        if (bm == 2) {
            r0 = r1 = _mm512_set1_ps(ep->bias_scale * ep->bias[i]);
        } else if (bm == 3) {
            const float *b = ep->bias + i * j->N + c0;
            r0 = _mm512_mul_ps(bs, _mm512_maskz_loadu_ps(m0, b));
            r1 = _mm512_mul_ps(bs, _mm512_maskz_loadu_ps(m1, b + 16));
        }
        v0 = _mm512_fmadd_ps(v0, al, r0);
        v1 = _mm512_fmadd_ps(v1, al, r1);
        if (res) {
            const float *r = res + i * j->ldc + c0;
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, r));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, r + 16));
        }
        switch (act) {
        case TCC_ACT_RELU:
            v0 = _mm512_max_ps(z, v0); /* operand order: NaN passes through (max returns the second) */
            v1 = _mm512_max_ps(z, v1);
            break;
        case TCC_ACT_CLIP: /* operand order: NaN passes through, as in tcc_cpu_epilogue */
            v0 = _mm512_min_ps(hi, _mm512_max_ps(lo, v0));
            v1 = _mm512_min_ps(hi, _mm512_max_ps(lo, v1));
            break;
        case TCC_ACT_LEAKY:
            v0 = _mm512_mask_mul_ps(v0, _mm512_cmp_ps_mask(v0, z, _CMP_LT_OQ), v0, lo);
            v1 = _mm512_mask_mul_ps(v1, _mm512_cmp_ps_mask(v1, z, _CMP_LT_OQ), v1, lo);
            break;
        }
        _mm512_mask_storeu_ps(c, m0, v0);
        _mm512_mask_storeu_ps(c + 16, m1, v1);
    }
    if (post) tcc_cpu_epilogue(ep, j->C, j->ldc, j->N, i0, i0 + mr, c0, c0 + nr);
}

#define REP14(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)

/* MR rows from i0 x NV vectors of panel p (row block r of the panel's
 * mblocks). Named accumulators (not an array): GCC keeps arrays of more
 * than 8 row pairs in memory. Rows 7.. are addressed from a second base so
 * that both halves share the row offsets (13 offsets in 13 registers left
 * too few: reloads in the loop).
 *
 * Packed panels: while the row blocks of panel p pass over it (from L2),
 * each prefetches its share of panel p + 1 into L2 (prefetcht1, spread
 * over its K loop), so the next panel's first row block does not wait on
 * L3: a model's weights (the MLP's 7 MB) stream from L3 on every run, and
 * one row block alone reads a panel row (128 bytes) every 14 cycles, about
 * the L3 bandwidth of one core (24 GB/s). Measured on the MLP's 64x1024x1024
 * layer: 4 % faster. `pos` is that share's line index in 16.16 fixed point.
 * With A's rows contiguous the K loop is unrolled by 4, offsets folded into
 * the addressing: the loop's scalar work (pointer steps, prefetch address,
 * branch) competed with the FMAs for issue slots; 6-7 % faster (~165
 * GFLOP/s, the FMA peak, with B in L2). */
static inline __attribute__((always_inline)) void tile(const packed_job *j, long i0, long p, long r, const int MR,
                                                        const int NV) {
    const long K = j->K, rs = j->rsa, cs = j->csa, ldb = j->ldb;
    const long c0 = p * PN, nr = j->N - c0 < PN ? j->N - c0 : PN;
    const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
    const float *a = j->A + i0 * rs, *a7 = a + 7 * rs, *b = j->Bp + p * j->pstride;
    const __m512 z = _mm512_setzero_ps();
    const int next = j->padded && j->mblocks > 1 && c0 + j->group * PN < j->N; /* the next group's panel p */
    const char *nb = (const char *)(next ? b + j->group * j->pstride : b); /* without one: this panel's first line */
    unsigned long pos = next ? (unsigned long)r * K * (2ul << 16) / j->mblocks : 0;
    const unsigned long step = next ? (2ul << 16) / j->mblocks : 0;
#define DECL(i) __m512 c##i##0 = z, c##i##1 = z;
    REP14(DECL)
#define FMA(i, u)                                                                                                \
    if (MR > i) {                                                                                                \
        const __m512 av = _mm512_set1_ps(i < 7 ? a[i * rs + (u)] : a7[(i - 7) * rs + (u)]);                     \
        c##i##0 = _mm512_fmadd_ps(av, b0, c##i##0);                                                              \
        if (NV > 1) c##i##1 = _mm512_fmadd_ps(av, b1, c##i##1);                                                  \
    }
#define FMA0(i) FMA(i, 0)
#define FMA1(i) FMA(i, 1)
#define FMA2(i) FMA(i, 2)
#define FMA3(i) FMA(i, 3)
#define STEP(u)                                                                                                  \
    {                                                                                                            \
        const __m512 b0 = _mm512_loadu_ps(b + (u) * PN), b1 = NV > 1 ? _mm512_loadu_ps(b + (u) * PN + 16) : z;  \
        REP14(FMA##u)                                                                                            \
    }
    long k = 0;
    if (j->padded && cs == 1)
        for (; k + 4 <= K; k += 4, a += 4, a7 += 4, b += 4 * PN) {
            STEP(0)
            _mm_prefetch(nb + (pos >> 16) * 64, _MM_HINT_T1);
            STEP(1)
            _mm_prefetch(nb + (pos >> 16) * 64 + 64, _MM_HINT_T1);
            pos += 4 * step;
            STEP(2)
            STEP(3)
        }
    for (; k < K; k++, a += cs, a7 += cs, b += ldb) {
        /* masked: a row-major B ends at column N (packed panels are zero there) */
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = NV > 1 ? _mm512_maskz_loadu_ps(m1, b + 16) : z;
        _mm_prefetch((const char *)(b + PF_K * ldb), _MM_HINT_T0);
        if (NV > 1) _mm_prefetch((const char *)(b + PF_K * ldb + 16), _MM_HINT_T0);
        if (next) {
            _mm_prefetch(nb + (pos >> 16) * 64, _MM_HINT_T1);
            pos += step;
        }
        REP14(FMA0)
    }
    float *C = j->C + i0 * j->ldc + c0;
#define STORE(i)                                                                                                 \
    if (MR > i) {                                                                                                \
        _mm512_mask_storeu_ps(C + i * j->ldc, m0, c##i##0);                                                      \
        if (NV > 1) _mm512_mask_storeu_ps(C + i * j->ldc + 16, m1, c##i##1);                                     \
    }
    REP14(STORE)
    if (j->ep || j->alpha != 1.f) tile_epilogue(j, i0, MR, c0, nr);
}

typedef void (*tile_fn)(const packed_job *, long, long, long);
#define TILES(MR)                                                                                                \
    static void tile##MR##_1(const packed_job *j, long i0, long p, long r) { tile(j, i0, p, r, MR, 1); }      \
    static void tile##MR##_2(const packed_job *j, long i0, long p, long r) { tile(j, i0, p, r, MR, 2); }
TILES(1) TILES(2) TILES(3) TILES(4) TILES(5) TILES(6) TILES(7) TILES(8) TILES(9) TILES(10) TILES(11) TILES(12)
TILES(13) TILES(14)
static const tile_fn tiles[2][MR_MAX + 1] = {
    {NULL, tile1_1, tile2_1, tile3_1, tile4_1, tile5_1, tile6_1, tile7_1, tile8_1, tile9_1, tile10_1, tile11_1,
     tile12_1, tile13_1, tile14_1},
    {NULL, tile1_2, tile2_2, tile3_2, tile4_2, tile5_2, tile6_2, tile7_2, tile8_2, tile9_2, tile10_2, tile11_2,
     tile12_2, tile13_2, tile14_2}};

static void run_tile(const packed_job *j, long i0, long mr, long p, long r) {
    tiles[j->N - p * PN > 16][mr](j, i0, p, r);
}
#elif defined(__AVX2__) && defined(__FMA__)
/* AVX2 (16 ymm registers): tiles of up to 6 rows x 16 columns, half a panel
 * (the Haswell/Zen kernels of OpenBLAS and MLAS): 12 accumulators, 2 B
 * vectors and a broadcast; each k reads one 64-byte line of the panel. The
 * portable 8 x 32 accumulator array (32 ymm registers' worth) ran from the
 * stack at about a third of the FMA peak. Tasks are (half panel, row block). */
#define MR_MAX 6
#define HN 16 /* columns per tile */
#define COLS HN
#define PF_K 16

#define REP6(X) X(0) X(1) X(2) X(3) X(4) X(5)

static inline __m256i tail_mask(long n) { /* lanes [0, n) of 8 */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* tcc_cpu_epilogue's Relu/Clip/Leaky on a vector, NaN handled as there
 * (max/min return their second operand when either is NaN) */
static inline __m256 epi_act(__m256 v, int act, float a0, float a1) {
    const __m256 z = _mm256_setzero_ps();
    if (act == TCC_ACT_RELU) return _mm256_max_ps(z, v);
    if (act == TCC_ACT_CLIP) return _mm256_min_ps(_mm256_set1_ps(a1), _mm256_max_ps(_mm256_set1_ps(a0), v));
    if (act == TCC_ACT_LEAKY)
        return _mm256_blendv_ps(_mm256_mul_ps(v, _mm256_set1_ps(a0)), v, _mm256_cmp_ps(v, z, _CMP_GE_OQ));
    return v;
}

/* MR rows from i0 x 16 columns from h * 16. While the row blocks of half
 * panel h pass over it (from L2), each prefetches its share of the next
 * half's lines into L2, as the AVX-512 tiles do for the next panel. Rows
 * 3..5 of A are addressed from a second base so that both halves share the
 * row offsets. */
static inline __attribute__((always_inline)) void tile(const packed_job *j, long i0, long h, long r, const int MR) {
    const long K = j->K, rs = j->rsa, cs = j->csa, ldb = j->ldb;
    const long c0 = h * HN, nr = j->N - c0 < HN ? j->N - c0 : HN;
    const float *a = j->A + i0 * rs, *a3 = a + 3 * rs;
    const float *b = j->Bp + (c0 / PN) * j->pstride + c0 % PN;
    const long nc = c0 + j->group * HN; /* the next group's half panel h */
    const int next = j->padded && j->mblocks > 1 && nc < j->N;
    /* this row block's share of the next half panel's K lines */
    const long p0 = next ? r * K / j->mblocks : 0, p1 = next ? (r + 1) * K / j->mblocks : 0;
    const char *nb = (const char *)(next ? j->Bp + (nc / PN) * j->pstride + nc % PN : b) + p0 * PN * 4;
    const __m256 z = _mm256_setzero_ps();
#define DECL(i) __m256 c##i##0 = z, c##i##1 = z;
    REP6(DECL)
#define FMA(i)                                                                                                   \
    if (MR > i) {                                                                                                \
        const __m256 av = _mm256_broadcast_ss(i < 3 ? a + i * rs : a3 + (i - 3) * rs);                          \
        c##i##0 = _mm256_fmadd_ps(av, b0, c##i##0);                                                              \
        c##i##1 = _mm256_fmadd_ps(av, b1, c##i##1);                                                              \
    }
#define STEP                                                                                                     \
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);                                          \
    _mm_prefetch((const char *)(b + PF_K * PN), _MM_HINT_T0);                                                    \
    REP6(FMA)
    /* One k per iteration: Zen 3 issues the loop's ~30 operations in the
     * 6 cycles its 12 FMAs take. Unrolled by 4 (as on AVX-512), GCC hoisted
     * the later steps' loads and spilled accumulators: 2-3x slower (best of
     * 15 interleaved rounds, 1 thread, EPYC Zen 3); with a compiler barrier
     * between the steps, by 2: no faster, by 4: 1.15x slower (Zen 2).
     * The loads (2 of B, 6 broadcasts) take most of the two load ports'
     * slots, so the next half panel's lines are prefetched one per k in a
     * loop of their own, then none: a prefetch in every k (the same line
     * mblocks times over) made the MLP's layers 5-8 % slower (Zen 2, 1
     * thread, 30 interleaved rounds against onnxruntime); without that
     * prefetch a layer alone ran 1-5 % faster (its B hot in L3) but the MLP
     * 0.96-1.08x onnxruntime's time against 0.84-0.86x with it (1 and 2
     * threads, bench_cpu_accel.py, back to back). Blocking K (256
     * rows of the half panel kept in L1 while the row blocks pass) measured
     * 4-7 % slower than streaming the half panel from L2. */
    const __m256i m0 = tail_mask(nr), m1 = tail_mask(nr - 8);
    if (j->padded) {
        long k = 0;
        for (; k < p1 - p0 && k < K; k++, a += cs, a3 += cs, b += PN) {
            _mm_prefetch(nb + k * PN * 4, _MM_HINT_T1);
            STEP
        }
        for (; k < K; k++, a += cs, a3 += cs, b += PN) {
            STEP
        }
    }
    else
        /* masked: a row-major B ends at column N */
        for (long k = 0; k < K; k++, a += cs, a3 += cs, b += ldb) {
            const __m256 b0 = _mm256_maskload_ps(b, m0), b1 = _mm256_maskload_ps(b + 8, m1);
            _mm_prefetch((const char *)(b + PF_K * ldb), _MM_HINT_T0);
            REP6(FMA)
        }
    float *C = j->C + i0 * j->ldc + c0;
    const __m256 al = _mm256_set1_ps(j->alpha);
    const int scale = j->alpha != 1.f;
    /* The epilogue in registers before the store where it is per column or
     * per row, an optional residual and Relu/Clip/Leaky (a Gemm/MatMul's
     * bias + Relu), not in tcc_cpu_epilogue's pass over the stored tile: 1-3 %
     * faster on the MLP's 64x784x1024 and 64x1024x1024 with bias + Relu (Zen 2,
     * 1 thread, two in-process runs of 20 rounds against onnxruntime). The
     * others (full-matrix bias, Sigmoid/Tanh) still take that pass. */
    const tcc_epilogue *ep = j->ep;
    const int bm = ep && ep->bias ? ep->bias_mode : 0, act = ep ? ep->act : TCC_ACT_NONE;
    const int inreg = ep && bm != 3 && (act == TCC_ACT_NONE || act == TCC_ACT_RELU || act == TCC_ACT_CLIP ||
                                        act == TCC_ACT_LEAKY);
    __m256 bc0 = z, bc1 = z;
    if (inreg && bm == 1) {
        const __m256 bs = _mm256_set1_ps(ep->bias_scale);
        bc0 = _mm256_mul_ps(bs, _mm256_maskload_ps(ep->bias + c0, m0));
        bc1 = _mm256_mul_ps(bs, _mm256_maskload_ps(ep->bias + c0 + 8, m1));
    } else if (inreg && bm == 4) {
        bc0 = bc1 = _mm256_set1_ps(ep->bias_scale * ep->bias[0]);
    }
#define EPI(i)                                                                                                   \
    if (MR > i && inreg) {                                                                                       \
        if (bm == 2) {                                                                                           \
            const __m256 br = _mm256_set1_ps(ep->bias_scale * ep->bias[i0 + i]);                                \
            c##i##0 = _mm256_add_ps(c##i##0, br);                                                                \
            c##i##1 = _mm256_add_ps(c##i##1, br);                                                                \
        } else if (bm) {                                                                                         \
            c##i##0 = _mm256_add_ps(c##i##0, bc0);                                                               \
            c##i##1 = _mm256_add_ps(c##i##1, bc1);                                                               \
        }                                                                                                        \
        if (ep->residual) {                                                                                      \
            const float *rr = ep->residual + (i0 + i) * j->ldc + c0;                                             \
            c##i##0 = _mm256_add_ps(c##i##0, _mm256_maskload_ps(rr, m0));                                        \
            c##i##1 = _mm256_add_ps(c##i##1, _mm256_maskload_ps(rr + 8, m1));                                    \
        }                                                                                                        \
        c##i##0 = epi_act(c##i##0, act, ep->a0, ep->a1);                                                         \
        c##i##1 = epi_act(c##i##1, act, ep->a0, ep->a1);                                                         \
    }
#define STORE(i)                                                                                                 \
    if (MR > i) {                                                                                                \
        if (scale) {                                                                                             \
            c##i##0 = _mm256_mul_ps(c##i##0, al);                                                                \
            c##i##1 = _mm256_mul_ps(c##i##1, al);                                                                \
        }                                                                                                        \
        EPI(i)                                                                                                   \
        if (nr == HN) {                                                                                          \
            _mm256_storeu_ps(C + i * j->ldc, c##i##0);                                                           \
            _mm256_storeu_ps(C + i * j->ldc + 8, c##i##1);                                                       \
        } else {                                                                                                 \
            _mm256_maskstore_ps(C + i * j->ldc, m0, c##i##0);                                                    \
            _mm256_maskstore_ps(C + i * j->ldc + 8, m1, c##i##1);                                                \
        }                                                                                                        \
    }
    REP6(STORE)
    if (ep && !inreg) tcc_cpu_epilogue(ep, j->C, j->ldc, j->N, i0, i0 + MR, c0, c0 + nr);
}

typedef void (*tile_fn)(const packed_job *, long, long, long);
#define TILE(MR)                                                                                                 \
    static void tile##MR(const packed_job *j, long i0, long h, long r) { tile(j, i0, h, r, MR); }
TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6)
static const tile_fn tiles[MR_MAX + 1] = {NULL, tile1, tile2, tile3, tile4, tile5, tile6};

static void run_tile(const packed_job *j, long i0, long mr, long h, long r) { tiles[mr](j, i0, h, r); }
#else
/* Portable C: the compiler vectorizes the 32-column rows. */
#define MR_MAX 8
#define COLS PN

static inline __attribute__((always_inline)) void accumulate(const packed_job *j, float acc[][PN], long i0,
                                                              long mr, const float *b, const long nc) {
    for (long k = 0; k < j->K; k++) {
        const float *bk = b + k * j->ldb;
        for (long i = 0; i < mr; i++) {
            const float a = j->A[(i0 + i) * j->rsa + k * j->csa];
            for (long c = 0; c < nc; c++) acc[i][c] += a * bk[c];
        }
    }
}

static void run_tile(const packed_job *j, long i0, long mr, long p, long r) {
    (void)r;
    const long c0 = p * PN, nr = j->N - c0 < PN ? j->N - c0 : PN;
    const float *b = j->Bp + p * j->pstride;
    float *C = j->C + i0 * j->ldc + c0;
    float acc[MR_MAX][PN];
    memset(acc, 0, sizeof acc);
    /* whole (constant-width) rows vectorize: padded panels are read whole */
    if (nr == PN || j->padded) accumulate(j, acc, i0, mr, b, PN);
    else accumulate(j, acc, i0, mr, b, nr);
    for (long i = 0; i < mr; i++)
        for (long c = 0; c < nr; c++) C[i * j->ldc + c] = acc[i][c] * j->alpha;
    if (j->ep) tcc_cpu_epilogue(j->ep, j->C, j->ldc, j->N, i0, i0 + mr, c0, c0 + nr);
}
#endif

/* Task t: group g of `group` column units (panels, or AVX2's half panels),
 * over the group's row blocks, its units fastest. */
static void packed_task(void *arg, long b, long e) {
    const packed_job *j = arg;
    const long units = (j->N + COLS - 1) / COLS, G = j->group;
    for (long t = b; t < e; t++) {
        const long g = t / (G * j->mblocks), u = t % (G * j->mblocks);
        const long gn = units - g * G < G ? units - g * G : G; /* the last group may be narrower */
        const long r = u / gn, i0 = r * j->M / j->mblocks, i1 = (r + 1) * j->M / j->mblocks;
        run_tile(j, i0, i1 - i0, g * G + u % gn, r);
    }
}

/* How many of a tile's MR_MAX rows of A, rs floats apart, start in the L1
 * set of the first (sets repeat every 4 KB: 64 sets of 64-byte lines). */
static int rows_in_one_set(long rs) {
    int n = 0;
    for (long i = 0; i < MR_MAX; i++) {
        const long o = (i * rs * (long)sizeof(float)) & 4095;
        n += o < 64 || o > 4096 - 64;
    }
    return n;
}

/* A tile reads its MR_MAX rows of A at the same k together. Rows a multiple
 * of 4 KB apart (K = 1024, 2048, 3072: a transformer's FFN, the MLP's second
 * layer) all fall in one L1 set, more of them than its 8 ways (Zen 4, 32 KB
 * L1): each k's broadcasts then miss. Measured on AMD EPYC Zen 4 (family 25
 * model 17), 1 thread, 64 x K x N: the AVX-512 tiles ran 90 GFLOP/s at
 * K = 1024, 2048, 3072 against 113-115 at K = 768, 1000 or with rows padded
 * to 1040 floats; the AVX2 tiles (6 rows) 97 against 105. Such an A is
 * copied once per call to rows one line further apart (1-2 % of the call). */
#define A_COPY_MAX (16l << 20) /* bytes; past that, A as it is */
#define GROUP_BYTES (1l << 20) /* half of a core's L2 (Intel Xeon, AMD Zen 4: 1-2 MB) */

/* B's element (k, n) at B[(n / 32) * pstride + k * ldb + n % 32]: packed
 * panels (ldb 32, pstride 32 K) or a row-major K x N matrix (ldb, pstride 32). */
static void gemm_panels(long M, long N, long K, float alpha, const float *A, long rsa, long csa, const float *B,
                        long ldb, long pstride, int padded, float *C, long ldc, const tcc_epilogue *ep) {
    if (M <= 0 || N <= 0) return;
    const long panels = (N + COLS - 1) / COLS, nt = tcc_cpu_num_threads();
    long mb = (M + MR_MAX - 1) / MR_MAX;
    /* the pool gives each thread an equal contiguous share of the tasks: with
     * few tasks, more (smaller) row blocks so that the shares are equal */
    while ((panels * mb) % nt && mb < M && panels * mb < 8 * nt) mb++;
    if (csa == 1 && M > 1 && panels > 1 && rows_in_one_set(rsa) > 4) {
        const long rd = (K + 15) / 16 * 16 + 16; /* whole lines, then one more: consecutive rows in other sets */
        if (M * rd * (long)sizeof(float) <= A_COPY_MAX) {
            float *D = cv_tls_buffer(CV_TLS_GEMM_A, (size_t)(M * rd));
            if (D) { /* without memory for it, A as it is */
                tcc_cpu_copy_rows(M, K, A, rsa, D, rd);
                A = D;
                rsa = rd;
            }
        }
    }
    /* With A past L2 (1024 x 1024: 4 MB), a row block's rows came from L3
     * once for every panel; in groups of panels that fill half of L2, once a
     * group, the group's panels staying in L2 while the row blocks pass.
     * 1 thread, Xeon family 6 model 167, GFLOP/s: AVX-512 1024^3 180 -> 192,
     * 2048^3 180 -> 185, 3136x576x64 187 -> 198, 784x1152x128 195 -> 208;
     * AVX2 98-102 -> 112, 108 -> 113, 100-102 -> 110, 108-110 -> 115. An A
     * that stays in L2 (the MLP's 64 rows) keeps one panel a group. */
    long group = 1;
    if (M * K * (long)sizeof(float) > GROUP_BYTES) {
        group = GROUP_BYTES / (K * COLS * (long)sizeof(float));
        group = group < 1 ? 1 : group > panels ? panels : group;
    }
    packed_job j = {M, N, K, rsa, csa, ldb, pstride, ldc, mb, group, padded, alpha, A, B, C, ep};
    tcc_cpu_parallel_for(panels * j.mblocks, 1, packed_task, &j);
}

void tcc_cpu_gemm_packed(long M, long N, long K, float alpha, const float *A, long rsa, long csa,
                         const float *Bp, float *C, long ldc, const tcc_epilogue *ep) {
    gemm_panels(M, N, K, alpha, A, rsa, csa, Bp, PN, K * PN, 1, C, ldc, ep);
}

void tcc_cpu_gemm_rowmajor_b(long M, long N, long K, float alpha, const float *A, long rsa, long csa,
                             const float *B, long ldb, float *C, long ldc) {
    gemm_panels(M, N, K, alpha, A, rsa, csa, B, ldb, PN, 0, C, ldc, NULL);
}
