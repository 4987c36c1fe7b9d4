import numpy as np
import pytest
from onnx import helper as h

from helpers import check, rand

POOL = [dict(kernel_shape=[2, 2]), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), dict(kernel_shape=[3, 2], auto_pad="SAME_UPPER")]


@pytest.mark.parametrize("attrs", POOL)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool(op, attrs):
    check([h.make_node(op, ["x"], ["y"], **attrs)], {"x": rand(2, 3, 7, 8)}, {"y": (np.float32, None)})


def test_avgpool_count_include_pad():
    check([h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)],
          {"x": rand(1, 2, 5, 5)}, {"y": (np.float32, None)})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op):
    check([h.make_node(op, ["x"], ["y"])], {"x": rand(2, 3, 4, 5)}, {"y": (np.float32, None)})


@pytest.mark.parametrize("axis", [-1, 1, 0])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax(op, axis):
    check([h.make_node(op, ["x"], ["y"], axis=axis)], {"x": rand(2, 3, 4, lo=-5, hi=5)}, {"y": (np.float32, None)})


def test_softmax_opset11_coerces_2d():
    check([h.make_node("Softmax", ["x"], ["y"], axis=1)], {"x": rand(2, 3, 4)}, {"y": (np.float32, None)}, opset=11)


def test_layernorm_with_stats():
    check([h.make_node("LayerNormalization", ["x", "s", "b"], ["y", "m", "i"], axis=-2)], {"x": rand(2, 3, 4)},
          {"y": (np.float32, None), "m": (np.float32, None), "i": (np.float32, None)},
          initializers={"s": rand(3, 4), "b": rand(3, 4)}, rtol=1e-4, atol=1e-5)


def test_batchnorm_and_instancenorm():
    inits = {"s": rand(3), "b": rand(3), "m": rand(3), "v": rand(3, lo=0.5)}
    check([h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], {"x": rand(2, 3, 4, 5)},
          {"y": (np.float32, None)}, initializers=inits, rtol=1e-4, atol=1e-5)
    check([h.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])], {"x": rand(2, 3, 4, 5)},
          {"y": (np.float32, None)}, initializers={"s": rand(3), "b": rand(3)}, rtol=1e-4, atol=1e-5)


REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSumExp", "ReduceSumSquare"]


@pytest.mark.parametrize("axes,keep", [([1], 1), ([0, 2], 0), ([-1], 1), (None, 0)])
@pytest.mark.parametrize("op", REDUCE)
def test_reduce(op, axes, keep):
    inits = {} if axes is None else {"axes": np.array(axes, np.int64)}
    check([h.make_node(op, ["x"] + (["axes"] if axes is not None else []), ["y"], keepdims=keep)],
          {"x": rand(2, 3, 4, lo=0.2, hi=1.5)}, {"y": (np.float32, None)}, initializers=inits, rtol=1e-4)


def test_reduce_axes_attribute_old_opset():
    check([h.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)], {"x": rand(2, 3, 4)},
          {"y": (np.float32, None)}, opset=13)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keep,last", [(1, 1, 0), (0, 0, 1), (-1, 1, 0)])
def test_arg(op, axis, keep, last):
    x = rand(3, 4, 5).round(1)
    check([h.make_node(op, ["x"], ["y"], axis=axis, keepdims=keep, select_last_index=last)], {"x": x},
          {"y": (np.int64, None)})
