"""Parallel loop nests (outlined, collapsed, with per-worker scratch) and the
plan-memory pass (reuse across disjoint lifetimes, never across overlapping
ones, peak bytes)."""
import os
import subprocess
import sys

import numpy as np
from native_helpers import func_text, module_from_text

from tcc.dialects.conversions.loop_to_native import PlanMemory
from tcc.dialects.conversions.loop_to_native.jit import NativeFunction
from tcc.dialects.loop.transforms.plan_memory import plan
from tcc.dialects.loop.interpreter import run_loop_module

rng = np.random.default_rng()


def _consts(*vals):
    return "\n".join(f'    %c{v} = "arith.constant"() {{value = {v} : index}} : () -> index' for v in vals)


def test_parallel_2d_nest_with_scratch():
    """out[i, j] = sum_k x[i, k] * w[k, j] with a per-iteration scratch row: the
    parallel i/j loops are collapsed and outlined; the scratch (inside the
    parallel loop) must be private to each worker."""
    M, K, N = 37, 19, 53
    body = _consts(0, 1, M, K, N) + f'''
    %z = "arith.constant"() {{value = 0.0 : f32}} : () -> f32
    "loop.for"(%c0, %c{M}) ({{
    ^bb1(%i: index):
      "loop.for"(%c0, %c{N}) ({{
      ^bb2(%j: index):
        %acc = "loop.alloc"() : () -> memref<1xf32>
        "loop.store"(%z, %acc, %c0) : (f32, memref<1xf32>, index) -> ()
        "loop.for"(%c0, %c{K}) ({{
        ^bb3(%k: index):
          %a = "loop.load"(%a0, %i, %k) : (memref<{M}x{K}xf32>, index, index) -> f32
          %b = "loop.load"(%a1, %k, %j) : (memref<{K}x{N}xf32>, index, index) -> f32
          %s = "loop.load"(%acc, %c0) : (memref<1xf32>, index) -> f32
          %p = "arith.mulf"(%a, %b) : (f32, f32) -> f32
          %t = "arith.addf"(%s, %p) : (f32, f32) -> f32
          "loop.store"(%t, %acc, %c0) : (f32, memref<1xf32>, index) -> ()
          "loop.yield"() : () -> ()
        }}) : (index, index) -> ()
        %r = "loop.load"(%acc, %c0) : (memref<1xf32>, index) -> f32
        "loop.store"(%r, %a2, %i, %j) : (f32, memref<{M}x{N}xf32>, index, index) -> ()
        "loop.dealloc"(%acc) : (memref<1xf32>) -> ()
        "loop.yield"() : () -> ()
      }}) {{parallel}} : (index, index) -> ()
      "loop.yield"() : () -> ()
    }}) {{parallel}} : (index, index) -> ()'''
    m = module_from_text(func_text([f"memref<{M}x{K}xf32>", f"memref<{K}x{N}xf32>", f"memref<{M}x{N}xf32>"], body))
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)
    f = NativeFunction(m)
    assert f.lowered.stats["parallel_loops"] == 1 and f.lowered.stats["stack_allocs"] == 1
    for _ in range(5):  # repeated runs reuse the pool
        np.testing.assert_allclose(f(x, w)[0], x @ w, rtol=1e-5, atol=1e-5)


def test_parallel_large_1d_step():
    """A long 1-D parallel loop with step 3 (only every third element written)."""
    n = 300_001
    body = _consts(0, 3, n) + f'''
    "loop.for"(%c0, %c{n}) ({{
    ^bb1(%i: index):
      %x = "loop.load"(%a0, %i) : (memref<{n}xf32>, index) -> f32
      %y = "math.exp"(%x) : (f32) -> f32
      "loop.store"(%y, %a1, %i) : (f32, memref<{n}xf32>, index) -> ()
      "loop.yield"() : () -> ()
    }}) {{parallel, vectorize, step = 3 : i64}} : (index, index) -> ()'''
    m = module_from_text(func_text([f"memref<{n}xf32>", f"memref<{n}xf32>"], body))
    x = rng.standard_normal(n).astype(np.float32)
    out = NativeFunction(m)(x)[0]
    np.testing.assert_allclose(out[::3], np.exp(x[::3]), rtol=1e-6)


def _scale_nest(n):
    return _consts(0, n) + f'''
    %two = "arith.constant"() {{value = 2.0 : f32}} : () -> f32
    "loop.for"(%c0, %c{n}) ({{
    ^bb1(%i: index):
      %x = "loop.load"(%a0, %i) : (memref<{n}xf32>, index) -> f32
      %y = "arith.mulf"(%x, %two) : (f32, f32) -> f32
      "loop.store"(%y, %a1, %i) : (f32, memref<{n}xf32>, index) -> ()
      "loop.yield"() : () -> ()
    }}) {{parallel}} : (index, index) -> ()'''


def test_small_parallel_nest_runs_on_the_caller():
    """A parallel nest of fewer than SERIAL_OPS ops in all (bounds known at
    compile time) is emitted serially: no pool call, no worker woken. Past
    the threshold it is outlined for the pool; both compute the same."""
    from tcc.dialects.conversions.loop_to_native.codegen import SERIAL_OPS
    for n, parallel in ((1000, 0), (SERIAL_OPS, 1)):  # 3 ops per iteration
        m = module_from_text(func_text([f"memref<{n}xf32>", f"memref<{n}xf32>"], _scale_nest(n)))
        f = NativeFunction(m)
        assert f.lowered.stats.get("parallel_loops", 0) == parallel, (n, f.lowered.stats)
        x = rng.standard_normal(n).astype(np.float32)
        np.testing.assert_array_equal(f(x)[0], x * 2)


def test_thread_count_env():
    code = ("import ctypes; from tcc.runtime import native; "
            "print(ctypes.CDLL(native.load()).tcc_num_threads())")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TCC_NUM_THREADS": "3"},
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "3"


def test_plan_reuse_and_peak():
    # a and b overlap; c starts after a ends (reuses a's bytes); d overlaps everything.
    items = [("a", 128, 0, 10), ("b", 64, 5, 20), ("c", 128, 11, 30), ("d", 64, 0, 40)]
    off, peak = plan(items)
    assert off["c"] == off["a"]
    spans = {k: (off[k], off[k] + s, st, en) for k, s, st, en in items}
    for k1, (o1, e1, s1, t1) in spans.items():
        for k2, (o2, e2, s2, t2) in spans.items():
            if k1 < k2 and s1 <= t2 and s2 <= t1:
                assert e1 <= o2 or e2 <= o1, f"{k1} and {k2} overlap in time and memory"
    assert peak == 128 + 64 + 64
    assert all(o % 64 == 0 for o in off.values())


def _chain_module(n):
    """t1 = x + 1; t2 = t1 * 2; t3 = t2 - x (t1 dead after t2, t3 may reuse t1); y = t3 + t2."""
    t = f"memref<{n}xf32>"

    def loop(dst, expr_ops, srcs):
        loads = "\n".join(f'      %l{k} = "loop.load"({s}, %i) : ({t}, index) -> f32' for k, s in enumerate(srcs))
        return f'''    "loop.for"(%c0, %c{n}) ({{
    ^bb1(%i: index):
{loads}
{expr_ops}
      "loop.store"(%r, {dst}, %i) : (f32, {t}, index) -> ()
      "loop.yield"() : () -> ()
    }}) : (index, index) -> ()'''

    body = _consts(0, n) + '''
    %one = "arith.constant"() {value = 1.0 : f32} : () -> f32
    %two = "arith.constant"() {value = 2.0 : f32} : () -> f32
''' + f'''    %t1 = "loop.alloc"() : () -> {t}
''' + loop("%t1", '      %r = "arith.addf"(%l0, %one) : (f32, f32) -> f32', ["%a0"]) + f'''
    %t2 = "loop.alloc"() : () -> {t}
''' + loop("%t2", '      %r = "arith.mulf"(%l0, %two) : (f32, f32) -> f32', ["%t1"]) + f'''
    "loop.dealloc"(%t1) : ({t}) -> ()
    %t3 = "loop.alloc"() : () -> {t}
''' + loop("%t3", '      %r = "arith.subf"(%l0, %l1) : (f32, f32) -> f32', ["%t2", "%a0"]) + "\n" + \
        loop("%a1", '      %r = "arith.addf"(%l0, %l1) : (f32, f32) -> f32', ["%t3", "%t2"]) + f'''
    "loop.dealloc"(%t2) : ({t}) -> ()
    "loop.dealloc"(%t3) : ({t}) -> ()'''
    return module_from_text(func_text([t, t], body))


def test_plan_memory_pass_runs_correctly():
    n = 1000
    m = _chain_module(n)
    PlanMemory().run(m, None)
    func = m.lookup_function("main_graph")
    offs = {}
    for op in func.walk():
        if op.name == "loop.alloc":
            offs[len(offs)] = op.get_attr("tcc.offset")
    size = 4032  # 4000 bytes rounded up to 64
    assert offs[2] == offs[0] and offs[1] != offs[0]  # t3 reuses t1; t2 overlaps both
    assert func.get_attr("tcc.workspace_bytes") == 2 * size
    x = rng.standard_normal(n).astype(np.float32)
    want = run_loop_module(m, [x])[0]
    np.testing.assert_allclose(NativeFunction(m)(x)[0], want, rtol=1e-6)
