import json

import numpy as np
import pytest

from tcc.runtime.device import (DeviceAttr, Target, TargetError, get_device, get_target_kind,
                                register_target_kind, target_kinds)


class FakeGpu:
    """Just enough of a Device for the gpu preprocessor: a type and attribute answers."""

    type = "gpu"

    def __init__(self, **attrs):
        self.attrs = attrs

    def get_attr(self, kind):
        return self.attrs.get(DeviceAttr.of(kind).value)


def test_builtin_kinds_and_defaults():
    assert {"cpu", "gpu"} <= set(target_kinds())
    gpu = Target("gpu")
    assert gpu.kind is get_target_kind("gpu") and gpu.device_type == "gpu"
    assert gpu["max_threads"] == 1024 and gpu["warp_size"] == 32 and gpu.get("arch") is None
    assert Target("cpu")["mcpu"] == "generic" and Target("cpu")["mattr"] == ()


def test_json_and_short_forms_agree():
    a = Target.parse('{"kind": "gpu", "max_threads": 512, "arch": "sm_90", "mattr": ["x", "y"]}')
    b = Target.parse("gpu -arch=sm_90 -max_threads=512 -mattr=x,y")
    c = Target("gpu", max_threads=512, arch="sm_90", mattr=["x", "y"])
    assert a == b == c and hash(a) == hash(b) == hash(c)
    assert a.attrs["mattr"] == ("x", "y")
    assert Target("gpu -arch=sm_90 -max_threads=512 -mattr=x,y") == a


def test_random_targets_round_trip(rng):
    for _ in range(50):
        attrs = {"max_threads": int(rng.integers(1, 1 << 20)),
                 "warp_size": int(rng.choice([16, 32, 64])),
                 "arch": f"sm_{int(rng.integers(50, 100))}",
                 "mattr": [f"+f{int(i)}" for i in rng.integers(0, 99, int(rng.integers(0, 4)))]}
        target = Target("gpu", **attrs)
        assert Target.parse(str(target)) == target
        assert Target.parse(target.to_json()) == target
        assert json.loads(target.to_json())["max_threads"] == attrs["max_threads"]


def test_str_omits_defaults_and_quotes_spaces():
    assert str(Target("gpu")) == "gpu"
    target = Target("cpu", mcpu="my cpu", mattr=["+avx2"])
    assert str(target) == "cpu -mattr=+avx2 '-mcpu=my cpu'"
    assert Target.parse(str(target)) == target


def test_targets_are_immutable():
    target = Target("gpu")
    with pytest.raises(AttributeError):
        target.x = 1
    with pytest.raises(TypeError):
        target.attrs["max_threads"] = 1
    changed = target.with_attrs(max_threads=256)
    assert changed["max_threads"] == 256 and target["max_threads"] == 1024
    assert len({target, changed, Target("gpu")}) == 2


@pytest.mark.parametrize("text, message", [
    ("tpu", "unknown target kind 'tpu'"),
    ('{"kind": "tpu"}', "unknown target kind 'tpu'"),
    ("gpu -max_thread=4", "target kind 'gpu' has no attribute 'max_thread'"),
    ('{"kind": "gpu", "max_threads": "1024"}', "'max_threads' expects int, got str"),
    ('{"kind": "gpu", "max_threads": true}', "'max_threads' expects int, got bool"),
    ('{"kind": "gpu", "mattr": "x"}', "'mattr' expects list\\[str\\]"),
    ("gpu -max_threads=12x", "'max_threads' expects int"),
    ("gpu -max_threads", "'max_threads' expects int"),
    ("gpu arch=sm_90", "expected -key=value"),
    ("gpu -arch=a -arch=b", "given twice"),
    ('{"kind": "gpu",', "target JSON is invalid"),
    ('{"max_threads": 1}', 'needs an object with a string "kind"'),
    ("", "non-empty string"),
    ("gpu '-arch=x", "cannot parse target"),
])
def test_bad_descriptions_are_clear_errors(text, message):
    with pytest.raises(TargetError, match=message):
        Target.parse(text)


def test_unknown_attribute_lookup_is_an_error():
    with pytest.raises(TargetError, match="has no attribute 'nope'"):
        Target("gpu").get("nope")
    with pytest.raises(TargetError):
        Target("gpu", nope=1)
    assert isinstance(TargetError("x"), ValueError)


def test_from_device_fills_from_queries_and_keeps_explicit_values():
    dev = FakeGpu(compute_version="9.0", max_threads_per_block=2048, warp_size=32,
                  multi_processor_count=132, max_shared_memory_per_block=227 * 1024)
    target = Target.from_device(dev, max_threads=256)
    assert target["arch"] == "sm_90" and target["multi_processor_count"] == 132
    assert target["max_threads"] == 256  # explicit beats the query
    assert target["max_shared_memory_per_block"] == 227 * 1024
    assert Target.from_device(FakeGpu()) == Target("gpu")  # nothing answered: defaults


def test_from_host_device():
    cpu = get_device("cpu")
    target = Target.from_device(cpu)
    assert target["num_cores"] == cpu.get_attr(DeviceAttr.NUM_THREADS)
    assert target["vector_width"] == (cpu.get_attr(DeviceAttr.VECTOR_WIDTH) or 16)


def test_register_a_kind_with_a_preprocessor(rng):
    def derive(attrs, device):
        attrs.setdefault("lanes", attrs.get("width", 128) // 32)
        return attrs
    name = f"vec{rng.integers(1 << 30)}"
    kind = (register_target_kind(name, device_type="sim")
            .add_attr_option("width", int, 256)
            .add_attr_option("lanes", int)
            .add_attr_option("scale", float, 1)
            .add_attr_option("fast", bool, False)
            .set_attrs_preprocessor(derive))
    assert kind.device_type == "sim"
    t = Target.parse(f"{name} -width=512 -fast -scale=2")
    assert (t["lanes"], t["fast"], t["scale"]) == (16, True, 2.0)
    assert Target(name)["lanes"] == 4 and Target(name, scale=3)["scale"] == 3.0
    assert Target.parse(str(t)) == t
    with pytest.raises(TargetError, match="already registered"):
        register_target_kind(name)
    with pytest.raises(TargetError, match="already defined"):
        kind.add_attr_option("width", int)
    with pytest.raises(TargetError, match="type must be"):
        kind.add_attr_option("weird", dict)
    with pytest.raises(TargetError, match="no target kind runs on device type 'toy'"):
        Target.from_device(type("D", (), {"type": "toy"})())
