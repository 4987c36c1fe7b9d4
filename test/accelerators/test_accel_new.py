"""`tcc-accel new NAME` as a plugin author starts: the package it writes is
pip-installed (editable, offline) into a fresh virtual environment with tcc,
then passes `tcc-accel check NAME` and its own tests, and `--maccel=NAME`
runs its Relu on its device, matching onnxruntime."""
import onnx
from onnx import TensorProto, helper

from ..conftest import assert_one_line_error, run_tool
from .test_sim_package import bin_, run, venv  # noqa: F401 - the module-scoped venv fixture


def test_new_package_installs_and_passes_check(venv, tmp_path):  # noqa: F811
    pkg = tmp_path / "npu-pkg"
    r = run(venv, bin_(venv, "tcc-accel"), "new", "npu", "--dir", pkg)
    assert r.returncode == 0 and "pip install -e" in r.stdout, r.stderr
    assert (pkg / "pyproject.toml").exists() and (pkg / "tcc_accel_npu" / "__init__.py").exists()
    r = run(venv, bin_(venv, "python"), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation",
            "--no-deps", "-e", pkg, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    r = run(venv, bin_(venv, "tcc-accel"), "check", "npu", "-k", "test_relu", "-j", "2", cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "device conformance on npu:0" in r.stdout and " 0 wrong, 0 crashed" in r.stdout, r.stdout
    assert "Relu" in r.stdout and "passed" in r.stdout
    # Its own tests: the conformance kit again and a run against onnxruntime.
    r = run(venv, bin_(venv, "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", pkg / "tests",
            cwd=str(tmp_path))
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "r.onnx")
    r = run(venv, bin_(venv, "tcc"), "--maccel=npu", "--placement-report", "--no-cache", tmp_path / "r.onnx")
    assert r.returncode == 0 and "-> npu" in r.stderr, r.stderr


def test_new_refuses_bad_names_and_used_folders(tmp_path):
    assert_one_line_error(run_tool("tcc-accel", "new", "Bad-Name", "--dir", tmp_path / "x"), "lowercase identifier")
    assert not (tmp_path / "x").exists()
    assert_one_line_error(run_tool("tcc-accel", "new", "cpu", "--dir", tmp_path / "y"), "already installed")
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "keep.txt").write_text("mine")
    assert_one_line_error(run_tool("tcc-accel", "new", "npu", "--dir", tmp_path / "z"), "not an empty folder")
    assert sorted(p.name for p in (tmp_path / "z").iterdir()) == ["keep.txt"]
