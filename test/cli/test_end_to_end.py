"""The CLIs end to end, as a user runs them (subprocesses of this
environment's console scripts): every --emit target checked for what it
claims to be (IR that parses and runs, LLVM IR that verifies, an object and a
shared library whose entry computes the model), every -O level run against
onnxruntime, tcc-run on a model of every input dtype family with the values
it prints and writes checked against onnxruntime, tcc-accel list / info /
check cpu (a filtered run), and tcc-opt's --resources,
--allow-unregistered-dialect and --no-verify-each."""
import ctypes
import re
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ..conftest import assert_one_line_error, run_tool

H = helper.make_node


def _save(tmp_path, name, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    p = tmp_path / name
    onnx.save(m, p)
    return p, m


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def mlp(tmp_path, rng, m=5, k=37, n=19):
    """MatMul + Add + Relu + Softmax: a GEMM, a fused elementwise chain, a row reduction."""
    w = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")
    nodes = [H("MatMul", ["x", "w"], ["h"]), H("Add", ["h", "b"], ["a"]), H("Relu", ["a"], ["r"]),
             H("Softmax", ["r"], ["y"], axis=-1)]
    p, model = _save(tmp_path, "mlp.onnx", nodes, [_vi("x", TensorProto.FLOAT, [m, k])],
                     [_vi("y", TensorProto.FLOAT, [m, n])], [w, b])
    x = rng.standard_normal((m, k)).astype(np.float32)
    return p, model, {"x": x}


def ort_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _ok(r):
    assert r.returncode == 0, r.stderr
    return r


def test_emit_onnx_ir_and_loop_ir_parse_and_loop_ir_runs(tmp_path, rng):
    from tcc.dialects.ir import parse_module
    from tcc.dialects.init_all import default_context
    from tcc.dialects.loop.interpreter import run_loop_module
    p, model, feeds = mlp(tmp_path, rng)
    onnx_ir = _ok(run_tool("tcc", "--emit=onnx-ir", p)).stdout
    assert '"onnx.MatMul"' in onnx_ir and '"onnx.Softmax"' in onnx_ir
    _ok(run_tool("tcc-opt", "-", "--pass", "canonicalize", input=onnx_ir))
    out = tmp_path / "loop.mlir"
    _ok(run_tool("tcc", "--emit=loop-ir", p, "-o", out))
    text = out.read_text()
    assert '"loop.for"' in text and '"onnx.' not in text
    got = run_loop_module(parse_module(text, str(out), default_context()), [feeds["x"]])
    want = ort_run(model, feeds)
    assert len(got) == len(want) == 1
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_emit_native_ir_verifies(tmp_path, rng):
    import llvmlite.binding as llvm
    p, _, _ = mlp(tmp_path, rng)
    text = _ok(run_tool("tcc", "--emit=native-ir", p)).stdout
    mod = llvm.parse_assembly(text)
    mod.verify()
    assert mod.get_function("tcc_main_graph") is not None


def _entry_run(fn, model, feeds, out_shapes, weights=()):
    ins = [np.ascontiguousarray(v) for v in feeds.values()]
    outs = [np.zeros(s, np.float32) for s in out_shapes]
    ptrs = (ctypes.c_void_p * (len(ins) + len(outs)))(*[a.ctypes.data for a in ins + outs])
    ws = np.zeros(1 << 20, np.uint8)  # more than these models plan
    wp = (ctypes.c_void_p * max(len(weights), 1))(*[w.ctypes.data for w in weights])
    fn(ptrs, wp, ws.ctypes.data)
    return outs


def _add_mul_model(tmp_path):
    # no weights: the entry's weight table is unused, so the object runs as it is
    return _save(tmp_path, "am.onnx", [H("Add", ["x", "y"], ["s"]), H("Mul", ["s", "x"], ["t"]),
                                      H("Tanh", ["t"], ["z"])],
                 [_vi("x", TensorProto.FLOAT, [3, 29]), _vi("y", TensorProto.FLOAT, [3, 29])],
                 [_vi("z", TensorProto.FLOAT, [3, 29])])


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_emit_obj_is_an_object_whose_entry_computes_the_model(tmp_path, rng):
    import subprocess

    from tcc.runtime.jit import jit_entry as _jit
    p, model = _add_mul_model(tmp_path)
    out = tmp_path / "m.o"
    _ok(run_tool("tcc", "--emit=obj", p, "-o", out))
    data = out.read_bytes()
    assert data[:4] == b"\x7fELF" and data[16] == 1  # ET_REL: relocatable
    nm = subprocess.run(["nm", str(out)], capture_output=True, text=True, check=True).stdout
    assert re.search(r"^\w+ T tcc_main_graph$", nm, re.M), nm
    feeds = {k: rng.standard_normal((3, 29)).astype(np.float32) for k in "xy"}
    _engine, entry = _jit(data)
    got = _entry_run(entry, model, feeds, [(3, 29)])
    np.testing.assert_allclose(got[0], ort_run(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_emit_lib_is_a_shared_library_whose_entry_computes_the_model(tmp_path, rng):
    from tcc.runtime import native
    p, model = _add_mul_model(tmp_path)
    out = tmp_path / "m.so"
    _ok(run_tool("tcc", "--emit=lib", p, "-o", out))
    data = out.read_bytes()
    assert data[:4] == b"\x7fELF" and data[16] == 3  # ET_DYN
    native.load()  # tcc_parallel_for, which the library may call
    lib = ctypes.CDLL(str(out))
    entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
        ctypes.cast(lib.tcc_main_graph, ctypes.c_void_p).value)
    feeds = {k: rng.standard_normal((3, 29)).astype(np.float32) for k in "xy"}
    got = _entry_run(entry, model, feeds, [(3, 29)])
    np.testing.assert_allclose(got[0], ort_run(model, feeds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_every_opt_level_runs_right(level, tmp_path, rng):
    p, model, feeds = mlp(tmp_path, rng)
    art = tmp_path / f"m{level}.tcc"
    _ok(run_tool("tcc", f"-O{level}", p, "-o", art))
    np.save(tmp_path / "x.npy", feeds["x"])
    _ok(run_tool("tcc-run", art, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out"))
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), ort_run(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_bad_opt_level_is_a_one_line_error(tmp_path, rng):
    p, _, _ = mlp(tmp_path, rng)
    r = run_tool("tcc", "-O4", p, "-o", tmp_path / "m.tcc")
    assert r.returncode != 0 and "-O" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m.tcc").exists()


def _tcc_stdin(stdin_path, *args, cwd=None):
    import subprocess

    from ..conftest import tool
    with open(stdin_path, "rb") as f:
        return subprocess.run([tool("tcc"), *map(str, args)], stdin=f, capture_output=True, text=True, cwd=cwd,
                              timeout=300)


def test_model_from_standard_input(tmp_path, rng):
    """`tcc - -o out.tcc < model.onnx` (as `curl ... | tcc -`), its external
    data read beside the working folder; the artifact computes what
    onnxruntime does."""
    from onnx.external_data_helper import convert_model_to_external_data
    p, model, feeds = mlp(tmp_path, rng, k=64, n=48)
    ext = onnx.load(p)
    convert_model_to_external_data(ext, location="w.bin", size_threshold=0)
    onnx.save(ext, tmp_path / "ext.onnx")
    for src in (p, tmp_path / "ext.onnx"):
        art = tmp_path / "stdin.tcc"
        _ok(_tcc_stdin(src, "-", "-o", art, cwd=tmp_path))
        np.save(tmp_path / "x.npy", feeds["x"])
        _ok(run_tool("tcc-run", art, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out"))
        np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), ort_run(model, feeds)[0],
                                   rtol=1e-5, atol=1e-6)
        art.unlink()
    # errors: one line each, naming standard input, nothing written
    assert_one_line_error(_tcc_stdin(p, "-", cwd=tmp_path), "standard input", "-o")
    assert_one_line_error(_tcc_stdin(p, "-", "-o", "-", cwd=tmp_path), "--emit=tcc", "-o")
    (tmp_path / "junk").write_bytes(b"not a model")
    assert_one_line_error(_tcc_stdin(tmp_path / "junk", "-", "-o", art, cwd=tmp_path), "<stdin>", "not a valid")
    (tmp_path / "empty").write_bytes(b"")
    assert_one_line_error(_tcc_stdin(tmp_path / "empty", "-", "-o", art, cwd=tmp_path), "<stdin>", "empty")
    assert_one_line_error(_tcc_stdin(tmp_path / "ext.onnx", "-", "-o", art, cwd=tmp_path / "out"), "<stdin>",
                          "external data")
    assert not art.exists() and not (tmp_path / "-").exists()


# one model per input dtype family: (onnx type, numpy dtype, nodes, data)
FAMILIES = {
    "float32": (TensorProto.FLOAT, np.float32, ["Add", "Mul", "Sigmoid"]),
    "float64": (TensorProto.DOUBLE, np.float64, ["Add", "Mul", "Tanh"]),
    "float16": (TensorProto.FLOAT16, np.float16, ["Add", "Mul", "Relu"]),
    "int64": (TensorProto.INT64, np.int64, ["Add", "Mul", "Abs"]),
    "int32": (TensorProto.INT32, np.int32, ["Sub", "Mul", "Neg"]),
    "int8": (TensorProto.INT8, np.int8, ["Add", "Max", "Neg"]),
    "uint8": (TensorProto.UINT8, np.uint8, ["Add", "Min", "Identity"]),
    "bool": (TensorProto.BOOL, np.bool_, ["And", "Xor", "Not"]),
}


def _family_data(rng, dt, shape):
    dt = np.dtype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = max(info.min, -1000), min(info.max, 1000)  # products stay in range for int32/int64
        return rng.integers(lo, hi, shape, endpoint=True).astype(dt)
    return (rng.standard_normal(shape) * 2).astype(dt)


def _printed(stdout):
    """{output name: (dtype, shape, min, max, mean)} from tcc-run's lines."""
    res = {}
    for m in re.finditer(r"^(\w+): (\w+)\[([\d, ]*)\]  min (\S+)  max (\S+)  mean (\S+)$", stdout, re.M):
        shape = [int(d) for d in m.group(3).split(",") if d.strip()]
        res[m.group(1)] = (m.group(2), shape, float(m.group(4)), float(m.group(5)), float(m.group(6)))
    return res


@pytest.mark.parametrize("family", list(FAMILIES))
def test_tcc_run_prints_and_writes_what_onnxruntime_computes(family, tmp_path, rng):
    elem, dt, (op2a, op2b, op1) = FAMILIES[family]
    shape = [3, 37]
    nodes = [H(op2a, ["x", "y"], ["s"]), H(op2b, ["s", "x"], ["t"]), H(op1, ["t"], ["z"]),
             H("Identity", ["s"], ["s_out"])]
    p, model = _save(tmp_path, f"{family}.onnx", nodes, [_vi("x", elem, shape), _vi("y", elem, shape)],
                     [_vi("z", elem, shape), _vi("s_out", elem, shape)])
    feeds = {k: _family_data(rng, dt, shape) for k in "xy"}
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
    art = tmp_path / f"{family}.tcc"
    _ok(run_tool("tcc", p, "-o", art))
    r = _ok(run_tool("tcc-run", art, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}",
                     "--output-dir", tmp_path / "out"))
    want = dict(zip(["z", "s_out"], ort_run(model, feeds)))
    printed = _printed(r.stdout)
    assert sorted(printed) == sorted(want), r.stdout
    for name, w in want.items():
        got = np.load(tmp_path / "out" / f"{name}.npy")
        assert got.dtype == w.dtype and got.shape == w.shape, (name, got.dtype, got.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(got, w, rtol=1e-3 if w.dtype == np.float16 else 1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, w)
        dtype, pshape, lo, hi, mean = printed[name]
        assert (dtype, pshape) == (str(w.dtype), list(w.shape)), (name, printed[name])
        f = (w if w.dtype.kind != "f" else got).astype(np.float64)  # floats: what it computed, printed
        # with 6 significant digits
        np.testing.assert_allclose([lo, hi, mean], [f.min(), f.max(), f.mean()], rtol=1e-5, atol=1e-12,
                                   err_msg=f"{name}: {r.stdout}")


def test_tcc_run_random_inputs_and_repeat(tmp_path, rng):
    p, _, _ = mlp(tmp_path, rng)
    art = tmp_path / "m.tcc"
    _ok(run_tool("tcc", p, "-o", art))
    r = _ok(run_tool("tcc-run", art, "--random-inputs", "--repeat", "3"))
    dtype, shape, lo, hi, mean = _printed(r.stdout)["y"]
    assert (dtype, shape) == ("float32", [5, 19]) and 0 <= lo <= mean <= hi <= 1
    np.testing.assert_allclose(mean, 1 / 19, rtol=1e-5)  # softmax rows sum to one
    assert re.search(r"^median latency over 2 runs: \d+\.\d{3} ms$", r.stdout, re.M), r.stdout


def test_tcc_accel_list_info_and_a_filtered_check():
    r = _ok(run_tool("tcc-accel", "list"))
    rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines()[1:] if ln.strip()}
    assert r.stdout.split()[:4] == ["name", "version", "plugin", "API"] and "cpu" in rows, r.stdout
    r = _ok(run_tool("tcc-accel", "info", "cpu"))
    first = r.stdout.splitlines()[0]
    assert first.startswith(f"cpu {rows['cpu'][1]} (plugin API {rows['cpu'][2]})"), r.stdout
    assert re.search(r"^  composite   conv_add_relu: onnx\.Conv -> onnx\.Add -> onnx\.Relu$", r.stdout, re.M)
    assert re.search(r"^  option      --cpu-dump-c ", r.stdout, re.M), r.stdout
    r = _ok(run_tool("tcc-accel", "check", "cpu", "-k", "test_relu", "-j", "1"))
    counts = {m.group(1): tuple(map(int, m.groups()[1:]))
              for m in re.finditer(r"^(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", r.stdout, re.M)}
    # the filter selects the Relu cases (test_relu, test_relu_expanded...); all pass, none crash
    assert "Relu" in counts and counts["Relu"][0] >= 1 and counts["TOTAL"][2:] == (0, 0), r.stdout
    m = re.search(r"node tests: (\d+) passed, 0 wrong, 0 crashed, \d+ unsupported \(of (\d+)\)", r.stdout)
    assert m and int(m.group(1)) == counts["TOTAL"][0], r.stdout
    assert_one_line_error(run_tool("tcc-accel", "info", "nosuch"), "nosuch")


def _big_const_ir(tmp_path, rng):
    """onnx-ir of a model with a weight large enough to go to a resources file."""
    w = rng.standard_normal((64, 64)).astype(np.float32)
    p, model = _save(tmp_path, "big.onnx", [H("MatMul", ["x", "w"], ["y"])], [_vi("x", TensorProto.FLOAT, [2, 64])],
                     [_vi("y", TensorProto.FLOAT, [2, 64])], [numpy_helper.from_array(w, "w")])
    out = tmp_path / "big.mlir"
    _ok(run_tool("tcc", "--emit=onnx-ir", p, "-o", out))
    return out, w


def test_tcc_opt_resources(tmp_path, rng):
    from tcc.dialects.ir import parse_module
    from tcc.dialects.init_all import default_context
    from tcc.dialects.ir.attributes import elements_value
    ir, w = _big_const_ir(tmp_path, rng)
    res = tmp_path / "big.mlir.resources"
    assert res.exists() and "dense_resource" in ir.read_text()
    moved = tmp_path / "weights.bin"
    res.rename(moved)
    # read from the file --resources names, and written back out beside the output
    out = tmp_path / "out.mlir"
    _ok(run_tool("tcc-opt", ir, "--resources", moved, "--pass", "canonicalize", "-o", out))
    mod = parse_module(out.read_text(), str(out), default_context(), resources_path=str(out) + ".resources")
    consts = [op for op in mod.walk() if op.name == "onnx.Constant"]
    assert len(consts) == 1, "the weight is gone"
    np.testing.assert_array_equal(np.asarray(elements_value(consts[0].attributes["value"])), w)


def test_tcc_opt_allow_unregistered_dialect(tmp_path):
    text = '''"builtin.module"() ({
  "func.func"() ({
  ^bb0(%a: f32):
    %r = "mystery.op"(%a) {k = 3 : i64} : (f32) -> f32
    "func.return"(%r) : (f32) -> ()
  }) {sym_name = "f", function_type = (f32) -> f32} : () -> ()
}) : () -> ()
'''
    p = tmp_path / "u.mlir"
    p.write_text(text)
    assert_one_line_error(run_tool("tcc-opt", p), "mystery.op")
    r = _ok(run_tool("tcc-opt", p, "--allow-unregistered-dialect", "--pass", "cse"))
    assert '"mystery.op"(' in r.stdout and "k = 3 : i64" in r.stdout
    again = _ok(run_tool("tcc-opt", "-", "--allow-unregistered-dialect", input=r.stdout))
    assert again.stdout == r.stdout


def test_tcc_opt_no_verify_each(tmp_path, rng):
    p, _, _ = mlp(tmp_path, rng)
    ir = _ok(run_tool("tcc", "--emit=onnx-ir", p)).stdout
    args = ["-", "--pass", "canonicalize", "--pass", "cse", "--timing"]
    on = _ok(run_tool("tcc-opt", *args, input=ir))
    off = _ok(run_tool("tcc-opt", *args, "--no-verify-each", input=ir))
    assert on.stdout == off.stdout
    # the timing report has a verify line per pass only when verifying after each
    assert on.stderr.count("(verify)") == 2 and "(verify)" not in off.stderr, (on.stderr, off.stderr)
