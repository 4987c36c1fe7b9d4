"""The host runtime's depthwise convolutions (gemm.c: the 3x3 stride-1/2
padded-plane path and the general one), through the real compiler, against
onnxruntime on fresh data with awkward sizes and pads."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc

rng = np.random.default_rng()


@pytest.mark.parametrize("hw,k,stride,pads,dil,relu", [
    ((13, 17), 3, 1, (1, 1, 1, 1), 1, False),
    ((13, 17), 3, 2, (1, 1, 1, 1), 1, True),
    ((8, 31), 3, 2, (0, 1, 1, 0), 1, False),     # asymmetric pads
    ((5, 5), 3, 1, (0, 0, 0, 0), 1, True),       # no padding
    ((112, 112), 3, 2, (1, 1, 1, 1), 1, False),  # MobileNet's largest plane
    ((11, 9), 3, 1, (2, 2, 2, 2), 2, False),     # dilated: the general path
    ((11, 9), 5, 1, (2, 2, 2, 2), 1, True),      # 5x5: the general path
])
def test_depthwise_matches_onnxruntime(tmp_path, hw, k, stride, pads, dil, relu):
    import onnxruntime as ort
    c = 7
    x = rng.standard_normal((2, c) + hw).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["z" if relu else "y"], group=c, strides=[stride] * 2,
                              pads=list(pads), dilations=[dil] * 2)]
    if relu:
        nodes.append(helper.make_node("Relu", ["z"], ["y"]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    m.ir_version = 10
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    got = tcc.load(tcc.compile(path, output=str(tmp_path / "m.tcc"))).run({"x": x})[0]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
