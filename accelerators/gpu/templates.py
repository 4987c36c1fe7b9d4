"""CUDA C shared by every kernel (the prelude) and the hand-written kernel
templates: row reductions with warp shuffles (Softmax, LayerNormalization,
trailing-axis ReduceSum/Mean/Max/Min) and the tiled 2-D transpose.

Only plain CUDA C++ is used (no cuda_fp16.h, no cooperative groups), so the
same text compiles with NVRTC, with `nvcc -ptx`, and as host C++ under the
emulation header `cuda_emu.h` that the CPU tests use."""

PRELUDE = r"""
#ifndef TCC_GPU_PRELUDE
#define TCC_GPU_PRELUDE
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fc00000)
#endif
__device__ __forceinline__ float tcc_maximumf(float a, float b) { return (a != a || b != b) ? NAN : (a > b ? a : (b > a ? b : (signbit(a) ? b : a))); }
__device__ __forceinline__ float tcc_minimumf(float a, float b) { return (a != a || b != b) ? NAN : (a < b ? a : (b < a ? b : (signbit(a) ? a : b))); }
__device__ __forceinline__ double tcc_maximumd(double a, double b) { return (a != a || b != b) ? (double)NAN : (a > b ? a : (b > a ? b : (signbit(a) ? b : a))); }
__device__ __forceinline__ double tcc_minimumd(double a, double b) { return (a != a || b != b) ? (double)NAN : (a < b ? a : (b < a ? b : (signbit(a) ? a : b))); }
template <typename T> __device__ __forceinline__ T tcc_max(T a, T b) { return a > b ? a : b; }
template <typename T> __device__ __forceinline__ T tcc_min(T a, T b) { return a < b ? a : b; }
template <typename T> __device__ __forceinline__ T tcc_sdiv(T a, T b) { return b == 0 ? (T)0 : a / b; }
template <typename T> __device__ __forceinline__ T tcc_srem(T a, T b) { return b == 0 ? (T)0 : a % b; }
template <int NT> __device__ __forceinline__ float tcc_block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (NT > 32) {
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) red[w] = v;
    __syncthreads();
    v = (l < NT / 32) ? red[l] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
  }
  return v;
}
template <int NT> __device__ __forceinline__ float tcc_block_max(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (NT > 32) {
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) red[w] = v;
    __syncthreads();
    v = (l < NT / 32) ? red[l] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
  }
  return v;
}
template <int NT> __device__ __forceinline__ float tcc_block_min(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (NT > 32) {
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) red[w] = v;
    __syncthreads();
    v = (l < NT / 32) ? red[l] : INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
  }
  return v;
}
#endif
"""


def row_threads(cols):
    """Threads per row for the block-per-row templates."""
    if cols <= 128:
        return 32
    if cols <= 1024:
        return 128
    if cols <= 4096:
        return 256
    return 512


SOFTMAX = r"""
extern "C" __global__ void __launch_bounds__({nt}) {name}(const float* __restrict__ x, float* __restrict__ y) {{
  __shared__ float red[32];
  const long long base = (long long)blockIdx.x * {cols};
  const float* xr = x + base;
  float* yr = y + base;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < {cols}; j += {nt}) m = fmaxf(m, xr[j]);
  m = tcc_block_max<{nt}>(m, red);
  float s = 0.0f;
  for (int j = threadIdx.x; j < {cols}; j += {nt}) s += expf(xr[j] - m);
  s = tcc_block_sum<{nt}>(s, red);
{tail}
}}
"""
SOFTMAX_TAIL = "  const float inv = 1.0f / s;\n  for (int j = threadIdx.x; j < {cols}; j += {nt}) yr[j] = expf(xr[j] - m) * inv;"
LOGSOFTMAX_TAIL = "  const float ls = logf(s);\n  for (int j = threadIdx.x; j < {cols}; j += {nt}) yr[j] = xr[j] - m - ls;"

LAYERNORM = r"""
extern "C" __global__ void __launch_bounds__({nt}) {name}(const float* __restrict__ x, const float* __restrict__ g,{bias_param} float* __restrict__ y) {{
  __shared__ float red[32];
  const long long base = (long long)blockIdx.x * {cols};
  const float* xr = x + base;
  float* yr = y + base;
  float s = 0.0f;
  for (int j = threadIdx.x; j < {cols}; j += {nt}) s += xr[j];
  const float mean = tcc_block_sum<{nt}>(s, red) * (1.0f / {cols});
  float q = 0.0f;
  for (int j = threadIdx.x; j < {cols}; j += {nt}) {{ const float d = xr[j] - mean; q += d * d; }}
  const float var = tcc_block_sum<{nt}>(q, red) * (1.0f / {cols});
  const float r = 1.0f / sqrtf(var + {eps});
  for (int j = threadIdx.x; j < {cols}; j += {nt}) yr[j] = (xr[j] - mean) * r * g[j]{bias_term};
}}
"""

REDUCE = r"""
extern "C" __global__ void __launch_bounds__({nt}) {name}(const float* __restrict__ x, float* __restrict__ y) {{
  __shared__ float red[32];
  const float* xr = x + (long long)blockIdx.x * {cols};
  float a = {init};
  for (int j = threadIdx.x; j < {cols}; j += {nt}) a = {combine};
  a = tcc_block_{block}<{nt}>(a, red);
  if (threadIdx.x == 0) y[blockIdx.x] = a{finish};
}}
"""

# gridDim.y and .z are capped at 65535 (x at 2^31-1): the row tiles and the batch
# loop over the grid in y and z, so any shape launches.
GRID_YZ = 65535
TRANSPOSE = r"""
extern "C" __global__ void __launch_bounds__(256) {name}(const float* __restrict__ x, float* __restrict__ y) {{
  __shared__ float tile[32][33];
  const int bx = blockIdx.x * 32;
  for (long long bz = blockIdx.z; bz < {batch}; bz += gridDim.z) {{
    const long long off = bz * {rows} * {cols};
    for (long long ty = blockIdx.y; ty < {row_tiles}; ty += gridDim.y) {{
      const int by = (int)ty * 32;
      for (int j = threadIdx.y; j < 32; j += 8) {{
        const int r = by + j, c = bx + threadIdx.x;
        if (r < {rows} && c < {cols}) tile[j][threadIdx.x] = x[off + (long long)r * {cols} + c];
      }}
      __syncthreads();
      for (int j = threadIdx.y; j < 32; j += 8) {{
        const int c = bx + j, r = by + threadIdx.x;
        if (c < {cols} && r < {rows}) y[off + (long long)c * {rows} + r] = tile[threadIdx.x][j];
      }}
      __syncthreads();
    }}
  }}
}}
"""


def softmax(name, rows, cols, log):
    nt = row_threads(cols)
    tail = (LOGSOFTMAX_TAIL if log else SOFTMAX_TAIL).format(cols=cols, nt=nt)
    return SOFTMAX.format(name=name, cols=cols, nt=nt, tail=tail), (rows, 1, 1), (nt, 1, 1)


def layernorm(name, rows, cols, eps, has_bias):
    nt = row_threads(cols)
    src = LAYERNORM.format(name=name, cols=cols, nt=nt, eps=_flt(eps),
                           bias_param=" const float* __restrict__ b," if has_bias else "",
                           bias_term=" + b[j]" if has_bias else "")
    return src, (rows, 1, 1), (nt, 1, 1)


def reduce(name, rows, cols, op):
    nt = row_threads(cols)
    init, combine, block, finish = {
        "sum": ("0.0f", "a + xr[j]", "sum", ""),
        "mean": ("0.0f", "a + xr[j]", "sum", f" * (1.0f / {cols})"),
        "max": ("-INFINITY", "fmaxf(a, xr[j])", "max", ""),
        "min": ("INFINITY", "fminf(a, xr[j])", "min", ""),
    }[op]
    src = REDUCE.format(name=name, cols=cols, nt=nt, init=init, combine=combine, block=block, finish=finish)
    return src, (rows, 1, 1), (nt, 1, 1)


def transpose2d(name, batch, rows, cols):
    row_tiles = (rows + 31) // 32
    src = TRANSPOSE.format(name=name, rows=rows, cols=cols, batch=batch, row_tiles=row_tiles)
    return src, ((cols + 31) // 32, min(row_tiles, GRID_YZ), min(batch, GRID_YZ)), (32, 8, 1)


def _flt(v):
    import math
    if math.isinf(v) or math.isnan(v):
        return "INFINITY" if v > 0 else ("-INFINITY" if v < 0 else "NAN")
    return repr(float(v)) + "f"
