"""A fake cupy (and libcublas) for testing the gpu runtime without a GPU.

Device memory is host memory (device pointers are host addresses), kernels
run through the CUDA emulation (`emulate.build`: the generated CUDA C as host
C++), GEMMs in numpy. Each stream is a worker thread running its queue in
order (events and cross-stream waits are real, so a missing wait is a race
here too; the legacy stream 0 runs work at once), unless the stream is
capturing: then work is recorded into the graph that `end_capture` returns,
and `Graph.launch` queues the recording again. What real cupy 14 / CUDA /
cuBLAS refuse, this refuses the same way:
- cupy's cuBLAS wrappers (`cupy_backends.cuda.libs.cublas.setStream`, and
  `sgemm` etc. which call it with the current stream) raise
  NotImplementedError while that stream is capturing (cublas.pyx);
- synchronizing a capturing stream fails (cudaErrorStreamCaptureUnsupported);
- a launch beyond the device's grid/block limits fails
  (cudaErrorInvalidConfiguration), and a float4 access through a pointer that
  is not 16-byte aligned fails (cudaErrorMisalignedAddress);
- `cupy.from_dlpack` hands the producer cupy's current stream
  (`__dlpack__(stream=...)`), as cupy 14's dlpack.pyx does;
- `compiler.compile_using_nvrtc` returns `(binary, mapping)`.
The fake libcublas (cuBLAS's C API) queues a GEMM on the handle's stream
(`cublasSetStream_v2`), so a GEMM on a stream other than the capturing one is
missing from the graph, as it would be on a GPU; this runtime's own rule
(bind the stream outside capture) is enforced too: cublasSetStream_v2 on a
capturing stream returns CUBLAS_STATUS_NOT_SUPPORTED.

`install(monkeypatch)` puts it in sys.modules (for tests); `install()` alone
does it for the rest of the process (the device script's dry run)."""
from __future__ import annotations

import ctypes
import importlib.machinery
import itertools
import queue
import re
import sys
import threading
import types

import numpy as np

MAX_GRID, MAX_BLOCK = (2 ** 31 - 1, 65535, 65535), (1024, 1024, 64)
CUBLAS_STATUS_NOT_SUPPORTED = 15


class CUDARuntimeError(RuntimeError):
    pass


class State:
    """One fake machine: its streams, graphs, and what happened (for tests)."""

    def __init__(self, devices=1, driver=True):
        self.devices, self.driver = devices, driver
        self.streams = {}
        self.ptrs = itertools.count(0x1000, 0x10)
        self.nvrtc_calls = []      # (options, arch) per compile
        self.launches = []         # (kernel, grid, block) per kernel run (eager or replayed)
        self.gemms = 0             # GEMMs run (eager or replayed)
        self.dlpack_streams = []   # the stream each __dlpack__ producer was handed
        self.local = threading.local()
        self.handles = {}          # cublas handle -> bound stream ptr
        self.alive = []            # memory kept alive


STATE = State()


def _stack():
    st = getattr(STATE.local, "stack", None)
    if st is None:
        st = STATE.local.stack = []
    return st


def current_stream_ptr():
    st = _stack()
    return st[-1].ptr if st else 0


def _enqueue(stream_ptr, fn):
    s = STATE.streams.get(stream_ptr)
    if s is not None and s.capture is not None:
        s.capture.append(fn)
    elif s is None or s.ptr == 0:
        fn()
    else:
        s.put(fn)


_EMU = threading.Lock()  # the emulation's grid/block are globals: one kernel at a time


def _capturing(ptr):
    s = STATE.streams.get(ptr)
    return s is not None and s.capture is not None


# -- runtime -------------------------------------------------------------------------------
def _runtime():
    rt = types.ModuleType("cupy.cuda.runtime")
    rt.CUDARuntimeError = CUDARuntimeError
    rt.memcpyHostToDevice, rt.memcpyDeviceToHost, rt.memcpyDeviceToDevice = 1, 2, 3
    rt.streamCaptureModeRelaxed = 2

    def getDeviceCount():
        if not STATE.driver:
            raise CUDARuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient for "
                                   "CUDA runtime version")
        return STATE.devices

    def getDeviceProperties(i):
        return {"name": b"Fake H200", "major": 9, "minor": 0, "maxThreadsPerBlock": 1024,
                "maxThreadsDim": MAX_BLOCK, "maxGridSize": MAX_GRID, "warpSize": 32,
                "sharedMemPerBlock": 49152, "multiProcessorCount": 132, "regsPerBlock": 65536,
                "l2CacheSize": 52428800, "totalGlobalMem": 1 << 34, "clockRate": 1980000}

    def memcpyAsync(dst, src, n, kind, stream):
        _enqueue(stream, lambda: ctypes.memmove(dst, src, n))

    def memcpyPeerAsync(dst, dd, src, sd, n, stream):
        memcpyAsync(dst, src, n, 3, stream)

    rt.getDeviceCount, rt.getDeviceProperties = getDeviceCount, getDeviceProperties
    rt.memcpyAsync, rt.memcpyPeerAsync = memcpyAsync, memcpyPeerAsync
    rt.runtimeGetVersion = lambda: 13020
    rt.driverGetVersion = lambda: 13000
    rt.memGetInfo = lambda: (1 << 33, 1 << 34)
    rt.streamIsCapturing = _capturing
    return rt


class Stream:
    def __init__(self, non_blocking=False, null=False):
        self.ptr = 0 if null else next(STATE.ptrs)
        self.capture = None
        self.waits = []
        self.pending = 0
        self.cv = threading.Condition()
        self.q = None
        STATE.streams[self.ptr] = self

    def put(self, fn):
        with self.cv:
            self.pending += 1
        if self.q is None:
            self.q = queue.Queue()
            threading.Thread(target=self._work, daemon=True).start()
        self.q.put(fn)

    def _work(self):
        while True:
            fn = self.q.get()
            try:
                fn()
            finally:
                with self.cv:
                    self.pending -= 1
                    self.cv.notify_all()

    def __enter__(self):
        _stack().append(self)
        return self

    def __exit__(self, *a):
        _stack().pop()

    def use(self):
        _stack().append(self)
        return self

    def synchronize(self):
        if self.capture is not None:
            raise CUDARuntimeError("cudaErrorStreamCaptureUnsupported: operation not permitted when "
                                   "stream is capturing")
        with self.cv:
            self.cv.wait_for(lambda: self.pending == 0)

    def launch_host_func(self, fn, arg):
        _enqueue(self.ptr, lambda: fn(arg))

    def wait_event(self, ev):
        self.waits.append(ev)
        target = ev.recorded
        _enqueue(self.ptr, lambda: ev.wait_for(target))

    def begin_capture(self, mode=None):
        if self.ptr == 0:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        self.capture = []

    def end_capture(self):
        g, self.capture = Graph(self.capture), None
        return g

    def is_capturing(self):
        return self.capture is not None


class Graph:
    def __init__(self, ops):
        self.ops = list(ops)

    def launch(self, stream=None):
        for fn in self.ops:
            _enqueue(stream.ptr if stream is not None else current_stream_ptr(), fn)


class Event:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.recorded_on = None
        self.recorded = self.reached = 0
        self.cv = threading.Condition()

    def record(self, stream=None):
        self.recorded_on = stream.ptr if stream is not None else current_stream_ptr()
        with self.cv:
            self.recorded += 1
            n = self.recorded

        def reach():
            with self.cv:
                self.reached = max(self.reached, n)
                self.cv.notify_all()
        _enqueue(self.recorded_on, reach)

    def wait_for(self, n):
        with self.cv:
            self.cv.wait_for(lambda: self.reached >= n)

    def synchronize(self):
        self.wait_for(self.recorded)

    @property
    def done(self):
        with self.cv:
            return self.reached >= self.recorded


class Device:
    def __init__(self, index=0):
        self.id = index
        self.compute_capability = "90"

    def __enter__(self):
        return self

    def __exit__(self, *a):
        pass

    def use(self):
        pass


class _Memory:
    """Host memory standing in for device memory (256-byte aligned, like cupy's pool)."""

    def __init__(self, nbytes):
        self.raw = np.zeros(nbytes + 256, np.uint8)
        self.ptr = self.raw.ctypes.data + (-self.raw.ctypes.data) % 256
        self.size = nbytes


class _Pool:
    def malloc(self, nbytes):
        return _Memory(nbytes)


class PinnedMemory(bytearray):
    @property
    def ptr(self):
        return ctypes.addressof((ctypes.c_char * max(len(self), 1)).from_buffer(self)) if len(self) else 0


# -- kernels -------------------------------------------------------------------------------
_SIG = re.compile(r'extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\(([^)]*)\)')
_VEC = re.compile(r"reinterpret_cast<(?:const )?float4\*>\(&(p\d+)\[")
_FAKE_CUBIN = b"\x7fELF-fake-cubin\n"


def _kernels(source):
    """{name: (param C types, cooperative, params read or written as float4)}."""
    out = {}
    matches = list(_SIG.finditer(source))
    for k, m in enumerate(matches):
        body = source[m.end():matches[k + 1].start() if k + 1 < len(matches) else len(source)]
        types_, names = [], []
        for p in [p.strip() for p in m.group(2).split(",") if p.strip()]:
            toks = p.replace("__restrict__", "").split()
            types_.append(" ".join(toks[:-1]))
            names.append(toks[-1])
        coop = any(w in body for w in ("__syncthreads", "__shfl", "__shared__"))
        vec = {names.index(n) for n in _VEC.findall(body) if n in names}
        out[m.group(1)] = (types_, coop, vec)
    return out


class RawModule:
    def __init__(self, code=None, path=None, options=(), backend="nvrtc", **kw):
        if path is not None:
            with open(path, "rb") as f:
                data = f.read()
            if not data.startswith(_FAKE_CUBIN):
                raise CUDARuntimeError(f"CUDA_ERROR_INVALID_IMAGE: {path}")
            code = data[len(_FAKE_CUBIN):].decode()
        self.source = code
        self.info = _kernels(code)
        self._lib = None

    def lib(self):
        if self._lib is None:
            from tcc.accelerators.gpu import emulate
            manifest = {"functions": {"all": {"kernels": list(self.info),
                                              "cooperative": [k for k, v in self.info.items() if v[1]],
                                              "param_types": {k: v[0] for k, v in self.info.items()}}}}
            self._lib = emulate.build(self.source, manifest)
        return self._lib

    def get_function(self, name):
        if name not in self.info:
            raise CUDARuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name}")
        return Kernel(self, name)


class Kernel:
    def __init__(self, module, name):
        self.module, self.name = module, name

    def __call__(self, grid, block, args):
        grid, block = tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block))
        if any(not 1 <= g <= m for g, m in zip(grid, MAX_GRID)) or \
                any(not 1 <= b <= m for b, m in zip(block, MAX_BLOCK)) or int(np.prod(block)) > 1024:
            raise CUDARuntimeError(f"cudaErrorInvalidConfiguration: invalid configuration argument "
                                   f"({self.name}: grid {grid}, block {block})")
        ptrs = [int(a) for a in args]
        for i in self.module.info[self.name][2]:
            if ptrs[i] % 16:
                raise CUDARuntimeError(f"cudaErrorMisalignedAddress: misaligned address ({self.name} "
                                       f"param {i} at 0x{ptrs[i]:x})")
        fn = getattr(self.module.lib(), f"emu_{self.name}")

        def run():
            STATE.launches.append((self.name, grid, block))
            arr = (ctypes.c_void_p * max(1, len(ptrs)))(*ptrs)
            with _EMU:
                fn(arr, *[ctypes.c_uint(x) for x in grid + block])
        _enqueue(current_stream_ptr(), run)


def _compiler():
    c = types.ModuleType("cupy.cuda.compiler")

    def compile_using_nvrtc(source, options=(), arch=None, filename="kern.cu", name_expressions=None,
                            log_stream=None, cache_in_memory=False, jitify=None, method=None):
        STATE.nvrtc_calls.append((tuple(options), arch))
        _kernels(source)
        return _FAKE_CUBIN + source.encode(), {}
    c.compile_using_nvrtc = compile_using_nvrtc
    return c


# -- cuBLAS ----------------------------------------------------------------------------------
def _f32(addr, count):
    return np.ctypeslib.as_array((ctypes.c_float * max(count, 1)).from_address(addr))


def col_major(flat, rows, cols, ld):
    """A rows x cols column-major view of flat float32 memory: (i, j) at j * ld + i."""
    assert ld >= max(1, rows), (rows, ld)
    assert flat.size >= (cols - 1) * ld + rows, "the matrix runs past its buffer"
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (4, ld * 4))


def sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """C (m x n) = alpha op(A) op(B) + beta C on flat float32 arrays, all
    column-major, as cuBLAS defines sgemm."""
    A = col_major(a, k, m, lda).T if ta else col_major(a, m, k, lda)
    B = col_major(b, n, k, ldb).T if tb else col_major(b, k, n, ldb)
    C = col_major(c, m, n, ldc)
    r = alpha * (A.astype(np.float64) @ B.astype(np.float64))
    if beta != 0.0:
        r += beta * C
    C[...] = r.astype(np.float32)


def _sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """sgemm on device addresses (the fake's memory is host memory)."""
    ra, ca = (k, m) if ta else (m, k)
    rb, cb = (n, k) if tb else (k, n)
    sgemm(ta, tb, m, n, k, alpha, _f32(a, (ca - 1) * lda + ra), lda, _f32(b, (cb - 1) * ldb + rb), ldb,
          beta, _f32(c, (n - 1) * ldc + m), ldc)
    STATE.gemms += 1


class FakeLibcublas:
    """cuBLAS's C API (the symbols the runtime calls through ctypes)."""

    def cublasSetStream_v2(self, handle, stream):
        if _capturing(stream):
            return CUBLAS_STATUS_NOT_SUPPORTED  # this runtime binds the stream before capture
        STATE.handles[handle] = stream
        return 0

    def cublasGetStream_v2(self, handle, out):
        return 0

    def cublasGetVersion_v2(self, handle, out):
        out._obj.value = 130200  # a ctypes.byref(c_int)
        return 0

    def cublasSetWorkspace_v2(self, handle, ptr, size):
        return 0

    def cublasSgemm_v2(self, handle, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        al, be = ctypes.c_float.from_address(alpha).value, ctypes.c_float.from_address(beta).value
        _enqueue(STATE.handles.get(handle, 0), lambda: _sgemm(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc))
        return 0

    def cublasSgemmStridedBatched(self, handle, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                                  sc, batch):
        al, be = ctypes.c_float.from_address(alpha).value, ctypes.c_float.from_address(beta).value

        def run():
            for i in range(batch):
                _sgemm(ta, tb, m, n, k, al, a + 4 * i * sa, lda, b + 4 * i * sb, ldb, be, c + 4 * i * sc, ldc)
        _enqueue(STATE.handles.get(handle, 0), run)
        return 0


def _cublas_wrappers():
    """cupy_backends.cuda.libs.cublas: cupy's wrappers, with their capture check."""
    m = types.ModuleType("cupy_backends.cuda.libs.cublas")
    m.CUBLAS_OP_N, m.CUBLAS_OP_T = 0, 1
    lib = FakeLibcublas()

    def setStream(handle, stream):
        if _capturing(stream):
            raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")
        STATE.handles[handle] = stream

    def sgemm(handle, ta, tb, m_, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        setStream(handle, current_stream_ptr())
        lib.cublasSgemm_v2(handle, ta, tb, m_, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

    def sgemmStridedBatched(handle, ta, tb, m_, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch):
        setStream(handle, current_stream_ptr())
        lib.cublasSgemmStridedBatched(handle, ta, tb, m_, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                                      sc, batch)
    m.setStream, m.sgemm, m.sgemmStridedBatched = setStream, sgemm, sgemmStridedBatched
    return m


# -- arrays (enough for DLPack imports and views) ----------------------------------------------
class UnownedMemory:
    def __init__(self, ptr, size, owner, device_id=0):
        self.ptr, self.size, self.owner = ptr, size, owner


class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset


class ndarray:
    def __init__(self, shape, dtype, memptr=None, strides=None):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.size = int(np.prod(self.shape, dtype=np.int64))
        if memptr is None:
            mem = _Memory(self.size * self.itemsize)
            memptr = MemoryPointer(mem, 0)
        self.data = memptr
        if strides is None:
            strides, acc = [], self.itemsize
            for d in reversed(self.shape):
                strides.insert(0, acc)
                acc *= d
        self.strides = tuple(strides)

    def host(self):
        """A numpy view of the same memory (the test's `cupy.asnumpy`)."""
        if not self.size:
            return np.empty(self.shape, self.dtype)
        span = sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + self.itemsize
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * span).from_address(self.data.ptr))
        return np.lib.stride_tricks.as_strided(raw.view(np.uint8), self.shape, self.strides).view(self.dtype) \
            if self.itemsize == 1 else np.ndarray(self.shape, self.dtype, raw, 0, self.strides)


class Producer:
    """A torch/cupy-like CUDA tensor speaking DLPack: records the stream it was handed."""

    def __init__(self, array, device=0):
        self.array, self.device = array, device

    def __dlpack_device__(self):
        return 2, self.device

    def __dlpack__(self, stream=None, **kw):
        STATE.dlpack_streams.append(stream)
        return self.array


def from_dlpack(obj, *, device=None, copy=None):
    stream = current_stream_ptr()
    if stream == 0:
        stream = 1  # cupy: the legacy default stream's DLPack number
    out = obj.__dlpack__(stream=stream)
    return out


# -- assembling the modules ----------------------------------------------------------------------
def _build():
    cupy = types.ModuleType("cupy")
    cupy.__version__ = "14.2.0"
    cupy.__spec__ = importlib.machinery.ModuleSpec("cupy", None)
    cuda = types.ModuleType("cupy.cuda")
    cuda.runtime = _runtime()
    cuda.compiler = _compiler()
    cuda.Stream, cuda.Event, cuda.Device, cuda.Graph = Stream, Event, Device, Graph
    cuda.UnownedMemory, cuda.MemoryPointer = UnownedMemory, MemoryPointer
    cuda.alloc_pinned_memory = lambda n: PinnedMemory(n)
    cuda.get_current_stream = lambda: _stack()[-1] if _stack() else STATE.streams[0]
    dev = types.ModuleType("cupy.cuda.device")
    dev.get_cublas_handle = lambda: 0xB1A5
    cuda.device = dev
    cupy.cuda = cuda
    cupy.RawModule = RawModule
    cupy.ndarray = ndarray
    cupy.empty = lambda shape, dtype=np.float32: ndarray(shape if isinstance(shape, tuple) else (shape,), dtype)
    cupy.float32 = np.float32
    cupy.from_dlpack = from_dlpack
    pool = _Pool()
    cupy.get_default_memory_pool = lambda: pool
    cupy.asnumpy = lambda a: np.array(a.host())
    backends = types.ModuleType("cupy_backends")
    bcuda = types.ModuleType("cupy_backends.cuda")
    libs = types.ModuleType("cupy_backends.cuda.libs")
    libs.cublas = _cublas_wrappers()
    backends.cuda, bcuda.libs = bcuda, libs
    return {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.runtime": cuda.runtime,
            "cupy.cuda.compiler": cuda.compiler, "cupy.cuda.device": dev, "cupy_backends": backends,
            "cupy_backends.cuda": bcuda, "cupy_backends.cuda.libs": libs,
            "cupy_backends.cuda.libs.cublas": libs.cublas}


def install(monkeypatch=None, devices=1, driver=True):
    """Fresh fake state; the modules in sys.modules and the runtime's libcublas
    pointed at the fake. Returns the State."""
    global STATE
    STATE = State(devices, driver)
    Stream(null=True)
    from tcc.accelerators.gpu import runtime
    mods = _build()
    lib = FakeLibcublas()
    set_ = monkeypatch.setitem if monkeypatch is not None else (lambda d, k, v: d.__setitem__(k, v))
    for k, v in mods.items():
        set_(sys.modules, k, v)
    if monkeypatch is not None:
        monkeypatch.setattr(runtime, "_libcublas", lambda: lib)
    else:
        runtime._libcublas = lambda: lib
    return STATE
