"""`tcc model.onnx` with no --maccel targets the cpu accelerator (the fastest
code tcc has for this CPU); `--maccel=host` keeps the host path alone; the
two together are a one-line error with no output file. Outputs checked
against onnxruntime on fresh random data."""
import onnx

import tcc
from tcc import samples

from ..conftest import assert_one_line_error, run_tool
from .helpers import check_artifact as _check


def _accels(path):
    return {s.get("accelerator") for s in tcc.load(str(path)).manifest.get("plan", [])} - {None}


def test_default_is_cpu_and_host_flag_is_host_only(tmp_path, rng):
    p = tmp_path / "cnn.onnx"
    onnx.save(samples.cnn(seed=2), p)
    r = run_tool("tcc", p, "-o", tmp_path / "default.tcc")
    assert r.returncode == 0, r.stderr
    assert _accels(tmp_path / "default.tcc") == {"cpu"}
    _check(tmp_path / "default.tcc", p, rng)
    r = run_tool("tcc", "--maccel=host", p, "-o", tmp_path / "host.tcc")
    assert r.returncode == 0, r.stderr
    assert _accels(tmp_path / "host.tcc") == set()
    _check(tmp_path / "host.tcc", p, rng)
    # the IR stages show the host pipeline unless --maccel is given
    assert "cpu" not in run_tool("tcc", "--emit=onnx-ir", p).stdout


def test_host_with_another_accelerator_is_an_error(tmp_path):
    p = tmp_path / "cnn.onnx"
    onnx.save(samples.cnn(seed=2), p)
    out = tmp_path / "x.tcc"
    assert_one_line_error(run_tool("tcc", "--maccel=host", "--maccel=cpu", p, "-o", out), "--maccel=host", "cpu")
    assert not out.exists()


def test_api_host_is_the_host_path(tmp_path):
    m = samples.cnn(seed=2)
    assert _accels(tcc.compile(m, maccel=["host"], output=str(tmp_path / "h.tcc"))) == set()
