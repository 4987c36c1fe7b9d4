"""Graph outputs that declare an element type and no shape (unknown rank):
onnx's checker refuses them, onnxruntime runs them; tcc infers their
shapes and compiles the model, and refuses it, naming the checker's rule,
only where inference cannot give a shape either."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc
from tcc.dialects.ir.errors import TccError

H = helper.make_node


def _model(x_shape, rng, out_shape=None):
    w = numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "w")
    g = helper.make_graph([H("MatMul", ["x", "w"], ["m"]), H("Relu", ["m"], ["y"]), H("Shape", ["y"], ["s"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape),
                           helper.make_tensor_value_info("s", TensorProto.INT64, None)], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("maccel", [["cpu"], ["host"]])
def test_unranked_outputs_compile_and_match_onnxruntime(maccel, rng):
    m = _model([4, 6], rng)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    got = tcc.load(tcc.compile(m, maccel=maccel)).run({"x": x})
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])


def test_unranked_outputs_with_a_dynamic_batch(rng):
    m = _model(["batch", 6], rng)
    sess = tcc.load(tcc.compile(m))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (1, 7):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        got, want = sess.run({"x": x}), ref.run(None, {"x": x})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got[1], want[1])


def test_an_output_inference_cannot_shape_is_still_refused(rng):
    # Reshape to a shape read from an input of unknown length: no rank for y
    g = helper.make_graph([H("Reshape", ["x", "shape"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6]),
                           helper.make_tensor_value_info("shape", TensorProto.INT64, ["n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(TccError, match="invalid model: Field 'shape' of 'type' is required"):
        tcc.compile(m)
