"""Cast/CastLike/BitCast/QuantizeLinear/DequantizeLinear on the 8/4/2-bit
element types: checked against onnx.reference (ml_dtypes) byte for byte."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as TP, helper as h

from newops_helpers import RNG, check

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e6, -1e6, 460, 470, 240, 250, 57344, 61440, 6.0, 7.0,
                    2.5, -2.5, 1e-9, 0.0625, 0.015625, 2.0 ** -9, 2.0 ** -10], np.float32)


def data(n=64):
    bits = RNG.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([SPECIAL, RNG.standard_normal(n).astype(np.float32) * 100, bits])


SMALL = [(TP.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn), (TP.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz),
         (TP.FLOAT8E5M2, ml_dtypes.float8_e5m2), (TP.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz),
         (TP.FLOAT4E2M1, ml_dtypes.float4_e2m1fn)]


@pytest.mark.parametrize("src", [np.float32, np.float16])
@pytest.mark.parametrize("to,dt", SMALL)
def test_cast_to_small_float_and_back(to, dt, src):
    x = data().astype(src)
    nodes = [h.make_node("Cast", ["x"], ["s"], to=to, saturate=1), h.make_node("Cast", ["x"], ["u"], to=to, saturate=0),
             h.make_node("Cast", ["u"], ["b"], to=TP.FLOAT16), h.make_node("CastLike", ["s", "x"], ["c"])]
    check(nodes, {"x": x}, {"s": to, "u": to, "b": TP.FLOAT16, "c": x.dtype}, ref="onnx", rtol=0, atol=0)


@pytest.mark.parametrize("to", [TP.INT4, TP.UINT4, TP.INT2, TP.UINT2])
def test_cast_sub_byte_ints(to):
    x = np.concatenate([RNG.uniform(-20, 20, 40), [np.nan, 0.5, -0.5, 7.9, -8.5]]).astype(np.float32)
    nodes = [h.make_node("Cast", ["x"], ["q"], to=to), h.make_node("Cast", ["q"], ["f"], to=TP.FLOAT),
             h.make_node("Cast", ["q"], ["i"], to=TP.INT8)]
    check(nodes, {"x": x}, {"q": to, "f": TP.FLOAT, "i": TP.INT8}, ref="onnx", rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("sat", [0, 1])
def test_cast_e8m0(mode, sat):
    x = np.concatenate([np.abs(data()), [3.4e38, 2.0 ** 127 * 1.5, 1e-39]]).astype(np.float32)
    nodes = [h.make_node("Cast", ["x"], ["e"], to=TP.FLOAT8E8M0, saturate=sat, round_mode=mode),
             h.make_node("Cast", ["e"], ["f"], to=TP.FLOAT)]
    check(nodes, {"x": x}, {"e": TP.FLOAT8E8M0, "f": TP.FLOAT}, opset=25, ref="onnx", rtol=0, atol=0)


def test_bitcast():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.integers(0, 2, (5,)).astype(bool)
    check([h.make_node("BitCast", ["x"], ["y"], to=TP.INT32), h.make_node("BitCast", ["b"], ["c"], to=TP.UINT8)],
          {"x": x, "b": b}, {"y": TP.INT32, "c": TP.UINT8}, opset=26, ref="onnx")


@pytest.mark.parametrize("zt", [TP.UINT8, TP.INT8, TP.INT16, TP.INT4, TP.UINT2])
def test_quantize_dequantize_per_axis(zt):
    x = (RNG.standard_normal((3, 4, 2)) * 20).astype(np.float32)
    s = (np.abs(RNG.standard_normal(4)) + 0.5).astype(np.float32)
    import onnx.helper
    zdt = onnx.helper.tensor_dtype_to_np_dtype(zt)
    z = np.array(RNG.integers(0, 2, 4)).astype(zdt)
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             h.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=1)]
    check(nodes, {"x": x, "s": s, "z": z}, {"q": zt, "d": TP.FLOAT}, ref="onnx")


@pytest.mark.parametrize("axis", [None, 1])
@pytest.mark.parametrize("zt,dt", [(TP.UINT8, np.uint8), (TP.INT8, np.int8), (TP.UINT16, np.uint16),
                                   (TP.INT16, np.int16)])
def test_quantize_linear_to_8_and_16_bits_special_values(zt, dt, axis):
    """The f32 path (round, zero point and clamp in f32, a bitcast to the
    integer): ties to even, -0, saturation, inf, and NaN to the type's
    minimum (onnx.reference's rint(x).astype is undefined there: numpy
    here, with the host's documented saturation)."""
    lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
    x = np.concatenate([[np.nan, np.inf, -np.inf, 0.0, -0.0, -0.3, 0.5, 1.5, 2.5, -2.5, 3e9, -3e9, 1e30],
                        RNG.standard_normal(140) * 3 * (hi - lo)]).astype(np.float32).reshape(3, 51)
    if axis is None:
        s, z = np.array(RNG.uniform(0.5, 2), np.float32), np.array(RNG.integers(lo, hi + 1), dt)
    else:
        s = RNG.uniform(0.5, 2, 51).astype(np.float32)
        z = RNG.integers(lo, hi + 1, 51).astype(dt)

    def ref(x, s, z):
        with np.errstate(invalid="ignore"):
            v = np.rint(x / s).astype(np.float64) + z
        return [np.where(np.isnan(v), lo, np.clip(v, lo, hi)).astype(dt)]
    kw = {} if axis is None else {"axis": axis}
    check([h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **kw)], {"x": x, "s": s, "z": z}, {"q": zt},
          ref=ref, rtol=0, atol=0)


def test_quantize_blocked_and_float8():
    x = (RNG.standard_normal((3, 5)) * 50).astype(np.float32)
    s = (np.abs(RNG.standard_normal((3, 3))) + 0.1).astype(np.float32)
    z = RNG.integers(0, 255, (3, 3)).astype(np.uint8)
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1, block_size=2),
             h.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=1, block_size=2),
             h.make_node("QuantizeLinear", ["x", "t"], ["f8"], output_dtype=TP.FLOAT8E4M3FN, saturate=0),
             h.make_node("DequantizeLinear", ["f8", "t"], ["g"])]
    check(nodes, {"x": x, "s": s, "z": z, "t": np.array(0.25, np.float32)},
          {"q": TP.UINT8, "d": TP.FLOAT, "f8": TP.FLOAT8E4M3FN, "g": TP.FLOAT}, ref="onnx")


@pytest.mark.parametrize("shape", [(3, 7), (5, 131)])  # the second: vector loop bodies and tails
@pytest.mark.parametrize("shift", [0.0, 3.0, -3.0])
def test_dynamic_quantize_linear(shift, shape):
    x = (RNG.standard_normal(shape) + shift).astype(np.float32)
    # onnx.reference, not onnxruntime: MLAS quantizes with ISA-specific kernels, and the
    # reference must be the same on every CPU (integer outputs are compared exactly)
    check([h.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], {"x": x},
          {"y": TP.UINT8, "s": TP.FLOAT, "z": TP.UINT8}, opset=11, ref="onnx")
