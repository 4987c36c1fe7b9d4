"""A third-party device with numpy memory without addresses and worker-thread
streams (tcc.accelerators.numpy_kit's, which the `sim` device and `tcc-accel new`
packages use) must pass the whole conformance kit."""
import pytest

from tcc.accelerators.numpy_kit import NumpyDevice
from tcc.runtime.device import DeviceError, DeviceManager, DeviceManagerFactory, DeviceManagerRegistry
from tcc.runtime.device.conformance_suite import *  # noqa: F401,F403


class ToyDevice(NumpyDevice):
    """tcc.accelerators.numpy_kit's device (what sim and `tcc-accel new` packages use), counting allocations."""
    device_name = "toy"
    total_memory = 8 << 30

    def _alloc(self, nbytes, options):
        self.manager.allocs += 1
        return super()._alloc(nbytes, options)


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
