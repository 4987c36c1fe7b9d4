"""Dynamic dims and shape-deciding inputs work: the session specializes per
input shape/value at run time, matching onnxruntime, and caches."""
import os

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tcc
from tcc.runtime.signature import InputError

RNG = np.random.default_rng()  # reseeded per test by test/conftest.py


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def model():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Reshape", ["r", "s"], ["y"]),
             helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1)]
    w = RNG.standard_normal((6, 4)).astype(np.float32)
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6]),
                                       helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
                                       helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"]),
                           helper.make_tensor_value_info("m", TensorProto.FLOAT, ["c", "d"])],
                          [onnx_tensor(w)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def onnx_tensor(w):
    from onnx import numpy_helper
    return numpy_helper.from_array(w, "w")


def test_dynamic_batch_and_shape_inputs(rng, tmp_path, cache_dir):
    m = model()
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False))
    assert sess.input_signature[0]["shape"] == [None, 6]
    ref = ort.InferenceSession(m.SerializeToString())
    cases = [(2, [2, 4], [0]), (3, [4, 3], [1]), (2, [-1, 2], [1]), (2, [2, 4], [0])]
    for n, shape, axes in cases:
        feeds = {"x": rng.standard_normal((n, 6)).astype(np.float32), "s": np.array(shape, np.int64),
                 "axes": np.array(axes, np.int64)}
        for got, want in zip(sess.run(feeds), ref.run(None, feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(sess.specializations()) == 3  # the repeated shape compiled once
    compiled = [f for _, _, fs in os.walk(cache_dir) for f in fs if f.endswith(".tcc")]
    assert len(compiled) == 3
    again = tcc.load(str(tmp_path / "m.tcc"))  # a new session finds them on disk
    feeds = {"x": rng.standard_normal((3, 6)).astype(np.float32), "s": np.array([4, 3], np.int64),
             "axes": np.array([1], np.int64)}
    np.testing.assert_allclose(again.run(feeds)[0], ref.run(None, feeds)[0], rtol=1e-5, atol=1e-6)


def test_bad_inputs_name_the_input(rng, tmp_path):
    sess = tcc.load(tcc.compile(model(), output=str(tmp_path / "m.tcc")))
    good = {"x": rng.standard_normal((2, 6)).astype(np.float32), "s": np.array([2, 4], np.int64),
            "axes": np.array([0], np.int64)}
    with pytest.raises(InputError, match="input 'x' has shape \\[2, 5\\], expected \\['\\?', 6\\]"):
        sess.run({**good, "x": np.zeros((2, 5), np.float32)})
    with pytest.raises(InputError, match="input 's' has dtype int32"):
        sess.run({**good, "s": good["s"].astype(np.int32)})
    with pytest.raises(InputError, match="missing input 'axes'"):
        sess.run({"x": good["x"], "s": good["s"]})


def test_warm_calls_are_keyed_by_dtype_shape_and_shape_input_values(rng, tmp_path, monkeypatch):
    """A warm call skips the input checks and the hashed key (the in-memory
    fast key): calls alternating shape-deciding values at one input shape
    must still each get their own specialization, and an input of the wrong
    dtype or rank after a warm call must still be refused."""
    monkeypatch.setenv("TCC_SPECIALIZE", "sync")
    m = model()
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc")))
    ref = ort.InferenceSession(m.SerializeToString())
    x = rng.standard_normal((4, 6)).astype(np.float32)
    shapes, axes = ([2, 8], [8, 2], [16, 1]), ([0], [1])
    for k in range(12):
        feeds = {"x": x if k % 3 else np.asfortranarray(rng.standard_normal((4, 6)).astype(np.float32)),
                 "s": np.array(shapes[k % 3], np.int64), "axes": np.array(axes[k % 2], np.int64)}
        if k == 11:
            feeds["s"] = np.array([0, 2, 0, 8], np.int64)[1::2]  # a strided view: its values, not its buffer
        for got, want in zip(sess.run(feeds), ref.run(None, feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(sess.specializations()) == 6
    good = {"x": x, "s": np.array([2, 8], np.int64), "axes": np.array([0], np.int64)}
    with pytest.raises(InputError, match="input 'x' has dtype float64"):
        sess.run({**good, "x": x.astype(np.float64)})
    with pytest.raises(InputError, match="input 's' has dtype int32"):
        sess.run({**good, "s": good["s"].astype(np.int32)})
    with pytest.raises(InputError, match="input 'x' has shape \\[4, 6, 1\\]"):
        sess.run({**good, "x": x[..., None]})


def test_loop_trip_count_from_float_inputs_and_if_condition_input(tmp_path):
    """Values reach shapes through float arithmetic (a Loop's trip count as
    ceil((limit - start) / delta)) and an If's condition is a graph input:
    both are specialized on, and every call matches onnxruntime."""
    F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    body = helper.make_graph([helper.make_node("Add", ["v", "d"], ["v2"]), helper.make_node("Identity", ["c"], ["c2"]),
                              helper.make_node("Identity", ["v"], ["o"])], "body",
                             [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c", B, []),
                              helper.make_tensor_value_info("v", F, [])],
                             [helper.make_tensor_value_info("c2", B, []), helper.make_tensor_value_info("v2", F, []),
                              helper.make_tensor_value_info("o", F, [])])
    then_g = helper.make_graph([helper.make_node("Neg", ["seq"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, None)])
    else_g = helper.make_graph([helper.make_node("Abs", ["seq"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, None)])
    nodes = [helper.make_node("Sub", ["limit", "start"], ["span"]), helper.make_node("Div", ["span", "d"], ["q"]),
             helper.make_node("Ceil", ["q"], ["n"]), helper.make_node("Cast", ["n"], ["M"], to=I64),
             helper.make_node("Loop", ["M", "", "start"], ["last", "seq"], body=body),
             helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, []) for n in ("start", "limit", "d")] +
                          [helper.make_tensor_value_info("flag", B, [])],
                          [helper.make_tensor_value_info("y", F, ["n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc")))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for start, limit, d, flag in [(0.5, 4.0, 1.0, True), (-2.0, 3.0, 0.75, False), (0.5, 4.0, 1.0, False)]:
        feeds = {"start": np.array(start, np.float32), "limit": np.array(limit, np.float32),
                 "d": np.array(d, np.float32), "flag": np.array(flag)}
        got, want = sess.run(feeds)[0], ref.run(None, feeds)[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_new_shape_runs_the_generic_path_while_its_compile_waits(rng, tmp_path):
    """issue 16 item 2: the first run at a new shape does not wait for the
    compile. Here the compile is held until the generic path has answered
    (were the run waiting for it, the hold would time out and the run fail);
    then the specialization lands and the next run uses it. No timing."""
    import threading

    from tcc.api import _compile_at_run_time
    from tcc.runtime.loader import load
    m = model()
    path = tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False)
    release, started = threading.Event(), []

    def held(module, options, out):
        started.append(1)
        assert release.wait(120), "the first run waited for the compile"
        return _compile_at_run_time(module, options, out)
    sess = load(path, compiler=held)
    ref = ort.InferenceSession(m.SerializeToString())
    feeds = {"x": rng.standard_normal((3, 6)).astype(np.float32), "s": np.array([2, 6], np.int64),
             "axes": np.array([1], np.int64)}
    first = sess.run(feeds)  # the generic path: the compile is held
    release.set()
    for got, want in zip(first, ref.run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(sess.specializations()) == 1 and started == [1]
    feeds["x"] = rng.standard_normal((3, 6)).astype(np.float32)
    for got, want in zip(sess.run(feeds), ref.run(None, feeds)):  # the specialized code
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(sess.specializations()) == 1 and started == [1]


@pytest.mark.parametrize("var, value, message", [
    ("TCC_SPECIALIZE", "later", r"TCC_SPECIALIZE='later': expected 'background' or 'sync'"),
    ("TCC_MAX_SPECIALIZATIONS", "many", r"TCC_MAX_SPECIALIZATIONS='many': expected a whole number >= 0"),
])
def test_bad_specialize_setting_is_one_line(tmp_path, monkeypatch, rng, var, value, message):
    sess = tcc.load(tcc.compile(model(), output=str(tmp_path / "m.tcc"), cache=False))
    monkeypatch.setenv(var, value)
    feeds = {"x": rng.standard_normal((2, 6)).astype(np.float32), "s": np.array([2, 4], np.int64),
             "axes": np.array([0], np.int64)}
    from tcc.dialects.ir.errors import TccError
    with pytest.raises(TccError, match=f"^{message}$"):
        sess.run(feeds)


def test_specializations_stop_at_the_limit_and_later_shapes_stay_generic(rng, tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_MAX_SPECIALIZATIONS", "1")
    m = model()
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False))
    ref = ort.InferenceSession(m.SerializeToString())
    for n in (2, 3, 5, 3):
        feeds = {"x": rng.standard_normal((n, 6)).astype(np.float32), "s": np.array([n, 4], np.int64),
                 "axes": np.array([1], np.int64)}
        for got, want in zip(sess.run(feeds), ref.run(None, feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        sess.wait()
    assert len(sess.specializations()) == 1  # batch 2's; 3 and 5 ran on the generic path
    # later calls at those shapes skip the check and the key (the generic path for good), on new data;
    # an input that breaks the signature still takes the checked path and its error
    for _ in range(3):
        feeds = {"x": rng.standard_normal((5, 6)).astype(np.float32), "s": np.array([5, 4], np.int64),
                 "axes": np.array([1], np.int64)}
        for got, want in zip(sess.run(feeds), ref.run(None, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert sess._fast_generic
    from tcc.dialects.ir.errors import TccError
    with pytest.raises(TccError, match="x"):
        sess.run({"x": feeds["x"].astype(np.float64), "s": feeds["s"], "axes": feeds["axes"]})
