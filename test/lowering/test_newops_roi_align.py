"""RoiAlign against onnx.reference on fresh random images and ROIs, through
the loop interpreter and the native backend (sampling grids decided at run
time from the ROI values, or fixed by sampling_ratio)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import helper as h

from tcc.dialects.conversions.graph_to_loop.convert import LoweringError
from newops_helpers import RNG, check, lowered, model


def _inputs(n=2, c=3, hw=(9, 11), r=5, dt=np.float32):
    x = RNG.standard_normal((n, c) + hw).astype(dt)
    lo = RNG.uniform(-2, 6, (r, 2))
    size = RNG.uniform(0.2, 7, (r, 2))
    rois = np.concatenate([lo, lo + size], 1)[:, [0, 1, 2, 3]].astype(dt)  # x1, y1, x2, y2
    return {"x": x, "rois": rois, "b": RNG.integers(0, n, r).astype(np.int64)}


@pytest.mark.parametrize("attrs", [
    dict(mode="avg", sampling_ratio=0, output_height=3, output_width=4, spatial_scale=1.0),
    dict(mode="avg", sampling_ratio=2, output_height=2, output_width=2, spatial_scale=0.7,
         coordinate_transformation_mode="output_half_pixel"),
    dict(mode="max", sampling_ratio=0, output_height=4, output_width=3, spatial_scale=1.3),
    dict(mode="max", sampling_ratio=3, output_height=1, output_width=5, coordinate_transformation_mode="output_half_pixel"),
])
def test_roi_align_against_reference(attrs):
    ins = _inputs()
    check([h.make_node("RoiAlign", ["x", "rois", "b"], ["y"], **attrs)], ins, {"y": np.float32}, opset=22,
          ref="onnx", rtol=1e-5, atol=1e-6)


def test_roi_align_double():
    ins = _inputs(dt=np.float64)
    check([h.make_node("RoiAlign", ["x", "rois", "b"], ["y"], output_height=2, output_width=3)], ins,
          {"y": np.float64}, opset=22, ref="onnx", rtol=1e-12, atol=1e-12)


def test_roi_align_bad_mode_is_one_line_error():
    ins = _inputs()
    m = model([h.make_node("RoiAlign", ["x", "rois", "b"], ["y"], mode="median")], ins, {"y": np.float32}, 22)
    with pytest.raises(LoweringError, match="mode 'median' is not avg or max") as e:
        lowered(m)
    assert "\n" not in str(e.value)
