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


def _flex_model(q, k, v, dtype=TensorProto.FLOAT, **attrs):
    ins = [helper.make_tensor_value_info(n, dtype, s) for n, s in (("Q", q), ("K", k), ("V", v))]
    out = helper.make_tensor_value_info("Y", dtype, [q[0], q[1], q[2], v[-1]][:len(q)])
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview", **attrs)
    m = helper.make_model(helper.make_graph([node], "g", ins, [out]),
                          opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    m.ir_version = 10
    return m


def _soft_cap_graph(cap):
    """score_mod: cap * tanh(scores / cap) (Gemma's logit soft-capping)."""
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, ["B", "H", "L", "S"])
    o = helper.make_tensor_value_info("o", TensorProto.FLOAT, ["B", "H", "L", "S"])
    c = onnx.numpy_helper.from_array(np.array(cap, np.float32), "cap")
    return helper.make_graph([helper.make_node("Div", ["s", "cap"], ["d"]), helper.make_node("Tanh", ["d"], ["t"]),
                              helper.make_node("Mul", ["t", "cap"], ["o"])], "soft_cap", [s], [o], [c])


import pytest  # noqa: E402


@pytest.mark.parametrize("maccel", [(), ("cpu",)])
@pytest.mark.parametrize("shapes,attrs", [
    (((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 6)), {}),                     # S != L, value dim != key dim
    (((1, 6, 3, 8), (1, 2, 9, 8), (1, 2, 9, 8)), {"scale": 0.3}),          # grouped query heads
    (((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)), {"score_mod": "soft_cap"}),
])
def test_flex_attention_against_reference(tmp_path, maccel, shapes, attrs):
    """FlexAttention (ai.onnx.preview) compiles through its context-dependent
    function body, with its score_mod subgraph inlined."""
    if attrs.get("score_mod") == "soft_cap":
        attrs = dict(attrs, score_mod=_soft_cap_graph(0.7))
    m = _flex_model(*shapes, **attrs)
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in zip("QKV", shapes)}
    got = tcc.load(tcc.compile(m, maccel=list(maccel), output=str(tmp_path / "m.tcc"))).run(feeds)[0]
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_flex_attention_bad_rank_is_one_line_error(tmp_path):
    from tcc.dialects.ir.errors import TccError
    m = _flex_model((2, 4, 8), (2, 4, 8), (2, 4, 8))
    with pytest.raises(TccError) as e:
        tcc.compile(m, output=str(tmp_path / "m.tcc"))
    assert "\n" not in str(e.value) and not (tmp_path / "m.tcc").exists()
    print(e.value)


@pytest.mark.parametrize("case", ["test_linear_attention_linear", "test_linear_attention_gated_delta"])
def test_linear_attention_with_cpu_accelerator(tmp_path, case):
    """LinearAttention expands to a Scan whose body reads constants of the
    graph; with --maccel=cpu the host ops around the cpu partitions are
    outlined, and the body's captured values must move with it (they did
    not: "operand #1 does not dominate this use" after fuse). The node
    suite's model, on fresh random inputs, against onnx.reference."""
    from tcc.node_report import cases
    m = cases()[case].model
    feeds = {}
    for vi in m.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dt = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        feeds[vi.name] = (RNG.uniform(0.1, 0.9, shape) if "beta" in vi.name or "decay" in vi.name
                          else RNG.standard_normal(shape) * 0.5).astype(dt)
    got = tcc.load(tcc.compile(m, maccel=["cpu"], output=str(tmp_path / "m.tcc"))).run(feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
