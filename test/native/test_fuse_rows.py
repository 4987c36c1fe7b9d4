"""The `fuse-rows` loop pass: consecutive parallel row loops merge when every
buffer they share is accessed at row `iv` only, and a whole-tensor buffer
carried between them shrinks to one row per iteration. Numerics through the
real compiler (tcc.compile + tcc.load) against onnxruntime on fresh data;
structure on the lowered IR."""
import numpy as np
import onnx
import pytest
from native_helpers import func_text, module_from_text
from onnx import TensorProto, helper, numpy_helper

import tcc
from tcc.dialects.ir import PassManager
from tcc.dialects.init_all import new_context
from tcc.dialects.conversions.graph_to_loop import ConvertOnnxToLoopPass
from tcc.dialects.loop.interpreter import run_loop_module
from tcc.dialects.loop.transforms import FuseRowsPass
from tcc.dialects.onnx.importer import import_model

rng = np.random.default_rng()
H = helper.make_node


def _model(nodes, shape, outputs, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m)


def _ln_params(n):
    return [("s", rng.uniform(0.5, 1.5, n).astype(np.float32)), ("b", rng.standard_normal(n).astype(np.float32))]


def _compare(model, tmp_path, x):
    import onnxruntime as ort
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    got = tcc.load(tcc.compile(path, output=str(tmp_path / "m.tcc"))).run({"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def _lowered(model, fuse_rows=True):
    mod = import_model(model)
    passes = [ConvertOnnxToLoopPass()] + ([FuseRowsPass()] if fuse_rows else [])
    PassManager(new_context(), passes, verify_each=True).run(mod)
    return mod


def _top_level(mod, name):
    func = mod.lookup_function("main_graph")
    return [o for o in func.regions[0].blocks[0].ops if o.name == name]


SOFTMAX_LN = [H("Softmax", ["x"], ["p"], axis=-1), H("LayerNormalization", ["p", "s", "b"], ["y"], axis=-1)]


def test_softmax_then_layernorm_is_one_loop_with_a_row_buffer(tmp_path):
    rows, cols = 67, 129
    model = _model(SOFTMAX_LN, [rows, cols], ["y"], _ln_params(cols))
    mod = _lowered(model)
    loops = [o for o in _top_level(mod, "loop.for") if "parallel" in o.attributes]
    assert len(loops) == 1
    # the (rows, cols) intermediate became a (cols,) buffer inside the loop
    assert not [o for o in _top_level(mod, "loop.alloc")]
    inner = [o for o in loops[0].walk() if o.name == "loop.alloc"]
    assert any(o.results[0].type.shape == (cols,) for o in inner)
    x = rng.standard_normal((rows, cols)).astype(np.float32) * 3
    got = run_loop_module(mod, [x])[0]
    ref = run_loop_module(_lowered(model, fuse_rows=False), [x])[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)
    _compare(model, tmp_path, x)


def test_intermediate_that_is_also_an_output_is_fused_not_shrunk(tmp_path):
    rows, cols = 33, 70
    model = _model(SOFTMAX_LN, [rows, cols], ["y", "p"], _ln_params(cols))
    mod = _lowered(model)
    assert len([o for o in _top_level(mod, "loop.for") if "parallel" in o.attributes]) == 1
    _compare(model, tmp_path, rng.standard_normal((rows, cols)).astype(np.float32))


def test_chain_of_three_row_ops(tmp_path):
    rows, cols = 41, 96
    nodes = [H("LayerNormalization", ["x", "s", "b"], ["a"], axis=-1), H("Softmax", ["a"], ["p"], axis=-1),
             H("LayerNormalization", ["p", "s", "b"], ["y"], axis=-1)]
    model = _model(nodes, [rows, cols], ["y"], _ln_params(cols))
    assert len([o for o in _top_level(_lowered(model), "loop.for") if "parallel" in o.attributes]) == 1
    _compare(model, tmp_path, rng.standard_normal((rows, cols)).astype(np.float32))


def test_softmax_over_columns_then_rows_is_not_fused(tmp_path):
    """Softmax along axis 0 reads whole columns: merging it with a row loop
    would read rows not computed yet."""
    n = 48
    nodes = [H("Softmax", ["x"], ["p"], axis=-1), H("Transpose", ["p"], ["t"], perm=[1, 0]),
             H("Softmax", ["t"], ["y"], axis=-1)]
    model = _model(nodes, [n, n], ["y"])
    _compare(model, tmp_path, rng.standard_normal((n, n)).astype(np.float32))


def _two_loops(second_index=None):
    """Loop 1 writes t[i, :] = x[i, :]^2; loop 2 writes out[i2, :] = 2 t[r, :]
    with r = `second_index` (IR text), or i2 itself when None."""
    n = 8
    row = "%i2" if second_index is None else "%r"
    computed = "" if second_index is None else f"\n      %r = {second_index}"
    body = f'''    %c0 = "arith.constant"() {{value = 0 : index}} : () -> index
    %c4 = "arith.constant"() {{value = 4 : index}} : () -> index
    %c7 = "arith.constant"() {{value = 7 : index}} : () -> index
    %cn = "arith.constant"() {{value = {n} : index}} : () -> index
    %t = "loop.alloc"() : () -> memref<{n}x4xf32>
    "loop.for"(%c0, %cn) ({{
    ^bb1(%i: index):
      "loop.for"(%c0, %c4) ({{
      ^bb2(%j: index):
        %v = "loop.load"(%a0, %i, %j) : (memref<{n}x4xf32>, index, index) -> f32
        %s = "arith.mulf"(%v, %v) : (f32, f32) -> f32
        "loop.store"(%s, %t, %i, %j) : (f32, memref<{n}x4xf32>, index, index) -> ()
        "loop.yield"() : () -> ()
      }}) : (index, index) -> ()
      "loop.yield"() : () -> ()
    }}) {{parallel}} : (index, index) -> ()
    "loop.for"(%c0, %cn) ({{
    ^bb3(%i2: index):{computed}
      "loop.for"(%c0, %c4) ({{
      ^bb4(%j2: index):
        %w = "loop.load"(%t, {row}, %j2) : (memref<{n}x4xf32>, index, index) -> f32
        %u = "arith.addf"(%w, %w) : (f32, f32) -> f32
        "loop.store"(%u, %a1, %i2, %j2) : (f32, memref<{n}x4xf32>, index, index) -> ()
        "loop.yield"() : () -> ()
      }}) : (index, index) -> ()
      "loop.yield"() : () -> ()
    }}) {{parallel}} : (index, index) -> ()'''
    return module_from_text(func_text([f"memref<{n}x4xf32>", f"memref<{n}x4xf32>"], body))


@pytest.mark.parametrize("index", [
    '"arith.addi"(%i2, %c0) : (index, index) -> index',   # not the iv itself: refused
    '"arith.subi"(%c7, %i2) : (index, index) -> index',   # reversed rows: must stay apart
])
def test_rows_other_than_iv_are_not_fused(index):
    mod = _two_loops(index)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    want = run_loop_module(_two_loops(index), [x])[0]
    PassManager(new_context(), [FuseRowsPass()], verify_each=True).run(mod)
    assert len(_top_level(mod, "loop.for")) == 2
    np.testing.assert_array_equal(run_loop_module(mod, [x])[0], want)


def test_row_iv_loops_fuse_and_shrink():
    mod = _two_loops()
    x = rng.standard_normal((8, 4)).astype(np.float32)
    PassManager(new_context(), [FuseRowsPass()], verify_each=True).run(mod)
    assert len(_top_level(mod, "loop.for")) == 1
    assert not _top_level(mod, "loop.alloc")
    np.testing.assert_array_equal(run_loop_module(mod, [x])[0], 2 * x * x)


def test_library_call_nests_stay_whole(tmp_path):
    """MatMul's nest becomes one gemm.c call: a Softmax on its rows must not
    be merged into it (that would drop the Softmax or the kernel call)."""
    k, n = 64, 96
    w = rng.standard_normal((k, n)).astype(np.float32)
    nodes = [H("MatMul", ["x", "w"], ["m"]), H("Softmax", ["m"], ["y"], axis=-1)]
    model = _model(nodes, [50, k], ["y"], [("w", w)])
    mod = _lowered(model)
    calls = [o for o in mod.lookup_function("main_graph").walk() if "tcc.library_call" in o.attributes]
    assert len(calls) == 1 and calls[0].parent.parent_op.name == "func.func"
    _compare(model, tmp_path, rng.standard_normal((50, k)).astype(np.float32))


def _siblings(second_load_index, second_store="acc"):
    """Inside one parallel row loop: loop 1 writes t[j] = 2 x[i, j]; loop 2
    reads t[<index>] and sums into s[0] (or reads s[0] loop 1 summed)."""
    n = 6
    body = f'''    %c0 = "arith.constant"() {{value = 0 : index}} : () -> index
    %c1 = "arith.constant"() {{value = 1 : index}} : () -> index
    %c7 = "arith.constant"() {{value = 7 : index}} : () -> index
    %c8 = "arith.constant"() {{value = 8 : index}} : () -> index
    %cn = "arith.constant"() {{value = {n} : index}} : () -> index
    %z = "arith.constant"() {{value = 0.0 : f32}} : () -> f32
    "loop.for"(%c0, %cn) ({{
    ^bb1(%i: index):
      %t = "loop.alloc"() : () -> memref<8xf32>
      %u = "loop.alloc"() : () -> memref<1xf32>
      "loop.store"(%z, %u, %c0) : (f32, memref<1xf32>, index) -> ()
      "loop.for"(%c0, %c8) ({{
      ^bb2(%j: index):
        %v = "loop.load"(%a0, %i, %j) : (memref<{n}x8xf32>, index, index) -> f32
        %w = "arith.addf"(%v, %v) : (f32, f32) -> f32
        "loop.store"(%w, %t, %j) : (f32, memref<8xf32>, index) -> ()
        %q = "loop.load"(%u, %c0) : (memref<1xf32>, index) -> f32
        %q2 = "arith.addf"(%q, %w) : (f32, f32) -> f32
        "loop.store"(%q2, %u, %c0) : (f32, memref<1xf32>, index) -> ()
        "loop.yield"() : () -> ()
      }}) : (index, index) -> ()
      %s = "loop.alloc"() : () -> memref<1xf32>
      "loop.store"(%z, %s, %c0) : (f32, memref<1xf32>, index) -> ()
      "loop.for"(%c0, %c8) ({{
      ^bb3(%k: index):
        %k2 = {second_load_index}
        %r = "loop.load"(%{'u' if second_store == 'total' else 't'}, %{'c0' if second_store == 'total' else 'k2'}) : (memref<{'1' if second_store == 'total' else '8'}xf32>, index) -> f32
        %a = "loop.load"(%s, %c0) : (memref<1xf32>, index) -> f32
        %b = "arith.addf"(%a, %r) : (f32, f32) -> f32
        "loop.store"(%b, %s, %c0) : (f32, memref<1xf32>, index) -> ()
        "loop.yield"() : () -> ()
      }}) : (index, index) -> ()
      %fin = "loop.load"(%s, %c0) : (memref<1xf32>, index) -> f32
      "loop.store"(%fin, %a1, %i) : (f32, memref<{n}xf32>, index) -> ()
      "loop.yield"() : () -> ()
    }}) {{parallel}} : (index, index) -> ()'''
    return module_from_text(func_text([f"memref<{n}x8xf32>", f"memref<{n}xf32>"], body))


@pytest.mark.parametrize("index,store,fused", [
    ('"arith.addi"(%k, %c0) : (index, index) -> index', "acc", False),   # computed index: not provably k
    ('"arith.subi"(%c7, %k) : (index, index) -> index', "acc", False),   # reversed: must wait for loop 1
    ('"arith.addi"(%k, %c0) : (index, index) -> index', "total", False),  # loop 1's finished sum
])
def test_sibling_loops_that_must_stay_apart(index, store, fused):
    from tcc.dialects.loop.transforms.fuse_siblings import fuse_siblings
    x = rng.standard_normal((6, 8)).astype(np.float32)
    want = run_loop_module(_siblings(index, store), [x])[0]
    mod = _siblings(index, store)
    row = _top_level(mod, "loop.for")[0].regions[0].blocks[0]
    assert bool(fuse_siblings(row)) == fused
    np.testing.assert_allclose(run_loop_module(mod, [x])[0], want, rtol=1e-6)


def test_sibling_loops_over_the_same_elements_merge():
    """Loop 2 reads t[k] that loop 1 wrote at t[j]: one loop; the zero-init
    of loop 2's accumulator moves above loop 1, numbers unchanged."""
    from tcc.dialects.loop.transforms.fuse_siblings import fuse_siblings
    mod = _siblings('"arith.addi"(%k, %c0) : (index, index) -> index')
    for o in mod.lookup_function("main_graph").walk():  # loop 2 indexes by its own iv
        if o.name == "arith.addi":
            o.results[0].replace_all_uses_with(o.operands[0])
    x = rng.standard_normal((6, 8)).astype(np.float32)
    want = run_loop_module(mod, [x])[0]
    row = _top_level(mod, "loop.for")[0].regions[0].blocks[0]
    assert fuse_siblings(row) == 1
    assert len([o for o in row.ops if o.name == "loop.for"]) == 1
    np.testing.assert_allclose(run_loop_module(mod, [x])[0], want, rtol=1e-6)
    # float32 sums of 8 terms: off by up to a few ulps of sum |x|, not of the
    # sum (a row summing near zero failed rtol 1e-5 alone, --seed=864672036)
    bound = 2 * np.abs(x.astype(np.float64)).sum(axis=1)
    assert np.all(np.abs(want - 2 * x.astype(np.float64).sum(axis=1)) <= 1e-6 * bound)
