"""Det against onnxruntime (float32) and onnx.reference (float16, float64),
through the loop interpreter and the native backend."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import helper as h

from newops_helpers import RNG, check


def f(*s, dt=np.float32):
    return RNG.standard_normal(s).astype(dt)


def det(x, dt, ref="ort", tol=1e-4):
    check([h.make_node("Det", ["x"], ["y"])], {"x": x.astype(dt)}, {"y": dt}, opset=11, ref=ref,
          rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (5, 5), (4, 2, 2), (2, 3, 4, 4), (3, 6, 6)])
def test_det(shape):
    det(f(*shape), np.float32)


def test_det_needs_pivoting():
    # zero leading entries: elimination without row swaps divides by zero
    perm = RNG.permutation(5)
    x = np.eye(5, dtype=np.float32)[perm] * f(5, 1)
    x[0, 0] = 0.0
    det(np.stack([x, x.T, np.eye(5, dtype=np.float32)[::-1]]), np.float32)


def test_det_singular():
    a = f(4, 4)
    a[:, 2] = 0.0  # a zero column
    b = f(4, 4)
    b[3] = b[0] + b[1]  # dependent rows
    c = np.zeros((4, 4), np.float32)
    det(np.stack([a, b, c]), np.float32, tol=1e-4)


def test_det_f64():
    det(f(3, 4, 4, dt=np.float64), np.float64, ref="onnx", tol=1e-10)


def test_det_f16():
    # neither onnxruntime nor numpy's linalg takes float16: the reference is
    # numpy's f64 determinant of the same values, rounded to f16
    from newops_helpers import lowered, model
    from tcc.dialects.conversions.loop_to_native.jit import run_native
    from tcc.dialects.loop.interpreter import run_loop_module
    x = (f(3, 4, 4) * 0.7).astype(np.float16)
    want = np.linalg.det(x.astype(np.float64)).astype(np.float16)
    mod = lowered(model([h.make_node("Det", ["x"], ["y"])], {"x": x}, {"y": np.float16}, opset=11))
    for run in (run_loop_module, run_native):
        got = run(mod, [x])[0]
        assert got.dtype == np.float16
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=2e-3)
