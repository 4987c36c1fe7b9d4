"""MaxUnpool against onnxruntime (indices from a MaxPool in the same model)
and onnx.reference (with output_shape, where onnxruntime indexes the larger
output instead), through the loop interpreter and the native backend."""
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
    # x shape, pool attrs
    ((2, 3, 8), {"kernel_shape": [2], "strides": [2]}),
    ((1, 2, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0]}),
    ((1, 3, 5, 5), {"kernel_shape": [3, 3], "strides": [1, 1]}),
    ((1, 2, 4, 6, 4), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}),
]


@pytest.mark.parametrize("xs,attrs", CASES)
def test_max_unpool_after_pool(xs, attrs):
    nodes = [h.make_node("MaxPool", ["x"], ["p", "i"], **attrs),
             h.make_node("MaxUnpool", ["p", "i"], ["y"], **attrs)]
    check(nodes, {"x": f(*xs)}, {"y": np.float32}, opset=11)


@pytest.mark.parametrize("dt", [np.float16, np.float64])
def test_max_unpool_dtypes(dt):
    xs = (2, 3, 3, 2)
    inferred = 2 * 3 * 6 * 4
    idx = RNG.permutation(inferred)[:int(np.prod(xs))].reshape(xs).astype(np.int64)
    check([h.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
          {"x": f(*xs, dt=dt), "i": idx}, {"y": dt}, opset=11, ref="onnx", rtol=0, atol=0)


@pytest.mark.parametrize("extra", [(0, 0), (1, 2), (3, 0)])
def test_max_unpool_output_shape(extra):
    xs = (1, 2, 3, 3)
    inf = (1, 2, 6, 6)
    idx = RNG.permutation(int(np.prod(inf)))[:int(np.prod(xs))].reshape(xs).astype(np.int64)
    oshape = np.array(inf[:2] + (inf[2] + extra[0], inf[3] + extra[1]), dtype=np.int64)
    check([h.make_node("MaxUnpool", ["x", "i", "s"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
          {"x": f(*xs), "i": idx}, {"y": (np.float32, oshape.tolist())}, opset=11, ref="onnx",
          initializers={"s": oshape})


def test_max_unpool_output_shape_too_small():
    from newops_helpers import lowered, model
    from tcc.dialects.ir.errors import PassError
    m = model([h.make_node("MaxUnpool", ["x", "i", "s"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
              {"x": f(1, 1, 2, 2), "i": np.zeros((1, 1, 2, 2), np.int64)}, {"y": (np.float32, [1, 1, 3, 4])}, opset=11,
              initializers={"s": np.array([1, 1, 3, 4], np.int64)})
    with pytest.raises(PassError, match="smaller than the unpooled shape"):
        lowered(m)
