import gc
import os
import threading

import numpy as np
import pytest

from tcc.runtime.device import (ActiveDeviceGuard, AllocationOptions, DeviceAttr, DeviceError,
                                DeviceManagerRegistry, HostDeviceManagerFactory, get_device)
from tcc.runtime.device.host_memory import NODE_ROOT, aligned_empty


@pytest.fixture
def cpu():
    return get_device("cpu:0")


def test_allocations_are_64_byte_aligned_views_of_their_handle(cpu, rng):
    for nbytes in rng.integers(1, 10_000, 50):
        buf = cpu.alloc(int(nbytes))
        view = cpu.host_view(buf)
        assert buf.ptr % 64 == 0 and view.ctypes.data == buf.ptr and view.size == nbytes
        cpu.free(buf)


@pytest.mark.parametrize("alignment", [64, 256, 4096])
def test_aligned_empty(alignment):
    for n in (0, 1, 1000):
        assert aligned_empty(n, alignment).ctypes.data % alignment == 0


@pytest.mark.skipif(not os.path.isdir(f"{NODE_ROOT}/node0") or
                    not hasattr(os, "sched_setaffinity"), reason="no NUMA information")
def test_numa_node_is_honored_where_the_system_allows(cpu):
    before = os.sched_getaffinity(0)
    buf = cpu.alloc(1 << 16, AllocationOptions(numa_node=0))
    assert buf.numa_honored is True and buf.ptr % 64 == 0
    assert os.sched_getaffinity(0) == before  # the thread's affinity is restored
    assert not cpu.host_view(buf).any()  # placed by touching every page


def test_numa_node_that_does_not_exist_is_recorded_not_honored(cpu):
    buf = cpu.alloc(100, AllocationOptions(numa_node=4095))
    assert buf.numa_honored is False and buf.nbytes == 100
    assert cpu.alloc(100).numa_honored is None


def test_pinned_option_delegates_to_the_pinned_device(cpu):
    registry = DeviceManagerRegistry(builtins=False)
    registry.register(HostDeviceManagerFactory(device_count=2))
    host0, host1 = registry.get_device("cpu:0"), registry.get_device("cpu:1")
    buf = host0.alloc(256, AllocationOptions(pinned_device="cpu:1"))
    assert buf.kind == "pinned" and buf.device is host1
    host0.free(buf)  # routed to host1.free_pinned, as OneFlow's CPU device does
    assert buf.freed
    with pytest.raises(DeviceError, match="already freed"):
        host1.free_pinned(buf)


def test_freeing_another_devices_buffer_is_rejected():
    registry = DeviceManagerRegistry(builtins=False)
    registry.register(HostDeviceManagerFactory(device_count=2))
    buf = registry.get_device("cpu:1").alloc(8)
    with pytest.raises(DeviceError, match="belongs to cpu:1"):
        registry.get_device("cpu:0").free(buf)


def test_streams_run_on_a_worker_thread(cpu):
    ran_on = []
    with cpu.create_stream() as stream:
        stream.launch_host_func(lambda: ran_on.append(threading.get_ident()))
        stream.sync()
    assert ran_on and ran_on[0] != threading.get_ident()


def test_a_dropped_stream_stops_its_thread(cpu):
    stream = cpu.create_stream()
    thread = stream._thread
    del stream
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_stream_cannot_sync_from_its_own_work(cpu):
    errors = []
    with cpu.create_stream() as stream:
        def inner():
            try:
                stream.sync()
            except DeviceError as exc:
                errors.append(str(exc))
        stream.launch_host_func(inner)
        stream.sync()
    assert errors and "own work" in errors[0]


def test_host_attributes(cpu):
    assert cpu.get_attr(DeviceAttr.NUM_THREADS) == len(os.sched_getaffinity(0))
    assert cpu.get_attr("total_memory") == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for kind in (DeviceAttr.WARP_SIZE, DeviceAttr.COMPUTE_VERSION,
                 DeviceAttr.MAX_THREADS_PER_BLOCK):
        assert cpu.get_attr(kind) is None  # does not apply to a CPU
    assert cpu.get_attr(DeviceAttr.VECTOR_WIDTH) in (None, 16, 32, 64)


def test_host_device_count_from_environment(monkeypatch):
    monkeypatch.setenv("TCC_HOST_DEVICE_COUNT", "3")
    registry = DeviceManagerRegistry()
    assert registry.get_device_manager("cpu").device_count() == 3
    monkeypatch.setenv("TCC_HOST_DEVICE_COUNT", "0")
    with pytest.raises(DeviceError, match="at least 1"):
        HostDeviceManagerFactory()


def test_guard_cannot_be_entered_twice(cpu):
    guard = ActiveDeviceGuard(cpu)
    with guard:
        with pytest.raises(DeviceError, match="entered twice"):
            guard.__enter__()
    with guard:  # reusable once exited
        assert cpu.is_active
