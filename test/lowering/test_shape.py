import numpy as np
import pytest
from onnx import helper as h

from helpers import check, rand

I64 = lambda *v: np.array(v, np.int64)  # noqa: E731


def test_transpose_reshape_flatten_squeeze():
    check([h.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]), h.make_node("Reshape", ["t", "s"], ["r"]),
           h.make_node("Flatten", ["r"], ["f"], axis=1), h.make_node("Unsqueeze", ["f", "ax"], ["u"]),
           h.make_node("Squeeze", ["u", "ax"], ["y"])],
          {"x": rand(2, 3, 4)}, {"y": (np.float32, None)}, initializers={"s": I64(4, -1), "ax": I64(0)})


def test_concat_split():
    check([h.make_node("Concat", ["a", "b"], ["c"], axis=1), h.make_node("Split", ["c", "sp"], ["p", "q"], axis=1)],
          {"a": rand(2, 3, 2), "b": rand(2, 1, 2)}, {"p": (np.float32, None), "q": (np.float32, None)},
          initializers={"sp": I64(1, 3)})


@pytest.mark.parametrize("starts,ends,axes,steps", [([1], [3], [1], [1]), ([0, -1], [2, -5], [0, 2], [1, -2]),
                                                    ([-100], [100], [2], [3])])
def test_slice(starts, ends, axes, steps):
    check([h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], {"x": rand(3, 4, 6)}, {"y": (np.float32, None)},
          initializers={"s": I64(*starts), "e": I64(*ends), "a": I64(*axes), "st": I64(*steps)})


def test_gather_negative_indices():
    check([h.make_node("Gather", ["x", "i"], ["y"], axis=1)], {"x": rand(2, 5, 3), "i": I64(0, -1, 3, -5)},
          {"y": (np.float32, None)})
    check([h.make_node("Gather", ["x", "i"], ["y"], axis=0)], {"x": rand(7, 4)},
          {"y": (np.float32, None)}, initializers={"i": np.array([[1, 2], [6, 0]], np.int64)})


def test_gather_elements():
    check([h.make_node("GatherElements", ["x", "i"], ["y"], axis=1)],
          {"x": rand(3, 4), "i": np.array([[0, -1], [2, 3], [1, 1]], np.int64)}, {"y": (np.float32, None)})


def test_expand_tile_where():
    check([h.make_node("Expand", ["x", "s"], ["e"]), h.make_node("Tile", ["e", "r"], ["y"])],
          {"x": rand(3, 1)}, {"y": (np.float32, None)}, initializers={"s": I64(2, 3, 4), "r": I64(1, 2, 1)})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode):
    check([h.make_node("Pad", ["x", "p", "v"], ["y"], mode=mode)], {"x": rand(3, 4)}, {"y": (np.float32, None)},
          initializers={"p": I64(1, 2, 2, 1), "v": np.array(1.5, np.float32)})


def test_shape_size_constantofshape_range():
    from onnx import TensorProto
    check([h.make_node("Shape", ["x"], ["s"]), h.make_node("ConstantOfShape", ["s"], ["c"],
                                                           value=h.make_tensor("v", TensorProto.FLOAT, [1], [2.5])),
           h.make_node("Size", ["x"], ["n"])],
          {"x": rand(2, 3)}, {"s": (np.int64, None), "c": (np.float32, None), "n": (np.int64, None)})
    check([h.make_node("Range", ["a", "b", "d"], ["y"])], {}, {"y": (np.float32, None)},
          initializers={"a": np.array(1.0, np.float32), "b": np.array(4.0, np.float32), "d": np.array(0.5, np.float32)})


def test_identity_output_and_input_passthrough():
    check([h.make_node("Identity", ["x"], ["y"]), h.make_node("Relu", ["x"], ["z"])], {"x": rand(3)},
          {"y": (np.float32, None), "z": (np.float32, None)})


def test_constant_output():
    check([h.make_node("Constant", [], ["y"], value=h.make_tensor("v", 1, [2], [1.0, 2.0]))], {},
          {"y": (np.float32, None)})
