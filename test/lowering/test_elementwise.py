import numpy as np
import pytest
from onnx import helper as h

from helpers import check, rand

UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Erf", "Floor", "Ceil", "Softsign", "Softplus",
         "Elu", "Selu", "LeakyRelu", "HardSigmoid", "HardSwish", "Sign", "Sin", "Cos", "Atan", "Mish"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    check([h.make_node(op, ["x"], ["y"])], {"x": rand(3, 5)}, {"y": (np.float32, None)})


@pytest.mark.parametrize("op", ["Log", "Sqrt", "Reciprocal"])
def test_unary_positive(op):
    check([h.make_node(op, ["x"], ["y"])], {"x": rand(3, 5, lo=0.1)}, {"y": (np.float32, None)})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"])
def test_binary_broadcast(op):
    lo = 0.5 if op == "Pow" else -2
    check([h.make_node(op, ["a", "b"], ["c"])], {"a": rand(2, 3, 4, lo=lo), "b": rand(3, 1, lo=0.5)},
          {"c": (np.float32, None)}, rtol=1e-5)


@pytest.mark.parametrize("dt", [np.int32, np.int64, np.int8, np.uint8])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Mod"])
def test_binary_int(op, dt):
    a = rand(3, 4, dtype=dt, lo=-20 if dt != np.uint8 else 0, hi=20)
    b = rand(4, dtype=dt, lo=1, hi=5)
    check([h.make_node(op, ["a", "b"], ["c"])], {"a": a, "b": b}, {"c": (dt, None)})


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_compare(op):
    a = rand(3, 4).round()
    check([h.make_node(op, ["a", "b"], ["c"])], {"a": a, "b": rand(4).round()}, {"c": (np.bool_, None)})


def test_where_and_logic():
    c = rand(3, 4, dtype=np.bool_)
    check([h.make_node("Not", ["c"], ["n"]), h.make_node("Where", ["n", "a", "b"], ["y"])],
          {"c": c, "a": rand(3, 4), "b": rand(1, 4)}, {"y": (np.float32, None)})


def test_clip_inputs_and_attrs():
    check([h.make_node("Clip", ["x", "lo", "hi"], ["y"])], {"x": rand(4, 4)}, {"y": (np.float32, None)},
          initializers={"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)})
    check([h.make_node("Clip", ["x"], ["y"], min=-0.3, max=0.4)], {"x": rand(4, 4)}, {"y": (np.float32, None)},
          opset=6)


@pytest.mark.parametrize("src,dst", [(np.float32, np.int32), (np.int64, np.float32), (np.float32, np.float16),
                                     (np.float16, np.float32), (np.int32, np.int8), (np.uint8, np.int64),
                                     (np.float32, np.bool_), (np.bool_, np.float32), (np.float64, np.float32)])
def test_cast(src, dst):
    from helpers import NP2ONNX
    x = rand(3, 4, dtype=src, lo=-100 if np.dtype(src).kind != "u" else 0, hi=100)
    check([h.make_node("Cast", ["x"], ["y"], to=NP2ONNX[np.dtype(dst)])], {"x": x}, {"y": (dst, None)})


def test_f16_arith():
    check([h.make_node("Mul", ["a", "b"], ["c"]), h.make_node("Sigmoid", ["c"], ["d"])],
          {"a": rand(4, 5, dtype=np.float16), "b": rand(5, dtype=np.float16)}, {"d": (np.float16, None)},
          rtol=1e-3, atol=1e-3)


def test_gelu_and_erf_chain():
    # x * 0.5 * (1 + erf(x / sqrt(2))): BERT's GELU as exported.
    inits = {"s": np.array(1.4142135, np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32)}
    nodes = [h.make_node("Div", ["x", "s"], ["a"]), h.make_node("Erf", ["a"], ["b"]),
             h.make_node("Add", ["b", "one"], ["c"]), h.make_node("Mul", ["x", "c"], ["d"]),
             h.make_node("Mul", ["d", "half"], ["y"])]
    for fuse in (False, True):
        check(nodes, {"x": rand(2, 8)}, {"y": (np.float32, None)}, initializers=inits, fuse=fuse)
