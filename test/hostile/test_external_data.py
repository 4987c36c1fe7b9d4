"""Tensors stored outside the .onnx file: where they may come from, and a
location onnx refuses (outside the model's folder, absolute, a link, a
missing file, a range past the file's end) said as the model's fault in
one line, not as an internal error."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc

from ..conftest import assert_one_line_error, run_tool
from .models import reference


def _external(array, name, location, offset=None, length=None):
    t = numpy_helper.from_array(array, name)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)
    return t


def _matmul(w):
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("case,needle", [
    ("outside", "points outside the directory"),
    ("absolute", "should be a relative path"),
    ("missing", "is not regular file"),
    ("link", "is a symbolic link"),
    ("length", "exceeds available data"),
    ("offset", "exceeds file size"),
])
def test_external_data_onnx_refuses_is_the_models_fault(tmp_path, rng, case, needle):
    d = tmp_path / "model"
    d.mkdir()
    w = rng.standard_normal((4, 4)).astype(np.float32)
    w.tofile(d / "w.bin")
    w.tofile(tmp_path / "outside.bin")
    os.symlink(d / "w.bin", d / "link.bin")
    location, offset, length = {"outside": ("../outside.bin", None, None),
                                "absolute": (str(tmp_path / "outside.bin"), None, None),
                                "missing": ("gone.bin", None, None), "link": ("link.bin", None, None),
                                "length": ("w.bin", 0, 4096), "offset": ("w.bin", 1 << 40, None)}[case]
    path = d / "m.onnx"
    onnx.save(_matmul(_external(w, "w", location, offset, length)), path)
    proc = run_tool("tcc", str(path))
    assert proc.returncode == 1, proc.stderr  # the model's fault (3: an internal error)
    assert_one_line_error(proc, "m.onnx: cannot load external data", needle)
    assert not (d / "m.tcc").exists()


def test_a_constant_nodes_external_value_is_loaded(tmp_path, rng):
    """Not only initializers: a Constant node's value stored beside the model."""
    w = rng.standard_normal((4, 4)).astype(np.float32)
    w.tofile(tmp_path / "c.bin")
    const = helper.make_node("Constant", [], ["w"], name="c", value=_external(w, "c", "c.bin"))
    g = helper.make_graph([const, helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    got = tcc.load(tcc.compile(str(path), output=str(tmp_path / "m.tcc"))).run({"x": x})[0]
    inline = helper.make_model(helper.make_graph(
        [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "c")), g.node[1]], "g",
        list(g.input), list(g.output)), opset_imports=[helper.make_opsetid("", 18)])
    np.testing.assert_allclose(got, reference(inline, {"x": x})[0], rtol=1e-6, atol=1e-6)
