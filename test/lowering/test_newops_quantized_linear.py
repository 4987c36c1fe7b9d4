"""MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv on fresh random
8-bit data: the integer ops against int32 numpy / onnx.reference (exact on
every CPU: onnxruntime's u8 x s8 MatMulInteger saturates int16 pair sums on
AVX2 CPUs without VNNI), the requantizing ones against onnx.reference
(numpy; onnxruntime requantizes in float32 and may round a near-tie the
other way)."""
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import helper as h

from newops_helpers import RNG, check, lowered, model
from tcc.dialects.conversions.loop_to_native.jit import run_native
from tcc.dialects.loop.interpreter import run_loop_module


def q(shape, dt):
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max + 1, shape).astype(dt)


def scale(*shape, dt=np.float32):
    return (RNG.uniform(0.002, 0.05, shape)).astype(dt)


@pytest.mark.parametrize("ashape,bshape", [((5, 7), (7, 9)), ((2, 4, 6), (6, 3)), ((3, 1, 4, 5), (2, 5, 6)),
                                           ((6,), (6, 4))])
@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
def test_matmul_integer(ashape, bshape, adt, bdt):
    inits = {"az": q((), adt), "bz": q((), bdt)}

    def ref(a, b):
        return [np.matmul(a.astype(np.int32) - np.int32(inits["az"]), b.astype(np.int32) - np.int32(inits["bz"]))]

    check([h.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": q(ashape, adt), "b": q(bshape, bdt)},
          {"y": np.int32}, opset=10, initializers=inits, ref=ref)


def test_matmul_integer_per_row_and_column_zero_points():
    # onnx.reference cannot broadcast a per-row zero point: numpy is the reference here
    a, b, az, bz = q((4, 6), np.uint8), q((6, 5), np.uint8), q((4,), np.uint8), q((5,), np.uint8)
    m = model([h.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": a, "b": b}, {"y": np.int32},
              opset=10, initializers={"az": az, "bz": bz})
    want = (a.astype(np.int32) - az[:, None]) @ (b.astype(np.int32) - bz[None, :])
    mod = lowered(m)
    for got in (run_loop_module(mod, [a, b])[0], run_native(mod, [a, b])[0]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, {"group": 2, "dilations": [2, 1]}])
def test_conv_integer(attrs):
    g = attrs.get("group", 1)
    check([h.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)],
          {"x": q((2, 4, 7, 6), np.uint8)}, {"y": np.int32}, opset=10, ref="onnx",
          initializers={"w": q((6, 4 // g, 3, 3), np.uint8), "xz": q((), np.uint8), "wz": q((), np.uint8)})


@pytest.mark.parametrize("ashape,bshape,per_col", [((5, 7), (7, 9), False), ((2, 4, 6), (6, 3), True),
                                                   ((3, 4, 5), (3, 5, 6), False)])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("sdt", [np.float32, np.float16])
def test_qlinear_matmul(ashape, bshape, per_col, dt, sdt):
    n = bshape[-1]
    inits = {"sa": scale(dt=sdt), "za": q((), dt), "sb": scale(n, dt=sdt) if per_col else scale(dt=sdt),
             "zb": q((n,), dt) if per_col else q((), dt), "sy": scale(dt=sdt) * 20, "zy": q((), dt)}
    check([h.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])],
          {"a": q(ashape, dt), "b": q(bshape, dt)}, {"y": dt}, opset=21, ref="onnx", initializers=inits)


@pytest.mark.parametrize("attrs,per_channel,bias", [({}, False, False),
                                                    ({"pads": [1, 1, 1, 1], "strides": [2, 1]}, True, True),
                                                    ({"group": 2}, True, False)])
@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_conv(attrs, per_channel, bias, dt):
    g, m = attrs.get("group", 1), 4
    inits = {"sx": scale(), "zx": q((), dt), "w": q((m, 4 // g, 3, 3), dt),
             "sw": scale(m) if per_channel else scale(), "zw": np.zeros(m if per_channel else (), dt),
             "sy": scale() * 50, "zy": q((), dt)}
    ins = ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"]
    if bias:
        inits["b"] = RNG.integers(-5000, 5000, m).astype(np.int32)
        ins.append("b")
    check([h.make_node("QLinearConv", ins, ["y"], **attrs)], {"x": q((1, 4, 6, 5), dt)}, {"y": dt}, opset=10,
          ref="onnx", initializers=inits)


def _library_calls(mod, params=False):
    """The callees of the nests marked as runtime library calls (with
    `params`: (callee, its integer parameters))."""
    out = []

    def walk(op):
        spec = op.attributes.get("tcc.library_call")
        if spec is not None:
            callee = spec.value["callee"].value
            out.append((callee, spec.value["params"].value) if params else callee)
        for region in op.regions:
            for block in region.blocks:
                for o in block.ops:
                    walk(o)
    walk(mod.op if hasattr(mod, "op") else mod)
    return out


@pytest.mark.parametrize("lower_isa,run_isa", [("", ""), ("", "avx512"), ("", "avx2"), ("", "generic"),
                                               ("avx2", "avx2"), ("avx2", "generic")])
@pytest.mark.parametrize("adt,bdt,zb,rows", [(np.uint8, np.int8, "none", 6), (np.int8, np.int8, "small", 13),
                                             (np.int8, np.uint8, "column", 6), (np.uint8, np.uint8, "scalar", 1),
                                             (np.int8, np.int8, "scalar", 6)])
@pytest.mark.parametrize("b_input", [False, True])
def test_matmul_integer_kernel(monkeypatch, lower_isa, run_isa, adt, bdt, zb, rows, b_input):
    """8-bit products with a 2-D B run on runtime/native/gemm_int.c, B packed
    at compile time (a constant: as bytes for VNNI where B less its zero
    point fits int8 and the CPU has AVX-512 VNNI, unless TCC_CPU_ISA asks
    for less; else int16 pairs) or per call (an input), each layout run on
    each ISA path (TCC_CPU_ISA at run time picks the lesser ones: avx512
    keeps AMX out, where the CPU has it): odd K, N
    past a whole panel, A batched over a shared B, A's zero point a run-time
    input (DynamicQuantizeLinear's), B's none, one or one per column; int64
    numpy is the reference."""
    monkeypatch.setenv("TCC_CPU_ISA", lower_isa)
    a, b, az = q((3, rows, 67), adt), q((67, 45), bdt), q((), adt)
    if zb == "small":  # B less its zero point within int8: the VNNI layout
        b = (b // 2).astype(bdt)
    inits = {}
    bz = None if zb == "none" else q((45,) if zb == "column" else (), bdt)
    if zb == "small":
        bz = (q((), bdt) // 2).astype(bdt)
    if bz is not None:
        inits["bz"] = bz
    inputs = {"a": a, "az": az, "b": b} if b_input else {"a": a, "az": az}
    if not b_input:
        inits["b"] = b
    node = h.make_node("MatMulInteger", ["a", "b", "az"] + (["bz"] if bz is not None else []), ["y"])
    m = model([node], inputs, {"y": np.int32}, opset=10, initializers=inits)
    mod = lowered(m)
    monkeypatch.setenv("TCC_CPU_ISA", run_isa)
    # an input B is packed on every call: only from 8 rows (3 * rows) on
    assert _library_calls(mod) == ([] if b_input and 3 * rows < 8 else ["tcc_matmul_i8"])
    want = (a.astype(np.int64) - az.astype(np.int64)) @ (b.astype(np.int64) - (0 if bz is None else bz.astype(np.int64)))
    np.testing.assert_array_equal(run_native(mod, list(inputs.values()))[0], want)
    if run_isa == "":  # the nest (the semantics) agrees
        np.testing.assert_array_equal(run_loop_module(mod, list(inputs.values()))[0], want)


@pytest.mark.parametrize("run_isa", ["", "avx512", "avx2", "generic"])
@pytest.mark.parametrize("adt,bdt", [(np.uint8, np.int8), (np.int8, np.uint8)])
def test_matmul_integer_kernel_in_cache_chunks(monkeypatch, run_isa, adt, bdt):
    """A B of more than 256 KB is walked in chunks of panels (gemm_int.c's
    task_at): K 1100 makes a panel 70 KB, so N 133 is chunks of 3 and 2
    panels, the last panel 5 columns wide; 3 x 13 rows end in a partial row
    tile on every ISA's tile height. int64 numpy is the reference."""
    a, b, az, bz = q((3, 13, 1100), adt), q((1100, 133), bdt), q((), adt), q((), bdt)
    m = model([h.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": a, "az": az}, {"y": np.int32},
              opset=10, initializers={"b": b, "bz": bz})
    mod = lowered(m)
    monkeypatch.setenv("TCC_CPU_ISA", run_isa)
    assert _library_calls(mod) == ["tcc_matmul_i8"]
    want = (a.astype(np.int64) - az.astype(np.int64)) @ (b.astype(np.int64) - bz.astype(np.int64))
    np.testing.assert_array_equal(run_native(mod, [a, az])[0], want)


def test_matmul_integer_few_rows_of_an_input_b_stay_a_nest():
    """Packing a B that is no constant on every call would outweigh the
    products of fewer than 8 rows: no library call there."""
    m = model([h.make_node("MatMulInteger", ["a", "b"], ["y"])], {"a": q((4, 16), np.uint8), "b": q((16, 8), np.int8)},
              {"y": np.int32}, opset=10)
    assert _library_calls(lowered(m)) == []


@pytest.mark.parametrize("lower_isa,run_isa", [("", ""), ("", "avx512"), ("", "avx2"), ("avx2", "avx2"),
                                               ("avx2", "generic")])
@pytest.mark.parametrize("xdt,wdt,attrs,wz", [
    (np.uint8, np.int8, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, "none"),
    (np.uint8, np.int8, {"kernel_shape": [7, 7], "pads": [3, 2, 3, 2], "strides": [2, 2]}, "channel"),
    (np.int8, np.int8, {"kernel_shape": [1, 1], "strides": [2, 1]}, "scalar"),
    (np.uint8, np.uint8, {"kernel_shape": [3, 2], "dilations": [2, 1], "pads": [0, 1, 2, 0]}, "channel"),
    (np.int8, np.uint8, {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "dilations": [1, 2]}, "scalar")])
def test_conv_integer_kernel(monkeypatch, lower_isa, run_isa, xdt, wdt, attrs, wz):
    """ConvInteger with constant 8-bit weights, one group, runs on gemm_int.c's
    tcc_conv_i8 (the image gathered channels last into im2col rows, the
    weights packed here less their zero point, per output channel or one),
    each weight layout on each ISA path, as the matmul above: batch 2,
    padding, strides, dilations (the byte-wise gather), an odd channel
    count; onnx.reference is the reference, and the nest agrees."""
    from onnx.reference import ReferenceEvaluator
    monkeypatch.setenv("TCC_CPU_ISA", lower_isa)
    kh, kw = attrs["kernel_shape"]
    x, w, xz = q((2, 5, 11, 9), xdt), q((37, 5, kh, kw), wdt), q((), xdt)
    inits = {"w": w, "xz": xz}
    if wz != "none":
        inits["wz"] = q((37,) if wz == "channel" else (), wdt)
    node = h.make_node("ConvInteger", ["x", "w", "xz"] + (["wz"] if wz != "none" else []), ["y"], **attrs)
    m = model([node], {"x": x}, {"y": np.int32}, opset=10, initializers=inits)
    mod = lowered(m)
    monkeypatch.setenv("TCC_CPU_ISA", run_isa)
    assert _library_calls(mod) == ["tcc_conv_i8"]
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(run_native(mod, [x])[0], want)
    if run_isa == "":
        np.testing.assert_array_equal(run_loop_module(mod, [x])[0], want)


@pytest.mark.parametrize("run_isa", ["", "avx2", "generic"])
def test_qlinear_conv_kernel_adds_the_bias_per_output_channel(monkeypatch, run_isa):
    """QLinearConv's int32 bias is added as tcc_conv_i8 transposes its
    product out: 19 output channels (two blocks of 8 and a tail) and 7 x 9
    positions (blocks of 8 and a tail), on the vector and the scalar
    transposes; onnx.reference is the reference."""
    from onnx.reference import ReferenceEvaluator
    monkeypatch.setenv("TCC_CPU_ISA", "")
    m_out = 19
    inits = {"sx": scale(), "zx": q((), np.uint8), "w": q((m_out, 6, 3, 3), np.int8), "sw": scale(m_out),
             "zw": np.zeros(m_out, np.int8), "sy": scale() * 50, "zy": q((), np.uint8),
             "b": RNG.integers(-20000, 20000, m_out).astype(np.int32)}
    node = h.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["y"], pads=[1, 1, 1, 1])
    x = q((1, 6, 7, 9), np.uint8)
    m = model([node], {"x": x}, {"y": np.uint8}, opset=10, initializers=inits)
    mod = lowered(m)
    assert _library_calls(mod) == ["tcc_conv_i8"]
    monkeypatch.setenv("TCC_CPU_ISA", run_isa)
    np.testing.assert_array_equal(run_native(mod, [x])[0], ReferenceEvaluator(m).run(None, {"x": x})[0])


def _conv_i8_path(mod):
    """The way gemm_int.c's tcc_conv_i8 runs the module's one call now
    (tcc_conv_i8_path: "pointwise-vnni" or "im2col")."""
    import ctypes

    from tcc.dialects.conversions.graph_to_loop.kernels import CONV_I8_FIELDS
    from tcc.runtime import native
    (callee, values), = _library_calls(mod, params=True)
    params = np.array([int(getattr(v, "value", v)) for v in values], np.int64)
    assert callee == "tcc_conv_i8" and params.size == len(CONV_I8_FIELDS), (callee, params)
    lib = ctypes.CDLL(native.load())
    lib.tcc_conv_i8_path.restype = ctypes.c_char_p
    return lib.tcc_conv_i8_path(params.ctypes.data_as(ctypes.c_void_p)).decode()


@pytest.mark.parametrize("run_isa", ["", "avxvnni", "avx512bw", "avx2", "generic"])
@pytest.mark.parametrize("layout", [2, 3])
@pytest.mark.parametrize("c,m,hw,n,xdt,wz", [
    (7, 19, (5, 3), 2, np.uint8, "none"),       # 15 positions: one part vector; 19 channels: 8, 8, 3
    (13, 70, (14, 14), 1, np.int8, "channel"),  # 196 positions: two chunks; 70 channels: two groups
    (64, 40, (17, 1), 2, np.uint8, "scalar"),   # 17 positions: a vector and one lane
    (4, 8, (1, 1), 1, np.int8, "none"),         # one position
    (33, 96, (24, 24), 1, np.uint8, "channel")])
def test_pointwise_conv_integer_in_nchw(monkeypatch, run_isa, layout, c, m, hw, n, xdt, wz):
    """A 1x1 ConvInteger of stride 1 without pads: with AVX-512 VNNI (and
    no AMX) tcc_conv_i8 runs it in NCHW, positions in the vector lanes and
    each output channel's weights broadcast (gemm_int.c's conv_pw_vnni),
    so too in ymm with AVX-VNNI and no AVX-512 (as such a CPU:
    tcc_matmul_i8_hide). Layout 2 (the VNNI bytes, compiled on this CPU)
    runs through the channels-last image on a CPU without VNNI
    (tcc_matmul_i8_hide, TCC_CPU_ISA). Layout 3 (compiled as an AVX2 CPU:
    the pair-safe bytes and their corrections, here most of the weights
    past int8 or in unsafe pairs) runs in NCHW on every tile but AMX's and
    the generic one: vpmaddubsw's on AVX2 and AVX-512BW, vpdpbusd's where
    the CPU has VNNI. Channel counts that are no multiple of 4 or 8,
    positions that fill no vector, several chunks and channel groups,
    signed and unsigned x, weight zero points; onnx.reference is the
    reference."""
    from onnx.reference import ReferenceEvaluator

    from tcc.dialects.conversions.graph_to_loop.quantization import quantized_linear
    from tcc.dialects.conversions.loop_to_native.target import host_features
    f = host_features()
    if layout == 3 and "avx2" not in f:
        pytest.skip("layout 3 is packed for AVX2 CPUs")
    monkeypatch.setenv("TCC_CPU_ISA", "avx2" if layout == 3 else "")
    monkeypatch.setattr(quantized_linear, "FIX_SHARE_POINTWISE", 1.0)  # layout 3 however many corrections
    x, w, xz = q((n, c) + hw, xdt), q((m, c, 1, 1), np.int8), q((), xdt)
    inits = {"w": w, "xz": xz}
    if wz != "none" and layout == 2:
        # zero points that keep w - wz within int8: the VNNI bytes' layout
        inits["w"] = np.clip(w, -100, 100).astype(np.int8)
        inits["wz"] = RNG.integers(-27, 28, (m,) if wz == "channel" else ()).astype(np.int8)
    elif wz != "none":  # w - wz past int8: corrections
        inits["wz"] = RNG.integers(-100, 101, (m,) if wz == "channel" else ()).astype(np.int8)
    node = h.make_node("ConvInteger", ["x", "w", "xz"] + (["wz"] if wz != "none" else []), ["y"])
    mdl = model([node], {"x": x}, {"y": np.int32}, opset=10, initializers=inits)
    mod = lowered(mdl)
    (_, params), = _library_calls(mod, params=True)
    assert int(getattr(params[-1], "value", params[-1])) == layout
    with _run_as(monkeypatch, run_isa):
        path = _conv_i8_path(mod)
        got = run_native(mod, [x])[0]
    vnni = {"avx512vnni", "avx512bw"} <= f
    if layout == 2:
        want = "pointwise-vnni" if run_isa == "" and vnni else "pointwise-avxvnni" if run_isa == "avxvnni" else \
            "im2col"
    else:
        want = {"avx2": "pointwise-avx2", "avx512bw": "pointwise-avx512bw", "avxvnni": "pointwise-avxvnni",
                "generic": "im2col"}.get(run_isa, "pointwise-vnni" if vnni else
                                         "pointwise-avx512bw" if "avx512bw" in f else "pointwise-avx2")
    assert path == want or (run_isa == "" and "amx-int8" in f), (run_isa, path)
    np.testing.assert_array_equal(got, ReferenceEvaluator(mdl).run(None, {"x": x})[0])


@pytest.mark.parametrize("xdt", [np.uint8, np.int8])
def test_pointwise_qlinear_conv_in_nchw_adds_the_bias(monkeypatch, xdt):
    """QLinearConv 1x1 with an int32 bias on the NCHW path (where this CPU
    takes it): the bias and -x_zero_point * the weights' sums start each
    sum; 37 output channels, 9 x 11 positions; onnx.reference is the
    reference."""
    from onnx.reference import ReferenceEvaluator
    monkeypatch.setenv("TCC_CPU_ISA", "")
    m_out = 37
    inits = {"sx": scale(), "zx": q((), xdt), "w": q((m_out, 24, 1, 1), np.int8), "sw": scale(m_out),
             "zw": np.zeros(m_out, np.int8), "zy": np.asarray(128, np.uint8),
             "b": RNG.integers(-20000, 20000, m_out).astype(np.int32)}
    x = q((1, 24, 9, 11), xdt)
    # y's scale puts the largest requantized value (bias and each channel's
    # own w scale included) 120 steps from 128: nothing saturates
    acc = np.einsum("chw,mc->mhw", x[0].astype(np.int64) - inits["zx"], inits["w"][:, :, 0, 0].astype(np.int64))
    real = inits["sx"] * inits["sw"][:, None, None] * (acc + inits["b"][:, None, None])
    inits["sy"] = np.asarray(np.abs(real).max() / 120, np.float32)
    node = h.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["y"])
    mdl = model([node], {"x": x}, {"y": np.uint8}, opset=10, initializers=inits)
    mod = lowered(mdl)
    assert _library_calls(mod) == ["tcc_conv_i8"]
    want = ReferenceEvaluator(mdl).run(None, {"x": x})[0]
    # not saturated: the sums reach the output
    assert len(np.unique(want)) > 20 and want.min() > 0 and want.max() < 255, np.unique(want)
    np.testing.assert_array_equal(run_native(mod, [x])[0], want)


@pytest.mark.parametrize("run_isa", ["", "avx2", "generic"])
@pytest.mark.parametrize("kernel", [1, 3])
@pytest.mark.parametrize("ydt,per_channel,bias", [(np.uint8, True, True), (np.int8, False, False),
                                                  (np.uint8, False, True), (np.int8, True, True)])
def test_qlinear_conv_requantizes(monkeypatch, run_isa, kernel, ydt, per_channel, bias):
    """QLinearConv's sums on tcc_conv_i8 (1x1: the NCHW path where this CPU
    takes it), requantized by the loop after the call: y's scale puts the
    outputs past both ends of the type; w's scale per channel or one, a
    bias or none; onnx.reference is the reference, and the nest (the
    interpreter) agrees."""
    from onnx.reference import ReferenceEvaluator
    monkeypatch.setenv("TCC_CPU_ISA", "")
    m_out, c = 21, 12
    inits = {"sx": scale(), "zx": q((), np.uint8), "w": q((m_out, c, kernel, kernel), np.int8),
             "sw": scale(m_out) if per_channel else scale(), "zw": np.zeros(m_out if per_channel else (), np.int8)}
    x = q((2, c, 5, 7), np.uint8)
    xs = x.astype(np.int64) - inits["zx"]
    acc_std = np.sqrt(c * kernel * kernel) * xs.std() * inits["w"].astype(np.int64).std()
    # a spread of ~150 steps: saturated at both ends, most values inside
    inits["sy"] = np.asarray(inits["sx"] * np.median(inits["sw"]) * acc_std / 150, np.float32)
    inits["zy"] = np.asarray(RNG.integers(-20, 21) + (128 if ydt == np.uint8 else 0), ydt)
    names = ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"]
    if bias:
        inits["b"] = RNG.integers(-20000, 20000, m_out).astype(np.int32)
        names.append("b")
    node = h.make_node("QLinearConv", names, ["y"], pads=[kernel // 2] * 4)
    mdl = model([node], {"x": x}, {"y": ydt}, opset=10, initializers=inits)
    mod = lowered(mdl)
    assert _library_calls(mod) == ["tcc_conv_i8"]
    want = ReferenceEvaluator(mdl).run(None, {"x": x})[0]
    info = np.iinfo(ydt)
    assert (want == info.min).any() and (want == info.max).any() and len(np.unique(want)) > 50, np.unique(want)
    monkeypatch.setenv("TCC_CPU_ISA", run_isa)
    np.testing.assert_array_equal(run_native(mod, [x])[0], want)
    if run_isa == "":
        np.testing.assert_array_equal(run_loop_module(mod, [x])[0], want)


@pytest.mark.parametrize("run_isa", ["", "avx2", "generic"])
@pytest.mark.parametrize("kernel", [1, 3])
def test_qlinear_conv_requantizes_ties_to_even(monkeypatch, run_isa, kernel):
    """Power-of-two scales: x_scale * w_scale / y_scale = 2^-7 exactly, so
    every sum = 64 (mod 128) is a rounding tie, which goes to even (numpy's
    rint, onnx.reference's), not away from zero."""
    from onnx.reference import ReferenceEvaluator
    monkeypatch.setenv("TCC_CPU_ISA", "")
    m_out, c = 16, 12
    inits = {"sx": np.asarray(2.0 ** -5, np.float32), "zx": np.asarray(128, np.uint8),
             "w": q((m_out, c, kernel, kernel), np.int8), "sw": np.full(m_out, 2.0 ** -6, np.float32),
             "zw": np.zeros(m_out, np.int8), "sy": np.asarray(2.0 ** -4, np.float32), "zy": np.asarray(0, np.int8)}
    spread = 28 if kernel == 1 else 12  # the sums mostly within +-127 * 2^7
    x = RNG.integers(128 - spread, 129 + spread, (1, c, 16, 14)).astype(np.uint8)
    node = h.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"], ["y"], pads=[kernel // 2] * 4)
    mdl = model([node], {"x": x}, {"y": np.int8}, opset=10, initializers=inits)
    mod = lowered(mdl)
    assert _library_calls(mod) == ["tcc_conv_i8"]
    want = ReferenceEvaluator(mdl).run(None, {"x": x})[0]
    assert (np.abs(want) < 127).mean() > 0.9, np.unique(want)
    # the sums themselves (ConvInteger's): about one in 128 a tie
    sums = ReferenceEvaluator(model([h.make_node("ConvInteger", ["x", "w", "zx"], ["s"], pads=[kernel // 2] * 4)],
                                    {"x": x}, {"s": np.int32}, opset=10,
                                    initializers={k: inits[k] for k in ("w", "zx")})).run(None, {"x": x})[0]
    assert (sums % 128 == 64).sum() >= 8, (sums % 128 == 64).sum()
    monkeypatch.setenv("TCC_CPU_ISA", run_isa)
    np.testing.assert_array_equal(run_native(mod, [x])[0], want)


def test_qlinear_conv_multiplier_is_rounded_in_f32():
    """The multiplier x_scale * w_scale / y_scale is made in f32, two
    roundings, as the loop makes it (not in f64 and rounded once): scales
    are drawn until the two differ and some sum of a 1x1 convolution of
    one channel (x in 0..255 plus a bias) requantizes otherwise with each;
    onnx.reference is the reference."""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(RNG.integers(1 << 31))
    for _ in range(10000):
        sx, sw, sy = (np.float32(rng.uniform(0.001, 0.1)) for _ in range(3))
        m32 = np.float32(np.float32(sx * sw) / sy)
        m64 = np.float32((np.float64(sx) * np.float64(sw)) / np.float64(sy))
        if m32 == m64 or m32 > 2.0 ** -6:
            continue
        acc = np.arange(0, int(250 / m32), dtype=np.int64)  # outputs within 0..250
        a, b = np.rint(acc * np.float64(m32)), np.rint(acc * np.float64(m64))
        hit = np.flatnonzero(a != b)
        if hit.size:
            break
    else:
        pytest.fail("no scales found whose multipliers requantize some sum otherwise")
    bias = np.asarray([max(int(acc[hit[0]]) - 128, 0)], np.int32)
    inits = {"sx": np.asarray(sx), "zx": np.asarray(0, np.uint8), "w": np.ones((1, 1, 1, 1), np.int8),
             "sw": np.asarray(sw), "zw": np.asarray(0, np.int8), "sy": np.asarray(sy),
             "zy": np.asarray(0, np.uint8), "b": bias}
    x = np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16)
    node = h.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["y"])
    mdl = model([node], {"x": x}, {"y": np.uint8}, opset=10, initializers=inits)
    want = ReferenceEvaluator(mdl).run(None, {"x": x})[0]
    wrong = np.clip(np.rint((x.astype(np.int64) + bias[0]) * np.float64(m64)), 0, 255).astype(np.uint8)
    assert (want != wrong).any(), "the drawn scales tell the two multipliers apart"
    np.testing.assert_array_equal(run_native(lowered(mdl), [x])[0], want)


def _weights(shape, dt=np.int8, spread=28.0):
    """Weights as a symmetric quantizer leaves them: most values small, a
    few near the ends of int8 (a normal of `spread` steps, clipped)."""
    return np.clip(np.round(RNG.standard_normal(shape) * spread), -128, 127).astype(dt)


@pytest.mark.parametrize("run_isa", ["", "avx512", "avxvnni", "avx512bw", "avx2", "generic"])
@pytest.mark.parametrize("adt", [np.uint8, np.int8])
def test_pair_safe_bytes_with_corrections_are_exact(run_isa, adt, monkeypatch):
    """gemm_int.c's B packed 3 (kernels.pack_u8s8_pair_safe), called directly
    on each ISA's tile: B as far from safe as it gets (values past int8, as
    a zero point moves them, and most pairs with |b0| + |b1| > 128, so that
    most of it is corrections) and A of full-range bytes, where a saturated
    vpmaddubsw pair sum would show; odd K, a partial panel and row tile, A's
    zero point. int64 numpy is the reference."""
    from tcc.dialects.conversions.graph_to_loop.kernels import pack_u8s8_pair_safe
    M, K, N = 13, 67, 45
    a, az = q((M, K), adt), q((), adt)
    b = RNG.integers(-255, 256, (K, N)).astype(np.int64)
    b[RNG.random((K, N)) < 0.5] = 0  # pairs of every kind: safe, one value cut, past int8
    packed, nfix = pack_u8s8_pair_safe(b)
    assert K * N // 8 < nfix < K * N
    c = _matmul_i8(monkeypatch, run_isa, a, az, packed, N, 3)
    np.testing.assert_array_equal(c, (a.astype(np.int64) - az.astype(np.int64)) @ b)


@contextlib.contextmanager
def _run_as(monkeypatch, run_isa):
    """The runtime library (ctypes) with gemm_int.c's int8 paths as under
    TCC_CPU_ISA=run_isa, or for run_isa "avxvnni" / "avx512bw" as on a CPU
    with AVX-VNNI and no AVX-512, or with AVX-512 and no VNNI (Intel
    Skylake-SP): tcc_matmul_i8_hide's mask for the block. Skips where this
    CPU lacks the feature to hide down to."""
    import ctypes

    from tcc.dialects.conversions.loop_to_native.target import host_features
    from tcc.runtime import native
    if run_isa in HIDE and run_isa not in host_features():
        pytest.skip(f"this CPU has no {run_isa}")
    monkeypatch.setenv("TCC_CPU_ISA", "" if run_isa in HIDE else run_isa)
    lib = ctypes.CDLL(native.load())
    was = lib.tcc_matmul_i8_hide(HIDE.get(run_isa, 0))
    try:
        yield lib
    finally:
        lib.tcc_matmul_i8_hide(was)


def _matmul_i8(monkeypatch, run_isa, a, az, packed, N, layout):
    """C = (a - az) B from gemm_int.c's tcc_matmul_i8 called directly, B
    packed as `layout` (params' Q_BPACKED, no B zero point), run as
    _run_as(run_isa)."""
    import ctypes

    from tcc.dialects.conversions.loop_to_native.target import host_features
    (M, K), c = a.shape, np.empty((a.shape[0], N), np.int32)
    params = np.array([M, N, K, int(a.dtype == np.int8), 1, 1, 0, layout], np.int64)
    ptr = lambda x: x.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    with _run_as(monkeypatch, run_isa) as lib:
        lib.tcc_matmul_i8_tile.restype = ctypes.c_char_p
        tile = lib.tcc_matmul_i8_tile(layout).decode()
        lib.tcc_matmul_i8(ptr(params), ptr(c), ptr(a), ptr(packed), ptr(az), None)
    assert tile in _tiles_expected(run_isa, layout, host_features()), (run_isa, layout, tile)
    return c


# gemm_int.c's tcc_matmul_i8_hide masks: AMX 1, AVX-512 VNNI 2, AVX-VNNI 4, AVX-512 8
HIDE = {"avxvnni": 1 | 2 | 8, "avx512bw": 1 | 2 | 4}


def _tiles_expected(run_isa, layout, f):
    """The bytes tiles gemm_int.c may pick under TCC_CPU_ISA=run_isa (or a
    HIDE mask) on a CPU of LLVM features f (tcc_matmul_i8_tile's names)."""
    if run_isa == "generic" or "avx2" not in f:
        return {"generic"}
    avx2 = "avx2" if layout == 3 else "avx2-nibbles"
    if run_isa == "avx2":
        return {avx2}
    if run_isa == "avxvnni":
        return {"avxvnni"}
    if run_isa == "avx512bw":
        return {"avx512bw" if layout == 3 else avx2}
    if {"avx512vnni", "avx512bw"} <= f:
        return {"amx", "avx512vnni"} if run_isa == "" else {"avx512vnni"}
    if "avxvnni" in f:
        return {"avxvnni"}
    return {"avx512bw" if layout == 3 and "avx512bw" in f else avx2}


@pytest.mark.parametrize("run_isa", ["", "avx512", "avxvnni", "avx512bw", "avx2", "generic"])
@pytest.mark.parametrize("adt", [np.uint8, np.int8])
@pytest.mark.parametrize("M,K,N", [(13, 67, 45), (69, 131, 103)])
def test_vnni_bytes_are_exact_on_every_path(run_isa, adt, M, K, N, monkeypatch):
    """gemm_int.c's B packed 2 (kernels.pack_u8s8, what a compile on a CPU
    with VNNI chooses), called directly under each TCC_CPU_ISA: with avx2
    the AVX2 tile on A's 4-bit halves, where whole bytes would saturate
    vpmaddubsw's pair sums. A of full-range bytes, B at both ends of int8,
    odd K, a partial panel and row tile, A's zero point; 69 x 103 also has
    whole 32 x 32 blocks, which AMX sums from -za * colsum(B) straight into
    C (the partial ones through the task's block). int64 numpy is the
    reference."""
    from tcc.dialects.conversions.graph_to_loop.kernels import pack_u8s8
    a, az = q((M, K), adt), q((), adt)
    b = RNG.integers(-128, 128, (K, N)).astype(np.int64)
    b[:, :4] = [-128, 127, -128, 127]  # the largest pair sums, with 255s in A
    a[:2] = np.iinfo(adt).max  # 255 as the kernel sees it (int8 A moved up by 128)
    c = _matmul_i8(monkeypatch, run_isa, a, az, pack_u8s8(b), N, 2)
    np.testing.assert_array_equal(c, (a.astype(np.int64) - az.astype(np.int64)) @ b)


@pytest.mark.parametrize("features,isa,want", [
    ({"avx2", "avxvnni"}, "", (True, {"matmul", "conv"}, 2)),  # Intel Alder Lake on, Xeon 6 E-cores
    ({"avx2", "avxvnni"}, "avx2", (False, {"matmul", "small-conv"}, 3)),  # TCC_CPU_ISA=avx2: an AMD Zen 3
    ({"avx2", "avx512bw", "avx512vnni", "avxvnni"}, "", (True, {"matmul", "conv", "pw-dw"}, 2)),
    ({"avx2", "avx512bw", "avx512vnni"}, "avx512", (True, {"matmul", "conv", "pw-dw"}, 2)),
    ({"avx2"}, "", (False, {"matmul", "small-conv"}, 3)),
    ({"avx2", "avxvnni"}, "generic", (False, set(), 1))])
def test_vnni_bytes_where_the_target_has_vpdpbusd(monkeypatch, features, isa, want):
    """Weights are packed as VNNI bytes (layout 2), and QDQ convolutions of
    every size go to integers, where the target has vpdpbusd in either form
    (AVX-512 VNNI, or AVX-VNNI on ymm) and TCC_CPU_ISA does not ask for
    less; else the pair-safe bytes for AVX2 (3) or int16 pairs (1). With
    AVX-512 VNNI the 1x1s of any depth too ("pw-dw": cpu.conv_q8_dw). The
    target's CPUID features are stood in for."""
    from tcc.dialects.conversions.graph_to_loop.quantization import quantized_linear as ql
    from tcc.dialects.conversions.loop_to_native import target
    monkeypatch.setattr(target, "host_features", lambda: set(features))
    monkeypatch.setenv("TCC_CPU_ISA", isa)
    assert (ql.vnni_target(), set(ql.integer_qdq_kinds()), ql._pack_weights(_weights((64, 48)), 0)[1]) == want


@pytest.mark.parametrize("run_isa", ["", "avx512", "avxvnni", "avx512bw", "avx2", "generic"])
def test_int32_sums_wrap_on_every_path(run_isa, monkeypatch):
    """Sums past 2^31 wrap, as onnx.reference's int32 arithmetic and the
    nest do (not saturate, as vpdpbusds would): 70000 products of 255 and
    up to 127 a column, the bytes layout on each tile. int64 numpy wrapped
    to int32 is the reference."""
    from tcc.dialects.conversions.graph_to_loop.kernels import pack_u8s8
    K, N = 70000, 40
    a = np.full((3, K), 255, np.uint8)
    a[1] = RNG.integers(200, 256, K)
    b = RNG.integers(100, 128, (K, N)).astype(np.int64)
    b[:, 1] = -128
    c = _matmul_i8(monkeypatch, run_isa, a, np.zeros((), np.uint8), pack_u8s8(b), N, 2)
    want = a.astype(np.int64) @ b
    assert np.abs(want).max() > 2 ** 31
    np.testing.assert_array_equal(c, want.astype(np.int32))  # numpy's cast wraps


@pytest.mark.parametrize("run_isa", ["avx2", "generic", ""])
@pytest.mark.parametrize("op", ["MatMulInteger", "ConvInteger"])
def test_weights_packed_pair_safe_on_avx2(monkeypatch, run_isa, op):
    """Compiled for an AVX2 CPU (TCC_CPU_ISA=avx2), quantized weights with
    few pairs that vpmaddubsw could saturate are packed as its bytes plus
    corrections (layout 3, the last parameter), else as int16 pairs (1):
    both exact on each ISA path against int64 numpy / onnx.reference."""
    from onnx.reference import ReferenceEvaluator
    monkeypatch.setenv("TCC_CPU_ISA", "avx2")
    if op == "MatMulInteger":
        x, az = q((3, 13, 131), np.uint8), q((), np.uint8)
        w = _weights((131, 70))
        node = h.make_node(op, ["x", "w", "az"], ["y"])
    else:
        x, az = q((2, 16, 9, 10), np.uint8), q((), np.uint8)
        w = _weights((40, 16, 3, 3))
        node = h.make_node(op, ["x", "w", "az"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    layouts = []
    for wts in (w, (w // 32 * 127).astype(np.int8)):  # then most pairs are unsafe: int16 pairs
        m = model([node], {"x": x}, {"y": np.int32}, opset=10, initializers={"w": wts, "az": az})
        mod = lowered(m)
        (callee, params), = _library_calls(mod, params=True)
        layouts.append(params[-1])
        monkeypatch.setenv("TCC_CPU_ISA", run_isa)
        want = ReferenceEvaluator(m).run(None, {"x": x})[0]
        np.testing.assert_array_equal(run_native(mod, [x])[0], want)
        monkeypatch.setenv("TCC_CPU_ISA", "avx2")
    from tcc.dialects.conversions.loop_to_native.target import host_features
    assert layouts == ([3, 1] if "avx2" in host_features() else [1, 1])


@pytest.mark.parametrize("run_isa", ["avx2", ""])
def test_pointwise_weights_stay_pair_safe_with_more_corrections(monkeypatch, run_isa):
    """A 1x1 ConvInteger of stride 1 without pads keeps the pair-safe bytes
    (layout 3) with up to quantized_linear.FIX_SHARE_POINTWISE of its
    weights corrected (the NCHW path adds them a vector of positions at a
    time), where a 3x3 with the same share goes to int16 pairs (1): about 6
    % here, between FIX_SHARE and it. Exact on the AVX2 path and this CPU's
    against onnx.reference."""
    from onnx.reference import ReferenceEvaluator

    from tcc.dialects.conversions.graph_to_loop.kernels import pack_u8s8_pair_safe
    from tcc.dialects.conversions.graph_to_loop.quantization import quantized_linear as ql
    from tcc.dialects.conversions.loop_to_native.target import host_features
    if "avx2" not in host_features():
        pytest.skip("layout 3 is packed for AVX2 CPUs")
    monkeypatch.setenv("TCC_CPU_ISA", "avx2")
    x, az = q((2, 48, 9, 10), np.uint8), q((), np.uint8)
    layouts = []
    for k in (1, 3):
        w = _weights((40, 48, k, k), spread=50)
        share = pack_u8s8_pair_safe(w.transpose(0, 2, 3, 1).reshape(40, -1).T)[1] / w.size
        assert ql.FIX_SHARE < share < ql.FIX_SHARE_POINTWISE, share
        node = h.make_node("ConvInteger", ["x", "w", "az"], ["y"], kernel_shape=[k, k], pads=[k // 2] * 4)
        m = model([node], {"x": x}, {"y": np.int32}, opset=10, initializers={"w": w, "az": az})
        mod = lowered(m)
        (_, params), = _library_calls(mod, params=True)
        layouts.append(int(getattr(params[-1], "value", params[-1])))
        assert ql.conv_weights_layout(w, np.zeros((), np.int8), pointwise=k == 1) == layouts[-1]  # without packing
        monkeypatch.setenv("TCC_CPU_ISA", run_isa)
        np.testing.assert_array_equal(run_native(mod, [x])[0], ReferenceEvaluator(m).run(None, {"x": x})[0])
        monkeypatch.setenv("TCC_CPU_ISA", "avx2")
    assert layouts == [3, 1]
