"""A third-party accelerator, as its author ships it: the sim package is
built and pip-installed (offline, reusing what is installed) into a fresh
virtual environment together with tcc; then `--maccel=sim` compiles, runs
and matches onnxruntime, with no change to tcc."""
import json
import os
import subprocess
import sys
import sysconfig
import textwrap

import onnx
import pytest

from tcc import samples

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM = os.path.join(REPO, "examples", "tcc-accel-sim")


def _copy(src, dst):
    """pip builds in the source tree: build from a copy, so the checkout
    never gains build/ or *.egg-info (which would then look installed)."""
    import shutil
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                            "*.tcc", ".pytest_cache"))
    return str(dst)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("venv")
    repo = _copy(REPO, root / "src")
    env_dir = root / "env"
    # No pip or setuptools of its own: the ones of this environment (new
    # enough to build wheels) are used through the .pth below.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, capture_output=True)
    py = env_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # Dependencies (numpy, onnx, llvmlite, setuptools...) come from this
    # environment: the install itself is offline.
    with open(os.path.join(site, "_parent_env.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    pip = [str(py), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation", "--no-deps"]
    r = subprocess.run(pip + [repo], capture_output=True, text=True, cwd=str(root))
    assert r.returncode == 0, r.stderr[-2000:]
    return env_dir


def bin_(venv, name):
    return str(venv / "bin" / name)


def run(venv, *args, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kw)


def test_sim_is_unknown_until_installed_then_works(venv, tmp_path, rng):
    model = tmp_path / "cnn.onnx"
    onnx.save(samples.cnn(seed=11), model)
    # the venv is shared by this module's tests, which may have installed sim before (any order)
    run(venv, bin_(venv, "python"), "-m", "pip", "uninstall", "-q", "-y", "tcc-accel-sim", cwd=str(tmp_path))
    before = run(venv, bin_(venv, "tcc"), "--maccel=sim", model)
    assert before.returncode != 0 and "unknown accelerator 'sim'" in before.stderr
    r = run(venv, bin_(venv, "python"), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation",
            "--no-deps", _copy(SIM, tmp_path / "sim-src"), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    listing = run(venv, bin_(venv, "tcc"), "--list-accelerators").stdout
    assert "sim" in listing and "tcc-accel-sim 0.1.0" in listing
    art = tmp_path / "cnn.tcc"
    r = run(venv, bin_(venv, "tcc"), "--maccel=sim", "--placement-report", model, "-o", art)
    assert r.returncode == 0, r.stderr
    assert "-> sim" in r.stderr and "-> host" in r.stderr
    check = textwrap.dedent(f"""
        import numpy as np, onnx, onnxruntime as ort, tcc
        sess = tcc.load({str(art)!r})
        assert type(sess).__name__ == "PlanSession", sess
        steps = [s.get("accelerator", "host") for s in sess.manifest["plan"]]
        assert "sim" in steps and "host" in steps, steps
        m = onnx.load({str(model)!r})
        gen = np.random.default_rng({int(rng.integers(1 << 62))})  # this test's seed
        for _ in range(3):
            x = gen.standard_normal((1, 3, 16, 16)).astype(np.float32)
            want = ort.InferenceSession(m.SerializeToString()).run(None, {{"x": x}})[0]
            got = sess.run({{"x": x}})[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        print("ok")
    """)
    r = run(venv, bin_(venv, "python"), "-c", check, cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
    # tcc-opt sees sim's pass only with --maccel=sim
    ir = run(venv, bin_(venv, "tcc"), "--emit=onnx-ir", model).stdout
    r = run(venv, bin_(venv, "tcc-opt"), "--maccel=sim", "--pass", "sim-fuse-elementwise", input=ir)
    assert r.returncode == 0, r.stderr
    r = run(venv, bin_(venv, "tcc-opt"), "--pass", "sim-fuse-elementwise", input=ir)
    assert r.returncode != 0 and "unknown pass" in r.stderr
    # The conformance kit: sim's device, then node tests through sim.
    r = run(venv, bin_(venv, "tcc-accel"), "check", "sim", "-k", "test_relu", "-j", "2", cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "passed" in r.stdout and "Relu" in r.stdout


def _install_sim(venv, tmp_path):
    if "sim" not in run(venv, bin_(venv, "tcc"), "--list-accelerators").stdout:
        r = run(venv, bin_(venv, "python"), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation",
                "--no-deps", _copy(SIM, tmp_path / "sim-src"), cwd=str(tmp_path))
        assert r.returncode == 0, r.stderr[-2000:]


def _chain(path, shape):
    """x -> Relu -> Tanh: two elementwise ops sim takes, one chain."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Tanh", ["a"], ["y"])]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


CHECK_RUN = """
import io, json, sys, zipfile
import numpy as np, onnx, onnxruntime as ort, tcc
art, model, shape = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sess = tcc.load(art)
x = np.random.default_rng().standard_normal(shape).astype(np.float32)
want = ort.InferenceSession(onnx.load(model).SerializeToString()).run(None, {"x": x})[0]
np.testing.assert_allclose(sess.run({"x": x})[0], want, rtol=1e-5, atol=1e-6)
ran = (sess.specializations() or [sess])[0] if hasattr(sess, "specializations") else sess
steps = [s.get("accelerator", "host") for s in ran.manifest.get("plan", [])]
fused = None
if "sim" in steps:
    with zipfile.ZipFile(ran.path) as z, zipfile.ZipFile(io.BytesIO(z.read("accel/sim.bin"))) as p:
        fused = p.read("code.mlir").decode().count('"sim.fused_elementwise"')
print(json.dumps({"steps": steps, "fused": fused, "options": sess.manifest["compile"]["options"]}))
"""


def _compile_and_run(venv, tmp_path, model, shape, *flags):
    art = tmp_path / (model.stem + "".join(f.strip("-").replace("=", "") for f in flags) + ".tcc")
    r = run(venv, bin_(venv, "tcc"), "--maccel=sim", *flags, model, "-o", art)
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, TCC_CACHE_DIR=str(tmp_path / "cache"))
    r = run(venv, bin_(venv, "python"), "-c", CHECK_RUN, art, model, json.dumps(shape), cwd=str(tmp_path), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_sim_pass_added_after_graph_to_loop_runs_under_tcc(venv, tmp_path):
    """sim's tcc_add_passes puts sim-fuse-elementwise at after-graph-to-loop:
    under `tcc` it merges the chain's two sim.fused_elementwise into one."""
    _install_sim(venv, tmp_path)
    got = _compile_and_run(venv, tmp_path, _chain(tmp_path / "chain.onnx", [4, 8]), [4, 8])
    assert got["steps"].count("sim") == 1, got
    assert got["fused"] == 1, got


def test_dynamic_model_is_placed_at_run_time_with_the_recorded_accelerator_options(venv, tmp_path):
    """A dynamic model is placed per input shape at run time: with the
    options it was compiled with, not sim's defaults (rank-3 tensors go to
    sim by default, stay on the host with --sim-max-rank=2)."""
    _install_sim(venv, tmp_path)
    model = _chain(tmp_path / "dyn.onnx", ["n", 4, 8])
    default = _compile_and_run(venv, tmp_path, model, [2, 4, 8])
    assert "sim" in default["steps"] and default["options"]["accel_options"] == {"sim": {"max-rank": 4}}, default
    ranked = _compile_and_run(venv, tmp_path, model, [2, 4, 8], "--sim-max-rank=2")
    assert ranked["options"]["accel_options"] == {"sim": {"max-rank": 2}}, ranked
    assert "sim" not in ranked["steps"], ranked
