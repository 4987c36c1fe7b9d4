"""The gpu runtime on a fake cupy (fake_cupy.py: device memory is host memory,
kernels run through the CUDA emulation, GEMMs in numpy), which refuses what
cupy 14 / CUDA / cuBLAS refuse: what would fail on first contact with a GPU,
checked without one. Every result is compared with onnxruntime."""
import importlib
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tcc.accelerators.gpu import emulate

from . import fake_cupy
from .helpers import compile_partition, device_buffers, download, onnxruntime_outputs, random_inputs
from .test_gpu_codegen import SAMPLES

pytestmark = pytest.mark.skipif(emulate.compiler() is None, reason="no host C++ compiler for the CUDA emulation")


@pytest.fixture
def fake(monkeypatch, tmp_path):
    from tcc.accelerators.gpu import runtime
    monkeypatch.setattr(runtime, "CACHE", str(tmp_path / "gpu-cache"))
    return fake_cupy.install(monkeypatch)


def _device():
    from tcc.accelerators.gpu.device import GpuDeviceManagerFactory
    from tcc.runtime.device.registry import DeviceManagerRegistry as DeviceRegistry
    reg = DeviceRegistry()
    reg.register(GpuDeviceManagerFactory())
    return reg.get_device("gpu:0")


def _load(model, dev):
    from tcc.accelerators.gpu import plugin
    rm, ins, outs = compile_partition(model)
    return plugin.tcc_load_runtime_module(rm, dev), ins, outs


def _upload(dev, stream, model, ins, outs, seed=0):
    feeds = random_inputs(model, seed)
    return feeds, device_buffers(dev, stream, feeds, ins, outs)


@pytest.mark.parametrize("name", ["mlp", "mlp_matmul", "cnn", "transformer"])
def test_gemm_plans_capture_and_replay_as_cuda_graphs(fake, name):
    """cupy's cuBLAS wrappers refuse a capturing stream: the GEMMs go through
    cuBLAS's C API, the stream bound before capture; the replayed graph holds
    the GEMMs (they rerun) and recomputes the outputs from new inputs."""
    model = SAMPLES[name]()
    dev = _device()
    mod, ins, outs = _load(model, dev)
    fn = mod.get_function("gpu_0")
    stream = dev.create_stream()
    feeds, bufs = _upload(dev, stream, model, ins, outs, seed=1)
    for _ in range(3):  # eager, capture (+ replay), replay
        fn(bufs, stream)
    assert fn.capture_error is None
    assert any(not isinstance(v, str) for v in fn._graphs.values())
    got = download(dev, stream, bufs[len(ins):], outs)
    for g, r in zip(got, onnxruntime_outputs(model, feeds)):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    # new inputs at the same addresses, outputs poisoned: one replay recomputes everything
    feeds2 = random_inputs(model, seed=2)
    for k, b in zip(ins, bufs):
        dev.copy_host_to_device(np.ascontiguousarray(feeds2[k]), b, stream=stream)
    for (shape, dt), b in zip(outs, bufs[len(ins):]):
        dev.copy_host_to_device(np.full(shape, np.nan, dt), b, stream=stream)
    stream.sync()
    gemms = fake.gemms
    fn(bufs, stream)
    got = download(dev, stream, bufs[len(ins):], outs)
    assert fake.gemms > gemms
    for g, r in zip(got, onnxruntime_outputs(model, feeds2)):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    mod.close()


def test_cupy_wrappers_refuse_capture_as_cupy_does(fake):
    """The fake enforces cupy's rule (so the test above would fail through them)."""
    import cupy
    from cupy_backends.cuda.libs import cublas
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        with pytest.raises(NotImplementedError, match="stream capture"):
            cublas.sgemm(1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1)
        s.end_capture()


def test_unusable_cache_folder_still_loads(fake, monkeypatch, tmp_path, capfd):
    """A cache folder that cannot be made (the compile cache's root is a
    file) was an OSError at the first kernel load: the kernels go to a
    private folder, with the compile cache's one-line warning, and run."""
    from tcc.accelerators.gpu import runtime
    from tcc.runtime import cache
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setattr(runtime, "CACHE", None)
    monkeypatch.setenv("TCC_CACHE_DIR", str(blocker))
    monkeypatch.setattr(cache, "_warned", set())
    model = SAMPLES["softmax_layernorm"]()
    dev = _device()
    mod, ins, outs = _load(model, dev)
    assert len(fake.nvrtc_calls) == 1
    stream = dev.create_stream()
    feeds, bufs = _upload(dev, stream, model, ins, outs)
    mod.get_function("gpu_0").run(bufs, stream)
    got = download(dev, stream, bufs[len(ins):], outs)
    for g, r in zip(got, onnxruntime_outputs(model, feeds)):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    mod.close()
    err = capfd.readouterr().err
    assert f"tcc: warning: the compile cache {blocker} cannot be used (Not a directory)" in err, err


def test_nvrtc_binary_is_cached_on_disk(fake):
    """compile_using_nvrtc returns (binary, mapping): the cubin lands in the
    cache, the next load reads it without compiling, no .tmp is left, and no
    flush-to-zero option sneaks in."""
    from tcc.accelerators.gpu import runtime
    model = SAMPLES["softmax_layernorm"]()
    dev = _device()
    _load(model, dev)[0].close()
    assert len(fake.nvrtc_calls) == 1
    assert not any("ftz" in o for o in fake.nvrtc_calls[0][0]) and fake.nvrtc_calls[0][1] == "90"
    files = os.listdir(runtime.CACHE)
    assert [f for f in files if f.endswith(".cubin")] and not [f for f in files if f.endswith(".tmp")], files
    with open(os.path.join(runtime.CACHE, files[0]), "rb") as f:
        assert f.read(4) == b"\x7fELF"
    _load(model, dev)[0].close()
    assert len(fake.nvrtc_calls) == 1


def test_a_failed_cache_write_leaves_no_tmp_file(tmp_path):
    from tcc.accelerators.gpu import runtime
    with pytest.raises(TypeError):
        runtime._atomic_write(str(tmp_path / "k.cubin"), ("not", "bytes"))
    assert os.listdir(tmp_path) == []


def _transpose_model(shape):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape[:-2] + [shape[-1], shape[-2]])
    perm = list(range(len(shape) - 2)) + [len(shape) - 1, len(shape) - 2]
    g = helper.make_graph([helper.make_node("Transpose", ["x"], ["y"], perm=perm)], "t", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_transpose_grids_fit_the_device_limits():
    """gridDim.y/z are capped at 65535: a batch of 70000, or that many row
    tiles, loops over the grid instead of failing to launch."""
    for shape in ([70000, 2, 3], [2, 66000 * 32, 1]):
        rm, _, _ = compile_partition(_transpose_model(shape))
        from tcc.accelerators.gpu import package, plan
        manifest = package.unpack(rm.payload)[0]
        plan.check_launch_limits(manifest, (2 ** 31 - 1, 65535, 65535), (1024, 1024, 64), 1024)


@pytest.mark.parametrize("shape", [[9, 70, 5], [3, 2, 33]])
def test_transpose_loops_over_a_capped_grid(fake, monkeypatch, shape):
    """The same kernel with the cap at 2 (emulating 65535 blocks is too slow):
    every batch and row tile is still written, on the fake GPU."""
    from tcc.accelerators.gpu import templates
    monkeypatch.setattr(templates, "GRID_YZ", 2)
    model = _transpose_model(shape)
    dev = _device()
    mod, ins, outs = _load(model, dev)
    (step,) = [s for s in mod.manifest["functions"]["gpu_0"]["steps"] if s["op"] == "kernel"]
    assert step["grid"][1] <= 2 and step["grid"][2] <= 2
    stream = dev.create_stream()
    feeds, bufs = _upload(dev, stream, model, ins, outs)
    mod.get_function("gpu_0").run(bufs, stream)
    got = download(dev, stream, bufs[len(ins):], outs)
    np.testing.assert_array_equal(got[0], onnxruntime_outputs(model, feeds)[0])


def test_a_grid_beyond_the_limits_is_refused_at_load(fake):
    from tcc.accelerators.gpu import plan
    manifest = {"functions": {"f": {"steps": [{"op": "kernel", "kernel": "f_k0", "grid": [4, 70000, 1],
                                               "block": [32, 8, 1]}]}}}
    with pytest.raises(ValueError, match=r"f_k0 of f cannot launch: gridy 70000 > 65535"):
        plan.check_launch_limits(manifest, (2 ** 31 - 1, 65535, 65535), (1024, 1024, 64), 1024)
    manifest["functions"]["f"]["steps"][0]["grid"] = [4, 65535, 1]
    plan.check_launch_limits(manifest, (2 ** 31 - 1, 65535, 65535), (1024, 1024, 64), 1024)


# -- placement, compiling without cupy, and what loading says -------------------------------------
def _tiny_add():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", [x, y], [z])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _no_cupy(monkeypatch):
    import sys
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "cupy" else real(n, *a))
    for k in [k for k in sys.modules if k == "cupy" or k.startswith(("cupy.", "cupy_backends"))]:
        monkeypatch.delitem(sys.modules, k)


def _placement(path):
    import json
    import zipfile
    with zipfile.ZipFile(path) as z:
        return [s.get("accelerator", "host") for s in json.loads(z.read("manifest.json"))["plan"]]


def test_conformance_mode_forces_single_ops_onto_the_gpu(monkeypatch, tmp_path):
    """Node tests are single small ops: the cost hints keep them on the host
    (not worth a copy), so `--maccel gpu` tested nothing; TCC_GPU_CONFORMANCE=1
    places them on the gpu. Compiled with no cupy at all."""
    import tcc
    _no_cupy(monkeypatch)
    src = tmp_path / "add.onnx"
    onnx.save(_tiny_add(), src)
    monkeypatch.delenv("TCC_GPU_CONFORMANCE", raising=False)
    out = tcc.compile(str(src), maccel=["gpu"], output=str(tmp_path / "a.tcc"))
    assert "gpu" not in _placement(out)
    monkeypatch.setenv("TCC_GPU_CONFORMANCE", "1")
    out = tcc.compile(str(src), maccel=["gpu"], output=str(tmp_path / "b.tcc"))
    assert _placement(out) == ["gpu"]


def test_without_cupy_compile_works_and_load_names_both_cupy_packages(monkeypatch, tmp_path):
    import tcc
    from tcc.dialects.ir.errors import TccError
    _no_cupy(monkeypatch)
    monkeypatch.setenv("TCC_GPU_CONFORMANCE", "1")
    src = tmp_path / "add.onnx"
    onnx.save(_tiny_add(), src)
    out = tcc.compile(str(src), maccel=["gpu"], output=str(tmp_path / "a.tcc"))
    with pytest.raises((TccError, Exception)) as e:
        tcc.load(out).run({"x": np.ones((2, 3), np.float32), "y": np.ones((2, 3), np.float32)})
    msg = str(e.value)
    assert "cupy" in msg and "cupy-cuda13x" in msg and "cupy-cuda12x" in msg and "\n" not in msg, msg


def test_with_cupy_but_no_driver_the_error_names_the_driver(monkeypatch, tmp_path):
    fake_cupy.install(monkeypatch, driver=False)
    from tcc.runtime.device import DeviceError
    from tcc.accelerators.gpu.device import GpuDeviceManagerFactory
    from tcc.runtime.device.registry import DeviceManagerRegistry as DeviceRegistry
    reg = DeviceRegistry()
    reg.register(GpuDeviceManagerFactory())
    with pytest.raises(DeviceError) as e:
        reg.get_device("gpu:0")
    msg = str(e.value)
    assert "cudaErrorInsufficientDriver" in msg and "out of range" not in msg, msg


# -- borrowed (DLPack) inputs ---------------------------------------------------------------------------
class _Session:
    """The parts of PlanSession that _stage_input uses, on one gpu device."""

    def __init__(self, dev):
        from tcc.runtime.executor import PlanSession
        self.sess = object.__new__(PlanSession)
        s = self.sess
        s._align, s._buffers, s._sizes, s._views = {dev: 256}, {}, {}, {}
        s.stream = dev.create_stream()
        s._stream_of = lambda d: s.stream
        from tcc.runtime.artifact import TensorSpec
        s.spec = TensorSpec("x", (16, 4), "f32")  # 256 bytes: a multiple of the alignment
        s.values = {"x": s.spec}
        s._prepare_any = lambda v, spec: v


def _borrowed(dev, arr, byte_offset_elems=0):
    """A tcc Tensor over fake device memory holding `arr`, starting
    `byte_offset_elems` floats into a 256-aligned allocation (DLPack import)."""
    import cupy
    from tcc.runtime.device import Tensor
    n = arr.size + byte_offset_elems
    base = cupy.ndarray((n,), np.float32)
    base.host()[byte_offset_elems:] = arr.reshape(-1)
    view = cupy.ndarray(arr.shape, np.float32, cupy.cuda.MemoryPointer(base.data.mem, 4 * byte_offset_elems))
    return Tensor.from_dlpack(fake_cupy.Producer(view), registry=dev.manager.registry), base


def test_misaligned_borrowed_input_is_copied_not_used_in_place(fake):
    """A slice such as x[1:] starts inside its allocation (here 4 bytes in),
    with byte_offset 0 and a size that is a multiple of the alignment: the
    kernels' float4 loads would fault, so the input is copied into an
    aligned buffer."""
    dev = _device()
    s = _Session(dev)
    x = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    t, _keep = _borrowed(dev, x, 1)
    assert t.buffer.ptr % 16 and t.byte_offset == 0
    where = {}
    s.sess._stage_input(t, s.sess.spec, where)
    buf = where["x"]
    assert buf.ptr % 256 == 0
    got = np.empty_like(x)
    dev.copy_device_to_host(buf, got, got.nbytes, stream=s.sess.stream)
    s.sess.stream.sync()
    np.testing.assert_array_equal(got, x)


def test_dlpack_inputs_wait_for_the_producer_stream(fake):
    """The producer is handed one of our streams (`__dlpack__(stream=...)`),
    and the executor's stream waits on the event recorded there."""
    dev = _device()
    s = _Session(dev)
    x = np.ones((16, 4), np.float32)
    t, _keep = _borrowed(dev, x, 0)
    (handed,) = fake.dlpack_streams
    assert handed not in (None, 0, 1) and handed == dev._import_stream().ptr
    s.sess._stage_input(t, s.sess.spec, {})
    ev = t.buffer.ready
    assert ev is not None and ev.ev.recorded_on == handed
    assert ev.ev in s.sess.stream.cs.waits
