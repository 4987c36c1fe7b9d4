import numpy as np
import pytest
from onnx import helper as h

from helpers import check, rand


@pytest.mark.parametrize("sa,sb", [((3, 5), (5, 4)), ((2, 3, 5), (5, 7)), ((2, 1, 3, 5), (4, 5, 2)),
                                   ((5,), (5, 3)), ((2, 3, 5), (5,))])
def test_matmul(sa, sb):
    check([h.make_node("MatMul", ["a", "b"], ["c"])], {"a": rand(*sa), "b": rand(*sb)}, {"c": (np.float32, None)},
          rtol=1e-4, atol=1e-4)


def test_matmul_blocked(monkeypatch):
    # Small blocks so the interpreter exercises partial i/j/k blocks quickly.
    from tcc.dialects.conversions.graph_to_loop.math import matmul
    monkeypatch.setattr(matmul, "JB", 4)
    monkeypatch.setattr(matmul, "KB", 3)
    monkeypatch.setattr(matmul, "IB", 2)
    for sa, sb in (((7, 10), (10, 9)), ((3, 10), (10, 13))):
        check([h.make_node("MatMul", ["a", "b"], ["c"])], {"a": rand(*sa), "b": rand(*sb)},
              {"c": (np.float32, None)}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(ta, tb):
    a = rand(6, 5) if ta else rand(5, 6)
    b = rand(4, 6) if tb else rand(6, 4)
    check([h.make_node("Gemm", ["a", "b", "c"], ["y"], transA=ta, transB=tb, alpha=0.7, beta=1.5)],
          {"a": a, "b": b}, {"y": (np.float32, None)}, initializers={"c": rand(1, 4)})


def test_gemm_const_transposed_weight():
    check([h.make_node("Gemm", ["a", "w", "bias"], ["y"], transB=1)], {"a": rand(3, 8)}, {"y": (np.float32, None)},
          initializers={"w": rand(5, 8), "bias": rand(5)})


def test_matmul_int():
    check([h.make_node("MatMul", ["a", "b"], ["c"])], {"a": rand(3, 4, dtype=np.int32), "b": rand(4, 2, dtype=np.int32)},
          {"c": (np.int32, None)})


CONV = [dict(), dict(pads=[1, 1, 1, 1]), dict(strides=[2, 2], pads=[1, 0, 1, 2]), dict(dilations=[2, 1]),
        dict(auto_pad="SAME_UPPER", strides=[2, 2]), dict(auto_pad="SAME_LOWER"), dict(auto_pad="VALID", strides=[1, 2])]


@pytest.mark.parametrize("attrs", CONV)
def test_conv2d(attrs):
    check([h.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], {"x": rand(2, 3, 7, 6)},
          {"y": (np.float32, None)}, initializers={"w": rand(4, 3, 3, 3), "b": rand(4)}, rtol=1e-4, atol=1e-5)


def test_conv_groups_and_depthwise():
    check([h.make_node("Conv", ["x", "w"], ["y"], group=2, pads=[1, 1, 1, 1])], {"x": rand(1, 4, 5, 5)},
          {"y": (np.float32, None)}, initializers={"w": rand(6, 2, 3, 3)}, rtol=1e-4, atol=1e-5)
    check([h.make_node("Conv", ["x", "w", "b"], ["y"], group=4, strides=[2, 2], pads=[1, 1, 1, 1])],
          {"x": rand(1, 4, 6, 6)}, {"y": (np.float32, None)}, initializers={"w": rand(4, 1, 3, 3), "b": rand(4)},
          rtol=1e-4, atol=1e-5)


def test_conv1d_and_3d():
    check([h.make_node("Conv", ["x", "w"], ["y"], pads=[1, 2])], {"x": rand(1, 2, 9)}, {"y": (np.float32, None)},
          initializers={"w": rand(3, 2, 3)}, rtol=1e-4, atol=1e-5)
    check([h.make_node("Conv", ["x", "w"], ["y"], strides=[1, 2, 1])], {"x": rand(1, 2, 4, 5, 4)},
          {"y": (np.float32, None)}, initializers={"w": rand(2, 2, 2, 2, 2)}, rtol=1e-4, atol=1e-5)
