"""A host entry with many serial loop nests keeps them as calls: inlined
back into one function (each is called once), a chain of 10000 small
elementwise ops took LLVM 24 s, superlinear in the entry's size (7.7 s as
calls). Below MAX_INLINED_NESTS they are still inlined, as before."""
import re

import numpy as np
import onnx
from onnx import TensorProto, helper

import tcc
from tcc.dialects.conversions.loop_to_native.codegen import MAX_INLINED_NESTS

from test.conftest import run_tool


def _chain(n, shape):
    ops = ["Sin", "Neg", "Abs", "Sigmoid"]
    nodes = [helper.make_node(ops[i % len(ops)], [f"v{i}"], [f"v{i + 1}"]) for i in range(n)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _nests(path, tmp_path):
    ll = tmp_path / "m.ll"
    p = run_tool("tcc", path, "--maccel=host", "--emit=native-ir", "-o", ll)
    assert p.returncode == 0, p.stderr
    text = ll.read_text()
    groups = dict(re.findall(r"^attributes (#\d+) = \{(.*)\}$", text, re.M))
    nests = re.findall(r"^define internal .*@tcc_nest\d+\(.*\) .*?(#\d+) \{$", text, re.M)
    return nests, [g for g in nests if "noinline" in groups[g].split()]


def test_many_serial_nests_stay_calls(tmp_path, rng):
    n = 32 * (MAX_INLINED_NESTS + 30)  # the fuse pass groups 32 ops: ~94 nests of a 3x4 tensor each
    m = _chain(n, [3, 4])
    onnx.save(m, tmp_path / "m.onnx")
    nests, noinline = _nests(tmp_path / "m.onnx", tmp_path)
    assert len(nests) > MAX_INLINED_NESTS and len(noinline) == len(nests), (len(nests), len(noinline))
    x = rng.standard_normal((3, 4)).astype(np.float32)
    got = tcc.load(tcc.compile(m, maccel=["host"], output=str(tmp_path / "m.tcc"))).run({"v0": x})[0]
    import onnxruntime as ort
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"v0": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_few_serial_nests_are_inlined(tmp_path):
    onnx.save(_chain(32 * 8, [3, 4]), tmp_path / "m.onnx")
    nests, noinline = _nests(tmp_path / "m.onnx", tmp_path)
    assert nests == [] and noinline == []  # all 8 inlined into the entry
