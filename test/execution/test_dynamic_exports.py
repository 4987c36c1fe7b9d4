"""Dynamic models as exporters write them compile once and run at every input
shape they accept, matching onnxruntime: declared shapes are never trusted
over what the graph computes, the shape chains exporters emit fold once the
inputs are static, and an input shape the model cannot take is a one-line
error naming the inputs, the node and its operand shapes."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc
from tcc.runtime.session import InputError


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))


def _model(nodes, inputs, outputs, inits=(), value_info=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits), value_info=list(value_info))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _check(m, feeds_list, tmp_path, maccel=()):
    sess = tcc.load(tcc.compile(m, maccel=list(maccel), output=str(tmp_path / "m.tcc")))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        for got, want in zip(sess.run(feeds), ref.run(None, feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return sess


def declared_wrong_model(rng):
    """A tagger-like graph whose output and value_info declare the sequence
    dim as 12 (as an exporter that traced at length 12 writes it), over a
    dynamic sequence input."""
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["t"]),
             helper.make_node("Identity", ["t"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S", 4])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 12, 3])], [w],
                  [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", 12, 3]),
                   helper.make_tensor_value_info("t", TensorProto.FLOAT, ["N", 12, 3])])


@pytest.mark.parametrize("maccel", [(), ("cpu",)])
def test_declared_output_shape_is_not_trusted(rng, tmp_path, maccel):
    m = declared_wrong_model(rng)
    feeds = [{"x": rng.standard_normal(s).astype(np.float32)} for s in [(2, 5, 4), (3, 12, 4), (1, 20, 4)]]
    _check(m, feeds, tmp_path, maccel)


def mask_chain_model(rng):
    """The shape chains a decoder's export builds its mask and sizes from:
    Shape/Gather/Unsqueeze/Concat/Reshape, ConstantOfShape, Range,
    LessOrEqual/Where on shapes, Expand, and float arithmetic on a size
    (half the sequence, rounded up, through Cast/Div/Ceil/Cast)."""
    i64 = lambda name, vals: numpy_helper.from_array(np.array(vals, np.int64), name)  # noqa: E731
    inits = [i64("zero", [0]), i64("one", [1]), i64("s0", 0), i64("s1", 1), i64("minus1", [-1]),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(-1e4, np.float32), "neg"),
             numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "wq")]
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "s1"], ["seq"], axis=0),          # scalar S
        helper.make_node("Gather", ["shp", "zero"], ["batch1"], axis=0),     # [N]
        helper.make_node("Range", ["s0", "seq", "s1"], ["pos"]),             # [S]
        helper.make_node("Unsqueeze", ["pos", "zero"], ["row"]),             # [1, S]
        helper.make_node("Unsqueeze", ["pos", "one"], ["col"]),              # [S, 1]
        helper.make_node("LessOrEqual", ["row", "col"], ["causal"]),         # [S, S]
        helper.make_node("Unsqueeze", ["seq", "zero"], ["seq1"]),
        helper.make_node("Concat", ["seq1", "seq1"], ["ss"], axis=0),
        helper.make_node("ConstantOfShape", ["ss"], ["zeros"],
                         value=numpy_helper.from_array(np.array([0.0], np.float32))),
        helper.make_node("Where", ["causal", "zeros", "neg"], ["maskf"]),    # [S, S]
        helper.make_node("Concat", ["batch1", "ss"], ["nss"], axis=0),
        helper.make_node("Expand", ["maskf", "nss"], ["mask"]),              # [N, S, S]
        helper.make_node("MatMul", ["x", "wq"], ["q"]),                      # [N, S, 4]
        helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "qt"], ["scores"]),                 # [N, S, S]
        helper.make_node("Add", ["scores", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "x"], ["ctx"]),                  # [N, S, 4]
        helper.make_node("Cast", ["seq"], ["seqf"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["seqf", "two"], ["halff"]),
        helper.make_node("Ceil", ["halff"], ["halfc"]),
        helper.make_node("Cast", ["halfc"], ["half"], to=TensorProto.INT64),
        helper.make_node("Unsqueeze", ["half", "zero"], ["half1"]),
        helper.make_node("Slice", ["ctx", "zero", "half1", "one"], ["first"]),  # [N, ceil(S/2), 4]
        helper.make_node("Concat", ["batch1", "minus1"], ["flat"], axis=0),
        helper.make_node("Reshape", ["first", "flat"], ["y"]),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S", 4])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", None])], inits)


@pytest.mark.parametrize("maccel", [(), ("cpu",)])
def test_exporter_shape_chains_fold_at_every_shape(rng, tmp_path, maccel):
    m = mask_chain_model(rng)
    feeds = [{"x": rng.standard_normal(s).astype(np.float32)} for s in [(2, 16, 4), (3, 7, 4), (1, 1, 4)]]
    _check(m, feeds, tmp_path, maccel)


def two_input_model():
    nodes = [helper.make_node("Add", ["x", "m"], ["s"], name="add_mask"), helper.make_node("Relu", ["s"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S"]),
                          helper.make_tensor_value_info("m", TensorProto.FLOAT, ["N", "T"])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S"])])


def test_input_shapes_the_model_cannot_take_are_one_line_errors(rng, tmp_path):
    m = two_input_model()
    sess = _check(m, [{"x": rng.standard_normal((2, 5)).astype(np.float32),
                       "m": rng.standard_normal((2, 5)).astype(np.float32)}], tmp_path)
    with pytest.raises(InputError) as e:
        sess.run({"x": np.zeros((2, 5), np.float32), "m": np.zeros((2, 7), np.float32)})
    msg = str(e.value)
    assert "\n" not in msg
    for part in ("'x' [2, 5]", "'m' [2, 7]", "node 'add_mask'", "tensor<2x5xf32>", "tensor<2x7xf32>"):
        assert part in msg, msg


def test_cli_run_with_a_shape_the_model_cannot_take(rng, tmp_path):
    import subprocess
    import sys
    import os
    m = two_input_model()
    art = tcc.compile(m, output=str(tmp_path / "m.tcc"))
    np.save(tmp_path / "x.npy", np.zeros((2, 5), np.float32))
    np.save(tmp_path / "m.npy", np.zeros((2, 3), np.float32))
    exe = os.path.join(os.path.dirname(sys.executable), "tcc-run")
    p = subprocess.run([exe, str(art), "--input", f"x={tmp_path / 'x.npy'}", "--input", f"m={tmp_path / 'm.npy'}",
                        "--output-dir", str(tmp_path / "out")], capture_output=True, text=True)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "do not fit the model" in lines[0] and "node 'add_mask'" in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_signature_shows_computed_output_dims(rng, tmp_path):
    sess = tcc.load(tcc.compile(declared_wrong_model(rng), output=str(tmp_path / "m.tcc")))
    assert sess.output_signature[0]["shape"] == [None, None, 3]
