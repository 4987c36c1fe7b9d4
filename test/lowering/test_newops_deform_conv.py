"""DeformConv against onnx.reference on fresh random images, weights and
offsets, through the loop interpreter and the native backend."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import helper as h

from tcc.dialects.conversions.graph_to_loop.convert import LoweringError
from newops_helpers import RNG, check, lowered, model


def f(*s):
    return RNG.standard_normal(s).astype(np.float32)


@pytest.mark.parametrize("n,c,m,hw,k,group,og,attrs,extras", [
    (1, 2, 3, (5, 6), (2, 2), 1, 1, {}, ()),
    (2, 4, 4, (6, 5), (3, 3), 2, 2, dict(pads=[1, 1, 1, 1]), ("b", "mask")),
    (1, 2, 2, (7, 7), (2, 3), 1, 2, dict(strides=[2, 1], dilations=[1, 2], pads=[0, 1, 1, 0]), ("mask",)),
])
def test_deform_conv_against_reference(n, c, m, hw, k, group, og, attrs, extras):
    st, di = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    p = attrs.get("pads", [0, 0, 0, 0])
    oh = (hw[0] + p[0] + p[2] - (k[0] - 1) * di[0] - 1) // st[0] + 1
    ow = (hw[1] + p[1] + p[3] - (k[1] - 1) * di[1] - 1) // st[1] + 1
    ins = {"x": f(n, c, *hw), "w": f(m, c // group, *k), "off": f(n, og * k[0] * k[1] * 2, oh, ow) * 1.5}
    names = ["x", "w", "off", "", ""]
    if "b" in extras:
        ins["b"], names[3] = f(m), "b"
    if "mask" in extras:
        ins["mask"], names[4] = RNG.uniform(0, 1, (n, og * k[0] * k[1], oh, ow)).astype(np.float32), "mask"
    while names[-1] == "":
        names.pop()
    check([h.make_node("DeformConv", names, ["y"], group=group, offset_group=og, **attrs)], ins,
          {"y": np.float32}, opset=22, ref="onnx", rtol=1e-4, atol=1e-5)


def test_deform_conv_bad_offset_shape_is_one_line_error():
    ins = {"x": f(1, 2, 5, 5), "w": f(2, 2, 2, 2), "off": f(1, 6, 4, 4)}
    m = model([h.make_node("DeformConv", ["x", "w", "off"], ["y"])], ins, {"y": (np.float32, [1, 2, 4, 4])}, 22)
    with pytest.raises(LoweringError, match="offset has shape") as e:
        lowered(m)
    assert "\n" not in str(e.value)
