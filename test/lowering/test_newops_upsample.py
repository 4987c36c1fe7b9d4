"""Upsample (opset 7 and 9) against onnxruntime, through the loop
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
    # x shape, scales
    ((1, 1, 2, 2), [1.0, 1.0, 2.0, 3.0]),
    ((2, 3, 3, 4), [1.0, 1.0, 1.5, 2.5]),
    ((2, 3, 5), [1.0, 2.0, 1.7]),
    ((4, 3), [2.0, 3.0]),
]


@pytest.mark.parametrize("xs,scales", CASES)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_9(xs, scales, mode):
    check([h.make_node("Upsample", ["x", "s"], ["y"], mode=mode)], {"x": f(*xs)}, {"y": np.float32}, opset=9,
          initializers={"s": np.array(scales, np.float32)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("xs,scales", CASES)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_7(xs, scales, mode):
    check([h.make_node("Upsample", ["x"], ["y"], mode=mode, scales=scales)], {"x": f(*xs)}, {"y": np.float32},
          opset=7, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", [np.int32, np.uint8, np.int8])
def test_upsample_nearest_integers(dt):
    x = RNG.integers(0, 100, (2, 2, 3, 3)).astype(dt)
    check([h.make_node("Upsample", ["x", "s"], ["y"])], {"x": x}, {"y": dt}, opset=9,
          initializers={"s": np.array([1, 1, 2, 3], np.float32)})


def test_upsample_bad_mode():
    from newops_helpers import lowered, model
    from tcc.dialects.ir.errors import PassError
    m = model([h.make_node("Upsample", ["x"], ["y"], mode="cubic", scales=[1.0, 2.0])],
              {"x": f(2, 3)}, {"y": (np.float32, [2, 6])}, opset=7)
    with pytest.raises(PassError, match="mode 'cubic'"):
        lowered(m)
