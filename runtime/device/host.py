"""The host CPU as a device: numpy-backed 64-byte aligned memory, worker-thread streams
(see worker.py: work is asynchronous to the caller and in order per stream).

`TCC_HOST_DEVICE_COUNT` (default 1) exposes several host devices sharing the CPU, as
JAX's forced host platform count does, to exercise multi-device code without hardware.
"""
import os
import platform
import sys

import numpy as np

from .buffer import DeviceBuffer
from .device import Device
from .errors import DeviceError
from .host_info import query
from .host_memory import allocate
from .manager import DeviceManager, DeviceManagerFactory
from .worker import WorkerEvent, WorkerStream

KDL_CPU, KDL_CUDA_HOST = 1, 3


class HostDevice(Device):
    """A host CPU device."""

    def _get_attr(self, kind):
        return query(kind)

    def alloc(self, nbytes, options=None):
        # As OneFlow's CPU device: memory pinned for another device comes from that device.
        if options is not None and options.has_pinned_device:
            return self.registry.get_device(options.pinned_device).alloc_pinned(nbytes, options)
        return super().alloc(nbytes, options)

    def free(self, buffer):
        if isinstance(buffer, DeviceBuffer) and buffer.kind == "pinned":
            return buffer.device.free_pinned(buffer)
        return super().free(buffer)

    def _alloc(self, nbytes, options):
        array, honored = allocate(nbytes, self.alignment, options.numa_node)
        buffer = DeviceBuffer(self, nbytes, array, array.ctypes.data)
        buffer.numa_honored = honored
        return buffer

    # Host memory is already host memory; a host consumer needs no page locking.
    _alloc_pinned = _alloc

    def _free(self, buffer, handle):
        # Dropping the reference releases it; queued copies hold their own slices, so
        # a free never pulls memory from under work still in a stream.
        del handle

    def host_view(self, buffer):
        return buffer.handle

    def _create_stream(self):
        return WorkerStream(self)

    def _create_event(self):
        return WorkerEvent(self)

    def _copy_host_to_device(self, staged, dst, dst_offset, stream):
        target = dst.handle[dst_offset:dst_offset + staged.size]
        stream.launch_host_func(lambda: np.copyto(target, staged))

    def _copy_device_to_host(self, src, src_offset, host, stream):
        source = src.handle[src_offset:src_offset + host.size]
        stream.launch_host_func(lambda: np.copyto(host, source))

    def _copy_device_to_device(self, src, src_offset, dst, dst_offset, nbytes, stream):
        source = src.handle[src_offset:src_offset + nbytes]
        target = dst.handle[dst_offset:dst_offset + nbytes]
        stream.launch_host_func(lambda: np.copyto(target, source))

    def _import_dlpack(self, obj):
        try:
            array = np.from_dlpack(obj)
        except (BufferError, TypeError, RuntimeError) as exc:
            raise DeviceError(f"{self}: cannot import {type(obj).__name__} via DLPack: {exc}") from exc
        return borrow_array(self, array)


class _Borrowed:
    """Exposes a byte range of someone else's memory to numpy, keeping the owner alive."""

    def __init__(self, ptr, nbytes, owner):
        self.__array_interface__ = {"data": (ptr, False), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}
        self.owner = owner


def borrow_array(device, array):
    """(buffer, shape, dtype, byte strides, byte offset) describing `array` without a copy."""
    lo = hi = 0
    if array.size:
        for n, s in zip(array.shape, array.strides):
            lo += min(0, (n - 1) * s)
            hi += max(0, (n - 1) * s)
        hi += array.itemsize
    ptr = array.ctypes.data + lo
    flat = np.asarray(_Borrowed(ptr, hi - lo, array))
    buffer = DeviceBuffer(device, hi - lo, flat, ptr, kind="external")
    return buffer, array.shape, array.dtype, array.strides, -lo


class HostDeviceManager(DeviceManager):
    def __init__(self, registry, device_type, count):
        super().__init__(registry, device_type)
        self._count = count

    def _new_device(self, index):
        return HostDevice(self, index)

    def _device_count(self, primary_device_index):
        return self._count


class HostDeviceManagerFactory(DeviceManagerFactory):
    """Registers the host as device type "cpu" (alias "host"), DLPack kDLCPU and kDLCUDAHost."""

    device_type = "cpu"
    aliases = ("host",)
    dlpack_codes = (KDL_CPU, KDL_CUDA_HOST)

    def __init__(self, device_count=None):
        if device_count is None:
            device_count = int(os.environ.get("TCC_HOST_DEVICE_COUNT", "1"))
        if device_count < 1:
            raise DeviceError(f"cpu: device count must be at least 1, got {device_count}")
        self.device_count = device_count

    def new_manager(self, registry):
        return HostDeviceManager(registry, self.device_type, self.device_count)

    def version_info(self):
        return {"platform": platform.platform(), "python": sys.version.split()[0],
                "numpy": np.__version__}
