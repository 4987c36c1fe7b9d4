/* tcc cpu accelerator: the kernel library's interface.
 *
 * Every kernel takes plain pointers to contiguous row-major float32 tensors
 * (NCHW for images) and runs on the library's own thread pool
 * (TCC_NUM_THREADS threads, default: the number of cores). Generated
 * partition code (accelerators/cpu/codegen.py) calls only these functions.
 * Built once per instruction set (libtcc_cpu_avx512.so, libtcc_cpu_avx2.so,
 * libtcc_cpu_generic.so); the loader picks the best one the CPU runs. */
#ifndef TCC_CPU_H
#define TCC_CPU_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- thread pool ------------------------------------------------------- */
typedef void (*tcc_task_fn)(void *ctx, long begin, long end);
/* Splits [0, n) into at most num_threads contiguous ranges of at least
 * `grain` items, one per thread, each run as a few chunks (at least `grain`
 * items) that idle threads steal; returns when all are done. Nested calls
 * (from inside a task) run inline. */
void tcc_cpu_parallel_for(long n, long grain, tcc_task_fn fn, void *ctx);
/* on = 1: this thread's parallel_for calls run inline, on this thread alone,
 * until set back (0); returns the previous setting. Generated code wraps
 * calls too small to gain from the pool in it (codegen.SERIAL_WORK): on the
 * 2-core Zen 2 the other core's wake-up and the transfer of the data it
 * reads cost more than half of such a call's work. */
int tcc_cpu_set_inline(int on);
int tcc_cpu_num_threads(void);
void tcc_cpu_set_num_threads(int n);
const char *tcc_cpu_isa(void);

/* ---- fused epilogue ------------------------------------------------------
 * out = act(acc + bias_scale * bias + residual), applied to an M x N block
 * (row stride ldc). bias_mode: 0 none, 1 per column (N), 2 per row (M),
 * 3 full M x N (row stride N), 4 scalar. residual: NULL or M x N (stride ldc). */
enum { TCC_ACT_NONE = 0, TCC_ACT_RELU = 1, TCC_ACT_CLIP = 2, TCC_ACT_SIGMOID = 3, TCC_ACT_TANH = 4,
       TCC_ACT_LEAKY = 5, TCC_ACT_SILU = 6 /* x * sigmoid(x); convolutions only */,
       /* an 8-bit QuantizeLinear + DequantizeLinear pair of one scale a0 and
        * one zero point, as dialects/transforms/qdq.py writes it:
        * (min(max(x / a0 + M, a1), a1 + 255) - M) * a0, M = 1.5 * 2^23,
        * a1 = M + qmin - zero point; NaN gives a1 (qmin). Convolutions only. */
       TCC_ACT_QDQ8 = 7 };
#define TCC_QDQ_M 12582912.0f
typedef struct {
    const float *bias;
    int bias_mode;
    float bias_scale;
    const float *residual;
    int act;
    float a0, a1;  /* clip min/max, leaky alpha */
} tcc_epilogue;

/* ---- GEMM ----------------------------------------------------------------
 * C[M,N] = epilogue(alpha * op(A) @ op(B)); op(A) is M x K (A is K x M when
 * transA), op(B) is K x N (B is N x K when transB). */
void tcc_cpu_gemm(int transA, int transB, long M, long N, long K, float alpha, const float *A, long lda,
                  const float *B, long ldb, float *C, long ldc, const tcc_epilogue *ep);
/* C[M,N] = epilogue(alpha * A @ B) with A[i,k] at A[i*rsa + k*csa] and B a
 * constant packed at compile time as [ceil(N/32)][K][32] panels (zero past N). */
void tcc_cpu_gemm_packed(long M, long N, long K, float alpha, const float *A, long rsa, long csa,
                         const float *Bp, float *C, long ldc, const tcc_epilogue *ep);
/* The same for a narrow constant B (few columns) given transposed: Bt is N x K
 * with row stride ldbt >= K (codegen.pack_bt); A's rows contiguous (row stride lda). */
void tcc_cpu_gemm_narrow(long M, long N, long K, float alpha, const float *A, long lda, const float *Bt, long ldbt,
                         float *C, long ldc, const tcc_epilogue *ep);
/* C = A @ B, A M x K (row stride lda), B row-major K x N: a few rows, no
 * threads, no epilogue (register blocks streaming B; what rnn.c's steps use). */
void tcc_cpu_gemm_rows(long M, long N, long K, const float *A, long lda, const float *B, long ldb, float *C,
                       long ldc);
/* `batch` GEMMs with per-batch element offsets (broadcast MatMul). */
void tcc_cpu_gemm_batch(long batch, const long *offA, const long *offB, const long *offC, int transA,
                        int transB, long M, long N, long K, float alpha, const float *A, long lda,
                        const float *B, long ldb, float *C, long ldc, const tcc_epilogue *ep);
/* Where a runtime B goes with AVX-512 (tests): 1 packed per call for the
 * library's tiles, 0 OpenBLAS, -1 the default (packed where OpenBLAS runs
 * no AVX-512 kernels on this CPU; TCC_CPU_GEMM_B=pack|openblas); returns
 * the previous setting. */
int tcc_cpu_gemm_pack_b(int on);

/* ---- LSTM / GRU (rnn.c) ------------------------------------------------------
 * X [T][NB][I] (layout 0) or [NB][T][I] (layout 1); per direction d the
 * weights transposed, WT [nd][I][G*H] and RT [nd][H][G*H] (onnx's gate
 * order: LSTM i, o, f, c; GRU z, r, h), bias [nd][G*H] (Wb + Rb folded,
 * except GRU linear_before_reset's Rb_h: rbh [nd][H], else NULL), LSTM
 * peepholes P [nd][3H] or NULL, lens (sequence_lens, int32 [NB]) or NULL,
 * h0/c0 (initial_h/c) or NULL. Y [T][nd][NB][H] (layout 0) or
 * [NB][T][nd][H]. Default activations only (sigmoid, tanh). `scratch` must
 * hold tcc_cpu_rnn_scratch(p) floats. */
enum { TCC_RNN_LSTM = 0, TCC_RNN_GRU = 1 };
typedef struct {
    int kind, nd, reverse, layout, linear_before_reset, input_forget, has_clip;
    float clip;
    long T, NB, In, H; /* steps, batch, input size, hidden size */
} tcc_rnn_params;
long tcc_cpu_rnn_scratch(const tcc_rnn_params *p);
void tcc_cpu_rnn(const tcc_rnn_params *p, const float *X, const float *WT, const float *RT, const float *bias,
                 const float *rbh, const float *P, const int32_t *lens, const float *h0, const float *c0, float *Y,
                 float *scratch);

/* ---- convolution (NCHW, weights OIHW) --------------------------------------
 * Epilogue bias is per output channel (bias_mode 2); residual is N x M x OH x OW.
 * `scratch` must hold tcc_cpu_conv2d_scratch(...) floats. */
typedef struct {
    long n, c, h, w;       /* input */
    long m, kh, kw;        /* output channels, kernel */
    long oh, ow;           /* output */
    long sh, sw, dh, dw;   /* strides, dilations */
    long pt, pl, pb, pr;   /* pads: top, left, bottom, right */
    long group;
} tcc_conv_params;
size_t tcc_cpu_conv2d_scratch(const tcc_conv_params *p);
void tcc_cpu_conv2d(const tcc_conv_params *p, const float *x, const float *w, float *y, float *scratch,
                    const tcc_epilogue *ep);
/* The same (not depthwise, strides the phase table covers) with the weights
 * packed at compile time (codegen.pack_conv): per group, [ceil(M/G/32)][K][32]
 * panels of the OIHW rows transposed, K = C/G*KH*KW, zero past M/G. */
void tcc_cpu_conv2d_packed(const tcc_conv_params *p, const float *x, const float *wp, float *y, float *scratch,
                           const tcc_epilogue *ep);
/* The kernel tcc_cpu_conv2d_packed runs p on in this build: "rows"
 * (conv_rows.c, positions in the lanes: few input channels and taps) or
 * "ocv" (conv_ocv.c, output channels in the lanes). For the tests. */
const char *tcc_cpu_conv2d_packed_path(const tcc_conv_params *p);
/* A pointwise convolution (1x1, stride 1, no pads, group 1) with the weights
 * packed at compile time as [ceil(m/8)][c][8] (rows past m zero). */
void tcc_cpu_conv2d_pw(const tcc_conv_params *p, const float *x, const float *wp, float *y, const tcc_epilogue *ep);
/* A 1x1 convolution with strides, no pads, group 1 and the same packed
 * weights: the input subsampled into scratch (c * oh * ow floats, what
 * tcc_cpu_conv2d_scratch reserves), then tcc_cpu_conv2d_pw's kernel. */
void tcc_cpu_conv2d_pw_strided(const tcc_conv_params *p, const float *x, const float *wp, float *y, float *scratch,
                               const tcc_epilogue *ep);
/* The path a depthwise convolution p takes in this build (tcc_cpu_conv2d
 * and the fused kernels): "flat", "s2" (AVX-512 in place), "rows3x3"
 * (3x3 stride 1: rows in registers), "whole-vectors", "masked" (packed
 * planes), "in-place" (unpadded stride 1), "im2col". For the tests. */
const char *tcc_cpu_conv2d_dw_path(const tcc_conv_params *p);
/* The same for an input tcc_cpu_conv2d_pw_dw wrote: the threads split the
 * input channels as it split its output channels, so each reads what it
 * wrote; the residual may not alias y. */
void tcc_cpu_conv2d_pw_split_c(const tcc_conv_params *p, const float *x, const float *wp, float *y,
                               const tcc_epilogue *ep);
/* A pointwise convolution (pp, as tcc_cpu_conv2d_pw) whose output only the
 * depthwise convolution pd (group == c == m, kh*kw <= 64, sh*sw <= 64, OIHW
 * weights wd) reads: y = dw(pw(x)), the pointwise output never stored. */
void tcc_cpu_conv2d_pw_dw(const tcc_conv_params *pp, const float *x, const float *wp, const tcc_epilogue *epp,
                          const tcc_conv_params *pd, const float *wd, float *y, const tcc_epilogue *epd);
/* The kernel tcc_cpu_conv2d_pw_dw runs (pp, pd) on in this build, with
 * activations computed in registers (others always take "planes"):
 * "blocked8" (AVX2: the expanded channels in the lanes, conv_pwdw8.c) or
 * "planes" (plane by plane, conv_pw.c). For the tests. */
const char *tcc_cpu_conv2d_pw_dw_path(const tcc_conv_params *pp, const tcc_conv_params *pd);
/* cpu.conv_q8_dw: tcc_conv_q8's int8 1x1 convolution (its p, qp, packed
 * weights wq, scale and bias; declared below) whose float output only the
 * depthwise convolution pd (as above) reads: y = dw(conv_q8(x)), the
 * pointwise output never stored. The AVX-512 build on a CPU with VNNI
 * fuses them as tcc_cpu_conv2d_pw_dw does; elsewhere `q8` (tcc_conv_q8,
 * passed by the generated code: this library does not link the host
 * runtime) writes the pointwise output into a buffer the depthwise
 * convolution then reads. */
typedef void (*tcc_conv_q8_fn)(const int64_t *p, const float *qp, float *Y, const float *X, const void *Wp,
                               const float *scale, const float *bias);
void tcc_cpu_conv2d_q8_dw(const int64_t *p, const float *qp, const float *x, const void *wq, const float *scale,
                          const float *bias, const tcc_conv_params *pd, const float *wd, float *y,
                          const tcc_epilogue *epd, tcc_conv_q8_fn q8);
/* "fused-vnni" or "apart": how tcc_cpu_conv2d_q8_dw runs (p, pd) here; with
 * tcc_cpu_conv2d_q8_dw_apart(1) always apart, as on a CPU without VNNI
 * (returns the setting it replaces). For the tests. */
const char *tcc_cpu_conv2d_q8_dw_path(const int64_t *p, const tcc_conv_params *pd);
int tcc_cpu_conv2d_q8_dw_apart(int on);
/* A depthwise convolution pd (as above; no residual in epd) whose output
 * only the pointwise convolution pq (weights packed as tcc_cpu_conv2d_pw's)
 * reads: y = pw(dw(x)), the depthwise output never stored. */
void tcc_cpu_conv2d_dw_pw(const tcc_conv_params *pd, const float *x, const float *wd, const tcc_epilogue *epd,
                          const tcc_conv_params *pq, const float *wq, float *y, const tcc_epilogue *epq);
/* 3x3, stride 1, dilation 1, group 1 as Winograd F(tile x tile, 3x3), tile
 * 2 or 4, the weights transformed at compile time (codegen.pack_wino): per
 * xi of (tile + 2)^2, per block b of nb = ceil(m / 14) output channel rows
 * [b*m/nb, (b+1)*m/nb), [c][rows]. */
void tcc_cpu_conv2d_wino(const tcc_conv_params *p, int tile, const float *x, const float *u, float *y,
                         const tcc_epilogue *ep);

/* ---- pooling ------------------------------------------------------------- */
typedef struct {
    long n, c, h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
    int count_include_pad;
} tcc_pool_params;
void tcc_cpu_maxpool2d(const tcc_pool_params *p, const float *x, float *y);
void tcc_cpu_avgpool2d(const tcc_pool_params *p, const float *x, float *y);
void tcc_cpu_global_avgpool(long planes, long hw, const float *x, float *y);

/* ---- normalization ---------------------------------------------------------
 * x viewed as [outer, axis, inner]; softmax along `axis`. */
void tcc_cpu_softmax(long outer, long axis, long inner, const float *x, float *y, int log);
/* x viewed as [rows, cols]; normalized over cols, then * scale + bias (scale
 * and bias of cols elements; bias may be NULL). */
void tcc_cpu_layernorm(long rows, long cols, const float *x, const float *scale, const float *bias, float eps,
                       float *y);
/* layernorm(softmax(x)) over the same rows of `cols` (softmax over the last
 * axis, not log), one pass. */
void tcc_cpu_softmax_layernorm(long rows, long cols, const float *x, const float *scale, const float *bias, float eps,
                               float *y);

/* ---- data movement ---------------------------------------------------------- */
void tcc_cpu_copy(float *dst, const float *src, long n);
/* dst[i] = src transposed: in_shape/perm of rank <= 8, element size 4. */
void tcc_cpu_transpose(int rank, const long *in_shape, const long *perm, const float *src, float *dst);
/* dst (contiguous, out_shape) from src read with in_stride (elements, any
 * sign, 0 to repeat) per output dim: rank <= 8. */
void tcc_cpu_strided(int rank, const long *out_shape, const long *in_stride, const float *src, float *dst);
/* rows x cols floats: row r from src + r * src_ld to dst + r * dst_ld. */
void tcc_cpu_copy_rows(long rows, long cols, const float *src, long src_ld, float *dst, long dst_ld);

/* ---- from the host runtime (runtime/native/gemm_int.c, libtccrt: loaded
 * RTLD_GLOBAL with this library, build.load) ----------------------------------- */
/* cpu.conv_q8: an int8 convolution of a float image to a float output, the
 * ops qdq.py's QdqConvToInteger writes (QuantizeLinear, ConvInteger, Cast,
 * Mul, bias Add, the quantize-dequantize pair) in one call */
void tcc_conv_q8(const int64_t *p, const float *qp, float *Y, const float *X, const void *Wp, const float *scale,
                 const float *bias);

/* ---- scalar math usable by generated elementwise code ------------------------ */
float tcc_cpu_expf(float x);

#ifdef __cplusplus
}
#endif
#endif
