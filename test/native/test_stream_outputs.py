"""The `stream-outputs` loop pass and `loop.store_block`: which outputs are
streamed (structure), and that native code with streaming stores computes
what the interpreter and onnxruntime compute, on fresh data with sizes that
do not divide the block size."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc
from tcc.dialects.conversions.graph_to_loop import ConvertOnnxToLoopPass
from tcc.dialects.conversions.loop_to_native.jit import run_native
from tcc.dialects.ir import PassManager
from tcc.dialects.init_all import new_context
from tcc.dialects.loop.interpreter import run_loop_module
from tcc.dialects.loop.transforms import FuseRowsPass, StreamOutputsPass
from tcc.dialects.onnx.importer import import_model

rng = np.random.default_rng()
H = helper.make_node


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m)


def _lowered(model, min_bytes=0):
    mod = import_model(model)
    passes = [ConvertOnnxToLoopPass(), FuseRowsPass()]
    if min_bytes is not None:
        passes.append(StreamOutputsPass(**{"min-bytes": min_bytes}))
    PassManager(new_context(), passes, verify_each=True).run(mod)
    return mod


def _blocks(mod):
    return [o for o in mod.lookup_function("main_graph").walk() if o.name == "loop.store_block"]


def _ort(model, feeds):
    import onnxruntime as ort
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


CHAIN = [H("Mul", ["x", "x"], ["a"]), H("Tanh", ["a"], ["b"]), H("Add", ["b", "x"], ["y"])]


@pytest.mark.parametrize("n", [4096 * 3 + 7, 4096 * 2, 5000])
def test_flat_chain_streams_in_blocks(n):
    model = _model(CHAIN, [("x", [n])], ["y"])
    mod = _lowered(model)
    (blk,) = _blocks(mod)
    assert "nontemporal" in blk.attributes
    x = rng.standard_normal(n).astype(np.float32)
    want = _ort(model, {"x": x})[0]
    np.testing.assert_allclose(run_loop_module(_lowered(model), [x])[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run_native(mod, [x])[0], want, rtol=1e-5, atol=1e-6)


def test_rows_stream_one_row_per_iteration():
    rows, cols = 37, 300  # 1200-byte rows: not a multiple of a cache line
    s, b = rng.uniform(0.5, 1.5, cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    model = _model([H("Softmax", ["x"], ["p"], axis=-1), H("LayerNormalization", ["p", "s", "b"], ["y"], axis=-1)],
                   [("x", [rows, cols])], ["y"], [("s", s), ("b", b)])
    mod = _lowered(model)
    assert len(_blocks(mod)) == 1
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    want = _ort(model, {"x": x})[0]
    np.testing.assert_allclose(run_native(mod, [x])[0], want, rtol=2e-5, atol=2e-6)


def test_outputs_read_back_or_small_are_not_streamed():
    n = 64
    # Softmax alone re-reads its output to normalize it: it must stay cached
    soft = _model([H("Softmax", ["x"], ["y"], axis=-1)], [("x", [n, 512])], ["y"])
    assert not _blocks(_lowered(soft))
    # below min-bytes
    chain = _model(CHAIN, [("x", [50000])], ["y"])
    assert not _blocks(_lowered(chain, min_bytes=1 << 20))
    # written by two loops (Concat): left alone
    cat = _model([H("Relu", ["x"], ["a"]), H("Neg", ["x"], ["b"]), H("Concat", ["a", "b"], ["y"], axis=0)],
                 [("x", [20000])], ["y"])
    mod = _lowered(cat)
    assert not _blocks(mod)
    x = rng.standard_normal(20000).astype(np.float32)
    np.testing.assert_array_equal(run_native(mod, [x])[0], np.concatenate([np.maximum(x, 0), -x]))


def test_store_block_semantics_in_the_interpreter_and_native():
    from native_helpers import func_text, module_from_text
    body = '''    %c3 = "arith.constant"() {value = 3 : index} : () -> index
    %c5 = "arith.constant"() {value = 5 : index} : () -> index
    "loop.store_block"(%a0, %a1, %c3, %c5) {nontemporal} : (memref<8xf32>, memref<16xf32>, index, index) -> ()'''
    text = func_text(["memref<8xf32>", "memref<16xf32>"], body)
    src = rng.standard_normal(8).astype(np.float32)
    got_i = run_loop_module(module_from_text(text), [src])[0]
    got_n = run_native(module_from_text(text), [src])[0]
    np.testing.assert_array_equal(got_i[3:8], src[:5])
    np.testing.assert_array_equal(got_n[3:8], src[:5])


def test_large_models_through_the_compiler(tmp_path):
    """The default threshold (4 MiB) through tcc.compile: both forms, and the
    thread pool's fences, on 1M+ elements."""
    n = (1 << 20) + 13
    model = _model(CHAIN, [("x", [n])], ["y"])
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    sess = tcc.load(tcc.compile(path, output=str(tmp_path / "m.tcc")))
    x = rng.standard_normal(n).astype(np.float32)
    np.testing.assert_allclose(sess.run({"x": x})[0], _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_row_loops_prefetch_the_next_row_of_large_inputs(tmp_path):
    """prefetch-rows: one loop.prefetch per large row-read input; none for
    small ones; numbers unchanged (prefetching is a hint), natively too."""
    from tcc.dialects.loop.transforms import PrefetchRowsPass
    rows, cols = 1030, 1100  # 4.5 MB: above the default threshold
    s = rng.uniform(0.5, 1.5, cols).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    model = _model([H("Softmax", ["x"], ["p"], axis=-1), H("LayerNormalization", ["p", "s", "b"], ["y"], axis=-1)],
                   [("x", [rows, cols])], ["y"], [("s", s), ("b", b)])
    mod = _lowered(model)
    PassManager(new_context(), [PrefetchRowsPass()], verify_each=True).run(mod)
    (pf,) = [o for o in mod.lookup_function("main_graph").walk() if o.name == "loop.prefetch"]
    assert pf.operands[0] is mod.lookup_function("main_graph").regions[0].blocks[0].args[0]
    small = _lowered(_model([H("Softmax", ["x"], ["y"], axis=-1)], [("x", [8, 512])], ["y"]))
    PassManager(new_context(), [PrefetchRowsPass()], verify_each=True).run(small)
    assert not [o for o in small.lookup_function("main_graph").walk() if o.name == "loop.prefetch"]
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    want = _ort(model, {"x": x})[0]
    np.testing.assert_allclose(run_native(mod, [x])[0], want, rtol=2e-5, atol=2e-6)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    got = tcc.load(tcc.compile(path, output=str(tmp_path / "m.tcc"))).run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
