"""Strings as an element type and the ops the runtime computes in Python
(runtime/host_ops): matched against onnx.reference on fresh seeded data,
through the Python API, mixed with natively compiled stages before and
after them, with the cpu accelerator, and through the CLIs; bad inputs and
attributes are one-line errors."""
import re
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx.reference import ReferenceEvaluator

import tcc
from tcc.dialects.ir.errors import TccError
from test.conftest import run_tool

ML = helper.make_opsetid("ai.onnx.ml", 3)


def _model(nodes, inputs, outputs, ml=False):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs])
    ops = [helper.make_opsetid("", 20)] + ([ML] if ml else [])
    return helper.make_model(g, opset_imports=ops)


def _words(rng, shape, alphabet="abcé ß日"):
    n = int(np.prod(shape))
    w = ["".join(rng.choice(list(alphabet), rng.integers(0, 7))) for _ in range(n)]
    return np.array(w, dtype=object).reshape(shape)


def _check(model, feeds, tmp_path, maccel=()):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ReferenceEvaluator(model).run(None, feeds)
    sess = tcc.load(tcc.compile(model, maccel=maccel, output=str(tmp_path / "m.tcc")))
    got = sess.run(feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape
        if w.dtype.kind in "OU":
            assert g.dtype == object and all(type(s) is str for s in g.reshape(-1))
            assert g.tolist() == w.astype(object).tolist()
        elif w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return sess


def test_string_concat_broadcasts(rng, tmp_path):
    m = _model([helper.make_node("StringConcat", ["x", "y"], ["z"])],
               [("x", T.STRING, [3, 4]), ("y", T.STRING, [4])], [("z", T.STRING, [3, 4])])
    _check(m, {"x": _words(rng, (3, 4)), "y": _words(rng, (4,))}, tmp_path)


@pytest.mark.parametrize("delimiter", [None, " ", "é"])
def test_string_split(rng, tmp_path, delimiter):
    attrs = {} if delimiter is None else {"delimiter": delimiter}
    m = _model([helper.make_node("StringSplit", ["x"], ["y", "n"], maxsplit=int(rng.integers(1, 4)), **attrs)],
               [("x", T.STRING, [5])], [("y", T.STRING, [5, "parts"]), ("n", T.INT64, [5])])
    _check(m, {"x": _words(rng, (5,))}, tmp_path)


def test_regex_and_equal_on_strings(rng, tmp_path):
    m = _model([helper.make_node("RegexFullMatch", ["x"], ["r"], pattern="[a-c]+ ?.*"),
                helper.make_node("Equal", ["x", "y"], ["e"])],
               [("x", T.STRING, [6]), ("y", T.STRING, [6])], [("r", T.BOOL, [6]), ("e", T.BOOL, [6])])
    x = _words(rng, (6,), "abc ")
    y = x.copy()
    y[rng.integers(0, 6, 3)] = "zz"
    _check(m, {"x": x, "y": y}, tmp_path)


@pytest.mark.parametrize("maccel", [(), ("cpu",)])
def test_strings_between_native_stages(rng, tmp_path, maccel):
    """Native Mul before, StringNormalizer -> LabelEncoder (strings to ints)
    in Python, native Add after: the graph is cut around the string ops."""
    words = ["ab", "AB", "cd", "x"]
    m = _model([helper.make_node("Mul", ["a", "a"], ["a2"]),
                helper.make_node("StringNormalizer", ["s"], ["t"], case_change_action="LOWER",
                                 stopwords=["x"]),
                helper.make_node("LabelEncoder", ["t"], ["k"], domain="ai.onnx.ml", keys_strings=["ab", "cd"],
                                 values_int64s=[7, 9], default_int64=-1),
                helper.make_node("Cast", ["k"], ["kf"], to=T.FLOAT),
                helper.make_node("ReduceSum", ["kf"], ["ks"], keepdims=1),
                helper.make_node("Add", ["a2", "ks"], ["out"])],
               [("a", T.FLOAT, [3]), ("s", T.STRING, [6])], [("out", T.FLOAT, [3]), ("t", T.STRING, ["kept"])], ml=True)
    s = np.array(rng.choice(words, 6), dtype=object)
    _check(m, {"a": rng.standard_normal(3).astype(np.float32), "s": s}, tmp_path, maccel)


@pytest.mark.parametrize("op, attrs, width", [
    ("Scaler", {"offset": [0.5, -1.0, 2.0], "scale": [2.0, 0.5, 1.5]}, 3),
    ("Normalizer", {"norm": "L2"}, 3),
    ("Normalizer", {"norm": "MAX"}, 3),
    ("Binarizer", {"threshold": 0.3}, 3),
    ("LinearRegressor", {"coefficients": [0.5, -1.0, 2.0, 1.0, 0.0, -0.5], "intercepts": [0.1, 0.2], "targets": 2}, 2),
])
def test_ml_transforms(rng, tmp_path, op, attrs, width):
    m = _model([helper.make_node(op, ["x"], ["y"], domain="ai.onnx.ml", **attrs)],
               [("x", T.FLOAT, [7, 3])], [("y", T.FLOAT, [7, width])], ml=True)
    _check(m, {"x": rng.standard_normal((7, 3)).astype(np.float32)}, tmp_path)


def test_one_hot_encoder_and_feature_extractor(rng, tmp_path):
    m = _model([helper.make_node("OneHotEncoder", ["c"], ["h"], domain="ai.onnx.ml", cats_strings=["a", "b", "é"]),
                helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["f"], domain="ai.onnx.ml")],
               [("c", T.STRING, [4, 1]), ("x", T.FLOAT, [4, 5]), ("i", T.INT64, [2])],
               [("h", T.FLOAT, [4, 1, 3]), ("f", T.FLOAT, [4, 2])], ml=True)
    _check(m, {"c": np.array(rng.choice(["a", "b", "é", "zz"], (4, 1)), dtype=object),
               "x": rng.standard_normal((4, 5)).astype(np.float32), "i": rng.integers(0, 5, 2)}, tmp_path)


def test_svm_regressor_rbf(rng, tmp_path):
    sv = rng.standard_normal((4, 3)).astype(np.float32)
    m = _model([helper.make_node("SVMRegressor", ["x"], ["y"], domain="ai.onnx.ml", kernel_type="RBF",
                                 kernel_params=[0.3, 0.0, 3.0], n_supports=4,
                                 support_vectors=sv.reshape(-1).tolist(),
                                 coefficients=rng.standard_normal(4).tolist(), rho=[0.25])],
               [("x", T.FLOAT, [6, 3])], [("y", T.FLOAT, [6, 1])], ml=True)
    _check(m, {"x": rng.standard_normal((6, 3)).astype(np.float32)}, tmp_path)


def test_tfidf_vectorizer(rng, tmp_path):
    m = _model([helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TFIDF", min_gram_length=1,
                                 max_gram_length=2, max_skip_count=2, ngram_counts=[0, 3],
                                 ngram_indexes=[0, 1, 2, 3, 4], pool_int64s=[1, 2, 3, 1, 2, 2, 3],
                                 weights=[0.5, 1.0, 2.0, 1.5, 3.0])],
               [("x", T.INT64, [3, 8])], [("y", T.FLOAT, [3, 5])])
    _check(m, {"x": rng.integers(0, 5, (3, 8))}, tmp_path)


def _string_session(tmp_path, **attrs):
    m = _model([helper.make_node("StringNormalizer", ["x"], ["y"], name="norm", **attrs)],
               [("x", T.STRING, [2])], [("y", T.STRING, ["n"])])
    onnx.save(m, str(tmp_path / "s.onnx"))
    return tcc.load(tcc.compile(m, output=str(tmp_path / "s.tcc")))


def test_string_inputs_are_checked(tmp_path):
    sess = _string_session(tmp_path, case_change_action="UPPER")
    assert sess.input_signature[0]["dtype"] == "object"
    # numpy str arrays and UTF-8 bytes are taken; the caller's array is not changed
    b = np.array([b"caf\xc3\xa9", "x"], dtype=object)
    assert sess.run({"x": b})[0].tolist() == ["CAFÉ", "X"]
    assert b[0] == b"caf\xc3\xa9"
    assert sess.run({"x": np.array(["ab", "c"])})[0].tolist() == ["AB", "C"]
    for bad, what in [(np.array([1, 2]), "has dtype int64, expected strings"),
                      (np.array(["a", 3], dtype=object), "element [1] is int, expected str"),
                      (np.array([b"\xff", "a"], dtype=object), "element [0] is not valid UTF-8")]:
        with pytest.raises(TccError, match=re.escape(what)) as e:
            sess.run({"x": bad})
        assert "\n" not in str(e.value) and "'x'" in str(e.value)


def test_bad_attribute_is_one_line(tmp_path):
    sess = _string_session(tmp_path, case_change_action="SIDEWAYS")
    with pytest.raises(TccError, match=r"node 'norm' \(StringNormalizer\): case_change_action 'SIDEWAYS'"):
        sess.run({"x": np.array(["a", "b"])})


def test_invalid_re2_pattern_is_one_line(tmp_path):
    m = _model([helper.make_node("RegexFullMatch", ["x"], ["y"], name="rx", pattern=r"(a)\1")],
               [("x", T.STRING, [1])], [("y", T.BOOL, [1])])
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "r.tcc")))
    with pytest.raises(TccError, match=r"node 'rx' \(RegexFullMatch\): pattern .* is not valid RE2"):
        sess.run({"x": np.array(["aa"])})


def test_strings_through_the_cli(rng, tmp_path):
    _string_session(tmp_path, case_change_action="LOWER")
    r = run_tool("tcc", str(tmp_path / "s.onnx"), "-o", str(tmp_path / "cli.tcc"))
    assert r.returncode == 0, r.stderr
    x = _words(rng, (2,), "ABCé")
    np.save(tmp_path / "x.npy", x.astype(str))
    r = run_tool("tcc-run", str(tmp_path / "cli.tcc"), "--input", f"x={tmp_path / 'x.npy'}",
                 "--output-dir", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out" / "y.npy")  # a numpy str array: no pickle needed
    assert got.tolist() == [s.lower() for s in x.tolist()]
    np.save(tmp_path / "bad.npy", np.array([1.5, 2.0]))
    r = run_tool("tcc-run", str(tmp_path / "cli.tcc"), "--input", f"x={tmp_path / 'bad.npy'}")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "expected strings" in r.stderr
    r = run_tool("tcc-run", str(tmp_path / "cli.tcc"), "--random-inputs")
    assert r.returncode == 0 and "y: object[" in r.stdout, r.stderr
