"""A third-party device written against the abstract API in a few lines (numpy memory
without addresses, worker-thread streams) must pass the whole conformance kit; this
is what a plugin such as the `sim` device will look like."""
import numpy as np
import pytest

from tcc.runtime.device import (Device, DeviceAttr, DeviceBuffer, DeviceError, DeviceManager,
                                DeviceManagerFactory, DeviceManagerRegistry, WorkerEvent,
                                WorkerStream)
from tcc.runtime.device.conformance_suite import *  # noqa: F401,F403


class ToyDevice(Device):
    def _get_attr(self, kind):
        return {DeviceAttr.EXIST: True, DeviceAttr.DEVICE_NAME: "toy",
                DeviceAttr.TOTAL_MEMORY: 8 << 30}.get(kind)

    def _alloc(self, nbytes, options):
        self.manager.allocs += 1
        # Lazily mapped zeros, so the 1 GiB conformance allocation stays cheap.
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


class ToyManager(DeviceManager):
    allocs = 0

    def _new_device(self, index):
        return ToyDevice(self, index)

    def _device_count(self, primary_device_index):
        return 3


class ToyFactory(DeviceManagerFactory):
    device_type = "toy"

    def new_manager(self, registry):
        return ToyManager(registry, self.device_type)


REGISTRY = DeviceManagerRegistry()
REGISTRY.register(ToyFactory())


@pytest.fixture(scope="module", params=["toy:0", "toy:2"])
def tcc_device(request):
    return REGISTRY.get_device(request.param)


def test_toy_workspace_defaults_to_data_alloc(tcc_device):
    before = tcc_device.manager.allocs
    buf = tcc_device.alloc_workspace(32)
    assert tcc_device.manager.allocs == before + 1 and buf.kind == "workspace"
    assert buf.ptr is None  # no address: the backend need not expose one
    tcc_device.free_workspace(buf)


def test_toy_has_no_pinned_memory(tcc_device):
    with pytest.raises(DeviceError, match="pinned host memory is not supported"):
        tcc_device.alloc_pinned(8)
