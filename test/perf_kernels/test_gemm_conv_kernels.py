"""The native GEMM/conv kernels (runtime/native/gemm.c, reached through
`tcc.library_call` nests) against onnxruntime on fresh random data, at sizes
that are not multiples of the 12x32 tile, K across several 256-deep slices,
N across several blocks, every Gemm transpose/alpha/beta/bias form, batched
MatMul with broadcasting, and 1x1 / 3x3 / strided / padded / dilated /
grouped / depthwise convolutions. Each case also checks the kernel was
called (the lowered nest alone would give the same numbers)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tcc.dialects.conversions.loop_to_native.jit import NativeFunction
from tcc.dialects.ir import PassManager
from tcc.dialects.init_all import new_context
from tcc.dialects.onnx.importer import import_model

RNG = np.random.default_rng()


def _model(nodes, inputs, output, inits=()):
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def _ort(model, inputs):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, inputs)


def _native(model, inputs):
    from tcc.dialects.conversions.graph_to_loop import ConvertOnnxToLoopPass
    mod = import_model(model)
    PassManager(new_context(), [ConvertOnnxToLoopPass()], verify_each=True).run(mod)
    fn = NativeFunction(mod)
    return fn(*inputs.values()), fn.lowered.stats


def check(nodes, inputs, inits=(), rtol=1e-4, calls=1):
    model = _model(nodes, inputs, nodes[-1].output[0], inits)
    want = _ort(model, inputs)[0]
    got, stats = _native(model, inputs)
    assert stats.get("library_calls", 0) == calls, stats
    got = got[0]
    assert got.shape == want.shape
    scale = max(float(np.abs(want).max()), 1e-6)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


def r(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (5, 7, 3), (12, 256, 32), (13, 300, 37), (64, 784, 100),
                                   (25, 513, 1030), (100, 17, 1), (1, 600, 70), (97, 64, 2100)])
def test_matmul_sizes(m, k, n):
    check([helper.make_node("MatMul", ["a", "b"], ["c"])], {"a": r(m, k), "b": r(k, n)})


def test_matmul_constant_weight():
    check([helper.make_node("MatMul", ["a", "w"], ["c"])], {"a": r(33, 70)}, {"w": r(70, 45)})


@pytest.mark.parametrize("sa,sb", [((2, 1, 13, 17), (3, 17, 9)), ((4, 13, 17), (17, 9)), ((13, 17), (2, 17, 9)),
                                   ((17,), (17, 9)), ((2, 13, 17), (17,)), ((1, 4, 31, 64), (1, 4, 64, 31)),
                                   ((3, 1, 2, 5, 7), (1, 4, 1, 7, 6))])
def test_batched_matmul_broadcasting(sa, sb):
    check([helper.make_node("MatMul", ["a", "b"], ["c"])], {"a": r(*sa), "b": r(*sb)})


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("cshape", [None, (1,), (29,), (15, 1), (15, 29)])
def test_gemm_forms(ta, tb, cshape):
    a = r(270, 15) if ta else r(15, 270)
    b = r(29, 270) if tb else r(270, 29)
    ins = ["a", "b"] + (["c"] if cshape else [])
    inits = {"c": r(*cshape)} if cshape else {}
    check([helper.make_node("Gemm", ins, ["y"], transA=ta, transB=tb, alpha=0.7, beta=1.5)],
          {"a": a, "b": b}, inits)


def test_gemm_constant_transposed_weight_linear():
    check([helper.make_node("Gemm", ["x", "w", "bias"], ["y"], transB=1)], {"x": r(7, 300)},
          {"w": r(50, 300), "bias": r(50)})


CONVS = [
    # (x shape, w shape, attrs)
    ((1, 16, 9, 11), (24, 16, 1, 1), {}),                                   # 1x1 stride 1: plain GEMM
    ((2, 16, 9, 11), (24, 16, 1, 1), {"strides": [2, 2]}),                  # 1x1 strided: gathered
    ((1, 3, 17, 15), (13, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 5, 12, 13), (7, 5, 3, 3), {"strides": [2, 2], "pads": [1, 0, 2, 1]}),
    ((1, 3, 30, 30), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ((1, 4, 11, 12), (6, 4, 3, 2), {"dilations": [2, 3], "pads": [2, 1, 2, 1]}),
    ((1, 64, 10, 9), (40, 64, 3, 3), {"pads": [1, 1, 1, 1]}),              # K = 576: three K slices
    ((1, 6, 9, 9), (10, 3, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),     # grouped
    ((2, 8, 10, 11), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),    # depthwise
    ((1, 8, 13, 12), (8, 1, 3, 3), {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 4, 9, 10), (8, 1, 3, 3), {"group": 4, "pads": [0, 1, 2, 1]}),     # depth multiplier 2
    ((1, 5, 8, 9), (7, 5, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 5, 8, 9), (7, 5, 2, 2), {"auto_pad": "SAME_LOWER"}),
    ((1, 3, 40, 41), (33, 3, 3, 3), {"pads": [1, 1, 1, 1]}),               # N = 1640: several N blocks
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONVS)
def test_conv2d(xs, ws, attrs, bias):
    inits = {"w": r(*ws)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = r(ws[0])
        ins.append("b")
    check([helper.make_node("Conv", ins, ["y"], **attrs)], {"x": r(*xs)}, inits)


def test_conv1d():
    check([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 2], strides=[2])], {"x": r(2, 6, 29)},
          {"w": r(5, 6, 4), "b": r(5)})


def test_conv3d_keeps_the_loop_nest():
    check([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": r(1, 2, 4, 5, 4)}, {"w": r(3, 2, 2, 2, 2)},
          calls=0)


def test_conv_then_matmul_chain():
    """Two kernels in one function, sharing the runtime's packing buffers."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["y", "s"], ["z"]),
             helper.make_node("MatMul", ["z", "m"], ["out"])]
    check(nodes, {"x": r(1, 4, 6, 6)}, {"w": r(5, 4, 3, 3), "s": np.array([5, 36], np.int64), "m": r(36, 11)},
          calls=2)


def test_conv_weights_as_input():
    """Weights that are not constants are packed at run time."""
    check([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], group=2)],
          {"x": r(1, 6, 9, 10), "w": r(14, 3, 3, 3), "b": r(14)})
