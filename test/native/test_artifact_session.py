"""The .tcc artifact (round trip, corruption, versions, CPU features, no
writes outside its temp dir), Session signature and input errors, tcc-run,
and end to end: ONNX -> tcc.compile -> tcc.load().run vs onnxruntime."""
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import onnx
import pytest
from native_helpers import elementwise

import tcc
from tcc import samples
from tcc.runtime.artifact import ArtifactError, FORMAT_VERSION, read_artifact
from tcc.runtime.signature import InputError

rng = np.random.default_rng()
BIN = os.path.dirname(sys.executable)


def _compile_hand(tmp_path):
    from tcc.driver.options import CompileOptions
    from tcc.driver.pipeline import CompilePipeline
    n = 256
    m = elementwise("arith.addf", ["f32", "f32"], "f32", n)
    path = str(tmp_path / "add.tcc")
    CompilePipeline(CompileOptions(emit="tcc", output=path)).emit(m)
    return path, n


def test_round_trip_and_signature(tmp_path):
    path, n = _compile_hand(tmp_path)
    s = tcc.load(path)
    assert [d["shape"] for d in s.input_signature] == [[n], [n]]
    assert s.output_signature[0]["dtype"] == "float32"
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    np.testing.assert_array_equal(s.run([a, b])[0], a + b)
    names = s.input_names
    np.testing.assert_array_equal(s.run({names[0]: a, names[1]: b}, output_names=s.output_names)[0], a + b)
    m = s.manifest
    assert m["format_version"] == FORMAT_VERSION and m["plan"][0]["device"] == "host"
    for key in ("tcc", "onnx", "llvmlite", "options", "target", "op_stats", "workspace_bytes", "peak_bytes"):
        assert key in m["compile"]


def test_input_errors(tmp_path):
    path, n = _compile_hand(tmp_path)
    s = tcc.load(path)
    a = np.zeros(n, np.float32)
    with pytest.raises(InputError, match="shape"):
        s.run([a, np.zeros(n + 1, np.float32)])
    with pytest.raises(InputError, match="dtype"):
        s.run([a, np.zeros(n, np.float64)])
    with pytest.raises(InputError, match="unknown input 'nope'"):
        s.run({"nope": a})
    with pytest.raises(InputError, match="takes 2"):
        s.run([a])
    with pytest.raises(InputError, match="unknown output"):
        s.run([a, a], output_names=["zzz"])


def _rewrite(path, out, change):
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    change(members)
    with zipfile.ZipFile(out, "w") as z:
        for k, v in members.items():
            z.writestr(k, v)


def test_corrupt_and_wrong_version(tmp_path):
    path, _ = _compile_hand(tmp_path)
    bad = tmp_path / "garbage.tcc"
    bad.write_bytes(b"not a zip at all")
    with pytest.raises(ArtifactError, match="bad zip"):
        read_artifact(str(bad))
    trunc = tmp_path / "trunc.tcc"
    trunc.write_bytes(open(path, "rb").read()[:200])
    with pytest.raises(ArtifactError):
        read_artifact(str(trunc))

    def version(ms):
        d = json.loads(ms["manifest.json"])
        d["format_version"] = 999
        ms["manifest.json"] = json.dumps(d).encode()
    _rewrite(path, tmp_path / "v.tcc", version)
    with pytest.raises(ArtifactError, match="format version 999"):
        read_artifact(str(tmp_path / "v.tcc"))

    def flip(ms):
        o = bytearray(ms["host.o"])
        o[len(o) // 2] ^= 0xFF
        ms["host.o"] = bytes(o)
    _rewrite(path, tmp_path / "f.tcc", flip)
    with pytest.raises(ArtifactError, match="host.o is corrupt"):
        read_artifact(str(tmp_path / "f.tcc"))


def test_missing_cpu_feature(tmp_path):
    path, _ = _compile_hand(tmp_path)
    from tcc.dialects.conversions.loop_to_native.target import host_features
    older = host_features() - {"avx2", "fma"}  # this machine, minus AVX2 and FMA
    with pytest.raises(ArtifactError, match="lacks: avx2, fma "):
        read_artifact(path, host_features=older)


def test_no_writes_outside(tmp_path):
    """Loading never extracts members: a hostile member name creates nothing,
    and the artifact is refused (test/hostile/test_artifact_loader.py)."""
    path, _ = _compile_hand(tmp_path)
    evil = tmp_path / "sub" / "evil.tcc"
    evil.parent.mkdir()
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(evil, "w") as out:
        for n in z.namelist():
            info = z.getinfo(n)
            out.writestr(info, z.read(n))
        out.writestr("../../escaped.txt", b"boom")
        out.writestr("/tmp/tcc_abs_escape.txt", b"boom")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ArtifactError, match="absolute or '..' name"):
        tcc.load(str(evil))
    assert sorted(os.listdir(tmp_path)) == before
    assert not os.path.exists("/tmp/tcc_abs_escape.txt")


def test_tcc_run_cli(tmp_path):
    path, n = _compile_hand(tmp_path)
    x = rng.standard_normal(n).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    s = tcc.load(path)
    a, b = s.input_names
    r = subprocess.run([sys.executable, "-m", "tcc.driver.tcc_run", path, "--input", f"{a}={tmp_path / 'x.npy'}",
                        "--input", f"{b}={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path), "--repeat", "3"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "median latency" in r.stdout
    out = np.load(tmp_path / f"{s.output_names[0]}.npy")
    np.testing.assert_array_equal(out, x + x)
    r = subprocess.run([sys.executable, "-m", "tcc.driver.tcc_run", path, "--input", f"{a}=missing.npy"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "tcc-run: error:" in r.stderr


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_end_to_end_vs_onnxruntime(tmp_path, name):
    ort = pytest.importorskip("onnxruntime")
    model = getattr(samples, name)()
    p = tmp_path / f"{name}.onnx"
    onnx.save(model, p)
    art = tcc.compile(str(p))
    s = tcc.load(art)
    feeds = {d["name"]: rng.standard_normal(d["shape"]).astype(d["dtype"]) for d in s.input_signature}
    got = s.run(feeds)
    want = ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_cli_end_to_end(tmp_path):
    src = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "mlp.onnx")
    p = tmp_path / "mlp.onnx"
    p.write_bytes(open(src, "rb").read())
    tcc_main = [sys.executable, "-m", "tcc"]
    r = subprocess.run(tcc_main + [str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "tcc.driver.tcc_run", str(tmp_path / "mlp.tcc"), "--random-inputs"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("y: float32[1, 10]")
