"""Input values (not shapes or dtypes) a model cannot take.

Integer inputs that index a tensor (an embedding's token ids): values
past the table are refused with a one-line error naming the input, the
element and the node, as onnxruntime refuses them, by every session kind
(a static host artifact, one placed on the cpu accelerator, a specializing
one on its generic path and on its compiled code, warm calls included).

Indices computed inside the graph are clamped by the generated code, so a
bad one stays inside the table (no wild read or write). An output too
large for memory is a one-line error too."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc
from tcc.runtime.signature import InputError

from ..conftest import assert_one_line_error, run_tool

V, D, H = 37, 8, 5


def _embed_model(rng, dims, ids_type=TensorProto.INT64, cast=None, shift=None):
    """ids -> [Cast] -> [Add shift] -> Gather(table) -> MatMul -> y."""
    table = rng.standard_normal((V, D)).astype(np.float32)
    w = rng.standard_normal((D, H)).astype(np.float32)
    nodes, ids = [], "ids"
    if cast is not None:
        nodes.append(helper.make_node("Cast", [ids], ["ids_c"], to=cast))
        ids = "ids_c"
    if shift is not None:
        nodes.append(helper.make_node("Add", [ids, "shift"], ["ids_s"]))
        ids = "ids_s"
    nodes += [helper.make_node("Gather", ["table", ids], ["e"], axis=0, name="embed"),
              helper.make_node("MatMul", ["e", "w"], ["y"], name="proj")]
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(w, "w")]
    if shift is not None:
        inits.append(numpy_helper.from_array(np.array(shift, dtype=np.int64), "shift"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", ids_type, dims)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims + [H])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _ort(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


KINDS = {"static-host": ([2, 6], "host"), "static-cpu": ([2, 6], "cpu"),
         "dynamic-host": (["b", "s"], "host"), "dynamic-cpu": (["b", "s"], "cpu")}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_out_of_range_ids_are_refused(kind, tmp_path, rng):
    dims, accel = KINDS[kind]
    m = _embed_model(rng, dims)
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"), maccel=[accel], cache=False))
    for shape in ([2, 6], [2, 6]) if dims[0] == 2 else ([2, 6], [3, 4], [2, 6]):
        ids = rng.integers(-V, V, size=shape).astype(np.int64)  # negative ids count from the end
        np.testing.assert_allclose(sess.run({"ids": ids})[0], _ort(m, {"ids": ids}), rtol=1e-5, atol=1e-5)
        for bad in (V, -V - 1, 10 ** 6, -10 ** 12):
            b = ids.copy()
            where = (int(rng.integers(shape[0])), int(rng.integers(shape[1])))
            b[where] = bad
            with pytest.raises(InputError) as e:
                sess.run({"ids": b})
            msg = str(e.value)
            assert f"input 'ids' element {list(where)} is {bad}" in msg and f"[-{V}, {V - 1}]" in msg, msg
            assert "Gather node 'embed'" in msg, msg
            with pytest.raises(Exception):  # the independent reference refuses it too
                _ort(m, {"ids": b})
        # the good input still runs after a refused one, on the same warm path
        np.testing.assert_allclose(sess.run({"ids": ids})[0], _ort(m, {"ids": ids}), rtol=1e-5, atol=1e-5)


def test_bound_traced_through_a_widening_cast_only(tmp_path, rng):
    m = _embed_model(rng, [2, 3], ids_type=TensorProto.INT32, cast=TensorProto.INT64)
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False))
    assert sess._inputs[0].index_bound == (V, "Gather node 'embed'")
    with pytest.raises(InputError):
        sess.run({"ids": np.full((2, 3), V, np.int32)})
    # int64 -> int32 may wrap a bad id into range: not traced, so not bounded
    m8 = _embed_model(rng, [2, 3], cast=TensorProto.INT32)
    sess8 = tcc.load(tcc.compile(m8, output=str(tmp_path / "m8.tcc"), cache=False))
    assert sess8._inputs[0].index_bound == ()


def test_computed_index_is_clamped_inside_the_table(tmp_path, rng):
    """ids + V indexes past the table: not an input's fault the signature can
    name, so the generated code clamps it (the reference refuses it)."""
    m = _embed_model(rng, [2, 3], shift=V)
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False))
    assert sess._inputs[0].index_bound == ()
    ids = rng.integers(0, V, size=(2, 3)).astype(np.int64)
    table = numpy_helper.to_array(m.graph.initializer[0])
    w = numpy_helper.to_array(m.graph.initializer[1])
    want = table[np.clip(ids + V, -V, V - 1)] @ w
    np.testing.assert_allclose(sess.run({"ids": ids})[0], want, rtol=1e-5, atol=1e-5)


def test_cli_one_line_error(tmp_path, rng):
    m = _embed_model(rng, ["b", "s"])
    onnx.save(m, tmp_path / "m.onnx")
    p = run_tool("tcc", "--maccel=cpu", tmp_path / "m.onnx", "-o", tmp_path / "m.tcc")
    assert p.returncode == 0, p.stderr
    np.save(tmp_path / "ids.npy", np.array([[1, 2, V + 5]], np.int64))
    p = run_tool("tcc-run", tmp_path / "m.tcc", "--input", f"ids={tmp_path / 'ids.npy'}",
                 "--output-dir", tmp_path / "out")
    assert_one_line_error(p, "input 'ids' element [0, 2]", "out of range", "Gather node 'embed'")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bound", [[0, "Gather"], ["37", "Gather"], [37], [37, 5]])
def test_malformed_bound_in_a_manifest_is_refused(bound, tmp_path, rng):
    import json
    import zipfile
    good = tcc.compile(_embed_model(rng, [2, 3]), output=str(tmp_path / "good.tcc"), cache=False)
    with zipfile.ZipFile(good) as z:
        manifest = json.loads(z.read("manifest.json"))
        members = {i.filename: (i, z.read(i.filename)) for i in z.infolist()}
    assert manifest["signature"]["inputs"][0]["index_bound"] == [V, "Gather node 'embed'"]
    manifest["signature"]["inputs"][0]["index_bound"] = bound
    bad = tmp_path / "bad.tcc"
    with zipfile.ZipFile(bad, "w") as z:
        for name, (info, data) in members.items():
            z.writestr(info, json.dumps(manifest).encode() if name == "manifest.json" else data)
    p = run_tool("tcc-run", bad, "--random-inputs")
    assert_one_line_error(p, "bad.tcc", "index_bound")


def _positions_model(rng, p):
    """GPT-2's position embedding: Range(0, seq) indexes a table of p rows."""
    tok = rng.standard_normal((V, D)).astype(np.float32)
    pos = rng.standard_normal((p, D)).astype(np.float32)
    nodes = [helper.make_node("Shape", ["ids"], ["sh"]),
             helper.make_node("Gather", ["sh", "one"], ["s"], axis=0),
             helper.make_node("Range", ["zero", "s", "one"], ["r"]),
             helper.make_node("Gather", ["pos", "r"], ["pe"], axis=0, name="positions"),
             helper.make_node("Gather", ["tok", "ids"], ["te"], axis=0, name="tokens"),
             helper.make_node("Add", ["te", "pe"], ["y"])]
    inits = [numpy_helper.from_array(tok, "tok"), numpy_helper.from_array(pos, "pos"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array(1, np.int64), "one")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", D])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("accel", ["host", "cpu"])
def test_sequence_past_the_position_table_is_refused(accel, tmp_path, rng):
    p = 12
    m = _positions_model(rng, p)
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"), maccel=[accel], cache=False))
    for s in (p, 5, p + 1, p):
        ids = rng.integers(0, V, size=(2, s)).astype(np.int64)
        if s <= p:
            np.testing.assert_allclose(sess.run({"ids": ids})[0], _ort(m, {"ids": ids}), rtol=1e-6, atol=1e-6)
            continue
        with pytest.raises(Exception):
            _ort(m, {"ids": ids})
        with pytest.raises(InputError) as e:
            sess.run({"ids": ids})
        msg = str(e.value)
        assert f"'ids' [2, {s}] do not fit the model" in msg and "node 'positions'" in msg, msg
        assert f"index {p} " in msg and f"out of range [-{p}, {p - 1}]" in msg, msg


def test_range_too_large_for_memory_or_with_zero_delta(tmp_path, rng):
    """Range(0, 10^17) asks for 800 PB, past any address space: a one-line
    'out of memory', not an internal error; a zero delta is refused; a small
    limit still runs."""
    g = helper.make_graph([helper.make_node("Range", ["a", "b", "c"], ["y"])], "g",
                          [helper.make_tensor_value_info(n, TensorProto.INT64, []) for n in "abc"],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, ["n"])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "r.onnx")
    assert run_tool("tcc", tmp_path / "r.onnx", "-o", tmp_path / "r.tcc").returncode == 0
    n = int(rng.integers(3, 50))
    for name, v in (("a", 0), ("b", n), ("c", 1), ("huge", 10 ** 17)):
        np.save(tmp_path / f"{name}.npy", np.array(v, np.int64))
    ok = run_tool("tcc-run", tmp_path / "r.tcc", "--input", f"a={tmp_path / 'a.npy'}", "--input",
                  f"b={tmp_path / 'b.npy'}", "--input", f"c={tmp_path / 'c.npy'}", "--output-dir", tmp_path / "o")
    assert ok.returncode == 0, ok.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy"), np.arange(n))
    p = run_tool("tcc-run", tmp_path / "r.tcc", "--input", f"a={tmp_path / 'a.npy'}", "--input",
                 f"b={tmp_path / 'huge.npy'}", "--input", f"c={tmp_path / 'c.npy'}")
    assert_one_line_error(p, "out of memory")
    assert "internal error" not in p.stderr
    np.save(tmp_path / "zero.npy", np.array(0, np.int64))  # onnxruntime refuses a zero delta too
    p = run_tool("tcc-run", tmp_path / "r.tcc", "--input", f"a={tmp_path / 'a.npy'}", "--input",
                 f"b={tmp_path / 'b.npy'}", "--input", f"c={tmp_path / 'zero.npy'}")
    assert_one_line_error(p, "do not fit the model", "Range's delta is 0")


@pytest.mark.parametrize("maccel", [[], ["--maccel=host"]])
def test_outputs_and_values_too_large_say_which_and_how_large(tmp_path, rng, maccel):
    """An Expand to [2^20, 2^20] floats (4 TiB, from the input's data) and a
    constant ConstantOfShape of that size: one line naming the output or the
    value and the size, not numpy's 'array with shape (4398046511168,) and
    data type uint8'; a small shape still runs."""
    big = [1 << 20, 1 << 20]
    g = helper.make_graph([helper.make_node("Expand", ["x", "s"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "e.onnx")
    assert run_tool("tcc", tmp_path / "e.onnx", "-o", tmp_path / "e.tcc", *maccel).returncode == 0
    x = rng.standard_normal(1).astype(np.float32)
    small = [int(v) for v in rng.integers(2, 9, 2)]
    for name, v in (("x", x), ("small", np.array(small, np.int64)), ("big", np.array(big, np.int64))):
        np.save(tmp_path / f"{name}.npy", v)
    ok = run_tool("tcc-run", tmp_path / "e.tcc", "--input", f"x={tmp_path / 'x.npy'}", "--input",
                  f"s={tmp_path / 'small.npy'}", "--output-dir", tmp_path / "o")
    assert ok.returncode == 0, ok.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy"), np.broadcast_to(x, small))
    p = run_tool("tcc-run", tmp_path / "e.tcc", "--input", f"x={tmp_path / 'x.npy'}", "--input",
                 f"s={tmp_path / 'big.npy'}")
    assert_one_line_error(p, "out of memory: cannot allocate 4.00 TiB for output 'y' (float32[1048576, 1048576])")

    g = helper.make_graph([helper.make_node("ConstantOfShape", ["s"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, big)],
                          [onnx.numpy_helper.from_array(np.array(big, np.int64), "s")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "c.onnx")
    assert run_tool("tcc", tmp_path / "c.onnx", "-o", tmp_path / "c.tcc", *maccel).returncode == 0
    p = run_tool("tcc-run", tmp_path / "c.tcc", "--random-inputs")
    assert_one_line_error(p, "c.tcc: cannot allocate", "4.00 TiB for value" if not maccel else "workspace 4398046511")


@pytest.mark.parametrize("case,needle", [
    ("npz", "not a .npy file (an .npz archive; a tensor input takes one array in an .npy)"),
    ("pickle", "not a .npy file (Object arrays cannot be loaded when allow_pickle=False)"),
    ("garbage", "not a .npy file"),
    ("dtype", "input 'x' has dtype float64, expected float32"),
    ("missing", "no such file"),
])
def test_input_files_tcc_run_cannot_take(tmp_path, rng, case, needle):
    """--input files: an .npz archive for a tensor was 'internal error:
    ValueError: could not convert string to float'; a pickled object array
    is never unpickled; each is one line naming the input and the file."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "m.onnx")
    assert run_tool("tcc", tmp_path / "m.onnx", "-o", tmp_path / "m.tcc").returncode == 0
    f = tmp_path / "in.npy"
    x = rng.standard_normal((2, 3))
    if case == "npz":
        f = tmp_path / "in.npz"
        np.savez(f, x=x.astype(np.float32))
    elif case == "pickle":
        np.save(f, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    elif case == "garbage":
        f.write_bytes(b"\x93NUMPY" + bytes(rng.integers(0, 256, 64, dtype=np.uint8)))
    elif case == "dtype":
        np.save(f, x)
    p = run_tool("tcc-run", tmp_path / "m.tcc", "--input", f"x={f}")
    assert p.returncode == 1, p.stderr
    assert_one_line_error(p, needle)
    np.save(tmp_path / "ok.npy", x.astype(np.float32))
    ok = run_tool("tcc-run", tmp_path / "m.tcc", "--input", f"x={tmp_path / 'ok.npy'}", "--output-dir", tmp_path / "o")
    assert ok.returncode == 0, ok.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy"), np.maximum(x.astype(np.float32), 0))
