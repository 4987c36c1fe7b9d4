"""Sequences and optionals end to end: graph inputs and outputs of sequence
and optional type (a list of arrays, None or a value), the sequence ops, a
Loop carrying a sequence, SequenceMap, through the Python API (host and
--maccel=cpu) and the CLI, against onnx.reference on fresh seeded data at
two run-time sequence lengths and element shapes; bad inputs get one line."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import tcc
from tcc.runtime.signature import InputError

from test.conftest import assert_one_line_error, run_tool

F = TP.FLOAT


def seq_t(elem, shape):
    return h.make_sequence_type_proto(h.make_tensor_type_proto(elem, shape))


def opt_t(elem, shape):
    return h.make_optional_type_proto(h.make_tensor_type_proto(elem, shape))


def vi(name, tp):
    return h.make_value_info(name, tp)


def make(nodes, inputs, outputs, opset=18):
    m = h.make_model(h.make_graph(nodes, "g", inputs, outputs), opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 9
    onnx.checker.check_model(m, full_check=True)
    return m


def same(got, want):
    """Outputs equal to onnx.reference's: lists element by element (same
    length), None for an empty optional, arrays with dtype and shape."""
    if want is None or isinstance(want, list):
        assert type(got) is type(want), (got, want)
        if want is not None:
            assert len(got) == len(want)
            for g, w in zip(got, want):
                same(g, w)
        return
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def check(m, feeds_list, maccel=()):
    sess = tcc.load(tcc.compile(m, maccel=list(maccel), cache=False))
    ref = ReferenceEvaluator(m)
    for feeds in feeds_list:
        want = ref.run(None, feeds)
        got = sess.run(feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
    return sess


def sequence_ops_model():
    """SequenceInsert of a tensor into the input sequence, an element of it
    fed to native tensor ops, ConcatFromSequence, SequenceLength, Erase."""
    nodes = [
        h.make_node("Relu", ["t"], ["rt"]),
        h.make_node("SequenceInsert", ["xs", "rt"], ["s"]),
        h.make_node("Constant", [], ["pos"], value=h.make_tensor("pos", TP.INT64, [], [-1])),
        h.make_node("SequenceAt", ["s", "pos"], ["last"]),
        h.make_node("Mul", ["last", "t"], ["y"]),
        h.make_node("ConcatFromSequence", ["s"], ["c"], axis=0),
        h.make_node("Exp", ["c"], ["ce"]),
        h.make_node("SequenceLength", ["s"], ["n"]),
        h.make_node("Constant", [], ["zero"], value=h.make_tensor("zero", TP.INT64, [], [0])),
        h.make_node("SequenceErase", ["s", "zero"], ["rest"]),
    ]
    return make(nodes, [vi("xs", seq_t(F, [None, 3])), vi("t", h.make_tensor_type_proto(F, [2, 3]))],
                [vi("rest", seq_t(F, [None, 3])), vi("y", h.make_tensor_type_proto(F, [2, 3])),
                 vi("ce", h.make_tensor_type_proto(F, [None, 3])), vi("n", h.make_tensor_type_proto(TP.INT64, []))])


def seq_feeds(rng, rows):
    return {"xs": [rng.standard_normal((r, 3)).astype(np.float32) for r in rows],
            "t": rng.standard_normal((2, 3)).astype(np.float32)}


@pytest.mark.parametrize("maccel", [(), ("cpu",)], ids=["host", "cpu"])
def test_sequence_ops_two_lengths(rng, maccel):
    sess = check(sequence_ops_model(), [seq_feeds(rng, [2, 5]), seq_feeds(rng, [1, 4, 2, 3])], maccel)
    sig = {s["name"]: s for s in sess.input_signature}
    assert sig["xs"]["container"] == ["seq"] and sig["xs"]["shape"] == [None, 3] and sig["xs"]["dtype"] == "float32"
    assert "container" not in sig["t"]


def test_split_to_sequence_and_loop_carrying_a_sequence(rng):
    """SplitToSequence, then a Loop whose body appends a slice of the input
    to the carried sequence each iteration (lengths 1, 2, ...: element
    shapes change per iteration), trip count from the input."""
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]),
         h.make_node("Constant", [], ["one"], value=h.make_tensor("one", TP.INT64, [1], [1])),
         h.make_node("Constant", [], ["z1"], value=h.make_tensor("z1", TP.INT64, [1], [0])),
         h.make_node("Unsqueeze", ["i", "z1"], ["i1"]),
         h.make_node("Add", ["i1", "one"], ["end"]),
         h.make_node("Slice", ["v", "z1", "end"], ["piece"]),
         h.make_node("SequenceInsert", ["s_in", "piece"], ["s_out"])],
        "body", [vi("i", h.make_tensor_type_proto(TP.INT64, [])), vi("c_in", h.make_tensor_type_proto(TP.BOOL, [])),
                 vi("s_in", seq_t(F, None))],
        [vi("c_out", h.make_tensor_type_proto(TP.BOOL, [])), vi("s_out", seq_t(F, None))])
    nodes = [h.make_node("SplitToSequence", ["x"], ["parts"], axis=1, keepdims=0),
             h.make_node("Constant", [], ["k"], value=h.make_tensor("k", TP.INT64, [], [0])),
             h.make_node("SequenceAt", ["parts", "k"], ["v"]),
             h.make_node("Shape", ["v"], ["vs"]),
             h.make_node("Constant", [], ["zero"], value=h.make_tensor("zero", TP.INT64, [], [0])),
             h.make_node("Gather", ["vs", "zero"], ["trip"]),
             h.make_node("Constant", [], ["cond"], value=h.make_tensor("cond", TP.BOOL, [], [True])),
             h.make_node("SequenceEmpty", [], ["empty"], dtype=F),
             h.make_node("Loop", ["trip", "cond", "empty"], ["grown"], body=body)]
    m = make(nodes, [vi("x", h.make_tensor_type_proto(F, [None, None]))],
             [vi("parts", seq_t(F, [None])), vi("grown", seq_t(F, [None]))])
    check(m, [{"x": rng.standard_normal((3, 2)).astype(np.float32)},
              {"x": rng.standard_normal((5, 4)).astype(np.float32)}])


def test_optional_input_empty_and_given(rng):
    """An optional graph input: None, then a value (two shapes)."""
    nodes = [h.make_node("OptionalHasElement", ["o"], ["has"]),
             h.make_node("If", ["has"], ["y"],
                         then_branch=h.make_graph([h.make_node("OptionalGetElement", ["o"], ["g"]),
                                                   h.make_node("Neg", ["g"], ["y1"])], "then", [],
                                                  [vi("y1", h.make_tensor_type_proto(F, [None]))]),
                         else_branch=h.make_graph([h.make_node("Neg", ["d"], ["y2"])], "else", [],
                                                  [vi("y2", h.make_tensor_type_proto(F, [None]))])),
             h.make_node("Abs", ["y"], ["z"])]
    m = make(nodes, [vi("o", opt_t(F, [None])), vi("d", h.make_tensor_type_proto(F, [None]))],
             [vi("has", h.make_tensor_type_proto(TP.BOOL, [])), vi("z", h.make_tensor_type_proto(F, [None]))])
    d = rng.standard_normal(4).astype(np.float32)
    check(m, [{"o": None, "d": d}, {"o": rng.standard_normal(6).astype(np.float32), "d": d},
              {"o": rng.standard_normal(2).astype(np.float32), "d": d}])


def test_sequence_map_elements_of_different_shapes(rng):
    body = h.make_graph([h.make_node("Mul", ["e", "e"], ["sq"]), h.make_node("Shape", ["e"], ["shp"])], "map",
                        [vi("e", h.make_tensor_type_proto(F, [None, None]))],
                        [vi("sq", h.make_tensor_type_proto(F, [None, None])),
                         vi("shp", h.make_tensor_type_proto(TP.INT64, [2]))])
    m = make([h.make_node("SequenceMap", ["xs"], ["sqs", "shapes"], body=body)],
             [vi("xs", seq_t(F, [None, None]))],
             [vi("sqs", seq_t(F, [None, None])), vi("shapes", seq_t(TP.INT64, [2]))])
    check(m, [{"xs": [rng.standard_normal(s).astype(np.float32) for s in [(2, 3), (4, 1)]]},
              {"xs": [rng.standard_normal(s).astype(np.float32) for s in [(1, 1), (3, 5), (2, 2)]]}])


def test_bad_sequence_inputs_one_line(rng):
    sess = tcc.load(tcc.compile(sequence_ops_model(), maccel=[], cache=False))
    t = rng.standard_normal((2, 3)).astype(np.float32)
    good = rng.standard_normal((2, 3)).astype(np.float32)
    cases = [(good, "input 'xs' is a sequence: expected a list of tensors, got ndarray"),
             ([good, good.astype(np.float64)], "input 'xs' element #1 has dtype float64, expected float32"),
             ([good, np.zeros((2, 4), np.float32)], "input 'xs' element #1 has shape [2, 4], expected [?, 3]"),
             ([good, np.zeros(3, np.float32)], "input 'xs' element #1 has shape [3], expected [?, 3]")]
    for value, msg in cases:
        with pytest.raises(InputError) as e:
            sess.run({"xs": value, "t": t})
        text = str(e.value)
        assert len(text.splitlines()) == 1 and text.startswith(msg) and "sequence of float32[?, 3]" in text, text


def test_cli_sequence_input_and_output(tmp_path, rng):
    m = sequence_ops_model()
    p = tmp_path / "seq.onnx"
    onnx.save(m, p)
    art = tmp_path / "seq.tcc"
    r = run_tool("tcc", p, "-o", art)
    assert r.returncode == 0, r.stderr
    feeds = seq_feeds(rng, [3, 1, 2])
    np.savez(tmp_path / "xs.npz", *feeds["xs"])
    np.save(tmp_path / "t.npy", feeds["t"])
    out = tmp_path / "out"
    r = run_tool("tcc-run", art, "--input", f"xs={tmp_path / 'xs.npz'}", "--input", f"t={tmp_path / 't.npy'}",
                 "--output-dir", out)
    assert r.returncode == 0, r.stderr
    assert "rest: sequence of 3: float32[1, 3], float32[2, 3], float32[2, 3]" in r.stdout, r.stdout
    want = dict(zip(["rest", "y", "ce", "n"], ReferenceEvaluator(m).run(None, feeds)))
    with np.load(out / "rest.npz") as z:
        same([z[k] for k in z.files], want["rest"])
    for name in ("y", "ce", "n"):
        same(np.load(out / f"{name}.npy"), want[name])
    # a .npy where a sequence is expected: one line, no traceback
    assert_one_line_error(run_tool("tcc-run", art, "--input", f"xs={tmp_path / 't.npy'}", "--input",
                                   f"t={tmp_path / 't.npy'}"), "--input xs", "not a .npz file")
    assert_one_line_error(run_tool("tcc-run", art, "--random-inputs"), "'xs' is a sequence or optional")
    assert os.path.exists(art)


def test_inference_session_takes_and_returns_sequences(rng):
    """tcc's onnxruntime-style session: seq types spelled as onnxruntime
    does, a list in, a list out."""
    m = sequence_ops_model()
    sess = tcc.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [(i.name, i.type) for i in sess.get_inputs()] == [("xs", "seq(tensor(float))"), ("t", "tensor(float)")]
    assert sess.get_outputs()[0].type == "seq(tensor(float))"
    feeds = seq_feeds(rng, [2, 3])
    for g, w in zip(sess.run(None, feeds), ReferenceEvaluator(m).run(None, feeds)):
        same(g, w)
