"""The kernel library's thread pool (kernels/threadpool.c): every item of a
parallel_for runs exactly once, in contiguous chunks, whatever the thread
count, range size and grain (ranges per thread, chunks stolen across them)."""
import ctypes
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ...conftest import assert_one_line_error, run_tool

TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_long, ctypes.c_long)


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_parallel_for_covers_each_item_once(threads, rng):
    from tcc.accelerators.cpu import build
    lib = build.load_kernels()
    lib.tcc_cpu_parallel_for.argtypes = [ctypes.c_long, ctypes.c_long, TASK, ctypes.c_void_p]
    lib.tcc_cpu_parallel_for.restype = None
    lib.tcc_cpu_set_num_threads(threads)
    try:
        for _ in range(200):
            n, grain = int(rng.integers(1, 400)), int(rng.integers(1, 9))
            seen = np.zeros(n, np.int64)
            chunks = []

            def task(ctx, b, e):
                seen[b:e] += 1
                chunks.append(e - b)
            lib.tcc_cpu_parallel_for(n, grain, TASK(task), None)
            assert (seen == 1).all(), (n, grain)
            # at least `grain` items per chunk but where a range ends
            assert sum(c < grain for c in chunks) <= threads, (n, grain, chunks)
    finally:
        lib.tcc_cpu_set_num_threads(0)


SHARED_POOL_SCRIPT = r"""
import ctypes, os, sys
import numpy as np
import onnx
from onnx import TensorProto, helper
import tcc
from tcc.accelerators.cpu import build
from tcc.runtime import native

def threads():
    return len(os.listdir("/proc/self/task"))

lib = build.load_kernels()
lib.tcc_cpu_set_num_threads(2)
rt = ctypes.CDLL(native.load())
# the host runtime reports (and runs on) the kernel library's pool
lib.tcc_cpu_set_num_threads(1)
assert rt.tcc_num_threads() == 1, rt.tcc_num_threads()
lib.tcc_cpu_set_num_threads(2)
assert rt.tcc_num_threads() == 2
n = 1 << 20
g = helper.make_graph([helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Mul", ["t", "x"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
m.ir_version = 10
cpu = tcc.load(tcc.compile(m, maccel=["cpu"]))
host = tcc.load(tcc.compile(m, maccel=["host"]))
x = np.random.default_rng().standard_normal(n).astype(np.float32)
cpu.run({"x": x})
before = threads()
for _ in range(3):
    got = host.run({"x": x})[0]
    np.testing.assert_allclose(got, np.tanh(x.astype(np.float64)) * x, rtol=1e-5, atol=1e-6)
    cpu.run({"x": x})
print("THREADS", before, threads())
"""


def test_host_runtime_shares_the_kernel_pool(tmp_path):
    """One pool per process: once the kernel library is loaded the host
    runtime's parallel loops run on its pool (its thread count, no threads of
    their own), with correct results; in a fresh process (the pools start
    once), TCC_NUM_THREADS=2."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, TCC_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", SHARED_POOL_SCRIPT], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("THREADS")][0]
    before, after = map(int, line.split()[1:])
    assert after == before, f"the host runs started threads of their own: {before} -> {after}"


IDLE_SCRIPT = r"""
import ctypes, time
from tcc.accelerators.cpu import build
TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_long, ctypes.c_long)
lib = build.load_kernels()
lib.tcc_cpu_parallel_for.argtypes = [ctypes.c_long, ctypes.c_long, TASK, ctypes.c_void_p]
task = TASK(lambda ctx, b, e: None)
for _ in range(50):
    lib.tcc_cpu_parallel_for(64, 1, task, None)
time.sleep(0.05)  # past the workers' spin (threadpool.c's SPIN_NS)
c0 = time.process_time()
time.sleep(0.3)
print("IDLE_CPU", time.process_time() - c0)
"""


def test_idle_workers_sleep():
    """An idle process costs nothing: after the workers' spin (2 ms) they
    sleep, so a process that stopped calling uses no CPU time (a worker that
    kept spinning would use the whole window)."""
    import subprocess
    import sys
    env = dict(os.environ, TCC_NUM_THREADS="2", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", IDLE_SCRIPT], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    cpu = float([ln for ln in r.stdout.splitlines() if ln.startswith("IDLE_CPU")][0].split()[1])
    assert cpu < 0.05, f"{cpu:.3f} s of CPU in 0.3 s idle: a worker never went to sleep"


def test_set_inline_runs_parallel_for_on_the_calling_thread():
    """tcc_cpu_set_inline(1): every item on the calling thread, once, as one
    call of the task; set back, the pool takes the items again; it returns
    the previous setting (generated code restores it)."""
    import threading
    from tcc.accelerators.cpu import build
    lib = build.load_kernels()
    lib.tcc_cpu_parallel_for.argtypes = [ctypes.c_long, ctypes.c_long, TASK, ctypes.c_void_p]
    lib.tcc_cpu_parallel_for.restype = None
    lib.tcc_cpu_set_num_threads(2)
    me = threading.get_ident()
    try:
        calls = []

        def task(ctx, b, e):
            calls.append((threading.get_ident(), b, e))
        assert lib.tcc_cpu_set_inline(1) == 0
        lib.tcc_cpu_parallel_for(64, 1, TASK(task), None)
        assert calls == [(me, 0, 64)], calls
        assert lib.tcc_cpu_set_inline(0) == 1
        calls.clear()
        lib.tcc_cpu_parallel_for(64, 1, TASK(task), None)
        assert sorted(b for _, b, _ in calls)[0] == 0 and len(calls) > 1, calls
    finally:
        lib.tcc_cpu_set_num_threads(0)


@pytest.mark.parametrize("c,hw,serial", [(16, 8, True), (64, 32, False)])
def test_small_calls_run_inline(c, hw, serial, tmp_path):
    """A conv with less work than codegen.SERIAL_WORK (16 -> 16 at 8x8: 16K
    multiply-adds) is wrapped in tcc_cpu_set_inline; a large one (64 -> 64
    at 32x32: 4M) goes through the pool; both agree with onnxruntime on
    fresh random data at the pool's thread count."""
    from onnx import helper

    from tcc.accelerators.cpu import codegen

    from .helpers import c_source_of, check, model, rand
    x, w, b = rand(1, c, hw, hw), rand(c, c, 1, 1), rand(c)
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
              [("x", x.shape)], [("y", x.shape)], [("w", w), ("b", b)])
    sess = check(m, {"x": x}, kernel="tcc_cpu_conv2d_pw", tmp_path=tmp_path)
    src = c_source_of(sess.path)
    # the partition is this one call: wrapped, or not, as a whole
    body = src[src.index("void tcc_part_"):]
    lines = [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("TCC_PROF_")][2:-1]
    wrapped = lines[0].startswith("{ const int inline_ = tcc_cpu_set_inline(1);") and \
        lines[-1] == "tcc_cpu_set_inline(inline_); }"
    assert wrapped == serial and body.count("tcc_cpu_set_inline(1)") == serial, body
    assert (c * c * hw * hw < codegen.SERIAL_WORK) == serial


FOLLOW_SCRIPT = r"""
import ctypes, os, sys
pool = sys.argv[1]
if pool == "kernels":
    from tcc.accelerators.cpu import build
    lib = build.load_kernels()
    TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_long, ctypes.c_long)
    lib.tcc_cpu_parallel_for.argtypes = [ctypes.c_long, ctypes.c_long, TASK, ctypes.c_void_p]
    def parallel_for(n, fn):
        lib.tcc_cpu_parallel_for(n, 1, TASK(lambda ctx, b, e: fn(b, e)), None)
else:  # the host runtime's own pool (no kernel library loaded in this process)
    from tcc.runtime import native
    rt = ctypes.CDLL(native.load())
    BODY = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
    rt.tcc_parallel_for.argtypes = [ctypes.c_int64, BODY, ctypes.c_void_p]
    def parallel_for(n, fn):
        rt.tcc_parallel_for(n, BODY(lambda b, e, ctx: fn(b, e)), None)

def pinned_workers():
    out = {}
    for t in os.listdir("/proc/self/task"):
        if int(t) == os.getpid():
            continue
        st = open(f"/proc/self/task/{t}/status").read()
        cpus = [ln.split()[1] for ln in st.splitlines() if ln.startswith("Cpus_allowed_list")][0]
        if cpus.isdigit():
            out[int(t)] = int(cpus)
    return out

def run(n=64):
    seen = [0] * n
    def fn(b, e):
        for i in range(b, e):
            seen[i] += 1
    parallel_for(n, fn)
    assert seen == [1] * n, seen

allowed = sorted(os.sched_getaffinity(0))
run()
workers = pinned_workers()
assert len(workers) == len(allowed) - 1, (workers, allowed)
caller_cpu = (set(allowed) - set(workers.values())).pop()
tid, taken = next(iter(workers.items()))
os.sched_setaffinity(0, {taken})  # the caller (this thread only) onto that worker's CPU
run()
os.sched_setaffinity(0, set(allowed))
assert pinned_workers()[tid] == caller_cpu, (pinned_workers(), caller_cpu, taken)
run()
print("OK")
"""


@pytest.mark.parametrize("pool", ["kernels", "host"])
def test_pinned_worker_leaves_the_callers_cpu(pool):
    """The workers are pinned, the caller is not (pin.h): where the caller
    has landed on a worker's CPU, the next parallel call moves that worker
    to the CPU the caller left, and every item still runs once. In a fresh
    process with one thread per CPU of its affinity set (what pins them)."""
    import os
    import subprocess
    import sys
    ncpu = len(os.sched_getaffinity(0))
    if ncpu < 2:
        pytest.skip("needs two CPUs for a pinned worker")
    env = dict(os.environ, TCC_NUM_THREADS=str(ncpu), TCC_PIN_THREADS="1")
    r = subprocess.run([sys.executable, "-c", FOLLOW_SCRIPT, pool], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]


OTHER_BUILD_SCRIPT = r"""
import ctypes, os
import numpy as np
from tcc.accelerators.cpu import build
from tcc.accelerators.cpu.packing import pack_b

def threads():
    return len(os.listdir("/proc/self/task"))

first = build.load_kernels()  # as a model loads it: RTLD_GLOBAL, its pool started
first.tcc_cpu_num_threads()
other = next(i for i in build.ISA_ORDER if i != build.best_isa() and build.ISA_NEEDS[i] <= build.cpu_flags())
lib = ctypes.CDLL(build.library_path(other), mode=ctypes.RTLD_LOCAL)
vp, lg = ctypes.c_void_p, ctypes.c_long
lib.tcc_cpu_gemm_packed.argtypes = [lg, lg, lg, ctypes.c_float, vp, lg, lg, vp, vp, lg, vp]
rng = np.random.default_rng()
a = rng.standard_normal((64, 96)).astype(np.float32)
b = rng.standard_normal((96, 256)).astype(np.float32)
bp = np.ascontiguousarray(pack_b(b))
c = np.zeros((64, 256), np.float32)
before = threads()
lib.tcc_cpu_gemm_packed(64, 256, 96, 1.0, a.ctypes.data, 96, 1, bp.ctypes.data, c.ctypes.data, 256, None)
np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
print("BUILD", other, "THREADS", before, threads())
"""


def test_a_second_build_runs_on_its_own_code():
    """A kernel library loaded next to the one a model uses (the tests load
    each ISA's build so) calls its own functions: its packed GEMM runs on its
    own pool (one more thread at TCC_NUM_THREADS=2), not the first build's.
    Without -Bsymbolic those calls resolved to the first library's exported
    functions: an `avx2` kernel ran on the `avx512` library's pool and code."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, TCC_NUM_THREADS="2")
    env.pop("TCC_CPU_ISA", None)
    r = subprocess.run([sys.executable, "-c", OTHER_BUILD_SCRIPT], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("BUILD")][0]
    before, after = map(int, line.split()[3:])
    assert after == before + 1, f"{line}: the {line.split()[1]} build's GEMM did not start its own pool's worker"


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5"])
@pytest.mark.parametrize("maccel", ["--maccel=cpu", "--maccel=host"])
def test_num_threads_that_is_not_a_count_is_refused(tmp_path, rng, value, maccel):
    """TCC_NUM_THREADS=abc (or 0, -1, 1.5) was ignored (the kernel pool
    took one thread per core) or meant 1 (the host runtime's pool): now one
    line naming the variable, before any pool starts; a count runs."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "m.onnx")
    assert run_tool("tcc", tmp_path / "m.onnx", maccel, "-o", tmp_path / "m.tcc").returncode == 0
    x = rng.standard_normal((64, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run = ("tcc-run", tmp_path / "m.tcc", "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "o")
    bad = run_tool(*run, env=dict(os.environ, TCC_NUM_THREADS=value))
    assert_one_line_error(bad, f"TCC_NUM_THREADS='{value}': not a positive number of threads")
    ok = run_tool(*run, env=dict(os.environ, TCC_NUM_THREADS="2"))
    assert ok.returncode == 0, ok.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy"), np.maximum(x, 0))


def test_unknown_gemm_b_route_is_refused(tmp_path, rng):
    """TCC_CPU_GEMM_B other than pack or openblas: one line naming the
    variable (the C library would take the default without a word); pack
    and openblas both run and give the product."""
    w = rng.standard_normal((64, 48)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [40, 64]),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 48])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [40, 48])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "m.onnx")
    assert run_tool("tcc", tmp_path / "m.onnx", "--maccel=cpu", "-o", tmp_path / "m.tcc").returncode == 0
    x = rng.standard_normal((40, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w)
    run = ("tcc-run", tmp_path / "m.tcc", "--input", f"x={tmp_path / 'x.npy'}", "--input", f"w={tmp_path / 'w.npy'}",
           "--output-dir", tmp_path / "o")
    bad = run_tool(*run, env=dict(os.environ, TCC_CPU_GEMM_B="blis"))
    assert_one_line_error(bad, "TCC_CPU_GEMM_B='blis': unknown")
    for route in ("pack", "openblas"):
        ok = run_tool(*run, env=dict(os.environ, TCC_CPU_GEMM_B=route))
        assert ok.returncode == 0, ok.stderr
        np.testing.assert_allclose(np.load(tmp_path / "o" / "y.npy"), x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
