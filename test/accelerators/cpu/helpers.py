"""Shared helpers: one-node (or small) ONNX models compiled with
--maccel=cpu and checked against onnxruntime on fresh random data."""
import re
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc

RNG = np.random.default_rng()


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def cpu_steps(sess):
    return [s for s in sess.manifest["plan"] if s.get("accelerator") == "cpu"]


def host_steps(sess):
    return [s for s in sess.manifest["plan"] if s.get("kind") == "host"]


def run_both(m, feeds, tmp_path=None, all_cpu=True):
    import onnxruntime as ort
    out = None if tmp_path is None else str(tmp_path / "m.tcc")
    sess = tcc.load(tcc.compile(m, maccel=["cpu"], output=out))
    if all_cpu:
        assert cpu_steps(sess) and not host_steps(sess), sess.manifest["plan"]
    ours = sess.run(feeds)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return ours, ref, sess


def check(m, feeds, rtol=1e-4, atol=1e-5, kernel=None, **kw):
    """Compiled with --maccel=cpu against onnxruntime; `kernel`: the kernel
    library function the generated C must call (which path ran)."""
    ours, ref, sess = run_both(m, feeds, **kw)
    assert len(ours) == len(ref), (len(ours), len(ref))
    for a, b in zip(ours, ref):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    if kernel is not None:
        called = kernels_called(c_source_of(sess.path))
        assert kernel in called, f"expected a call of {kernel}, the generated C calls {sorted(called)}"
    return sess


def c_source_of(artifact_path):
    """The generated C of an artifact's cpu partitions, read from the file
    (so an artifact compiled for an ISA this CPU lacks can be inspected)."""
    import json

    from tcc.accelerators.cpu.runtime import c_source
    with zipfile.ZipFile(artifact_path) as z:
        manifest = json.loads(z.read("manifest.json"))
        return c_source(z.read(manifest["accelerators"]["cpu"]["member"]))


def kernels_called(src):
    """Names of the kernel library functions (tcc_cpu_*) a C source calls."""
    return set(re.findall(r"\b(tcc_cpu_\w+)\(", src))


def c_source_for_isa(m, isa, monkeypatch):
    """The C generated for the `isa` build (compiled, not run: TCC_CPU_ISA
    selects the build on any machine; its previous value is restored)."""
    with monkeypatch.context() as mp:
        mp.setenv("TCC_CPU_ISA", isa)
        return c_source_of(tcc.compile(m, maccel=["cpu"]))


def kernels_for_isa(m, isa, monkeypatch):
    """The kernels the C generated for the `isa` build calls."""
    return kernels_called(c_source_for_isa(m, isa, monkeypatch))


def choose_as(monkeypatch, name, isa="avx512"):
    """Makes codegen's selection function `name` answer as it does for the
    `isa` build, on whichever build runs here: the kernel it picks there is
    then tested on this CPU too (every build runs every kernel)."""
    from tcc.accelerators.cpu import codegen
    orig = getattr(codegen, name)
    monkeypatch.setattr(codegen, name, lambda *a: orig(*a[:-1], isa))


def skip_unless_runs(isa):
    """Skips, saying which CPU flags are missing, when this CPU cannot run the
    `isa` build of the kernel library (the AVX-512 build on an AVX2 host)."""
    from tcc.accelerators.cpu import build
    missing = build.ISA_NEEDS[isa] - build.cpu_flags()
    if missing:
        pytest.skip(f"the {isa} kernel build cannot run on this CPU (it lacks {', '.join(sorted(missing))}); "
                    f"its code paths are covered where it can, its kernel choices by TCC_CPU_ISA={isa} compiles")
