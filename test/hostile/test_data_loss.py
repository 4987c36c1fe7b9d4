"""Nothing the user has is lost: an output path that is an input (directly,
through a symlink, `./` or a hard link), or empty, is refused before anything
is written; an output that is a symlink stays one, a device or a named pipe
stays one; artifacts respect the umask like `cc -o`; `maccel="cpu"` is one
accelerator's name."""
import os
import stat
import subprocess

import numpy as np
import pytest

import tcc
from tcc.dialects.ir.errors import TccError

from ..conftest import assert_one_line_error, run_tool, tool
from .models import reference, relu_model, save


@pytest.fixture
def model(tmp_path):
    return save(relu_model(), tmp_path / "m.onnx")


def _unchanged(path, before):
    assert path.read_bytes() == before, f"{path} was modified"


@pytest.mark.parametrize("how", ["same", "dot", "symlink", "hardlink"])
def test_output_that_is_the_input_is_refused(model, tmp_path, how):
    before = model.read_bytes()
    out = {"same": str(model), "dot": "./m.onnx", "symlink": str(tmp_path / "link.tcc"),
           "hardlink": str(tmp_path / "hard.tcc")}[how]
    if how == "symlink":
        os.symlink(model, out)
    if how == "hardlink":
        os.link(model, out)
    r = run_tool("tcc", "m.onnx", "-o", out, cwd=tmp_path)
    assert_one_line_error(r, "is the input", "m.onnx")
    _unchanged(model, before)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["m.onnx"] + ([os.path.basename(out)] if how in ("symlink", "hardlink") else []))


def test_default_output_equal_to_input_is_refused(tmp_path):
    # an ONNX model named m.tcc: the default output m.tcc is the model itself
    model = save(relu_model(), tmp_path / "m.tcc")
    before = model.read_bytes()
    assert_one_line_error(run_tool("tcc", model), "is the input")
    _unchanged(model, before)


def test_empty_output_is_refused(model, tmp_path):
    assert_one_line_error(run_tool("tcc", model, "-o", ""), "output path is empty")
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_tcc_opt_output_that_is_the_input_is_refused(model, tmp_path):
    ir = tmp_path / "m.mlir"
    assert run_tool("tcc", "--emit=onnx-ir", model, "-o", ir).returncode == 0
    before = ir.read_bytes()
    os.symlink(ir, tmp_path / "alias.mlir")
    for out in (ir, tmp_path / "alias.mlir"):
        assert_one_line_error(run_tool("tcc-opt", ir, "--pass", "dce", "-o", out), "is the input")
        _unchanged(ir, before)


def test_api_compile_refuses_its_input_as_output(model):
    before = model.read_bytes()
    with pytest.raises(TccError, match="is the input"):
        tcc.compile(str(model), output=str(model))
    with pytest.raises(TccError, match="output path is empty"):
        tcc.compile(str(model), output="")
    _unchanged(model, before)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_artifact_respects_umask(model, tmp_path, umask):
    out = tmp_path / "m.tcc"
    r = subprocess.run([tool("tcc"), str(model), "-o", str(out)], capture_output=True, text=True,
                       preexec_fn=lambda: os.umask(umask), timeout=300)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


def test_maccel_string_is_one_accelerator(model, tmp_path, rng):
    x = rng.standard_normal(8).astype(np.float32)
    (want,) = reference(relu_model(), {"x": x})
    path = tcc.compile(str(model), maccel="cpu", output=str(tmp_path / "cpu.tcc"))
    assert tcc.load(path).manifest["compile"]["options"]["maccel"] == ["cpu"]
    np.testing.assert_array_equal(tcc.load(path).run({"x": x})[0], want)
    from tcc.backend import TccBackend
    rep = TccBackend.prepare(relu_model(), maccel="cpu")
    np.testing.assert_array_equal(rep.run([x])[0], want)


def test_output_through_a_symlink_keeps_the_link(model, tmp_path, rng):
    """-o LINK writes the link's target (atomically) and leaves the link; the
    temporary-and-rename replaced the link itself with a regular file."""
    target = tmp_path / "target.tcc"
    target.write_bytes(b"old")
    link = tmp_path / "link.tcc"
    link.symlink_to(target)
    r = run_tool("tcc", model, "-o", link)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    x = rng.standard_normal(8).astype(np.float32)
    np.testing.assert_array_equal(tcc.load(str(target)).run({"x": x})[0], reference(relu_model(), {"x": x})[0])


def test_output_to_a_named_pipe_is_written_in_place(model, tmp_path, rng):
    """-o a FIFO (or a device: -o /dev/null) is opened and written like any
    cc -o; renaming a temporary over it replaced the node with a regular file
    (run as root, `tcc m.onnx -o /dev/null` replaced /dev/null)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    try:
        r = run_tool("tcc", model, "-o", fifo)
        data, _ = reader.communicate(timeout=60)
    finally:
        reader.kill()
    assert r.returncode == 0, r.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    (tmp_path / "copy.tcc").write_bytes(data)
    x = rng.standard_normal(8).astype(np.float32)
    got = tcc.load(str(tmp_path / "copy.tcc")).run({"x": x})[0]
    np.testing.assert_array_equal(got, reference(relu_model(), {"x": x})[0])


def test_outputs_the_file_system_refuses_are_one_line(model, tmp_path):
    """A folder where nothing can be created (/proc) was 'internal error:
    FileNotFoundError' naming a temporary file; now one line naming the
    output as given, exit 1."""
    r = run_tool("tcc", model, "-o", "/proc/m.tcc")
    assert r.returncode == 1, r.stderr
    assert_one_line_error(r, "/proc/m.tcc: cannot write it (")
    assert run_tool("tcc", model, "-o", tmp_path / "m.tcc").returncode == 0
    r = run_tool("tcc-run", tmp_path / "m.tcc", "--random-inputs", "--output-dir", "/proc/nope/out")
    assert r.returncode == 1, r.stderr
    assert_one_line_error(r, "/proc/nope: No such file or directory")
