"""Ops tcc has no lowering for but ONNX defines as functions are expanded
at import (dialects/onnx/expand_functions.py) and then compile like any
graph: checked end to end against onnxruntime / onnx.reference on fresh
random data."""
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tcc

RNG = np.random.default_rng()


def _model(node, x_shape, opset, y_shape=None):
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape or x_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m)


def test_mean_variance_normalization_against_onnxruntime(tmp_path):
    m = _model(helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2]), [3, 4, 5], 13)
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32) * 3 + 1
    got = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"))).run({"x": x})[0]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_swiglu_against_reference(tmp_path):
    t = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 8]) for n in ("a", "b", "y")]
    g = helper.make_graph([helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=1.5)], "g", t[:2], t[2:])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 28)])
    m.ir_version = 10
    feeds = {n: RNG.standard_normal((2, 3, 8)).astype(np.float32) for n in ("a", "b")}
    got = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"))).run(feeds)[0]
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_caller_model_is_left_as_it_was(tmp_path):
    m = _model(helper.make_node("MeanVarianceNormalization", ["x"], ["y"]), [2, 3, 4, 4], 13)
    before = m.SerializeToString()
    tcc.compile(m, output=str(tmp_path / "m.tcc"))
    assert m.SerializeToString() == before
