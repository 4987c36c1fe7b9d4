"""`make bench` (cpu accelerator part): the benchmark models compiled with
--maccel=cpu against onnxruntime's CPU provider in the same run, at 1 and 2
threads (each thread count in a fresh process: TCC_NUM_THREADS,
OPENBLAS_NUM_THREADS and ORT's intra-op threads all set to it), plus the
kernel library's GEMM GFLOP/s next to numpy's matmul. Ratios are
tcc time / ORT time (lower is better; target <= 1.0)."""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

import hide_avx512_child  # noqa: F401, I001  (first: a --hide-avx512 child's shim, before numpy reads CPUID)
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_models import (_interleaved_ms, _interleaved_samples, add_cpu_emulation_args,  # noqa: E402  (one timing method and header for every table)
                          cpu_emulation_env, header, run_per_thread_count)

MODELS = ["mlp", "resnet18", "mobilenetv2", "bert", "bert_int8", "mlp_qdq", "resnet18_qdq", "mobilenetv2_qdq",
          "chain", "softmax_ln"]


def _quantized(model):
    """`model` as onnxruntime's quantize_dynamic writes it (int8 weights,
    DynamicQuantizeLinear + MatMulInteger on the activations): the usual CPU
    recipe for transformers. Its max rel err is against onnxruntime's fused
    integer kernels, which round otherwise than the ops' definition (tcc's
    result equals onnxruntime's with graph optimizations off)."""
    import logging
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        onnx.save(model, src)
        logging.disable(logging.WARNING)  # its advice to pre-process the model first
        try:
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        finally:
            logging.disable(logging.NOTSET)
        return onnx.load(dst)


def _static_quantized(model, pre_process=False):
    """`model` as onnxruntime's quantize_static writes it in its default QDQ
    format (uint8 activations, int8 weights; QuantizeLinear ->
    DequantizeLinear around each matmul), calibrated on four seeded random
    inputs; with `pre_process`, after onnxruntime's quant_pre_process (its
    documented first step: BatchNormalization folded into the convolutions,
    so Clip and Relu go into the quantized ranges). A quantized activation
    one step apart at a rounding tie moves the output by a step: max rel err
    is of that order."""
    import logging
    import tempfile

    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    x = model.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{x.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        onnx.save(model, src)
        logging.disable(logging.WARNING)
        try:
            if pre_process:
                from onnxruntime.quantization.shape_inference import quant_pre_process
                pre = os.path.join(d, "p.onnx")
                quant_pre_process(src, pre, skip_symbolic_shape=True)
                src = pre
            quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8)
        finally:
            logging.disable(logging.NOTSET)
        return onnx.load(dst)


def build_model(name):
    from tcc import samples
    if name == "mlp":
        return samples.mlp_matmul(batch=64, seed=0)
    if name == "resnet18":
        return samples.resnet18(seed=0)
    if name == "mobilenetv2":
        return samples.mobilenetv2(seed=0)
    if name == "bert":
        return samples.transformer(batch=1, seq=128, d=256, heads=4, layers=4, seed=0)
    if name == "bert_int8":
        return _quantized(build_model("bert"))
    if name == "mlp_qdq":
        return _static_quantized(build_model("mlp"))
    if name == "resnet18_qdq":
        return _static_quantized(build_model("resnet18"))
    if name == "mobilenetv2_qdq":
        return _static_quantized(build_model("mobilenetv2"), pre_process=True)
    if name == "chain":  # the host path's memory-bound rows: their lead must hold on the cpu accelerator
        return samples.elementwise_chain()
    if name == "softmax_ln":
        return samples.softmax_layernorm()
    raise ValueError(name)


def bench_models(threads, names, min_time):
    import onnxruntime as ort

    import tcc
    rows = []
    for name in names:
        model = build_model(name)
        sess = tcc.load(tcc.compile(model, maccel=["cpu"]))
        host = tcc.load(tcc.compile(model, maccel=["host"]))
        specs = sess.input_signature
        rng = np.random.default_rng(0)
        feeds = {s["name"]: rng.standard_normal(s["shape"]).astype(np.float32) for s in specs}
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        osess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        ours = sess.run(feeds)[0]
        ref = osess.run(None, feeds)[0]
        err = float(np.max(np.abs(ours - ref)) / (np.max(np.abs(ref)) + 1e-30))
        h = host.run(feeds)[0]
        err = max(err, float(np.max(np.abs(h - ref)) / (np.max(np.abs(ref)) + 1e-30)))
        # alternating bursts, each after 0.1 s of untimed runs (bench_models.py's
        # method): both engines see the same machine load, neither one's idle
        # spinning threads steal the other's second core, and neither is timed
        # on the clock's ramp after idle
        # at least 8 bursts a side, and up to 40 for the fast models: this
        # machine's speed swings over seconds, and 12 bursts of a 1.5 ms model
        # (0.7 s in all) could land in one swing on one side
        t0 = time.perf_counter()
        sess.run(feeds)
        osess.run(None, feeds)
        reps = int(min(200, max(40, 2 * min_time / max(time.perf_counter() - t0, 1e-6))))
        ts = _interleaved_samples([lambda: sess.run(feeds), lambda: osess.run(None, feeds),
                                   lambda: host.run(feeds)], reps)
        t_tcc, t_ort, t_host = (float(np.median(t)) * 1e3 for t in ts)
        rows.append((name, t_tcc, t_ort, t_tcc / t_ort, err, t_host))
    return rows


def bench_gemm(sizes, min_time):
    from tcc.accelerators.cpu import build
    lib = build.load_kernels()
    f = lib.tcc_cpu_gemm
    f.restype = None
    L, F, P = ctypes.c_long, ctypes.c_float, ctypes.c_void_p
    f.argtypes = [ctypes.c_int, ctypes.c_int, L, L, L, F, P, L, P, L, P, L, P]
    rows = []
    for n in sizes:
        a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
        b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
        c = np.empty((n, n), np.float32)
        c2 = np.empty_like(c)
        fa = lambda: f(0, 0, n, n, n, 1.0, a.ctypes.data, n, b.ctypes.data, n, c.ctypes.data, n, None)
        fb = lambda: np.matmul(a, b, out=c2)
        fa()
        fb()
        assert np.allclose(c, c2, rtol=1e-3, atol=1e-3)
        # alternating bursts, as for the models: timed one after the other, the
        # two sides saw different machine loads (this ratio swung 88-113 %).
        # Pauses of 0.5 s: numpy's OpenBLAS threads keep spinning after a call
        # and took our second core for the next burst: at n = 256 on 2 threads,
        # ours timed alone 127 GFLOP/s, interleaved with 0.15 s pauses 66-84
        # (numpy unaffected), with 0.5 s pauses 81-85 (same run, EPYC Zen 2 VM)
        t0 = time.perf_counter()
        fa()
        fb()
        t_pair = max(time.perf_counter() - t0, 1e-6)
        reps = int(min(200, max(40, 2 * min_time / t_pair)))
        # After each pause both sides start slow: on the 2-core EPYC VM the
        # first calls after 0.15 s idle took 2-3x their steady time for ~5 ms
        # (n = 256, 2 threads: ours 600 -> 274 us, numpy's 4.3 ms -> 250 us),
        # so 2 warm-up calls of a 0.3 ms product left the timed ones on that
        # ramp (58-83 % at n = 256, 77 % at 1024). Warm up for >= 20 ms.
        warm = max(2, int(0.02 / (t_pair / 2)))
        ours, ref = _interleaved_ms(fa, fb, reps, warmup=warm, pause=0.5)
        flops = 2.0 * n ** 3
        rows.append((n, flops / ours / 1e6, flops / ref / 1e6))
    return rows


def child(args):
    from tcc.accelerators.cpu import build
    isa = build.load_kernels().tcc_cpu_isa().decode()
    print(header(args.thread))
    print(f"## {args.thread} thread(s), kernel library: {isa}")
    print(f"{'model':<15} {'tcc ms':>9} {'ORT ms':>9} {'ratio':>7} {'host ms':>9} {'cpu/host':>8} {'max rel err':>12}")
    for name, t, o, r, e, h in bench_models(args.thread, args.models, args.min_time):
        print(f"{name:<15} {t:9.2f} {o:9.2f} {r:6.2f}x {h:9.2f} {t / h:7.2f}x {e:12.2e}", flush=True)
    print(f"{'GEMM n':<15} {'tcc GF/s':>9} {'numpy':>9} {'ratio':>7}")
    for n, ours, ref in bench_gemm(args.gemm, args.min_time):
        print(f"{n:<15} {ours:9.1f} {ref:9.1f} {ours / ref * 100:6.0f}%", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    p.add_argument("--thread", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--models", nargs="*", default=MODELS)
    p.add_argument("--gemm", type=int, nargs="*", default=[256, 1024, 2048])
    p.add_argument("--min-time", type=float, default=1.0)
    add_cpu_emulation_args(p)  # bench_models.py
    p.add_argument("--child", action="store_true")
    args = p.parse_args()
    if args.child:
        child(args)
        return
    env = cpu_emulation_env(p, args)  # bench_models.py
    run_per_thread_count(__file__, args.threads, ["--models", *args.models, "--gemm", *map(str, args.gemm),
                                                  "--min-time", str(args.min_time)], env=env)


if __name__ == "__main__":
    main()
