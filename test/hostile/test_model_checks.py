"""Models onnx's checker accepts but tcc must refuse, with the reason: an
opset import beyond what the installed onnx defines, a non-positive opset
version, a graph that declares no outputs."""
import numpy as np
import onnx
import pytest
from onnx import helper

import tcc
from tcc.dialects.ir.errors import TccError

from ..conftest import assert_one_line_error, run_tool
from .models import reference, relu_model, save


def _newest():
    return onnx.defs.onnx_opset_version()


@pytest.mark.parametrize("domain,version,needle", [
    ("", 999, "opset 999 of domain 'ai.onnx' is newer than the installed onnx"),
    ("", "newest+1", "is newer than the installed onnx"),
    ("ai.onnx.ml", 99, "opset 99 of domain 'ai.onnx.ml' is newer"),
    ("ai.onnx.ml", 0, "has version 0"),
])
def test_opset_out_of_range_is_refused(tmp_path, domain, version, needle):
    m = relu_model()
    if version == "newest+1":
        version = _newest() + 1
    if domain == "":
        m.opset_import[0].version = version
    else:
        m.opset_import.append(helper.make_opsetid(domain, version))
    onnx.checker.check_model(m)  # what onnx itself lets through
    path = save(m, tmp_path / "m.onnx")
    assert_one_line_error(run_tool("tcc", path), "m.onnx", needle)
    assert not (tmp_path / "m.tcc").exists()
    with pytest.raises(TccError, match=needle.split(" of")[0]):
        tcc.compile(m, output=str(tmp_path / "api.tcc"))


def test_newest_defined_opset_still_compiles(tmp_path, rng):
    m = relu_model(opset=_newest())
    x = rng.standard_normal(8).astype(np.float32)
    got = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc"))).run({"x": x})[0]
    np.testing.assert_array_equal(got, reference(relu_model(), {"x": x})[0])


def test_graph_without_outputs_is_refused(tmp_path):
    m = relu_model()
    del m.graph.output[:]
    onnx.checker.check_model(m)
    path = save(m, tmp_path / "m.onnx")
    assert_one_line_error(run_tool("tcc", path), "m.onnx", "declares no outputs")
    assert not (tmp_path / "m.tcc").exists()
