"""Sample models built with onnx.helper: the bundled example, the test
models and the benchmark models all come from here. Weights are random
(a `seed` makes them reproducible where a file is committed)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18


class _Graph:
    def __init__(self, seed=None):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.n = 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def weight(self, shape, scale=None, base="w"):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        arr = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.const(arr, base)

    def const(self, arr, base="c"):
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(self, op_type, inputs, n_out=1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name, inputs, outputs):
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tcc.samples")
        m.ir_version = 10
        onnx.checker.check_model(m)
        return m


def _io(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _rename_output(g, last, name):
    g.nodes[-1].output[0] = name
    g.nodes[-1].name = name
    return name


def mlp(batch=1, sizes=(784, 128, 10), seed=None, softmax=True):
    """Gemm + Relu layers (the last without Relu), then Softmax."""
    g = _Graph(seed)
    x = "x"
    for i in range(len(sizes) - 1):
        w = g.weight((sizes[i + 1], sizes[i]), base="fc_w")
        b = g.weight((sizes[i + 1],), scale=0.1, base="fc_b")
        x = g.op("Gemm", [x, w, b], transB=1)
        if i + 2 < len(sizes):
            x = g.op("Relu", [x])
    if softmax:
        x = g.op("Softmax", [x], axis=-1)
    _rename_output(g, x, "y")
    return g.model("mlp", [_io("x", [batch, sizes[0]])], [_io("y", [batch, sizes[-1]])])


def mlp_matmul(batch=64, sizes=(784, 1024, 1024, 10), seed=None):
    """The benchmark MLP: MatMul + Add + Relu layers."""
    g = _Graph(seed)
    x = "x"
    for i in range(len(sizes) - 1):
        w = g.weight((sizes[i], sizes[i + 1]), base="w")
        b = g.weight((sizes[i + 1],), scale=0.1, base="b")
        x = g.op("Add", [g.op("MatMul", [x, w]), b])
        if i + 2 < len(sizes):
            x = g.op("Relu", [x])
    _rename_output(g, x, "y")
    return g.model("mlp", [_io("x", [batch, sizes[0]])], [_io("y", [batch, sizes[-1]])])


def _conv_bn(g, x, cin, cout, k, stride=1, group=1, relu=True, relu6=False):
    w = g.weight((cout, cin // group, k, k), base="conv_w")
    y = g.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group)
    scale = g.const((1.0 + 0.1 * g.rng.standard_normal(cout)).astype(np.float32), "bn_scale")
    bias = g.const((0.1 * g.rng.standard_normal(cout)).astype(np.float32), "bn_bias")
    mean = g.const((0.1 * g.rng.standard_normal(cout)).astype(np.float32), "bn_mean")
    var = g.const((1.0 + 0.1 * g.rng.random(cout)).astype(np.float32), "bn_var")
    y = g.op("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)
    if relu6:
        y = g.op("Clip", [y, g.const(np.array(0, np.float32)), g.const(np.array(6, np.float32))])
    elif relu:
        y = g.op("Relu", [y])
    return y


def cnn(batch=1, channels=8, size=16, classes=10, seed=None):
    """A small ResNet-style block: Conv+BN+Relu, MaxPool, a residual block
    with Add, GlobalAveragePool, Flatten, Gemm."""
    g = _Graph(seed)
    x = _conv_bn(g, "x", 3, channels, 3)
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    y = _conv_bn(g, x, channels, channels, 3)
    y = _conv_bn(g, y, channels, channels, 3, relu=False)
    x = g.op("Relu", [g.op("Add", [x, y])])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    w = g.weight((classes, channels), base="fc_w")
    b = g.weight((classes,), scale=0.1, base="fc_b")
    _rename_output(g, g.op("Gemm", [x, w, b], transB=1), "y")
    return g.model("cnn", [_io("x", [batch, 3, size, size])], [_io("y", [batch, classes])])


def resnet18(batch=1, size=224, classes=1000, width=64, seed=None):
    g = _Graph(seed)
    x = _conv_bn(g, "x", 3, width, 7, stride=2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, cout in enumerate([width, width * 2, width * 4, width * 8]):
        for blk in range(2):
            stride = 2 if (blk == 0 and stage > 0) else 1
            y = _conv_bn(g, x, cin, cout, 3, stride=stride)
            y = _conv_bn(g, y, cout, cout, 3, relu=False)
            sc = x
            if stride != 1 or cin != cout:
                sc = _conv_bn(g, x, cin, cout, 1, stride=stride, relu=False)
            x = g.op("Relu", [g.op("Add", [y, sc])])
            cin = cout
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    w = g.weight((classes, cin), base="fc_w")
    b = g.weight((classes,), scale=0.1, base="fc_b")
    _rename_output(g, g.op("Gemm", [x, w, b], transB=1), "y")
    return g.model("resnet18", [_io("x", [batch, 3, size, size])], [_io("y", [batch, classes])])


def mobilenetv2(batch=1, size=224, classes=1000, seed=None):
    g = _Graph(seed)
    x = _conv_bn(g, "x", 3, 32, 3, stride=2, relu6=True)
    cin = 32
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
           (6, 320, 1, 1)]
    for t, c, n, s in cfg:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = _conv_bn(g, y, cin, hidden, 1, relu6=True)
            y = _conv_bn(g, y, hidden, hidden, 3, stride=stride, group=hidden, relu6=True)
            y = _conv_bn(g, y, hidden, c, 1, relu=False)
            x = g.op("Add", [x, y]) if (stride == 1 and cin == c) else y
            cin = c
    x = _conv_bn(g, x, cin, 1280, 1, relu6=True)
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    w = g.weight((classes, 1280), base="fc_w")
    b = g.weight((classes,), scale=0.1, base="fc_b")
    _rename_output(g, g.op("Gemm", [x, w, b], transB=1), "y")
    return g.model("mobilenetv2", [_io("x", [batch, 3, size, size])], [_io("y", [batch, classes])])


def _layernorm(g, x, d):
    scale = g.const((1.0 + 0.1 * g.rng.standard_normal(d)).astype(np.float32), "ln_scale")
    bias = g.const((0.1 * g.rng.standard_normal(d)).astype(np.float32), "ln_bias")
    return g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)


def _gelu(g, x):
    # 0.5 * x * (1 + erf(x / sqrt(2)))
    t = g.op("Erf", [g.op("Div", [x, g.const(np.array(np.sqrt(2.0), np.float32))])])
    t = g.op("Add", [t, g.const(np.array(1.0, np.float32))])
    return g.op("Mul", [g.op("Mul", [x, t]), g.const(np.array(0.5, np.float32))])


def transformer(batch=1, seq=16, d=32, heads=4, layers=1, ffn=None, seed=None):
    """BERT-style encoder layers: QKV MatMuls, batched attention with
    Reshape/Transpose, Softmax, residual Adds, LayerNormalization, Erf GELU."""
    g = _Graph(seed)
    ffn = ffn or 4 * d
    dh = d // heads
    x = "x"
    heads_shape = g.const(np.array([batch, seq, heads, dh], np.int64), "shape")
    merge_shape = g.const(np.array([batch, seq, d], np.int64), "shape")
    for _ in range(layers):
        def proj(inp):
            return g.op("Add", [g.op("MatMul", [inp, g.weight((d, d), base="wq")]),
                                g.weight((d,), scale=0.1, base="bq")])
        q, k, v = (g.op("Transpose", [g.op("Reshape", [proj(x), heads_shape])], perm=[0, 2, 1, 3])
                   for _ in range(3))
        kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])
        s = g.op("Div", [g.op("MatMul", [q, kt]), g.const(np.array(np.sqrt(dh), np.float32))])
        p = g.op("Softmax", [s], axis=-1)
        a = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [p, v])], perm=[0, 2, 1, 3]), merge_shape])
        a = g.op("Add", [g.op("MatMul", [a, g.weight((d, d), base="wo")]), g.weight((d,), scale=0.1, base="bo")])
        x = _layernorm(g, g.op("Add", [x, a]), d)
        h = g.op("Add", [g.op("MatMul", [x, g.weight((d, ffn), base="w1")]), g.weight((ffn,), scale=0.1, base="b1")])
        h = _gelu(g, h)
        h = g.op("Add", [g.op("MatMul", [h, g.weight((ffn, d), base="w2")]), g.weight((d,), scale=0.1, base="b2")])
        x = _layernorm(g, g.op("Add", [x, h]), d)
    _rename_output(g, x, "y")
    return g.model("transformer", [_io("x", [batch, seq, d])], [_io("y", [batch, seq, d])])


def elementwise_chain(n=1 << 22):
    """8 elementwise ops over one tensor: where a fusing compiler wins."""
    g = _Graph(0)
    x = g.op("Mul", ["x", g.const(np.array(1.5, np.float32))])
    x = g.op("Add", [x, g.const(np.array(0.25, np.float32))])
    x = g.op("Relu", [x])
    x = g.op("Sub", [x, g.const(np.array(0.5, np.float32))])
    x = g.op("Tanh", [x])
    x = g.op("Mul", [x, "x"])
    x = g.op("Abs", [x])
    x = g.op("Sqrt", [x])
    _rename_output(g, x, "y")
    return g.model("chain", [_io("x", [n])], [_io("y", [n])])


def softmax_layernorm(rows=8192, cols=1024):
    g = _Graph(0)
    x = g.op("Softmax", ["x"], axis=-1)
    _rename_output(g, _layernorm(g, x, cols), "y")
    return g.model("softmax_layernorm", [_io("x", [rows, cols])], [_io("y", [rows, cols])])


EXAMPLES = {"mlp": lambda: mlp(seed=0), "cnn": lambda: cnn(seed=0), "transformer": lambda: transformer(seed=0)}
