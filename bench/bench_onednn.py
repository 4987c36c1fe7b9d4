"""oneDNN against the cpu accelerator's kernels on the bench models' GEMM and
convolution shapes (not part of `make bench`: oneDNN is no dependency).

    pip download --no-deps onednn-cpu-gomp==2023.2.0 && unzip it   # 39 MB, oneDNN 3.2
    python bench/bench_onednn.py --libdnnl .../lib/libdnnl.so.3 [--threads 1 2] [--only conv|gemm]

With TCC_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 both sides run their AVX2
code on an AVX-512 machine.

`onednn==2026.1` (oneDNN 3.13, ~97 MB with its runtimes) is the DPC++ build:
its CPU engine is a SYCL device, which needs an OpenCL CPU adapter of the
Unified Runtime that none of its wheels ship (dnnl_engine_create fails with
"SYCL cpu devices queried but not found"), so this script loads the
`onednn-cpu-gomp` wheel's library (CPU runtime: GNU OpenMP) unless told
otherwise. Neither wheel ships headers: the C API is driven through ctypes,
one primitive per shape, created once, weights reordered once into the
layout it asks for (format "any", as tcc packs its weights at compile time).
Convolutions are timed twice: with NCHW activations (what a call from tcc's
generated C would hand it) and with the blocked activations it picks itself
(reorders not timed: what a whole network kept in its layout could reach).
tcc's side is a one-op ONNX model (constant weights unless noted, no bias)
compiled with --maccel=cpu and run through its session; both are timed in
turn in one process (alternating bursts, bench_models.py's method), each
thread count in a fresh process (TCC_NUM_THREADS and OMP_NUM_THREADS set to
it, and the CPU affinity to that many CPUs). Ratio = oneDNN time / tcc time
(below 1: oneDNN wins)."""
from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_models import _interleaved_samples, header, run_per_thread_count  # noqa: E402

# (name, M, K, N): MLP 64x784-1024-1024-10, the BERT-style encoder's
# projections (seq 128, d 256, FFN 1024), and square products (B an input).
GEMMS = [("mlp fc1", 64, 784, 1024, True), ("mlp fc2", 64, 1024, 1024, True), ("mlp fc3", 64, 1024, 10, True),
         ("bert qkv", 128, 256, 256, True), ("bert ffn1", 128, 256, 1024, True), ("bert ffn2", 128, 1024, 256, True),
         ("square 256", 256, 256, 256, False), ("square 1024", 1024, 1024, 1024, False)]
# (name, C, H, W, M, k, stride, pad, groups): ResNet-18's and MobileNetV2's layers, batch 1
CONVS = [("r18 stem 7x7/2", 3, 224, 224, 64, 7, 2, 3, 1), ("r18 3x3 56", 64, 56, 56, 64, 3, 1, 1, 1),
         ("r18 3x3/2 56>28", 64, 56, 56, 128, 3, 2, 1, 1), ("r18 3x3 28", 128, 28, 28, 128, 3, 1, 1, 1),
         ("r18 3x3 14", 256, 14, 14, 256, 3, 1, 1, 1), ("r18 3x3 7", 512, 7, 7, 512, 3, 1, 1, 1),
         ("r18 1x1/2 56>28", 64, 56, 56, 128, 1, 2, 0, 1), ("mv2 stem 3x3/2", 3, 224, 224, 32, 3, 2, 1, 1),
         ("mv2 pw 24>144 56", 24, 56, 56, 144, 1, 1, 0, 1), ("mv2 dw 144 56", 144, 56, 56, 144, 3, 1, 1, 144),
         ("mv2 pw 144>24 56", 144, 56, 56, 24, 1, 1, 0, 1), ("mv2 pw 192>32 28", 192, 28, 28, 32, 1, 1, 0, 1),
         ("mv2 pw 576>96 14", 576, 14, 14, 96, 1, 1, 0, 1), ("mv2 pw 960>320 7", 960, 7, 7, 320, 1, 1, 0, 1),
         ("mv2 dw 576 14", 576, 14, 14, 576, 3, 1, 1, 576)]

# oneDNN 3.x C API constants (include/oneapi/dnnl/dnnl_types.h, dnnl_common_types.h)
CPU, F32, ANY, TAG_AB, TAG_ABCD = 1, 3, 1, 3, 5
FWD_INFERENCE, CONV_AUTO = 96, 3
Q_SRC_MD, Q_WEIGHTS_MD, Q_DST_MD, Q_IMPL_STR = 129, 131, 133, 8
ARG_SRC, ARG_WEIGHTS, ARG_DST, ARG_FROM, ARG_TO = 1, 33, 17, 1, 17
MAX_NDIMS = 12
Dims = ctypes.c_int64 * MAX_NDIMS
VP = ctypes.c_void_p


class ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", VP)]


def _libdnnl(path):
    cands = [path] if path else glob.glob(os.path.join(sys.prefix, "lib", "libdnnl.so*"))
    if not cands or not os.path.exists(cands[0]):
        sys.exit(f"bench_onednn: {path or 'libdnnl.so'} not found (pip install onednn-cpu-gomp==2023.2.0, or --libdnnl)")
    lib = ctypes.CDLL(sorted(cands)[0])
    lib.dnnl_primitive_desc_query_md.restype = VP
    lib.dnnl_primitive_desc_query_md.argtypes = [VP, ctypes.c_int, ctypes.c_int]
    lib.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
    lib.dnnl_memory_desc_get_size.argtypes = [VP]
    lib.dnnl_engine_create.argtypes = [ctypes.POINTER(VP), ctypes.c_int, ctypes.c_size_t]
    lib.dnnl_stream_create.argtypes = [ctypes.POINTER(VP), VP, ctypes.c_uint]
    lib.dnnl_memory_desc_create_with_tag.argtypes = [ctypes.POINTER(VP), ctypes.c_int, Dims, ctypes.c_int, ctypes.c_int]
    lib.dnnl_matmul_primitive_desc_create.argtypes = [ctypes.POINTER(VP), VP, VP, VP, VP, VP, VP]
    lib.dnnl_convolution_forward_primitive_desc_create.argtypes = [
        ctypes.POINTER(VP), VP, ctypes.c_int, ctypes.c_int, VP, VP, VP, VP, Dims, Dims, Dims, Dims, VP]
    lib.dnnl_reorder_primitive_desc_create.argtypes = [ctypes.POINTER(VP), VP, VP, VP, VP, VP]
    lib.dnnl_primitive_create.argtypes = [ctypes.POINTER(VP), VP]
    lib.dnnl_memory_create.argtypes = [ctypes.POINTER(VP), VP, VP, VP]
    lib.dnnl_primitive_execute.argtypes = [VP, VP, ctypes.c_int, ctypes.POINTER(ExecArg)]
    lib.dnnl_stream_wait.argtypes = [VP]
    lib.dnnl_primitive_desc_query.argtypes = [VP, ctypes.c_int, ctypes.c_int, VP]
    return lib


class Dnnl:
    def __init__(self, path=None):
        self.lib = _libdnnl(path)
        self.eng, self.stream = VP(), VP()
        self._ok(self.lib.dnnl_engine_create(ctypes.byref(self.eng), CPU, 0), "engine")
        self._ok(self.lib.dnnl_stream_create(ctypes.byref(self.stream), self.eng, 1), "stream")
        self.keep = []  # arrays whose memory oneDNN objects use

    @staticmethod
    def _ok(status, what):
        if status != 0:
            raise RuntimeError(f"oneDNN {what}: status {status}")

    def md(self, shape, tag):
        m = VP()
        self._ok(self.lib.dnnl_memory_desc_create_with_tag(ctypes.byref(m), len(shape), Dims(*shape), F32, tag), "md")
        return m

    def mem(self, md, array=None):
        """oneDNN memory over `array` (numpy, kept alive), or a new zeroed buffer of md's size."""
        if array is None:
            array = np.zeros(self.lib.dnnl_memory_desc_get_size(md) // 4 + 16, np.float32)
        self.keep.append(array)
        m = VP()
        self._ok(self.lib.dnnl_memory_create(ctypes.byref(m), md, self.eng, VP(array.ctypes.data)), "memory")
        return m, array

    def prim(self, pd):
        p = VP()
        self._ok(self.lib.dnnl_primitive_create(ctypes.byref(p), pd), "primitive")
        return p

    def run(self, prim, args):
        arr = (ExecArg * len(args))(*[ExecArg(a, m) for a, m in args])
        self.lib.dnnl_primitive_execute(prim, self.stream, len(args), arr)
        self.lib.dnnl_stream_wait(self.stream)

    def reorder(self, src_md, src_arr, dst_md):
        """src (numpy, plain layout) -> a new buffer in dst_md's layout."""
        pd = VP()
        self._ok(self.lib.dnnl_reorder_primitive_desc_create(ctypes.byref(pd), src_md, self.eng, dst_md, self.eng,
                                                             None), "reorder")
        sm, _ = self.mem(src_md, src_arr)
        dm, darr = self.mem(dst_md)
        self.run(self.prim(pd), [(ARG_FROM, sm), (ARG_TO, dm)])
        return dm, darr

    def impl(self, pd):
        s = ctypes.c_char_p()
        self.lib.dnnl_primitive_desc_query(pd, Q_IMPL_STR, 0, ctypes.byref(s))
        return s.value.decode()

    def matmul(self, a, b):
        """-> (run(), output array, implementation name); b reordered once (format any)."""
        M, K = a.shape
        N = b.shape[1]
        pd = VP()
        self._ok(self.lib.dnnl_matmul_primitive_desc_create(
            ctypes.byref(pd), self.eng, self.md([M, K], TAG_AB), self.md([K, N], ANY), None,
            self.md([M, N], TAG_AB), None), "matmul")
        wm, _ = self.reorder(self.md([K, N], TAG_AB), b, self.lib.dnnl_primitive_desc_query_md(pd, Q_WEIGHTS_MD, 0))
        am, _ = self.mem(self.md([M, K], TAG_AB), a)
        c = np.empty((M, N), np.float32)
        cm, _ = self.mem(self.md([M, N], TAG_AB), c)
        p = self.prim(pd)
        args = [(ARG_SRC, am), (ARG_WEIGHTS, wm), (ARG_DST, cm)]
        return (lambda: self.run(p, args)), (lambda: c), self.impl(pd)

    def conv(self, x, w, stride, pad, groups, blocked):
        N, C, H, W = x.shape
        M, _, k, _ = w.shape
        OH, OW = (H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1
        wshape = [groups, M // groups, C // groups, k, k] if groups > 1 else [M, C, k, k]
        wtag = 6 if groups > 1 else TAG_ABCD  # dnnl_abcde = 6 (goihw)
        act = ANY if blocked else TAG_ABCD
        z = Dims(*([0] * MAX_NDIMS))
        pd = VP()
        self._ok(self.lib.dnnl_convolution_forward_primitive_desc_create(
            ctypes.byref(pd), self.eng, FWD_INFERENCE, CONV_AUTO, self.md([N, C, H, W], act),
            self.md(wshape, ANY), None, self.md([N, M, OH, OW], act), Dims(stride, stride), z,
            Dims(pad, pad), Dims(pad, pad), None), "convolution")
        q = self.lib.dnnl_primitive_desc_query_md
        wm, _ = self.reorder(self.md(wshape, wtag), np.ascontiguousarray(w).reshape(wshape), q(pd, Q_WEIGHTS_MD, 0))
        out_plain = np.empty((N, M, OH, OW), np.float32)
        if blocked:
            sm, _ = self.reorder(self.md([N, C, H, W], TAG_ABCD), x, q(pd, Q_SRC_MD, 0))
            dst_md = q(pd, Q_DST_MD, 0)
            dm, _ = self.mem(dst_md)
            back = VP()
            self._ok(self.lib.dnnl_reorder_primitive_desc_create(ctypes.byref(back), dst_md, self.eng,
                                                                 self.md([N, M, OH, OW], TAG_ABCD), self.eng, None),
                     "reorder")
            om, _ = self.mem(self.md([N, M, OH, OW], TAG_ABCD), out_plain)
            bp = self.prim(back)

            def result():
                self.run(bp, [(ARG_FROM, dm), (ARG_TO, om)])
                return out_plain
        else:
            sm, _ = self.mem(self.md([N, C, H, W], TAG_ABCD), x)
            dm, _ = self.mem(self.md([N, M, OH, OW], TAG_ABCD), out_plain)

            def result():
                return out_plain
        p = self.prim(pd)
        args = [(ARG_SRC, sm), (ARG_WEIGHTS, wm), (ARG_DST, dm)]
        return (lambda: self.run(p, args)), result, self.impl(pd)


def _tcc_session(model, tmp, name):
    import tcc
    return tcc.load(tcc.compile(model, maccel=["cpu"], output=os.path.join(tmp, name + ".tcc")))


def _gemm_model(M, K, N, b, const):
    from onnx import TensorProto, helper, numpy_helper
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [M, K])]
    inits = []
    if const:
        inits.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [K, N]))
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "mm", inputs,
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, [M, N])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    return m


def _conv_model(x_shape, w, stride, pad, groups, out_shape):
    from onnx import TensorProto, helper, numpy_helper
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride] * 2, pads=[pad] * 4, group=groups,
                            kernel_shape=list(w.shape[2:]))
    g = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    return m


def _time(fns, min_time):
    t0 = time.perf_counter()
    for f in fns:
        f()
    reps = int(min(100, max(20, 2 * min_time / max(time.perf_counter() - t0, 1e-6))))
    return [float(np.median(s)) * 1e3 for s in _interleaved_samples(fns, reps, pause=0.02)]


def child(args):
    d = Dnnl(args.libdnnl)
    rng = np.random.default_rng(0)
    print(header(args.thread))
    with tempfile.TemporaryDirectory(prefix="tcc-onednn-") as tmp:
        if args.only in (None, "gemm"):
            print(f"{'GEMM (M x K x N)':<30} {'tcc ms':>8} {'oneDNN ms':>10} {'oneDNN/tcc':>10}  oneDNN kernel")
            for name, M, K, N, const in GEMMS:
                a = rng.standard_normal((M, K)).astype(np.float32)
                b = rng.standard_normal((K, N)).astype(np.float32)
                sess = _tcc_session(_gemm_model(M, K, N, b, const), tmp, "g")
                feeds = {"a": a} if const else {"a": a, "b": b}
                run, out, impl = d.matmul(a, b)
                run()
                want = a.astype(np.float64) @ b
                for got in (out(), sess.run(feeds)[0]):
                    assert np.allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max()), name
                t, o = _time([lambda: sess.run(feeds), run], args.min_time)
                label = f"{name} {M}x{K}x{N}{'' if const else ' (B input)'}"
                print(f"{label:<30} {t:8.3f} {o:10.3f} {o / t:10.2f}  {impl}", flush=True)
        if args.only in (None, "conv"):
            print(f"{'conv (C>M HxW k/s)':<30} {'tcc ms':>8} {'oneDNN nchw':>11} {'ratio':>6} {'blocked':>8} "
                  f"{'ratio':>6}  oneDNN kernel (nchw | blocked)")
            for name, C, H, W, M, k, s, p, g in CONVS:
                x = rng.standard_normal((1, C, H, W)).astype(np.float32)
                w = (rng.standard_normal((M, C // g, k, k)) / np.sqrt(C // g * k * k)).astype(np.float32)
                OH, OW = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
                sess = _tcc_session(_conv_model([1, C, H, W], w, s, p, g, [1, M, OH, OW]), tmp, "c")
                want = sess.run({"x": x})[0]
                sides = [d.conv(x, w, s, p, g, blocked) for blocked in (False, True)]
                for run, out, _ in sides:
                    run()
                    np.testing.assert_allclose(out(), want, rtol=1e-3, atol=1e-3 * np.abs(want).max(), err_msg=name)
                t, o1, o2 = _time([lambda: sess.run({"x": x}), sides[0][0], sides[1][0]], args.min_time)
                print(f"{name:<30} {t:8.3f} {o1:11.3f} {o1 / t:6.2f} {o2:8.3f} {o2 / t:6.2f}  "
                      f"{sides[0][2]} | {sides[1][2]}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    p.add_argument("--thread", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--only", choices=["gemm", "conv"])
    p.add_argument("--min-time", type=float, default=0.5)
    p.add_argument("--libdnnl", help="the libdnnl.so to load (default: the one in this environment)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    extra = (["--only", args.only] if args.only else []) + (["--libdnnl", os.path.abspath(args.libdnnl)]
                                                           if args.libdnnl else [])
    cpus = sorted(os.sched_getaffinity(0))
    # the 2026.1 wheel's libdnnl.so finds its dependencies (TBB, the Intel
    # compiler runtime: wheels of their own, same lib folder) through
    # LD_LIBRARY_PATH; t CPUs for t threads (its TBB reads no thread-count
    # variable, only the affinity)
    lib = os.path.join(sys.prefix, "lib")
    run_per_thread_count(__file__, args.threads, ["--min-time", str(args.min_time), *extra],
                         env={"LD_LIBRARY_PATH": lib + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")},
                         prefix=lambda t: ["taskset", "-c", ",".join(map(str, cpus[:t]))] if t < len(cpus) else [])

if __name__ == "__main__":
    main()
