"""`--target` reaches the accelerators' code generators: the cpu's kernel
build (`cpu -isa=...`), the gpu's ahead-of-time arch (`gpu -arch=...`); the
artifact records it, the compile cache keys it, and a bad one is a one-line
error with no output file. Outputs checked against onnxruntime on fresh
random data."""
import json
import zipfile

import onnx
import pytest

import tcc
from tcc import samples
from tcc.accelerators.cpu.build import best_isa

from ..conftest import assert_one_line_error, run_tool
from .helpers import check_artifact as _check


def _manifest(path):
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("manifest.json"))


@pytest.fixture
def cnn(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))
    p = tmp_path / "cnn.onnx"
    onnx.save(samples.cnn(seed=3), p)
    return p


def test_cpu_isa_from_the_target(cnn, tmp_path, rng):
    # through the cache both times: the target is part of the key
    r = run_tool("tcc", "--maccel=cpu", cnn, "-o", tmp_path / "native.tcc")
    assert r.returncode == 0, r.stderr
    assert _manifest(tmp_path / "native.tcc")["accelerators"]["cpu"]["metadata"]["isa"] == best_isa()
    r = run_tool("tcc", "--maccel=cpu", "--target", "cpu -isa=generic", cnn, "-o", tmp_path / "generic.tcc")
    assert r.returncode == 0, r.stderr
    m = _manifest(tmp_path / "generic.tcc")
    assert m["accelerators"]["cpu"]["metadata"]["isa"] == "generic"
    assert m["compile"]["options"]["targets"] == {"cpu": "cpu -isa=generic"}
    _check(tmp_path / "generic.tcc", cnn, rng)
    # the Python API takes the same text
    out = tcc.compile(str(cnn), maccel=["cpu"], targets=['{"kind": "cpu", "isa": "generic"}'],
                      output=str(tmp_path / "api.tcc"))
    assert _manifest(out)["accelerators"]["cpu"]["metadata"]["isa"] == "generic"


def test_gpu_arch_from_the_target(cnn, tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_GPU_CONFORMANCE", "1")  # every op the gpu takes goes there, however small
    r = run_tool("tcc", "--maccel=gpu", "--target", "gpu -arch=sm_80", cnn, "-o", tmp_path / "g.tcc")
    assert r.returncode == 0, r.stderr
    assert _manifest(tmp_path / "g.tcc")["accelerators"]["gpu"]["metadata"]["cubin_arch"] == "sm_80"
    r = run_tool("tcc", "--maccel=gpu", cnn, "-o", tmp_path / "none.tcc")
    assert r.returncode == 0, r.stderr
    assert _manifest(tmp_path / "none.tcc")["accelerators"]["gpu"]["metadata"]["cubin_arch"] is None


@pytest.mark.parametrize("args,needle", [
    (["--maccel=cpu", "--target", "cpu -isa=sse9"], "unknown isa 'sse9'"),
    (["--maccel=cpu", "--target", "cpu -colour=red"], "has no attribute 'colour'"),
    (["--maccel=cpu", "--target", "gpu -arch=sm_90"], "accelerator 'gpu' is not selected"),
    (["--maccel=cpu", "--target", "cpu -isa=avx2", "--target", "cpu -isa=generic"], "given twice"),
    (["--maccel=cpu", "--target", "npu9 -x=1"], "unknown target kind 'npu9'"),
])
def test_bad_targets(cnn, tmp_path, args, needle):
    out = tmp_path / "bad.tcc"
    assert_one_line_error(run_tool("tcc", *args, cnn, "-o", out), needle)
    assert not out.exists()
