import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import helper as h

from newops_helpers import RNG, check
from tcc.dialects.conversions.graph_to_loop import LoweringError
from newops_helpers import lowered, model
from tcc.dialects.conversions.loop_to_native.jit import run_native
from tcc.dialects.loop.interpreter import run_loop_module


def f(*s, dt=np.float32):
    return RNG.standard_normal(s).astype(dt)


def resize(x, scales=None, sizes=None, roi=None, opset=19, ref="ort", rtol=1e-4, atol=1e-5,
           **attrs):
    inits, names = {}, ["x"]
    if opset in (11, 12) and roi is None:
        roi = []  # a required input there
    if opset >= 11:
        names.append("roi" if roi is not None else "")
        if roi is not None:
            inits["roi"] = np.asarray(roi, np.float32)
    names.append("scales" if scales is not None else "")
    if scales is not None:
        inits["scales"] = np.asarray(scales, np.float32)
    if sizes is not None:
        names.append("sizes")
        inits["sizes"] = np.asarray(sizes, np.int64)
    while names[-1] == "":
        names.pop()
    check([h.make_node("Resize", names, ["y"], **attrs)], {"x": x}, {"y": x.dtype}, opset=opset, ref=ref,
          initializers=inits, rtol=rtol, atol=atol)


@pytest.mark.parametrize("ctm", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                 "half_pixel_symmetric"])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_coordinate_modes(ctm, mode):
    # onnx.reference divides by the unrounded output length under align_corners (ORT by the rounded one).
    resize(f(1, 2, 5, 6), scales=[1, 1, 1.7, 0.6], mode=mode, coordinate_transformation_mode=ctm,
           ref="onnx" if ctm in ("half_pixel_symmetric", "align_corners") else "ort")


@pytest.mark.parametrize("nm", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("ctm", ["half_pixel", "asymmetric", "align_corners"])
def test_resize_nearest(nm, ctm):
    resize(f(2, 3, 4, 5), sizes=[2, 3, 7, 3], mode="nearest", nearest_mode=nm, coordinate_transformation_mode=ctm)


def test_resize_nearest_ints_native():
    x = RNG.integers(-100, 100, (1, 2, 3, 4)).astype(np.int8)
    resize(x, scales=[1, 1, 2.5, 0.5], mode="nearest")


@pytest.mark.parametrize("dt", [np.uint8, np.int32, np.float64, np.float16])
def test_resize_linear_types_native(dt):
    x = (RNG.integers(0, 200, (1, 2, 4, 5)) if np.dtype(dt).kind in "iu" else f(1, 2, 4, 5)).astype(dt)
    tol = 2e-3 if dt == np.float16 else 1e-5
    resize(x, scales=[1, 1, 1.5, 0.8], mode="linear", ref="onnx", rtol=tol, atol=tol)


def test_resize_cubic_exclude_outside_a():
    resize(f(1, 1, 6, 6), scales=[1, 1, 0.7, 1.4], mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_tf_crop_and_resize(mode):
    resize(f(1, 2, 5, 5), sizes=[1, 2, 4, 6], roi=[0, 0, -0.2, 0.3, 1, 1, 0.7, 1.3], mode=mode,
           coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=3.5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias(mode):
    # 0.1 needs more taps than are unrolled; 1.4 is upsampling (antialias is a no-op there).
    resize(f(1, 2, 20, 7), scales=[1, 1, 0.1, 1.4], mode=mode, antialias=1, ref="onnx")


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_axes_keep_aspect(policy):
    resize(f(2, 5, 3, 4), sizes=[7, 5], axes=[3, 1], mode="linear", keep_aspect_ratio_policy=policy, ref="onnx")


def test_resize_opset10_11_13():
    resize(f(1, 1, 4, 6), scales=[1, 1, 2, 0.5], mode="nearest", opset=10)
    resize(f(1, 1, 4, 6), scales=[1, 1, 1.6, 0.7], mode="nearest", opset=11,
           coordinate_transformation_mode="tf_half_pixel_for_nn")
    resize(f(1, 1, 4, 6), scales=[1, 1, 1.5, 0.5], mode="linear", opset=10)
    resize(f(1, 1, 4, 6), sizes=[1, 1, 7, 3], mode="cubic", opset=13)


def test_resize_identity_is_a_copy():
    # onnx.reference goes through float64 (and loses these low bits); we copy.
    x = RNG.integers(-2**62, 2**62, (2, 3)).astype(np.int64)
    m = model([h.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")], {"x": x}, {"y": np.int64},
              initializers={"s": np.ones(2, np.float32)})
    mod = lowered(m)
    np.testing.assert_array_equal(run_loop_module(mod, [x])[0], x)
    np.testing.assert_array_equal(run_native(mod, [x])[0], x)


def test_resize_scales_must_be_constant():
    x = f(1, 1, 2, 2)
    m = model([h.make_node("Resize", ["x", "", "s"], ["y"])], {"x": x, "s": np.ones(4, np.float32)},
              {"y": (1, [1, 1, 2, 2])})
    with pytest.raises(LoweringError, match="scales must be a constant"):
        lowered(m)
