"""`tcc-run --profile`: one row per step of the artifact's plan (each
partition, where it runs), with measured medians, and a total; a cpu
partition as a row per kernel call (its C rebuilt with TCC_PROFILE) and one
for the rest of the step; a host-only model is one step; a dynamic model
profiles the plan compiled for the inputs' shapes. The outputs printed are
still the model's (checked against onnxruntime on fresh random data)."""
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc

from ..conftest import run_tool

ROW = re.compile(r"^(\S+(?:: .+?)?)\s+(\S+)\s+(\d+\.\d{3})\s+(\d+\.\d)%$")


def _mixed_model(rng, batch=16):
    """MatMul+Relu (cpu), CumSum (the cpu does not take it: host), MatMul+Tanh (cpu).
    The weights are scaled so that the second MatMul's outputs stay near 1:
    with N(0, 1) weights they reached hundreds, and an output whose products
    cancel near 0 was off by 1.3e-4 after Tanh (f32 rounding of terms ~200),
    past the 1e-4 the check allows (seed 2806330359)."""
    w1 = numpy_helper.from_array((rng.standard_normal((64, 64)) / 8).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((64, 32)) / 64).astype(np.float32), "w2")
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("CumSum", ["b", "axis"], ["c"]),
             helper.make_node("MatMul", ["c", "w2"], ["d"]), helper.make_node("Tanh", ["d"], ["y"])]
    g = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 32])],
                          initializer=[w1, w2, axis])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _rows(stdout):
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("profile: median of"))
    rows = [ROW.match(ln) for ln in lines[start + 2:] if not ln.startswith("total")]
    assert all(rows), lines[start:]
    total = next(ln for ln in lines[start:] if ln.startswith("total"))
    return [(m[1], m[2], float(m[3])) for m in rows], float(total.split()[-1])


# Each row and the total are printed to 3 decimals, the total summed before
# rounding: the rows' sum may be off by half a microsecond per row (a staged
# model's 4 rows once summed to 0.083 against a printed total of 0.081).
_ROUNDING = 0.0005 + 1e-9


def _steps(rows):
    """The rows with a cpu partition's kernel rows ("cpu_0: conv ...") summed into its step's."""
    out = []
    for name, where, ms in rows:
        step = name.split(": ")[0]
        if out and out[-1][0] == step and ": " in name:
            out[-1] = (step, where, out[-1][2] + ms)
        else:
            out.append((step, where, ms))
    return out


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))


def _run_and_check(art, model, rng, *extra):
    x = rng.standard_normal((16, 64)).astype(np.float32)
    np.save(art.parent / "x.npy", x)
    r = run_tool("tcc-run", art, "--input", f"x={art.parent / 'x.npy'}", "--profile", "--repeat", 7,
                 "--output-dir", art.parent / "out", *extra)
    assert r.returncode == 0, r.stderr
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(np.load(art.parent / "out" / "y.npy"), want, rtol=1e-4, atol=1e-4)
    assert "profile: median of 7 runs per step" in r.stdout
    return _rows(r.stdout)


def test_profile_has_a_row_per_partition(tmp_path, rng):
    model = _mixed_model(rng)
    onnx.save(model, tmp_path / "m.onnx")
    r = run_tool("tcc", "--maccel=cpu", tmp_path / "m.onnx", "-o", tmp_path / "m.tcc")
    assert r.returncode == 0, r.stderr
    plan = tcc.load(str(tmp_path / "m.tcc")).manifest["plan"]
    rows, total = _run_and_check(tmp_path / "m.tcc", model, rng)
    steps = _steps(rows)
    assert [(n, w) for n, w, _ in steps] == [(s["function"], s.get("accelerator", "host")) for s in plan]
    assert {w for _, w, _ in steps} == {"cpu", "host"}
    assert all(ms > 0 for _, _, ms in steps)
    assert total == pytest.approx(sum(ms for _, _, ms in rows), abs=_ROUNDING * len(rows))


def test_profile_times_each_kernel_call_of_a_cpu_partition(tmp_path, rng):
    """A row per kernel call of the partition's generated C, in its order,
    named by op and shapes, then the rest of the step; the shipped build
    carries none of the timing (TCC_PROFILE only in the rebuilt one)."""
    from tcc.accelerators.cpu.runtime import CpuModule
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])], initializer=[w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "c.onnx")
    r = run_tool("tcc", "--maccel=cpu", tmp_path / "c.onnx", "--emit=c", "-o", tmp_path / "c.c")
    assert r.returncode == 0, r.stderr
    calls = len(re.findall(r"^\s+TCC_PROF_BEGIN\(\d+\)$", (tmp_path / "c.c").read_text(), re.M))
    r = run_tool("tcc", "--maccel=cpu", tmp_path / "c.onnx", "-o", tmp_path / "c.tcc")
    assert r.returncode == 0, r.stderr
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = run_tool("tcc-run", tmp_path / "c.tcc", "--input", f"x={tmp_path / 'x.npy'}", "--profile", "--repeat", 5,
                 "--output-dir", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), want, rtol=1e-4, atol=1e-4)
    rows, total = _rows(r.stdout)
    names = [n for n, _, _ in rows]
    assert len(names) == calls + 1 >= 3 and all(n.startswith("cpu_0: ") for n in names), names
    assert names[0] == "cpu_0: conv 1x3x16x16 -> 1x8x16x16" and names[-1] == "cpu_0: rest of the step", names
    assert "maxpool 1x8x16x16 -> 1x8x8x8" in names[1], names
    assert all(ms >= 0 for _, _, ms in rows) and rows[0][2] > 0
    sess = tcc.load(str(tmp_path / "c.tcc"))
    mods = [m for _a, _d, _s, m in sess._accel_modules.values() if isinstance(m, CpuModule)]
    assert mods and not hasattr(mods[0].lib, "tcc_prof_count_cpu_0")


def test_profile_of_a_host_only_model(tmp_path, rng):
    model = _mixed_model(rng)
    onnx.save(model, tmp_path / "m.onnx")
    r = run_tool("tcc", "--maccel=host", tmp_path / "m.onnx", "-o", tmp_path / "h.tcc")
    assert r.returncode == 0, r.stderr
    rows, _ = _run_and_check(tmp_path / "h.tcc", model, rng)
    assert [(n, w) for n, w, _ in rows] == [("main_graph", "host")] and rows[0][2] > 0


def test_profile_of_a_dynamic_model_profiles_its_specialization(tmp_path, rng):
    model = _mixed_model(rng)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, tmp_path / "d.onnx")
    r = run_tool("tcc", "--maccel=cpu", tmp_path / "d.onnx", "-o", tmp_path / "d.tcc")
    assert r.returncode == 0, r.stderr
    rows, _ = _run_and_check(tmp_path / "d.tcc", model, rng)
    steps = _steps(rows)
    assert {w for _, w, _ in steps} == {"cpu", "host"} and len(steps) == 3


def test_profile_of_a_staged_model(tmp_path, rng):
    """A data-dependent op (NonZero) cuts the run in stages: the prefix's
    partitions, the op on the host, the suffix, each a row."""
    w1 = numpy_helper.from_array(rng.standard_normal((64, 8)).astype(np.float32), "w1")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("NonZero", ["b"], ["nz"]), helper.make_node("Cast", ["nz"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Transpose", ["f"], ["t"], perm=[1, 0]), helper.make_node("Tanh", ["t"], ["y"])]
    g = helper.make_graph(nodes, "staged", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])], initializer=[w1])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "s.onnx")
    r = run_tool("tcc", "--maccel=cpu", tmp_path / "s.onnx", "-o", tmp_path / "s.tcc")
    assert r.returncode == 0, r.stderr
    rows, total = _run_and_check(tmp_path / "s.tcc", model, rng)
    assert ("NonZero", "host") in [(n, w) for n, w, _ in _steps(rows)] and rows[0][1] == "cpu", rows
    assert total == pytest.approx(sum(ms for _, _, ms in rows), abs=_ROUNDING * len(rows))
