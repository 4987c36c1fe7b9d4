"""tcc.backend reports an op tcc does not lower as NotImplementedError (the
onnx backend harnesses' "unsupported"), not as a crash, with a one-line
message naming the node and the op; the CLI still prints it as one line."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tcc.backend import TccBackend, backend_for
from tcc.dialects.ir.errors import TccError


def _unsupported_model():
    # Multinomial: an op tcc has no lowering for (python -m tcc.node_report
    # lists the others)
    node = helper.make_node("Multinomial", ["x"], ["y"], name="draw", sample_size=3)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("maccel", [(), ("cpu",)])
def test_unlowered_op_is_not_implemented(maccel):
    with pytest.raises(NotImplementedError) as e:
        backend_for(*maccel).prepare(_unsupported_model())
    assert isinstance(e.value, TccError)
    msg = str(e.value)
    assert "\n" not in msg and "draw" in msg and "Multinomial" in msg


def test_supported_model_still_runs(rng):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    x = rng.standard_normal(5).astype(np.float32)
    np.testing.assert_array_equal(TccBackend.run_model(m, [x])[0], np.maximum(x, 0))


def test_cli_prints_one_line(tmp_path):
    import subprocess
    import sys
    import os
    p = tmp_path / "m.onnx"
    onnx.save(_unsupported_model(), str(p))
    tcc = os.path.join(os.path.dirname(sys.executable), "tcc")
    r = subprocess.run([tcc, "--maccel=host", str(p), "-o", str(tmp_path / "m.tcc")], capture_output=True, text=True)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "no host lowering for onnx.Multinomial" in r.stderr
    assert not (tmp_path / "m.tcc").exists()
