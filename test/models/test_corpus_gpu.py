"""Every corpus model compiles with --maccel=gpu (issue 16 item 1), with no
GPU: ahead of time, then each dynamic model's specialization at every input
shape the manifest lists (where the gpu code is generated: placement needs
static shapes). TCC_GPU_CONFORMANCE=1 places every op the gpu supports on it
(the cost hints would keep these tiny models' ops on the host, and then the
gpu compile was not tested). The generated CUDA C is checked by nvcc where it
is installed (test/accelerators/gpu); a few cheap models also run on the fake
cupy (its kernels are that CUDA C emulated on the host, ~10 s a model)
against onnxruntime. The fake cupy is installed for the compile too: a
data-dependent model's two-phase specialization loads its first phase while
compiling."""
import os

import numpy as np
import pytest

import tcc
from tcc.accelerators.gpu import emulate
from tcc.model_report import CORPUS, compare, feeds, manifest, reference

from test.accelerators.gpu import fake_cupy

MODELS = sorted(manifest())
pytestmark = pytest.mark.skipif(emulate.compiler() is None, reason="no host C++ compiler for the CUDA emulation")


@pytest.fixture(autouse=True)
def fake_gpu(tmp_path, monkeypatch):
    from tcc.accelerators.gpu import runtime
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TCC_GPU_CONFORMANCE", "1")
    monkeypatch.setattr(runtime, "CACHE", str(tmp_path / "gpu-cache"))
    return fake_cupy.install(monkeypatch)


def _placed_on_gpu(sess):
    """Whether a compiled session (or a two-phase one's first phase) runs
    functions on the gpu."""
    sess = getattr(sess, "prefix", None) or sess
    return any(s.get("accelerator") == "gpu" for s in sess.manifest.get("plan", []))


@pytest.mark.parametrize("name", MODELS)
def test_model_compiles_for_the_gpu(name, tmp_path, rng):
    entry = manifest()[name]
    sess = tcc.load(tcc.compile(os.path.join(CORPUS, name + ".onnx"), maccel=["gpu"],
                                output=str(tmp_path / "m.tcc")))
    if not hasattr(sess, "specialize"):
        assert _placed_on_gpu(sess)
        return
    for k in range(len(entry["inputs"][0]["shapes"])):
        spec = sess.specialize(feeds(entry, k, rng, name=name))
        assert _placed_on_gpu(spec), f"{name} at shape #{k}: nothing placed on the gpu"


@pytest.mark.parametrize("name", ["qdq_cnn", "rnn_tagger_torchscript"])
def test_model_runs_on_the_fake_gpu(name, tmp_path, rng, monkeypatch):
    monkeypatch.setenv("TCC_SPECIALIZE", "sync")  # the specialized gpu code, not the generic path
    entry = manifest()[name]
    path = os.path.join(CORPUS, name + ".onnx")
    sess = tcc.load(tcc.compile(path, maccel=["gpu"], output=str(tmp_path / "m.tcc")))
    ref = reference(path, entry)
    for k in range(len(entry["inputs"][0]["shapes"])):
        x = feeds(entry, k, rng, name=name)
        ok, err = compare([np.asarray(v) for v in sess.run(x)], ref.run(None, x))
        assert ok, f"{name} at {[v.shape for v in x.values()]}: max abs error {err}"
    for s in getattr(sess, "specializations", lambda: [sess])():
        assert _placed_on_gpu(s)
