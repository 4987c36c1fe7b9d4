"""TensorScatter (KV-cache update) against onnxruntime, through the loop
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
    # cache shape, update length, axis
    ((2, 3, 8, 4), 2, -2),
    ((2, 3, 8, 4), 1, 2),
    ((3, 6, 5), 3, 1),
    ((2, 4, 7), 4, -1),
    ((2, 2, 5, 3, 2), 5, 2),
]


@pytest.mark.parametrize("shape,seq,axis", CASES)
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(shape, seq, axis, mode):
    a = axis % len(shape)
    M = shape[a]
    ushape = shape[:a] + (seq,) + shape[a + 1:]
    hi = M if mode == "circular" else M - seq + 1
    wi = RNG.integers(0, hi, size=shape[0]).astype(np.int64)
    check([h.make_node("TensorScatter", ["past", "upd", "wi"], ["y"], axis=axis, mode=mode)],
          {"past": f(*shape), "upd": f(*ushape), "wi": wi}, {"y": np.float32}, opset=24)


@pytest.mark.parametrize("dt", [np.float16, np.int32, np.int64, np.uint8])
def test_tensor_scatter_no_indices(dt):
    shape = (2, 3, 6, 4)
    past = RNG.integers(0, 100, size=shape).astype(dt)
    upd = RNG.integers(0, 100, size=(2, 3, 2, 4)).astype(dt)
    check([h.make_node("TensorScatter", ["past", "upd"], ["y"])], {"past": past, "upd": upd}, {"y": dt},
          opset=24, ref="onnx")


def test_tensor_scatter_bad_mode():
    from newops_helpers import lowered, model
    from tcc.dialects.ir.errors import PassError
    m = model([h.make_node("TensorScatter", ["past", "upd"], ["y"], mode="ring")],
              {"past": f(2, 4, 3), "upd": f(2, 1, 3)}, {"y": np.float32}, opset=24)
    with pytest.raises(PassError, match="mode 'ring'"):
        lowered(m)
