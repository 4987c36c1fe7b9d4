"""The random ops. Seeded: exactly onnx.reference's values (numpy's legacy
RandomState stream), through the loop interpreter and the native backend.
Unseeded: fresh values on every run, in range, with the right mean, end to
end (the OS key is a native call the interpreter does not run)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h

import tcc
from tcc.dialects.conversions.loop_to_native.jit import run_native
from tcc.dialects.loop.interpreter import run_loop_module

from helpers import same_outputs
from newops_helpers import RNG, expected, lowered, model

SEED = float(RNG.integers(0, 2 ** 31))


def _both(m, feeds, rtol=0, atol=0):
    want = expected(m, feeds, "onnx")
    mod = lowered(m)
    args = list(feeds.values())
    same_outputs(run_loop_module(mod, args), want, rtol, atol, "interpreter")
    same_outputs(run_native(mod, args), want, rtol, atol, "native")


@pytest.mark.parametrize("op,attrs", [("RandomUniformLike", dict(low=-2.0, high=3.0)),
                                      ("RandomNormalLike", dict(mean=1.0, scale=0.5))])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_seeded_random_like_matches_reference(op, attrs, dt):
    x = RNG.standard_normal((3, 17)).astype(dt)
    _both(model([h.make_node(op, ["x"], ["y"], seed=SEED, **attrs)], {"x": x}, {"y": dt}), {"x": x},
          rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op,attrs", [("RandomUniform", dict(low=0.5, high=1.5)), ("RandomNormal", {})])
def test_seeded_random_with_shape_matches_reference(op, attrs):
    x = np.zeros((1,), np.float32)  # a graph needs an input: y + 0 * x
    nodes = [h.make_node(op, [], ["r"], seed=SEED, shape=[4, 5], dtype=TensorProto.FLOAT, **attrs),
             h.make_node("Mul", ["x", "zero"], ["z"]), h.make_node("Add", ["r", "z"], ["y"])]
    m = model(nodes, {"x": x}, {"y": np.float32}, initializers={"zero": np.zeros((1,), np.float32)})
    _both(m, {"x": x}, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dt,out", [(np.float32, None), (np.float64, TensorProto.FLOAT)])
def test_seeded_bernoulli_matches_reference(dt, out):
    p = RNG.uniform(0, 1, (6, 50)).astype(dt)
    p[0, :5] = [0, 1, 0.5, 1e-9, 1 - 1e-7]
    attrs = {"seed": SEED} if out is None else {"seed": SEED, "dtype": out}
    m = model([h.make_node("Bernoulli", ["x"], ["y"], **attrs)], {"x": p}, {"y": dt if out is None else np.float32})
    _both(m, {"x": p})


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("ratio", [0.3, 0.0])
def test_seeded_training_dropout_matches_reference(training, ratio):
    feeds = {"x": RNG.standard_normal((4, 5, 6)).astype(np.float32), "r": np.array(ratio, np.float32),
             "t": np.array(training)}
    m = model([h.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=int(SEED))], feeds,
              {"y": np.float32, "mask": np.bool_})
    _both(m, feeds, rtol=1e-6, atol=0)


def _session(tmp_path, nodes, feeds, outs, maccel=()):
    m = model(nodes, feeds, outs)
    return tcc.load(tcc.compile(m, maccel=list(maccel), output=str(tmp_path / "m.tcc")))


@pytest.mark.parametrize("maccel", [(), ("cpu",)])
def test_unseeded_uniform_and_normal_are_fresh_per_run(tmp_path, maccel):
    x = np.zeros((200, 100), np.float32)
    s = _session(tmp_path, [h.make_node("RandomUniformLike", ["x"], ["u"], low=-1.0, high=3.0),
                            h.make_node("RandomNormalLike", ["x"], ["n"], mean=2.0, scale=0.5)],
                 {"x": x}, {"u": np.float32, "n": np.float32}, maccel)
    u1, n1 = s.run({"x": x})
    u2, n2 = s.run({"x": x})
    assert not np.array_equal(u1, u2) and not np.array_equal(n1, n2)
    assert u1.min() >= -1 and u1.max() < 3
    # 20,000 draws: the means' standard errors are ~0.008 and ~0.0035
    assert abs(u1.mean() - 1.0) < 0.05 and abs(n1.mean() - 2.0) < 0.03 and abs(n1.std() - 0.5) < 0.03


def test_unseeded_bernoulli_and_dropout(tmp_path):
    feeds = {"p": np.full((100, 100), 0.25, np.float32), "x": RNG.uniform(1, 2, (100, 100)).astype(np.float32),
             "r": np.array(0.4, np.float32), "t": np.array(True)}
    s = _session(tmp_path, [h.make_node("Bernoulli", ["p"], ["b"]),
                            h.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])],
                 feeds, {"b": np.float32, "y": np.float32, "mask": np.bool_})
    b, y, mask = s.run(feeds)
    assert set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.25) < 0.03
    assert abs(mask.mean() - 0.6) < 0.03
    np.testing.assert_allclose(y, np.where(mask, feeds["x"] / np.float32(0.6), 0), rtol=1e-6)
    assert not np.array_equal(s.run(feeds)[2], mask)


def test_bad_seed_is_one_line_error():
    from tcc.dialects.conversions.graph_to_loop.convert import LoweringError
    x = np.zeros((3,), np.float32)
    m = model([h.make_node("RandomUniformLike", ["x"], ["y"], seed=-5.0)], {"x": x}, {"y": np.float32})
    with pytest.raises(LoweringError, match="seed -5.0 is outside") as e:
        lowered(m)
    assert "\n" not in str(e.value)
