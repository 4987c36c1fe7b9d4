/* Exact 8-bit integer matrix products for the host runtime (MatMulInteger,
 * and the int32 core of QLinearMatMul):
 *
 *   void tcc_matmul_i8(const int64_t *p, int32_t *C, const void *A, const void *B,
 *                      const void *azp, const void *bzp);
 *
 * C[M,N] = (A[M,K] - azp) (B[K,N] - bzp) in int32, A and B uint8 or int8,
 * row-major and contiguous; azp absent or one value; bzp absent, one value
 * or one per column. `p`: M, N, K, A signed, B signed, azp given, bzp mode
 * (0 none, 1 one value, 2 per column), B packed: 0 no (packed here, per
 * call), 1 int16 pairs (kernels.pack_int16_pairs, at compile time), 2
 * bytes for VNNI (kernels.pack_u8s8: chosen at compile time on a CPU with
 * AVX-512 VNNI or AVX-VNNI when B less its zero point fits int8, as
 * symmetric int8 weights do), 3 the same bytes made safe for AVX2's vpmaddubsw plus
 * corrections (kernels.pack_u8s8_pair_safe: chosen at compile time on an
 * AVX2 CPU without VNNI where few values need correcting); packed B has
 * its zero point subtracted.
 *
 * The bytes layout, Bq[panel][K/4 padded to 16][32][4] int8, then each column's sum
 * (int32), feeds vpdpbusd: 4 products of an unsigned A byte and a signed B
 * byte added into int32 without saturation (64 multiply-adds a zmm, twice
 * vpdpwssd's). A is then unsigned bytes: int8 A is moved up by 128 (a ^
 * 0x80) and its zero point with it, and sum((a - za) b) = sum(a b) - za *
 * colsum(b). Intel's AMX (tdpbusd on 16 x 16 tiles) runs it where the CPU
 * and the kernel allow, else AVX-512 VNNI, else AVX-VNNI (the same
 * instruction on ymm), else AVX2 on A's 4-bit halves, else portable C.
 * Layout 3 runs on the same VNNI tiles, else on AVX-512BW's or AVX2's
 * vpmaddubsw.
 *
 * AVX2 has no exact u8 x s8 instruction: vpmaddubsw adds its two
 * products in a saturating int16 (255 * 127 * 2 > 32767), the AVX2 result
 * onnxruntime gives without VNNI, and zero points can move either operand
 * out of its 8-bit range. Two exact ways here. Layout 3 keeps a pair of B
 * bytes (k even, k + 1) of a column only where |b0| + |b1| <= 128, so that
 * no sum passes 255 * 128 = 32640, and moves the rest of B into a list of
 * corrections added to the tile in int32 (add_fixes); quantized weights
 * need few (0.02-0.6 % of the bench models' values). Else, widened to
 * int16 less the zero points (|v| <= 255), vpmaddwd's pair sums (<= 130050)
 * and the int32 sums are exact. Both give onnx.reference's int32
 * arithmetic (which wraps past 2^31, as these sums do). VNNI's vpdpwssd
 * fuses the int16 multiply and the add.
 *
 * B is packed into 32-column panels of int16 pairs, Bp[panel][K/2][32][2],
 * at compile time for constant weights, else per call; tasks
 * are (row tile, panel) on the tcc thread pool, each widening its rows of A
 * into int32 words of two int16 (one broadcast per pair of k). The loop
 * nest the lowering writes stays the semantics (the interpreter runs it).
 *
 *   void tcc_conv_i8(const int64_t *p, int32_t *Y, const void *X, const void *Wp,
 *                    const void *xzp, const int32_t *bias);
 *
 * ConvInteger (and QLinearConv's int32 core), 2-D, one group, constant
 * weights: Y[n][m][oh][ow] = bias[m] + sum (x - xzp)(w - wzp). Per image,
 * the input is gathered into rows of a matrix Xc[OH*OW][KH*KW*C] (padding
 * as the zero point: 0 once centered), multiplied by tcc_matmul_i8 with the
 * weights packed at compile time as B[KH*KW*C][M] less their zero point
 * (one, or one per output channel), and the product [OH*OW][M] transposed
 * into the output. `p`: CONV_I8_FIELDS of kernels.py. */
#pragma GCC optimize("O3")
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "pool.h"

enum { Q_M, Q_N, Q_K, Q_ASIGNED, Q_BSIGNED, Q_AZP, Q_BZP, Q_BPACKED };

#define PW 32   /* columns per panel */
#define MR_MAX 32 /* rows a task widens at once: the AMX tiles' 2 x 16 */

typedef struct {
    int64_t M, N, K, KP, npan, mr;
    const uint8_t *A;
    const uint8_t *B;
    int asig, bsig, bzp_mode;
    int32_t za;
    const uint8_t *bzp;
    int16_t *Bp; /* [npan][KP][PW][2] */
    const int8_t *Bq; /* or [npan][KQ][PW][4], then */
    const int32_t *colsum; /* [npan * PW] */
    uint32_t *nzc;          /* -za * colsum, [npan * PW] (tcc_matmul_i8) */
    const int32_t *fix_at, *fix; /* B packed 3: entries [fix_at[p], fix_at[p + 1]) of panel p, (k, column, value) */
    int64_t KQ;
    int64_t mtiles, chunk; /* row tiles; panels a chunk (tile_body's order) */
    int32_t *Aw; /* A widened, all row tiles (more than one chunk), or NULL */
    int32_t *C;
} qjob;

static inline int32_t ld8(const uint8_t *p, int64_t i, int sig) { return sig ? (int32_t)(int8_t)p[i] : (int32_t)p[i]; }

/* panels [b, e): B less its zero point, as int16 pairs (k odd past K: 0);
 * the loops over a panel's 32 columns vectorize */
static void pack_body(int64_t b, int64_t e, void *ctx) {
    const qjob *j = ctx;
    for (int64_t p = b; p < e; p++) {
        int16_t *dst = j->Bp + p * j->KP * PW * 2;
        const int64_t n0 = p * PW, nc = j->N - n0 < PW ? j->N - n0 : PW;
        int16_t z[PW];
        for (int64_t c = 0; c < PW; c++)
            z[c] = (int16_t)(j->bzp_mode == 0 || c >= nc ? 0 : ld8(j->bzp, j->bzp_mode == 2 ? n0 + c : 0, j->bsig));
        for (int64_t kp = 0; kp < j->KP; kp++) {
            int16_t r0[PW], r1[PW];
            for (int h = 0; h < 2; h++) {
                int16_t *r = h ? r1 : r0;
                const int64_t k = 2 * kp + h;
                if (k >= j->K) {
                    memset(r, 0, sizeof r0);
                    continue;
                }
                const uint8_t *src = j->B + k * j->N + n0;
                if (j->bsig)
                    for (int64_t c = 0; c < nc; c++) r[c] = (int16_t)((int8_t)src[c] - z[c]);
                else
                    for (int64_t c = 0; c < nc; c++) r[c] = (int16_t)(src[c] - z[c]);
                for (int64_t c = nc; c < PW; c++) r[c] = 0;
            }
            for (int c = 0; c < PW; c++) {
                dst[(kp * PW + c) * 2] = r0[c];
                dst[(kp * PW + c) * 2 + 1] = r1[c];
            }
        }
    }
}

/* rows [i0, i0 + mr) of A less its zero point as int32 words of two int16
 * (little-endian: k even in the low half), zero past K; loops that vectorize
 * (a branch a byte cost a 128 x 1024 A as much as its products on AMX) */
static void widen_rows(const qjob *j, int64_t i0, int mr, int32_t *ap) {
    for (int r = 0; r < mr; r++) {
        const uint8_t *a = j->A + (i0 + r) * j->K;
        int16_t *d = (int16_t *)(ap + r * j->KP);
        const int16_t za = (int16_t)j->za;
        if (j->asig)
            for (int64_t k = 0; k < j->K; k++) d[k] = (int16_t)((int8_t)a[k] - za);
        else
            for (int64_t k = 0; k < j->K; k++) d[k] = (int16_t)(a[k] - za);
        for (int64_t k = j->K; k < 2 * j->KP; k++) d[k] = 0;
    }
}

/* acc[r][c] for mr rows x PW columns into C (columns past N dropped) */
static void store_rows(const qjob *j, int64_t i0, int mr, int64_t n0, const int32_t *acc) {
    const int64_t nc = j->N - n0 < PW ? j->N - n0 : PW;
    for (int r = 0; r < mr; r++) memcpy(j->C + (i0 + r) * j->N + n0, acc + r * PW, (size_t)nc * sizeof(int32_t));
}

/* a tile of mr rows x PW columns: ap the widened rows, bp the panel (int16 pairs or bytes) */
typedef void (*tile_fn)(const qjob *, const int32_t *ap, const void *bp, int mr, int32_t *acc);
/* the bytes layout's whole tile (the job's mr rows, a full panel): the
 * sums start from init (PW words, each row) and go straight into C at c,
 * ldc words a row (layout 3's corrections are added there after) */
typedef void (*block_fn)(const qjob *, const int32_t *ap, const int8_t *bq, const int32_t *init, int32_t *c,
                         int64_t ldc);

static void tile_generic(const qjob *j, const int32_t *ap, const void *bpv, int mr, int32_t *acc) {
    const int16_t *bp = bpv;
    for (int r = 0; r < mr; r++) {
        uint32_t s[PW] = {0}; /* wraps past 2^31 as int32 arithmetic in the nest does */
        for (int64_t kp = 0; kp < j->KP; kp++) {
            const uint32_t w = (uint32_t)ap[r * j->KP + kp];
            const int32_t a0 = (int16_t)(w & 0xffff), a1 = (int16_t)(w >> 16);
            const int16_t *b = bp + kp * PW * 2;
            for (int c = 0; c < PW; c++) s[c] += (uint32_t)(a0 * b[2 * c] + a1 * b[2 * c + 1]);
        }
        for (int c = 0; c < PW; c++) acc[r * PW + c] = (int32_t)s[c];
    }
}

#if defined(__x86_64__)
static const int32_t ZERO_ROW[PW] __attribute__((aligned(64))); /* a tile's sums from zero */

/* From a tile body NAME##_rows (mr rows from init into out, ldc words a
 * row): NAME, the tile_fn (from zero into the task's block), and
 * NAME##_block, the block_fn (whole tiles of NR rows straight into C) */
#define DEF_TILE_ENTRIES(NAME, NR)                                                                          \
    static void NAME(const qjob *j, const int32_t *ap, const void *bpv, int mr, int32_t *acc) {             \
        NAME##_rows(j, ap, bpv, mr, ZERO_ROW, acc, PW);                                                     \
    }                                                                                                       \
    __attribute__((unused)) static void NAME##_block(const qjob *j, const int32_t *ap, const int8_t *bq,    \
                                                     const int32_t *init, int32_t *c, int64_t ldc) {        \
        NAME##_rows(j, ap, bq, NR, init, c, ldc);                                                           \
    }

/* One body per ISA: a vector of a panel row's words (int16 pairs or 4
 * bytes) holds VL columns, a panel row PW / VL vectors; MRT rows a tile, a
 * widened row WORDS words (the stride), STEPS of them multiplied:
 * NAME##_rows and DEF_TILE_ENTRIES' two entries. */
#define DEF_TILE(NAME, TARGET, VT, VL, MRT, WORDS, STEPS, LOAD, SET1, MADDACC, STORE)                          \
    __attribute__((target(TARGET))) static void NAME##_rows(const qjob *j, const int32_t *ap, const void *bpv,  \
                                                             int mr, const int32_t *init, int32_t *out,           \
                                                             int64_t ldc) {                                       \
        enum { NV = PW / VL };                                                                                    \
        const int32_t *bp = bpv;                                                                                  \
        VT c[MRT][NV];                                                                                            \
        for (int r = 0; r < MRT; r++)                                                                             \
            for (int v = 0; v < NV; v++) c[r][v] = LOAD((const void *)(init + v * VL));                           \
        const int64_t W = j->WORDS, n = (STEPS);                                                                  \
        if (mr == MRT) {                                                                                          \
            for (int64_t kp = 0; kp < n; kp++) {                                                                  \
                VT b[NV];                                                                                         \
                for (int v = 0; v < NV; v++) b[v] = LOAD((const void *)(bp + kp * PW + v * VL));                  \
                for (int r = 0; r < MRT; r++) {                                                                   \
                    const VT a = SET1(ap[r * W + kp]);                                                            \
                    for (int v = 0; v < NV; v++) c[r][v] = MADDACC(c[r][v], a, b[v]);                             \
                }                                                                                                 \
            }                                                                                                     \
        } else {                                                                                                  \
            for (int64_t kp = 0; kp < n; kp++) {                                                                  \
                VT b[NV];                                                                                         \
                for (int v = 0; v < NV; v++) b[v] = LOAD((const void *)(bp + kp * PW + v * VL));                  \
                for (int r = 0; r < MRT; r++) {                                                                   \
                    if (r >= mr) break;                                                                           \
                    const VT a = SET1(ap[r * W + kp]);                                                            \
                    for (int v = 0; v < NV; v++) c[r][v] = MADDACC(c[r][v], a, b[v]);                             \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
        for (int r = 0; r < mr; r++)                                                                              \
            for (int v = 0; v < NV; v++) STORE((void *)(out + r * ldc + v * VL), c[r][v]);                        \
    }                                                                                                             \
    DEF_TILE_ENTRIES(NAME, MRT)

#define MADD512(c, a, b) _mm512_add_epi32(c, _mm512_madd_epi16(a, b))
/* VNNI's multiply-adds through asm: with GCC 12's intrinsics for them every
 * step of the loop copied each of the 16 accumulators into another register
 * and back, and kept two on the stack (the builtin's accumulator not tied to
 * its result), which held the 8 x 32 tile at 290-306 products a ns from L1
 * where vpdpbusd's two ports allow 548 (AMD EPYC family 26 model 2, Zen 5);
 * written so, 520-528. */
#define DEF_VNNI(NAME, INSN)                                                                              \
    __attribute__((target("avx512f,avx512vnni"), always_inline)) static inline __m512i NAME(__m512i c, __m512i a, \
                                                                                          __m512i b) {      \
        __asm__(INSN " %2, %1, %0" : "+v"(c) : "v"(a), "v"(b));                                           \
        return c;                                                                                         \
    }
DEF_VNNI(dpwssd512, "vpdpwssd")
DEF_VNNI(dpbusd512, "vpdpbusd") /* a: unsigned bytes, b: signed */
/* 16 accumulators (AVX-512: 32 registers) or 8 (AVX2: 16) */
DEF_TILE(tile_avx512vnni, "avx512f,avx512bw,avx512vnni", __m512i, 16, 8, KP, j->KP, _mm512_loadu_si512,
         _mm512_set1_epi32, dpwssd512, _mm512_storeu_si512)
DEF_TILE(tile_avx512bw, "avx512f,avx512bw", __m512i, 16, 8, KP, j->KP, _mm512_loadu_si512, _mm512_set1_epi32, MADD512,
         _mm512_storeu_si512)

/* AVX2 (16 ymm registers): 6 rows x 16 columns, 12 accumulators, the
 * panel's two halves in turn; per pair of k, 2 loads of B and 6 broadcasts
 * for 12 vpmaddwd (the 6x16 shape of OpenBLAS' and MLAS' Haswell kernels).
 * The 2 x 32 tile this replaces loaded 4 vectors of B per 8 products and
 * ran at 26-55 GMAC/s on 128x768x3072 .. 128x768x768 (one thread, Xeon
 * family 6 model 167 as an AVX2 CPU). Rows past mr repeat row 0 and are
 * not stored. */
#define AVX2_MR 6
/* The pair-safe bytes' tile (tile_q_avx2) takes 5 rows: its multiply-add
 * needs a product register and the ones vector besides the 12
 * accumulators, 2 vectors of B and the broadcast, and with 6 rows GCC kept
 * one accumulator on the stack (a load and a store every step). Called
 * directly (tcc_matmul_i8, Xeon family 6 model 167 as an AVX2 CPU,
 * medians of 15 interleaved rounds): 64x784x1024 98-99 -> 105-107 GMAC/s
 * at 1 thread, 177 -> 181 at 2; 64x1024x1024 99-106 -> 104-108 and 184 ->
 * 190; 784x1152x128 100 -> 101 and 200 -> 212. 4 rows (no spill either,
 * but B loaded for fewer rows) was no faster than 6. mlp_qdq in the model
 * at 2 threads 0.70-0.74 -> 0.67-0.69 ms; at 1 thread no change measured
 * (1.33-1.38 ms either way, separate processes). */
#define AVX2_QR 5 /* add_fixes unrolls this many rows */
/* One AVX2 body for both layouts, a k-step one 128-byte panel row (32
 * columns of an int16 pair or of a word of 4 bytes); MAC the layout's
 * multiply-add into int32. Rows past mr repeat row 0 and are not stored. */
#define AVX2_ROW(MAC, NR, r)                                  \
    if (NR > r) {                                             \
        const __m256i x = _mm256_set1_epi32(a##r[k]);         \
        c##r##0 = MAC(c##r##0, x, b0);                        \
        c##r##1 = MAC(c##r##1, x, b1);                        \
    }
/* row r's two accumulators to dst + r * ld (rows from n on not stored) */
#define STORE2(NR, r, dst, ld, n)                                                            \
    if (NR > r && r < (n)) {                                                                 \
        _mm256_storeu_si256((__m256i *)((dst) + r * (ld)), c##r##0);                         \
        _mm256_storeu_si256((__m256i *)((dst) + r * (ld) + 8), c##r##1);                     \
    }
/* NR (at most AVX2_MR) rows a tile: NAME##_rows and DEF_TILE_ENTRIES' two
 * entries */
#define DEF_TILE_AVX2(NAME, WORDS, STEPS, MAC, NR)                                                               \
    __attribute__((target("avx2"))) static void NAME##_rows(const qjob *j, const int32_t *ap, const void *bpv,   \
                                                            int mr, const int32_t *init, int32_t *out,            \
                                                            int64_t ldc) {                                        \
        const int64_t W = j->WORDS, n = (STEPS);                                                                  \
        const int32_t *a0 = ap, *a1 = ap + (mr > 1) * W, *a2 = ap + (mr > 2) * 2 * W, *a3 = ap + (mr > 3) * 3 * W, \
                      *a4 = ap + (mr > 4) * 4 * W, *a5 = ap + (mr > 5) * 5 * W;                                   \
        (void)a4, (void)a5;                                                                                       \
        for (int h = 0; h < 2; h++) {                                                                             \
            const char *bp = (const char *)bpv + h * 64;                                                          \
            const __m256i i0 = _mm256_loadu_si256((const __m256i *)(init + h * 16)),                              \
                          i1 = _mm256_loadu_si256((const __m256i *)(init + h * 16 + 8));                          \
            __m256i c00 = i0, c01 = i1, c10 = i0, c11 = i1, c20 = i0, c21 = i1, c30 = i0, c31 = i1, c40 = i0,     \
                    c41 = i1, c50 = i0, c51 = i1;                                                                 \
            for (int64_t k = 0; k < n; k++) {                                                                     \
                const __m256i b0 = _mm256_loadu_si256((const __m256i *)(bp + k * PW * 4));                        \
                const __m256i b1 = _mm256_loadu_si256((const __m256i *)(bp + k * PW * 4 + 32));                   \
                AVX2_ROW(MAC, NR, 0) AVX2_ROW(MAC, NR, 1) AVX2_ROW(MAC, NR, 2) AVX2_ROW(MAC, NR, 3)               \
                AVX2_ROW(MAC, NR, 4) AVX2_ROW(MAC, NR, 5)                                                         \
            }                                                                                                     \
            int32_t *o = out + h * 16;                                                                            \
            STORE2(NR, 0, o, ldc, mr) STORE2(NR, 1, o, ldc, mr) STORE2(NR, 2, o, ldc, mr)                         \
            STORE2(NR, 3, o, ldc, mr) STORE2(NR, 4, o, ldc, mr) STORE2(NR, 5, o, ldc, mr)                         \
        }                                                                                                         \
    }                                                                                                             \
    DEF_TILE_ENTRIES(NAME, NR)
#define MADD_I16(c, x, b) _mm256_add_epi32(c, _mm256_madd_epi16(x, b))
DEF_TILE_AVX2(tile_avx2, KP, j->KP, MADD_I16, AVX2_MR)
#endif

/* -- the VNNI bytes layout ------------------------------------------------- */

/* rows [i0, i0 + mr) of A as unsigned bytes (int8 A moved up by 128), 4 a
 * word, zero past K; the tile's rows past them zero */
static void widen_rows_u8(const qjob *j, int64_t i0, int mr, int32_t *ap) {
    memset(ap + mr * j->KQ, 0, (size_t)((j->mr - mr) * j->KQ) * sizeof(int32_t));
    for (int r = 0; r < mr; r++) {
        const uint8_t *a = j->A + (i0 + r) * j->K;
        uint8_t *d = (uint8_t *)(ap + r * j->KQ);
        if (j->asig)
            for (int64_t k = 0; k < j->K; k++) d[k] = a[k] ^ 0x80;
        else
            memcpy(d, a, (size_t)j->K);
        memset(d + j->K, 0, (size_t)(j->KQ * 4 - j->K));
    }
}

static void tile_q_generic(const qjob *j, const int32_t *ap, const void *bpv, int mr, int32_t *acc) {
    const int8_t *bq = bpv;
    for (int r = 0; r < mr; r++) {
        uint32_t s[PW] = {0};
        for (int64_t kq = 0; kq < j->KQ; kq++) {
            const uint32_t w = (uint32_t)ap[r * j->KQ + kq];
            const int8_t *b = bq + kq * PW * 4;
            for (int c = 0; c < PW; c++)
                for (int h = 0; h < 4; h++) s[c] += (uint32_t)((int32_t)((w >> (8 * h)) & 0xff) * b[4 * c + h]);
        }
        for (int c = 0; c < PW; c++) acc[r * PW + c] = (int32_t)s[c];
    }
}

#if defined(__x86_64__)
/* 8 rows x a panel from init (PW words, each row) into out, ldc words a
 * row; the words past K/4 (AMX's padding to 16) are zero: not run. A whole
 * tile (8 rows, a full panel; the block_fn) starts from
 * -za * colsum(B) straight into C, as amx_block below: the copy of the
 * task's block into C less za * colsum was 5 % of mlp_qdq's samples at 1
 * thread (AMD EPYC family 26 model 2, AVX-512 VNNI). */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void vnni_block(const qjob *j, const int32_t *ap,
                                                                             const int8_t *bq, const int32_t *init,
                                                                             int32_t *out, int64_t ldc) {
    const int32_t *bp = (const int32_t *)bq;
    const __m512i i0 = _mm512_loadu_si512(init), i1 = _mm512_loadu_si512(init + 16);
    __m512i c[8][2];
    for (int r = 0; r < 8; r++) c[r][0] = i0, c[r][1] = i1;
    const int64_t W = j->KQ, n = (j->K + 3) / 4;
    for (int64_t k = 0; k < n; k++) {
        const __m512i b0 = _mm512_loadu_si512(bp + k * PW), b1 = _mm512_loadu_si512(bp + k * PW + 16);
        for (int r = 0; r < 8; r++) {
            const __m512i a = _mm512_set1_epi32(ap[r * W + k]);
            c[r][0] = dpbusd512(c[r][0], a, b0);
            c[r][1] = dpbusd512(c[r][1], a, b1);
        }
    }
    for (int r = 0; r < 8; r++) {
        _mm512_storeu_si512(out + r * ldc, c[r][0]);
        _mm512_storeu_si512(out + r * ldc + 16, c[r][1]);
    }
}

/* the tile_fn: sums from zero into the task's block (rows past mr are zero
 * words, widen_rows_u8, never stored) */
static void tile_q_avx512vnni(const qjob *j, const int32_t *ap, const void *bpv, int mr, int32_t *acc) {
    (void)mr;
    vnni_block(j, ap, bpv, ZERO_ROW, acc, PW);
}
#endif

#if defined(__x86_64__)
/* AVX2 on the pair-safe bytes layout (B packed 3): vpmaddubsw adds the
 * products of two consecutive k in a saturating int16, exact here because
 * the packing moved every pair with |b0| + |b1| > 128 into the correction
 * list (at most 255 * 128 = 32640); vpmaddwd with ones then adds the two
 * pair sums of a 4-byte word into int32. Per 32 products 2 multiplies (on
 * the two ports that also run vpmaddwd) against the int16 pairs' 2 vpmaddwd
 * for 16 each plus their adds: about 1.3x the products a cycle. AVX2_QR rows
 * x 16 columns; rows past mr repeat row 0. */
#define MADD_U8S8(c, x, b) _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(x, b), _mm256_set1_epi16(1)))
DEF_TILE_AVX2(tile_q_avx2, KQ, (j->K + 3) / 4, MADD_U8S8, AVX2_QR) /* the words past K/4 are zero: not run */
/* The same on zmm for AVX-512 CPUs without VNNI (Intel Skylake-SP: AVX-512BW
 * has vpmaddubsw on zmm, VNNI came with Cascade Lake): 8 rows x a panel, 16
 * accumulators, twice the AVX2 tile's products an instruction. Called
 * directly on AMD EPYC family 26 model 2 with VNNI kept out
 * (tcc_matmul_i8_hide), 1 thread, weights drawn as a quantizer's:
 * 64x784x1024 236 GMAC/s, 64x1024x1024 240, 128x256x1024 215, against the
 * AVX2 tile's 122, 124 and 116. mlp_qdq on that machine as a Skylake-SP
 * (bench_cpu_accel.py --hide-vnni, 1 thread): 1.98 -> 1.06x onnxruntime,
 * whose kernel there is the same instructions with saturating pair sums;
 * resnet18_qdq 1.22 -> 0.82. */
#define MADD_U8S8_512(c, x, b) \
    _mm512_add_epi32(c, _mm512_madd_epi16(_mm512_maddubs_epi16(x, b), _mm512_set1_epi16(1)))
DEF_TILE(tile_q_avx512bw, "avx512f,avx512bw", __m512i, 16, 8, KQ, (j->K + 3) / 4, _mm512_loadu_si512,
         _mm512_set1_epi32, MADD_U8S8_512, _mm512_storeu_si512)
/* AVX2 on the VNNI bytes (B packed 2, which a compile on a VNNI CPU chooses)
 * where TCC_CPU_ISA=avx2 at run time keeps VNNI out: A's bytes are split
 * into their 4-bit halves, so that no vpmaddubsw pair sum passes 15 * 128 *
 * 2, and the high half's sums are weighted 16 by vpmaddwd. Twice the
 * pair-safe tile's multiplies: mlp_qdq compiled with VNNI and run with
 * TCC_CPU_ISA=avx2 (1 thread, Xeon family 6 model 167) took 3.2 ms, 24.6
 * with the portable C tile this replaces, 1.44 compiled for AVX2. */
#define NIBBLES(x) _mm256_and_si256(x, _mm256_set1_epi8(0x0f))
#define MADD_U8S8_NIB(c, x, b)                                                                                \
    _mm256_add_epi32(_mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(NIBBLES(x), b), _mm256_set1_epi16(1))), \
                     _mm256_madd_epi16(_mm256_maddubs_epi16(NIBBLES(_mm256_srli_epi16(x, 4)), b), _mm256_set1_epi16(16)))
DEF_TILE_AVX2(tile_q_avx2_nib, KQ, (j->K + 3) / 4, MADD_U8S8_NIB, AVX2_MR)
/* AVX-VNNI (Intel Alder Lake and Sapphire Rapids on, AMD Zen 5; the
 * AVX2-only cores among them: Intel's client P- and E-cores, Xeon 6
 * E-cores): VEX vpdpbusd on ymm, 32 exact u8 x s8 products into int32 an
 * instruction where the pair-safe tile's vpmaddubsw and vpmaddwd take two
 * for 32; no ones vector nor product register, so 6 rows (12 accumulators,
 * 2 vectors of B, the broadcast). Either bytes layout: 2, or 3 with its
 * corrections added after. Through asm for the reason DEF_VNNI gives.
 * Called directly on AMD EPYC family 26 model 2 (Zen 5, which runs its
 * zmm form unless told otherwise: tcc_matmul_i8_hide), 1 thread,
 * weights drawn as a quantizer's: 64x784x1024 247 GMAC/s, 64x1024x1024
 * 252, 128x256x1024 243, against the pair-safe tile's 125, 127 and 115
 * (the zmm tile 487, 494, 445). There it runs at ~270 from L1, where 12
 * independent chains of the instruction reach 405 and 14 reach 476: the
 * 16 ymm registers hold no more accumulators. On a core that issues two
 * a cycle at a latency of 5 (the figures published for Intel's Alder Lake
 * P-cores) 12 chains suffice; no such machine was at hand to measure. */
__attribute__((target("avx2"), always_inline)) static inline __m256i dpbusd256(__m256i c, __m256i a, __m256i b) {
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(c) : "x"(a), "x"(b));
    return c;
}
DEF_TILE_AVX2(tile_q_avxvnni, KQ, (j->K + 3) / 4, dpbusd256, AVX2_MR) /* rows past mr: zero words */
#endif

#if defined(__x86_64__)
/* AMX (Intel Sapphire Rapids on): 32 rows x 32 columns a call in four 16 x 16
 * int32 tiles, tdpbusd on tiles of A (16 rows x 16 words of 4 bytes) and of
 * the bytes layout (16 k-words x 16 columns: a panel row's half, 128 bytes
 * apart), K padded to 64 (pack_u8s8 pads K/4 to 16). The tile configuration
 * is loaded once a task (amx_begin). */
typedef struct {
    uint8_t palette, start;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) amx_cfg;

/* palette 1, tiles 0-7 of 16 rows x 64 bytes. A constant in memory: built on
 * the stack, GCC dropped the stores of rows and colsb before ldtilecfg
 * (which it does not see read them), and ldtilecfg faulted. */
static const amx_cfg AMX_CFG = {.palette = 1,
                                .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
                                .rows = {16, 16, 16, 16, 16, 16, 16, 16}};

__attribute__((target("amx-tile"))) static void amx_begin(void) { _tile_loadconfig(&AMX_CFG); }

__attribute__((target("amx-tile"))) static void amx_end(void) { _tile_release(); }

/* A 32 x 32 block of C at c (ldc words a row): the accumulators start as
 * rows of `init` (32 words, each 16-word half loaded 16 times: stride 0),
 * and are stored to c. tile_body runs a whole block (32 rows of A, a full
 * panel; layout 3's corrections added after) with init = -za * colsum(B)
 * straight into C:
 * storing it to the task's block and copying that out less za * colsum
 * (1024 words, SSE2) cost about a third of the products at K = 784 (13
 * steps of 4 tdpbusd). mlp_qdq at 1 thread, Xeon family 6 model 167:
 * 0.209-0.215 -> 0.193 ms. */
__attribute__((target("amx-tile,amx-int8"))) static void amx_block(const qjob *j, const int32_t *ap,
                                                                   const int8_t *bq, const int32_t *init,
                                                                   int32_t *c, int64_t ldc) {
    const long as = j->KQ * 4, cs = ldc * 4;
    _tile_loadd(0, init, 0);
    _tile_loadd(1, init + 16, 0);
    _tile_loadd(2, init, 0);
    _tile_loadd(3, init + 16, 0);
    for (int64_t kq = 0; kq < j->KQ; kq += 16) {
        _tile_loadd(4, (const char *)ap + kq * 4, as);
        _tile_loadd(5, (const char *)(ap + 16 * j->KQ) + kq * 4, as);
        _tile_loadd(6, bq + kq * PW * 4, PW * 4);
        _tile_loadd(7, bq + kq * PW * 4 + 64, PW * 4);
        _tile_dpbusd(0, 4, 6);
        _tile_dpbusd(1, 4, 7);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    _tile_stored(0, c, cs);
    _tile_stored(1, c + 16, cs);
    _tile_stored(2, c + 16 * ldc, cs);
    _tile_stored(3, c + 16 * ldc + 16, cs);
}

/* the tile_fn: sums from zero into the task's block (tile_body subtracts
 * za * colsum on the way out) */
static void tile_q_amx(const qjob *j, const int32_t *ap, const void *bpv, int mr, int32_t *acc) {
    (void)mr; /* rows past mr are zero words (widen_rows_u8), never stored */
    amx_block(j, ap, bpv, ZERO_ROW, acc, PW);
}

/* AMX-INT8 in CPUID and granted by the kernel (arch_prctl, once a process) */
static int amx_usable(void) {
    static int ok = -1;
    if (ok < 0) {
        unsigned a, b, c, d;
        ok = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1) &&
             syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
    }
    return ok;
}
#endif

#if defined(__x86_64__)
/* How far TCC_CPU_ISA lets a call go: a lesser path on request, as gemm.c,
 * so that each is tested on one machine; read per call, so that a process
 * (the tests) can switch. */
enum { ISA_GENERIC, ISA_AVX2, ISA_AVX512 /* AMX kept out */, ISA_ANY };
static int isa_limit(void) {
    const char *isa = getenv("TCC_CPU_ISA");
    return !isa ? ISA_ANY : !strcmp(isa, "generic") ? ISA_GENERIC : !strcmp(isa, "avx2") ? ISA_AVX2
                          : !strcmp(isa, "avx512") ? ISA_AVX512 : ISA_ANY;
}
#endif

/* CPU features the int8 tiles act as if this CPU lacked (tests: the CPUs
 * that have AVX-VNNI but no AVX-512, or AVX-512 but no VNNI, are not those
 * the tests run on): tcc_matmul_i8_hide's mask, 0 by default */
enum { HIDE_AMX = 1, HIDE_AVX512VNNI = 2, HIDE_AVXVNNI = 4, HIDE_AVX512 = 8 };
static int g_hide;

/* sets the mask (HIDE_*), returns the previous one */
int tcc_matmul_i8_hide(int mask) {
    const int was = g_hide;
    g_hide = mask;
    return was;
}

/* the bytes layout's tiles; AVX2's vpmaddubsw on whole bytes only where the
 * packing made every pair safe (pair_safe: B packed 3), else on 4-bit halves */
static tile_fn pick_q(int *mr, int pair_safe, block_fn *block) {
    *block = NULL;
#if defined(__x86_64__)
    __builtin_cpu_init();
    const int lim = isa_limit();
    const int avx512 = lim >= ISA_AVX512 && !(g_hide & HIDE_AVX512) && __builtin_cpu_supports("avx512bw");
    if (lim >= ISA_ANY && !(g_hide & (HIDE_AMX | HIDE_AVX512)) && amx_usable()) {
        *mr = 32;
        *block = amx_block;
        return tile_q_amx;
    }
    if (avx512 && !(g_hide & HIDE_AVX512VNNI) && __builtin_cpu_supports("avx512vnni")) {
        *mr = 8;
        *block = vnni_block;
        return tile_q_avx512vnni;
    }
    /* TCC_CPU_ISA=avx2 keeps it out: that is an AMD Zen 3, which has none */
    if (lim > ISA_AVX2 && !(g_hide & HIDE_AVXVNNI) && __builtin_cpu_supports("avxvnni")) {
        *mr = AVX2_MR;
        *block = tile_q_avxvnni_block;
        return tile_q_avxvnni;
    }
    if (avx512 && pair_safe) {
        *mr = 8;
        *block = tile_q_avx512bw_block;
        return tile_q_avx512bw;
    }
    if (lim >= ISA_AVX2 && __builtin_cpu_supports("avx2")) {
        *mr = pair_safe ? AVX2_QR : AVX2_MR;
        *block = pair_safe ? tile_q_avx2_block : tile_q_avx2_nib_block;
        return pair_safe ? tile_q_avx2 : tile_q_avx2_nib;
    }
#else
    (void)pair_safe;
#endif
    *mr = 4;
    return tile_q_generic;
}

/* The bytes layout's tile a call would run now (tests): "amx",
 * "avx512vnni", "avxvnni", "avx512bw" or "avx2" (pair-safe bytes, layout
 * 3), "avx2-nibbles" (layout 2 without VNNI) or "generic". */
const char *tcc_matmul_i8_tile(int layout) {
    int mr;
    block_fn block;
    const tile_fn t = pick_q(&mr, layout == 3, &block);
#if defined(__x86_64__)
    if (t == tile_q_amx) return "amx";
    if (t == tile_q_avx512vnni) return "avx512vnni";
    if (t == tile_q_avxvnni) return "avxvnni";
    if (t == tile_q_avx512bw) return "avx512bw";
    if (t == tile_q_avx2) return "avx2";
    if (t == tile_q_avx2_nib) return "avx2-nibbles";
#endif
    return t == tile_q_generic ? "generic" : "?";
}

/* the int16 pairs' tiles */
static tile_fn pick(int *mr) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    const int lim = isa_limit();
    if (lim >= ISA_AVX512 && __builtin_cpu_supports("avx512bw")) {
        *mr = 8;
        return __builtin_cpu_supports("avx512vnni") ? tile_avx512vnni : tile_avx512bw;
    }
    if (lim >= ISA_AVX2 && __builtin_cpu_supports("avx2")) {
        *mr = AVX2_MR;
        return tile_avx2;
    }
#endif
    *mr = 4;
    return tile_generic;
}

typedef struct {
    const qjob *j;
    tile_fn tile;
    int bytes;      /* B in the bytes layout (else int16 pairs) */
    block_fn block; /* the bytes layout's whole tiles, or NULL */
} qrun;

/* Tasks [b, e) of (row tile, panel) in chunks of panels that stay in L2
 * (set_chunk), each chunk over all row tiles, its panels fastest: a row
 * tile is widened once a chunk. Panel fastest over all of B, every row
 * tile streamed the whole of B from memory (768 x 3072: 4.7 MB as int16
 * pairs), and the AVX-512 tiles ran at 89 GMAC/s on 128x768x3072 against
 * 121 on 128x768x768. */
static void task_at(const qjob *j, int64_t t, int64_t *mt, int64_t *p) {
    const int64_t per = j->mtiles * j->chunk, c = t / per, i = t % per;
    const int64_t p0 = c * j->chunk, g = j->npan - p0 < j->chunk ? j->npan - p0 : j->chunk;
    *mt = i / g;
    *p = p0 + i % g;
}

/* panels a chunk: about 256 KB of B (half of Zen 3's L2, an eighth of
 * Sapphire Rapids') */
static void set_chunk(qjob *j, int64_t panel_bytes) {
    j->mtiles = (j->M + j->mr - 1) / j->mr;
    j->chunk = (256 << 10) / panel_bytes;
    if (j->chunk < 1) j->chunk = 1;
    if (j->chunk > j->npan) j->chunk = j->npan;
}

/* rows of row tile mt (the last may be short) */
static int tile_rows(const qjob *j, int64_t mt) {
    const int64_t left = j->M - mt * j->mr;
    return (int)(left < j->mr ? left : j->mr);
}

/* The widened rows (and the tiles' block of sums) start on a cache line:
 * an AMX tile's 16 rows of 64 bytes then load one line each, where
 * malloc's 16-byte alignment split every row over two (the bytes layout's
 * rows are whole lines: K/4 padded to 16 words). Xeon family 6 model 167,
 * 1 thread: a 32 x 32 x 832 block from L1 took 437 ns with A on a line,
 * 677 with A 16 bytes off; mlp_qdq 0.237-0.243 -> 0.209-0.215 ms. */
static void *alloc64(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }

/* The calling thread's scratch buffer `slot`, of at least n bytes, kept from
 * call to call (grown, never shrunk; freed when the thread exits; NULL
 * without memory). tcc_conv_i8's image, im2col rows and product, and the
 * widened A, are megabytes on ResNet's first layers: allocated per call,
 * glibc gave them fresh pages (mmap) and the kernel zeroed each on its
 * first touch. */
enum { SCRATCH_XT, SCRATCH_COL, SCRATCH_T, SCRATCH_AW, SCRATCH_QX, SCRATCH_QY, SCRATCH_FIX, SCRATCH_SLOTS };
typedef struct {
    void *p[SCRATCH_SLOTS];
    size_t cap[SCRATCH_SLOTS];
} scratch_set;
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static void scratch_free(void *v) {
    scratch_set *s = v;
    for (int i = 0; i < SCRATCH_SLOTS; i++) free(s->p[i]);
    free(s);
}
static void scratch_init(void) { (void)pthread_key_create(&g_scratch_key, scratch_free); }
static void *scratch(int slot, size_t n) {
    pthread_once(&g_scratch_once, scratch_init);
    scratch_set *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(g_scratch_key, s)) {
            free(s);
            return NULL;
        }
    }
    if (n > s->cap[slot]) {
        free(s->p[slot]);
        s->p[slot] = alloc64(n);
        s->cap[slot] = s->p[slot] ? (n + 63) / 64 * 64 : 0;
    }
    return s->p[slot];
}

/* row tiles [b, e) of A into Aw */
static void widen_body(int64_t b, int64_t e, void *ctx) {
    const qrun *q = ctx;
    const qjob *j = q->j;
    const int64_t words = q->bytes ? j->KQ : j->KP;
    for (int64_t mt = b; mt < e; mt++)
        (q->bytes ? widen_rows_u8 : widen_rows)(j, mt * j->mr, tile_rows(j, mt), j->Aw + mt * j->mr * words);
}

/* Where B is more than one chunk, A is widened once for all of them, up
 * front: a row tile widened a chunk was 1 ms of ResNet-18's 32 (its 3x3
 * convolutions on 7x7 with 512 channels: 4608 deep, a chunk one panel, 16
 * chunks; AVX2, one thread). */
static void widen_all(qrun *q, qjob *j) {
    if (j->chunk >= j->npan) return;
    const int64_t words = q->bytes ? j->KQ : j->KP;
    j->Aw = scratch(SCRATCH_AW, (size_t)(j->mtiles * j->mr * words) * sizeof(int32_t));
    if (!j->Aw) abort();
    tcc_parallel_for(j->mtiles, widen_body, q);
}

/* B packed 3: acc (a tile's mr rows of panel p) += A's bytes times panel p's
 * corrections, from the widened rows (int8 A moved up as the tile saw it).
 * Unrolled for the whole tiles' row counts (the pair-safe AVX2 tile's
 * AVX2_QR, AVX-VNNI's AVX2_MR, AVX-512BW's 8): the loop over them ran at
 * about 1 ns a row and correction (Xeon family 6 model 167), and with 8
 * rows it was 8 % of mlp_qdq's samples (AMD EPYC Zen 5 as a Skylake-SP). */
#define FIX_ROWS(NR)                                                            \
    for (; e < end; e += 3) { /* k, column in the panel, value */               \
        const uint8_t *a = aw + e[0];                                           \
        uint32_t *c = (uint32_t *)acc + e[1];                                   \
        const uint32_t v = (uint32_t)e[2];                                      \
        for (int r = 0; r < NR; r++) c[r * ld] += a[r * rs] * v;                \
    }                                                                           \
    return;
static void add_fixes(const qjob *j, const uint8_t *aw, int64_t p, int mr, int32_t *acc, int64_t ld) {
    const int64_t rs = j->KQ * 4; /* bytes a widened row */
    const int32_t *e = j->fix + 3 * j->fix_at[p], *end = j->fix + 3 * j->fix_at[p + 1];
    switch (mr) {
    case 5: FIX_ROWS(5) /* AVX2_QR */
    case 6: FIX_ROWS(6) /* AVX2_MR */
    case 8: FIX_ROWS(8)
    default: FIX_ROWS(mr)
    }
}
#undef FIX_ROWS

/* the tasks of a share, in task_at's order */
static void tile_body(int64_t b, int64_t e, void *ctx) {
    const qrun *q = ctx;
    const qjob *j = q->j;
    const int64_t words = q->bytes ? j->KQ : j->KP; /* of a widened row */
    int32_t *ap = j->Aw ? NULL : alloc64((size_t)MR_MAX * (size_t)words * sizeof(int32_t));
    int32_t acc[MR_MAX * PW] __attribute__((aligned(64)));
    int64_t widened = -1;
    if (!j->Aw && !ap) abort(); /* a few KB: the nest's own buffers were allocated already */
#if defined(__x86_64__)
    const int amx = q->tile == tile_q_amx;
    if (amx) amx_begin();
#endif
    for (int64_t t = b; t < e; t++) {
        int64_t mt, p;
        task_at(j, t, &mt, &p);
        const int64_t i0 = mt * j->mr;
        const int mr = tile_rows(j, mt);
        const int32_t *at = ap;
        if (j->Aw) {
            at = j->Aw + mt * j->mr * words;
        } else if (mt != widened) {
            (q->bytes ? widen_rows_u8 : widen_rows)(j, i0, mr, ap);
            widened = mt;
        }
        if (q->bytes) {
            const uint32_t *zc = j->nzc + p * PW;
            const int64_t n0 = p * PW, nc = j->N - n0 < PW ? j->N - n0 : PW;
            if (q->block && mr == j->mr && nc == PW) {
                int32_t *c = j->C + i0 * j->N + n0;
                q->block(j, at, j->Bq + p * j->KQ * PW * 4, (const int32_t *)zc, c, j->N);
                if (j->fix_at) add_fixes(j, (const uint8_t *)at, p, mr, c, j->N);
                continue;
            }
            /* less za * colsum(B) on the way out (one pass over acc) */
            q->tile(j, at, j->Bq + p * j->KQ * PW * 4, mr, acc);
            if (j->fix_at) add_fixes(j, (const uint8_t *)at, p, mr, acc, PW);
            for (int r = 0; r < mr; r++) {
                int32_t *dst = j->C + (i0 + r) * j->N + n0;
                for (int64_t c = 0; c < nc; c++) dst[c] = (int32_t)((uint32_t)acc[r * PW + c] + zc[c]);
            }
        } else {
            q->tile(j, at, j->Bp + p * j->KP * PW * 2, mr, acc);
            store_rows(j, i0, mr, p * PW, acc);
        }
    }
#if defined(__x86_64__)
    if (amx) amx_end();
#endif
    free(ap);
}

void tcc_matmul_i8(const int64_t *p, int32_t *C, const void *A, const void *B, const void *azp, const void *bzp) {
    qjob j;
    memset(&j, 0, sizeof j);
    j.M = p[Q_M];
    j.N = p[Q_N];
    j.K = p[Q_K];
    j.asig = (int)p[Q_ASIGNED];
    j.bsig = (int)p[Q_BSIGNED];
    j.A = A;
    j.B = B;
    j.C = C;
    j.za = p[Q_AZP] ? ld8(azp, 0, j.asig) : 0;
    j.bzp_mode = (int)p[Q_BZP];
    j.bzp = bzp;
    if (j.M <= 0 || j.N <= 0) return;
    if (j.K <= 0) {
        memset(C, 0, (size_t)(j.M * j.N) * sizeof(int32_t));
        return;
    }
    int mr;
    j.npan = (j.N + PW - 1) / PW;
    const int packed = (int)p[Q_BPACKED];
    if (packed == 2 || packed == 3) {
        j.KQ = ((j.K + 3) / 4 + 15) / 16 * 16; /* pack_u8s8 pads K/4 to 16 (AMX's tile of K) */
        j.Bq = B;
        j.colsum = (const int32_t *)((const int8_t *)B + j.npan * j.KQ * PW * 4);
        if (packed == 3) { /* then the corrections: per panel where its entries start, then the entries */
            j.fix_at = j.colsum + j.npan * PW;
            j.fix = j.fix_at + j.npan + 1;
        }
        if (j.asig) j.za += 128; /* A's bytes are moved up by 128 */
        /* -za * colsum(B) once a call: made in each task, in tile_body's
         * baseline x86-64 code (32-bit multiplies as SSE2's pmuludq pairs)
         * with its task's index divisions it was 2.5 % of mlp_qdq's samples
         * (1 thread, AMD EPYC family 26 model 2) */
        j.nzc = alloc64((size_t)(j.npan * PW) * sizeof(uint32_t));
        if (!j.nzc) abort();
        for (int64_t c = 0; c < j.npan * PW; c++) j.nzc[c] = 0u - (uint32_t)j.za * (uint32_t)j.colsum[c];
        qrun q = {&j, NULL, 1, NULL};
        q.tile = pick_q(&mr, packed == 3, &q.block);
        j.mr = mr;
        set_chunk(&j, j.KQ * PW * 4);
        widen_all(&q, &j);
        tcc_parallel_for(j.mtiles * j.npan, tile_body, &q);
        free(j.nzc);
        return;
    }
    qrun q = {&j, pick(&mr), 0, NULL};
    j.mr = mr;
    j.KP = (j.K + 1) / 2;
    if (packed) {
        j.Bp = (int16_t *)B;
    } else {
        j.Bp = aligned_alloc(64, (size_t)(j.npan * j.KP * PW * 2 * sizeof(int16_t) + 63) / 64 * 64);
        if (!j.Bp) abort();
        tcc_parallel_for(j.npan, pack_body, &j);
    }
    set_chunk(&j, j.KP * PW * 4);
    widen_all(&q, &j);
    tcc_parallel_for(j.mtiles * j.npan, tile_body, &q);
    if (!packed) free(j.Bp);
}

/* ---- tcc_conv_i8 ------------------------------------------------------------ */
enum { CI_N, CI_C, CI_H, CI_W, CI_M, CI_KH, CI_KW, CI_OH, CI_OW, CI_SH, CI_SW, CI_PH, CI_PW, CI_DH, CI_DW,
       CI_XSIGNED, CI_WSIGNED, CI_XZP, CI_BIAS, CI_PACKED };

/* tcc_conv_q8's qp: x's scale and zero point, M + its type's min and max;
 * QP_ACT 1 with the pair after it: its scale, and M + qmin - its zero point */
enum { QP_SX, QP_ZX, QP_LO, QP_HI, QP_ACT, QP_ACT_S, QP_ACT_LO, QP_FIELDS };
#define QDQ_M 12582912.f /* qdq.ROUND_SHIFT: x + M rounds x half to even for |x| < 2^22 */

/* a float the compiler keeps rounded (no FMA fused across it) */
static inline float f32_rounded(float f) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__("" : "+x"(f));
#elif defined(__aarch64__)
    __asm__("" : "+w"(f));
#else
    volatile float v = f;
    f = v;
#endif
    return f;
}

/* QuantizeLinear's byte of x, as its lowering computes it (quantize.py):
 * x / s + M + z clamped to [M + qmin, M + qmax] (NaN to the low end), the
 * sum's low mantissa bits */
static inline uint8_t q8_byte(float x, float s, float z, float lo, float hi) {
    float t = x / s + QDQ_M + z;
    t = t > lo ? t : lo;
    t = t < hi ? t : hi;
    uint32_t b;
    memcpy(&b, &t, 4);
    return (uint8_t)b;
}

/* the output of one int32 sum of output channel m (the stores' scalar form) */
static inline float q8_out(const float *qp, const float *scale, const float *bias, int64_t m, int32_t acc) {
    float f = (float)acc * scale[m];
    if (bias) f = f32_rounded(f) + bias[m];
    if (qp[QP_ACT] != 0.f) {
        const float s = qp[QP_ACT_S], lo = qp[QP_ACT_LO];
        float t = f / s + QDQ_M;
        t = t > lo ? t : lo;
        t = t < lo + 255.f ? t : lo + 255.f;
        f = (t - QDQ_M) * s;
    }
    return f;
}

typedef struct {
    const int64_t *p;
    const uint8_t *x; /* one image [C][H][W] */
    uint8_t *xt;      /* the image channels last [H*W][C] */
    uint8_t *col;     /* [OH*OW][KH*KW*C] */
    uint8_t pad;
    const int32_t *t; /* the product [OH*OW][M] */
    int32_t *y;       /* one image's output [M][OH*OW] */
    const int32_t *bias;
    int avx2; /* transpose_out's 8 x 8 blocks (chosen once a call) */
} conv_job;

#if defined(__x86_64__)
/* 16 pixels of 4 channels (v[c], one byte a pixel) -> w[0..3]: 4 words a
 * vector, channel c in byte c of pixel i's word (SSE2, every x86-64) */
static inline void interleave4(const __m128i v[4], __m128i w[4]) {
    const __m128i ab0 = _mm_unpacklo_epi8(v[0], v[1]), ab1 = _mm_unpackhi_epi8(v[0], v[1]);
    const __m128i cd0 = _mm_unpacklo_epi8(v[2], v[3]), cd1 = _mm_unpackhi_epi8(v[2], v[3]);
    w[0] = _mm_unpacklo_epi16(ab0, cd0);
    w[1] = _mm_unpackhi_epi16(ab0, cd0);
    w[2] = _mm_unpacklo_epi16(ab1, cd1);
    w[3] = _mm_unpackhi_epi16(ab1, cd1);
}
#endif

/* The image with channels last, Xt[H*W][C], for blocks of 64 pixels (a
 * block's C x 64 bytes stay in L1): each window row is then KW * C
 * contiguous bytes. */
static void to_channels_last(int64_t b, int64_t e, void *ctx) {
    const conv_job *j = ctx;
    const int64_t C = j->p[CI_C], HW = j->p[CI_H] * j->p[CI_W];
    for (int64_t blk = b; blk < e; blk++) {
        const int64_t p0 = blk * 64, p1 = p0 + 64 < HW ? p0 + 64 : HW;
        int64_t c = 0;
#if defined(__x86_64__)
        /* 4 channels x 16 pixels at a time (SSE2, every x86-64): the bytes
         * interleaved into one 4-byte word a pixel, 16 word stores where a
         * byte a store took 64. resnet18_qdq with AVX2 (1 thread, Xeon
         * family 6 model 167): 2.2 -> 0.7 % of its samples. */
        for (; c + 4 <= C; c += 4) {
            const uint8_t *s0 = j->x + c * HW, *s1 = s0 + HW, *s2 = s1 + HW, *s3 = s2 + HW;
            int64_t q = p0;
            for (; q + 16 <= p1; q += 16) {
                const __m128i v[4] = {_mm_loadu_si128((const __m128i *)(s0 + q)),
                                      _mm_loadu_si128((const __m128i *)(s1 + q)),
                                      _mm_loadu_si128((const __m128i *)(s2 + q)),
                                      _mm_loadu_si128((const __m128i *)(s3 + q))};
                __m128i wv[4];
                uint32_t w[16];
                interleave4(v, wv);
                for (int i = 0; i < 4; i++) _mm_storeu_si128((__m128i *)(w + 4 * i), wv[i]);
                for (int i = 0; i < 16; i++) memcpy(j->xt + (q + i) * C + c, &w[i], 4);
            }
            for (; q < p1; q++) {
                uint8_t *d = j->xt + q * C + c;
                d[0] = s0[q], d[1] = s1[q], d[2] = s2[q], d[3] = s3[q];
            }
        }
#endif
        for (; c < C; c++) {
            const uint8_t *src = j->x + c * HW;
            for (int64_t q = p0; q < p1; q++) j->xt[q * C + c] = src[q];
        }
    }
}

/* Rows of Xc for output rows [b, e), k in (kh, kw, c) order (the weights
 * are packed so): per position and kernel row one copy of KW * C bytes
 * where the window lies inside the image (dilation 1), else C bytes per
 * tap or the zero point. Built from NCHW a byte at a time (k in (c, kh,
 * kw) order), 64x56x56 3x3 (1.8 MB) took 2.0 ms at 1 thread against the
 * GEMM's 0.3; 4- and 8-byte moves per tap, 0.8. */
static void im2col_rows(int64_t b, int64_t e, void *ctx) {
    const conv_job *j = ctx;
    const int64_t *p = j->p;
    const int64_t C = p[CI_C], H = p[CI_H], W = p[CI_W], KH = p[CI_KH], KW = p[CI_KW], OW = p[CI_OW];
    const int64_t SH = p[CI_SH], SW = p[CI_SW], DH = p[CI_DH], DW = p[CI_DW], PH = p[CI_PH], PWD = p[CI_PW];
    const int64_t K = C * KH * KW, run = KW * C;
    for (int64_t oh = b; oh < e; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
            uint8_t *d = j->col + (oh * OW + ow) * K;
            const int64_t iw0 = ow * SW - PWD;
            for (int64_t kh = 0; kh < KH; kh++, d += run) {
                const int64_t ih = oh * SH - PH + kh * DH;
                if (ih < 0 || ih >= H) {
                    memset(d, j->pad, (size_t)run);
                    continue;
                }
                const uint8_t *row = j->xt + ih * W * C;
                if (DW == 1 && iw0 >= 0 && iw0 + KW <= W) {
                    memcpy(d, row + iw0 * C, (size_t)run);
                    continue;
                }
                for (int64_t kw = 0; kw < KW; kw++) {
                    const int64_t iw = iw0 + kw * DW;
                    if (iw >= 0 && iw < W)
                        memcpy(d + kw * C, row + iw * C, (size_t)C);
                    else
                        memset(d + kw * C, j->pad, (size_t)C);
                }
            }
        }
}

/* Y[m][r] = T[r][m] + bias[m] for blocks of TB positions: the block of T
 * (TB x M int32) stays in L1 while each output row's TB values are written
 * in a run. Column by column over all of T (3.2 MB on ResNet's stem), each
 * read was a cache miss. */
#define TB 64
static void transpose_scalar(const conv_job *j, int64_t r0, int64_t r1, int64_t m0, int64_t m1) {
    const int64_t M = j->p[CI_M], P = j->p[CI_OH] * j->p[CI_OW];
    for (int64_t m = m0; m < m1; m++) {
        const uint32_t add = j->bias ? (uint32_t)j->bias[m] : 0;
        int32_t *dst = j->y + m * P;
        for (int64_t r = r0; r < r1; r++) dst[r] = (int32_t)((uint32_t)j->t[r * M + m] + add);
    }
}

#if defined(__x86_64__)
/* 8 x 8 blocks transposed in registers: the scalar loop's strided loads
 * (one int32 a load, M apart) were 10.6 % of a QOperator ResNet-18, whose
 * every convolution runs here (1 thread, AMD EPYC family 26 model 2) */
__attribute__((target("avx2"))) static void transpose_avx2(const conv_job *j, int64_t r0, int64_t r1) {
    const int64_t M = j->p[CI_M], P = j->p[CI_OH] * j->p[CI_OW];
    const int64_t m8 = M / 8 * 8, r8 = r0 + (r1 - r0) / 8 * 8;
    for (int64_t m = 0; m < m8; m += 8) {
        const __m256i add = j->bias ? _mm256_loadu_si256((const __m256i *)(j->bias + m)) : _mm256_setzero_si256();
        for (int64_t r = r0; r < r8; r += 8) {
            const int32_t *src = j->t + r * M + m;
            __m256i x[8], u[8];
            for (int i = 0; i < 8; i++) x[i] = _mm256_loadu_si256((const __m256i *)(src + i * M));
            for (int i = 0; i < 8; i += 2) {
                u[i] = _mm256_unpacklo_epi32(x[i], x[i + 1]);
                u[i + 1] = _mm256_unpackhi_epi32(x[i], x[i + 1]);
            }
            for (int i = 0; i < 8; i += 4) {
                x[i] = _mm256_unpacklo_epi64(u[i], u[i + 2]);
                x[i + 1] = _mm256_unpackhi_epi64(u[i], u[i + 2]);
                x[i + 2] = _mm256_unpacklo_epi64(u[i + 1], u[i + 3]);
                x[i + 3] = _mm256_unpackhi_epi64(u[i + 1], u[i + 3]);
            }
            /* x[c] (c < 4): column c of rows 0-3 in its low half, column c + 4
             * in its high half; x[c + 4] the same of rows 4-7 */
            for (int c = 0; c < 4; c++) {
                const __m256i lo = _mm256_permute2x128_si256(x[c], x[c + 4], 0x20);
                const __m256i hi = _mm256_permute2x128_si256(x[c], x[c + 4], 0x31);
                const __m256i bl = _mm256_permutevar8x32_epi32(add, _mm256_set1_epi32(c));
                const __m256i bh = _mm256_permutevar8x32_epi32(add, _mm256_set1_epi32(c + 4));
                _mm256_storeu_si256((__m256i *)(j->y + (m + c) * P + r), _mm256_add_epi32(lo, bl));
                _mm256_storeu_si256((__m256i *)(j->y + (m + c + 4) * P + r), _mm256_add_epi32(hi, bh));
            }
        }
        if (r8 < r1) transpose_scalar(j, r8, r1, m, m + 8);
    }
    if (m8 < M) transpose_scalar(j, r0, r1, m8, M);
}
#endif

static void transpose_out(int64_t b, int64_t e, void *ctx) {
    const conv_job *j = ctx;
    const int64_t P = j->p[CI_OH] * j->p[CI_OW];
    for (int64_t blk = b; blk < e; blk++) {
        const int64_t r0 = blk * TB, r1 = r0 + TB < P ? r0 + TB : P;
#if defined(__x86_64__)
        if (j->avx2) {
            transpose_avx2(j, r0, r1);
            continue;
        }
#endif
        transpose_scalar(j, r0, r1, 0, j->p[CI_M]);
    }
}

/* a 1x1 of stride 1 without pads: output position r reads input pixel r */
static int pointwise_s1(const int64_t *p) {
    return p[CI_KH] == 1 && p[CI_KW] == 1 && p[CI_SH] == 1 && p[CI_SW] == 1 && p[CI_PH] == 0 && p[CI_PW] == 0 &&
           p[CI_OH] == p[CI_H] && p[CI_OW] == p[CI_W];
}

/* ---- 1x1 convolutions in NCHW --------------------------------------------------
 * A 1x1 convolution of stride 1 without pads is Y[M][P] = W[M][C] X[C][P]:
 * in NCHW the positions are a row, so they go into the vector lanes and
 * each output channel's weights (4 channels a word) are broadcast, with the
 * packed weights as they are (pack_u8s8's panels: output channel m's word
 * for channels 4kq.. at ((m / PW) KQ + kq) PW + m % PW). The image is only
 * interleaved 4 channels a word, Xi[C/4][P][4], and the sums go straight
 * into the output: no channels-last image, no im2col rows, no product
 * transposed out. MobileNetV2 through quantize_static's QOperator format
 * (its 1x1 QLinearConvs), 1 thread, AMD EPYC family 26 model 2: the
 * transposes were 22 % of its samples. The same on the pair-safe bytes
 * (layout 3, an AVX2 CPU's) with vpmaddubsw, the corrections added to the
 * block's sums before its stores: tcc_conv_q8 as an AVX2 CPU (AMD EPYC
 * family 25 model 17, AVX-512 hidden), 1 thread, 384 -> 64 on 14 x 14
 * 0.163 -> 0.074 ms, 96 -> 576 on 14 x 14 0.375 -> 0.189, 320 -> 1280 on
 * 7 x 7 0.352 -> 0.268 against the quantize, channels-last and requantize
 * passes; mobilenetv2_qdq 8.1 -> 6.9 ms, its 1x1s of 14 x 14 and 7 x 7
 * in the cpu partition. */
#if defined(__x86_64__)
#define PWV_MR 8  /* output channels a block: 8 x 3 accumulators of 32 zmm */
#define PWV_NR 3  /* vectors of 16 positions a block */
#define PWV_CHUNK (4 * PWV_NR * 16) /* positions a task */
#define PWV_MGROUP 64               /* output channels a task */
#define PWY_MR 4  /* the ymm blocks' output channels: 4 x 3 accumulators of 16 ymm */
#define PWS_NR 2  /* AVX2's pair-safe blocks: 4 x 2 accumulators (vpmaddubsw needs a temporary and the ones) */
/* how conv_pw_vnni's blocks multiply (pwv_usable) */
enum { PW_NONE, PW_VNNI512, PW_VNNI256, PW_PAIRS256, PW_PAIRS512 };
typedef struct {
    const int64_t *p;
    const uint8_t *x;   /* one image [C][P] */
    uint32_t *xi;       /* [KQ4][PP] words of 4 channels (signed bytes moved up by 128) */
    int32_t *y;         /* one image's output [M][P] */
    const int8_t *bq;   /* the packed weights */
    const int32_t *init; /* per output channel: bias - za * colsum, as the other paths add them (mod 2^32) */
    int64_t C, M, P, PP, KQ, KQ4, mgroups, chunk;
    uint8_t flip;
    int kind; /* PW_*: AVX-512 VNNI's zmm blocks, AVX-VNNI's ymm, or vpmaddubsw's on pair-safe bytes */
    const int32_t *fix_m, *fix; /* B packed 3: output channel m's corrections (k, value) [fix_m[m], fix_m[m + 1]) */
    const float *fx;    /* tcc_conv_q8: one float image [C][P], quantized as it is interleaved */
    float *fy;          /* and its float output [M][P], requantized in the blocks' stores */
    const float *q;     /* tcc_conv_q8's qp */
    const float *fscale, *fbias;
} pwv_job;

/* Xi rows [b, e) of 4 channels (channels past C: 0, against zero weights) */
static void pwv_interleave(int64_t b, int64_t e, void *ctx) {
    const pwv_job *j = ctx;
    const int64_t P = j->P, C = j->C;
    const __m128i flip = _mm_set1_epi8((char)j->flip), zero = _mm_setzero_si128();
    for (int64_t kq = b; kq < e; kq++) {
        const uint8_t *s[4];
        for (int i = 0; i < 4; i++) s[i] = 4 * kq + i < C ? j->x + (4 * kq + i) * P : NULL;
        uint32_t *d = j->xi + kq * j->PP;
        int64_t q = 0;
        for (; q + 16 <= P; q += 16) {
            __m128i v[4], w[4];
            for (int i = 0; i < 4; i++)
                v[i] = s[i] ? _mm_xor_si128(_mm_loadu_si128((const __m128i *)(s[i] + q)), flip) : zero;
            interleave4(v, w);
            for (int i = 0; i < 4; i++) _mm_storeu_si128((__m128i *)(d + q + 4 * i), w[i]);
        }
        for (; q < P; q++) {
            uint32_t w = 0;
            for (int i = 0; i < 4; i++) w |= (uint32_t)(s[i] ? (uint8_t)(s[i][q] ^ j->flip) : 0) << (8 * i);
            d[q] = w;
        }
        for (; q < j->PP; q++) d[q] = 0; /* the last vector's lanes past P (not stored) */
    }
}

/* A block: output channels [m0, m0 + MR) (within one panel: m0 a multiple
 * of MR) x positions [q0, q0 + VL NR), NR <= PWV_NR vectors (the last block
 * of a row may have fewer: no lanes wasted past one vector). Every loop
 * unrolled, no index known only at run time, and vpdpbusd through the
 * tiles' asm: GCC then keeps the accumulators in registers (with the
 * intrinsic, or a store loop over a run-time row count, it copied them to
 * the stack and back around the multiply-adds: 1.4-1.5x the old path's time
 * on 14 x 14). NAME##_n(j, m0, q0, nr) picks NR. */
#define DEF_PW_BLOCK(NAME, TARGET, VT, VL, MR, NRMAX, SET1, LOAD, MADD, MASKT, MASK, STORE, FSTORE, PFX, VB)      \
    __attribute__((target(TARGET), always_inline)) static inline void NAME(const pwv_job *j, int64_t m0,         \
                                                                           int64_t q0, const int NR) {           \
        const int32_t *w = (const int32_t *)j->bq + (m0 / PW) * j->KQ * PW + m0 % PW;                            \
        const uint32_t *xi = j->xi + q0;                                                                         \
        VT acc[MR][NRMAX];                                                                                       \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                                                     \
            _Pragma("GCC unroll 3") for (int v = 0; v < NR; v++) acc[r][v] = SET1(j->init[m0 + r]);              \
        for (int64_t kq = 0; kq < j->KQ4; kq++, w += PW, xi += j->PP) {                                          \
            VT x[NRMAX];                                                                                         \
            _Pragma("GCC unroll 3") for (int v = 0; v < NR; v++) x[v] = LOAD((const void *)(xi + VL * v));       \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                                               \
                const VT b = SET1(w[r]);                                                                         \
                _Pragma("GCC unroll 3") for (int v = 0; v < NR; v++) acc[r][v] = MADD(acc[r][v], x[v], b);       \
            }                                                                                                    \
        }                                                                                                        \
        if (j->fix_m) /* B packed 3: the values the safe bytes left out, times x's byte of their channel */     \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                                               \
                for (int64_t e = j->fix_m[m0 + r]; e < j->fix_m[m0 + r + 1]; e++) {                              \
                    const uint32_t *xk = j->xi + (j->fix[2 * e] >> 2) * j->PP + q0;                              \
                    const __m128i sh = _mm_cvtsi32_si128(8 * (j->fix[2 * e] & 3));                               \
                    const VT val = SET1(j->fix[2 * e + 1]), ff = SET1(0xFF);                                     \
                    _Pragma("GCC unroll 3") for (int v = 0; v < NR; v++) {                                       \
                        const VT xv = LOAD((const void *)(xk + VL * v));                                         \
                        const VT xb = PFX##_and_si##VB(PFX##_srl_epi32(xv, sh), ff);                             \
                        acc[r][v] = PFX##_add_epi32(acc[r][v], PFX##_mullo_epi32(xb, val));                      \
                    }                                                                                            \
                }                                                                                                \
            }                                                                                                    \
        const int64_t rows = j->M - m0;                                                                          \
        if (j->fy) { /* the settings read before the stores, which could alias them */                          \
            const pwq_set st = pwq_settings(j);                                                                  \
            float sc[MR], bi[MR];                                                                                \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                                               \
                sc[r] = r < rows ? j->fscale[m0 + r] : 0.f;                                                      \
                bi[r] = r < rows && st.bias ? j->fbias[m0 + r] : 0.f;                                            \
            }                                                                                                    \
            _Pragma("GCC unroll 3") for (int v = 0; v < NR; v++) {                                               \
                const int64_t q = q0 + VL * v;                                                                   \
                const MASKT k = MASK(j->P - q); /* the lanes before P */                                         \
                const int full = q + VL <= j->P;                                                                 \
                _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) if (r < rows)                               \
                    FSTORE(j->fy + (m0 + r) * j->P + q, k, full, acc[r][v], sc[r], bi[r], st);                   \
            }                                                                                                    \
            return;                                                                                              \
        }                                                                                                        \
        _Pragma("GCC unroll 3") for (int v = 0; v < NR; v++) {                                                   \
            const int64_t q = q0 + VL * v;                                                                       \
            const MASKT k = MASK(j->P - q);                                                                      \
            const int full = q + VL <= j->P;                                                                    \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) if (r < rows)                                   \
                STORE(j->y + (m0 + r) * j->P + q, k, full, acc[r][v]);                                           \
        }                                                                                                        \
    }                                                                                                            \
    __attribute__((target(TARGET))) static void NAME##_n(const pwv_job *j, int64_t m0, int64_t q0, int64_t nr) { \
        /* NR 3 only where the arrays hold it (the 1 is never reached) */                                     \
        if (NRMAX >= 3 && nr >= 3) NAME(j, m0, q0, NRMAX >= 3 ? 3 : 1);                                          \
        else if (nr >= 2) NAME(j, m0, q0, 2);                                                                    \
        else NAME(j, m0, q0, 1);                                                                                 \
    }

/* masks of a vector's first `left` lanes (all past 16 or 8, none below 1) */
static inline __mmask16 left16(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
}
__attribute__((target("avx2"), always_inline)) static inline __m256i left8(int64_t left) {
    const int n = left >= 8 ? 8 : left <= 0 ? 0 : (int)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* Whole vectors stored plainly, the last of a row masked: AVX2's vmaskmov
 * stores are slow on AMD. With every ymm store masked, and the requantizing
 * settings read again after each store (it could alias them), tcc_conv_q8
 * took 1.096 ms for 16 -> 96 on 112 x 112 and 0.189 for 96 -> 576 on 14 x
 * 14; so 0.587 and 0.146 (as above). */
#define STORE512(p, k, full, v) _mm512_mask_storeu_epi32(p, k, v)
#define STORE256(p, k, full, v) \
    ((full) ? _mm256_storeu_si256((__m256i *)(p), v) : _mm256_maskstore_epi32((int *)(p), k, v))

/* tcc_conv_q8's requantizing settings (qp's pair, whether a bias) */
typedef struct {
    float s, lo; /* the pair's scale and low end */
    int bias, act;
} pwq_set;
static inline pwq_set pwq_settings(const pwv_job *j) {
    const pwq_set st = {j->q[QP_ACT_S], j->q[QP_ACT_LO], j->fbias != NULL, j->q[QP_ACT] != 0.f};
    return st;
}

/* tcc_conv_q8's stores: output channel m's sums as ConvInteger -> Cast ->
 * Mul -> [Add] -> [the pair] compute them, op by op in f32 (QP_ACT: the
 * quantize-dequantize pair of qdq.py's rewrite, as the cpu kernels'
 * TCC_ACT_QDQ8: its division, NaN to the low end). The empty asm keeps
 * the product a rounded f32 value whatever the compiler contracts (GCC 12
 * fuses none of these here; an FMA of the product and the bias would round
 * once fewer than the graph's ops). */
#define DEF_PWQ_STORE(NAME, TARGET, VF, PFX, MASKT, MSTORE)                                                       \
    __attribute__((target(TARGET), always_inline)) static inline void NAME(float *dst, MASKT k, int full, VF##i acc, \
                                                                           float scale, float bias, pwq_set st) { \
        VF f = PFX##_mul_ps(PFX##_cvtepi32_ps(acc), PFX##_set1_ps(scale));                                       \
        if (st.bias) {                                                                                           \
            __asm__("" : "+v"(f));                                                                               \
            f = PFX##_add_ps(f, PFX##_set1_ps(bias));                                                            \
        }                                                                                                        \
        if (st.act) {                                                                                            \
            const VF s = PFX##_set1_ps(st.s), big = PFX##_set1_ps(QDQ_M);                                        \
            const VF lo = PFX##_set1_ps(st.lo), hi = PFX##_add_ps(lo, PFX##_set1_ps(255.f));                     \
            VF t = PFX##_add_ps(PFX##_div_ps(f, s), big);                                                        \
            t = PFX##_min_ps(PFX##_max_ps(t, lo), hi); /* max: NaN -> lo */                                      \
            f = PFX##_mul_ps(PFX##_sub_ps(t, big), s);                                                           \
        }                                                                                                        \
        MSTORE(dst, k, full, f);                                                                                 \
    }
#define MSTORE512(p, k, full, v) _mm512_mask_storeu_ps(p, k, v)
#define MSTORE256(p, k, full, v) ((full) ? _mm256_storeu_ps(p, v) : _mm256_maskstore_ps(p, k, v))
DEF_PWQ_STORE(pwq_store512, "avx512f", __m512, _mm512, __mmask16, MSTORE512)
DEF_PWQ_STORE(pwq_store256, "avx2", __m256, _mm256, __m256i, MSTORE256)

/* tcc_conv_q8's Xi rows [b, e): the float image quantized as the
 * QuantizeLinear lowering does (x / s + M + z, clamped to [M + qmin, M +
 * qmax], NaN to the low end: the byte is the sum's low mantissa bits), VL
 * positions at a time, then moved up by 128 where x is signed. zmm where
 * the zmm blocks run: this pass is most of a 1x1 of many input and few
 * output channels (144 -> 24 on 56 x 56, 1 thread, AMD EPYC family 26
 * model 2: 0.081 ms with ymm, 0.071 with a product in place of the
 * division, 0.059 with zmm). */
#define DEF_PWQ_INTERLEAVE(NAME, TARGET, VF, PFX, VL, VB)                                                         \
    __attribute__((target(TARGET))) static void NAME(int64_t b, int64_t e, void *ctx) {                          \
        const pwv_job *j = ctx;                                                                                  \
        const int64_t P = j->P, C = j->C;                                                                        \
        const float sx = j->q[QP_SX], zx = j->q[QP_ZX], lo = j->q[QP_LO], hi = j->q[QP_HI];                      \
        const VF vs = PFX##_set1_ps(sx), vm = PFX##_set1_ps(QDQ_M), vz = PFX##_set1_ps(zx);                      \
        const VF vlo = PFX##_set1_ps(lo), vhi = PFX##_set1_ps(hi);                                               \
        const VF##i byte = PFX##_set1_epi32(0xFF), flip = PFX##_set1_epi32(j->flip);                             \
        for (int64_t kq = b; kq < e; kq++) {                                                                     \
            const float *src[4];                                                                                 \
            for (int i = 0; i < 4; i++) src[i] = 4 * kq + i < C ? j->fx + (4 * kq + i) * P : NULL;              \
            uint32_t *d = j->xi + kq * j->PP;                                                                    \
            int64_t q = 0;                                                                                       \
            for (; q + VL <= P; q += VL) {                                                                       \
                VF##i w = PFX##_setzero_si##VB();                                                                \
                for (int i = 0; i < 4; i++) {                                                                    \
                    if (!src[i]) continue;                                                                       \
                    VF t = PFX##_add_ps(PFX##_add_ps(PFX##_div_ps(PFX##_loadu_ps(src[i] + q), vs), vm), vz);     \
                    t = PFX##_min_ps(PFX##_max_ps(t, vlo), vhi); /* max: NaN -> lo */                            \
                    const VF##i v = PFX##_xor_si##VB(PFX##_and_si##VB(PFX##_castps_si##VB(t), byte), flip);      \
                    w = PFX##_or_si##VB(w, PFX##_slli_epi32(v, 8 * i));                                          \
                }                                                                                                \
                PFX##_storeu_si##VB((void *)(d + q), w);                                                         \
            }                                                                                                    \
            for (; q < P; q++) {                                                                                 \
                uint32_t w = 0;                                                                                  \
                for (int i = 0; i < 4; i++)                                                                      \
                    if (src[i]) w |= (uint32_t)(q8_byte(src[i][q], sx, zx, lo, hi) ^ j->flip) << (8 * i);       \
                d[q] = w;                                                                                        \
            }                                                                                                    \
            for (; q < j->PP; q++) d[q] = 0;                                                                     \
        }                                                                                                        \
    }
DEF_PWQ_INTERLEAVE(pwq_interleave256, "avx2", __m256, _mm256, 8, 256)
DEF_PWQ_INTERLEAVE(pwq_interleave512, "avx512f", __m512, _mm512, 16, 512)

/* AVX-512 VNNI: 8 output channels x 48 positions, 24 accumulators of 32 zmm */
DEF_PW_BLOCK(pwv_block, "avx512f,avx512bw,avx512vnni", __m512i, 16, PWV_MR, PWV_NR, _mm512_set1_epi32,
             _mm512_loadu_si512, dpbusd512, __mmask16, left16, STORE512, pwq_store512, _mm512, 512)
/* AVX-VNNI's ymm vpdpbusd (CPUs without AVX-512: Intel's Alder Lake on,
 * Xeon 6 E-cores): 4 output channels x 24 positions, 12 accumulators of 16
 * ymm. Measured only as AMD EPYC family 26 model 2 with AVX-512 hidden
 * (tcc_matmul_i8_hide). */
#define LOAD256(p) _mm256_loadu_si256((const __m256i *)(p))
DEF_PW_BLOCK(pwy_block, "avx2", __m256i, 8, PWY_MR, PWV_NR, _mm256_set1_epi32, LOAD256, dpbusd256, __m256i, left8,
             STORE256, pwq_store256, _mm256, 256)
/* CPUs without VNNI, on the pair-safe bytes (B packed 3) plus their
 * corrections: AVX2's vpmaddubsw, 4 output channels x 16 positions (8
 * accumulators; 4 x 24 spilled, as vpmaddubsw's int16 sums and vpmaddwd's
 * ones need two registers more than vpdpbusd), and AVX-512BW's on zmm (a
 * Skylake-SP), 8 x 48 as the VNNI blocks. */
DEF_PW_BLOCK(pws_block, "avx2", __m256i, 8, PWY_MR, PWS_NR, _mm256_set1_epi32, LOAD256, MADD_U8S8, __m256i, left8,
             STORE256, pwq_store256, _mm256, 256)
DEF_PW_BLOCK(pwz_block, "avx512f,avx512bw", __m512i, 16, PWV_MR, PWV_NR, _mm512_set1_epi32, _mm512_loadu_si512,
             MADD_U8S8_512, __mmask16, left16, STORE512, pwq_store512, _mm512, 512)

/* task t: positions chunk t / mgroups, output channels group t % mgroups */
static void pwv_tasks(int64_t b, int64_t e, void *ctx) {
    const pwv_job *j = ctx;
    for (int64_t t = b; t < e; t++) {
        const int64_t c0 = t / j->mgroups * j->chunk, g0 = t % j->mgroups * PWV_MGROUP;
        const int64_t c1 = c0 + j->chunk < j->P ? c0 + j->chunk : j->P;
        const int64_t g1 = g0 + PWV_MGROUP < j->M ? g0 + PWV_MGROUP : j->M;
        switch (j->kind) { /* the chunk's Xi stays in L1 over the channels */
        case PW_VNNI256:
            for (int64_t m = g0; m < g1; m += PWY_MR)
                for (int64_t q = c0; q < c1; q += PWV_NR * 8) pwy_block_n(j, m, q, (c1 - q + 7) / 8);
            break;
        case PW_PAIRS256:
            for (int64_t m = g0; m < g1; m += PWY_MR)
                for (int64_t q = c0; q < c1; q += PWS_NR * 8) pws_block_n(j, m, q, (c1 - q + 7) / 8);
            break;
        case PW_PAIRS512:
            for (int64_t m = g0; m < g1; m += PWV_MR)
                for (int64_t q = c0; q < c1; q += PWV_NR * 16) pwz_block_n(j, m, q, (c1 - q + 15) / 16);
            break;
        default:
            for (int64_t m = g0; m < g1; m += PWV_MR)
                for (int64_t q = c0; q < c1; q += PWV_NR * 16) pwv_block_n(j, m, q, (c1 - q + 15) / 16);
        }
    }
}

/* How tcc_conv_i8 runs `p` here (PW_*): a 1x1 of stride 1 without pads,
 * the bytes layout (2, or 3 with its corrections), and the CPU's tile for
 * them AVX-512 VNNI's or AVX-VNNI's, or for layout 3 vpmaddubsw's
 * (AVX-512BW's or AVX2's); not AMX's (unmeasured); else PW_NONE */
static int pwv_usable(const int64_t *p) {
    int mr;
    block_fn block;
    if ((p[CI_PACKED] != 2 && p[CI_PACKED] != 3) || !pointwise_s1(p)) return PW_NONE;
    const tile_fn t = pick_q(&mr, p[CI_PACKED] == 3, &block);
    return t == tile_q_avx512vnni ? PW_VNNI512 : t == tile_q_avxvnni ? PW_VNNI256 : t == tile_q_avx512bw ? PW_PAIRS512
           : t == tile_q_avx2 ? PW_PAIRS256 : PW_NONE;
}

/* Which way tcc_conv_i8 runs `p` now (tests): "pointwise-vnni",
 * "pointwise-avxvnni", "pointwise-avx512bw", "pointwise-avx2" or "im2col" */
const char *tcc_conv_i8_path(const int64_t *p) {
    static const char *const name[] = {"im2col", "pointwise-vnni", "pointwise-avxvnni", "pointwise-avx2",
                                       "pointwise-avx512bw"};
    return name[pwv_usable(p)];
}

/* B packed 3's corrections (after the column sums: where each panel's
 * entries start, then the entries (k, column in the panel, value), in
 * panel order) as j->fix_m and j->fix: output channel m's (k, value) pairs
 * at [fix_m[m], fix_m[m + 1]), for every column of the panels (a block's
 * channels past M find none). A counting sort per call: the lists are
 * 0.02-0.6 % of the weights, and it takes the entries in whatever order a
 * panel holds them (weights packed by any version). */
static void pw_fixes(pwv_job *j, const int32_t *fix_at, int64_t npan) {
    const int32_t *e = fix_at + npan + 1;
    const int64_t cols = npan * PW, n = fix_at[npan];
    int32_t *at = scratch(SCRATCH_FIX, (size_t)(cols + 1 + 2 * n) * sizeof(int32_t)), *fix = at + cols + 1;
    if (!at) abort();
    memset(at, 0, (size_t)(cols + 1) * sizeof(int32_t));
    for (int64_t pn = 0; pn < npan; pn++)
        for (int64_t i = fix_at[pn]; i < fix_at[pn + 1]; i++) at[pn * PW + e[3 * i + 1] + 1]++;
    for (int64_t m = 0; m < cols; m++) at[m + 1] += at[m];
    int32_t *next = scratch(SCRATCH_COL, (size_t)(cols > 0 ? cols : 1) * sizeof(int32_t));
    if (!next) abort();
    memcpy(next, at, (size_t)cols * sizeof(int32_t));
    for (int64_t pn = 0; pn < npan; pn++)
        for (int64_t i = fix_at[pn]; i < fix_at[pn + 1]; i++) {
            const int32_t k = next[pn * PW + e[3 * i + 1]]++;
            fix[2 * k] = e[3 * i];
            fix[2 * k + 1] = e[3 * i + 2];
        }
    j->fix_m = at;
    j->fix = fix;
}

/* kind: pwv_usable's; fq: tcc_conv_q8's float image X, output Y and their
 * qp, scale and bias (NULL: ConvInteger's) */
typedef struct {
    const float *qp, *scale, *bias;
} q8_args;
static void conv_pw_vnni(const int64_t *p, void *Y, const void *X, const void *Wp, const void *xzp,
                         const int32_t *bias, int kind, const q8_args *fq) {
    const int64_t N = p[CI_N], C = p[CI_C], M = p[CI_M], P = p[CI_OH] * p[CI_OW];
    const int ymm = kind == PW_VNNI256 || kind == PW_PAIRS256;
    pwv_job j = {.p = p, .bq = Wp, .C = C, .M = M, .P = P, .KQ4 = (C + 3) / 4, .flip = p[CI_XSIGNED] ? 0x80 : 0,
                 .kind = kind};
    if (fq) j.q = fq->qp, j.fscale = fq->scale, j.fbias = fq->bias;
    j.PP = (P + 15) / 16 * 16;
    j.KQ = ((C + 3) / 4 + 15) / 16 * 16; /* pack_u8s8's */
    const int64_t npan = (M + PW - 1) / PW;
    const int32_t *colsum = (const int32_t *)((const int8_t *)Wp + npan * j.KQ * PW * 4);
    /* the zero point of x, moved up with signed bytes */
    const uint32_t za = (uint32_t)(fq ? (int32_t)fq->qp[QP_ZX] : p[CI_XZP] ? ld8(xzp, 0, (int)p[CI_XSIGNED]) : 0) +
                        (p[CI_XSIGNED] ? 128u : 0u);
    int32_t *init = scratch(SCRATCH_T, (size_t)M * sizeof(int32_t));
    j.xi = scratch(SCRATCH_XT, (size_t)(j.KQ4 * j.PP) * sizeof(uint32_t));
    if (!init || !j.xi) abort();
    for (int64_t m = 0; m < M; m++)
        init[m] = (int32_t)((p[CI_BIAS] ? (uint32_t)bias[m] : 0u) - za * (uint32_t)colsum[m]);
    j.init = init;
    if (p[CI_PACKED] == 3) /* the corrections, listed per output channel */
        pw_fixes(&j, colsum + npan * PW, npan);
    j.mgroups = (M + PWV_MGROUP - 1) / PWV_MGROUP;
    /* positions a task: at most PWV_CHUNK, the chunks of a row as even as
     * whole vectors allow, and at least 4 tasks a thread where one block
     * (PWV_NR vectors) a chunk allows it. With fixed chunks of 192, 14 x 14
     * made one chunk of 192 positions and one of 4, and 7 x 7 one chunk:
     * one thread did a 64-channel layer alone. */
    const int64_t vl = ymm ? 8 : 16, want = 4 * tcc_num_threads();
    int64_t nch = (P + PWV_CHUNK - 1) / PWV_CHUNK;
    const int64_t most = (P + PWV_NR * vl - 1) / (PWV_NR * vl);
    if (nch * j.mgroups < want) nch = (want + j.mgroups - 1) / j.mgroups;
    if (nch > most) nch = most;
    j.chunk = ((P + nch - 1) / nch + vl - 1) / vl * vl;
    for (int64_t n = 0; n < N; n++) {
        if (fq) {
            j.fx = (const float *)X + n * C * P;
            j.fy = (float *)Y + n * M * P;
            tcc_parallel_for(j.KQ4, ymm ? pwq_interleave256 : pwq_interleave512, &j);
        } else {
            j.x = (const uint8_t *)X + n * C * P;
            j.y = (int32_t *)Y + n * M * P;
            tcc_parallel_for(j.KQ4, pwv_interleave, &j);
        }
        tcc_parallel_for((P + j.chunk - 1) / j.chunk * j.mgroups, pwv_tasks, &j);
    }
}
#else
const char *tcc_conv_i8_path(const int64_t *p) {
    (void)p;
    return "im2col";
}
#endif

void tcc_conv_i8(const int64_t *p, int32_t *Y, const void *X, const void *Wp, const void *xzp, const int32_t *bias) {
    const int64_t N = p[CI_N], C = p[CI_C], M = p[CI_M], P = p[CI_OH] * p[CI_OW];
    const int64_t K = C * p[CI_KH] * p[CI_KW];
    if (N <= 0 || M <= 0 || P <= 0) return;
#if defined(__x86_64__)
    const int pw = pwv_usable(p);
    if (pw) {
        conv_pw_vnni(p, Y, X, Wp, xzp, bias, pw, NULL);
        return;
    }
#endif
    const int64_t HW = p[CI_H] * p[CI_W];
    /* a 1x1 of stride 1 without pads: the im2col rows are the channels-last
     * image itself, not copied (TCC_CPU_ISA=avx2, 1 thread, AMD EPYC family
     * 26 model 2: ConvInteger 16 -> 96 on 112 x 112 0.56 -> 0.52 ms, 144 ->
     * 24 on 56 x 56 0.295 -> 0.28) */
    const int same = pointwise_s1(p);
    conv_job j = {p, NULL, scratch(SCRATCH_XT, (size_t)(HW * C > 0 ? HW * C : 1)), NULL,
                  p[CI_XZP] ? *(const uint8_t *)xzp : 0, NULL, NULL, p[CI_BIAS] ? bias : NULL};
    j.col = same ? j.xt : scratch(SCRATCH_COL, (size_t)(P * K > 0 ? P * K : 1));
    int32_t *t = scratch(SCRATCH_T, (size_t)(P * M) * sizeof(int32_t)); /* AMX stores whole blocks into it */
    if (!j.xt || !j.col || !t) abort();
    j.t = t;
#if defined(__x86_64__)
    __builtin_cpu_init();
    j.avx2 = isa_limit() >= ISA_AVX2 && __builtin_cpu_supports("avx2");
#endif
    const int64_t q[8] = {P, M, K, p[CI_XSIGNED], p[CI_WSIGNED], p[CI_XZP], 0, p[CI_PACKED]};
    for (int64_t n = 0; n < N; n++) {
        j.x = (const uint8_t *)X + n * C * p[CI_H] * p[CI_W];
        j.y = Y + n * M * P;
        tcc_parallel_for((HW + 63) / 64, to_channels_last, &j);
        if (!same) tcc_parallel_for(p[CI_OH], im2col_rows, &j);
        tcc_matmul_i8(q, t, j.col, Wp, xzp, NULL);
        tcc_parallel_for((P + TB - 1) / TB, transpose_out, &j);
    }
}

/* ---- tcc_conv_q8 ------------------------------------------------------------ *
 *   void tcc_conv_q8(const int64_t *p, const float *qp, float *Y, const float *X,
 *                    const void *Wp, const float *scale, const float *bias);
 *
 * The cpu accelerator's int8 convolution on float tensors (its cpu.conv_q8):
 * Y = [pair](Cast(ConvInteger(QuantizeLinear(X, sx, zx), W, zx, zw)) *
 * scale[m] [+ bias[m]]), the ops that qdq.py's QdqConvToInteger writes,
 * each rounded to f32 as the graph's ops are (the host path's loops may
 * fuse the product and the bias into an FMA). `p`: tcc_conv_i8's (one
 * x zero point, no int32 bias), `qp`: QP_FIELDS. With the VNNI 1x1 path
 * the image is quantized as it is interleaved and the sums requantized in
 * the blocks' stores: no byte image, no int32 product, no host step
 * between the float convolutions around it. Elsewhere (other kernels,
 * CPUs without VNNI) a pass quantizes X, tcc_conv_i8 sums, and a pass
 * requantizes. */
typedef struct {
    const float *x, *qp, *scale, *bias;
    uint8_t *xq;
    const int32_t *acc;
    float *y;
    int64_t nx, M, P; /* X's elements, the output's channels and positions */
} q8_job;

#define Q8_CHUNK 4096
static void q8_quantize(int64_t b, int64_t e, void *ctx) {
    const q8_job *j = ctx;
    const float *qp = j->qp;
    for (int64_t c = b; c < e; c++) {
        const int64_t i1 = (c + 1) * Q8_CHUNK < j->nx ? (c + 1) * Q8_CHUNK : j->nx;
        for (int64_t i = c * Q8_CHUNK; i < i1; i++)
            j->xq[i] = q8_byte(j->x[i], qp[QP_SX], qp[QP_ZX], qp[QP_LO], qp[QP_HI]);
    }
}

/* rows r = n M + m of the output */
static void q8_requantize(int64_t b, int64_t e, void *ctx) {
    const q8_job *j = ctx;
    for (int64_t r = b; r < e; r++)
        for (int64_t i = 0; i < j->P; i++)
            j->y[r * j->P + i] = q8_out(j->qp, j->scale, j->bias, r % j->M, j->acc[r * j->P + i]);
}

void tcc_conv_q8(const int64_t *p, const float *qp, float *Y, const float *X, const void *Wp, const float *scale,
                 const float *bias) {
    const int64_t N = p[CI_N], C = p[CI_C], M = p[CI_M], P = p[CI_OH] * p[CI_OW];
    if (N <= 0 || M <= 0 || P <= 0) return;
#if defined(__x86_64__)
    const int pw = pwv_usable(p);
    if (pw) {
        const q8_args a = {qp, scale, bias};
        conv_pw_vnni(p, Y, X, Wp, NULL, NULL, pw, &a);
        return;
    }
#endif
    const int64_t nx = N * C * p[CI_H] * p[CI_W];
    q8_job j = {X, qp, scale, bias, scratch(SCRATCH_QX, (size_t)(nx > 0 ? nx : 1)), NULL, Y, nx, M, P};
    int32_t *acc = scratch(SCRATCH_QY, (size_t)(N * M * P) * sizeof(int32_t));
    if (!j.xq || !acc) abort();
    tcc_parallel_for((nx + Q8_CHUNK - 1) / Q8_CHUNK, q8_quantize, &j);
    const uint8_t z = (uint8_t)(int32_t)qp[QP_ZX];
    tcc_conv_i8(p, acc, j.xq, Wp, &z, NULL);
    j.acc = acc;
    tcc_parallel_for(N * M, q8_requantize, &j);
}
