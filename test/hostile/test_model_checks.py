"""Models onnx's checker accepts but tcc must refuse, with the reason: an
opset import beyond what the installed onnx defines, a non-positive opset
version, a graph that declares no outputs, operands whose shapes disagree
where onnx's inference does not compare them."""
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


def _disagreeing(case, rng):
    """A model whose operand shapes disagree where onnx's inference does not
    look (the checker passes it; onnxruntime refuses it): (model, node name,
    what tcc must say)."""
    from onnx import numpy_helper
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    x4 = ("x", [1, 3, 8, 8])
    nodes, x, inits, out, needle = {
        "conv_channels": ([helper.make_node("Conv", ["x", "w"], ["y"], name="n", pads=[1] * 4)], x4,
                          {"w": f32(4, 5, 3, 3)}, [1, 4, 8, 8], "X has 3 channels, W 5 per group"),
        "conv_bias": ([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="n", pads=[1] * 4)], x4,
                      {"w": f32(4, 3, 3, 3), "b": f32(2)}, [1, 4, 8, 8], "the bias has shape [2]"),
        "conv_transpose": ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="n")], x4,
                           {"w": f32(5, 2, 3, 3)}, [1, 2, 10, 10], "X has 3 channels"),
        "prelu": ([helper.make_node("PRelu", ["x", "s"], ["y"], name="n")], x4, {"s": f32(5, 1, 1)},
                  [1, 3, 8, 8], "the slope's shape [5, 1, 1] does not broadcast"),
        "gru": ([helper.make_node("GRU", ["x", "W", "R"], ["y"], name="n", hidden_size=8)], ("x", [5, 1, 4]),
                {"W": f32(1, 24, 4), "R": f32(1, 24, 7)}, [5, 1, 1, 8], "R has shape [1, 24, 7], expected [1, 24, 8]"),
        "lstm_bias": ([helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], name="n", hidden_size=8)],
                      ("x", [5, 1, 4]), {"W": f32(1, 32, 4), "R": f32(1, 32, 8), "B": f32(1, 32)}, [5, 1, 1, 8],
                      "B has shape [1, 32], expected [1, 64]"),
        "reshape": ([helper.make_node("Reshape", ["x", "s"], ["y"], name="n")], ("x", [2, 6]),
                    {"s": np.array([5, 5], np.int64)}, [5, 5], "12 elements cannot be viewed as [5, 5]"),
        "conv_kernel": ([helper.make_node("Conv", ["x", "w"], ["y"], name="n")], ("x", [1, 3, 4, 4]),
                        {"w": f32(2, 3, 5, 5)}, [1, 2, 1, 1], "the kernel [5, 5] (dilations [1, 1]) is larger"),
        "gemm_c": ([helper.make_node("Gemm", ["x", "w", "c"], ["y"], name="n")], ("x", [4, 6]),
                   {"w": f32(6, 5), "c": f32(3, 5)}, [4, 5], "C has shape [3, 5], which does not broadcast"),
        "batchnorm": ([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="n")], x4,
                      {"s": f32(4), "b": f32(4), "m": f32(4), "v": np.abs(f32(4))}, [1, 3, 8, 8],
                      "scale has shape [4], not one value per channel (3)"),
        "depth_to_space": ([helper.make_node("DepthToSpace", ["x"], ["y"], name="n", blocksize=2)],
                           ("x", [1, 6, 4, 4]), {}, [1, 1, 8, 8], "6 channels do not split into blocks of 2 x 2"),
        "gather_elements": ([helper.make_node("GatherElements", ["x", "i"], ["y"], name="n")], ("x", [2, 3]),
                            {"i": np.zeros((4, 5), np.int64)}, [4, 5], "indices of shape [4, 5] do not fit"),
        "pad": ([helper.make_node("Pad", ["x", "p"], ["y"], name="n")], ("x", [2, 3]),
                {"p": np.array([0, -5, 0, 0], np.int64)}, [2, 1], "crop axis 1 (3 long) below nothing"),
        "slice_axis": ([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"], name="n")], ("x", [2, 3]),
                       {"s": np.array([0], np.int64), "e": np.array([1], np.int64), "a": np.array([4], np.int64)},
                       [2, 1], "(onnx.Slice) cannot take operands"),
        "tile": ([helper.make_node("Tile", ["x", "t"], ["y"], name="n")], ("x", [2, 3]),
                 {"t": np.array([2, 2, 2], np.int64)}, [4, 6], "(onnx.Tile) cannot take operands"),
        "gather_axis": ([helper.make_node("Gather", ["x", "i"], ["y"], name="n", axis=3)], ("x", [2, 3]),
                        {"i": np.array([0], np.int64)}, [2, 1], "(onnx.Gather) cannot take operands"),
        "split": ([helper.make_node("Split", ["x", "s"], ["y", "z"], name="n", axis=1)], ("x", [2, 6]),
                  {"s": np.array([2, 3], np.int64)}, [2, 2], "(onnx.Split) cannot take operands"),
        "lrn": ([helper.make_node("LRN", ["x"], ["y"], name="n", size=0)], x4, {}, [1, 3, 8, 8],
                "size is 0; it counts channels"),
        "pool_pads": ([helper.make_node("AveragePool", ["x"], ["y"], name="n", kernel_shape=[2, 2],
                                        pads=[0, 0, 2, 0])], x4, {}, [1, 3, 9, 7],
                      "are not all smaller than the kernel"),
    }[case]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(x[0], onnx.TensorProto.FLOAT, x[1])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), "node 'n'", needle


@pytest.mark.parametrize("maccel", [[], ["--maccel=cpu"], ["--maccel=host"]])
@pytest.mark.parametrize("case", ["conv_channels", "conv_bias", "conv_transpose", "prelu", "gru", "lstm_bias",
                                  "reshape", "conv_kernel", "gemm_c", "batchnorm", "depth_to_space",
                                  "gather_elements", "pad", "slice_axis", "tile", "gather_axis", "split", "lrn",
                                  "pool_pads"])
def test_operands_that_disagree_are_refused(tmp_path, rng, case, maccel):
    """onnx's inference does not compare these operands with each other, and
    the generated code sized its reads by one of them: a Conv whose W expects
    5 channels of a 3-channel X, a bias or a GRU's R for another size, a
    PRelu slope that does not broadcast, 12 elements reshaped to [5, 5],
    a Gemm's C, a GatherElements' indices larger than the data, a
    DepthToSpace of 6 channels in 2 x 2 blocks compiled (the cpu
    accelerator, the default, for all of them) and read past a buffer; a
    kernel larger than the padded input gave an empty output the cpu kernel
    divided by (SIGFPE); a Slice axis past the rank or Tile repeats of
    another length, which onnx's inference rejects, compiled with the
    declared types; a pooling whose pads reach its kernel's size has windows
    of padding only (0 on the cpu accelerator, NaN on the host). Refused now
    in one line naming the node, no artifact."""
    import onnxruntime as ort
    m, node, needle = _disagreeing(case, rng)
    onnx.checker.check_model(m)
    with pytest.raises(Exception):  # onnxruntime refuses it too, at load or at its first run
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        i = s.get_inputs()[0]
        s.run(None, {i.name: rng.standard_normal(i.shape).astype(np.float32)})
    path = save(m, tmp_path / "m.onnx")
    assert_one_line_error(run_tool("tcc", path, *maccel), node, needle)
    assert not (tmp_path / "m.tcc").exists()


@pytest.mark.parametrize("maccel", [(), ("cpu",), ("host",)])
@pytest.mark.parametrize("declared,hidden", [([100], None), ([4], None), ([8], [1000])])
def test_declared_shapes_onnx_inference_contradicts_are_not_trusted(tmp_path, rng, maccel, declared, hidden):
    """A model's value_info and output types are declarations: a Relu of 8
    floats declared [100] computed 100 elements and read past its input, one
    declared [4] answered 4, an intermediate declared [1000] gave zeros on
    the host. onnx's inference decides now, as in onnxruntime (which warns
    and takes the inferred shape): the answer is onnxruntime's."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [8])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, declared)
    vi = [helper.make_tensor_value_info("h", onnx.TensorProto.FLOAT, hidden)] if hidden else []
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])], "g",
                          [x], [y], value_info=vi)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"x": rng.standard_normal(8).astype(np.float32)}
    got = tcc.load(tcc.compile(m, maccel=maccel, output=str(tmp_path / "m.tcc"), cache=False)).run(feeds)[0]
    np.testing.assert_array_equal(got, reference(m, feeds)[0])
