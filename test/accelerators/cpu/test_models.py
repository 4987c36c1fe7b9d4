"""End-to-end: the sample models (small versions of the benchmark models)
compiled with --maccel=cpu match onnxruntime to 1e-4 relative, each as one
cpu partition; plus the plugin's contract details (placement reasons,
--cpu-dump-c, the C source in the payload, ISA choice, thread count)."""
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import tcc
from tcc import samples

from .helpers import check, cpu_steps, host_steps, model, rand, run_both

MODELS = {
    "mlp": lambda: samples.mlp(seed=1),
    "mlp_matmul": lambda: samples.mlp_matmul(batch=7, sizes=(50, 70, 30, 10), seed=1),
    "cnn": lambda: samples.cnn(batch=2, seed=1),
    "resnet18": lambda: samples.resnet18(size=40, width=8, classes=17, seed=1),
    "mobilenetv2": lambda: samples.mobilenetv2(size=48, classes=13, seed=1),
    "bert": lambda: samples.transformer(batch=2, seq=9, d=24, heads=3, layers=2, seed=1),
}


def _rel_check(ours, ref):
    for a, b in zip(ours, ref):
        scale = np.max(np.abs(b))
        assert np.max(np.abs(a - b)) <= 1e-4 * scale + 1e-6, (np.max(np.abs(a - b)), scale)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_onnxruntime(name, tmp_path):
    m = MODELS[name]()
    x = m.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    feeds = {x.name: rand(*shape)}
    ours, ref, sess = run_both(m, feeds, tmp_path)
    assert cpu_steps(sess) and not host_steps(sess)
    _rel_check(ours, ref)


def test_unsupported_ops_fall_back_with_reasons(tmp_path):
    # an op the cpu accelerator does not take (Atan) between two kernels it does
    x = rand(4, 8)
    nodes = [helper.make_node("Softmax", ["x"], ["a"]), helper.make_node("Atan", ["a"], ["b"]),
             helper.make_node("Softmax", ["b"], ["y"])]
    m = model(nodes, [("x", x.shape)], [("y", x.shape)])
    ours, ref, sess = run_both(m, {"x": x}, tmp_path, all_cpu=False)
    assert len(cpu_steps(sess)) == 2 and host_steps(sess)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5, atol=1e-6)


def test_fusible_regions_beside_host_steps_stay_on_the_host(tmp_path):
    """Elementwise ops between host steps go back to the host, which fuses
    them into its loops (cpu support.FUSIBLE, placement's _host_exchange);
    with no host step beside them they stay on the cpu."""
    x = rand(4, 8)
    beside = model([helper.make_node("Atan", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                    helper.make_node("Sigmoid", ["b"], ["c"]), helper.make_node("Atan", ["c"], ["y"])],
                   [("x", x.shape)], [("y", x.shape)])
    ours, ref, sess = run_both(beside, {"x": x}, tmp_path, all_cpu=False)
    assert not cpu_steps(sess)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5, atol=1e-6)
    alone = model([helper.make_node("Relu", ["x"], ["b"]), helper.make_node("Sigmoid", ["b"], ["y"])],
                  [("x", x.shape)], [("y", x.shape)])
    (tmp_path / "alone").mkdir()
    ours, ref, sess = run_both(alone, {"x": x}, tmp_path / "alone")
    assert cpu_steps(sess) and not host_steps(sess)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5, atol=1e-6)


def test_support_reasons():
    from tcc.accelerators.cpu import support
    from tcc.dialects.init_all import new_context
    from tcc.dialects.onnx.importer import import_model
    nodes = [helper.make_node("Cast", ["x"], ["d"], to=TensorProto.DOUBLE),
             helper.make_node("Conv", ["x3", "w3"], ["c3"], kernel_shape=[3])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                       helper.make_tensor_value_info("x3", TensorProto.FLOAT, [1, 2, 9]),
                                       helper.make_tensor_value_info("w3", TensorProto.FLOAT, [4, 2, 3])],
                          [helper.make_tensor_value_info("d", TensorProto.DOUBLE, [2, 3]),
                           helper.make_tensor_value_info("c3", TensorProto.FLOAT, [1, 4, 7])])
    mod = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    ops = {o.name: o for o in mod.walk()}
    assert support.check(ops["onnx.Cast"], mod).reason == "op unsupported"
    assert "2-D" in support.check(ops["onnx.Conv"], mod).reason


def test_dump_c_and_payload_source(tmp_path):
    m = samples.cnn(seed=0)
    src = tmp_path / "m.onnx"
    src.write_bytes(m.SerializeToString())
    c_path = tmp_path / "parts.c"
    tcc_bin = os.path.join(os.path.dirname(sys.executable), "tcc")
    r = subprocess.run([tcc_bin, "--maccel=cpu", f"--cpu-dump-c={c_path}", str(src), "-o", str(tmp_path / "m.tcc")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = c_path.read_text()
    assert "void tcc_part_cpu_0(void **args, void **W, char *ws)" in text
    # the batch-1 classifier takes gemm.c's small-M path, not packed tiles
    assert "tcc_cpu_conv2d" in text and "TCC_ACT_RELU" in text and "tcc_cpu_gemm(0, 1, 1," in text
    # the same source travels in the payload
    from tcc.accelerators.cpu.runtime import c_source
    sess = tcc.load(str(tmp_path / "m.tcc"))
    assert sess.manifest["accelerators"]["cpu"]["metadata"]["c_source"] == "partitions.c"
    import zipfile
    with zipfile.ZipFile(tmp_path / "m.tcc") as z:
        payload = z.read(sess.manifest["accelerators"]["cpu"]["member"])
    assert c_source(payload) == text


def test_isa_choice(monkeypatch):
    from tcc.accelerators.cpu import build
    monkeypatch.delenv("TCC_CPU_ISA", raising=False)  # a forced build wins over the flags (the suite runs under each)
    v4 = {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx2", "fma", "bmi2", "f16c"}
    assert build.best_isa(v4) == "avx512"
    assert build.best_isa(v4 - {"avx512bw"}) == "avx2"
    assert build.best_isa({"sse2"}) == "generic"


def test_kernel_library_reports_isa_and_threads():
    code = ("from tcc.accelerators.cpu import build; lib = build.load_kernels(); "
            "print(lib.tcc_cpu_isa().decode(), lib.tcc_cpu_num_threads())")
    env = dict(os.environ, TCC_NUM_THREADS="3", TCC_CPU_ISA="avx2")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["avx2", "3"]


def test_composite_with_unsupported_member_is_not_claimed(tmp_path):
    # f16 MatMul+Add matches the matmul_add pattern but the cpu takes f32 only
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float16)
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "c"], ["y"])],
                          "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT16, s)
                                for n, s in (("a", [3, 4]), ("b", [4, 5]), ("c", [5]))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    sess = tcc.load(tcc.compile(m, maccel=["cpu"], output=str(tmp_path / "m.tcc")))
    assert not cpu_steps(sess)


def test_dynamic_batch_is_placed_per_input_shape(tmp_path):
    """A dynamic batch dim cannot be placed ahead of time; the artifact
    places and compiles each batch size on the cpu accelerator when it
    first sees it, and every size matches onnxruntime."""
    import onnxruntime as ort
    from tcc.runtime.executor import PlanSession
    w, b = rand(8, 3, 3, 3), rand(8)
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["c"], ["y"])],
              [("x", ["N", 3, 10, 9])], [("y", ["N", 8, 10, 9])], inits=[("w", w), ("b", b)])
    sess = tcc.load(tcc.compile(m, maccel=["cpu"], output=str(tmp_path / "m.tcc")))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (2, 1, 2):
        x = rand(n, 3, 10, 9)
        np.testing.assert_allclose(sess.run({"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
        placed = sess.specialize({"x": x})
        assert isinstance(placed, PlanSession) and cpu_steps(placed) and not host_steps(placed)


def test_conformance_counts_cases_placed_at_run_time():
    """tcc-accel check: a node case whose shape input is a graph input is
    placed when it runs (specialized), and counts as run on the cpu."""
    from tcc.node_report import run_case
    assert run_case("test_reshape_extended_dims", ("cpu",)) == ("passed", "")
