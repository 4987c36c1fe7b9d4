"""The device conformance kit: semantic tests any registered device must pass.

Every test takes the `tcc_device` fixture, which the pytest plugin
`tcc.runtime.conformance` supplies from `--tcc-device` (default "cpu"). Tests look
devices up through `tcc_device.registry`, so a private registry works too.
"""
import contextlib
import threading
import time

import numpy as np
import pytest

from tcc.runtime.device import (ActiveDeviceGuard, AllocationOptions, DeviceAttr, DeviceError,
                                Tensor)
from tcc.runtime.device.attrs import attr_type

GIB = 1 << 30
GATE_TIMEOUT_S = 10.0


@pytest.fixture
def rng():
    seed = np.random.SeedSequence().entropy
    print(f"conformance rng seed: {seed}")  # shown by pytest when a test fails
    return np.random.default_rng(seed)


@pytest.fixture
def stream(tcc_device):
    with tcc_device.create_stream() as s:
        yield s


@contextlib.contextmanager
def gated(stream):
    """Hold `stream` at this point until the block exits, so work queued inside the
    block provably has not run yet."""
    gate = threading.Event()
    stream.launch_host_func(lambda: gate.wait(GATE_TIMEOUT_S))
    try:
        yield
    finally:
        gate.set()


def random_bytes(rng, n):
    return rng.integers(0, 256, n, dtype=np.uint8)


def device_count(device):
    return device.manager.device_count()


def can_pin(device):
    try:
        device.free_pinned(device.alloc_pinned(1))
    except DeviceError:
        return False
    return True


# -- identity and lookup -----------------------------------------------------------
def test_device_identity_and_lookup(tcc_device):
    reg, dev = tcc_device.registry, tcc_device
    assert str(dev) == f"{dev.type}:{dev.index}"
    assert reg.get_device(str(dev)) is dev
    assert reg.get_device((dev.type, dev.index)) is dev
    assert reg.get_device(dev.type, dev.index) is dev
    assert dev.manager.get_device(dev.index) is dev
    assert dev.type in reg.device_types
    assert reg.device_type_name(reg.device_type_code(dev.type)) == dev.type
    assert reg.device_type_name(dev.dlpack_device[0]) == dev.type and dev.dlpack_device[1] == dev.index


def test_get_device_returns_one_object_across_threads(tcc_device):
    manager, found = tcc_device.manager, []
    threads = [threading.Thread(target=lambda: found.append(manager.get_device(tcc_device.index)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(found) == 8 and all(d is tcc_device for d in found)


def test_device_index_out_of_range(tcc_device):
    manager, count = tcc_device.manager, device_count(tcc_device)
    assert count >= 1 and tcc_device.index < count
    before = manager.active_index
    for bad in (count, count + 7, -1):
        with pytest.raises(DeviceError, match="out of range"):
            manager.get_device(bad)
        with pytest.raises(DeviceError):
            manager.set_active_index(bad)
    with pytest.raises(DeviceError, match="out of range"):
        tcc_device.registry.get_device(f"{tcc_device.type}:{count}")
    assert manager.active_index == before


# -- memory -----------------------------------------------------------------------
@pytest.mark.parametrize("nbytes", [0, 1, 7, 63, 64, 65, 4095, 4096, (1 << 20) + 3])
def test_alloc_free(tcc_device, nbytes):
    buf = tcc_device.alloc(nbytes)
    assert (buf.nbytes, buf.device, buf.kind, buf.freed) == (nbytes, tcc_device, "data", False)
    if buf.ptr is not None and nbytes:
        assert buf.ptr % tcc_device.alignment == 0 and tcc_device.alignment >= 64
    tcc_device.free(buf)
    assert buf.freed
    with pytest.raises(DeviceError, match="freed"):
        buf.ptr


def test_alloc_one_gib(tcc_device):
    total = tcc_device.get_attr(DeviceAttr.TOTAL_MEMORY)
    if total is not None and total < 4 * GIB:
        pytest.skip(f"{tcc_device} has only {total} bytes")
    buf = tcc_device.alloc(GIB)  # never touched: allocation must not fault pages in
    assert buf.nbytes == GIB
    tcc_device.free(buf)
    assert buf.freed


@pytest.mark.parametrize("bad", [-1, 1.5, True, "8", None])
def test_alloc_rejects_bad_sizes(tcc_device, bad):
    with pytest.raises(DeviceError):
        tcc_device.alloc(bad)


def test_double_free_is_detected(tcc_device):
    pairs = [(tcc_device.alloc, tcc_device.free),
             (tcc_device.alloc_workspace, tcc_device.free_workspace)]
    if can_pin(tcc_device):
        pairs.append((tcc_device.alloc_pinned, tcc_device.free_pinned))
    for alloc, free in pairs:
        buf = alloc(128)
        free(buf)
        with pytest.raises(DeviceError, match="already freed"):
            free(buf)


def test_free_with_the_wrong_function_is_rejected(tcc_device):
    work = tcc_device.alloc_workspace(64)
    with pytest.raises(DeviceError, match="free_workspace"):
        tcc_device.free(work)
    assert not work.freed
    tcc_device.free_workspace(work)
    with pytest.raises(DeviceError):
        tcc_device.free(np.zeros(4))


def test_workspace_defaults(tcc_device):
    for nbytes in (0, 1, 100, 1 << 16):
        buf = tcc_device.alloc_workspace(nbytes)
        assert (buf.nbytes, buf.kind, buf.device) == (nbytes, "workspace", tcc_device)
        if buf.ptr is not None and nbytes:
            assert buf.ptr % 64 == 0
        tcc_device.free_workspace(buf)
        assert buf.freed


def test_allocation_options(tcc_device):
    options = AllocationOptions(numa_node=0)
    buf = tcc_device.alloc(4096, options)
    assert buf.numa_honored in (True, False) and buf.options.numa_node == 0
    tcc_device.free(buf)
    if can_pin(tcc_device):
        options = AllocationOptions()
        pinned = tcc_device.alloc_pinned(256, options)
        assert pinned.kind == "pinned" and pinned.options.pinned_device == (tcc_device.type,
                                                                            tcc_device.index)
        assert not options.has_pinned_device  # the caller's options are not modified
        tcc_device.free_pinned(pinned)


# -- copies -------------------------------------------------------------------------
def test_copies_in_every_direction_with_offsets(tcc_device, stream, rng):
    for _ in range(5):
        n = int(rng.integers(1, 5000))
        pad = [int(x) for x in rng.integers(0, 300, 4)]
        data = random_bytes(rng, n + pad[0])
        a, b = tcc_device.alloc(n + pad[1]), tcc_device.alloc(n + pad[2] + 17)
        out = random_bytes(rng, n + pad[3])
        expected = out.copy()
        expected[pad[3]:] = data[pad[0]:]
        tcc_device.copy_host_to_device(data, a, n, pad[0], pad[1], stream)
        tcc_device.copy_device_to_device(a, b, n, pad[1], pad[2], stream)
        tcc_device.copy_device_to_host(b, out, n, pad[2], pad[3], stream)
        stream.sync()
        np.testing.assert_array_equal(out, expected)
        tcc_device.free(a)
        tcc_device.free(b)


def test_generic_copy_picks_the_direction(tcc_device, rng):
    data = random_bytes(rng, 1000)
    buf, out = tcc_device.alloc(1000), np.zeros(1000, np.uint8)
    tcc_device.copy(data.tobytes(), buf)        # any buffer-protocol source
    tcc_device.copy(buf, out)                   # default: the active stream
    tcc_device.active_stream.sync()
    np.testing.assert_array_equal(out, data)


def test_pinned_memory_is_a_host_buffer(tcc_device, stream, rng):
    if not can_pin(tcc_device):
        pytest.skip(f"{tcc_device} has no pinned host memory")
    data = random_bytes(rng, 3000)
    pinned, buf = tcc_device.alloc_pinned(3000), tcc_device.alloc(3000)
    view = tcc_device.host_view(pinned)
    view[:] = data
    tcc_device.copy_host_to_device(pinned, buf, stream=stream)
    view[:] = 0
    tcc_device.copy_device_to_host(buf, pinned, stream=stream)
    stream.sync()
    np.testing.assert_array_equal(view, data)


def test_copy_between_devices_of_one_type(tcc_device, stream, rng):
    if device_count(tcc_device) < 2:
        pytest.skip(f"only one {tcc_device.type} device")
    other = tcc_device.manager.get_device((tcc_device.index + 1) % device_count(tcc_device))
    data, out = random_bytes(rng, 999), np.zeros(999, np.uint8)
    here, there = tcc_device.alloc(999), other.alloc(999)
    tcc_device.copy_host_to_device(data, here, stream=stream)
    tcc_device.copy_device_to_device(here, there, stream=stream)
    stream.sync()
    other.copy_device_to_host(there, out, stream=other.active_stream)
    other.active_stream.sync()
    np.testing.assert_array_equal(out, data)


def test_copy_snapshots_the_host_source(tcc_device, stream, rng):
    data = random_bytes(rng, 4096)
    original = data.copy()
    buf, out = tcc_device.alloc(4096), np.zeros(4096, np.uint8)
    with gated(stream):
        tcc_device.copy_host_to_device(data, buf, stream=stream)
        data[:] = 255 - original  # the caller reuses its buffer before the copy runs
    tcc_device.copy_device_to_host(buf, out, stream=stream)
    stream.sync()
    np.testing.assert_array_equal(out, original)


def test_copy_bounds_and_arguments_are_checked(tcc_device, stream):
    buf, host = tcc_device.alloc(100), np.zeros(100, np.uint8)
    bad = [dict(nbytes=101), dict(nbytes=50, src_offset=51), dict(nbytes=50, dst_offset=51),
           dict(nbytes=-1), dict(src_offset=-1)]
    for kwargs in bad:
        with pytest.raises(DeviceError):
            tcc_device.copy_host_to_device(host, buf, stream=stream, **kwargs)
        with pytest.raises(DeviceError):
            tcc_device.copy_device_to_host(buf, host, stream=stream, **kwargs)
        with pytest.raises(DeviceError):
            tcc_device.copy_device_to_device(buf, buf, stream=stream, **kwargs)
    with pytest.raises(DeviceError, match="contiguous"):
        tcc_device.copy_host_to_device(np.zeros((10, 10))[:, ::2], buf, stream=stream)
    with pytest.raises(DeviceError, match="read-only"):
        tcc_device.copy_device_to_host(buf, b"\0" * 100, stream=stream)
    tcc_device.free(buf)
    with pytest.raises(DeviceError, match="freed"):
        tcc_device.copy_device_to_host(buf, host, stream=stream)
    stream.sync()


# -- streams and events ---------------------------------------------------------------
def test_one_stream_runs_in_order(tcc_device, stream, rng):
    buf, order, results = tcc_device.alloc(512), [], []
    payloads = [random_bytes(rng, 512) for _ in range(6)]
    with gated(stream):
        for i, payload in enumerate(payloads):
            results.append(np.zeros(512, np.uint8))
            tcc_device.copy_host_to_device(payload, buf, stream=stream)
            tcc_device.copy_device_to_host(buf, results[-1], stream=stream)
            stream.launch_host_func(lambda i=i: order.append(i))
        assert order == []  # nothing ran past the gate
    stream.sync()
    assert order == list(range(len(payloads)))
    for payload, result in zip(payloads, results):
        np.testing.assert_array_equal(result, payload)


def test_stream_reports_failed_work_and_keeps_working(tcc_device, stream):
    def boom():
        raise ValueError("deliberate")
    stream.launch_host_func(boom)
    with pytest.raises(DeviceError, match="deliberate"):
        stream.sync()
    done = []
    stream.launch_host_func(lambda: done.append(1))
    stream.sync()
    assert done == [1]


def test_event_never_recorded_is_done(tcc_device):
    event = tcc_device.create_event()
    assert event.query_done()
    event.sync()
    tcc_device.destroy_event(event)


def test_event_tracks_its_latest_record(tcc_device, stream):
    event = tcc_device.create_event()
    with gated(stream):
        stream.record_event(event)
        assert not event.query_done()
    event.sync()
    assert event.query_done()
    with gated(stream):
        stream.record_event(event)  # a new record is pending again
        assert not event.query_done()
    stream.sync()
    assert event.query_done()
    tcc_device.destroy_event(event)


def test_events_in_batches(tcc_device):
    events = tcc_device.create_events(5)
    assert len(events) == 5 and len({id(e) for e in events}) == 5
    assert all(e.query_done() for e in events)
    tcc_device.destroy_events(events)
    assert all(e.destroyed for e in events)
    with pytest.raises(DeviceError, match="destroyed"):
        events[0].query_done()
    with pytest.raises(DeviceError, match="destroyed"):
        tcc_device.destroy_event(events[1])
    with pytest.raises(DeviceError):
        tcc_device.create_events(-1)
    assert tcc_device.create_events(0) == []


def test_wait_on_another_streams_event(tcc_device, rng):
    data, out = random_bytes(rng, 2048), np.zeros(2048, np.uint8)
    buf = tcc_device.alloc(2048)
    with tcc_device.create_stream() as producer, tcc_device.create_stream() as consumer:
        ready, consumed = tcc_device.create_events(2)
        with gated(producer):
            tcc_device.copy_host_to_device(data, buf, stream=producer)
            producer.record_event(ready)
            consumer.wait_event(ready)
            tcc_device.copy_device_to_host(buf, out, stream=consumer)
            consumer.record_event(consumed)
            time.sleep(0.05)  # give a non-waiting consumer the chance to run ahead
            assert not consumed.query_done()
        consumer.sync()
        np.testing.assert_array_equal(out, data)
        tcc_device.destroy_events([ready, consumed])


def test_sync_stream_from_to(tcc_device, rng):
    data, out = random_bytes(rng, 777), np.zeros(777, np.uint8)
    buf = tcc_device.alloc(777)
    with tcc_device.create_stream() as src, tcc_device.create_stream() as dst:
        done = tcc_device.create_event()
        with gated(src):
            tcc_device.copy_host_to_device(data, buf, stream=src)
            tcc_device.sync_stream_from_to(src, dst)
            tcc_device.copy_device_to_host(buf, out, stream=dst)
            dst.record_event(done)
            time.sleep(0.05)  # give a non-waiting dst the chance to run ahead
            assert not done.query_done()
        dst.sync()
        tcc_device.destroy_event(done)
        np.testing.assert_array_equal(out, data)


def test_stream_lifecycle(tcc_device):
    stream = tcc_device.create_stream()
    assert stream.device is tcc_device and stream.device_type == tcc_device.type
    tcc_device.destroy_stream(stream)
    assert stream.destroyed
    with pytest.raises(DeviceError, match="destroyed"):
        stream.sync()
    with pytest.raises(DeviceError, match="destroyed"):
        tcc_device.destroy_stream(stream)
    with pytest.raises(DeviceError, match="default stream"):
        tcc_device.destroy_stream(tcc_device.default_stream)
    with tcc_device.create_stream() as scoped:
        pass
    assert scoped.destroyed


def test_active_stream_is_per_thread(tcc_device):
    with tcc_device.create_stream() as mine:
        tcc_device.set_stream(mine)
        seen = []
        t = threading.Thread(target=lambda: seen.append(tcc_device.active_stream))
        t.start()
        t.join()
        assert tcc_device.active_stream is mine
        assert seen == [tcc_device.default_stream]
        tcc_device.set_stream(None)
        assert tcc_device.active_stream is tcc_device.default_stream


# -- attributes and the active device ---------------------------------------------------
def test_attribute_queries(tcc_device):
    for kind in DeviceAttr:
        value = tcc_device.get_attr(kind)
        assert value is None or isinstance(value, attr_type(kind)), (kind, value)
        assert tcc_device.get_attr(kind.value) == value or kind in (
            DeviceAttr.AVAILABLE_MEMORY, DeviceAttr.MAX_CLOCK_RATE)  # these move over time
    assert tcc_device.get_attr(DeviceAttr.EXIST) is True
    assert isinstance(tcc_device.name, str) and tcc_device.name
    total = tcc_device.get_attr(DeviceAttr.TOTAL_MEMORY)
    free = tcc_device.get_attr(DeviceAttr.AVAILABLE_MEMORY)
    if total is not None and free is not None:
        assert 0 <= free <= total
    for kind in (DeviceAttr.NUM_THREADS, DeviceAttr.WARP_SIZE, DeviceAttr.MAX_THREADS_PER_BLOCK):
        value = tcc_device.get_attr(kind)
        assert value is None or value > 0
    assert set(tcc_device.attributes()) <= set(DeviceAttr)
    with pytest.raises(DeviceError, match="unknown device attribute"):
        tcc_device.get_attr("no_such_attribute")


def test_guard_restores_the_previous_device(tcc_device):
    manager, count = tcc_device.manager, device_count(tcc_device)
    other = (tcc_device.index + 1) % count
    manager.set_active_index(other)
    try:
        with ActiveDeviceGuard(tcc_device) as dev:
            assert dev is tcc_device and manager.active_index == tcc_device.index
            assert tcc_device.is_active
        assert manager.active_index == other
        with pytest.raises(KeyError):
            with ActiveDeviceGuard(tcc_device):
                raise KeyError("inside")
        assert manager.active_index == other
    finally:
        manager.set_active_index(tcc_device.index)


def test_active_device_is_per_thread(tcc_device):
    manager, count = tcc_device.manager, device_count(tcc_device)
    if count < 2:
        pytest.skip(f"only one {tcc_device.type} device")
    other = (tcc_device.index + 1) % count
    manager.set_active_index(tcc_device.index)
    seen = []

    def elsewhere():
        manager.set_active_index(other)
        seen.append(manager.active_index)
    t = threading.Thread(target=elsewhere)
    t.start()
    t.join()
    assert seen == [other] and manager.active_index == tcc_device.index


def test_execution_context_activates_the_stream_device(tcc_device, stream):
    manager, count = tcc_device.manager, device_count(tcc_device)
    other = (tcc_device.index + 1) % count
    manager.set_active_index(other)
    try:
        with stream.execution_context():
            assert manager.active_index == tcc_device.index
        assert manager.active_index == other
        with pytest.raises(DeviceError, match="without setup"):
            stream.on_execution_context_teardown()
    finally:
        manager.set_active_index(tcc_device.index)


# -- tensors ------------------------------------------------------------------------------
def test_tensor_round_trip(tcc_device, rng):
    host = rng.standard_normal((3, 5, 7)).astype(np.float32)
    tensor = Tensor.from_dlpack(host, device=tcc_device, registry=tcc_device.registry)
    assert tensor.device is tcc_device
    assert (tensor.shape, tensor.dtype, tensor.strides) == ((3, 5, 7), np.float32, (35, 7, 1))
    np.testing.assert_array_equal(tensor.numpy(), host)
    back = tensor.to(tcc_device.registry.get_device("cpu"), tcc_device.registry)
    np.testing.assert_array_equal(np.from_dlpack(back), host)
