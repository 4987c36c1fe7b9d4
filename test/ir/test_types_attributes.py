import math

import numpy as np
import pytest

from tcc.dialects.ir import (ArrayAttr, DenseArrayAttr, DenseElementsAttr, FloatAttr, IntegerAttr, ParseError,
                             StringAttr, TensorType, f16, f32, f64, i1, i8, i64, parse_attribute, parse_type,
                             to_numpy_dtype, SCALARS)

TYPES = ["tensor<2x3xf32>", "tensor<?x3xf16>", "tensor<*xbf16>", "tensor<i64>", "memref<4x?xi8>", "index",
         "none", "ui32", "si8", "f8E4M3FN", "f8E5M2FNUZ", "f4E2M1FN", "i4", "complex<f64>",
         "tensor<3xcomplex<f32>>", "!onnx.String", "tensor<2x!onnx.String>", "!onnx.Seq<tensor<*xf32>>",
         "!onnx.Opt<!onnx.Seq<tensor<2xi64>>>", "!onnx.Map<i64, tensor<f32>>", "(tensor<f32>, i64) -> (i1, f32)",
         "() -> ()", "(index) -> index"]


@pytest.mark.parametrize("text", TYPES)
def test_type_round_trip(text):
    t = parse_type(text)
    assert str(t) == text
    assert parse_type(str(t)) == t


def test_shapes():
    t = parse_type("tensor<2x?x5xf32>")
    assert t.shape == (2, None, 5) and t.rank == 3 and not t.has_static_shape
    assert parse_type("tensor<*xf32>").rank is None
    assert parse_type("tensor<4x5xf32>").num_elements == 20


@pytest.mark.parametrize("element", ["f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64", "ui8",
                                     "ui16", "ui32", "ui64", "f8E4M3FN", "f8E5M2", "i4", "ui4"])
def test_dense_round_trip_every_dtype(element, rng):
    el = SCALARS[element]
    dt = to_numpy_dtype(el)
    shape = tuple(int(d) for d in rng.integers(1, 4, size=rng.integers(0, 3)))
    if dt.kind == "b":
        arr = rng.random(shape) > 0.5
    elif dt.kind in "iu":
        info = np.iinfo(np.int8 if element in ("i4",) else np.uint8 if element == "ui4" else dt)
        lo, hi = (-8, 8) if element == "i4" else (0, 16) if element == "ui4" else (info.min, info.max)
        arr = rng.integers(lo, hi, size=shape, dtype=np.int64 if dt.kind == "i" else np.uint64).astype(dt)
    else:
        arr = (rng.standard_normal(shape) * 4).astype(dt)
    a = DenseElementsAttr(arr, TensorType(shape, el))
    back = parse_attribute(str(a))
    assert back.type == a.type
    assert back.value.shape == arr.shape
    assert np.asarray(back.value).tobytes() == np.asarray(arr).tobytes()


def test_nonfinite_floats_round_trip():
    arr = np.array([np.nan, np.inf, -np.inf, 1.5, -0.0], np.float32)
    back = parse_attribute(str(DenseElementsAttr(arr, TensorType((5,), f32))))
    np.testing.assert_array_equal(back.value.view(np.uint32), arr.view(np.uint32))
    for v in (math.inf, -math.inf):
        assert parse_attribute(str(FloatAttr(v, f32))).value == v
    assert math.isnan(parse_attribute(str(FloatAttr(math.nan, f64))).value)


def test_scalar_attributes(rng):
    x = float(np.float32(rng.standard_normal()))
    assert parse_attribute(str(FloatAttr(x, f32))).value == x
    n = int(rng.integers(-2**62, 2**62))
    assert parse_attribute(str(IntegerAttr(n, i64))) == IntegerAttr(n, i64)
    s = "quote\" back\\slash \n tab\t ünïcode"
    assert parse_attribute(str(StringAttr(s))).value == s
    vals = [int(v) for v in rng.integers(-100, 100, size=5)]
    assert parse_attribute(str(DenseArrayAttr(vals, i64))).value == vals
    arr = ArrayAttr([IntegerAttr(1, i8), StringAttr("a"), DenseArrayAttr([1.5], f16)])
    assert str(parse_attribute(str(arr))) == str(arr)


def test_string_tensor():
    arr = np.array(["a", "b c", "\"q\""], dtype=object)
    a = DenseElementsAttr(arr, parse_type("tensor<3x!onnx.String>"))
    assert list(parse_attribute(str(a)).value) == list(arr)


@pytest.mark.parametrize("text,where", [("tensor<2x3xfoo>", "unknown element type"),
                                        ("tensor<2x3", "expected"),
                                        ("dense<[1, 2]> : tensor<3xi64>", "needs 3"),
                                        ("dense<1.5> : tensor<?xf32>", "static")])
def test_bad_text_reports_position(text, where):
    parse = parse_type if text.startswith("tensor") else parse_attribute
    with pytest.raises(ParseError) as e:
        parse(text)
    assert where in str(e.value)
    assert e.value.line == 1 and e.value.col >= 1


def test_bool_dense():
    a = parse_attribute("dense<[true, false]> : tensor<2xi1>")
    assert a.value.tolist() == [True, False] and a.type.element == i1
