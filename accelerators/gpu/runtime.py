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
graphs off.

GEMMs call cuBLAS's C API through ctypes, on the handle cupy created and on
the libcublas cupy loaded: cupy's own wrappers (`cublas.sgemm`, ...) call
`setStream`, which raises NotImplementedError whenever the stream is
capturing (cupy_backends/cuda/libs/cublas.pyx, cupy#6290), so no plan with a
GEMM could be captured through them. The handle's stream (and a workspace
owned by the module, since `cublasSetStream` resets the workspace to cuBLAS's
lazily allocated default) is set before capture begins, never during it."""
from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from collections import OrderedDict

import numpy as np

from . import package, plan as planlib

CACHE = None  # compiled kernels: $TCC_CACHE_DIR/gpu (runtime.cache's root) unless set
GRAPHS = os.environ.get("TCC_GPU_GRAPHS", "1") != "0"
GRAPH_CACHE = 8  # address sets remembered per function (LRU)
EAGER_ONCE, NO_GRAPH = "eager-once", "no-graph"
NVRTC_OPTIONS = ("-std=c++17", "--use_fast_math") if os.environ.get("TCC_GPU_FAST_MATH") else ("-std=c++17",)


def _cupy():
    from . import require_cupy
    return require_cupy()


def _cache_dir():
    """CACHE, or the compile cache's gpu folder; where that folder cannot be
    made (TCC_CACHE_DIR a file, a read-only home), a private one for the
    process, with runtime.cache's one-line warning."""
    from tcc.runtime import cache
    d = CACHE or os.path.join(cache.cache_root(), "gpu")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        return cache.private_dir(e)
    return d


def compile_module(source, device_index, cubin=None):
    """A cupy RawModule for `source` on the device, through the disk cache."""
    cp = _cupy()
    with cp.cuda.Device(device_index) as dev:
        arch = "sm_" + dev.compute_capability
    cache = _cache_dir()
    if cubin is not None and cubin[0] == arch:
        path = os.path.join(cache, hashlib.sha256(cubin[1]).hexdigest() + ".aot.cubin")
        if not os.path.exists(path):
            _atomic_write(path, cubin[1])
        return cp.RawModule(path=path)
    key = hashlib.sha256("\0".join([source, arch, cp.__version__, *NVRTC_OPTIONS]).encode()).hexdigest()
    for ext in (".cubin", ".ptx"):
        path = os.path.join(cache, key + ext)
        if os.path.exists(path):
            return cp.RawModule(path=path)
    binary = nvrtc_compile(cp, source, arch)
    path = os.path.join(cache, key + (".cubin" if binary[:4] == b"\x7fELF" else ".ptx"))
    _atomic_write(path, binary)
    return cp.RawModule(path=path)


def nvrtc_compile(cp, source, arch):
    """CUBIN (or PTX, for an arch newer than this NVRTC knows) bytes of `source`.
    cupy 13/14's `compile_using_nvrtc` returns `(binary, name mapping)`, older
    ones the binary alone. cupy's RawModule(code=...) is no fallback: it adds
    `-ftz=true` (flushing denormals, unlike the host and onnxruntime)."""
    try:
        from cupy.cuda import compiler
        entry = compiler.compile_using_nvrtc
    except (ImportError, AttributeError):
        from . import GpuUnavailable
        raise GpuUnavailable(f"accelerator 'gpu': cupy {cp.__version__} has no "
                             "cupy.cuda.compiler.compile_using_nvrtc (cupy 13 or 14 has it)") from None
    out = entry(source, NVRTC_OPTIONS, arch=arch[3:])
    binary = out[0] if isinstance(out, tuple) else out
    return binary.encode() if isinstance(binary, str) else bytes(binary)


def _atomic_write(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_CUBLAS_LIB = []


def _libcublas():
    """libcublas as ctypes, the copy cupy loaded: found in /proc/self/maps,
    else by soname."""
    if _CUBLAS_LIB:
        return _CUBLAS_LIB[0]
    _cupy().cuda.device.get_cublas_handle()  # creating cupy's handle loads libcublas, however cupy binds it
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libcublas.so") and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    for name in paths + ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]:
        try:
            lib = ctypes.CDLL(name)
            lib.cublasSgemm_v2  # noqa: B018 - the symbol we need, or the next candidate
            break
        except (OSError, AttributeError):
            continue
    else:
        from . import GpuUnavailable
        raise GpuUnavailable("accelerator 'gpu': cannot find the libcublas that cupy loaded")
    vp, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    lib.cublasSetStream_v2.argtypes = [vp, vp]
    lib.cublasGetStream_v2.argtypes = [vp, ctypes.POINTER(vp)]
    lib.cublasGetVersion_v2.argtypes = [vp, ctypes.POINTER(i32)]
    lib.cublasSgemm_v2.argtypes = [vp, i32, i32, i32, i32, i32, vp, vp, i32, vp, i32, vp, vp, i32]
    lib.cublasSgemmStridedBatched.argtypes = [vp, i32, i32, i32, i32, i32, vp, vp, i32, i64, vp, i32, i64,
                                              vp, vp, i32, i64, i32]
    if hasattr(lib, "cublasSetWorkspace_v2"):
        lib.cublasSetWorkspace_v2.argtypes = [vp, vp, ctypes.c_size_t]
    _CUBLAS_LIB.append(lib)
    return lib


CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
# cuBLAS asks for a 32 MiB workspace on Hopper (4 MiB before it) when the user sets one.
CUBLAS_WORKSPACE = 32 << 20


class _Cublas:
    """cuBLAS's C API on cupy's handle for one device (see the module docstring)."""

    def __init__(self, device):
        self.device = device
        self.lib = _libcublas()
        self.workspace = device.alloc(CUBLAS_WORKSPACE)
        self.alpha, self.beta = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def _check(self, status, what):
        if status != 0:
            from tcc.runtime.device import DeviceError
            raise DeviceError(f"{self.device}: {what} failed (cublasStatus {status})")

    def bind(self, stream):
        """The handle's stream and workspace: call outside stream capture."""
        cp = _cupy()
        handle = cp.cuda.device.get_cublas_handle()
        self._check(self.lib.cublasSetStream_v2(handle, stream.ptr), "cublasSetStream")
        if hasattr(self.lib, "cublasSetWorkspace_v2"):
            self._check(self.lib.cublasSetWorkspace_v2(handle, self.workspace.ptr, CUBLAS_WORKSPACE),
                        "cublasSetWorkspace")
        return handle

    def gemm(self, handle, g, ptr):
        f = 4
        A, B, C = g["A"], g["B"], g["C"]
        self.alpha.value, self.beta.value = g["alpha"], g["beta"]  # host pointer mode: read at the call
        ta = CUBLAS_OP_T if g["transa"] else CUBLAS_OP_N
        tb = CUBLAS_OP_T if g["transb"] else CUBLAS_OP_N
        a, b, c = ptr[A[0]] + A[1] * f, ptr[B[0]] + B[1] * f, ptr[C[0]] + C[1] * f
        al, be = ctypes.addressof(self.alpha), ctypes.addressof(self.beta)
        if g["batch"] == 1:
            st = self.lib.cublasSgemm_v2(handle, ta, tb, g["m"], g["n"], g["k"], al, a, A[2], b, B[2], be, c, C[2])
            self._check(st, "cublasSgemm")
        else:
            st = self.lib.cublasSgemmStridedBatched(handle, ta, tb, g["m"], g["n"], g["k"], al, a, A[2], A[3],
                                                     b, B[2], B[3], be, c, C[2], C[3], g["batch"])
            self._check(st, "cublasSgemmStridedBatched")


class _CupyBackend:
    """Plan steps on one stream: buffers are raw device pointers (ints).
    `handle` is cupy's cuBLAS handle, already bound to the stream."""

    def __init__(self, module, stream, handle):
        self.m = module
        self.stream = stream
        self.handle = handle

    def launch(self, kernel, grid, block, ptrs):
        self.m.kernel(kernel)(grid, block, tuple(np.uint64(p) for p in ptrs))  # on the current stream

    def gemm(self, s, a, b, c):
        self.m.blas.gemm(self.handle, planlib.row_major_gemm_as_column_major(s), {"a": a, "b": b, "c": c})

    def copy(self, dst, src, nbytes):
        rt = _cupy().cuda.runtime
        rt.memcpyAsync(dst, src, nbytes, rt.memcpyDeviceToDevice, self.stream.ptr)


class GpuModule:
    """A loaded gpu runtime module on one device."""

    def __init__(self, payload, device):
        self.device = device
        self.manifest, self.source, weights, cubin = package.unpack(payload)
        props = device.props()
        try:
            planlib.check_launch_limits(self.manifest, props.get("maxGridSize"), props.get("maxThreadsDim"),
                                        props.get("maxThreadsPerBlock"), where=str(device))
        except ValueError as e:
            from tcc.runtime.device import DeviceError
            raise DeviceError(str(e)) from None
        self.raw = compile_module(self.source, device.index, cubin)
        gemms = any(s["op"] == "gemm" for f in self.manifest["functions"].values() for s in f["steps"])
        self.blas = _Cublas(device) if gemms else None
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
        if self.blas is not None:
            self._owned.append(self.blas.workspace)
            self.blas = None
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
        self.capture_error = None  # why the last capture failed (that key then runs eagerly)

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
            except Exception as e:  # noqa: BLE001 - some step refuses capture: stay eager
                self.capture_error = f"{type(e).__name__}: {e}"
                self._graphs[key] = NO_GRAPH
                return self.run(buffers, stream)
            self._graphs[key] = state
        self.replay(state, stream)

    def replay(self, graph, stream):
        with _cupy().cuda.Device(self.module.device.index):
            graph.launch(stream.cs)

    def run(self, buffers, stream):
        self._run(buffers, stream, capturing=False)

    def _run(self, buffers, stream, capturing):
        ptrs = [b.ptr if hasattr(b, "ptr") else int(b) for b in buffers]
        bufs = planlib.resolve(self.plan, ptrs, self.module.weights, self.module.scratch[self.name])
        cp = _cupy()
        with cp.cuda.Device(self.module.device.index), stream.cs:
            blas = self.module.blas
            handle = None
            if blas is not None:
                handle = cp.cuda.device.get_cublas_handle() if capturing else blas.bind(stream)
            planlib.run_steps(self.plan, bufs, _CupyBackend(self.module, stream, handle))

    def capture(self, buffers, stream):
        """The plan on these buffers as a CUDA graph: `graph.launch(stream.cs)`
        replays it. Run the function once first (cuBLAS and the kernel cache
        set up lazily). cuBLAS's stream is bound before the capture begins."""
        cp = _cupy()
        mode = getattr(cp.cuda.runtime, "streamCaptureModeRelaxed", None)
        with cp.cuda.Device(self.module.device.index):
            if self.module.blas is not None:
                self.module.blas.bind(stream)
            if mode is None:
                stream.cs.begin_capture()
            else:
                stream.cs.begin_capture(mode)
        try:
            self._run(buffers, stream, capturing=True)
        except BaseException:
            try:
                stream.cs.end_capture()
            except Exception:  # noqa: BLE001 - the capture is already broken; report the first error
                pass
            raise
        return stream.cs.end_capture()
