/* The shape-generic executor's native tape (runtime/generic/tape.py): the
 * data steps of one input-shape key as an array of records run in one call,
 * each reading and writing buffers through a table of slot addresses (the
 * caller sets the inputs' and outputs' entries per call). Sizes are the
 * key's, fixed when the tape is built; the kernels take them at run time,
 * so one compiled library serves every shape. Layout, elementwise and
 * small-product loops are here; GEMM, Softmax, LayerNormalization and
 * convolution call the cpu accelerator's kernels through the pointers the
 * builder puts in `fn` (this library does not link against that one).
 *
 * Why a tape and not numpy per step: a warm generic call of the corpus's
 * transformers is 53-117 small steps, and numpy's or ctypes' per-call cost
 * (0.6-3 us an elementwise op, 8-13 us a small MatMul) was most of it.
 * Every record's layout is mirrored by tape.py's ctypes Structure. */
#include <stdint.h>
#include <string.h>

#include "../../accelerators/cpu/kernels/mathfun.h"
#include "../../accelerators/cpu/kernels/tcc_cpu.h"

/* the hot loops built twice, for x86-64-v3 (AVX2 + FMA) and the baseline,
 * picked at load time: the library itself runs on any x86-64. Gelu over
 * 6912 floats: 22 us a record on the baseline build (SSE2) on the Zen 2 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VECTORIZED __attribute__((optimize("O3", "tree-vectorize"), target_clones("arch=x86-64-v3", "default")))
#else
#define VECTORIZED __attribute__((optimize("O3", "tree-vectorize")))
#endif
#define T_MAXR 6

enum { T_COPY = 1, T_ELT = 2, T_GEMM = 3, T_SOFTMAX = 4, T_LAYERNORM = 5, T_RMSNORM = 6, T_CONV = 7,
       T_REDUCE = 8, T_GATHER = 9, T_RNN = 10, T_ARG = 11, T_GATHER_ND = 12, T_CONV_PW_DW = 13 };

/* elementwise kinds (T_ELT): binary float32, unary float32, others */
enum { E_ADD = 1, E_SUB, E_MUL, E_DIV, E_MAX, E_MIN, E_POW,
       E_NEG = 20, E_EXP, E_LOG, E_SQRT, E_RECIP, E_TANH, E_SIGMOID, E_RELU, E_ERF, E_GELU, E_ABS, E_SILU,
       E_SQUARE, E_CUBE, E_LEAKY, E_CLIP,
       E_ISNAN = 50, E_WHERE = 51,
       /* comparisons (operands float32, or int64 where n[5] is 1) -> bool */
       E_EQ = 60, E_LT, E_GT, E_LE, E_GE,
       /* bool logic */
       E_AND = 70, E_OR, E_XOR, E_NOT,
       /* int64 arithmetic */
       E_IADD = 80, E_ISUB, E_IMUL,
       /* Cast: n[5] the source's type, n[6] the result's (T_F32, T_I64, T_BOOL, T_I32, T_F64) */
       E_CAST = 90 };
enum { TY_F32 = 0, TY_I64 = 1, TY_BOOL = 2, TY_I32 = 3, TY_F64 = 4 };

typedef struct {
    int64_t op, kind, rank, esize;
    int64_t slot[6];             /* operand slots (T_ELT: inputs 0-2, result 3); -1: none */
    int64_t dims[T_MAXR];
    int64_t st[4][T_MAXR];       /* strides in elements per operand (T_ELT: the result's is contiguous) */
    int64_t off[4];              /* element offsets per operand */
    int64_t n[8];                /* op-specific integers */
    float f[4];                  /* op-specific floats */
    void *fn;                    /* a kernel of the cpu accelerator's library */
    void *aux;                   /* op-specific pointer (parameter struct, epilogue, offsets) */
} tcc_step;

/* The cpu library's kernels, called through the addresses tape.py puts in
 * `fn` (this library does not link against that one): their types from its
 * header, so a change there breaks this build, not a run. */
typedef __typeof__(&tcc_cpu_gemm) gemm_fn;
typedef __typeof__(&tcc_cpu_gemm_packed) gemm_packed_fn;
typedef __typeof__(&tcc_cpu_softmax) softmax_fn;
typedef __typeof__(&tcc_cpu_layernorm) layernorm_fn;
typedef __typeof__(&tcc_cpu_conv2d) conv_fn;  /* tcc_cpu_conv2d_packed's type too */
typedef __typeof__(&tcc_cpu_conv2d_pw) conv_pw_fn;
typedef __typeof__(&tcc_cpu_conv2d_pw_dw) conv_pw_dw_fn;
typedef __typeof__(&tcc_cpu_rnn) rnn_fn;

/* the cpu library's tcc_cpu_set_inline (tape.py sets it once): a product
 * below codegen.SERIAL_WORK runs on the caller's thread, as generated code does */
static int (*set_inline)(int) = 0;
void tcc_tape_init(void *set_inline_fn) { set_inline = (int (*)(int))set_inline_fn; }

/* a call on this thread alone where `on` (the record's flag): the previous setting, or -1 */
static int serial_begin(int64_t on) { return on && set_inline ? set_inline(1) : -1; }
static void serial_end(int was) { if (was >= 0) set_inline(was); }

/* a convolution's epilogue: a bias per output channel in `bias_slot` (-1: none), an activation */
static tcc_epilogue channel_epilogue(void **slots, int64_t bias_slot, int64_t act, float a0, float a1) {
    tcc_epilogue ep = {0};
    if (bias_slot >= 0) {
        ep.bias = (const float *)slots[bias_slot];
        ep.bias_mode = 2;
        ep.bias_scale = 1.0f;
    }
    ep.act = (int)act;
    ep.a0 = a0;
    ep.a1 = a1;
    return ep;
}

void tcc_rmsnorm_f32(long rows, long cols, const float *x, const float *w, float eps, float *y);

/* ---- layout ---------------------------------------------------------------- */

/* dst[off1 + sum i_k st1_k] = src[off0 + sum i_k st0_k] over dims (esize-byte elements) */
static void copy_nd(const tcc_step *s, const char *src, char *dst) {
    const long r = s->rank, es = s->esize, inner = s->dims[r - 1];
    const long s0 = s->st[0][r - 1], s1 = s->st[1][r - 1];
    long idx[T_MAXR] = {0};
    src += s->off[0] * es;
    dst += s->off[1] * es;
    for (;;) {
        long a = 0, b = 0;
        for (long k = 0; k < r - 1; k++) {
            a += idx[k] * s->st[0][k];
            b += idx[k] * s->st[1][k];
        }
        const char *from = src + a * es;
        char *to = dst + b * es;
        if (s0 == 1 && s1 == 1) memcpy(to, from, (size_t)(inner * es));
        else if (es == 4) for (long i = 0; i < inner; i++) ((int32_t *)to)[i * s1] = ((const int32_t *)from)[i * s0];
        else if (es == 8) for (long i = 0; i < inner; i++) ((int64_t *)to)[i * s1] = ((const int64_t *)from)[i * s0];
        else if (es == 1) for (long i = 0; i < inner; i++) to[i * s1] = from[i * s0];
        else for (long i = 0; i < inner; i++) memcpy(to + i * s1 * es, from + i * s0 * es, (size_t)es);
        long k = r - 2;
        for (; k >= 0; k--) {
            if (++idx[k] < s->dims[k]) break;
            idx[k] = 0;
        }
        if (k < 0) return;
    }
}

/* Gather along an axis: x [outer][n_axis][inner], indices (int64, count
 * n_idx) -> y [outer][n_idx][inner]; a negative index counts from the end,
 * one out of range is clamped (runtime/generic's np.take raised there; the
 * tape is built only where that run passed, and index-bounds refuses such
 * inputs before a run). */
static void gather(const tcc_step *s, const char *x, const int64_t *idx, char *y) {
    const long outer = s->n[0], n_axis = s->n[1], n_idx = s->n[2], inner_b = s->n[3];
    for (long o = 0; o < outer; o++)
        for (long j = 0; j < n_idx; j++) {
            long v = idx[j];
            if (v < 0) v += n_axis;
            if (v < 0) v = 0;
            if (v >= n_axis) v = n_axis - 1;
            memcpy(y + (o * n_idx + j) * inner_b, x + (o * n_axis + v) * inner_b, (size_t)inner_b);
        }
}

/* ArgMax (kind 0) / ArgMin (1) of x [outer][n][inner] (float32; int64
 * where n[3] is 1, int32 where it is 2) -> int64 [outer][inner]; n[4] 1: the last of equal
 * values. NaN is the maximum and the minimum, as numpy's argmax says. */
static void arg_reduce(const tcc_step *s, const char *x, int64_t *y) {
    const long outer = s->n[0], n = s->n[1], inner = s->n[2];
    const int i64 = (int)s->n[3], last = (int)s->n[4], mn = (int)s->kind;
    for (long o = 0; o < outer; o++)
        for (long i = 0; i < inner; i++) {
            long best = 0;
            for (long j = 1; j < n; j++) {
                const long at = (o * n + j) * inner + i, bt = (o * n + best) * inner + i;
                int better;
                if (i64) {  /* 1: int64, 2: int32 */
                    const int64_t v = i64 == 1 ? ((const int64_t *)x)[at] : ((const int32_t *)x)[at];
                    const int64_t b = i64 == 1 ? ((const int64_t *)x)[bt] : ((const int32_t *)x)[bt];
                    better = mn ? (last ? v <= b : v < b) : (last ? v >= b : v > b);
                } else {
                    const float v = ((const float *)x)[at], b = ((const float *)x)[bt];
                    if (b != b) better = 0;
                    else if (v != v) better = 1;
                    else better = mn ? (last ? v <= b : v < b) : (last ? v >= b : v > b);
                }
                if (better) best = j;
            }
            y[o * inner + i] = best;
        }
}

/* GatherND: x [nb][d_0..d_{k-1}][rest] (rest: n[2] bytes a slice), indices
 * [nb][m][k] int64 (negative ones counted from the end, out of range
 * clamped as Gather's are); n[0] nb, n[1] m, n[3] k, dims in dims[0..k). */
static void gather_nd(const tcc_step *s, const char *x, const int64_t *idx, char *y) {
    const long nb = s->n[0], m = s->n[1], rest = s->n[2], k = s->n[3];
    long per = 1;
    for (long d = 0; d < k; d++) per *= s->dims[d];
    for (long b = 0; b < nb; b++)
        for (long j = 0; j < m; j++) {
            const int64_t *ix = idx + (b * m + j) * k;
            long at = 0;
            for (long d = 0; d < k; d++) {
                long v = ix[d];
                if (v < 0) v += s->dims[d];
                if (v < 0) v = 0;
                if (v >= s->dims[d]) v = s->dims[d] - 1;
                at = at * s->dims[d] + v;
            }
            memcpy(y + (b * m + j) * rest, x + (b * per + at) * rest, (size_t)rest);
        }
}

/* ---- elementwise --------------------------------------------------------------- */

/* one row of n results: inputs with strides sa, sb (0: broadcast, 1: contiguous, else strided) */
#define BIN_ROW(EXPR)                                                                     \
    do {                                                                                  \
        if (sa == 1 && sb == 1)                                                           \
            for (long i = 0; i < n; i++) { const float x = A[i], z = B[i]; Y[i] = (EXPR); } \
        else if (sa == 1 && sb == 0) {                                                    \
            const float z = B[0];                                                         \
            for (long i = 0; i < n; i++) { const float x = A[i]; Y[i] = (EXPR); }         \
        } else if (sa == 0 && sb == 1) {                                                  \
            const float x = A[0];                                                         \
            for (long i = 0; i < n; i++) { const float z = B[i]; Y[i] = (EXPR); }        \
        } else                                                                            \
            for (long i = 0; i < n; i++) { const float x = A[i * sa], z = B[i * sb]; Y[i] = (EXPR); } \
    } while (0)

#define UN_ROW(EXPR)                                                                      \
    do {                                                                                  \
        if (sa == 1) for (long i = 0; i < n; i++) { const float x = A[i]; Y[i] = (EXPR); } \
        else for (long i = 0; i < n; i++) { const float x = A[i * sa]; Y[i] = (EXPR); }   \
    } while (0)

/* e^x with IEEE's edges (the Exp op): NaN stays NaN, past ln(FLT_MAX) inf
 * (mathfun.h's tcc_exp_ clamps there, which activations want) */
static inline float exp1(float x) {
    const int top = x > 88.0f;  /* past tcc_exp_'s clamp (88.38): e^(x - ln 2) * 2 */
    const float y = tcc_exp_(top ? x - 0.693147180559945f : x) * (top ? 2.0f : 1.0f);
    return x != x ? x : (x > 88.72283935546875f ? __builtin_inff() : y);
}

/* mathfun.h's tanh without its branch (both sides computed, one kept), so
 * that the loop vectorizes: gpt2_lm's Tanh over 5376 floats 5.2 -> ~1 us */
static inline float tanh1(float x) {
    const float ax = __builtin_fabsf(x), x2 = x * x;
    const float small = x * (1.f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * -0.0539682540f)));
    const float e = tcc_exp_(-2.f * ax);
    const float big = __builtin_copysignf((1.f - e) / (1.f + e), x);
    return ax < 0.0625f ? small : big;
}

static inline float gelu1(float x) { return 0.5f * x * (1.0f + tcc_erff(x * 0.7071067811865476f)); }

VECTORIZED static void elt_row(const tcc_step *s, long n, const char *a, long sa, const char *b, long sb,
                               const char *c, long sc, char *y) {
    const float *A = (const float *)a, *B = (const float *)b;
    float *Y = (float *)y;
    const float f0 = s->f[0], f1 = s->f[1];
    switch (s->kind) {
    case E_ADD: BIN_ROW(x + z); break;
    case E_SUB: BIN_ROW(x - z); break;
    case E_MUL: BIN_ROW(x * z); break;
    case E_DIV: BIN_ROW(x / z); break;
    case E_MAX: BIN_ROW(x > z || x != x ? x : z); break;
    case E_MIN: BIN_ROW(x < z || x != x ? x : z); break;
    case E_POW: BIN_ROW(__builtin_powf(x, z)); break;
    case E_NEG: UN_ROW(-x); break;
    case E_EXP: UN_ROW(exp1(x)); break;
    case E_LOG: UN_ROW(__builtin_logf(x)); break;
    case E_SQRT: UN_ROW(__builtin_sqrtf(x)); break;
    case E_RECIP: UN_ROW(1.0f / x); break;
    case E_TANH: UN_ROW(tanh1(x)); break;
    case E_SIGMOID: UN_ROW(tcc_sigmoidf(x)); break;
    case E_RELU: UN_ROW(x > 0.0f ? x : (x != x ? x : 0.0f)); break;
    case E_ERF: UN_ROW(tcc_erff(x)); break;
    case E_GELU: UN_ROW(gelu1(x)); break;
    case E_ABS: UN_ROW(__builtin_fabsf(x)); break;
    case E_SILU: UN_ROW(x * tcc_sigmoidf(x)); break;
    case E_SQUARE: UN_ROW(x * x); break;
    case E_CUBE: UN_ROW(x * x * x); break;
    case E_LEAKY: UN_ROW(x >= 0.0f ? x : x * f0); break;
    case E_CLIP: UN_ROW(x < f0 ? f0 : (x > f1 ? f1 : x)); break;
    case E_ISNAN: {
        uint8_t *Q = (uint8_t *)y;
        for (long i = 0; i < n; i++) { const float x = A[i * sa]; Q[i] = x != x; }
        break;
    }
    case E_WHERE: {  /* where(cond a, b, c): a is bool (uint8) */
        const uint8_t *P = (const uint8_t *)a;
        const float *Bf = (const float *)b, *Cf = (const float *)c;
        if (sa == 1 && sb == 1 && sc == 1)
            for (long i = 0; i < n; i++) Y[i] = P[i] ? Bf[i] : Cf[i];
        else
            for (long i = 0; i < n; i++) Y[i] = P[i * sa] ? Bf[i * sb] : Cf[i * sc];
        break;
    }
    default: break;
    }
}

static double load_as(const char *p, long i, int ty) {
    switch (ty) {
    case TY_F32: return ((const float *)p)[i];
    case TY_I64: return (double)((const int64_t *)p)[i];
    case TY_BOOL: return ((const uint8_t *)p)[i];
    case TY_I32: return ((const int32_t *)p)[i];
    default: return ((const double *)p)[i];
    }
}

/* the kinds past E_WHERE: comparisons, logic, int64 arithmetic, Cast
 * (the small integer and bool steps of masks and position ids; scalar loops) */
static void other_row(const tcc_step *s, long n, const char *a, long sa, const char *b, long sb, char *y) {
    const int k = (int)s->kind;
    uint8_t *Q = (uint8_t *)y;
    if (k >= E_EQ && k <= E_GE) {
        if (s->n[5]) {
            const int64_t *A = (const int64_t *)a, *B = (const int64_t *)b;
            for (long i = 0; i < n; i++) {
                const int64_t x = A[i * sa], z = B[i * sb];
                Q[i] = k == E_EQ ? x == z : k == E_LT ? x < z : k == E_GT ? x > z : k == E_LE ? x <= z : x >= z;
            }
        } else {
            const float *A = (const float *)a, *B = (const float *)b;
            for (long i = 0; i < n; i++) {
                const float x = A[i * sa], z = B[i * sb];
                Q[i] = k == E_EQ ? x == z : k == E_LT ? x < z : k == E_GT ? x > z : k == E_LE ? x <= z : x >= z;
            }
        }
    } else if (k >= E_AND && k <= E_NOT) {
        const uint8_t *A = (const uint8_t *)a, *B = (const uint8_t *)b;
        for (long i = 0; i < n; i++) {
            const int x = A[i * sa] != 0, z = k == E_NOT ? 0 : B[i * sb] != 0;
            Q[i] = (uint8_t)(k == E_AND ? x && z : k == E_OR ? x || z : k == E_XOR ? x != z : !x);
        }
    } else if (k >= E_IADD && k <= E_IMUL) {
        const int64_t *A = (const int64_t *)a, *B = (const int64_t *)b;
        int64_t *Y = (int64_t *)y;
        for (long i = 0; i < n; i++) {
            const uint64_t x = (uint64_t)A[i * sa], z = (uint64_t)B[i * sb];  /* wrapping, as numpy's */
            Y[i] = (int64_t)(k == E_IADD ? x + z : k == E_ISUB ? x - z : x * z);
        }
    } else if (k == E_CAST) {
        const int from = (int)s->n[5], to = (int)s->n[6];
        for (long i = 0; i < n; i++) {
            if (from == TY_F32 && to != TY_F64 && to != TY_BOOL) {  /* float -> int truncates toward zero */
                const float v = ((const float *)a)[i * sa];
                if (to == TY_I64) ((int64_t *)y)[i] = (int64_t)v;
                else if (to == TY_I32) ((int32_t *)y)[i] = (int32_t)v;
                else ((float *)y)[i] = v;
                continue;
            }
            if (from == TY_I64 && to == TY_F32) { ((float *)y)[i] = (float)((const int64_t *)a)[i * sa]; continue; }
            if (from == TY_I64 && to == TY_I32) { ((int32_t *)y)[i] = (int32_t)((const int64_t *)a)[i * sa]; continue; }
            const double v = load_as(a, i * sa, from);
            switch (to) {
            case TY_F32: ((float *)y)[i] = (float)v; break;
            case TY_I64: ((int64_t *)y)[i] = from == TY_I32 ? ((const int32_t *)a)[i * sa] : (int64_t)v; break;
            case TY_BOOL: ((uint8_t *)y)[i] = v != 0.0; break;
            case TY_I32: ((int32_t *)y)[i] = (int32_t)v; break;
            default: ((double *)y)[i] = v; break;
            }
        }
    }
}

/* y (contiguous, dims) = kind(inputs with strides st[0..2]); n[0] the input count,
 * n[1..3] each input's element size in bytes, n[4] the result's */
static void elementwise(const tcc_step *s, void **slots) {
    const long r = s->rank, inner = s->dims[r - 1];
    const char *in[3] = {0, 0, 0};
    long es[3] = {0, 0, 0};
    for (int k = 0; k < s->n[0]; k++) {
        in[k] = (const char *)slots[s->slot[k]] + s->off[k] * s->n[1 + k];
        es[k] = s->n[1 + k];
    }
    char *y = (char *)slots[s->slot[3]];
    const long ey = s->n[4];
    long idx[T_MAXR] = {0}, row = 0;
    for (;;) {
        const char *p[3] = {in[0], in[1], in[2]};
        for (long k = 0; k < r - 1; k++)
            for (int q = 0; q < s->n[0]; q++) p[q] += idx[k] * s->st[q][k] * es[q];
        if (s->kind > E_WHERE)
            other_row(s, inner, p[0], s->st[0][r - 1], p[1], s->st[1][r - 1], y + row * inner * ey);
        else
            elt_row(s, inner, p[0], s->st[0][r - 1], p[1], s->st[1][r - 1], p[2], s->st[2][r - 1],
                    y + row * inner * ey);
        row++;
        long k = r - 2;
        for (; k >= 0; k--) {
            if (++idx[k] < s->dims[k]) break;
            idx[k] = 0;
        }
        if (k < 0) return;
    }
}

/* ---- reductions and products --------------------------------------------------- */

/* x [outer][n][inner] -> y [outer][inner]: kind 1 sum, 2 mean, 3 max, 4 min (float32) */
VECTORIZED static void reduce(const tcc_step *s, const float *x, float *y) {
    const long outer = s->n[0], n = s->n[1], inner = s->n[2];
    if (inner == 1) {  /* over contiguous rows (a global pool): 16 partial results a row, which vectorize */
        /* one loop per kind: with the kind tested inside, gcc kept the loop
         * scalar (64 rows of 256 took 4.9 us, the compiled code's
         * tcc_cpu_global_avgpool ~1 us) */
#define ROWS(INIT, STEP)                                                        \
        for (long o = 0; o < outer; o++) {                                      \
            const float *xo = x + o * n;                                        \
            float acc[16];                                                      \
            for (int l = 0; l < 16; l++) acc[l] = INIT;                         \
            long j = 0;                                                         \
            for (; j + 16 <= n; j += 16)                                        \
                for (int l = 0; l < 16; l++) { const float v = xo[j + l]; float *a = &acc[l]; STEP; } \
            for (int l = 1; l < 16; l++) { const float v = acc[l]; float *a = &acc[0]; STEP; } \
            for (; j < n; j++) { const float v = xo[j]; float *a = &acc[0]; STEP; } \
            y[o] = s->kind == 2 ? acc[0] / (float)n : acc[0];                   \
        }
        if (s->kind <= 2) { ROWS(0.0f, *a += v) }
        else if (s->kind == 3) { ROWS(xo[0], *a = v > *a ? v : *a) }
        else { ROWS(xo[0], *a = v < *a ? v : *a) }
#undef ROWS
        return;
    }
    for (long o = 0; o < outer; o++) {
        float *yo = y + o * inner;
        const float *xo = x + o * n * inner;
        for (long i = 0; i < inner; i++) yo[i] = xo[i];
        for (long j = 1; j < n; j++) {
            const float *xj = xo + j * inner;
            if (s->kind <= 2) for (long i = 0; i < inner; i++) yo[i] += xj[i];
            else if (s->kind == 3) for (long i = 0; i < inner; i++) yo[i] = xj[i] > yo[i] ? xj[i] : yo[i];
            else for (long i = 0; i < inner; i++) yo[i] = xj[i] < yo[i] ? xj[i] : yo[i];
        }
        if (s->kind == 2) {
            const float inv = 1.0f / (float)n;
            for (long i = 0; i < inner; i++) yo[i] *= inv;
        }
    }
}

/* C[M][N] = A[M][K] @ B[K][N] (row-major, contiguous) for small products:
 * the cpu library's tcc_cpu_gemm (OpenBLAS underneath) costs ~1-2 us a call
 * whatever the size, more than attention's 7x16x7 products themselves. */
typedef float v8f __attribute__((vector_size(32)));

/* C[M][N] = op(A) @ op(B) for small products (attention's per-head scores
 * and mixes, projections of a few rows): B (or B^T) copied into zero-padded
 * rows of 8 once, then tiles of 4 rows x 8 columns accumulated in vector
 * registers (two SSE registers each on the baseline build, one AVX register
 * on x86-64-v3). The cpu library's tcc_cpu_gemm (OpenBLAS underneath) costs
 * ~3 us a call whatever the size, more than these products themselves;
 * tape.c's first loop (rows of C updated per k) ran deit's 18x18x16 heads
 * at ~4 GFLOP/s. */
#define SMALL_B 8192  /* floats of the padded B copy on the stack */
VECTORIZED static void gemm_small(long M, long N, long K, const float *A, long lda, int ta, const float *B,
                                  long ldb, int tb, float *C) {
    const long NP = (N + 7) / 8 * 8;
    if (K * NP > SMALL_B) {  /* a few rows against a wide or deep B (M*N*K <= 32K): plain dot products */
        for (long i = 0; i < M; i++)
            for (long j = 0; j < N; j++) {
                float acc = 0.0f;
                for (long k = 0; k < K; k++)
                    acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
                C[i * N + j] = acc;
            }
        return;
    }
    float bp[SMALL_B] __attribute__((aligned(32)));
    for (long k = 0; k < K; k++) {
        float *row = bp + k * NP;
        if (!tb) memcpy(row, B + k * ldb, (size_t)N * sizeof(float));
        else for (long j = 0; j < N; j++) row[j] = B[j * ldb + k];
        for (long j = N; j < NP; j++) row[j] = 0.0f;
    }
    for (long i0 = 0; i0 < M; i0 += 4) {
        const long rows = M - i0 < 4 ? M - i0 : 4;
        for (long j0 = 0; j0 < NP; j0 += 8) {
            v8f acc[4] = {{0}, {0}, {0}, {0}};
            for (long k = 0; k < K; k++) {
                v8f b;
                memcpy(&b, bp + k * NP + j0, sizeof b);
                for (long r = 0; r < rows; r++) {
                    const float a = ta ? A[k * lda + i0 + r] : A[(i0 + r) * lda + k];
                    acc[r] += a * b;
                }
            }
            const long cols = N - j0 < 8 ? N - j0 : 8;
            for (long r = 0; r < rows; r++) memcpy(C + (i0 + r) * N + j0, &acc[r], (size_t)cols * sizeof(float));
        }
    }
}

/* act(C + bias_scale * bias) in place over C [M][N]: bias_mode 1 per column
 * (N values), 2 per row (M), 3 full (M x N), 4 scalar; act as tcc_cpu.h's
 * TCC_ACT_* (here for products too, SiLU included). */
VECTORIZED static void epilogue(float *C, long M, long N, const float *bias, int mode, float scale, int act, float a0,
                                float a1) {
    for (long i = 0; i < M; i++) {
        float *c = C + i * N;
        if (bias) {
            if (mode == 1) for (long j = 0; j < N; j++) c[j] += scale * bias[j];
            else if (mode == 2) { const float v = scale * bias[i]; for (long j = 0; j < N; j++) c[j] += v; }
            else if (mode == 3) for (long j = 0; j < N; j++) c[j] += scale * bias[i * N + j];
            else if (mode == 4) { const float v = scale * bias[0]; for (long j = 0; j < N; j++) c[j] += v; }
        }
        switch (act) {
        case 1: for (long j = 0; j < N; j++) c[j] = c[j] > 0.0f ? c[j] : (c[j] != c[j] ? c[j] : 0.0f); break;
        case 2: for (long j = 0; j < N; j++) c[j] = c[j] < a0 ? a0 : (c[j] > a1 ? a1 : c[j]); break;
        case 3: for (long j = 0; j < N; j++) c[j] = tcc_sigmoidf(c[j]); break;
        case 4: for (long j = 0; j < N; j++) c[j] = tcc_tanhf(c[j]); break;
        case 5: for (long j = 0; j < N; j++) c[j] = c[j] >= 0.0f ? c[j] : c[j] * a0; break;
        case 6: for (long j = 0; j < N; j++) c[j] = c[j] * tcc_sigmoidf(c[j]); break;
        default: break;
        }
    }
}

/* C = epilogue(alpha * op(A) @ op(B)), `batch` times: n [0] batch, [1] M,
 * [2] N, [3] K, [4] transA, [5] transB, [6] lda, [7] ldb (C's rows are
 * contiguous, N apart); aux: per batch element offsets (A, B, C: 3 * batch
 * int64) or NULL for one product; f[0] alpha; slots 0 A, 1 B, 2 C, 3 the
 * bias or -1 (kind its mode, f[1] its scale); off[0] the activation, f[2],
 * f[3] its parameters; fn tcc_cpu_gemm, or with esize 1 tcc_cpu_gemm_packed
 * (B packed by tape.py as codegen.pack_b does), or NULL for gemm_small;
 * rank 1: on this thread alone (a small product). */
static void gemm(const tcc_step *s, void **slots) {
    const long batch = s->n[0], M = s->n[1], N = s->n[2], K = s->n[3], lda = s->n[6], ldb = s->n[7];
    const int ta = (int)s->n[4], tb = (int)s->n[5];
    const float *A = (const float *)slots[s->slot[0]], *B = (const float *)slots[s->slot[1]];
    float *C = (float *)slots[s->slot[2]];
    const float *bias = s->slot[3] >= 0 ? (const float *)slots[s->slot[3]] : 0;
    const int64_t *offs = (const int64_t *)s->aux;
    const int was = serial_begin(s->rank && s->fn);
    for (long q = 0; q < batch; q++) {
        const float *a = A + (offs ? offs[3 * q] : 0), *b = B + (offs ? offs[3 * q + 1] : 0);
        float *c = C + (offs ? offs[3 * q + 2] : 0);
        if (s->fn && s->esize == 1)
            ((gemm_packed_fn)s->fn)(M, N, K, s->f[0], a, ta ? 1 : lda, ta ? lda : 1, b, c, N, 0);
        else if (s->fn)
            ((gemm_fn)s->fn)(ta, tb, M, N, K, s->f[0], a, lda, b, ldb, c, N, 0);
        else {
            gemm_small(M, N, K, a, lda, ta, b, ldb, tb, c);
            if (s->f[0] != 1.0f) for (long i = 0; i < M * N; i++) c[i] *= s->f[0];
        }
        if (bias || s->off[0]) epilogue(c, M, N, bias, (int)s->kind, s->f[1], (int)s->off[0], s->f[2], s->f[3]);
    }
    serial_end(was);
}

/* ---- the tape ---------------------------------------------------------------------- */

void tcc_tape_run(const tcc_step *steps, long count, void **slots) {
    for (long i = 0; i < count; i++) {
        const tcc_step *s = steps + i;
        switch (s->op) {
        case T_COPY:
            copy_nd(s, (const char *)slots[s->slot[0]], (char *)slots[s->slot[1]]);
            break;
        case T_ELT:
            elementwise(s, slots);
            break;
        case T_GEMM:
            gemm(s, slots);
            break;
        case T_SOFTMAX:
            ((softmax_fn)s->fn)(s->n[0], s->n[1], s->n[2], (const float *)slots[s->slot[0]],
                                (float *)slots[s->slot[1]], (int)s->kind);
            break;
        case T_LAYERNORM:
            ((layernorm_fn)s->fn)(s->n[0], s->n[1], (const float *)slots[s->slot[0]],
                                  (const float *)slots[s->slot[1]],
                                  s->slot[2] >= 0 ? (const float *)slots[s->slot[2]] : 0, s->f[0],
                                  (float *)slots[s->slot[3]]);
            break;
        case T_RMSNORM:
            tcc_rmsnorm_f32(s->n[0], s->n[1], (const float *)slots[s->slot[0]],
                            s->slot[1] >= 0 ? (const float *)slots[s->slot[1]] : 0, s->f[0],
                            (float *)slots[s->slot[2]]);
            break;
        case T_CONV: {  /* aux: the tcc_conv_params; slot 0 x, 1 w, 2 y, 3 scratch, 4 bias or -1;
                         * esize 0 tcc_cpu_conv2d, 1 tcc_cpu_conv2d_packed (the same arguments),
                         * 2 tcc_cpu_conv2d_pw (no scratch), w packed by tape.py as codegen does;
                         * rank 1: on this thread alone; slot 5 a residual (y's shape) or -1 */
            tcc_epilogue ep = channel_epilogue(slots, s->slot[4], s->kind, s->f[0], s->f[1]);
            if (s->slot[5] >= 0) ep.residual = (const float *)slots[s->slot[5]];
            const int was = serial_begin(s->rank);  /* below codegen.SERIAL_WORK */
            if (s->esize == 2)
                ((conv_pw_fn)s->fn)(s->aux, (const float *)slots[s->slot[0]], (const float *)slots[s->slot[1]],
                                    (float *)slots[s->slot[2]], &ep);
            else
                ((conv_fn)s->fn)(s->aux, (const float *)slots[s->slot[0]], (const float *)slots[s->slot[1]],
                                 (float *)slots[s->slot[2]], (float *)slots[s->slot[3]], &ep);
            serial_end(was);
            break;
        }
        case T_RNN:  /* tcc_cpu_rnn: aux its parameters; n[0..3] the constant WT, RT, bias, rbh (0: none);
                      * slots 0 X, 1 Y, 2 scratch, 3 h0, 4 c0, 5 peepholes (-1: none) */
#define OPT(k) (s->slot[k] >= 0 ? (const float *)slots[s->slot[k]] : 0)
            ((rnn_fn)s->fn)(s->aux, (const float *)slots[s->slot[0]], (const float *)s->n[0], (const float *)s->n[1],
                            (const float *)s->n[2], (const float *)s->n[3], OPT(5), 0, OPT(3), OPT(4),
                            (float *)slots[s->slot[1]], (float *)slots[s->slot[2]]);
#undef OPT
            break;
        case T_ARG:
            arg_reduce(s, (const char *)slots[s->slot[0]], (int64_t *)slots[s->slot[1]]);
            break;
        case T_GATHER_ND:
            gather_nd(s, (const char *)slots[s->slot[0]], (const int64_t *)slots[s->slot[1]],
                      (char *)slots[s->slot[2]]);
            break;
        case T_CONV_PW_DW: {  /* tcc_cpu_conv2d_pw_dw: a pointwise convolution whose output only the
                               * depthwise one after it reads (tape.py fuses the two records, as the
                               * compiled code's cpu.conv_pw_dw): aux the pointwise parameters, n[0]
                               * the depthwise ones' address; slots 0 x, 1 packed pointwise weights,
                               * 2 y, 3 depthwise weights (OIHW), 4 / 5 the biases or -1; kind / n[1]
                               * the activations, f[0..1] / f[2..3] their parameters; rank 1: serial */
            const tcc_epilogue epp = channel_epilogue(slots, s->slot[4], s->kind, s->f[0], s->f[1]);
            const tcc_epilogue epd = channel_epilogue(slots, s->slot[5], s->n[1], s->f[2], s->f[3]);
            const int was = serial_begin(s->rank);
            ((conv_pw_dw_fn)s->fn)(s->aux, (const float *)slots[s->slot[0]], (const float *)slots[s->slot[1]], &epp,
                                   (const tcc_conv_params *)s->n[0], (const float *)slots[s->slot[3]],
                                   (float *)slots[s->slot[2]], &epd);
            serial_end(was);
            break;
        }
        case T_REDUCE:
            reduce(s, (const float *)slots[s->slot[0]], (float *)slots[s->slot[1]]);
            break;
        case T_GATHER:
            gather(s, (const char *)slots[s->slot[0]], (const int64_t *)slots[s->slot[1]], (char *)slots[s->slot[2]]);
            break;
        default:
            break;
        }
    }
}
