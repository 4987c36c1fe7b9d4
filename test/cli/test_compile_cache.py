"""The compile cache (runtime/cache.py): `tcc` and `tcc.compile` reuse an
artifact compiled from the same model bytes, options, code and target; a
change to any of them compiles again; the folder stays under its size bound;
two processes compiling one model at once both get a complete artifact."""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import tcc
from tcc import samples
from tcc.runtime import cache

from ..conftest import run_tool


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TCC_CACHE_DIR", str(d))
    monkeypatch.delenv("TCC_CACHE_SIZE", raising=False)
    return d


def entries(d):
    a = d / "artifacts"
    return sorted(p.name for p in a.iterdir() if p.suffix == ".tcc") if a.exists() else []


def check_against_ort(artifact, model, rng):
    sess = tcc.load(str(artifact))
    ref = ort.InferenceSession(model.SerializeToString())
    feeds = {i.name: rng.standard_normal([d or 1 for d in i.shape]).astype(np.float32) for i in ref.get_inputs()}
    for got, want in zip(sess.run(feeds), ref.run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_cli_second_compile_is_a_hit(tmp_path, cache_dir, rng):
    m = samples.mlp(seed=1)
    onnx.save(m, tmp_path / "m.onnx")
    r = run_tool("tcc", "-v", tmp_path / "m.onnx")
    assert r.returncode == 0, r.stderr
    assert "cache miss" in r.stderr and len(entries(cache_dir)) == 1
    first = (tmp_path / "m.tcc").read_bytes()
    (tmp_path / "m.tcc").unlink()
    r = run_tool("tcc", "-v", tmp_path / "m.onnx")
    assert r.returncode == 0, r.stderr
    assert "cache hit" in r.stderr, r.stderr
    assert (tmp_path / "m.tcc").read_bytes() == first
    check_against_ort(tmp_path / "m.tcc", m, rng)
    r = run_tool("tcc", tmp_path / "m.onnx")  # without -v a hit is silent
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_unusable_cache_folder_compiles_without_it(tmp_path, monkeypatch, rng):
    """TCC_CACHE_DIR naming a file (or a read-only or full folder) was an
    'internal error: NotADirectoryError'; the compile now goes on without the
    cache and says so in one line, and a model compiled at run time per
    input shape does the same."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TCC_CACHE_DIR", str(blocker))
    m = samples.mlp(seed=int(rng.integers(1 << 30)))
    onnx.save(m, tmp_path / "m.onnx")
    for _ in range(2):
        r = run_tool("tcc", tmp_path / "m.onnx")
        assert r.returncode == 0, r.stderr
        assert r.stderr.strip().splitlines() == [
            f"tcc: warning: the compile cache {blocker} cannot be used (Not a directory); "
            f"compiling without it (TCC_CACHE_DIR)"], r.stderr
        check_against_ort(tmp_path / "m.tcc", m, rng)
    assert blocker.read_text() == "not a folder"
    dyn = onnx.load(tmp_path / "m.onnx")
    dyn.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    dyn.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    sess = tcc.load(tcc.compile(dyn, output=str(tmp_path / "d.tcc")))
    ref = ort.InferenceSession(dyn.SerializeToString())
    for batch in (3, 5):
        x = rng.standard_normal((batch, 784)).astype(np.float32)
        np.testing.assert_allclose(sess.run({"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_cli_options_and_model_bytes_change_the_key(tmp_path, cache_dir):
    onnx.save(samples.mlp(seed=1), tmp_path / "m.onnx")
    assert run_tool("tcc", tmp_path / "m.onnx").returncode == 0
    r = run_tool("tcc", "-v", "-O1", tmp_path / "m.onnx")
    assert "cache miss" in r.stderr, r.stderr
    onnx.save(samples.mlp(seed=2), tmp_path / "m.onnx")  # same graph, other weights
    r = run_tool("tcc", "-v", tmp_path / "m.onnx")
    assert "cache miss" in r.stderr, r.stderr
    assert len(entries(cache_dir)) == 3


def test_no_cache_leaves_the_cache_alone(tmp_path, cache_dir, rng):
    m = samples.mlp(seed=3)
    onnx.save(m, tmp_path / "m.onnx")
    r = run_tool("tcc", "-v", "--no-cache", tmp_path / "m.onnx")
    assert r.returncode == 0, r.stderr
    assert "cache hit" not in r.stderr and "cache miss" not in r.stderr and entries(cache_dir) == []
    check_against_ort(tmp_path / "m.tcc", m, rng)


def test_default_folder_is_home_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TCC_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_root() == str(tmp_path / "home" / ".cache" / "tcc")


def test_api_reuses_and_code_change_misses(tmp_path, cache_dir, monkeypatch, capsys, rng):
    m = samples.mlp(seed=4)
    out = tcc.compile(m, output=str(tmp_path / "a.tcc"), verbose=True)
    assert "cache miss" in capsys.readouterr().err
    tcc.compile(m, output=str(tmp_path / "b.tcc"), verbose=True)
    assert "cache hit" in capsys.readouterr().err
    check_against_ort(tmp_path / "b.tcc", m, rng)
    # A changed code generator (same __version__) must not reuse the old code.
    monkeypatch.setattr(cache, "tcc_code_digest", lambda: "another compiler")
    tcc.compile(m, output=str(tmp_path / "c.tcc"), verbose=True)
    assert "cache miss" in capsys.readouterr().err
    assert out == str(tmp_path / "a.tcc") and len(entries(cache_dir)) == 2


def test_tree_digest_follows_file_bytes(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("X = 1\n")
    (pkg / "k.c").write_text("int f(void) { return 1; }\n")
    d0 = cache.tree_digest([pkg])
    (pkg / "k.c").write_text("int f(void) { return 2; }\n")
    d1 = cache.tree_digest([pkg])
    (pkg / "notes.txt").write_text("not code")
    assert d0 != d1 and cache.tree_digest([pkg]) == d1


def test_specialization_key_covers_the_code(tmp_path, cache_dir, monkeypatch, rng):
    """issue 18: specializations were keyed by tcc.__version__ only, so a new
    code generator loaded the old native code."""
    from test.execution.test_specialize import model
    m = model()
    path = tcc.compile(m, output=str(tmp_path / "m.tcc"), cache=False)
    feeds = {"x": rng.standard_normal((2, 6)).astype(np.float32), "s": np.array([4, 2], np.int64),
             "axes": np.array([0], np.int64)}
    ref = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
    from tcc.runtime.specialize import wait_all  # a new shape's compile runs in the background
    np.testing.assert_allclose(tcc.load(path).run(feeds)[0], ref[0], rtol=1e-5, atol=1e-6)
    wait_all()
    assert len(entries(cache_dir)) == 1
    tcc.load(path).run(feeds)
    wait_all()
    assert len(entries(cache_dir)) == 1  # same code: reused
    monkeypatch.setattr(cache, "tcc_code_digest", lambda: "another compiler")
    np.testing.assert_allclose(tcc.load(path).run(feeds)[0], ref[0], rtol=1e-5, atol=1e-6)
    wait_all()
    assert len(entries(cache_dir)) == 2


def test_lru_eviction_keeps_the_bound(tmp_path, cache_dir, monkeypatch):
    paths = []
    for seed in range(3):
        tcc.compile(samples.mlp(seed=seed, sizes=(64, 32, 10)), output=str(tmp_path / f"{seed}.tcc"))
        paths.append(sorted((cache_dir / "artifacts").glob("*.tcc"), key=os.path.getmtime)[-1])
    size = os.path.getsize(paths[0])
    assert len(entries(cache_dir)) == 3
    os.utime(paths[0])  # a hit refreshes the first: the second is now the oldest
    monkeypatch.setenv("TCC_CACHE_SIZE", str(int(size * 2.5)))
    cache.evict()
    assert entries(cache_dir) == sorted([paths[0].name, paths[2].name])


def test_bad_size_is_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_SIZE", "lots")
    onnx.save(samples.mlp(seed=1, sizes=(8, 4)), tmp_path / "m.onnx")
    r = run_tool("tcc", tmp_path / "m.onnx")
    assert r.returncode == 1 and "TCC_CACHE_SIZE" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m.tcc").exists()


def test_two_processes_compile_one_model(tmp_path, cache_dir, rng):
    m = samples.cnn(seed=5)
    onnx.save(m, tmp_path / "m.onnx")
    exe = os.path.join(os.path.dirname(sys.executable), "tcc")
    procs = [subprocess.Popen([exe, "-v", str(tmp_path / "m.onnx"), "-o", str(tmp_path / f"{i}.tcc")],
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert sorted("cache hit" in e for e in errs) == [False, True], errs  # the second waited and reused
    assert len(entries(cache_dir)) == 1
    assert not [p for p in (cache_dir / "artifacts").iterdir() if p.name.startswith(".tmp-")]
    for i in range(2):
        check_against_ort(tmp_path / f"{i}.tcc", m, rng)
