"""BatchNormalization in training mode (batch statistics, running
mean/var outputs) against onnx.reference (onnxruntime's CPU build lacks
it), through the loop interpreter and the native backend."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import helper as h

from newops_helpers import RNG, check


def f(*s, dt=np.float32):
    return RNG.standard_normal(s).astype(dt)


def _inputs(shape, dt):
    C = shape[1]
    return {"x": f(*shape, dt=dt) * 3 + 1, "s": f(C, dt=dt), "b": f(C, dt=dt), "m": f(C, dt=dt),
            "v": np.abs(f(C, dt=dt)) + 0.5}


@pytest.mark.parametrize("shape", [(2, 3), (4, 3, 5), (2, 4, 3, 5), (1, 2, 3, 2, 2)])
@pytest.mark.parametrize("opset", [14, 15])
def test_batchnorm_training(shape, opset):
    node = h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1,
                       momentum=0.8, epsilon=1e-3)
    check([node], _inputs(shape, np.float32), {"y": np.float32, "rm": np.float32, "rv": np.float32},
          opset=opset, ref="onnx", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("outs", [["y", "rm", ""], ["y", "", "rv"]])
def test_batchnorm_training_some_outputs(outs):
    node = h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outs, training_mode=1)
    check([node], _inputs((3, 2, 4, 4), np.float32), {o: np.float32 for o in outs if o},
          opset=15, ref="onnx", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dt", [np.float16, np.float64])
def test_batchnorm_training_dtypes(dt):
    node = h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1)
    tol = 1e-2 if dt == np.float16 else 1e-10
    check([node], _inputs((2, 3, 4, 3), dt), {"y": dt, "rm": dt, "rv": dt}, opset=15, ref="onnx",
          rtol=tol, atol=tol)


def test_batchnorm_training_outputs_before_opset14():
    from newops_helpers import lowered, model
    from tcc.dialects.ir.errors import PassError
    outs = {"y": (np.float32, [2, 3, 4]), **{k: (np.float32, [3]) for k in ("rm", "rv", "sm", "sv")}}
    m = model([h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], list(outs))],
              _inputs((2, 3, 4), np.float32), outs, opset=7)
    with pytest.raises(PassError, match="before 14"):
        lowered(m)

