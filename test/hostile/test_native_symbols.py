"""Generated code never jumps to address 0: helper symbols LLVM's code
generator calls (libgcc's __truncdfhf2 for `fptrunc double to half`) are
provided by tcc itself, and a symbol nothing defines is an error at compile
and load time. Run in fresh interpreters that have not imported onnxruntime
(which loads libgcc_s and hid the crash)."""
import subprocess
import sys
import textwrap

import pytest

from tcc.dialects.ir.errors import TccError

CAST_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    import tcc
    op, out = sys.argv[1], sys.argv[2]
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [64])
    if op == "Cast":
        nodes, inits = [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], []
    else:
        like = helper.make_tensor("like", TensorProto.FLOAT16, [1], [0])
        nodes, inits = [helper.make_node("CastLike", ["x", "like"], ["y"])], [like]
    g = helper.make_graph(nodes, "cast", [x], [y], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    xv = np.random.default_rng(int(sys.argv[3])).standard_normal(64) * 1000
    got = tcc.load(tcc.compile(m, output=out)).run({"x": xv})[0]
    assert "onnxruntime" not in sys.modules
    # numpy rounds double -> half directly (no double rounding through float)
    np.testing.assert_array_equal(got.view(np.uint16), xv.astype(np.float16).view(np.uint16))
    print("ok")
""")


@pytest.mark.parametrize("op", ["Cast", "CastLike"])
def test_cast_double_to_half_in_a_fresh_process(tmp_path, op, rng):
    seed = str(rng.integers(1 << 31))  # the session's seed decides the data
    r = subprocess.run([sys.executable, "-c", CAST_SCRIPT, op, str(tmp_path / "m.tcc"), seed],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def _object_calling(symbol):
    from tcc.dialects.conversions.loop_to_native.target import emit_object, optimize
    ir = textwrap.dedent(f"""
        declare void @{symbol}()
        define void @tcc_main_graph(ptr %a, ptr %w, ptr %ws) {{
          call void @{symbol}()
          ret void
        }}
    """)
    return emit_object(optimize(ir, 0), 0)


def test_unresolved_symbol_is_a_compile_error():
    from tcc.dialects.conversions.loop_to_native.target import check_symbols, undefined_symbols
    obj = _object_calling("tcc_no_such_helper_xyz")
    assert "tcc_no_such_helper_xyz" in undefined_symbols(obj)
    with pytest.raises(TccError, match="'tcc_no_such_helper_xyz'.*unresolved symbol"):
        check_symbols(obj)
    check_symbols(_object_calling("tcc_parallel_for"))  # the runtime's own symbols resolve


LOAD_SCRIPT = textwrap.dedent("""
    import sys
    import tcc
    from tcc.dialects.ir.errors import TccError
    try:
        tcc.load(sys.argv[1])
    except TccError as e:
        print(e)
        sys.exit(1)
    sys.exit(0)
""")


def test_artifact_calling_an_unresolved_symbol_is_refused_at_load(tmp_path):
    from tcc.runtime.artifact import write_artifact
    path = str(tmp_path / "bad.tcc")
    write_artifact(path, inputs=[], outputs=[], host_object=_object_calling("tcc_no_such_helper_xyz"),
                   weights=[], compile_info={"target": {"features": []}})
    r = subprocess.run([sys.executable, "-c", LOAD_SCRIPT, path], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "tcc_no_such_helper_xyz" in r.stdout and "unresolved symbol" in r.stdout


def test_malformed_object_is_an_error_not_a_crash():
    from tcc.dialects.conversions.loop_to_native.target import undefined_symbols
    obj = _object_calling("tcc_parallel_for")
    for bad in (b"", b"\x7fELF", obj[:100], obj[:0x28] + b"\xff" * 8 + obj[0x30:]):
        with pytest.raises(TccError, match="malformed"):
            undefined_symbols(bad)
