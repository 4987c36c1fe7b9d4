"""Host object code reaches its constants and callees through 64-bit
relocations only (the large code model). MCJIT maps an object's code and
its constants separately; in a long-lived process they landed more than
2 GB apart, where a 32-bit PC-relative relocation cannot reach, and
RuntimeDyldELF's `isInt<32>(RealOffset)` assertion aborted the process
(a test worker, in 3 of 4 full runs). The object must also still load,
run and match onnxruntime (test/cli/test_end_to_end.py links one into a
shared library)."""
import struct

import numpy as np
import pytest
from onnx import TensorProto, helper

import tcc
from tcc.runtime.artifact import read_artifact

# x86-64 relocation types whose field is 32 bits (psABI table 4.10): PC32,
# PLT32, GOTPC32/GOTPCREL and their relaxable forms, 32, 32S, GOTOFF32...
RELOC_32 = {2: "PC32", 3: "GOT32", 4: "PLT32", 9: "GOTPCREL", 10: "32", 11: "32S", 26: "GOTPC32",
            41: "GOTPCRELX", 42: "REX_GOTPCRELX"}


def relocation_types(obj: bytes) -> set:
    """Every relocation type in an ELF64 little-endian relocatable object."""
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    out = set()
    for i in range(shnum):
        _n, typ, _f, _a, off, size, _l, _i, _al, ent = struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize)
        if typ == 4:  # SHT_RELA
            for k in range(size // (ent or 24)):
                info, = struct.unpack_from("<Q", obj, off + k * (ent or 24) + 8)
                out.add(info & 0xFFFFFFFF)
    return out


def _model():
    # constants (a constant pool), exp (a libm call), a reduction and a
    # parallel loop (the runtime's thread pool): each a kind of reference
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 1])
    c = helper.make_tensor("c", TensorProto.FLOAT, [256], np.linspace(-1, 1, 256, dtype=np.float32))
    nodes = [helper.make_node("Mul", ["x", "c"], ["m"]), helper.make_node("Exp", ["m"], ["e"]),
             helper.make_node("ReduceSum", ["e", "ax"], ["y"], keepdims=1)]
    ax = helper.make_tensor("ax", TensorProto.INT64, [1], [1])
    g = helper.make_graph(nodes, "cm", [x], [y], initializer=[c, ax])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_host_object_has_no_32_bit_relocations(tmp_path, rng):
    m = _model()
    path = tcc.compile(m, maccel=["host"], output=str(tmp_path / "m.tcc"), cache=False)
    obj = read_artifact(path).host_object
    found = {RELOC_32[t] for t in relocation_types(obj) if t in RELOC_32}
    assert not found, f"32-bit relocations in the host object: {sorted(found)}"
    x = rng.standard_normal((64, 256)).astype(np.float32)
    got = tcc.load(path).run({"x": x})[0]
    ort = pytest.importorskip("onnxruntime")
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
