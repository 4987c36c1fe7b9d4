"""OneHot, CenterCropPad, Col2Im, AffineGrid."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import helper as h

from newops_helpers import RNG, check, lowered, model
from tcc.dialects.conversions.graph_to_loop import LoweringError


def f(*s, dt=np.float32):
    return RNG.standard_normal(s).astype(dt)


@pytest.mark.parametrize("axis", [-1, 0, 1, -3])
@pytest.mark.parametrize("idt,vdt", [(np.int64, np.float32), (np.int32, np.int64), (np.float32, np.float32),
                                     (np.uint8, np.float64)])
def test_onehot(axis, idt, vdt):
    depth = 5
    lo = 0 if np.dtype(idt).kind == "u" else -7
    ind = RNG.integers(lo, 8, (3, 4)).astype(idt)  # some out of [-depth, depth): all off
    vals = np.array([RNG.integers(-3, 3), RNG.integers(4, 9)]).astype(vdt)
    # ORT's OneHot kernels cover few type pairs: onnx.reference for the others.
    check([h.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis)], {"i": ind, "v": vals}, {"y": vdt},
          opset=11, initializers={"d": np.array(depth, np.int64)},
          ref="ort" if (idt, vdt) == (np.int64, np.float32) else "onnx")


def test_onehot_depth_must_be_constant():
    m = model([h.make_node("OneHot", ["i", "d", "v"], ["y"])],
              {"i": np.zeros(3, np.int64), "d": np.array([4], np.int64), "v": np.zeros(2, np.float32)},
              {"y": (1, [3, 4])}, opset=11)
    with pytest.raises(LoweringError, match="depth must be a constant"):
        lowered(m)


@pytest.mark.parametrize("shape,axes", [([3, 5, 6], None), ([7, 2], [-1, 1]), ([2, 9], [0, 2]), ([4], [0])])
@pytest.mark.parametrize("dt", [np.float32, np.int16, np.bool_])
def test_center_crop_pad(shape, axes, dt):
    x = (f(4, 5, 6) > 0) if dt == np.bool_ else (f(4, 5, 6) * 10).astype(dt)
    attrs = {} if axes is None else {"axes": axes}
    check([h.make_node("CenterCropPad", ["x", "s"], ["y"], **attrs)], {"x": x}, {"y": dt}, opset=18, ref="onnx",
          initializers={"s": np.array(shape, np.int64)})


@pytest.mark.parametrize("img,blk,attrs", [
    ([5, 6], [2, 3], {}),
    ([6, 7], [3, 2], {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ([4, 3, 5], [2, 1, 3], {"pads": [1, 0, 1, 0, 0, 1], "strides": [1, 2, 2]}),
])
@pytest.mark.parametrize("dt", [np.float32, np.int32, np.float16])
def test_col2im(img, blk, attrs, dt):
    nd = len(img)
    st, dil = attrs.get("strides", [1] * nd), attrs.get("dilations", [1] * nd)
    pads = attrs.get("pads", [0] * 2 * nd)
    nb = [(img[d] + pads[d] + pads[nd + d] - (dil[d] * (blk[d] - 1) + 1)) // st[d] + 1 for d in range(nd)]
    x = (f(2, 3 * int(np.prod(blk)), int(np.prod(nb))) * 4).astype(dt)
    tol = 2e-3 if dt == np.float16 else 1e-5
    check([h.make_node("Col2Im", ["x", "i", "b"], ["y"], **attrs)], {"x": x}, {"y": dt}, opset=18, ref="onnx",
          initializers={"i": np.array(img, np.int64), "b": np.array(blk, np.int64)},
          rtol=tol, atol=tol)


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 1, 3, 1, 4], [2, 1, 1, 6]])
@pytest.mark.parametrize("ac", [0, 1])
@pytest.mark.filterwarnings("ignore:divide by zero")  # onnx.reference on a size-1 dim under align_corners
def test_affine_grid(size, ac):
    nd = len(size) - 2
    theta = f(size[0], nd, nd + 1)
    check([h.make_node("AffineGrid", ["t", "s"], ["y"], align_corners=ac)], {"t": theta}, {"y": np.float32},
          opset=20, ref="onnx", initializers={"s": np.array(size, np.int64)}, rtol=1e-5, atol=1e-6)


def test_affine_grid_f64_matches_ort():
    theta = f(2, 2, 3, dt=np.float64)
    check([h.make_node("AffineGrid", ["t", "s"], ["y"])], {"t": theta}, {"y": np.float64}, opset=20,
          initializers={"s": np.array([2, 3, 4, 6], np.int64)})
