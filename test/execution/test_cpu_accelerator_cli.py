"""The cpu accelerator as a user drives it from the CLI."""
import numpy as np
import onnx
import onnxruntime as ort

from tcc import samples

from ..conftest import assert_one_line_error, run_tool


def test_emit_c_shows_each_partition(tmp_path):
    p = tmp_path / "cnn.onnx"
    onnx.save(samples.cnn(seed=2), p)
    r = run_tool("tcc", "--maccel=cpu", "--emit=c", p)
    assert r.returncode == 0, r.stderr
    assert "accelerator cpu" in r.stdout and "void tcc_part_cpu_0(" in r.stdout and "tcc_cpu_conv2d" in r.stdout
    assert_one_line_error(run_tool("tcc", "--emit=c", p), "--emit=c")


def test_compile_and_run_with_cpu(tmp_path, rng):
    model = samples.transformer(seed=int(rng.integers(1 << 30)))
    p = tmp_path / "t.onnx"
    onnx.save(model, p)
    art = tmp_path / "t.tcc"
    r = run_tool("tcc", "--maccel=cpu", p, "-o", art, "--placement-report")
    assert r.returncode == 0, r.stderr
    assert "-> cpu" in r.stderr
    x = rng.standard_normal((1, 16, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = run_tool("tcc-run", art, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out" / "y.npy")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
