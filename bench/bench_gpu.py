"""GPU benchmarks (run only on a machine with an NVIDIA GPU): each model's
gpu partition (weights resident, CUDA-graph replay) against torch eager, and
the 8-op elementwise chain over 64M floats against device-to-device copy
bandwidth. Prints a short table; exits 0 (the numbers are the result)."""
import os
import sys
import time

import numpy as np

os.environ.setdefault("TCC_GPU_COMPILE_ONLY", "")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def _timeit(fn, sync, reps=50, warm=5):
    for _ in range(warm):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t) / reps


def main():
    try:
        import cupy as cp
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        print(f"bench-gpu: skipped: no usable GPU ({type(e).__name__}: {str(e).splitlines()[0]})")
        return 0
    from tcc import samples
    from tcc.accelerators.gpu import plugin
    from tcc.runtime.device import default_registry
    from test.accelerators.gpu.helpers import compile_partition, random_inputs
    dev = default_registry.get_device("gpu:0") if "gpu" in default_registry else None
    if dev is None:
        default_registry.register(plugin.tcc_device_manager_factory(), replace=True)
        dev = default_registry.get_device("gpu:0")
    rows = []
    n = 1 << 26
    a = cp.empty(n, cp.float32)
    b = cp.empty_like(a)
    st = cp.cuda.Stream(non_blocking=True)
    with st:
        t_copy = _timeit(lambda: b.__setitem__(Ellipsis, a), st.synchronize)
    copy_bw = 2 * 4 * n / t_copy
    models = {"elementwise_chain_64M": lambda: samples.elementwise_chain(n),
              "softmax_layernorm": lambda: samples.softmax_layernorm(8192, 1024),
              "mlp": lambda: samples.mlp(seed=0), "cnn": lambda: samples.cnn(seed=0),
              "transformer_bert4": lambda: samples.transformer(seq=128, d=256, heads=4, layers=4, seed=0),
              "resnet18": lambda: samples.resnet18(seed=0)}
    for name, make in models.items():
        try:
            model = make()
            rm, ins, outs = compile_partition(model)
            mod = plugin.tcc_load_runtime_module(rm, dev)
            feeds = random_inputs(model)
            stream = dev.create_stream()
            bufs = []
            for k in ins:
                x = np.ascontiguousarray(feeds[k])
                buf = dev.alloc(x.nbytes)
                dev.copy_host_to_device(x, buf, stream=stream)
                bufs.append(buf)
            for shape, dt in outs:
                bufs.append(dev.alloc(int(np.prod(shape)) * np.dtype(dt).itemsize))
            fn = mod.get_function("gpu_0")
            fn(bufs, stream)
            stream.sync()
            graph = fn.capture(bufs, stream)
            t_tcc = _timeit(lambda: graph.launch(stream.cs), stream.sync)
            t_torch = _torch_eager(model, feeds)
            extra = ""
            if name.startswith("elementwise_chain"):
                bw = 2 * 4 * n / t_tcc
                extra = f"{bw / 1e12:.2f} TB/s = {100 * bw / copy_bw:.0f}% of copy ({copy_bw / 1e12:.2f} TB/s)"
            ratio = t_tcc / t_torch if t_torch else float("nan")
            rows.append((name, t_tcc * 1e3, (t_torch or float("nan")) * 1e3, ratio, extra))
        except Exception as e:  # noqa: BLE001 - one model's failure must not hide the others
            rows.append((name, float("nan"), float("nan"), float("nan"), f"FAILED: {type(e).__name__}: {e}"[:160]))
    print(f"\n{'model':26} {'tcc ms':>9} {'torch ms':>9} {'ratio':>6}  notes")
    for r in rows:
        print(f"{r[0]:26} {r[1]:9.3f} {r[2]:9.3f} {r[3]:6.2f}  {r[4]}")
    return 0


def _torch_eager(model, feeds):
    """torch eager latency of the same ONNX graph (onnx2torch when installed, else None)."""
    try:
        import torch
        from onnx2torch import convert
    except ImportError:
        return None
    m = convert(model).cuda().eval()
    xs = [torch.from_numpy(v).cuda() for v in feeds.values()]
    with torch.no_grad():
        return _timeit(lambda: m(*xs), torch.cuda.synchronize)


if __name__ == "__main__":
    sys.exit(main())
