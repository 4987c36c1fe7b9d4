"""The sim device: memory is numpy arrays in sim's own space (a copy in or
out is a real copy), streams are worker threads (tcc.runtime's)."""
import numpy as np

from tcc.runtime.device import (Device, DeviceAttr, DeviceBuffer, DeviceManager, DeviceManagerFactory,
                                WorkerEvent, WorkerStream)


class SimDevice(Device):
    def _get_attr(self, kind):
        return {DeviceAttr.EXIST: True, DeviceAttr.DEVICE_NAME: "sim (numpy)",
                DeviceAttr.TOTAL_MEMORY: 4 << 30}.get(kind)

    def _alloc(self, nbytes, options):
        return DeviceBuffer(self, nbytes, np.zeros(nbytes, np.uint8))

    def _free(self, buffer, handle):
        pass

    def _create_stream(self):
        return WorkerStream(self)

    def _create_event(self):
        return WorkerEvent(self)

    def _copy_host_to_device(self, staged, dst, off, stream):
        view = dst.handle[off:off + staged.size]
        stream.launch_host_func(lambda: np.copyto(view, staged))

    def _copy_device_to_host(self, src, off, host, stream):
        view = src.handle[off:off + host.size]
        stream.launch_host_func(lambda: np.copyto(host, view))

    def _copy_device_to_device(self, src, so, dst, do, n, stream):
        a, b = src.handle[so:so + n], dst.handle[do:do + n]
        stream.launch_host_func(lambda: np.copyto(b, a))


class SimManager(DeviceManager):
    def _new_device(self, index):
        return SimDevice(self, index)

    def _device_count(self, primary_device_index):
        return 1


class SimFactory(DeviceManagerFactory):
    device_type = "sim"

    def new_manager(self, registry):
        return SimManager(registry, self.device_type)


def array(buffer, shape, dtype):
    """A numpy view of a sim buffer (kernels compute in place on it)."""
    dt = np.dtype(dtype)
    return buffer.handle[:int(np.prod(shape, dtype=np.int64)) * dt.itemsize].view(dt).reshape(shape)
