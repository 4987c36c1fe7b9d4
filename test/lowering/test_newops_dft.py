"""DFT and STFT against onnx.reference (numpy's FFT in float64) on fresh
random signals, through the loop interpreter and the native backend."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import helper as h

from newops_helpers import RNG, check


def f(*s, dt=np.float32):
    return RNG.standard_normal(s).astype(dt)


I64 = np.int64


@pytest.mark.parametrize("shape,axis,length,inverse,onesided", [
    ((2, 12, 1), 1, None, 0, 0),          # real -> complex
    ((2, 12, 2), -2, None, 0, 0),         # complex
    ((3, 9, 2), 1, None, 1, 0),           # inverse
    ((2, 10, 1), 1, None, 0, 1),          # rfft
    ((2, 11, 1), 1, 8, 0, 1),             # rfft, cropped to 8
    ((2, 6, 2), 1, 10, 1, 1),             # irfft, even length
    ((2, 5, 2), 1, 9, 1, 1),              # irfft, odd length
    ((2, 7, 2), 1, 12, 0, 0),             # zero-padded to 12
    ((2, 8, 3, 2), 1, None, 0, 0),        # trailing batch dim (signals interleaved)
    ((4, 3, 6, 1), 2, None, 1, 0),        # inverse of a real signal, inner axis
    ((2, 5, 4, 2), 1, 7, 1, 1),           # irfft with trailing batch dim
])
def test_dft(shape, axis, length, inverse, onesided):
    ins = ["x", "n" if length else "", "a"]
    inits = {"a": np.array(axis, I64)}
    if length:
        inits["n"] = np.array(length, I64)
    check([h.make_node("DFT", ins, ["y"], inverse=inverse, onesided=onesided)], {"x": f(*shape)},
          {"y": np.float32}, opset=20, ref="onnx", initializers=inits, rtol=1e-4, atol=1e-4)


def test_dft_opset17_axis_attribute():
    check([h.make_node("DFT", ["x"], ["y"], axis=2)], {"x": f(2, 3, 8, 2)}, {"y": np.float32}, opset=17,
          ref="onnx", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dt", [np.float64, np.float16])
def test_dft_dtypes(dt):
    tol = 1e-9 if dt == np.float64 else 3e-2
    check([h.make_node("DFT", ["x", "", "a"], ["y"], onesided=1)], {"x": f(2, 8, 1, dt=dt)}, {"y": dt},
          opset=20, ref="onnx", initializers={"a": np.array(1, I64)}, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape,step,length,window,onesided", [
    ((2, 64, 1), 8, 16, False, 1),
    ((1, 50, 1), 7, 12, True, 1),
    ((2, 40, 2), 5, 10, True, 0),         # complex signal, both sides
    ((1, 33, 1), 4, 9, False, 0),
])
def test_stft(shape, step, length, window, onesided):
    ins = ["x", "s", "w" if window else "", "n"]
    inits = {"s": np.array(step, I64), "n": np.array(length, I64)}
    feeds = {"x": f(*shape)}
    if window:
        feeds["w"] = np.hanning(length).astype(np.float32)
    check([h.make_node("STFT", ins, ["y"], onesided=onesided)], feeds, {"y": np.float32}, opset=17, ref="onnx",
          initializers=inits, rtol=1e-4, atol=1e-4)
