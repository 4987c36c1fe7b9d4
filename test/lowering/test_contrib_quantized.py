"""onnxruntime's quantized contrib ops (com.microsoft QLinearAdd, QLinearMul,
QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
QLinearAveragePool, QLinearConcat, QLinearWhere, QGemm: the QOperator
format's), decomposed at import (dialects/onnx/contrib.py), on fresh random
data: against numpy's dequantize -> float op -> quantize, the ops'
definition (bit for bit where numpy computes the float op as tcc does,
within one quantization step where the order of a sum or a transcendental
may move a value across a rounding tie), and against onnxruntime, which
implements them, within one step (its kernels compute some of them from
the scales' ratios or integer sums)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc
from tcc.dialects.ir.errors import TccError

RNG = np.random.default_rng()
TYPES = {"uint8": (np.uint8, TensorProto.UINT8), "int8": (np.int8, TensorProto.INT8)}


def _q(shape, dt):
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max + 1, shape).astype(dt)


def _scale():
    return np.float32(RNG.uniform(0.005, 0.05))


def _zp(dt):
    return dt(RNG.integers(-20, 21) + (128 if dt == np.uint8 else 0))


def _dq(x, s, z):
    return ((x.astype(np.int32) - np.int32(z)) * np.float32(s)).astype(np.float32)


def _quant(v, s, z, dt):
    info = np.iinfo(dt)
    q = np.rint(v.astype(np.float32) / np.float32(s)).astype(np.float64) + int(z)
    return np.clip(q, info.min, info.max).astype(dt)


def _model(nodes, inputs, output, out_shape, out_type, inits, opset=17):
    g = helper.make_graph(nodes, "contrib",
                          [helper.make_tensor_value_info(n, t, list(a.shape)) for n, (a, t) in inputs.items()],
                          [helper.make_tensor_value_info(output, out_type, out_shape)],
                          [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def _run(m, feeds, maccel=()):
    return tcc.load(tcc.compile(m, maccel=list(maccel))).run(feeds)[0]


def _ort(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _steps(a, b):
    return int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max())


def _check(m, feeds, want, exact, maccel=()):
    got = _run(m, feeds, maccel)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        assert _steps(got, want) <= 1
    assert _steps(got, _ort(m, feeds)) <= 1
    return got


@pytest.mark.parametrize("maccel", [[], ["cpu"]], ids=["host", "cpu"])
@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("qtype", ["uint8", "int8"])
@pytest.mark.parametrize("shapes", [((3, 5, 7), (3, 5, 7)), ((2, 4, 6), (6,)), ((4, 1, 5), (1, 3, 1))])
def test_qlinear_binary(maccel, op, qtype, shapes):
    dt, tp = TYPES[qtype]
    a, b = _q(shapes[0], dt), _q(shapes[1], dt)
    sa, sb, sc = _scale(), _scale(), _scale() * (4 if op == "Mul" else 1)
    za, zb, zc = _zp(dt), _zp(dt), _zp(dt)
    inits = {"sa": sa, "za": za, "sb": sb, "zb": zb, "sc": sc, "zc": zc}
    node = helper.make_node(f"QLinear{op}", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["c"],
                            domain="com.microsoft")
    f = np.add if op == "Add" else np.multiply
    want = _quant(f(_dq(a, sa, za), _dq(b, sb, zb)), sc, zc, dt)
    m = _model([node], {"a": (a, tp), "b": (b, tp)}, "c", list(want.shape), tp, inits)
    _check(m, {"a": a, "b": b}, want, exact=True, maccel=maccel)


@pytest.mark.parametrize("op", ["Sigmoid", "LeakyRelu"])
@pytest.mark.parametrize("qtype", ["uint8", "int8"])
def test_qlinear_unary(op, qtype):
    dt, tp = TYPES[qtype]
    x = _q((4, 6, 9), dt)
    sx, zx = np.float32(RNG.uniform(0.02, 0.1)), _zp(dt)
    sy, zy = (np.float32(1 / 256), dt(0 if dt == np.uint8 else -128)) if op == "Sigmoid" else (_scale(), _zp(dt))
    alpha = float(np.float32(RNG.uniform(0.01, 0.3)))
    attrs = {"alpha": alpha} if op == "LeakyRelu" else {}
    node = helper.make_node(f"QLinear{op}", ["x", "sx", "zx", "sy", "zy"], ["y"], domain="com.microsoft", **attrs)
    v = _dq(x, sx, zx)
    if op == "Sigmoid":
        f = (1 / (1 + np.exp(-v.astype(np.float64)))).astype(np.float32)
    else:
        f = np.where(v >= 0, v, v * np.float32(alpha)).astype(np.float32)
    want = _quant(f, sy, zy, dt)
    m = _model([node], {"x": (x, tp)}, "y", list(x.shape), tp, {"sx": sx, "zx": zx, "sy": sy, "zy": zy})
    # Sigmoid: tcc's exp and numpy's may differ in the last bit, across a tie
    _check(m, {"x": x}, want, exact=op == "LeakyRelu")


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("qtype", ["uint8", "int8"])
def test_qlinear_global_average_pool(channels_last, qtype):
    dt, tp = TYPES[qtype]
    shape = (2, 5, 6, 7) if channels_last else (2, 7, 5, 6)
    x = _q(shape, dt)
    sx, zx, sy, zy = _scale(), _zp(dt), _scale(), _zp(dt)
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "sx", "zx", "sy", "zy"], ["y"],
                            domain="com.microsoft", channels_last=channels_last)
    axes = (1, 2) if channels_last else (2, 3)
    want = _quant(_dq(x, sx, zx).astype(np.float64).mean(axis=axes, keepdims=True), sy, zy, dt)
    m = _model([node], {"x": (x, tp)}, "y", list(want.shape), tp, {"sx": sx, "zx": zx, "sy": sy, "zy": zy})
    _check(m, {"x": x}, want, exact=False)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_average_pool(channels_last):
    dt, tp = TYPES["uint8"]
    x = _q((1, 4, 9, 8), dt)  # NCHW; NHWC below
    sx, zx, sy, zy = _scale(), _zp(dt), _scale(), _zp(dt)
    v = _dq(x, sx, zx).astype(np.float64)
    p = np.pad(v, ((0, 0), (0, 0), (1, 1), (1, 1)))
    mean = np.stack([np.stack([p[:, :, i:i + 3, j:j + 3].mean(axis=(2, 3)) for j in range(0, 8, 2)], -1)
                     for i in range(0, 9, 2)], -2)  # count_include_pad=1
    want = _quant(mean, sy, zy, dt)
    feed = x.transpose(0, 2, 3, 1).copy() if channels_last else x
    if channels_last:
        want = want.transpose(0, 2, 3, 1).copy()
    node = helper.make_node("QLinearAveragePool", ["x", "sx", "zx", "sy", "zy"], ["y"], domain="com.microsoft",
                            kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1,
                            channels_last=channels_last)
    m = _model([node], {"x": (feed, tp)}, "y", list(want.shape), tp, {"sx": sx, "zx": zx, "sy": sy, "zy": zy})
    _check(m, {"x": feed}, want, exact=False)


def test_qlinear_concat_requantizes_each_input():
    dt, tp = TYPES["uint8"]
    xs = [_q((2, 3, 4), dt), _q((2, 5, 4), dt), _q((2, 1, 4), dt)]
    params = [(_scale(), _zp(dt)) for _ in xs]
    sy, zy = _scale(), _zp(dt)
    inits = {"sy": sy, "zy": zy}
    names = ["sy", "zy"]
    for i, (s, z) in enumerate(params):
        inits[f"s{i}"], inits[f"z{i}"] = s, z
        names += [f"x{i}", f"s{i}", f"z{i}"]
    node = helper.make_node("QLinearConcat", names, ["y"], domain="com.microsoft", axis=1)
    want = _quant(np.concatenate([_dq(x, s, z) for x, (s, z) in zip(xs, params)], axis=1), sy, zy, dt)
    m = _model([node], {f"x{i}": (x, tp) for i, x in enumerate(xs)}, "y", list(want.shape), tp, inits)
    _check(m, {f"x{i}": x for i, x in enumerate(xs)}, want, exact=True)


def test_qlinear_where():
    dt, tp = TYPES["int8"]
    c, x, y = RNG.random((3, 4)) < 0.5, _q((3, 4), dt), _q((4,), dt)
    (sx, zx), (sy, zy), (sz, zz) = [(_scale(), _zp(dt)) for _ in range(3)]
    node = helper.make_node("QLinearWhere", ["c", "x", "sx", "zx", "y", "sy", "zy", "sz", "zz"], ["z"],
                            domain="com.microsoft")
    want = _quant(np.where(c, _dq(x, sx, zx), _dq(y, sy, zy)), sz, zz, dt)
    m = _model([node], {"c": (c, TensorProto.BOOL), "x": (x, tp), "y": (y, tp)}, "z", [3, 4], tp,
               {"sx": sx, "zx": zx, "sy": sy, "zy": zy, "sz": sz, "zz": zz})
    got = _run(m, {"c": c, "x": x, "y": y})
    np.testing.assert_array_equal(got, want)  # onnxruntime's CPU provider has no QLinearWhere kernel


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("quantized_output", [False, True])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_qgemm(per_column, bias, quantized_output, trans_b):
    M, K, N = 5, 12, 7
    a, b = _q((M, K), np.uint8), _q((N, K) if trans_b else (K, N), np.int8)
    sa, za = _scale(), _zp(np.uint8)
    sb = RNG.uniform(0.005, 0.05, N).astype(np.float32) if per_column else _scale()
    zb = np.zeros(N, np.int8) if per_column else np.int8(0)
    alpha = float(np.float32(RNG.uniform(0.5, 1.5)))
    inits = {"sa": sa, "za": za, "b": b, "sb": sb, "zb": zb}
    names = ["a", "sa", "za", "b", "sb", "zb"]
    bf = _dq(b.T if trans_b else b, sb, 0)
    want = np.float32(alpha) * (_dq(a, sa, za).astype(np.float64) @ bf.astype(np.float64))
    if bias:
        c = RNG.integers(-5000, 5000, N).astype(np.int32)
        inits["c"] = c
        want = want + c * (np.float32(sa) * sb).astype(np.float32) * np.float32(alpha)
    names.append("c" if bias else "")
    out_type = TensorProto.FLOAT
    if quantized_output:
        sy, zy = np.float32(np.abs(want).max() / 100), np.uint8(128)
        inits["sy"], inits["zy"] = sy, zy
        names += ["sy", "zy"]
        out_type = TensorProto.UINT8
    node = helper.make_node("QGemm", names, ["y"], domain="com.microsoft", alpha=alpha, transB=trans_b)
    m = _model([node], {"a": (a, TensorProto.UINT8)}, "y", [M, N], out_type, inits)
    got, ref = _run(m, {"a": a}), _ort(m, {"a": a})
    if quantized_output:
        want = _quant(want, sy, zy, np.uint8)
        assert got.dtype == np.uint8 and _steps(got, want) <= 1 and _steps(got, ref) <= 1
    else:
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-5, atol=1e-5 * np.abs(want).max())
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("given", ["none", "inputs", "intermediate"])
@pytest.mark.parametrize("qtype", ["uint8", "int8"])
@pytest.mark.parametrize("opset", [13, 17])
def test_missing_output_zero_point_is_zero_of_the_inputs_type(given, qtype, opset):
    """Without the output's zero point it is 0, of the inputs' type
    (QuantizeLinear's default would be uint8): from the inputs' zero points
    or the graph input's declared type, through CastLike where neither is
    known. numpy alone is the reference: onnxruntime's type inference
    refuses these ops without zero points."""
    dt, tp = TYPES[qtype]
    a, b = _q((3, 4), dt), _q((3, 4), dt)
    sa, sb, sc = _scale(), _scale(), _scale()
    za, zb = (_zp(dt), _zp(dt)) if given == "inputs" else (0, 0)
    inits = {"sa": sa, "sb": sb, "sc": sc}
    if given == "inputs":
        inits.update(za=za, zb=zb)
    zs = ["za", "zb"] if given == "inputs" else ["", ""]
    x, y = ("a2", "b2") if given == "intermediate" else ("a", "b")  # types unknown before inference
    nodes = [helper.make_node("Identity", ["a"], ["a2"]), helper.make_node("Identity", ["b"], ["b2"])]
    nodes = nodes[:2 * (given == "intermediate")] + [
        helper.make_node("QLinearAdd", [x, "sa", zs[0], y, "sb", zs[1], "sc"], ["c"], domain="com.microsoft")]
    m = _model(nodes, {"a": (a, tp), "b": (b, tp)}, "c", [3, 4], tp, inits, opset=opset)
    want = _quant(_dq(a, sa, za) + _dq(b, sb, zb), sc, 0, dt)
    if given == "intermediate" and opset < 15:
        with pytest.raises(TccError, match=r"no zero point and its type is not known here \(CastLike needs"):
            tcc.compile(m)
        return
    got = _run(m, {"a": a, "b": b})
    assert got.dtype == dt
    np.testing.assert_array_equal(got, want)


def test_qoperator_model_runs_as_onnxruntime_runs_it(tmp_path):
    """A CNN (residual Add, global pool, Gemm) through onnxruntime's
    quantize_static in the QOperator format: QLinearConv, QLinearAdd,
    QLinearGlobalAveragePool, QGemm; with the cpu accelerator, within a
    few quantization steps of onnxruntime's output (its QLinearAdd rounds
    from the scales' ratios, and a step in one layer moves the next)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    def conv(x, w, y, c_in, c_out):
        init = numpy_helper.from_array((RNG.standard_normal((c_out, c_in, 3, 3)) * 0.2).astype(np.float32), w)
        return helper.make_node("Conv", [x, w], [y], pads=[1, 1, 1, 1]), init
    n1, w1 = conv("x", "w1", "c1", 3, 8)
    n2, w2 = conv("r1", "w2", "c2", 8, 8)
    fc_w = numpy_helper.from_array((RNG.standard_normal((8, 10)) * 0.3).astype(np.float32), "fw")
    fc_b = numpy_helper.from_array(RNG.standard_normal(10).astype(np.float32), "fb")
    nodes = [n1, helper.make_node("Relu", ["c1"], ["r1"]), n2, helper.make_node("Add", ["c2", "r1"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]), helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "fw", "fb"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w1, w2, fc_w, fc_b])
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    calib = [{"x": RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    m = onnx.load(dst)
    ops = {n.op_type for n in m.graph.node if n.domain == "com.microsoft"}
    assert {"QLinearAdd", "QLinearGlobalAveragePool", "QGemm"} <= ops, ops
    feeds = {"x": RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)}
    got, ref = _run(m, feeds, ["cpu"]), _ort(m, feeds)
    assert got.shape == ref.shape == (1, 10)
    np.testing.assert_allclose(got, ref, atol=0.05 * np.abs(ref).max())


def test_other_contrib_ops_are_a_one_line_error():
    x = _q((2, 3), np.uint8)
    node = helper.make_node("QLinearSoftmax", ["x", "s", "z", "s", "z"], ["y"], domain="com.microsoft", axis=-1,
                            opset=13)
    m = _model([node], {"x": (x, TensorProto.UINT8)}, "y", [2, 3], TensorProto.UINT8,
               {"s": np.float32(0.1), "z": np.uint8(0)})
    with pytest.raises(TccError) as e:
        tcc.compile(m)
    msg = str(e.value)
    assert "\n" not in msg and "QLinearSoftmax" in msg and "com.microsoft" in msg and "QLinearAdd" in msg, msg


@pytest.mark.parametrize("node,message", [
    (helper.make_node("QLinearAdd", ["x", "s", "z", "x", "s", "z", "s", "z"], ["y", "w"], domain="com.microsoft"),
     "takes one output, has 2"),
    (helper.make_node("QLinearAdd", ["x", "s", "z", "x", "s", "z", "s", "z"], ["y"], domain="com.microsoft", foo=1),
     "unknown attribute"),
    (helper.make_node("QLinearSigmoid", ["x"], ["y"], domain="com.microsoft"), "the output scale is missing"),
    (helper.make_node("QLinearConcat", ["s", "z", "x", "s"], ["y"], domain="com.microsoft", axis=0),
     "QLinearConcat takes Y_scale"),
    (helper.make_node("QLinearGlobalAveragePool", ["x", "s", "z", "s", "z"], ["y"], domain="com.microsoft",
                      channels_last=2), "channels_last must be 0 or 1"),
    (helper.make_node("QLinearAveragePool", ["x", "s", "z", "s", "z"], ["y"], domain="com.microsoft",
                      kernel_shape=3, channels_last=1), "invalid onnxruntime quantized op"),
    (helper.make_node("QGemm", ["x"], ["y"], domain="com.microsoft"), "A, B or a scale is missing")])
def test_malformed_contrib_nodes_are_a_one_line_error(node, message):
    x = _q((1, 2, 4, 4), np.uint8)
    m = _model([node], {"x": (x, TensorProto.UINT8)}, "y", [1, 2, 4, 4], TensorProto.UINT8,
               {"s": np.float32(0.1), "z": np.uint8(0)})
    with pytest.raises(TccError) as e:
        tcc.compile(m)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
