"""Window nests (pools, Conv, ConvTranspose) whose outer loops are marked
`nounroll` (graph_to_loop/window.py: many kernel offsets over a small
output), through the real compiler, against onnxruntime on fresh random
data with pads, dilations, strides and ceil_mode."""
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc
from tcc.dialects.conversions.graph_to_loop.window import outer_unroll

rng = np.random.default_rng()


def _run(tmp_path, node, x, inits=()):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits])
    m = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]))
    m.ir_version = 9
    out_sp = [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim][2:]
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    got = tcc.load(tcc.compile(path, output=str(tmp_path / "m.tcc"))).run({"x": x})[0]
    import onnxruntime as ort
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return got, want, out_sp


@pytest.mark.parametrize("op,attrs", [
    ("AveragePool", dict(kernel_shape=[3, 3, 3], strides=[3, 3, 3], dilations=[2, 2, 2], count_include_pad=0)),
    ("AveragePool", dict(kernel_shape=[3, 3, 3], strides=[2, 3, 3], dilations=[2, 1, 2], pads=[1, 2, 0, 2, 1, 1],
                         count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 4, 3], strides=[3, 3, 3], pads=[1, 1, 1, 1, 1, 1], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[3, 3, 3], strides=[3, 3, 3], dilations=[2, 2, 2], pads=[1, 1, 1, 0, 0, 0])),
    ("LpPool", dict(kernel_shape=[3, 3, 3], strides=[3, 3, 3], p=2)),
    ("MaxPool", dict(kernel_shape=[11, 11], pads=[2, 3, 1, 0])),
])
def test_pools_with_nounroll_nests(tmp_path, op, attrs):
    nd = len(attrs["kernel_shape"])
    x = rng.standard_normal((2, 3) + ((24,) * nd if nd == 3 else (14, 12))).astype(np.float32)
    got, want, out_sp = _run(tmp_path, helper.make_node(op, ["x"], ["y"], **attrs), x)
    assert not outer_unroll(out_sp, math.prod(attrs["kernel_shape"])), "the case no longer takes the nounroll path"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv3d_with_nounroll_nests(tmp_path):
    x = rng.standard_normal((1, 2, 10, 11, 12)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 0, 1, 1, 1, 0], dilations=[1, 2, 1])
    got, want, out_sp = _run(tmp_path, node, x, [("w", w)])
    assert not outer_unroll(out_sp, 27)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
