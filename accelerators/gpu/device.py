"""The gpu device over cupy: devices by index, cupy memory-pool allocations,
pinned host memory, non-blocking CUDA streams and events, copies in every
direction on streams, cross-stream waits, host functions on streams
(cudaLaunchHostFunc), DLPack import/export. cupy is imported lazily.

A DLPack import asks the producer (torch, cupy) to order its work before a
stream of ours (`__dlpack__(stream=...)`, which cupy.from_dlpack passes from
its current stream), records an event there and hands it on as the buffer's
`ready`: whoever uses the buffer waits on that event, on its own stream.

Host-side copies are staged through pinned memory, so every copy is truly
asynchronous (a pageable cudaMemcpyAsync may block the caller until the stream
reaches it, which would deadlock a caller that holds the stream back):
host->device snapshots the source into pinned memory when called; device->host
lands in pinned memory and a host function copies it into the destination."""
from __future__ import annotations

import threading

import numpy as np

from tcc.runtime.device import (Device, DeviceAttr, DeviceBuffer, DeviceError, DeviceManager,
                                DeviceManagerFactory, Event, Stream)
from tcc.runtime.device.checks import byte_range, host_bytes

KDL_CUDA, KDL_CUDA_MANAGED = 2, 13


def _cupy():
    from . import require_cupy
    return require_cupy()


class GpuEvent(Event):
    def __init__(self, device):
        super().__init__(device)
        cp = _cupy()
        with cp.cuda.Device(device.index):
            self.ev = cp.cuda.Event(block=False, disable_timing=True)

    def query_done(self):
        self.check_alive()
        return bool(self.ev.done)

    def sync(self):
        self.check_alive()
        self.ev.synchronize()


class GpuStream(Stream):
    def __init__(self, device):
        super().__init__(device)
        cp = _cupy()
        with cp.cuda.Device(device.index):
            self.cs = cp.cuda.Stream(non_blocking=True)
        self._errors = []
        self._lock = threading.Lock()

    @property
    def ptr(self):
        return self.cs.ptr

    def sync(self):
        self.check_alive()
        try:
            self.cs.synchronize()
        except Exception as e:  # noqa: BLE001 - a CUDA error in queued work
            raise DeviceError(f"{self.device}: work queued on a stream failed: {e!r}") from e
        with self._lock:
            if self._errors:
                first, self._errors[:] = self._errors[0], []
                raise DeviceError(f"{self.device}: work queued on a stream failed: {first!r}") from first

    def _launch_host_func(self, fn):
        errors, lock = self._errors, self._lock

        def run(_arg):
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported by the next sync(), like a sticky error
                with lock:
                    errors.append(e)
        self.cs.launch_host_func(run, None)

    def _record_event(self, event):
        event.ev.record(self.cs)

    def _wait_event(self, event):
        self.cs.wait_event(event.ev)

    def _destroy(self):
        try:
            self.sync()
        finally:
            self.cs = None


class GpuDevice(Device):
    alignment = 256

    def __init__(self, manager, index):
        super().__init__(manager, index)
        self._props = None
        self._dlpack_stream = None

    def _import_stream(self):
        if self._dlpack_stream is None:
            self._dlpack_stream = self.create_stream()
        return self._dlpack_stream

    # attributes
    def props(self):
        if self._props is None:
            self._props = _cupy().cuda.runtime.getDeviceProperties(self.index)
        return self._props

    def _get_attr(self, kind):
        cp = _cupy()
        p = self.props()
        rt = cp.cuda.runtime
        if kind == DeviceAttr.EXIST:
            return True
        if kind == DeviceAttr.DEVICE_NAME:
            n = p.get("name", b"NVIDIA GPU")
            return n.decode() if isinstance(n, bytes) else str(n)
        simple = {DeviceAttr.MAX_THREADS_PER_BLOCK: "maxThreadsPerBlock", DeviceAttr.WARP_SIZE: "warpSize",
                  DeviceAttr.MAX_SHARED_MEMORY_PER_BLOCK: "sharedMemPerBlock",
                  DeviceAttr.MULTI_PROCESSOR_COUNT: "multiProcessorCount",
                  DeviceAttr.MAX_REGISTERS_PER_BLOCK: "regsPerBlock", DeviceAttr.L2_CACHE_SIZE: "l2CacheSize",
                  DeviceAttr.TOTAL_MEMORY: "totalGlobalMem", DeviceAttr.MAX_CLOCK_RATE: "clockRate"}
        if kind in simple:
            v = p.get(simple[kind])
            return None if v is None else int(v)
        if kind == DeviceAttr.COMPUTE_VERSION:
            return f"{p['major']}.{p['minor']}"
        if kind == DeviceAttr.MAX_THREAD_DIMENSIONS:
            v = p.get("maxThreadsDim")
            return None if v is None else tuple(int(x) for x in v)
        if kind == DeviceAttr.API_VERSION:
            return str(rt.runtimeGetVersion())
        if kind == DeviceAttr.DRIVER_VERSION:
            return str(rt.driverGetVersion())
        if kind == DeviceAttr.AVAILABLE_MEMORY:
            with cp.cuda.Device(self.index):
                return int(rt.memGetInfo()[0])
        return None

    def _on_activate(self):
        _cupy().cuda.Device(self.index).use()

    # memory
    def _alloc(self, nbytes, options):
        cp = _cupy()
        if nbytes == 0:
            return DeviceBuffer(self, 0, None, None)
        with cp.cuda.Device(self.index):
            mem = cp.get_default_memory_pool().malloc(nbytes)
        return DeviceBuffer(self, nbytes, mem, int(mem.ptr))

    def _free(self, buffer, handle):
        del handle  # back to cupy's pool

    def _alloc_pinned(self, nbytes, options):
        cp = _cupy()
        if nbytes == 0:
            return DeviceBuffer(self, 0, (None, np.zeros(0, np.uint8)), None)
        mem = cp.cuda.alloc_pinned_memory(nbytes)
        view = np.frombuffer(mem, np.uint8, nbytes)
        return DeviceBuffer(self, nbytes, (mem, view), int(mem.ptr))

    def _free_pinned(self, buffer, handle):
        del handle

    def host_view(self, buffer):
        if buffer.kind == "pinned":
            return buffer.handle[1]
        return None

    def _create_stream(self):
        return GpuStream(self)

    def _create_event(self):
        return GpuEvent(self)

    # copies
    def _staging(self, nbytes):
        mem = _cupy().cuda.alloc_pinned_memory(nbytes)
        return mem, np.frombuffer(mem, np.uint8, nbytes)

    def copy_host_to_device(self, src, dst, nbytes=None, src_offset=0, dst_offset=0, stream=None):
        # Snapshot straight into pinned memory (one host copy, then a truly async DMA).
        host = host_bytes(src, writable=False, where=self)
        nbytes = byte_range(self, nbytes, host.size, src_offset, self._device_side(dst).nbytes, dst_offset)
        if not nbytes:
            return
        mem, view = self._staging(nbytes)
        np.copyto(view, host[src_offset:src_offset + nbytes])
        self._h2d(mem, dst, dst_offset, nbytes, self._stream(stream))

    def _copy_host_to_device(self, staged, dst, dst_offset, stream):
        mem, view = self._staging(staged.size)
        np.copyto(view, staged)
        self._h2d(mem, dst, dst_offset, staged.size, stream)

    def _h2d(self, mem, dst, dst_offset, nbytes, stream):
        rt = _cupy().cuda.runtime
        rt.memcpyAsync(dst.ptr + dst_offset, mem.ptr, nbytes, rt.memcpyHostToDevice, stream.ptr)
        stream.launch_host_func(lambda: mem)  # keeps the staging memory alive until the copy ran

    def _copy_device_to_host(self, src, src_offset, host, stream):
        rt = _cupy().cuda.runtime
        mem, view = self._staging(host.size)
        rt.memcpyAsync(mem.ptr, src.ptr + src_offset, host.size, rt.memcpyDeviceToHost, stream.ptr)
        stream.launch_host_func(lambda: np.copyto(host, view))

    def _copy_device_to_device(self, src, src_offset, dst, dst_offset, nbytes, stream):
        rt = _cupy().cuda.runtime
        if src.device is dst.device:
            rt.memcpyAsync(dst.ptr + dst_offset, src.ptr + src_offset, nbytes, rt.memcpyDeviceToDevice,
                           stream.ptr)
        else:
            rt.memcpyPeerAsync(dst.ptr + dst_offset, dst.device.index, src.ptr + src_offset, src.device.index,
                               nbytes, stream.ptr)

    # tensors
    def _array_view(self, buffer, shape, dtype, strides, byte_offset):
        cp = _cupy()
        if buffer.kind == "pinned":
            return super()._array_view(buffer, shape, dtype, strides, byte_offset)
        if buffer.kind == "external" and hasattr(buffer.handle, "data") and buffer.ptr == buffer.handle.data.ptr:
            owner = buffer.handle
        else:
            owner = buffer
        um = cp.cuda.UnownedMemory(buffer.ptr or 0, buffer.nbytes, owner, self.index)
        return cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(um, byte_offset), strides)

    def _import_dlpack(self, obj):
        cp = _cupy()
        stream = self._import_stream()
        try:
            with cp.cuda.Device(self.index), stream.cs:  # the consumer stream cupy hands the producer
                arr = cp.from_dlpack(obj)
        except Exception as exc:  # noqa: BLE001
            raise DeviceError(f"{self}: cannot import {type(obj).__name__} via DLPack: {exc}") from exc
        ready = self.create_event()
        stream.record_event(ready)
        lo = hi = 0
        if arr.size:
            for n, s in zip(arr.shape, arr.strides):
                lo += min(0, (n - 1) * s)
                hi += max(0, (n - 1) * s)
            hi += arr.itemsize
        buf = DeviceBuffer(self, hi - lo, arr, int(arr.data.ptr) + lo, kind="external")
        buf.ready = ready
        return buf, arr.shape, np.dtype(arr.dtype), arr.strides, -lo


class GpuDeviceManager(DeviceManager):
    def _new_device(self, index):
        return GpuDevice(self, index)

    def _probe(self):
        """(device count, why there is none): cupy missing or broken, or the
        driver's own error (no driver, too old a driver, no GPU)."""
        try:
            cp = _cupy()
        except DeviceError:
            raise
        except Exception as e:  # noqa: BLE001 - GpuUnavailable: says how to install cupy
            return 0, str(e)
        try:
            n = int(cp.cuda.runtime.getDeviceCount())
        except Exception as e:  # noqa: BLE001 - cupy's CUDARuntimeError names the cause
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            return 0, (f"cupy {cp.__version__} is installed but CUDA reports {msg} "
                       "(no NVIDIA driver, a driver older than cupy's CUDA, or no GPU on this machine)")
        return n, None if n else "the CUDA driver sees no GPU"

    def _device_count(self, primary_device_index):
        return self._probe()[0]

    def _check_index(self, index):
        if not isinstance(index, bool) and isinstance(index, int) and index >= 0:
            n, why = self._probe()
            if n == 0:
                raise DeviceError(f"{self.device_type}:{index}: no usable GPU: {why}")
        super()._check_index(index)


class GpuDeviceManagerFactory(DeviceManagerFactory):
    """Device type "gpu" (alias "cuda"), DLPack kDLCUDA and kDLCUDAManaged."""
    device_type = "gpu"
    aliases = ("cuda",)
    dlpack_codes = (KDL_CUDA, KDL_CUDA_MANAGED)

    def new_manager(self, registry):
        return GpuDeviceManager(registry, self.device_type)

    def version_info(self):
        try:
            cp = _cupy()
            rt = cp.cuda.runtime
            return {"cupy": cp.__version__, "cuda_runtime": str(rt.runtimeGetVersion()),
                    "driver": str(rt.driverGetVersion())}
        except Exception as e:  # noqa: BLE001
            return {"status": f"unavailable ({type(e).__name__}: {e})"}
