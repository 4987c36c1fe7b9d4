"""Single-op (and small) ONNX models per op family for the gpu tests."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    onnx.checker.check_model(m)
    return m


def w(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.5


def unary(op, shape=(3, 5, 8), **attrs):
    return _model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", shape)], [("y", shape)])


def binary_bcast(op, a=(2, 3, 4, 8), b=(3, 1, 8)):
    out = tuple(np.broadcast_shapes(a, b))
    return _model([helper.make_node(op, ["x", "b"], ["y"])], [("x", a)], [("y", out)], [("b", w(b))])


def reduce(op, shape, axes, keepdims=1):
    out = tuple(1 if d in [a % len(shape) for a in axes] else n for d, n in enumerate(shape))
    if not keepdims:
        out = tuple(n for d, n in enumerate(shape) if d not in [a % len(shape) for a in axes])
    return _model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)], [("x", shape)], [("y", out)],
                  [("axes", np.array(axes, np.int64))])


def softmax(shape, axis, op="Softmax"):
    return _model([helper.make_node(op, ["x"], ["y"], axis=axis)], [("x", shape)], [("y", shape)])


def layernorm(shape, axis=-1, bias=True):
    n = int(np.prod(shape[axis:]))
    ins = ["x", "g", "b"] if bias else ["x", "g"]
    inits = [("g", w(shape[axis:], 2))] + ([("b", w(shape[axis:], 3))] if bias else [])
    return _model([helper.make_node("LayerNormalization", ins, ["y"], axis=axis, epsilon=1e-5)],
                  [("x", shape)], [("y", shape)], inits)


def matmul(a, b):
    out = tuple(np.broadcast_shapes(a[:-2], b[:-2])) + (a[-2], b[-1])
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", a)], [("y", out)], [("w", w(b))])


def gemm(m, k, n, transA=0, transB=0, alpha=1.0, beta=1.0, bias=(1, 8)):
    a = (k, m) if transA else (m, k)
    b = (n, k) if transB else (k, n)
    inits = [("w", w(b))] + ([("c", w(bias, 4))] if bias else [])
    return _model([helper.make_node("Gemm", ["x", "w"] + (["c"] if bias else []), ["y"], transA=transA,
                                    transB=transB, alpha=alpha, beta=beta)], [("x", a)], [("y", (m, n))], inits)


def conv(x=(2, 4, 9, 9), m=6, k=3, stride=1, pad=1, dil=1, group=1, bias=True):
    n, c, h, wd = x
    oh = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (k - 1) - 1) // stride + 1
    inits = [("w", w((m, c // group, k, k)))] + ([("b", w((m,), 5))] if bias else [])
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], kernel_shape=[k, k],
                            strides=[stride, stride], pads=[pad] * 4, dilations=[dil, dil], group=group)
    return _model([node], [("x", x)], [("y", (n, m, oh, ow))], inits)


def pool(op, x=(1, 3, 8, 8), k=2, stride=2):
    n, c, h, wd = x
    if op.startswith("Global"):
        return _model([helper.make_node(op, ["x"], ["y"])], [("x", x)], [("y", (n, c, 1, 1))])
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[k, k], strides=[stride, stride])
    return _model([node], [("x", x)], [("y", (n, c, (h - k) // stride + 1, (wd - k) // stride + 1))])


def transpose(shape, perm):
    return _model([helper.make_node("Transpose", ["x"], ["y"], perm=perm)], [("x", shape)],
                  [("y", tuple(shape[p] for p in perm))])


def concat_slice_gather():
    nodes = [helper.make_node("Concat", ["x", "c"], ["cat"], axis=1),
             helper.make_node("Slice", ["cat", "st", "en", "ax"], ["sl"]),
             helper.make_node("Gather", ["sl", "idx"], ["ga"], axis=2),
             helper.make_node("Reshape", ["ga", "shape"], ["y"])]
    inits = [("c", w((2, 3, 6))), ("st", np.array([1, 0], np.int64)), ("en", np.array([6, 5], np.int64)),
             ("ax", np.array([1, 2], np.int64)), ("idx", np.array([4, 0, 2], np.int64)),
             ("shape", np.array([2, 15], np.int64))]
    return _model(nodes, [("x", (2, 4, 6))], [("y", (2, 15))], inits)


def family_cases():
    cases = {}
    for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Erf", "Softplus", "HardSwish", "Floor"):
        cases[f"unary_{op}"] = unary(op)
    cases["unary_Gelu"] = _model([helper.make_node("Gelu", ["x"], ["y"])], [("x", (4, 16))], [("y", (4, 16))], opset=20)
    cases["unary_LeakyRelu"] = unary("LeakyRelu", alpha=0.1)
    for op in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
        cases[f"binary_{op}"] = binary_bcast(op)
    cases["reduce_sum_last"] = reduce("ReduceSum", (4, 6, 40), [-1])
    cases["reduce_mean_last2"] = reduce("ReduceMean", (4, 6, 40), [1, 2])
    cases["reduce_max_first"] = reduce("ReduceMax", (5, 7, 8), [0])
    cases["reduce_min_mid"] = reduce("ReduceMin", (5, 7, 8), [1], keepdims=0)
    cases["softmax_last"] = softmax((4, 5, 300), -1)
    cases["softmax_wide"] = softmax((3, 5000), -1)
    cases["softmax_axis1"] = softmax((4, 5, 6), 1)
    cases["logsoftmax_last"] = softmax((6, 33), -1, "LogSoftmax")
    cases["layernorm"] = layernorm((2, 5, 64))
    cases["layernorm_nobias_2axes"] = layernorm((3, 4, 20), axis=-2, bias=False)
    cases["matmul_2d"] = matmul((7, 13), (13, 5))
    cases["matmul_batched_2d_weight"] = matmul((2, 3, 7, 13), (13, 5))
    cases["matmul_batched"] = matmul((3, 7, 13), (3, 13, 5))
    cases["matmul_bcast_weight"] = matmul((7, 13), (3, 13, 5))
    cases["matmul_mixed_bcast"] = matmul((2, 1, 4, 6), (1, 3, 6, 5))
    cases["gemm"] = gemm(5, 7, 8)
    cases["gemm_trans"] = gemm(5, 7, 8, transA=1, transB=1, alpha=0.5, beta=2.0, bias=(8,))
    cases["gemm_nobias"] = gemm(5, 7, 8, bias=None)
    cases["conv_3x3_pad"] = conv()
    cases["conv_stride2_dil"] = conv(x=(1, 3, 11, 11), m=4, k=3, stride=2, pad=2, dil=2)
    cases["conv_1x1"] = conv(x=(2, 8, 5, 5), m=4, k=1, pad=0, bias=False)
    cases["conv_depthwise"] = conv(x=(1, 6, 7, 7), m=6, k=3, group=6)
    cases["maxpool"] = pool("MaxPool")
    cases["avgpool"] = pool("AveragePool", k=3, stride=1)
    cases["globalavgpool"] = pool("GlobalAveragePool")
    cases["transpose_2d"] = transpose((33, 70), [1, 0])
    cases["transpose_batched_last2"] = transpose((3, 40, 17), [0, 2, 1])
    cases["transpose_nchw_nhwc"] = transpose((2, 3, 4, 5), [0, 2, 3, 1])
    cases["concat_slice_gather_reshape"] = concat_slice_gather()
    return cases
