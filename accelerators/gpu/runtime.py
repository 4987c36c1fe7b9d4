"""Loading and running a gpu runtime module with cupy.

At load: the kernels are compiled with NVRTC (through cupy) for the device's
arch and cached on disk in ~/.cache/tcc/gpu/<sha256(source, arch, cupy)>.cubin
(an ahead-of-time cubin in the payload is used when its arch matches); the
weights are uploaded once; scratch buffers are allocated once per module, so
every launch of a function uses the same addresses and the executor can
capture a function's whole plan as a CUDA graph (`GpuFunction.capture`).

`get_function(name)(buffers, stream)` queues the function's plan on `stream`
(kernel launches, cuBLAS GEMMs, device copies) without synchronizing. The
first call on a set of buffer addresses runs eagerly (it also warms cuBLAS
and the kernel cache); the second captures the plan as a CUDA graph; later
ones replay it: one launch instead of one per kernel. The executor keeps its
buffers for the session's life, so a static-shape model replays from its
third run on. Inputs borrowed from the caller at new addresses each call
run eagerly instead of capturing every time. `TCC_GPU_GRAPHS=0` turns
graphs off."""
from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict

import numpy as np

from . import package, plan as planlib

CACHE = os.path.join(os.path.expanduser(os.environ.get("TCC_CACHE_DIR", "~/.cache/tcc")), "gpu")
GRAPHS = os.environ.get("TCC_GPU_GRAPHS", "1") != "0"
GRAPH_CACHE = 8  # address sets remembered per function (LRU)
EAGER_ONCE, NO_GRAPH = "eager-once", "no-graph"
NVRTC_OPTIONS = ("-std=c++17", "--use_fast_math") if os.environ.get("TCC_GPU_FAST_MATH") else ("-std=c++17",)


def _cupy():
    from . import require_cupy
    return require_cupy()


def compile_module(source, device_index, cubin=None):
    """A cupy RawModule for `source` on the device, through the disk cache."""
    cp = _cupy()
    with cp.cuda.Device(device_index) as dev:
        arch = "sm_" + dev.compute_capability
    if cubin is not None and cubin[0] == arch:
        os.makedirs(CACHE, exist_ok=True)
        path = os.path.join(CACHE, hashlib.sha256(cubin[1]).hexdigest() + ".aot.cubin")
        if not os.path.exists(path):
            _atomic_write(path, cubin[1])
        return cp.RawModule(path=path)
    key = hashlib.sha256("\0".join([source, arch, cp.__version__, *NVRTC_OPTIONS]).encode()).hexdigest()
    for ext in (".cubin", ".ptx"):
        path = os.path.join(CACHE, key + ext)
        if os.path.exists(path):
            return cp.RawModule(path=path)
    try:
        from cupy.cuda import compiler
        binary = compiler.compile_using_nvrtc(source, NVRTC_OPTIONS, arch=arch[3:])
        ext = ".ptx" if isinstance(binary, str) or binary[:1] in (b".", b"/") else ".cubin"
        data = binary.encode() if isinstance(binary, str) else binary
        os.makedirs(CACHE, exist_ok=True)
        path = os.path.join(CACHE, key + ext)
        _atomic_write(path, data)
        return cp.RawModule(path=path)
    except (ImportError, AttributeError, TypeError):
        # cupy's internal NVRTC entry point moved: let cupy compile (and cache) it itself.
        return cp.RawModule(code=source, options=NVRTC_OPTIONS, backend="nvrtc")


def _atomic_write(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class _CupyBackend:
    """Plan steps on one stream: buffers are raw device pointers (ints)."""

    def __init__(self, module, stream):
        self.m = module
        self.stream = stream

    def launch(self, kernel, grid, block, ptrs):
        self.m.kernel(kernel)(grid, block, tuple(np.uint64(p) for p in ptrs))  # on the current stream

    def gemm(self, s, a, b, c):
        cp = _cupy()
        try:
            from cupy_backends.cuda.libs import cublas
        except ImportError:
            from cupy.cuda import cublas
        g = planlib.row_major_gemm_as_column_major(s)
        ptr = {"a": a, "b": b, "c": c}
        f = 4
        A, B, C = g["A"], g["B"], g["C"]
        handle = cp.cuda.device.get_cublas_handle()
        cublas.setStream(handle, self.stream.ptr)
        alpha = np.array(g["alpha"], np.float32)
        beta = np.array(g["beta"], np.float32)
        ta = cublas.CUBLAS_OP_T if g["transa"] else cublas.CUBLAS_OP_N
        tb = cublas.CUBLAS_OP_T if g["transb"] else cublas.CUBLAS_OP_N
        if g["batch"] == 1:
            cublas.sgemm(handle, ta, tb, g["m"], g["n"], g["k"], alpha.ctypes.data,
                         ptr[A[0]] + A[1] * f, A[2], ptr[B[0]] + B[1] * f, B[2], beta.ctypes.data,
                         ptr[C[0]] + C[1] * f, C[2])
        else:
            cublas.sgemmStridedBatched(handle, ta, tb, g["m"], g["n"], g["k"], alpha.ctypes.data,
                                       ptr[A[0]] + A[1] * f, A[2], A[3], ptr[B[0]] + B[1] * f, B[2], B[3],
                                       beta.ctypes.data, ptr[C[0]] + C[1] * f, C[2], C[3], g["batch"])

    def copy(self, dst, src, nbytes):
        rt = _cupy().cuda.runtime
        rt.memcpyAsync(dst, src, nbytes, rt.memcpyDeviceToDevice, self.stream.ptr)


class GpuModule:
    """A loaded gpu runtime module on one device."""

    def __init__(self, payload, device):
        self.device = device
        self.manifest, self.source, weights, cubin = package.unpack(payload)
        self.raw = compile_module(self.source, device.index, cubin)
        self._kernels = {}
        self._lock = threading.Lock()
        stream = device.create_stream()
        self._owned = []
        self.weights = {}
        for name, w in weights.items():  # uploaded once per module (per session)
            buf = device.alloc(max(w.nbytes, 1))
            device.copy_host_to_device(np.ascontiguousarray(w).reshape(-1).view(np.uint8), buf, w.nbytes,
                                       stream=stream)
            self._owned.append(buf)
            self.weights[name] = buf.ptr
        self.scratch = {}
        for fname, p in self.manifest["functions"].items():
            s = {}
            for i, b in enumerate(p["buffers"]):
                if b["kind"] == "scratch":
                    buf = device.alloc(max(b["nbytes"], 1))
                    self._owned.append(buf)
                    s[i] = buf.ptr
            self.scratch[fname] = s
        stream.sync()
        device.destroy_stream(stream)

    def kernel(self, name):
        k = self._kernels.get(name)
        if k is None:
            with self._lock:
                k = self._kernels[name] = self.raw.get_function(name)
        return k

    @property
    def function_names(self):
        return tuple(self.manifest["functions"])

    def get_function(self, name):
        if name not in self.manifest["functions"]:
            raise KeyError(f"gpu runtime module has no function {name!r} "
                           f"(has: {', '.join(self.manifest['functions'])})")
        return GpuFunction(self, name)

    def close(self):
        for b in self._owned:
            if not b.freed:
                self.device.free(b)
        self._owned = []


class GpuFunction:
    """One partition: `fn(buffers, stream)` queues its whole plan on `stream`."""

    def __init__(self, module, name):
        self.module = module
        self.name = name
        self.plan = module.manifest["functions"][name]
        # (stream, buffer addresses) -> EAGER_ONCE (seen once), a cupy Graph,
        # or NO_GRAPH (capturing failed: that key always runs eagerly)
        self._graphs = OrderedDict()

    def __call__(self, buffers, stream):
        if not GRAPHS:
            return self.run(buffers, stream)
        key = (id(stream), tuple(b.ptr if hasattr(b, "ptr") else int(b) for b in buffers))
        state = self._graphs.get(key)
        self._graphs[key] = EAGER_ONCE if state is None else state
        self._graphs.move_to_end(key)
        while len(self._graphs) > GRAPH_CACHE:
            self._graphs.popitem(last=False)
        if state is None or state is NO_GRAPH:
            return self.run(buffers, stream)
        if state is EAGER_ONCE:
            try:
                state = self.capture(buffers, stream)
            except Exception:  # noqa: BLE001 - some step refuses capture: stay eager
                self._graphs[key] = NO_GRAPH
                return self.run(buffers, stream)
            self._graphs[key] = state
        self.replay(state, stream)

    def replay(self, graph, stream):
        with _cupy().cuda.Device(self.module.device.index):
            graph.launch(stream.cs)

    def run(self, buffers, stream):
        ptrs = [b.ptr if hasattr(b, "ptr") else int(b) for b in buffers]
        bufs = planlib.resolve(self.plan, ptrs, self.module.weights, self.module.scratch[self.name])
        cp = _cupy()
        with cp.cuda.Device(self.module.device.index), stream.cs:
            planlib.run_steps(self.plan, bufs, _CupyBackend(self.module, stream))

    def capture(self, buffers, stream):
        """The plan on these buffers as a CUDA graph: `graph.launch(stream.cs)`
        replays it. Run the function once first (cuBLAS sets up lazily)."""
        cp = _cupy()
        mode = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", None)
        with cp.cuda.Device(self.module.device.index):
            if mode is None:
                stream.cs.begin_capture()
            else:
                stream.cs.begin_capture(mode)
        try:
            self.run(buffers, stream)
        finally:
            graph = stream.cs.end_capture()
        return graph
