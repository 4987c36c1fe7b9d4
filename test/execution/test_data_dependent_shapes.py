"""Ops whose output shapes depend on input values (NonZero, Compress,
Unique, NonMaxSuppression, TopK with k computed from data, Loop with a
data-dependent exit) run in two phases (runtime/staged.py) and match
onnxruntime on fresh random data, with static and with dynamic input dims,
the output sizes changing from run to run at one input shape."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc

F, I64 = TensorProto.FLOAT, TensorProto.INT64


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))


def _const(name, vals, dtype=np.int64):
    return numpy_helper.from_array(np.array(vals, dtype), name)


def _out(name, elem, rank):
    return helper.make_tensor_value_info(name, elem, [f"{name}_{i}" for i in range(rank)])


def _model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def nonzero(dims):
    nodes = [helper.make_node("Greater", ["x", "zero"], ["pos"]), helper.make_node("NonZero", ["pos"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["vals"]),
             helper.make_node("Mul", ["vals", "two"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, dims)],
                  [_out("y", F, 1), _out("nz", I64, 2)],
                  [_const("zero", 0.5, np.float32), _const("two", 2.0, np.float32)])


def compress(dims):
    nodes = [helper.make_node("ReduceMean", ["x", "ax1"], ["m"], keepdims=0),
             helper.make_node("Greater", ["m", "zero"], ["keep"]),
             helper.make_node("Compress", ["x", "keep"], ["rows"], axis=0),
             helper.make_node("Relu", ["rows"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, dims)], [_out("y", F, 2)],
                  [_const("zero", 0.0, np.float32), _const("ax1", [1])])


def unique(dims):
    nodes = [helper.make_node("Mul", ["x", "four"], ["s"]), helper.make_node("Floor", ["s"], ["f"]),
             helper.make_node("Unique", ["f"], ["u", "idx", "inv", "cnt"], sorted=1),
             helper.make_node("Add", ["u", "u"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, dims)],
                  [_out("y", F, 1), _out("inv", I64, 1), _out("cnt", I64, 1)], [_const("four", 4.0, np.float32)])


def nms(dims):
    """boxes from x (n, anchors, 4) as centre/size, scores from a softmax."""
    nodes = [helper.make_node("Slice", ["x", "s0", "s2", "ax2"], ["xy"]),
             helper.make_node("Slice", ["x", "s2", "s4", "ax2"], ["wh0"]),
             helper.make_node("Exp", ["wh0"], ["wh"]), helper.make_node("Mul", ["wh", "half"], ["hw"]),
             helper.make_node("Sub", ["xy", "hw"], ["lo"]), helper.make_node("Add", ["xy", "hw"], ["hi"]),
             helper.make_node("Concat", ["lo", "hi"], ["boxes"], axis=2),
             helper.make_node("Transpose", ["logits"], ["lt"], perm=[0, 2, 1]),
             helper.make_node("Sigmoid", ["lt"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "maxk", "iou", "thr"], ["sel"]),
             helper.make_node("Cast", ["sel"], ["self"], to=F)]
    inits = [_const("s0", [0]), _const("s2", [2]), _const("s4", [4]), _const("ax2", [2]),
             _const("half", 0.5, np.float32), _const("maxk", [6]), _const("iou", [0.3], np.float32),
             _const("thr", [0.7], np.float32)]
    return _model(nodes, [helper.make_tensor_value_info("x", F, dims),
                          helper.make_tensor_value_info("logits", F, dims[:2] + [3])],
                  [_out("self", F, 2)], inits)


def topk_from_data(dims):
    """k = the number of positive entries in the first row, at least 1."""
    nodes = [helper.make_node("Gather", ["x", "s0"], ["row"], axis=0),
             helper.make_node("Greater", ["row", "zero"], ["p"]),
             helper.make_node("Cast", ["p"], ["pi"], to=I64),
             helper.make_node("ReduceSum", ["pi"], ["cnt"], keepdims=1),
             helper.make_node("Max", ["cnt", "one"], ["k"]),
             helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1),
             helper.make_node("Neg", ["v"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, dims)],
                  [_out("y", F, 2), _out("i", I64, 2)],
                  [_const("s0", 0), _const("zero", 0.0, np.float32), _const("one", [1])])


def loop_until(dims):
    """Doubles exp(x) until its sum passes 1e4 (at most 30 times): a Loop
    whose exit depends on the data, with a scan output of the per-step sums."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "two"], ["acc_out"]),
         helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"]),
         helper.make_node("Identity", ["total"], ["scan"])],
        "body", [helper.make_tensor_value_info("it", I64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc_in", F, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", F, None),
         helper.make_tensor_value_info("scan", F, [])])
    nodes = [helper.make_node("Exp", ["x"], ["a"]),
             helper.make_node("Loop", ["trips", "go", "a"], ["final", "sums"], body=body),
             helper.make_node("Add", ["final", "final"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, dims)],
                  [_out("y", F, 2), _out("sums", F, 1)],
                  [_const("trips", 30), numpy_helper.from_array(np.array(True), "go"),
                   _const("two", 2.0, np.float32), _const("limit", 1e4, np.float32)])


CASES = {"nonzero": (nonzero, [[3, 5], [4, 2]]), "compress": (compress, [[6, 3], [9, 3]]),
         "unique": (unique, [[4, 6], [10]]), "nms": (nms, [[1, 12, 4], [2, 20, 4]]),
         "topk": (topk_from_data, [[3, 8], [2, 5]]), "loop": (loop_until, [[3, 4], [2, 2]])}


def _feeds(m, shape, rng):
    out = {}
    for i in m.graph.input:
        s = list(shape) if i.name == "x" else list(shape[:2]) + [3]
        out[i.name] = rng.standard_normal(s).astype(np.float32)
    return out


@pytest.mark.parametrize("maccel", [(), ("cpu",)], ids=["host", "cpu"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_data_dependent_output_shapes(case, dynamic, maccel, rng, tmp_path):
    build, shapes = CASES[case]
    if not dynamic:
        shapes = shapes[:1]
    m = build(["d%d" % i for i in range(len(shapes[0]))] if dynamic else shapes[0])
    if dynamic and case == "unique":
        m = build(["d0"] if len(shapes[1]) == 1 else ["d0", "d1"])
        shapes = [[24], [10]]
    sess = tcc.load(tcc.compile(m, maccel=list(maccel), output=str(tmp_path / "m.tcc")))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    sizes = set()

    def check(shape):
        x = _feeds(m, shape, rng)
        got, want = sess.run(x), ref.run(None, x)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        sizes.add(tuple(w.shape for w in want))
    for shape in shapes:
        for _ in range(3):  # new data at one shape: the result sizes change
            check(shape)
    for _ in range(20):
        if len(sizes) > 1:
            break
        check(shapes[0])
    assert len(sizes) > 1, "the data never changed an output size: the test checks nothing data-dependent"


def _staged_entries(cache):
    from tcc.runtime.artifact import read_artifact
    from tcc.runtime.staged import is_staged
    arts = [read_artifact(str(p)) for p in (cache / "artifacts").glob("*.tcc")]
    return [a for a in arts if is_staged(a.manifest)]


@pytest.mark.parametrize("case", ["nms", "nonzero", "loop"])
def test_staged_specialization_is_cached(case, rng, tmp_path):
    """A specialization cut at a data-dependent op is kept in the compile
    cache like any other: a second session (as a new process would) at the
    same shapes and data loads it and compiles nothing; one whose stored
    step is tampered with (hashes recomputed) is refused as an invalid
    artifact and compiled again."""
    from tcc.runtime import specialize
    from tcc.runtime.artifact import ArtifactError, read_artifact, write_zip
    from tcc.runtime.staged import StagedRun
    build, shapes = CASES[case]
    m = build(["d%d" % i for i in range(len(shapes[0]))])
    path = tcc.compile(m, output=str(tmp_path / "m.tcc"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = [_feeds(m, s, rng) for s in shapes]

    def run_all(sess):
        for x in feeds:
            for got, want in zip(sess.run(x), ref.run(None, x)):
                assert got.shape == want.shape
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    first = tcc.load(path)
    for _ in range(3):  # the suffixes specialize at their own first runs
        run_all(first)
        specialize.wait_all()
    cache = tmp_path / "cache"
    staged = _staged_entries(cache)
    assert staged, "no staged specialization was cached"
    second = tcc.load(path)
    run_all(second)
    assert specialize.queued() == 0, "a cached staged specialization was compiled again"
    loaded = second.session_for(feeds[0])
    assert isinstance(loaded, StagedRun)
    # its constant operands own their memory and are read-only, as a fresh
    # build's are (a host kernel parses such arrays once: detection._params)
    consts = [src[1] for src in loaded.sources if src is not None and src[0] == "const"]
    assert all(c.base is None and not c.flags.writeable for c in consts)
    assert consts or case != "nms"  # NonMaxSuppression's three parameters are constants

    art = staged[0]
    step = art.manifest["plan"][0]
    src = next(i for i, s in enumerate(step["sources"]) if s is not None and s[0] in ("arg", "prefix"))
    step["sources"][src] = [step["sources"][src][0], 99]
    write_zip(art.path, art.manifest, {n: b for n, b in art.members.items() if n != "host.o"}, b"")
    with pytest.raises(ArtifactError, match="staged step: source"):
        StagedRun.from_artifact(read_artifact(art.path), None, len(m.graph.input))
    run_all(tcc.load(path))  # the bad entry compiled again
    specialize.wait_all()
