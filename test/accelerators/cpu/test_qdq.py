"""QuantizeLinear -> DequantizeLinear pairs on activations (the QDQ format of
onnxruntime.quantization) become float32 elementwise ops at compile time
(dialects/transforms/qdq.py), so the cpu accelerator runs them in its fused
loops: bit-exact against onnx.reference on fresh random data with values
exactly at the .5 rounding ties and beyond the integer range, int8 and
uint8, on the cpu accelerator and on the host path."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tcc

from .helpers import c_source_of, cpu_steps, host_steps

RNG = np.random.default_rng()
QTYPES = {"uint8": (TensorProto.UINT8, np.uint8), "int8": (TensorProto.INT8, np.int8)}


def _qdq_model(shape, qtype, s1, z1, s2=None, z2=None, relu=False, q_output=False, axis_scale=None):
    """x -> Q(s1, z1) -> DQ(s2, z2) [-> Relu -> Q -> DQ] -> y; `axis_scale`: a
    per-channel scale instead (not rewritten: the host path)."""
    tp, npt = QTYPES[qtype]
    s2 = s1 if s2 is None else s2
    z2 = z1 if z2 is None else z2
    if axis_scale is not None:
        s1 = s2 = axis_scale
        z1 = z2 = np.zeros(axis_scale.shape, npt)
    inits = [numpy_helper.from_array(np.asarray(v, t), n)
             for v, t, n in [(s1, np.float32, "s1"), (z1, npt, "z1"), (s2, np.float32, "s2"), (z2, npt, "z2")]]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z1"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s2", "z2"], ["d"])]
    last = "d"
    if relu:
        nodes += [helper.make_node("Relu", ["d"], ["r"]),
                  helper.make_node("QuantizeLinear", ["r", "s1", "z1"], ["q2"]),
                  helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["d2"])]
        last = "d2"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)]
    if q_output:
        outputs.append(helper.make_tensor_value_info("q", tp, shape))
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def _pair_np(v, s, z, lo, hi):
    """numpy's QuantizeLinear -> DequantizeLinear in f32, NaN to qmin."""
    q = np.rint(v.astype(np.float32) / np.float32(s)).astype(np.float64) + z
    q = np.where(np.isnan(q), lo, np.clip(q, lo, hi))
    return ((q - z) * np.float32(s)).astype(np.float32)


def _inputs(shape, s, z, qtype):
    """Normal values over about the integer range, a quarter of them exactly
    at ties (k + 0.5) * s (exact in f32 for the power-of-two scales), and a
    tenth beyond the range on both sides (saturation)."""
    lo, hi = np.iinfo(QTYPES[qtype][1]).min, np.iinfo(QTYPES[qtype][1]).max
    n = int(np.prod(shape))
    q = RNG.standard_normal(n) * (hi - lo) / 4 - z
    ties = RNG.random(n) < 0.25
    q[ties] = np.floor(q[ties]) + 0.5
    far = RNG.random(n) < 0.1
    q[far] = RNG.choice([-1, 1], far.sum()) * RNG.uniform(hi - lo, 4 * (hi - lo), far.sum())
    return (q * np.float32(s)).astype(np.float32).reshape(shape)


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


def _check(m, feeds, maccel, all_cpu):
    ref = ReferenceEvaluator(m).run(None, feeds)
    sess = tcc.load(tcc.compile(m, maccel=maccel))
    ours = sess.run(feeds)
    if all_cpu:
        assert cpu_steps(sess) and not host_steps(sess), sess.manifest["plan"]
    for a, b in zip(ours, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
        if a.dtype == np.float32:
            # bit for bit, the sign of zero included
            mismatch = np.flatnonzero(_bits(a) != _bits(b))
            assert mismatch.size == 0, (mismatch[:5], a.ravel()[mismatch[:5]], b.ravel()[mismatch[:5]],
                                        feeds["x"].ravel()[mismatch[:5]])
        else:
            np.testing.assert_array_equal(a, b)
    return sess


@pytest.mark.parametrize("maccel", [["cpu"], []], ids=["cpu", "host"])
@pytest.mark.parametrize("qtype", ["uint8", "int8"])
@pytest.mark.parametrize("scale", ["pow2", "random"])
def test_qdq_pair_is_bit_exact(maccel, qtype, scale):
    s = np.float32(2.0 ** -RNG.integers(2, 8)) if scale == "pow2" else np.float32(RNG.uniform(0.001, 0.1))
    z = int(RNG.integers(0, 256)) if qtype == "uint8" else int(RNG.integers(-128, 128))
    shape = [2, 3, 17, 19]
    m = _qdq_model(shape, qtype, s, z, relu=True)
    _check(m, {"x": _inputs(shape, s, z, qtype)}, maccel, all_cpu=bool(maccel))


@pytest.mark.parametrize("maccel", [["cpu"], []], ids=["cpu", "host"])
@pytest.mark.parametrize("qtype", ["uint8", "int8"])
def test_qdq_pair_special_values(maccel, qtype):
    """NaN gives qmin and infinities and values past int32 saturate, as
    QuantizeLinear alone gives them (and onnxruntime does; onnx.reference's
    cast of rint(x / s) to int32 is undefined there): the rewritten pair's
    Clip sends NaN to its lower bound (the onnx dialect's NAN_TO_MIN),
    where an ONNX Clip keeps NaN. numpy is the reference, bit for bit."""
    lo, hi = np.iinfo(QTYPES[qtype][1]).min, np.iinfo(QTYPES[qtype][1]).max
    s = np.float32(RNG.uniform(0.01, 0.1))
    z = int(RNG.integers(lo, hi + 1))
    special = [np.nan, -np.nan, np.inf, -np.inf, 3e9, -3e9, 1e30, -1e30, 0.0, -0.0]
    x = np.concatenate([special, RNG.standard_normal(64 - len(special)) * 10]).astype(np.float32)
    x = RNG.permutation(x).reshape(4, 16)

    want = _pair_np(np.maximum(_pair_np(x, s, z, lo, hi), np.float32(0)), s, z, lo, hi)  # Relu between the pairs
    sess = tcc.load(tcc.compile(_qdq_model([4, 16], qtype, s, z, relu=True), maccel=maccel))
    got = sess.run({"x": x})[0]
    mismatch = np.flatnonzero(_bits(got) != _bits(want))
    assert mismatch.size == 0, (x.ravel()[mismatch[:5]], got.ravel()[mismatch[:5]], want.ravel()[mismatch[:5]])


@pytest.mark.parametrize("qtype", ["uint8", "int8"])
def test_qdq_pair_with_other_dequantize_parameters(qtype):
    """DequantizeLinear's scale and zero point need not be QuantizeLinear's."""
    s1, s2 = np.float32(RNG.uniform(0.01, 0.1)), np.float32(RNG.uniform(0.01, 0.1))
    z1, z2 = (5, 200) if qtype == "uint8" else (-7, 30)
    shape = [64, 33]
    m = _qdq_model(shape, qtype, s1, z1, s2, z2)
    _check(m, {"x": _inputs(shape, s1, z1, qtype)}, ["cpu"], all_cpu=True)


def test_quantized_tensor_used_elsewhere_stays():
    """A QuantizeLinear whose integers are a graph output stays (on the host);
    its DequantizeLinear still becomes float32 ops."""
    shape = [4, 50]
    s, z = np.float32(RNG.uniform(0.01, 0.1)), 100
    m = _qdq_model(shape, "uint8", s, z, q_output=True)
    _check(m, {"x": _inputs(shape, s, z, "uint8")}, ["cpu"], all_cpu=False)


def test_per_channel_pair_is_left_to_the_host():
    """Per-channel scales are not rewritten (the pattern takes per-tensor
    ones); the host lowering still computes them exactly."""
    shape = [2, 4, 8]
    scales = RNG.uniform(0.01, 0.1, 4).astype(np.float32)
    m = _qdq_model(shape, "int8", None, None, axis_scale=scales)
    feeds = {"x": (RNG.standard_normal(shape) * 3).astype(np.float32)}
    sess = _check(m, feeds, ["cpu"], all_cpu=False)
    assert not cpu_steps(sess), sess.manifest["plan"]


def _qdq_matmul_model(m, k, n, qtype, wtype, per_column, batch=()):
    """x -> Q -> DQ -> MatMul(DQ(W)) -> y, as quantize_static's QDQ format
    writes it: W a constant 8-bit [K, N], its scale (and zero point) per
    tensor or per column (axis 1)."""
    tp, npt = QTYPES[qtype]
    wtp, wnp = QTYPES[wtype]
    lo, hi = np.iinfo(wnp).min, np.iinfo(wnp).max
    w = RNG.integers(lo, hi + 1, (k, n)).astype(wnp)
    shape = (n,) if per_column else ()
    sw = RNG.uniform(0.001, 0.01, shape).astype(np.float32)
    zw = RNG.integers(lo // 4, hi // 4 + 1, shape).astype(wnp)
    sx = np.float32(RNG.uniform(0.01, 0.05))
    zx = np.asarray(RNG.integers(np.iinfo(npt).min // 2, np.iinfo(npt).max // 2 + 1), npt)
    inits = [numpy_helper.from_array(np.asarray(v), nm) for v, nm in
             [(w, "w"), (sw, "sw"), (zw, "zw"), (np.asarray(sx), "sx"), (zx, "zx")]]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "sx", "zx"], ["d"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=1),
             helper.make_node("MatMul", ["d", "wd"], ["y"])]
    xs, ys = tuple(batch) + (m, k), tuple(batch) + (m, n)
    g = helper.make_graph(nodes, "qdq_mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ys)], inits)
    mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    mdl.ir_version = 10
    onnx.checker.check_model(mdl)
    x = RNG.standard_normal(xs).astype(np.float32) * sx * 40
    # the float model's value: sum((q - zx) sx (w - zw) sw) = sx sw (the integer sum), in float64
    q = np.clip(np.rint(x / sx) + zx, np.iinfo(npt).min, np.iinfo(npt).max).astype(np.int64)
    exact = ((q - zx) @ (w.astype(np.int64) - zw)) * (np.float64(sx) * sw.astype(np.float64))
    return mdl, x, exact


def _integer_path(monkeypatch, isa, kind="matmul"):
    """Set TCC_CPU_ISA; whether qdq-to-integer turns a QDQ `kind` ("matmul",
    "conv", or "small-conv": of at most qdq.AVX2_CONV_POSITIONS outputs a
    channel) into integers then: matmuls and convolutions of small images
    from AVX2 on, all convolutions with VNNI (this CPU's features decide;
    CI's may have either). The size floor (qdq.MIN_MACS) is lifted: these
    models are small."""
    from tcc.dialects.conversions.graph_to_loop.quantization.quantized_linear import (integer_qdq_kinds,
                                                                                       vnni_target)
    from tcc.dialects.conversions.loop_to_native.target import host_features
    from tcc.dialects.transforms import qdq
    monkeypatch.setenv("TCC_CPU_ISA", isa)
    monkeypatch.setattr(qdq, "MIN_MACS", 0)
    kinds = integer_qdq_kinds()
    # the rule itself, spelled out against the CPU's features
    avx512vnni = {"avx512vnni", "avx512bw"} <= host_features() and isa in ("", "avx512")
    assert kinds == ({"matmul", "conv", "pw-dw"} if vnni_target() and avx512vnni else {"matmul", "conv"} if vnni_target()
                     else {"matmul", "small-conv"} if isa != "generic" and "avx2" in host_features() else set())
    return kind in kinds


@pytest.mark.parametrize("isa", ["", "avx2", "generic"])
@pytest.mark.parametrize("maccel", [["cpu"], ["host"]])
@pytest.mark.parametrize("qtype,wtype,per_column,batch", [
    ("uint8", "int8", True, ()), ("int8", "int8", False, (2,)), ("uint8", "uint8", False, ()),
    ("int8", "uint8", True, (2, 3))])
def test_qdq_matmul_runs_on_the_int8_kernel(monkeypatch, qtype, wtype, per_column, batch, maccel, isa):
    """On an AVX2 or VNNI target, QDQ MatMuls with constant 8-bit weights
    become MatMulInteger (qdq.QdqMatMulToInteger): the exact integer sum
    scaled once, so within a few f32 roundings of the float model's exact
    value, element by element (a float GEMM, rounding at every add, is not:
    1e-6 relative fails on its cancellations). At TCC_CPU_ISA=generic they
    stay float MatMuls, to f32 GEMM accuracy."""
    from tcc.driver.options import CompileOptions
    from tcc.driver.pipeline import CompilePipeline
    integer = _integer_path(monkeypatch, isa)
    mdl, x, exact = _qdq_matmul_model(37, 300, 70, qtype, wtype, per_column, batch)
    pipe = CompilePipeline(CompileOptions(maccel=[a for a in maccel if a != "host"]))
    ops = {o.name for o in pipe.import_and_optimize(mdl).walk()}
    assert ("onnx.MatMulInteger" in ops) is integer and ("onnx.MatMul" in ops) is not integer, sorted(ops)
    y = tcc.load(tcc.compile(mdl, maccel=maccel)).run({"x": x})[0]
    if integer:
        np.testing.assert_allclose(y, exact, rtol=1e-6, atol=1e-30)
    else:
        np.testing.assert_allclose(y, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())


def test_qdq_matmul_stays_float_for_a_device_of_its_own(monkeypatch):
    """A GPU target keeps the float MatMul (its own GEMMs; MatMulInteger
    would be a host step between its partitions)."""
    from tcc.driver.options import CompileOptions
    from tcc.driver.pipeline import CompilePipeline
    vnni = _integer_path(monkeypatch, "")
    mdl, _, _ = _qdq_matmul_model(5, 16, 8, "uint8", "int8", True)
    for maccel, integer in ((["gpu"], False), (["gpu", "cpu"], False), (["cpu"], vnni), ([], vnni)):
        pipe = CompilePipeline(CompileOptions(maccel=maccel))
        assert bool(pipe.integer_qdq) is integer, maccel
        ops = {o.name for o in pipe.import_and_optimize(mdl).walk()}
        assert ("onnx.MatMulInteger" in ops) is integer and ("onnx.MatMul" in ops) is not integer, (maccel, ops)


def test_small_qdq_matmuls_stay_float(monkeypatch):
    """Below qdq.MIN_MACS multiply-adds the integer form's extra steps cost
    more than its products save: the MatMul stays float, even on VNNI."""
    from tcc.dialects.transforms import qdq
    from tcc.driver.options import CompileOptions
    from tcc.driver.pipeline import CompilePipeline
    monkeypatch.setenv("TCC_CPU_ISA", "")
    mdl, _, _ = _qdq_matmul_model(5, 16, 8, "uint8", "int8", True)
    for floor, integer in ((5 * 16 * 8 + 1, False), (5 * 16 * 8, True)):
        monkeypatch.setattr(qdq, "MIN_MACS", floor)
        pipe = CompilePipeline(CompileOptions(maccel=["cpu"]))
        ops = {o.name for o in pipe.import_and_optimize(mdl).walk()}
        assert ("onnx.MatMulInteger" in ops) is (integer and bool(pipe.integer_qdq)), (floor, ops)


@pytest.mark.parametrize("isa", ["", "avx2"])
@pytest.mark.parametrize("maccel", [["cpu"], ["host"]])
@pytest.mark.parametrize("qtype,per_channel,attrs,bias,group,hw,k", [
    ("uint8", True, {"pads": [1, 1, 1, 1]}, True, 1, (12, 9), 3),
    ("int8", False, {"strides": [2, 2], "pads": [0, 1, 2, 0]}, False, 1, (12, 9), 3),
    ("uint8", True, {"dilations": [2, 1]}, True, 2, (12, 9), 3),
    ("uint8", False, {"pads": [1, 1, 1, 1]}, True, 1, (31, 29), 3),
    ("int8", True, {}, True, 1, (31, 29), 1)])
def test_qdq_conv_runs_on_the_int8_kernel(monkeypatch, qtype, per_channel, attrs, bias, group, hw, k, maccel, isa):
    """On a VNNI target, QDQ Convs with constant int8 weights (per output
    channel or per tensor) become ConvInteger on tcc_conv_i8, the bias
    added after; on AVX2 alone (TCC_CPU_ISA=avx2 here, an AVX2 CPU in CI)
    only those of at most qdq.AVX2_CONV_POSITIONS outputs a channel (12x9,
    not 31x29), but 1x1s of stride 1 without pads of any image (the
    driver's pw-max-positions=0: gemm_int.c's NCHW path); a grouped one
    keeps the float path. Against the float model's value in float64
    (onnx.reference), to a few f32 roundings."""
    from tcc.dialects.transforms.qdq import AVX2_CONV_POSITIONS
    assert 12 * 9 <= AVX2_CONV_POSITIONS < 31 * 29
    pointwise = k == 1 and not attrs
    small = _integer_path(monkeypatch, isa, "small-conv") and (hw[0] * hw[1] <= AVX2_CONV_POSITIONS or pointwise)
    integer = (_integer_path(monkeypatch, isa, "conv") or small) and group == 1
    from onnx.reference import ReferenceEvaluator
    from tcc.driver.options import CompileOptions
    from tcc.driver.pipeline import CompilePipeline
    tp, npt = QTYPES[qtype]
    c, m = (8, 10) if k == 3 else (64, 10)  # 72 or 64 products an output: from qdq.MIN_CONV_DEPTH on
    w = RNG.integers(-127, 128, (m, c // group, k, k)).astype(np.int8)
    sw = RNG.uniform(0.001, 0.01, (m,) if per_channel else ()).astype(np.float32)
    zw = np.zeros(sw.shape, np.int8)
    sx = np.float32(0.03)
    zx = np.asarray(RNG.integers(np.iinfo(npt).min // 2, np.iinfo(npt).max // 2 + 1), npt)
    b = RNG.standard_normal(m).astype(np.float32)
    inits = [numpy_helper.from_array(np.asarray(v), nm) for v, nm in
             [(w, "w"), (sw, "sw"), (zw, "zw"), (np.asarray(sx), "sx"), (zx, "zx"), (b, "b")]]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "sx", "zx"], ["d"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
             helper.make_node("Conv", ["d", "wd"] + (["b"] if bias else []), ["y"], group=group, **attrs)]
    xs = (2, c) + hw
    g = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    mdl.ir_version = 10
    x = RNG.standard_normal(xs).astype(np.float32) * sx * 40
    # the float model in float64: its dequantized operands are exact there
    qx = np.clip(np.rint(x / sx) + zx, np.iinfo(npt).min, np.iinfo(npt).max)
    dx = (qx - zx) * np.float64(sx)
    dw = (w.astype(np.float64) - zw.reshape(-1, 1, 1, 1) if per_channel else w - zw.astype(np.float64)) * \
        (sw.astype(np.float64).reshape(-1, 1, 1, 1) if per_channel else np.float64(sw))
    conv = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], group=group, **attrs)
    g64 = helper.make_graph([conv], "f64", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, xs)],
                            [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
                            [numpy_helper.from_array(dw, "w"), numpy_helper.from_array(b.astype(np.float64), "b")])
    exact = ReferenceEvaluator(helper.make_model(g64, opset_imports=[helper.make_opsetid("", 19)])).run(None, {"x": dx})[0]
    pipe = CompilePipeline(CompileOptions(maccel=[a for a in maccel if a != "host"]))
    ops = {o.name for o in pipe.import_and_optimize(mdl).walk()}
    assert ("onnx.ConvInteger" in ops) is integer, sorted(ops)
    y = tcc.load(tcc.compile(mdl, maccel=maccel)).run({"x": x})[0]
    np.testing.assert_allclose(y, exact, rtol=1e-6, atol=1e-6 * np.abs(exact).max())


@pytest.mark.parametrize("isa", ["", "avx2"])
def test_shallow_qdq_convs_stay_float(monkeypatch, isa):
    """A QDQ Conv of fewer than qdq.MIN_CONV_DEPTH products an output (a
    stem's 3 channels x 3 x 3) stays float where a deeper one would go to
    integers; from the floor on it goes."""
    from tcc.dialects.transforms import qdq
    from tcc.driver.options import CompileOptions
    from tcc.driver.pipeline import CompilePipeline
    integer = _integer_path(monkeypatch, isa, "small-conv") or _integer_path(monkeypatch, isa, "conv")
    sx, zx = np.float32(0.03), np.asarray(128, np.uint8)
    w = RNG.integers(-127, 128, (16, 3, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(np.asarray(v), nm) for v, nm in
             [(w, "w"), (np.float32(0.01), "sw"), (np.asarray(sx), "sx"), (zx, "zx")]]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "sx", "zx"], ["d"]),
             helper.make_node("DequantizeLinear", ["w", "sw"], ["wd"]),
             helper.make_node("Conv", ["d", "wd"], ["y"], pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 12, 12))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    mdl.ir_version = 10
    assert 27 < qdq.MIN_CONV_DEPTH
    for floor, want in ((qdq.MIN_CONV_DEPTH, False), (28, False), (27, integer)):
        monkeypatch.setattr(qdq, "MIN_CONV_DEPTH", floor)
        ops = {o.name for o in CompilePipeline(CompileOptions(maccel=["cpu"])).import_and_optimize(mdl).walk()}
        assert ("onnx.ConvInteger" in ops) is want, (floor, sorted(ops))


@pytest.mark.parametrize("isa", ["", "avx2"])
@pytest.mark.parametrize("trans_b,per_channel,bias", [(1, True, True), (0, False, True), (1, False, False)])
def test_qdq_gemm_runs_on_the_int8_kernel(monkeypatch, trans_b, per_channel, bias, isa):
    """An exporter's Linear on 2-D activations, QDQ: Gemm with transB (W
    [N, K], per output channel: axis 0) or without (W [K, N], axis 1),
    alpha and a C, on an AVX2 or VNNI target becomes MatMulInteger on W transposed
    at compile time; against the integer sum scaled in float64 plus C."""
    from tcc.driver.options import CompileOptions
    from tcc.driver.pipeline import CompilePipeline
    integer = _integer_path(monkeypatch, isa)
    m, k, n, alpha = 19, 200, 45, 0.75
    w = RNG.integers(-127, 128, (n, k) if trans_b else (k, n)).astype(np.int8)
    sw = RNG.uniform(0.001, 0.01, (n,) if per_channel else ()).astype(np.float32)
    zw = np.zeros(sw.shape, np.int8)
    sx, zx = np.float32(0.02), np.asarray(128, np.uint8)
    c = RNG.standard_normal(n).astype(np.float32)
    inits = [numpy_helper.from_array(np.asarray(v), nm) for v, nm in
             [(w, "w"), (sw, "sw"), (zw, "zw"), (np.asarray(sx), "sx"), (zx, "zx"), (c, "c")]]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "sx", "zx"], ["d"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0 if trans_b else 1),
             helper.make_node("Gemm", ["d", "wd"] + (["c"] if bias else []), ["y"], transB=trans_b, alpha=alpha)]
    g = helper.make_graph(nodes, "qdq_gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (m, k))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (m, n))], inits)
    mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    mdl.ir_version = 10
    x = RNG.standard_normal((m, k)).astype(np.float32)
    q = np.clip(np.rint(x / sx) + 128, 0, 255).astype(np.int64)
    wk = (w.T if trans_b else w).astype(np.int64)
    exact = ((q - 128) @ wk) * (np.float64(sx) * sw.astype(np.float64) * alpha) + (c if bias else 0)
    pipe = CompilePipeline(CompileOptions(maccel=["cpu"]))
    ops = {o.name for o in pipe.import_and_optimize(mdl).walk()}
    assert ("onnx.MatMulInteger" in ops) is integer and ("onnx.Gemm" in ops) is not integer, sorted(ops)
    y = tcc.load(tcc.compile(mdl, maccel=["cpu"])).run({"x": x})[0]
    np.testing.assert_allclose(y, exact, rtol=1e-6 if integer else 1e-5, atol=1e-5 * np.abs(exact).max())



# (C, M, H, W, Conv attrs): a pointwise, a dense 3x3, depthwise ones of
# stride 1 and 2, a pointwise read only by a depthwise one (conv_pw_dw) and a
# depthwise one read only by a pointwise one (conv_dw_pw), a 3x3 on an image
# narrower than a vector (rows stored, then the epilogue's pass: with the
# residual, cv_store_rows), strided ones (a 3x3 of stride 9: the im2col GEMM,
# whose epilogue has no pair: the pass after it)
_EPILOGUE_CONVS = {
    "pointwise": [(8, 24, 13, 11, {})],
    "dense3x3": [(6, 10, 9, 12, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})],
    "depthwise": [(16, 16, 14, 10, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 16})],
    "depthwise_s2": [(16, 16, 15, 14, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 16,
                                       "strides": [2, 2]})],
    "pw_dw": [(8, 32, 14, 12, {}), (32, 32, 14, 12, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 32})],
    "dw_pw": [(24, 24, 14, 12, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 24}), (24, 16, 14, 12, {})],
    "dense3x3_narrow": [(6, 10, 9, 5, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})],
    "strided_1x1": [(8, 16, 12, 12, {"strides": [9, 9]})],
    "strided_3x3": [(8, 16, 20, 20, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [9, 9]})],
}


# 63 * 2^-10: 1 / 63 is among the odd numbers below 256 whose f32 rounds
# farthest off, so x * (1 / s) misses ~47 % of the ties x / s hits exactly
_TIE_SCALE = np.float32(63 * 2.0 ** -10)


@pytest.mark.parametrize("qtype", ["uint8", "int8"])
@pytest.mark.parametrize("data", ["normal", "ties"])
@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
@pytest.mark.parametrize("kind", sorted(_EPILOGUE_CONVS))
def test_conv_takes_the_pair_as_its_epilogue(kind, residual, data, qtype):
    """A float Conv followed by a QDQ pair (quantize_static's QDQ format
    around a convolution the int8 kernels do not take) runs the pair in the
    convolution kernel's epilogue (TCC_ACT_QDQ8), with no pass of its own,
    and bit for bit as the pair's elementwise ops: each convolution's result
    is the same model's convolution without the pair, run layer by layer,
    with numpy's pair applied (NaN inputs included: qmin). With `ties`,
    inputs, weights, bias and residual are multiples of s / 2 and small
    integers, so every sum is exact and half the outputs fall on a rounding
    tie (half to even; a product by 1 / s in place of the division misses
    them)."""
    from .helpers import c_source_of
    lo, hi = np.iinfo(QTYPES[qtype][1]).min, np.iinfo(QTYPES[qtype][1]).max
    layers = _EPILOGUE_CONVS[kind]
    ties = data == "ties"
    half = _TIE_SCALE / np.float32(2)
    params = []
    for i, (c, mo, h, w, attrs) in enumerate(layers):
        wshape = (mo, c // attrs.get("group", 1), *attrs.get("kernel_shape", [1, 1]))
        if ties:
            wt = RNG.integers(-2, 3, wshape).astype(np.float32)
            b = (2 * RNG.integers(-10, 11, mo) + 1).astype(np.float32) * half  # odd: a tie where the sum is even
            s = _TIE_SCALE
        else:
            wt = (RNG.standard_normal(wshape) / np.sqrt(c)).astype(np.float32)
            b = RNG.standard_normal(mo).astype(np.float32) * 0.1
            s = np.float32(RNG.uniform(0.005, 0.02))
        z = int(RNG.integers(lo, hi + 1)) if qtype == "int8" else int(RNG.integers(0, 64))
        params.append((wt, b, s, z, attrs))
    c0, _, h0, w0, _ = layers[0]
    if ties:
        x = RNG.integers(-3, 4, (1, c0, h0, w0)).astype(np.float32) * half
    else:
        x = RNG.standard_normal((1, c0, h0, w0)).astype(np.float32)
    x.ravel()[RNG.choice(x.size, 3, replace=False)] = np.nan
    x[0, 1, 0, 0] = np.nan  # where every convolution reads

    def conv_model(layer, with_pair, res_shape):
        wt, b, s, z, attrs = params[layer]
        tp, npt = QTYPES[qtype]
        inits = [numpy_helper.from_array(a, n) for a, n in
                 [(wt, "w"), (b, "b"), (np.asarray(s), "s"), (np.asarray(z, npt), "z")]]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs)]
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)]
        last = "c"
        if res_shape is not None:
            nodes.append(helper.make_node("Add", ["c", "r"], ["a"]))
            inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, res_shape))
            last = "a"
        if with_pair:
            nodes += [helper.make_node("QuantizeLinear", [last, "s", "z"], ["q"]),
                      helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"])]
            last = "d"
        nodes.append(helper.make_node("Identity", [last], ["y"]))
        return nodes, inputs, inits

    def build(layer_nodes, x_shape, res_shape):
        nodes, inits, inputs = [], [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
        cur = "x"
        for i, (ns, ins, its) in enumerate(layer_nodes):
            ren = {"x": cur, "r": "r", "y": f"y{i}"}
            for n in ns:
                nodes.append(helper.make_node(n.op_type, [ren.get(a, f"{a}{i}") for a in n.input],
                                              [ren.get(a, f"{a}{i}") for a in n.output],
                                              **{a.name: helper.get_attribute_value(a) for a in n.attribute}))
            for t in its:
                t.name = f"{t.name}{i}"
                inits.append(t)
            cur = f"y{i}"
        if res_shape is not None:
            inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, res_shape))
        g = helper.make_graph(nodes, "conv_qdq", inputs, [helper.make_tensor_value_info(cur, TensorProto.FLOAT, None)],
                              inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
        m.ir_version = 10
        return onnx.shape_inference.infer_shapes(m, strict_mode=True)

    # the residual joins the last convolution, of its output's shape
    y_shapes, cur_shape = [], x.shape
    for wt, b, s, z, attrs in params:
        probe = tcc.load(tcc.compile(build([conv_model(len(y_shapes), False, None)], cur_shape, None),
                                     maccel=["cpu"]))
        cur_shape = probe.run({"x": np.zeros(cur_shape, np.float32)})[0].shape
        y_shapes.append(cur_shape)
    r = None
    if residual:
        r = (RNG.integers(-9, 10, y_shapes[-1]).astype(np.float32) * half if ties else
             RNG.standard_normal(y_shapes[-1]).astype(np.float32))
    rs = y_shapes[-1] if residual else None
    last = len(params) - 1
    m = build([conv_model(i, True, rs if i == last else None) for i in range(len(params))], x.shape, rs)
    sess = tcc.load(tcc.compile(m, maccel=["cpu"]))
    assert cpu_steps(sess) and not host_steps(sess), sess.manifest["plan"]
    src = c_source_of(sess.path)
    assert src.count("TCC_ACT_QDQ8") == len(params), "each convolution takes its pair as its epilogue"
    feeds = {"x": x, **({"r": r} if residual else {})}
    got = sess.run(feeds)[0]

    cur = x
    for i, (wt, b, s, z, attrs) in enumerate(params):
        res = rs if i == last else None
        plain = tcc.load(tcc.compile(build([conv_model(i, False, res)], cur.shape, res), maccel=["cpu"]))
        y = plain.run({"x": cur, **({"r": r} if res is not None else {})})[0]
        assert i > 0 or np.isnan(y).any(), "the NaN inputs reach the first pair"
        if ties:
            t = y[np.isfinite(y)] / s
            # 30-65 % are ties on 32 outputs or more; at most one of 32 comes
            # by chance with p < 1e-6, none at all if the data misses them
            assert t.size >= 32 and np.mean(t - np.floor(t) == 0.5) > 0.05, "ties: the outputs fall on them"
        cur = _pair_np(y, s, z, lo, hi)
    want = cur
    mismatch = np.flatnonzero(_bits(got) != _bits(want))
    assert mismatch.size == 0, (mismatch[:5], got.ravel()[mismatch[:5]], want.ravel()[mismatch[:5]])


def _quantize_np(x, s, z, lo, hi):
    """QuantizeLinear in numpy's f32 ops (x / s, rounded half to even), NaN to
    qmin, as an int64 array."""
    v = x.astype(np.float32) / np.float32(s)
    q = np.rint(v.astype(np.float64)) + z
    return np.where(np.isnan(q), lo, np.clip(q, lo, hi)).astype(np.int64)


def _qdq_pointwise(w, sw, sx, zx, b, sy, zy, npt, bias, pair, out):
    """(initializers, nodes) of a QDQ 1x1 Conv of x as quantize_static writes
    it: x's pair, the weights' DequantizeLinear (per channel where sw is),
    the Conv [with bias b], [the pair (sy, zy) after it], into `out`."""
    inits = [numpy_helper.from_array(np.asarray(v), nm) for v, nm in
             [(w, "w"), (sw, "sw"), (np.zeros(np.shape(sw), np.int8), "zw"), (np.asarray(sx), "sx"),
              (np.asarray(zx, npt), "zx"), (b, "b"), (np.asarray(sy, np.float32), "sy"), (np.asarray(zy, npt), "zy")]]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "sx", "zx"], ["d"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
             helper.make_node("Conv", ["d", "wd"] + (["b"] if bias else []), ["c"])]
    if pair:
        nodes += [helper.make_node("QuantizeLinear", ["c", "sy", "zy"], ["cq"]),
                  helper.make_node("DequantizeLinear", ["cq", "sy", "zy"], [out])]
    else:
        nodes.append(helper.make_node("Identity", ["c"], [out]))
    return inits, nodes


@pytest.mark.parametrize("run_isa", ["", "avxvnni", "avx512bw", "avx2"])
@pytest.mark.parametrize("layout", [2, 3])
@pytest.mark.parametrize("qtype,per_channel,bias,pair,c,m,hw,scales", [
    ("uint8", True, True, True, 72, 37, (9, 11), "random"),
    ("int8", False, False, True, 66, 24, (7, 7), "pow2"),
    ("uint8", True, True, False, 64, 9, (16, 3), "random"),
    ("int8", True, True, True, 130, 70, (12, 20), "random")])
def test_pointwise_qdq_conv_runs_in_the_cpu_partition(monkeypatch, run_isa, layout, qtype, per_channel, bias, pair,
                                                      c, m, hw, scales):
    """A QDQ 1x1 Conv whose ConvInteger form (qdq-to-integer) the cpu
    accelerator takes whole as cpu.conv_q8 (the host runtime's tcc_conv_q8):
    QuantizeLinear -> ConvInteger -> Cast -> Mul, the bias Add and the
    quantize-dequantize pair after it, in the cpu partition with the
    convolution before it, no host step. Compiled as on a CPU with VNNI
    (the VNNI bytes, layout 2) or as an AVX2 CPU (TCC_CPU_ISA=avx2: the
    pair-safe bytes and their corrections, layout 3, here most of the
    weights), run as this CPU, as one with AVX-VNNI alone, with AVX-512
    and no VNNI, and with AVX2 alone: the NCHW path where the CPU has a
    tile for the layout (vpmaddubsw's for layout 3), else the quantize /
    tcc_conv_i8 / requantize passes. Bit for
    bit against numpy's f32 ops in the rewrite's order, NaN and infinities
    among the inputs; with power-of-two scales a sum in 128 is a rounding
    tie of the pair. Channel and position counts off the blocks' multiples,
    several chunks and channel groups."""
    import ctypes

    from tcc.dialects.conversions.graph_to_loop.quantization import quantized_linear
    from tcc.dialects.transforms import qdq

    from tcc.dialects.conversions.loop_to_native.target import host_features

    from ...lowering.test_newops_quantized_linear import _run_as
    feats = host_features()
    if layout == 3:
        if "avx2" not in feats:
            pytest.skip("layout 3 is packed for AVX2 CPUs")
        monkeypatch.setenv("TCC_CPU_ISA", "avx2")
        monkeypatch.setattr(quantized_linear, "FIX_SHARE_POINTWISE", 1.0)  # layout 3 however many corrections
    else:
        monkeypatch.setattr(quantized_linear, "vnni_target", lambda: True)
    monkeypatch.setattr(qdq, "MIN_MACS", 0)
    tp, npt = QTYPES[qtype]
    lo, hi = int(np.iinfo(npt).min), int(np.iinfo(npt).max)
    w = RNG.integers(-127, 128, (m, c, 1, 1)).astype(np.int8)
    if scales == "pow2":  # sx * sw / sy = 2^-7: ties where the sum is 64 mod 128
        sx, sw, sy = np.float32(2.0 ** -5), np.full(m if per_channel else (), 2.0 ** -6, np.float32), \
            np.float32(2.0 ** -4)
    else:
        sx, sw = np.float32(RNG.uniform(0.01, 0.05)), RNG.uniform(0.001, 0.01, m if per_channel else ()).astype(
            np.float32)
        sy = None
    zx = int(RNG.integers(lo // 2, hi // 2 + 1))
    b = RNG.standard_normal(m).astype(np.float32)
    h, wd = hw
    x = (RNG.standard_normal((2, c, h, wd)) * 40 * sx).astype(np.float32)
    ties = RNG.random(x.shape) < 0.25  # x / sx a tie of QuantizeLinear's rounding (exact with sx a power of two)
    x[ties] = ((np.floor(x[ties] / sx) + 0.5) * sx).astype(np.float32)
    x.ravel()[RNG.choice(x.size, 6, replace=False)] = [np.nan, np.inf, -np.inf, np.nan, 1e30, -1e30]

    # the reference, op by op in f32: QuantizeLinear, the exact int32 sum,
    # Cast, Mul by s_x * s_w (one f32 product, as qdq.py makes it), the bias
    qx = _quantize_np(x, sx, zx, lo, hi)
    acc = np.einsum("nchw,mc->nmhw", qx - zx, w[:, :, 0, 0].astype(np.int64)).astype(np.int32)
    scale = np.broadcast_to(np.float32(sx) * sw, (m,)).astype(np.float32)
    f = acc.astype(np.float32) * scale[None, :, None, None]
    if bias:
        f = f + b[None, :, None, None]
    if sy is None:  # y's scale: the outputs over ~100 steps, past both ends at the tails
        sy = np.float32(np.std(f) / 40)
    zy = int(RNG.integers(lo // 4, hi // 4 + 1))
    want = _pair_np(f, sy, zy, lo, hi) if pair else f
    if scales == "pow2":
        assert (acc % 128 == 64).sum() >= 8, "ties of the pair"

    inits, nodes = _qdq_pointwise(w, sw, sx, zx, b, sy, zy, npt, bias, pair, "y")
    g = helper.make_graph(nodes, "qdq_pw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    mdl.ir_version = 10
    sess = tcc.load(tcc.compile(mdl, maccel=["cpu"], cache=False))
    assert cpu_steps(sess) and not host_steps(sess), sess.manifest["plan"]
    assert c_source_of(sess.path).count("tcc_conv_q8(") == 1
    with _run_as(monkeypatch, run_isa) as lib:
        lib.tcc_conv_i8_path.restype = ctypes.c_char_p
        p = np.array([2, c, h, wd, m, 1, 1, h, wd, 1, 1, 0, 0, 1, 1, int(lo < 0), 1, 1, 0, layout], np.int64)
        path = lib.tcc_conv_i8_path(p.ctypes.data_as(ctypes.c_void_p)).decode()
        got = sess.run({"x": x})[0]
    vnni = "pointwise-vnni" if {"avx512vnni", "avx512bw"} <= feats else \
        "pointwise-avxvnni" if "avxvnni" in feats else None
    if layout == 2:
        want_path = {"": vnni, "avxvnni": "pointwise-avxvnni"}.get(run_isa) or "im2col"
    else:
        want_path = {"avxvnni": "pointwise-avxvnni", "avx512bw": "pointwise-avx512bw", "avx2": "pointwise-avx2"}.get(
            run_isa) or vnni or ("pointwise-avx512bw" if "avx512bw" in feats else "pointwise-avx2")
    assert path == want_path or (run_isa == "" and "amx-int8" in feats), (run_isa, path)  # AMX: its tiles
    mismatch = np.flatnonzero(_bits(got) != _bits(want))
    assert mismatch.size == 0, (mismatch.size, got.ravel()[mismatch[:5]], want.ravel()[mismatch[:5]])


@pytest.mark.parametrize("run", ["fused", "apart", "avx2-build"])
@pytest.mark.parametrize("qtype,bias,pair,c,m,nhw,stride,scales", [
    ("uint8", True, True, 24, 96, (2, 14, 14), 2, "pow2"),    # a shallow expansion: qdq's pw-min-depth
    ("int8", False, True, 66, 144, (2, 9, 11), 1, "ties"),    # 4.5 panels of 32: the last item's second half unused
    ("uint8", True, False, 70, 37, (2, 12, 20), 1, "random"),  # no pair between: the depthwise input any f32
    ("int8", True, True, 130, 200, (2, 7, 7), 2, "random"),
    ("uint8", True, True, 72, 96, (1, 7, 7), 1, "random")])   # 3 items on 2 threads, too few rows for bands
def test_qdq_expansion_and_depthwise_run_fused(monkeypatch, run, qtype, bias, pair, c, m, nhw, stride, scales):
    """A QDQ 1x1 Conv read only by a depthwise Conv (a quantized inverted
    residual block's expansion) becomes one cpu.conv_q8_dw: on the AVX-512
    build with VNNI the int8 sums are requantized into the depthwise
    kernel's buffer (conv_pwdw8.c), the expanded tensor never stored;
    "apart" forces tcc_conv_q8 into a buffer and the depthwise kernel after
    it (a CPU without VNNI), and the AVX2 build runs them apart through
    scratch. Two images (one), channel counts off the panels' multiples,
    two threads. The
    pointwise part bit for bit as numpy's f32 ops in the rewrite's order,
    and so the whole output: with the pair's scale a power of two the
    depthwise sums of its outputs with small integer weights are exact in
    any order; with another scale each channel's depthwise kernel has one
    tap, a power of two (no sum to order). "ties": the pair's scale 3 x 2^-6
    and the pointwise scale 3 x 2^-13 (no bias), so a sum of 64 mod 128 is
    a rounding tie of the pair that a product by its inexact reciprocal
    misses. Without the pair, to 1e-6 of the largest output."""
    import ctypes

    from tcc.accelerators.cpu import build
    from tcc.dialects.conversions.graph_to_loop.quantization import quantized_linear
    from tcc.dialects.conversions.loop_to_native.target import host_features
    from tcc.dialects.transforms import qdq
    isa = "avx2" if run == "avx2-build" else build.best_isa()
    if isa == "avx2" and "avx2" not in host_features():
        pytest.skip("this CPU cannot run the avx2 library")
    monkeypatch.setattr(quantized_linear, "vnni_target", lambda: True)
    monkeypatch.setattr(quantized_linear, "integer_qdq_kinds", lambda: frozenset({"matmul", "conv", "pw-dw"}))
    monkeypatch.setattr(qdq, "MIN_MACS", 0)
    tp, npt = QTYPES[qtype]
    lo, hi = int(np.iinfo(npt).min), int(np.iinfo(npt).max)
    w = RNG.integers(-127, 128, (m, c, 1, 1)).astype(np.int8)
    sx, sw = np.float32(RNG.uniform(0.01, 0.05)), RNG.uniform(0.001, 0.01, m).astype(np.float32)
    if scales == "ties":
        sx, sw = np.float32(2.0 ** -5), np.full(m, 3 * 2.0 ** -8, np.float32)
    zx = int(RNG.integers(lo // 2, hi // 2 + 1))
    b = RNG.standard_normal(m).astype(np.float32)
    n, h, wd = nhw
    x = (RNG.standard_normal((n, c, h, wd)) * 40 * sx).astype(np.float32)
    x.ravel()[RNG.choice(x.size, 4, replace=False)] = [np.nan, np.inf, -np.inf, 1e30]

    qx = _quantize_np(x, sx, zx, lo, hi)
    acc = np.einsum("nchw,mc->nmhw", qx - zx, w[:, :, 0, 0].astype(np.int64)).astype(np.int32)
    scale = (np.float32(sx) * sw).astype(np.float32)
    f = acc.astype(np.float32) * scale[None, :, None, None]
    if bias:
        f = f + b[None, :, None, None]
    sy = np.float32(np.std(f) / 40)  # the outputs over ~100 steps of the pair
    if scales == "pow2":
        sy = np.float32(2.0 ** np.round(np.log2(sy)))
    elif scales == "ties":
        sy = np.float32(3 * 2.0 ** -6)
        assert (acc % 128 == 64).sum() >= 32, "ties of the pair"
    zy = int(RNG.integers(lo // 4, hi // 4 + 1))
    mid = _pair_np(f, sy, zy, lo, hi) if pair else f
    if scales == "pow2" or not pair:
        wdw = RNG.integers(-4, 5, (m, 1, 3, 3)).astype(np.float32)
    else:  # one tap a channel: +-2^k at a random place
        wdw = np.zeros((m, 1, 3, 3), np.float32)
        tap = RNG.integers(0, 9, m)
        wdw.reshape(m, 9)[np.arange(m), tap] = RNG.choice([-1, 1], m) * 2.0 ** RNG.integers(-2, 3, m)
    bdw = (RNG.integers(-50, 50, m) * sy).astype(np.float32)
    padded = np.pad(mid.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (h - 1) // stride + 1, (wd - 1) // stride + 1
    want = np.zeros((n, m, oh, ow)) + bdw[None, :, None, None]
    for ki in range(3):
        for kj in range(3):
            want += padded[:, :, ki:ki + stride * oh:stride, kj:kj + stride * ow:stride] * wdw[None, :, 0, ki, kj,
                                                                                                  None, None]
    want = want.astype(np.float32)

    inits, nodes = _qdq_pointwise(w, sw, sx, zx, b, sy, zy, npt, bias, pair, "e")
    inits += [numpy_helper.from_array(wdw, "wdw"), numpy_helper.from_array(bdw, "bdw")]
    nodes.append(helper.make_node("Conv", ["e", "wdw", "bdw"], ["y"], group=m, pads=[1, 1, 1, 1],
                                  strides=[stride, stride]))
    g = helper.make_graph(nodes, "qdq_pw_dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    mdl.ir_version = 10
    sess = tcc.load(tcc.compile(mdl, maccel=["cpu"], cache=False, targets=[f"cpu -isa={isa}"]))
    assert cpu_steps(sess) and not host_steps(sess), sess.manifest["plan"]
    src = c_source_of(sess.path)
    if isa != "avx512" and c < qdq.MIN_CONV_DEPTH:
        # the driver keeps a shallow expansion float there (the float pair
        # fused beats the int8 1x1 apart): qdq's pw-min-depth only for avx512
        assert "tcc_conv_q8(" not in src and src.count("tcc_cpu_conv2d_pw_dw(") == 1, src
        got = sess.run({"x": x})[0]
        near = np.abs(got - want) <= 1e-5 * np.abs(want).max()
        assert np.mean(near) > 0.99, np.mean(near)  # a float sum at a tie of the pair moves a step
        return
    assert src.count("tcc_cpu_conv2d_q8_dw(" if isa == "avx512" else "tcc_conv_q8(") == 1, src
    lib = build.load_kernels(isa)
    lib.tcc_cpu_conv2d_q8_dw_path.restype = ctypes.c_char_p
    p = np.array([n, c, h, wd, m, 1, 1, h, wd, 1, 1, 0, 0, 1, 1, int(lo < 0), 1, 1, 0, 2], np.int64)
    pd = (ctypes.c_long * 18)(n, m, h, wd, m, 3, 3, oh, ow, stride, stride, 1, 1, 1, 1, 1, 1, m)
    was, threads = lib.tcc_cpu_conv2d_q8_dw_apart(int(run == "apart")), lib.tcc_cpu_num_threads()
    lib.tcc_cpu_set_num_threads(2)  # the items split over two threads, in bands of rows where they are few
    try:
        path = lib.tcc_cpu_conv2d_q8_dw_path(p.ctypes.data_as(ctypes.c_void_p), pd).decode()
        got = sess.run({"x": x})[0]
    finally:
        lib.tcc_cpu_conv2d_q8_dw_apart(was)
        lib.tcc_cpu_set_num_threads(threads)
    fused = run == "fused" and isa == "avx512" and {"avx512vnni", "avx512bw"} <= host_features()
    assert path == ("fused-vnni" if fused else "apart"), (run, isa, path)
    if pair:
        mismatch = np.flatnonzero(_bits(got) != _bits(want))
        assert mismatch.size == 0, (mismatch.size, got.ravel()[mismatch[:5]], want.ravel()[mismatch[:5]])
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())
