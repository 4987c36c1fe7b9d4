"""Constant GEMM operands packed at compile time (tcc_gemm_bpacked_f32),
through the real compiler, against onnxruntime on fresh data: awkward N
(panels of 32 columns with a ragged last one), tiny and large K, batched A,
Gemm's transB/alpha/beta/bias."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc

rng = np.random.default_rng()


def _run(tmp_path, nodes, x, inits, out_shape):
    import onnxruntime as ort
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    art = tcc.compile(path, output=str(tmp_path / "m.tcc"))
    got = tcc.load(art).run({"x": x})[0]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return art


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 5, 31), (13, 300, 33), (64, 64, 70), (3, 17, 64)])
def test_matmul_constant_b(tmp_path, m, k, n):
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    _run(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["y"])], x, {"w": w}, [m, n])


def test_batched_a_shares_the_packed_b(tmp_path):
    x = rng.standard_normal((2, 3, 9, 40)).astype(np.float32)
    w = rng.standard_normal((40, 45)).astype(np.float32)
    _run(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["y"])], x, {"w": w}, [2, 3, 9, 45])


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("bias", [None, "row", "full"])
def test_gemm_constant_b(tmp_path, trans_b, bias):
    m, k, n = 11, 37, 50
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    inits, ins = {"w": w}, ["x", "w"]
    if bias:
        inits["c"] = rng.standard_normal((n,) if bias == "row" else (m, n)).astype(np.float32)
        ins.append("c")
    _run(tmp_path, [helper.make_node("Gemm", ins, ["y"], transB=trans_b, alpha=0.5, beta=1.5)], x, inits, [m, n])


def test_weights_are_stored_once(tmp_path):
    """A packed weight replaces the raw one in the artifact."""
    import zipfile
    k, n = 256, 512
    x = rng.standard_normal((4, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    art = _run(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["y"])], x, {"w": w}, [4, n])
    with zipfile.ZipFile(art) as z:
        size = sum(i.file_size for i in z.infolist())
    assert size < 1.5 * w.nbytes


def test_packed_weights_need_no_alignment():
    """The packed operand is read with unaligned loads: weights may sit at any
    float address (a `--emit=lib` caller's buffer, numpy arrays in tests)."""
    import ctypes

    from tcc.dialects.conversions.graph_to_loop import ConvertOnnxToLoopPass
    from tcc.dialects.conversions.loop_to_native.jit import NativeFunction
    from tcc.dialects.ir import PassManager
    from tcc.dialects.init_all import new_context
    from tcc.dialects.onnx.importer import import_model
    m, k, n = 7, 300, 50
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    mod = import_model(model)
    PassManager(new_context(), [ConvertOnnxToLoopPass()]).run(mod)
    fn = NativeFunction(mod)
    shifted = []
    for a in fn._weights:  # every weight 4 bytes past a 64-byte boundary
        raw = np.empty(a.size + 32, np.float32)
        start = (-(raw.ctypes.data % 64) // 4 + 1) % 16
        s = raw[start:start + a.size].reshape(a.shape)
        s[...] = a
        assert s.ctypes.data % 64 == 4
        shifted.append(s)
    fn._weights = shifted
    fn._wptrs = (ctypes.c_void_p * max(len(shifted), 1))(*[a.ctypes.data for a in shifted])
    np.testing.assert_allclose(fn(x)[0], x @ w.T, rtol=1e-4, atol=1e-4)
