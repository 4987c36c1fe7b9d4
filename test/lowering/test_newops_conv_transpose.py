"""ConvTranspose against onnxruntime (float32) and onnx.reference (float16,
float64), through the loop interpreter and the native backend."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import helper as h

from newops_helpers import RNG, check


def f(*s, dt=np.float32):
    return RNG.standard_normal(s).astype(dt)


CASES = [
    # x shape, w shape, attrs
    ((1, 2, 5), (2, 3, 3), {}),
    ((2, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 2]}),
    ((1, 2, 4, 4), (2, 3, 3, 2), {"strides": [3, 2], "pads": [1, 0, 2, 1], "output_padding": [1, 1]}),
    ((1, 2, 5, 4), (2, 2, 2, 3), {"dilations": [2, 2], "strides": [1, 2]}),
    ((1, 4, 3, 3), (4, 3, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 6, 3, 4), (6, 1, 3, 3), {"group": 6, "strides": [2, 2]}),
    ((2, 4, 5, 3), (4, 2, 2, 2), {"group": 2, "strides": [2, 2], "output_padding": [1, 0]}),
    ((1, 2, 3, 4), (2, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 3, 4), (2, 2, 4, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 2, 3, 3), (2, 1, 3, 3), {"output_shape": [8, 8], "strides": [3, 3]}),
    ((1, 2, 3, 3, 2), (2, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}),
]


@pytest.mark.parametrize("xs,ws,attrs", CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose(xs, ws, attrs, bias):
    ins = ["x", "w"] + (["b"] if bias else [])
    inits = {"w": f(*ws)}
    if bias:
        inits["b"] = f(ws[1] * attrs.get("group", 1))
    check([h.make_node("ConvTranspose", ins, ["y"], **attrs)], {"x": f(*xs)}, {"y": np.float32}, opset=17,
          initializers=inits, rtol=1e-4, atol=1e-5)


def test_conv_transpose_weights_as_input():
    check([h.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])],
          {"x": f(1, 3, 4, 4), "w": f(3, 2, 3, 3)}, {"y": np.float32}, opset=17, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dt", [np.float16, np.float64])
def test_conv_transpose_dtypes(dt):
    check([h.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1])],
          {"x": f(1, 2, 4, 3, dt=dt)}, {"y": dt}, opset=17, ref="onnx",
          initializers={"w": f(2, 3, 3, 3, dt=dt), "b": f(3, dt=dt)},
          # float16: both sides round partial sums of terms up to ~4 (an ulp 0.004) in their own order;
          # at 2e-3 one element in ~150 missed on some seeds
          rtol=2e-3 if dt == np.float16 else 1e-9, atol=8e-3 if dt == np.float16 else 1e-9)
