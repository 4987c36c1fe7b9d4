import pytest

from tcc.runtime.device import AllocationOptions, DeviceError, get_device


def test_pinned_device_is_set_once():
    options = AllocationOptions()
    assert not options.has_pinned_device and options.pinned_device is None
    with pytest.raises(DeviceError, match="no pinned device"):
        options.pinned_device_type
    with pytest.raises(DeviceError, match="no pinned device"):
        options.pinned_device_index
    options.set_pinned_device("gpu", 1)
    assert (options.pinned_device_type, options.pinned_device_index) == ("gpu", 1)
    with pytest.raises(DeviceError, match="already gpu:1"):
        options.set_pinned_device("gpu", 2)
    assert options.pinned_device == ("gpu", 1)
    options.clear_pinned_device()
    options.set_pinned_device("gpu", 2)
    assert options.pinned_device == ("gpu", 2)


@pytest.mark.parametrize("spec, expected", [
    ("gpu:3", ("gpu", 3)), ("sim", ("sim", 0)), (("gpu", 0), ("gpu", 0))])
def test_pinned_device_spellings(spec, expected):
    assert AllocationOptions(pinned_device=spec).pinned_device == expected


def test_pinned_device_from_a_device():
    assert AllocationOptions(pinned_device=get_device("cpu:0")).pinned_device == ("cpu", 0)


def test_numa_node_may_be_overwritten_and_cleared():
    options = AllocationOptions(numa_node=1)
    assert options.has_numa_node_affinity and options.numa_node == 1
    options.numa_node = 3
    assert options.numa_node == 3
    options.clear_numa_node_affinity()
    assert not options.has_numa_node_affinity and options.numa_node is None


@pytest.mark.parametrize("bad", [-1, 1.0, True, "0"])
def test_bad_values_are_rejected(bad):
    with pytest.raises(DeviceError):
        AllocationOptions(numa_node=bad)
    with pytest.raises(DeviceError):
        AllocationOptions().set_pinned_device("gpu", bad)


def test_copy_is_independent_and_equal():
    a = AllocationOptions(pinned_device="gpu:1", numa_node=2)
    b = a.copy()
    assert a == b and hash(a) == hash(b)
    b.clear_pinned_device()
    assert a.pinned_device == ("gpu", 1) and a != b
