// CUDA emulation for the host: compiles tcc's generated CUDA C as C++ so the
// CPU tests can run the very kernels a GPU runs. Blocks run one after another;
// the threads of a block run as real threads when the kernel is cooperative
// (__syncthreads, warp shuffles: both emulated with a block-wide barrier, so
// every thread of the block must reach them, as tcc's templates do), else
// one after another. Not a simulator of the memory model: a numerics check.
#pragma once
#include <math.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
#include <barrier>
#include <functional>

using std::signbit;
struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct alignas(16) float4 { float x, y, z, w; };
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }

inline thread_local uint3 threadIdx{0, 0, 0};
inline uint3 blockIdx{0, 0, 0};
inline dim3 blockDim, gridDim;
inline std::barrier<>* tcc_emu_bar = nullptr;
inline double tcc_emu_xchg[4096];

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
static inline double __longlong_as_double(long long i) { double f; std::memcpy(&f, &i, 8); return f; }
static inline long long __double_as_longlong(double f) { long long i; std::memcpy(&i, &f, 8); return i; }

static inline void __syncthreads() { if (tcc_emu_bar) tcc_emu_bar->arrive_and_wait(); }
static inline unsigned tcc_emu_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  const unsigned me = tcc_emu_tid();
  tcc_emu_xchg[me] = (double)v;
  __syncthreads();
  const unsigned other = (me & ~31u) | ((me & 31u) ^ (unsigned)lane_mask);
  T r = (T)tcc_emu_xchg[other];
  __syncthreads();
  return r;
}
template <typename T> static inline T __shfl_down_sync(unsigned, T v, unsigned d) {
  const unsigned me = tcc_emu_tid();
  tcc_emu_xchg[me] = (double)v;
  __syncthreads();
  const unsigned lane = me & 31u;
  T r = lane + d < 32 ? (T)tcc_emu_xchg[me + d] : v;
  __syncthreads();
  return r;
}

static inline void tcc_emu_run(dim3 g, dim3 b, int coop, const std::function<void()>& body) {
  gridDim = g; blockDim = b;
  const unsigned nt = b.x * b.y * b.z;
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned x = 0; x < g.x; ++x) {
        blockIdx = uint3{x, y, z};
        if (!coop) {
          tcc_emu_bar = nullptr;
          for (unsigned t = 0; t < nt; ++t) {
            threadIdx = uint3{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
            body();
          }
          continue;
        }
        std::barrier<> bar((std::ptrdiff_t)nt);
        tcc_emu_bar = &bar;
        std::vector<std::thread> ts;
        ts.reserve(nt);
        for (unsigned t = 0; t < nt; ++t)
          ts.emplace_back([t, b, &body] {
            threadIdx = uint3{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
            body();
          });
        for (auto& th : ts) th.join();
        tcc_emu_bar = nullptr;
      }
}
