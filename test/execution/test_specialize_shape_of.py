"""A dynamic input that reaches a Reshape only through Shape (x.reshape(
x.shape[0], -1), as torch's exporter writes it) decides shapes by its shape,
not its values: new data of a seen shape must reuse that specialization."""
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import tcc


def test_shape_of_input_is_not_a_value_key(tmp_path, monkeypatch, rng):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))
    nodes = [helper.make_node("Shape", ["x"], ["s"], end=1),
             helper.make_node("Concat", ["s", "minus1"], ["ns"], axis=0),
             helper.make_node("Reshape", ["x", "ns"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    minus1 = helper.make_tensor("minus1", TensorProto.INT64, [1], [-1])
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 12])], [minus1])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False))
    ref = ort.InferenceSession(m.SerializeToString())
    for n in (2, 2, 5, 2):
        x = rng.standard_normal((n, 3, 4)).astype(np.float32)
        np.testing.assert_array_equal(sess.run({"x": x})[0], ref.run(None, {"x": x})[0])
    assert len(sess.specializations()) == 2  # one per shape, not one per call
