import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import helper as h

from newops_helpers import RNG, check


def f(*s, dt=np.float32):
    return RNG.standard_normal(s).astype(dt)


@pytest.mark.parametrize("axis,wshape", [(-1, (5,)), (1, (3, 1, 5)), (0, (2, 3, 4, 5))])
def test_rms_normalization(axis, wshape):
    check([h.make_node("RMSNormalization", ["x", "w"], ["y"], axis=axis, epsilon=1e-3)],
          {"x": f(2, 3, 4, 5), "w": f(*wshape)}, {"y": 1}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("red", ["none", "sum", "mean"])
def test_losses(red):
    x = f(3, 4, 2, 2)
    t = RNG.integers(0, 4, (3, 2, 2)).astype(np.int64)
    t[0, 0, 0] = -1
    w = np.abs(f(4)) + 0.1
    check([h.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["l", "lp"], reduction=red, ignore_index=-1),
           h.make_node("NegativeLogLikelihoodLoss", ["lp", "t"], ["n"], reduction=red, ignore_index=-1),
           h.make_node("SoftmaxCrossEntropyLoss", ["x", "t32"], ["m"], reduction=red)],
          {"x": x, "t": t, "w": w, "t32": np.clip(t, 0, 3).astype(np.int32)}, {"l": 1, "lp": 1, "n": 1, "m": 1},
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("red", ["none", "add", "mul", "max", "min"])
def test_scatter(red):
    data = f(4, 3)
    ind = np.array([[1, -1, 0], [3, 0, 0]], np.int64)
    check([h.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=0, reduction=red),
           h.make_node("ScatterND", ["d", "j", "u2"], ["z"], reduction=red)],
          {"d": data, "i": ind if red != "none" else np.array([[1, -1, 0], [3, 0, 2]], np.int64), "u": f(2, 3),
           "j": np.array([[1], [3]] if red == "none" else [[1], [1]], np.int64), "u2": f(2, 3)},
          {"y": 1, "z": 1}, opset=18)


@pytest.mark.parametrize("eq,shapes", [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("...ii->...i", [(3, 4, 4)]),
                                       ("ij,kj", [(3, 4), (2, 4)]), ("i,i", [(5,), (5,)])])
def test_einsum(eq, shapes):
    ins = {f"x{k}": f(*s, dt=np.float64) for k, s in enumerate(shapes)}
    check([h.make_node("Einsum", list(ins), ["y"], equation=eq)], ins, {"y": 11}, opset=12)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_hardmax(axis):
    x = np.round(f(3, 4, 5), 1)
    check([h.make_node("Hardmax", ["x"], ["y"], axis=axis)], {"x": x}, {"y": 1}, opset=13)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("pad,ac", [("zeros", 0), ("border", 1), ("reflection", 0)])
def test_gridsample_2d(mode, pad, ac):
    g = RNG.uniform(-1.3, 1.3, (2, 3, 4, 2)).astype(np.float32)
    check([h.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad, align_corners=ac)],
          {"x": f(2, 3, 4, 5), "g": g}, {"y": 1}, opset=22, ref="onnx", rtol=1e-4, atol=1e-5)


def test_gridsample_3d_linear_matches_ort():
    g = RNG.uniform(-1.2, 1.2, (1, 2, 3, 2, 3)).astype(np.float32)
    check([h.make_node("GridSample", ["x", "g"], ["y"], mode="linear", padding_mode="border")],
          {"x": f(1, 2, 3, 4, 3), "g": g}, {"y": 1}, opset=22, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("inter,rd,three_d", [(0, 0, False), (1, 4, False), (0, 4, True)])
def test_rotary_embedding(inter, rd, three_d):
    x = f(2, 3, 16) if three_d else f(2, 2, 3, 8)
    half = (rd or 8) // 2
    attrs = dict(interleaved=inter, rotary_embedding_dim=rd) | (dict(num_heads=2) if three_d else {})
    check([h.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], **attrs)],
          {"x": x, "c": f(10, half), "s": f(10, half), "p": RNG.integers(0, 10, (2, 3)).astype(np.int64)},
          {"y": 1}, ref="onnx", rtol=1e-5, atol=1e-6)


def test_gathernd_reversesequence():
    check([h.make_node("GatherND", ["d", "i"], ["y"], batch_dims=1),
           h.make_node("ReverseSequence", ["d", "n"], ["z"], batch_axis=0, time_axis=1)],
          {"d": f(2, 4, 3), "i": np.array([[[1], [-1]], [[0], [2]]], np.int64), "n": np.array([3, 1], np.int64)},
          {"y": 1, "z": 1}, opset=18)


@pytest.mark.parametrize("p,axis", [(1, 1), (2, -1)])
def test_lpnorm_lrn_swish(p, axis):
    x = f(2, 5, 3, 2)
    x[0, :, 0, 0] = 0.0
    check([h.make_node("LpNormalization", ["x"], ["y"], p=p, axis=axis),
           h.make_node("LRN", ["x"], ["z"], size=3, alpha=0.01, beta=0.75, bias=1.5)],
          {"x": x}, {"y": 1, "z": 1}, opset=18, rtol=1e-4, atol=1e-5)
    check([h.make_node("Swish", ["x"], ["y"], alpha=0.7)], {"x": x}, {"y": 1}, opset=24, ref="onnx", rtol=1e-5)


def test_group_normalization():
    check([h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=1e-3)],
          {"x": f(2, 4, 3, 2), "s": f(4), "b": f(4)}, {"y": (1, (2, 4, 3, 2))}, opset=21, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("excl,rev,axis", [(0, 0, 1), (1, 0, -1), (0, 1, 0), (1, 1, 2)])
def test_cumulative(op, excl, rev, axis):
    x = RNG.uniform(0.5, 1.5, (2, 3, 4)).astype(np.float32)
    xi = RNG.integers(-3, 4, (2, 3, 4)).astype(np.int32)
    nodes = [h.make_node(op, ["x", "a"], ["y"], exclusive=excl, reverse=rev),
             h.make_node(op, ["xi", "a"], ["yi"], exclusive=excl, reverse=rev)]
    check(nodes, {"x": x, "xi": xi}, {"y": 1, "yi": 6}, opset=26, ref="onnx" if op == "CumProd" else "ort",
          initializers={"a": np.array(axis, np.int64)}, rtol=1e-5)


@pytest.mark.parametrize("largest,axis", [(1, 1), (0, -1), (1, 0)])
def test_topk(largest, axis):
    x = np.round(RNG.standard_normal((3, 5, 4)), 1).astype(np.float32)  # ties: the lower index first
    xi = RNG.integers(0, 4, (3, 5, 4)).astype(np.int64)
    nodes = [h.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest),
             h.make_node("TopK", ["xi", "k"], ["vi", "ii"], axis=axis, largest=largest)]
    check(nodes, {"x": x, "xi": xi}, {"v": 1, "i": 7, "vi": 7, "ii": 7}, opset=11,
          initializers={"k": np.array([2], np.int64)})
