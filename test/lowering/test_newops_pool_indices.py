"""MaxPool's Indices output against onnxruntime, through the loop
interpreter and the native backend."""
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
    # x shape, attrs
    ((2, 3, 9), {"kernel_shape": [3]}),
    ((1, 2, 10), {"kernel_shape": [2], "strides": [2], "pads": [1, 1]}),
    ((2, 3, 6, 7), {"kernel_shape": [3, 3]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ((1, 2, 7, 7), {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [1, 2]}),
    ((1, 1, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((2, 2, 5, 6), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 5, 6), {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "strides": [1, 2, 2], "pads": [0, 1, 1, 1, 0, 1]}),
]


@pytest.mark.parametrize("xs,attrs", CASES)
@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_indices(xs, attrs, storage_order):
    check([h.make_node("MaxPool", ["x"], ["y", "i"], storage_order=storage_order, **attrs)],
          {"x": f(*xs)}, {"y": np.float32, "i": np.int64}, opset=12)


@pytest.mark.parametrize("dt", [np.float64, np.int8, np.uint8])
def test_maxpool_indices_dtypes(dt):
    # small integer ranges make ties: the first tap of the window must win
    x = f(2, 3, 6, 6, dt=np.float64) if dt == np.float64 else RNG.integers(0, 4, (2, 3, 6, 6)).astype(dt)
    check([h.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 0, 1])],
          {"x": x}, {"y": dt, "i": np.int64}, opset=12)


def test_maxpool_indices_f16():
    x = f(1, 2, 6, 5, dt=np.float16)
    check([h.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2], storage_order=1)],
          {"x": x}, {"y": np.float16, "i": np.int64}, opset=12, rtol=0, atol=0)


def test_maxpool_bad_storage_order():
    from newops_helpers import lowered, model
    from tcc.dialects.ir.errors import PassError
    m = model([h.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2], storage_order=2)],
              {"x": f(1, 1, 4)}, {"y": np.float32, "i": np.int64}, opset=12)
    with pytest.raises(PassError, match="storage_order 2"):
        lowered(m)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_maxpool_indices_window_at_type_minimum(dt):
    # every tap of some windows equals the type's lowest value (the running maximum's start):
    # the index must still be the window's first tap, not the plane's first element
    x = RNG.integers(0, 2, (2, 3, 6, 6)).astype(dt) * (1 if dt == np.uint8 else 0) + np.iinfo(dt).min
    x[0, 0, 4:, 4:] += 1
    check([h.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 0, 1])],
          {"x": x}, {"y": dt, "i": np.int64}, opset=12)
