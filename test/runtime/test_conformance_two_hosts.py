"""The conformance kit on both devices of a two-device host registry, so the
multi-device tests (guards, per-thread active device, cross-device copies) run in CI."""
import pytest

from tcc.runtime.device import DeviceManagerRegistry, HostDeviceManagerFactory
from tcc.runtime.device.conformance_suite import *  # noqa: F401,F403

REGISTRY = DeviceManagerRegistry(builtins=False)
REGISTRY.register(HostDeviceManagerFactory(device_count=2))


@pytest.fixture(scope="module", params=["cpu:0", "cpu:1"])
def tcc_device(request):
    return REGISTRY.get_device(request.param)
