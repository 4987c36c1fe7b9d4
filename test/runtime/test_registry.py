import io

import pytest

from tcc.runtime.device import (DeviceError, DeviceManagerRegistry, HostDeviceManagerFactory,
                                default_registry, get_device, parse_device_spec)


class Alt(HostDeviceManagerFactory):
    """A host factory under other names, standing in for a third-party device."""

    def __init__(self, device_type="sim", aliases=(), codes=(), count=2):
        super().__init__(device_count=count)
        self.device_type, self.aliases, self.dlpack_codes = device_type, aliases, codes

    def version_info(self):
        return {"simulator": "9.9"}


@pytest.mark.parametrize("spec, expected", [
    ("gpu:1", ("gpu", 1)), ("gpu", ("gpu", None)), (" CPU : 0 ", ("cpu", 0)),
    (("gpu", 3), ("gpu", 3)), ("my_dev2:12", ("my_dev2", 12))])
def test_parse_device_spec(spec, expected):
    assert parse_device_spec(spec) == expected


@pytest.mark.parametrize("spec", ["", "gpu:", "gpu:-1", ":1", "gpu:1:2", "9gpu", 3, None])
def test_parse_device_spec_rejects(spec):
    with pytest.raises(DeviceError, match="cannot parse device"):
        parse_device_spec(spec)


def test_default_registry_has_the_host_lazily():
    assert "cpu" in DeviceManagerRegistry().device_types
    assert get_device("cpu:0") is default_registry.get_device(("cpu", 0))
    assert get_device("host") is get_device("cpu")  # alias, active index
    assert default_registry.device_type_name(1) == "cpu"
    assert default_registry.device_type_name(3) == "cpu"  # kDLCUDAHost memory is host memory
    assert default_registry.device_type_code("cpu") == 1


def test_a_factory_registered_first_replaces_the_builtin_host():
    reg = DeviceManagerRegistry()
    mine = Alt("cpu", count=3)
    reg.register(mine)
    assert reg.factory("cpu") is mine and reg.get_device_manager("cpu").device_count() == 3


def test_register_third_party_type():
    reg = DeviceManagerRegistry()
    reg.register(Alt("sim", aliases=("simulator",)))
    dev = reg.get_device("sim:1")
    assert (dev.type, dev.index) == ("sim", 1)
    assert reg.get_device("simulator", 1) is dev
    assert reg.get_device_manager("sim").get_device(1) is dev
    code = reg.device_type_code("sim")
    assert code >= 1 << 16 and reg.device_type_name(code) == "sim"
    reg.register(Alt("sim2"))
    assert reg.device_type_code("sim2") not in (code, 1)


def test_register_twice_needs_replace():
    reg = DeviceManagerRegistry()
    reg.register(Alt("sim"))
    old = reg.get_device("sim:0")
    with pytest.raises(DeviceError, match="already registered.*replace=True"):
        reg.register(Alt("sim"))
    reg.register(Alt("sim", count=5), replace=True)
    assert reg.get_device_manager("sim").device_count() == 5
    assert reg.get_device("sim:0") is not old  # the replaced manager's devices are dropped


def test_register_rejects_bad_factories():
    reg = DeviceManagerRegistry()
    with pytest.raises(DeviceError, match="DeviceManagerFactory"):
        reg.register(object())
    for bad in ("GPU", "gpu:0", "", None, "a-b"):
        with pytest.raises(DeviceError, match="lowercase identifier"):
            reg.register(Alt(bad))
    with pytest.raises(DeviceError, match="alias 'host' is already taken"):
        reg.register(Alt("sim", aliases=("host",)))
    with pytest.raises(DeviceError, match="DLPack code 1 already belongs to 'cpu'"):
        reg.register(Alt("sim", codes=(1,)))
    with pytest.raises(DeviceError, match="already an alias"):
        reg.register(Alt("host"))


def test_unknown_types_and_indices_are_clear_errors():
    reg = DeviceManagerRegistry()
    with pytest.raises(DeviceError, match=r"unknown device type 'gpu' \(registered: cpu\)"):
        reg.get_device("gpu:0")
    with pytest.raises(DeviceError, match="no device type is registered for code 2"):
        reg.device_type_name(2)
    with pytest.raises(DeviceError, match=r"cpu:4: device index out of range \(1 cpu device\)"):
        reg.get_device("cpu:4")
    with pytest.raises(DeviceError, match="conflicts with index=1"):
        reg.get_device("cpu:0", index=1)
    with pytest.raises(DeviceError, match="must be an int"):
        reg.get_device_manager("cpu").get_device("0")


def test_unregister():
    reg = DeviceManagerRegistry()
    reg.register(Alt("sim", aliases=("s",), codes=(77,)))
    reg.unregister("s")
    assert "sim" not in reg and "s" not in reg
    with pytest.raises(DeviceError):
        reg.device_type_name(77)


def test_dump_version_info():
    reg = DeviceManagerRegistry()
    reg.register(Alt("sim"))
    out = io.StringIO()
    info = reg.dump_version_info(out)
    assert info["sim"] == {"simulator": "9.9"} and "numpy" in info["cpu"]
    assert "sim: simulator 9.9" in out.getvalue() and "cpu: numpy" in out.getvalue()
