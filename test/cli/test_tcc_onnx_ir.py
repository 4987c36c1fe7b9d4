"""`tcc --emit=onnx-ir` and `tcc-opt` as a user runs them, and their errors:
one line saying what and where, a non-zero exit, no traceback, no output file."""
import os

import onnx
import pytest
from onnx import TensorProto, helper

from tcc import samples

from ..conftest import assert_one_line_error, run_tool


@pytest.fixture
def model_path(tmp_path):
    p = tmp_path / "cnn.onnx"
    onnx.save(samples.cnn(seed=1), p)
    return p


def test_emit_onnx_ir_prints_module(model_path):
    r = run_tool("tcc", "--emit=onnx-ir", model_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('"builtin.module"()')
    assert '"onnx.Conv"' in r.stdout and 'sym_name = "main_graph"' in r.stdout
    assert "loc(" in r.stdout  # node names become locations


def test_emit_to_file_then_tcc_opt(model_path, tmp_path):
    out = tmp_path / "cnn.mlir"
    r = run_tool("tcc", "--emit=onnx-ir", model_path, "-o", out)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    assert out.exists() and (tmp_path / "cnn.mlir.resources").exists()
    r = run_tool("tcc-opt", out, "--pass", "canonicalize", "--pass", "dce")
    assert r.returncode == 0, r.stderr
    assert '"onnx.Conv"' in r.stdout
    r = run_tool("tcc-opt", out, "--pipeline", "canonicalize,cse,fold-constants", "--timing",
                 "--print-ir-after-all")
    assert r.returncode == 0, r.stderr
    assert "IR Dump After cse" in r.stderr and "Pass execution timing report" in r.stderr


def test_tcc_opt_reads_stdin_and_lists_passes(model_path):
    text = run_tool("tcc", "--emit=onnx-ir", model_path).stdout
    r = run_tool("tcc-opt", "-", "--pass", "cse", input=text)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count('"onnx.Conv"') == text.count('"onnx.Conv"')
    r = run_tool("tcc-opt", "--list-passes")
    for p in ("canonicalize", "cse", "dce", "fold-constants", "shape-inference"):
        assert p in r.stdout


def test_tcc_opt_output_is_idempotent(model_path, tmp_path):
    a = tmp_path / "a.mlir"
    b = tmp_path / "b.mlir"
    run_tool("tcc", "--emit=onnx-ir", model_path, "-o", a)
    assert run_tool("tcc-opt", a, "-o", b).returncode == 0
    assert a.read_text() == b.read_text()


# ---- errors -------------------------------------------------------------------

def _save(tmp_path, name, nodes, inputs, outputs, domain_opsets=(("", 18),)):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in domain_opsets])
    p = tmp_path / name
    p.write_bytes(m.SerializeToString())
    return p


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])


def test_truncated_model(model_path, tmp_path):
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(model_path.read_bytes()[:200])
    out = tmp_path / "out.mlir"
    r = run_tool("tcc", "--emit=onnx-ir", bad, "-o", out)
    assert_one_line_error(r, "truncated.onnx", "not a valid ONNX model")
    assert not out.exists()


def test_garbage_model(tmp_path):
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(os.urandom(4096))
    assert_one_line_error(run_tool("tcc", "--emit=onnx-ir", bad), "garbage.onnx")


def test_unknown_op(tmp_path):
    p = _save(tmp_path, "u.onnx", [helper.make_node("FooBar", ["x"], ["y"], name="mystery")], [X], [Y])
    assert_one_line_error(run_tool("tcc", "--emit=onnx-ir", p), "mystery", "FooBar")


def test_unknown_domain(tmp_path):
    p = _save(tmp_path, "d.onnx", [helper.make_node("Relu", ["x"], ["y"], name="n1", domain="com.acme")],
              [X], [Y], (("", 18), ("com.acme", 1)))
    assert_one_line_error(run_tool("tcc", "--emit=onnx-ir", p), "n1", "com.acme")


def test_missing_file(tmp_path):
    assert_one_line_error(run_tool("tcc", "--emit=onnx-ir", tmp_path / "nope.onnx"), "nope.onnx", "no such file")
    assert_one_line_error(run_tool("tcc-opt", tmp_path / "nope.mlir"), "nope.mlir", "no such file")


def test_unknown_accelerator(model_path):
    assert_one_line_error(run_tool("tcc", "--maccel=warp9", model_path), "warp9", "installed")


def test_bad_ir_text(tmp_path):
    p = tmp_path / "bad.mlir"
    p.write_text('"builtin.module"() ({\n  %0 = "onnx.Relu"(%9) : (tensor<2xf32>) -> tensor<2xf32>\n}) : () -> ()\n')
    out = tmp_path / "out.mlir"
    r = run_tool("tcc-opt", p, "-o", out)
    assert_one_line_error(r, "bad.mlir:2:", "undefined value '%9'")
    assert not out.exists()


def test_verifier_failure(tmp_path):
    p = tmp_path / "v.mlir"
    p.write_text('"builtin.module"() ({\n  "func.func"() ({\n  ^bb0(%arg0: tensor<2xf32>):\n'
                 '    %0 = "onnx.Cast"(%arg0) : (tensor<2xf32>) -> tensor<2xf64> loc("c1")\n'
                 '    "func.return"(%0) : (tensor<2xf64>) -> ()\n'
                 '  }) {function_type = (tensor<2xf32>) -> tensor<2xf64>, sym_name = "main_graph"} : () -> ()\n'
                 '}) : () -> ()\n')
    assert_one_line_error(run_tool("tcc-opt", p), "v.mlir", "onnx.Cast", "c1", "requires attribute 'to'")


def test_unknown_pass_and_option(model_path, tmp_path):
    text = run_tool("tcc", "--emit=onnx-ir", model_path).stdout
    out = tmp_path / "o.mlir"
    assert_one_line_error(run_tool("tcc-opt", "--pass", "frobnicate", "-o", out, input=text), "frobnicate")
    assert_one_line_error(run_tool("tcc-opt", "--pipeline", "cse{depth=3}", input=text), "cse", "depth")
    assert_one_line_error(run_tool("tcc", "--no-such-flag", model_path), "no-such-flag")
    assert not out.exists()


def test_debug_shows_traceback(tmp_path):
    r = run_tool("tcc", "--emit=onnx-ir", "--debug", tmp_path / "nope.onnx")
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_random_inputs_for_dynamic_dims_is_a_one_line_error(tmp_path):
    """tcc-run --random-inputs cannot invent a dynamic dim: it names the input
    and says to give it; with --input the same artifact runs."""
    import numpy as np
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    p = _save(tmp_path, "dyn.onnx", [helper.make_node("Relu", ["x"], ["y"])], [x],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    out = tmp_path / "dyn.tcc"
    assert run_tool("tcc", p, "-o", out).returncode == 0
    assert_one_line_error(run_tool("tcc-run", out, "--random-inputs"), "input 'x'", "dynamic dims")
    np.save(tmp_path / "x.npy", -np.ones((2, 3), np.float32))
    r = run_tool("tcc-run", out, "--input", f"x={tmp_path / 'x.npy'}")
    assert r.returncode == 0 and "float32[2, 3]" in r.stdout, r.stderr


def test_placed_model_with_shape_deciding_input_is_placed_per_input(tmp_path, rng):
    """--maccel with an input that decides a shape by its value: placement
    needs static shapes, so the artifact is specialized, placed on the
    accelerator and compiled per input at run time, and runs right."""
    import numpy as np
    import tcc
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    p = _save(tmp_path, "dyn.onnx", [helper.make_node("Relu", ["x"], ["r"]),
                                     helper.make_node("Reshape", ["r", "s"], ["y"])], [x, s],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    out = tmp_path / "dyn.tcc"
    r = run_tool("tcc", "--maccel=cpu", p, "-o", out)
    assert r.returncode == 0 and out.exists(), r.stderr
    sess = tcc.load(str(out))
    xv = rng.standard_normal((2, 6)).astype(np.float32)
    for shape in ([3, 4], [6, 2]):
        got = sess.run({"x": xv, "s": np.array(shape, np.int64)})[0]
        np.testing.assert_array_equal(got, np.maximum(xv, 0).reshape(shape))
