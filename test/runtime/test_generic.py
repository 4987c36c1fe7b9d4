"""The shape-generic executor's kernels (runtime/generic) against
onnx.reference on fresh random data: one-node (and a few chained) models
with dynamic dims, compiled to their specializing artifact, whose stored IR
the plan runs at two or more shapes. Each case also asserts that its op ran
on the executor's own kernel, not the per-op reference fallback.
Broadcasting, negative axes, empty tensors and int64 shape math included."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tcc
from tcc.dialects.ir.errors import TccError
from tcc.runtime.generic import GenericPlan, GenericShapeError

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
NP = {F: np.float32, I64: np.int64, B: np.bool_}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))


def _model(nodes, inputs, n_out=1, inits=(), opset=18):
    """inputs: (name, elem type, rank); every dim dynamic; outputs y0..,
    typed by onnx's shape inference."""
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, [f"{n}{k}" for k in range(r)]) for n, t, r in inputs],
        [], [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    typed = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    m.graph.output.extend([typed[f"y{k}"] for k in range(n_out)])
    return m


def _plan(m, tmp_path):
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False))
    assert hasattr(sess, "_ir"), "a dynamic model compiles to a specializing artifact"
    return GenericPlan(sess._ir, sess._res)


def _draw(rng, t, shape, positive=False):
    if t == F:
        x = rng.standard_normal(shape).astype(np.float32)
        return np.abs(x) + np.float32(0.1) if positive else x
    if t == B:
        return rng.random(shape) < 0.5
    return rng.integers(-5, 6, size=shape).astype(np.int64)


def check(m, feeds_at, tmp_path, op=None, rtol=1e-5, atol=1e-6):
    """Runs the plan at every shape feeds_at lists (then the first again,
    on new data: its kept shape values) against onnx.reference."""
    plan = _plan(m, tmp_path)
    ref = ReferenceEvaluator(m)
    names = [i.name for i in m.graph.input]
    if op is not None:
        assert op in plan.step_ops and op not in plan.fallbacks, (plan.step_ops, plan.fallbacks)
    for feeds in list(feeds_at) + [feeds_at[0]]:
        x = feeds()
        got = plan.run([x[n] for n in names])
        want = ref.run(None, x)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            w = np.asarray(w)
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
            else:
                np.testing.assert_array_equal(g, w)
    return plan


def feeds_of(rng, spec, shapes_list, positive=False):
    """One feeds() per entry of shapes_list (a shape per input)."""
    return [lambda s=s: {n: _draw(rng, t, sh, positive) for (n, t, _), sh in zip(spec, s)} for s in shapes_list]


BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("t", [F, I64], ids=["f32", "i64"])
def test_binary_broadcasts(op, t, rng, tmp_path):
    spec = [("a", t, 3), ("b", t, 2)]
    m = _model([helper.make_node(op, ["a", "b"], ["y0"])], spec)
    if op == "Div" and t == I64:  # no division by zero; negative operands truncate toward zero
        def f(shapes):
            return lambda: {"a": rng.integers(-20, 21, shapes[0]).astype(np.int64),
                            "b": rng.choice([-3, -2, -1, 1, 2, 5], shapes[1]).astype(np.int64)}
        feeds = [f(([2, 1, 4], [3, 1])), f(([1, 5, 3], [5, 3])), f(([0, 2, 3], [2, 1]))]
    else:
        feeds = feeds_of(rng, spec, [([2, 1, 4], [3, 1]), ([1, 5, 3], [5, 3]), ([0, 2, 3], [2, 1])])
    check(m, feeds, tmp_path, "onnx." + op)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op, rng, tmp_path):
    spec = [("a", B, 2), ("b", B, 2)]
    m = _model([helper.make_node(op, ["a", "b"], ["y0"])], spec)
    check(m, feeds_of(rng, spec, [([3, 4], [1, 4]), ([2, 1], [2, 5])]), tmp_path, "onnx." + op)


UNARY = ["Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Tanh", "Sigmoid", "Relu", "Erf",
         "Floor", "Ceil", "Round", "Sign", "IsNaN", "Softplus", "Softsign"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op, rng, tmp_path):
    spec = [("x", F, 3)]
    m = _model([helper.make_node(op, ["x"], ["y0"])], spec)
    check(m, feeds_of(rng, spec, [([2, 3, 4],), ([1, 7, 1],), ([0, 3, 2],)], positive=op in ("Log", "Sqrt")),
          tmp_path, "onnx." + op)


@pytest.mark.parametrize("attrs", [{}, {"approximate": "tanh"}], ids=["erf", "tanh"])
def test_gelu(attrs, rng, tmp_path):
    spec = [("x", F, 2)]
    m = _model([helper.make_node("Gelu", ["x"], ["y0"], **attrs)], spec, opset=20)
    check(m, feeds_of(rng, spec, [([3, 8],), ([5, 2],)]), tmp_path, "onnx.Gelu")


def test_where_and_pow_and_cast(rng, tmp_path):
    spec = [("c", B, 2), ("a", F, 2), ("b", F, 1)]
    nodes = [helper.make_node("Where", ["c", "a", "b"], ["w"]),
             helper.make_node("Pow", ["w", "two"], ["y0"]),
             helper.make_node("Cast", ["w"], ["y1"], to=I64)]
    m = _model(nodes, spec, 2, [("two", np.array(2.0, np.float32))])
    plan = check(m, feeds_of(rng, spec, [([3, 4], [3, 4], [4]), ([2, 1], [1, 5], [1])]), tmp_path, "onnx.Where")
    assert "onnx.Cast" in plan.step_ops


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax_and_logsoftmax(axis, rng, tmp_path):
    spec = [("x", F, 3)]
    m = _model([helper.make_node("Softmax", ["x"], ["y0"], axis=axis),
                helper.make_node("LogSoftmax", ["x"], ["y1"], axis=axis)], spec, 2)
    check(m, feeds_of(rng, spec, [([2, 3, 5],), ([4, 1, 7],), ([0, 2, 3],)]), tmp_path, "onnx.Softmax",
          rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis,bias", [(-1, True), (-2, False), (1, True)])
def test_layer_normalization(axis, bias, rng, tmp_path):
    spec = [("x", F, 3)]
    scale = rng.standard_normal((4, 6)[axis:] if axis < 0 else (4, 6)[axis - 1:]).astype(np.float32)
    inits = [("s", scale)] + ([("b", rng.standard_normal(scale.shape).astype(np.float32))] if bias else [])
    m = _model([helper.make_node("LayerNormalization", ["x", "s"] + (["b"] if bias else []), ["y0"], axis=axis,
                                 epsilon=1e-5)], spec, 1, inits, opset=17)
    check(m, feeds_of(rng, spec, [([2, 4, 6],), ([5, 4, 6],)]) if axis != -1 else
          feeds_of(rng, spec, [([2, 3, 6],), ([1, 7, 6],)]), tmp_path, "onnx.LayerNormalization",
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_with_negative_axes(op, keepdims, rng, tmp_path):
    spec = [("x", F, 3)]
    m = _model([helper.make_node(op, ["x", "axes"], ["y0"], keepdims=keepdims)], spec, 1,
               [("axes", np.array([-1, 0], np.int64))])
    check(m, feeds_of(rng, spec, [([2, 3, 4],), ([5, 1, 3],)]), tmp_path, "onnx." + op, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("last", [0, 1])
def test_argmax_ties_and_cumsum(last, rng, tmp_path):
    spec = [("x", I64, 2)]
    m = _model([helper.make_node("ArgMax", ["x"], ["y0"], axis=-1, select_last_index=last, keepdims=1),
                helper.make_node("CumSum", ["x", "ax"], ["y1"], exclusive=last, reverse=1 - last)],
               spec, 2, [("ax", np.array(-1, np.int64))])
    check(m, feeds_of(rng, spec, [([3, 6],), ([1, 4],)]), tmp_path, "onnx.ArgMax")


def test_matmul_broadcasts_batches_and_gemm(rng, tmp_path):
    spec = [("a", F, 3), ("b", F, 2), ("c", F, 2), ("d", F, 2)]
    m = _model([helper.make_node("MatMul", ["a", "b"], ["y0"]),
                helper.make_node("Gemm", ["c", "d", "bias"], ["y1"], transA=1, transB=1, alpha=0.5, beta=2.0)],
               spec, 2, [("bias", rng.standard_normal(3).astype(np.float32))])
    check(m, feeds_of(rng, spec, [([2, 3, 4], [4, 5], [6, 2], [3, 6]), ([1, 1, 7], [7, 2], [2, 4], [3, 2])]),
          tmp_path, "onnx.MatMul", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", [
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], group=4),
    dict(kernel_shape=[1, 1]),
    dict(kernel_shape=[3, 2], dilations=[2, 1], auto_pad="SAME_UPPER"),
], ids=["pad", "grouped-stride", "pointwise", "dilated-same"])
def test_conv2d(case, rng, tmp_path):
    group = case.get("group", 1)
    w = rng.standard_normal((8, 8 // group) + tuple(case["kernel_shape"])).astype(np.float32)
    spec = [("x", F, 4)]
    m = _model([helper.make_node("Conv", ["x", "w", "b"], ["y0"], **case)], spec, 1,
               [("w", w), ("b", rng.standard_normal(8).astype(np.float32))])
    check(m, feeds_of(rng, spec, [([1, 8, 9, 7],), ([2, 8, 5, 6],)]), tmp_path, "onnx.Conv", rtol=1e-4, atol=1e-4)


def test_conv1d_and_pooling(rng, tmp_path):
    spec = [("x", F, 3), ("z", F, 4)]
    m = _model([helper.make_node("Conv", ["x", "w"], ["y0"], kernel_shape=[5], strides=[2], pads=[2, 1]),
                helper.make_node("MaxPool", ["z"], ["y1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                helper.make_node("AveragePool", ["z"], ["y2"], kernel_shape=[2, 3], count_include_pad=1,
                                 pads=[0, 1, 0, 1]),
                helper.make_node("GlobalAveragePool", ["z"], ["y3"])],
               spec, 4, [("w", rng.standard_normal((6, 4, 5)).astype(np.float32))])
    plan = check(m, feeds_of(rng, spec, [([1, 4, 16], [1, 3, 7, 8]), ([3, 4, 9], [2, 2, 5, 5])]), tmp_path,
                 "onnx.Conv", rtol=1e-4, atol=1e-4)
    assert "onnx.MaxPool" in plan.step_ops and "onnx.AveragePool" not in plan.fallbacks


def test_shape_math_chain_in_int64(rng, tmp_path):
    """The exporters' chain: Shape -> Gather -> Mul/Concat -> Reshape, Range
    and a causal mask from LessOrEqual/Where, ConstantOfShape, Expand."""
    spec = [("x", F, 3)]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["b"]),
             helper.make_node("Gather", ["s", "i1"], ["t"]),
             helper.make_node("Gather", ["s", "i2"], ["h"]),
             helper.make_node("Mul", ["t", "h"], ["th"]),
             helper.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
             helper.make_node("Unsqueeze", ["th", "ax0"], ["thu"]),
             helper.make_node("Concat", ["bu", "thu"], ["shp"], axis=0),
             helper.make_node("Reshape", ["x", "shp"], ["y0"]),
             helper.make_node("Range", ["zero", "t", "one"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "axm1"], ["rc"]),
             helper.make_node("LessOrEqual", ["r", "rc"], ["causal"]),
             helper.make_node("Where", ["causal", "fzero", "fneg"], ["mask"]),
             helper.make_node("Unsqueeze", ["t", "ax0"], ["tu"]),
             helper.make_node("Concat", ["tu", "tu"], ["tt"], axis=0),
             helper.make_node("ConstantOfShape", ["tt"], ["ones"],
                              value=numpy_helper.from_array(np.array([1.5], np.float32))),
             helper.make_node("Add", ["mask", "ones"], ["y1"]),
             helper.make_node("Expand", ["bias", "s"], ["y2"]),
             helper.make_node("Slice", ["x", "st", "en", "axs", "stp"], ["y3"])]
    inits = [("i0", np.array(0)), ("i1", np.array(1)), ("i2", np.array(2)), ("ax0", np.array([0])),
             ("axm1", np.array([-1])), ("zero", np.array(0)), ("one", np.array(1)),
             ("fzero", np.array(0.0, np.float32)), ("fneg", np.array(-1e9, np.float32)),
             ("bias", rng.standard_normal((1, 1)).astype(np.float32)),
             ("st", np.array([-1, 0])), ("en", np.array([-2 ** 62, 2 ** 62])), ("axs", np.array([1, -1])),
             ("stp", np.array([-2, 2]))]
    m = _model(nodes, spec, 4, [(n, np.asarray(v, np.int64) if np.asarray(v).dtype.kind == "i" else v)
                                for n, v in inits])
    plan = check(m, feeds_of(rng, spec, [([2, 5, 3],), ([1, 7, 2],), ([3, 1, 4],)]), tmp_path, "onnx.Reshape")
    assert plan._shape_slots, "the shape chain is kept per input shape"


@pytest.mark.parametrize("nodes,spec,shapes", [
    ([helper.make_node("Transpose", ["x"], ["y0"], perm=[2, 0, 1])], [("x", F, 3)], [[2, 3, 4], [1, 0, 2]]),
    ([helper.make_node("Flatten", ["x"], ["y0"], axis=-1)], [("x", F, 3)], [[2, 3, 4], [1, 3, 2]]),
    ([helper.make_node("Squeeze", ["x", "a1"], ["y0"])], [("x", F, 3)], [[2, 1, 4], [3, 1, 1]]),
    ([helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]), helper.make_node("Unsqueeze", ["xt", "ua"], ["y0"])],
     [("x", F, 2)], [[2, 3], [0, 4]]),
    ([helper.make_node("Expand", ["x", "es"], ["y0"])], [("x", F, 3)], [[2, 1, 3], [1, 1, 1], [2, 1, 3]]),
    ([helper.make_node("Concat", ["x", "z"], ["y0"], axis=-1)], [("x", F, 2), ("z", F, 2)],
     [[[2, 3], [2, 0]], [[1, 1], [1, 4]]]),
    ([helper.make_node("Split", ["x"], ["y0", "y1", "y2"], axis=-1, num_outputs=3)], [("x", F, 2)],
     [[2, 7], [3, 9]]),
    ([helper.make_node("Gather", ["x", "neg"], ["y0"], axis=-2)], [("x", F, 3)], [[2, 3, 4], [1, 5, 2]]),
    ([helper.make_node("GatherElements", ["x", "ge"], ["y0"], axis=1)], [("x", F, 2)], [[2, 3], [2, 5]]),
    ([helper.make_node("GatherND", ["x", "gnd"], ["y0"], batch_dims=1)], [("x", F, 3)], [[2, 3, 4], [2, 4, 2]]),
    ([helper.make_node("Gather", ["x", "s1"], ["y0"], axis=1)], [("x", F, 3)], [[2, 3, 4], [1, 2, 5]]),
    ([helper.make_node("Gather", ["x", "sneg"], ["y0"], axis=-1)], [("x", F, 2)], [[2, 3], [4, 2]]),
    ([helper.make_node("Gather", ["x", "s1"], ["y0"])], [("x", F, 1)], [[3], [2]]),
    ([helper.make_node("GatherND", ["x", "rows"], ["y0"])], [("x", F, 3)], [[2, 3, 4], [3, 5, 1]]),
    ([helper.make_node("GatherND", ["x", "one"], ["y0"])], [("x", F, 2)], [[2, 3], [4, 1]]),
    ([helper.make_node("Tile", ["x", "rep"], ["y0"])], [("x", F, 2)], [[2, 3], [1, 0]]),
    ([helper.make_node("Pad", ["x", "pads", "pv"], ["y0"], mode="constant")], [("x", F, 2)], [[2, 3], [4, 1]]),
    ([helper.make_node("Pad", ["x", "pads"], ["y0"], mode="reflect")], [("x", F, 2)], [[3, 3], [4, 5]]),
    ([helper.make_node("Trilu", ["x", "k1"], ["y0"], upper=0)], [("x", F, 3)], [[2, 4, 4], [1, 3, 5]]),
    ([helper.make_node("Einsum", ["x", "z"], ["y0"], equation="bij,bjk->bik")], [("x", F, 3), ("z", F, 3)],
     [[[2, 3, 4], [2, 4, 5]], [[1, 2, 2], [1, 2, 3]]]),
], ids=["transpose", "flatten-neg", "squeeze", "unsqueeze-neg-of-a-view", "expand", "concat-empty", "split",
        "gather-neg", "gather-elements",
        "gathernd-batch", "gather-scalar-middle", "gather-scalar-negative", "gather-scalar-of-a-vector",
        "gathernd-rows", "gathernd-whole-rows", "tile", "pad-constant", "pad-reflect", "trilu", "einsum"])
def test_layout_ops(nodes, spec, shapes, rng, tmp_path):
    inits = [("a1", np.array([1], np.int64)), ("neg", np.array([[-1, 0], [1, -2]], np.int64)),
             ("ge", np.array([[1, -1, 0], [0, 1, 1]], np.int64)), ("gnd", np.array([[[1], [-1]], [[0], [1]]], np.int64)),
             ("rep", np.array([2, 3], np.int64)), ("pads", np.array([1, 2, 2, 1], np.int64)),
             ("pv", np.array(3.5, np.float32)), ("k1", np.array(1, np.int64)),
             ("ua", np.array([-1, 0, 3], np.int64)), ("es", np.array([2, 4, 1], np.int64)),
             ("s1", np.array(1, np.int64)), ("sneg", np.array(-2, np.int64)),
             ("rows", np.array([[1, -1], [0, 0], [-2, 1], [1, 1]], np.int64)),
             ("one", np.array([[[1]], [[-1]], [[0]]], np.int64))]
    used = {i for n in nodes for i in n.input}
    m = _model(nodes, spec, len(nodes[0].output), [i for i in inits if i[0] in used])
    shapes_list = [s if isinstance(s[0], list) else [s] for s in shapes]
    check(m, feeds_of(rng, spec, shapes_list), tmp_path, "onnx." + nodes[0].op_type)


def test_gathernd_out_of_range_names_the_node(rng, tmp_path):
    m = _model([helper.make_node("GatherND", ["x", "rows"], ["y0"], name="pick")], [("x", F, 3)], 1,
               [("rows", np.array([[1, 0], [0, 3]], np.int64))])
    plan = _plan(m, tmp_path)
    assert plan.run([rng.standard_normal((2, 4, 2)).astype(np.float32)])[0].shape == (2, 2)
    with pytest.raises(TccError, match=r"node 'pick' \(onnx.GatherND\): IndexError: index 3 is out of bounds"):
        plan.run([rng.standard_normal((2, 3, 2)).astype(np.float32)])


def test_reshape_that_does_not_fit_names_the_node(rng, tmp_path):
    spec = [("x", F, 2)]
    m = _model([helper.make_node("Reshape", ["x", "shp"], ["y0"], name="the_reshape")], spec, 1,
               [("shp", np.array([5, 5], np.int64))])
    plan = _plan(m, tmp_path)
    assert plan.run([rng.standard_normal((5, 5)).astype(np.float32)])[0].shape == (5, 5)
    with pytest.raises(GenericShapeError, match=r"node 'the_reshape' \(onnx.Reshape\) cannot reshape \[3, 4\] "
                                                r"\(12 elements\) to \[5, 5\]"):
        plan.run([rng.standard_normal((3, 4)).astype(np.float32)])


def test_an_op_without_a_kernel_runs_its_reference_op(rng, tmp_path):
    spec = [("x", F, 2)]
    m = _model([helper.make_node("Hardmax", ["x"], ["h"], axis=-1), helper.make_node("Add", ["h", "x"], ["y0"])],
               spec)
    plan = check(m, feeds_of(rng, spec, [([3, 4],), ([2, 6],)]), tmp_path, "onnx.Add")
    assert plan.fallbacks == ["onnx.Hardmax"]


def test_outputs_never_alias_inputs_or_kept_values(rng, tmp_path):
    spec = [("x", F, 2)]
    m = _model([helper.make_node("Identity", ["x"], ["y0"]), helper.make_node("Shape", ["x"], ["y1"])], spec, 2)
    plan = _plan(m, tmp_path)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    for _ in range(2):
        y, s = plan.run([x])
        assert not np.shares_memory(y, x)
        s[0] = 99  # the caller's array: the next run's Shape is unchanged
    assert list(plan.run([x])[1]) == [2, 3]


def _reshape_then_relu(d0, d1):
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["r"], name="rs"),
                           helper.make_node("Relu", ["r"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F, [d0, d1])],
                          [helper.make_tensor_value_info("y", F, [5, 5])],
                          [numpy_helper.from_array(np.array([5, 5], np.int64), "s")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("mode", ["sync", "background"])
@pytest.mark.parametrize("maccel", [(), ("host",), ("cpu",)])
def test_reshape_that_does_not_fit_is_an_input_error_in_the_compiled_path(mode, maccel, rng, tmp_path,
                                                                           monkeypatch):
    """12 elements "reshaped" to [5, 5]: onnx's inference takes the constant
    shape as it is, so the compiled code read past its buffer and returned a
    [5, 5] result (the cpu accelerator's view did so until shape inference
    checked the count: the default compile of an exported transformer whose
    sequence length was baked into a Reshape answered NaN at another length,
    where onnxruntime refuses). Now the specialization refuses it in one line."""
    from tcc.runtime.session import InputError
    monkeypatch.setenv("TCC_SPECIALIZE", mode)
    m = _reshape_then_relu("a", "b")
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False, maccel=maccel))
    x = rng.standard_normal((5, 5)).astype(np.float32)
    np.testing.assert_array_equal(sess.run({"x": x})[0], np.maximum(x, 0))
    with pytest.raises(InputError, match=r"inputs 'x' \[3, 4\] do not fit the model: node 'rs' \(onnx.Reshape\) "
                                         r".*12 elements cannot be viewed as \[5, 5\]") as e:
        sess.run({"x": rng.standard_normal((3, 4)).astype(np.float32)})
    assert "\n" not in str(e.value)


def test_generic_call_beside_a_compile_restores_the_switch_interval(rng, tmp_path):
    """While a generic call runs beside a background compile, the thread
    switch interval is lowered (runtime/specialize.py, _responsive); after
    it, the process has its own again, and the answer is right."""
    import sys
    import threading

    from tcc.api import _compile_at_run_time
    from tcc.runtime.loader import load
    spec = [("x", F, 2)]
    m = _model([helper.make_node("Softmax", ["x"], ["y0"], axis=-1)], spec)
    path = tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False)
    release, seen = threading.Event(), []

    def held(module, options, out):
        assert release.wait(120)
        return _compile_at_run_time(module, options, out)
    sess = load(path, compiler=held)
    before = sys.getswitchinterval()
    x = rng.standard_normal((3, 5)).astype(np.float32)
    try:
        got = sess.run({"x": x})[0]  # the generic path: the compile is held
        seen.append(sys.getswitchinterval())
    finally:
        release.set()
    sess.wait()
    np.testing.assert_allclose(got, ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert seen == [before] and sys.getswitchinterval() == before


@pytest.mark.parametrize("cshape", [[5], [1, 5], [4, 1], [4, 5], [1], []], ids=str)
def test_gemm_bias_shapes_and_transposed_operands(cshape, rng, tmp_path):
    """Gemm's C broadcast every way tcc_cpu_gemm's epilogue takes it (per
    column, per row, full, scalar); MatMul of Transpose views (a transposed
    right operand, a non-contiguous left one)."""
    spec = [("a", F, 2), ("b", F, 2), ("c", F, len(cshape)), ("x", F, 3), ("w", F, 2)]
    m = _model([helper.make_node("Gemm", ["a", "b", "c"], ["y0"], transB=1, alpha=1.5, beta=0.5),
                helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
                helper.make_node("Transpose", ["w"], ["wt"]),
                helper.make_node("MatMul", ["xt", "wt"], ["y1"])], spec, 2)
    check(m, feeds_of(rng, spec, [([4, 3], [5, 3], cshape, [2, 3, 6], [7, 6])]), tmp_path, "onnx.Gemm",
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op,attrs,extra", [
    ("LSTM", dict(direction="bidirectional"), ["B", "", "h0", "c0"]),
    ("LSTM", dict(direction="reverse", layout=1), ["B"]),
    ("LSTM", dict(direction="forward"), ["B", "", "h0", "c0", "P"]),
    ("GRU", dict(direction="bidirectional", linear_before_reset=1), ["B", "", "h0"]),
    ("GRU", dict(direction="forward", linear_before_reset=0, layout=1), ["B"]),
    ("LSTM", dict(direction="bidirectional"), ["B", "lens"]),
    ("LSTM", dict(direction="bidirectional"), ["B", "", "h0", "c0", "P", "no Y_c"]),
    ("LSTM", dict(direction="reverse", layout=1), ["B", "", "h0", "c0", "no Y_c"]),
    ("LSTM", dict(direction="forward"), ["no Y_c"]),
], ids=["lstm-bidi-init", "lstm-reverse-batch-first", "lstm-peepholes", "gru-bidi-lbr", "gru-batch-first",
        "lstm-sequence-lens", "lstm-c-bidi-peepholes", "lstm-c-reverse-batch-first", "lstm-c-no-bias"])
def test_recurrent(op, attrs, extra, rng, tmp_path):
    """LSTM and GRU on the executor's own kernel (a sequence_lens shorter
    than the sequence: that op's reference implementation, per call). GRU,
    and LSTM where Y_c is not read ("no Y_c"), run the cpu library's
    tcc_cpu_rnn; an LSTM whose Y_c is read, numpy."""
    no_yc = "no Y_c" in extra
    extra = [e for e in extra if e != "no Y_c"]
    hidden, inp, gates = 5, 3, 4 if op == "LSTM" else 3
    dirs = 2 if attrs["direction"] == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    inits = [("W", rng.standard_normal((dirs, gates * hidden, inp)).astype(np.float32) * 0.5),
             ("R", rng.standard_normal((dirs, gates * hidden, hidden)).astype(np.float32) * 0.5),
             ("B", rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32) * 0.5),
             ("P", rng.standard_normal((dirs, 3 * hidden)).astype(np.float32) * 0.5)]
    spec = [("x", F, 3)] + [(n, F, 3) for n in ("h0", "c0") if n in extra] + \
        ([("lens", TensorProto.INT32, 1)] if "lens" in extra else [])
    outs = ["y0", "y1", "y2"][:3 if op == "LSTM" and not no_yc else 2]
    m = _model([helper.make_node(op, ["x", "W", "R"] + extra, outs, hidden_size=hidden, **attrs)], spec, len(outs),
               [i for i in inits if i[0] in extra + ["W", "R"]], opset=14)

    def feeds(seq, batch, short=False):
        def f():
            x = rng.standard_normal((batch, seq, inp) if layout else (seq, batch, inp)).astype(np.float32)
            out = {"x": x}
            for n in ("h0", "c0"):
                if n in extra:
                    out[n] = rng.standard_normal((batch, dirs, hidden) if layout else (dirs, batch, hidden)
                                                 ).astype(np.float32)
            if "lens" in extra:
                out["lens"] = (rng.integers(1, seq + 1, batch) if short else np.full(batch, seq)).astype(np.int32)
            return out
        return f
    plan = check(m, [feeds(4, 2), feeds(7, 3), feeds(5, 4, short=True)] if "lens" in extra else
                 [feeds(4, 2), feeds(7, 3)], tmp_path, "onnx." + op, rtol=1e-4, atol=1e-5)
    assert plan.fallbacks == []


@pytest.mark.parametrize("act", ["Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "SiLU"])
def test_fused_conv_and_product_activations(act, rng, tmp_path):
    """fusion.py: Conv -> activation (SiLU: Sigmoid and Mul) in the C
    kernel's epilogue, MatMul -> Add(constant bias) -> activation and Gemm
    -> activation as one step each, at two shapes; a product whose result is
    also a graph output is not fused (both values come out)."""
    def act_nodes(x, y):
        if act == "SiLU":
            return [helper.make_node("Sigmoid", [x], [x + "_s"]), helper.make_node("Mul", [x + "_s", x], [y])]
        if act == "Clip":
            return [helper.make_node("Clip", [x, "lo", "hi"], [y])]
        attrs = {"alpha": 0.2} if act == "LeakyRelu" else {}
        return [helper.make_node(act, [x], [y], **attrs)]
    spec = [("x", F, 4), ("a", F, 3), ("g", F, 2)]
    nodes = [helper.make_node("Conv", ["x", "w", "cb"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])] + \
        act_nodes("c", "y0") + \
        [helper.make_node("MatMul", ["a", "mw"], ["m"]), helper.make_node("Add", ["mb", "m"], ["mm"])] + \
        act_nodes("mm", "y1") + \
        [helper.make_node("Gemm", ["g", "gw"], ["gg"], transB=1)] + act_nodes("gg", "y2") + \
        [helper.make_node("MatMul", ["a", "mw2"], ["y3"])] + act_nodes("y3", "y4")
    inits = [("w", rng.standard_normal((6, 4, 3, 3)).astype(np.float32)),
             ("cb", rng.standard_normal(6).astype(np.float32)),
             ("mw", rng.standard_normal((5, 7)).astype(np.float32)), ("mb", rng.standard_normal(7).astype(np.float32)),
             ("mw2", rng.standard_normal((5, 2)).astype(np.float32)),
             ("gw", rng.standard_normal((3, 5)).astype(np.float32)),
             ("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.75, np.float32))]
    m = _model(nodes, spec, 5, inits)
    plan = check(m, feeds_of(rng, spec, [([1, 4, 6, 5], [2, 3, 5], [4, 5]), ([2, 4, 3, 7], [1, 6, 5], [0, 5])]),
                 tmp_path, "onnx.Conv", rtol=1e-4, atol=1e-5)
    what = "Sigmoid+Mul" if act == "SiLU" else act
    assert sorted(f.split("(")[-1] for f in plan.fused) == sorted(
        [f"onnx.Conv + {what})", f"onnx.MatMul + Add+{what})", f"onnx.Gemm + {what})"]), plan.fused


def _sequence_models():
    """(name, model, feeds per shape) for the sequence and optional ops
    (test/lowering/test_sequences.py's model and two more)."""
    from test.lowering.test_sequences import make, opt_t, seq_t, sequence_ops_model, vi
    from onnx import helper as h
    split = make([helper.make_node("SplitToSequence", ["x", "sizes"], ["parts"], axis=1),
                  helper.make_node("SequenceConstruct", ["x", "x"], ["two"]),
                  helper.make_node("ConcatFromSequence", ["two"], ["cat"], axis=-1, new_axis=1),
                  helper.make_node("SequenceLength", ["parts"], ["n"]),
                  helper.make_node("Constant", [], ["k"], value=helper.make_tensor("k", I64, [], [-1])),
                  helper.make_node("SequenceAt", ["parts", "k"], ["last"]),
                  helper.make_node("Relu", ["last"], ["y"])],
                 [vi("x", h.make_tensor_type_proto(F, [None, None])), vi("sizes", h.make_tensor_type_proto(I64, [2]))],
                 [vi("parts", seq_t(F, [None, None])), vi("cat", h.make_tensor_type_proto(F, [None, None, 2])),
                  vi("n", h.make_tensor_type_proto(I64, [])), vi("y", h.make_tensor_type_proto(F, [None, None]))])
    opt = make([helper.make_node("Optional", ["x"], ["o"]),
                helper.make_node("OptionalHasElement", ["o"], ["has"]),
                helper.make_node("OptionalGetElement", ["o"], ["g"]),
                helper.make_node("Neg", ["g"], ["y"]),
                helper.make_node("OptionalHasElement", ["maybe"], ["given"])],
               [vi("x", h.make_tensor_type_proto(F, [None, 3])), vi("maybe", opt_t(F, [None]))],
               [vi("has", h.make_tensor_type_proto(B, [])), vi("y", h.make_tensor_type_proto(F, [None, 3])),
                vi("given", h.make_tensor_type_proto(B, []))])

    def seqs(rng, rows):
        return {"xs": [rng.standard_normal((r, 3)).astype(np.float32) for r in rows],
                "t": rng.standard_normal((2, 3)).astype(np.float32)}

    def splits(rng, n, a):
        return {"x": rng.standard_normal((n, 7)).astype(np.float32), "sizes": np.array([a, 7 - a], np.int64)}

    def opts(rng, n, given):
        return {"x": rng.standard_normal((n, 3)).astype(np.float32),
                "maybe": rng.standard_normal(n).astype(np.float32) if given else None}
    return [("sequence-ops", sequence_ops_model(), [lambda r: seqs(r, [2, 5]), lambda r: seqs(r, [1, 4, 2, 3])]),
            ("split-construct-concat", split, [lambda r: splits(r, 3, 2), lambda r: splits(r, 5, 6)]),
            ("optional", opt, [lambda r: opts(r, 2, False), lambda r: opts(r, 4, True)])]


@pytest.mark.parametrize("case", range(3), ids=["sequence-ops", "split-construct-concat", "optional"])
def test_sequences_and_optionals_run_on_the_generic_path(case, rng, tmp_path):
    """Sequence and optional ops on the generic path at two or more shapes
    (their onnx.reference op per step, lists in the table) against
    onnxruntime: the first run at each new shape returns while its compile
    is held back (so it did not wait for it); then the specialization."""
    import threading

    import onnxruntime as ort
    from test.lowering.test_sequences import same
    name, m, feeds_at = _sequence_models()[case]
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False))
    assert sess._generic_path(), "the plan builds"
    gate, compile_ = threading.Event(), sess._compiler
    sess._compiler = lambda *a: (gate.wait(60), compile_(*a))[1]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    try:
        for feeds in feeds_at:
            x = feeds(rng)
            want = ref.run(None, x)
            got = sess.run(x)  # the compile is held at the gate: this is the generic path
            for g, w in zip(got, want):
                same(g, w)
            assert sess._pending, "a compile is pending"
            for g, w in zip(sess.run_generic(x), want):
                same(g, w)
    finally:
        gate.set()
        sess.wait()
    x = feeds_at[-1](rng)
    for g, w in zip(sess.run(x), ref.run(None, x)):  # the specialization, compiled now
        same(g, w)


def _flatten_tail_model():
    """y0 = Reshape(x, [dim 0, product of the rest]) from Shape -> Slice ->
    ReduceProd -> Concat (shape values kept per key), y1 = Reshape(x, s)
    with s a graph input (data: the caller's array)."""
    spec = [("x", F, 3), ("s", I64, 1)]  # s: two dims
    nodes = [helper.make_node("Shape", ["x"], ["sh"]),
             helper.make_node("Slice", ["sh", "zero", "one"], ["d0"]),
             helper.make_node("Slice", ["sh", "one", "big"], ["rest"]),
             helper.make_node("ReduceProd", ["rest"], ["p"], keepdims=1),
             helper.make_node("Concat", ["d0", "p"], ["shp"], axis=0),
             helper.make_node("Reshape", ["x", "shp"], ["y0"]),
             helper.make_node("Reshape", ["x", "s"], ["y1"])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("zero", [0]), ("one", [1]),
                                                                           ("big", [2 ** 62]))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["a", "b", "c"]),
                                       helper.make_tensor_value_info("s", I64, [2])],
                          [helper.make_tensor_value_info("y0", F, ["a", "bc"]),
                           helper.make_tensor_value_info("y1", F, ["p", "q"])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), spec


def test_kept_shape_values_follow_every_dim_of_the_key(rng, tmp_path):
    """Shapes differing in one dim at a time (each a new key), then the first
    again: a key that ignored a dim would serve another shape's Reshape
    target. The caller's own shape array changed in place between two calls
    at one key is read again (only read-only kept values are trusted)."""
    m, _ = _flatten_tail_model()
    plan = _plan(m, tmp_path)
    ref = ReferenceEvaluator(m)
    for shape in ([2, 3, 4], [5, 3, 4], [2, 6, 4], [2, 3, 1], [2, 3, 4]):
        x = rng.standard_normal(shape).astype(np.float32)
        s = np.array([-1, shape[-1]], np.int64)
        for got, want in zip(plan.run([x, s]), ref.run(None, {"x": x, "s": s})):
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)
        s[:] = [shape[-1], -1]  # the same array object, new values
        got = plan.run([x, s])[1]
        assert got.shape == (shape[-1], x.size // shape[-1])


def test_kept_shape_values_are_bounded(rng, tmp_path, monkeypatch):
    """At most KEYS input-shape keys keep their shape values, the least
    recently used dropped first; a dropped key runs again correctly."""
    from tcc.runtime.generic import executor
    monkeypatch.setattr(executor, "KEYS", 3)
    m, _ = _flatten_tail_model()
    plan = _plan(m, tmp_path)
    ref = ReferenceEvaluator(m)
    shapes = [[1, 2, k] for k in range(1, 6)] + [[1, 2, 1]]
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        s = np.array([1, -1], np.int64)
        for got, want in zip(plan.run([x, s]), ref.run(None, {"x": x, "s": s})):
            np.testing.assert_array_equal(got, want)
        assert len(plan._keyed) <= 3
    assert list(plan._keyed) == [((1, 2, k), (2,)) for k in (4, 5, 1)]


@pytest.mark.parametrize("form", ["reciprocal-weight", "div-weight", "reciprocal", "stat-is-an-output"])
def test_fused_rms_normalization(form, rng, tmp_path):
    """fusion.py's RMS normalization: the exporters' Pow -> ReduceMean ->
    Add(eps) -> Sqrt -> Reciprocal (or Div(1, .)) -> Mul(x) -> Mul(w) chain
    as one step, against onnx.reference at two shapes (an empty batch too);
    not fused where an intermediate is also a graph output."""
    spec = [("x", F, 3)]
    inv = [helper.make_node("Div", ["one", "s"], ["r"])] if form == "div-weight" else \
        [helper.make_node("Reciprocal", ["s"], ["r"])]
    tail = [helper.make_node("Mul", ["x", "r"], ["n"]), helper.make_node("Mul", ["w", "n"], ["y0"])] \
        if "weight" in form else [helper.make_node("Mul", ["r", "x"], ["y0"])]
    nodes = [helper.make_node("Pow", ["x", "two"], ["p"]),
             helper.make_node("ReduceMean", ["p", "axes"], ["m"], keepdims=1),
             helper.make_node("Add", ["m", "eps"], ["a"]),
             helper.make_node("Sqrt", ["a"], ["s"] if form != "stat-is-an-output" else ["y1"])] + \
        ([helper.make_node("Identity", ["y1"], ["s"])] if form == "stat-is-an-output" else []) + inv + tail
    inits = [("two", np.array(2.0, np.float32)), ("axes", np.array([-1], np.int64)),
             ("eps", np.array(1e-6, np.float32)), ("one", np.array(1.0, np.float32)),
             ("w", rng.standard_normal(8).astype(np.float32))]
    m = _model(nodes, spec, 2 if form == "stat-is-an-output" else 1, inits)
    plan = check(m, feeds_of(rng, spec, [([2, 5, 8],), ([1, 3, 8],), ([0, 4, 8],)]), tmp_path, "onnx.ReduceMean",
                 rtol=1e-5, atol=1e-6)
    fused = [f for f in plan.fused if "Pow" in f]
    if form == "stat-is-an-output":
        assert fused == []
    else:
        chain = "ReduceMean+Add+Sqrt+" + ("Div" if form == "div-weight" else "Reciprocal") + "+Mul" + \
            ("+Mul" if "weight" in form else "")
        assert fused == [f"'p' (onnx.Pow + {chain})"], plan.fused


def test_conv_resolved_per_input_shape_and_bounded(rng, tmp_path, monkeypatch):
    """A Conv step keeps its resolved call per input shape (nn.CONV_SHAPES,
    oldest dropped): more input shapes than the bound, each one again after
    it was dropped, every result against onnx.reference (a stale call would
    write another shape's output size)."""
    from tcc.runtime.generic import nn as generic_nn
    monkeypatch.setattr(generic_nn, "CONV_SHAPES", 2)
    spec = [("x", F, 4)]
    m = _model([helper.make_node("Conv", ["x", "w", "b"], ["y0"], kernel_shape=[3, 3], pads=[1, 0, 1, 2],
                                 strides=[2, 1])], spec, 1,
               [("w", rng.standard_normal((5, 3, 3, 3)).astype(np.float32)),
                ("b", rng.standard_normal(5).astype(np.float32))])
    shapes = [[1, 3, 6, 5], [2, 3, 6, 5], [1, 3, 9, 4], [1, 3, 6, 5], [1, 3, 6, 7], [2, 3, 6, 5]]
    check(m, feeds_of(rng, spec, [(s,) for s in shapes]), tmp_path, "onnx.Conv", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("t", [F, I64], ids=["f32", "i64"])
def test_constant_square_cube_and_split_sizes(t, rng, tmp_path):
    """Pow by a constant 2 or 3 (products, not np.power), a Split by
    constant sizes along a negative axis (slices), at two shapes, one with
    an empty part."""
    spec = [("x", t, 3)]
    m = _model([helper.make_node("Pow", ["x", "two"], ["y0"]), helper.make_node("Pow", ["x", "three"], ["y1"]),
                helper.make_node("Split", ["x", "sizes"], ["y2", "y3", "y4"], axis=-1)], spec, 5,
               [("two", np.array(2, NP[t])), ("three", np.array([3.0], np.float32)),
                ("sizes", np.array([2, 0, 3], np.int64))])
    plan = check(m, feeds_of(rng, spec, [([2, 3, 5],), ([1, 0, 5],)]), tmp_path, "onnx.Pow")
    assert "onnx.Split" not in plan.fallbacks


def test_warm_runs_take_the_straight_line_and_errors_still_name_the_node(rng, tmp_path):
    """A warm run at a kept key calls the plan's generated function (one
    line per data step); an error in it (here a data input that makes a
    Reshape not fit, at a key that ran before) reruns the loop, which
    names the node."""
    m, _ = _flatten_tail_model()
    plan = _plan(m, tmp_path)
    ref = ReferenceEvaluator(m)
    calls = []
    warm = plan._warm
    plan._warm = lambda t: calls.append(1) or warm(t)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    for _ in range(2):
        s = np.array([4, -1], np.int64)
        for got, want in zip(plan.run([x, s]), ref.run(None, {"x": x, "s": s})):
            np.testing.assert_array_equal(got, want)
    assert calls == [1]
    with pytest.raises(GenericShapeError, match=r"node 'y1' \(onnx.Reshape\) cannot reshape \[2, 3, 4\]"):
        plan.run([x, np.array([5, -1], np.int64)])
