"""The executor for placed models, in-process: the sim plugin (its own
device, numpy memory) and a host-device plugin, alone and together, against
onnxruntime."""
import os
import sys

import numpy as np
import onnxruntime as ort
import pytest

import tcc
from tcc import samples
from tcc.accelerators import API_VERSION, AcceleratorInfo, RuntimeModule, Support, hookimpl
from tcc.accelerators.manager import register_plugin, unregister_plugin

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class HostRelu:
    """An accelerator without a device of its own: Relu on host buffers."""

    @hookimpl
    def tcc_accelerator_info(self):
        return AcceleratorInfo("hostrelu", "1", API_VERSION)

    @hookimpl
    def tcc_supports_op(self, op, module):
        return Support.yes() if op.name == "onnx.Relu" else Support.no("op unsupported")

    @hookimpl
    def tcc_loop_to_native(self, funcs, module, context, target):
        sigs = {f.get_attr("sym_name"): [list(t.shape) for t in f.get_attr("function_type").inputs]
                for f in funcs}
        import json
        return RuntimeModule("hostrelu", json.dumps(sigs).encode(), tuple(sigs))

    @hookimpl
    def tcc_load_runtime_module(self, module, device):
        import json
        sigs = json.loads(module.payload)

        class Mod:
            def get_function(self, name):
                n = int(np.prod(sigs[name][0]))

                def fn(buffers, stream):
                    assert all(b.device is device for b in buffers)
                    x = buffers[0].handle[:4 * n].view(np.float32)
                    buffers[1].handle[:4 * n].view(np.float32)[:] = np.maximum(x, 0)
                return fn
        return Mod()


@pytest.fixture
def plugins():
    sys.path.insert(0, os.path.join(REPO, "examples", "tcc-accel-sim"))
    import tcc_accel_sim
    register_plugin("sim", tcc_accel_sim.plugin)
    register_plugin("hostrelu", HostRelu())
    yield
    unregister_plugin("sim")
    unregister_plugin("hostrelu")
    sys.path.remove(os.path.join(REPO, "examples", "tcc-accel-sim"))


@pytest.mark.parametrize("maccel", [["sim"], ["hostrelu"], ["hostrelu", "sim"], ["sim", "hostrelu"]])
@pytest.mark.parametrize("build", [samples.cnn, samples.transformer])
def test_placed_models_match_onnxruntime(plugins, maccel, build, rng, tmp_path):
    m = build(seed=int(rng.integers(1 << 30)))
    sess = tcc.load(tcc.compile(m, maccel=maccel, output=str(tmp_path / "m.tcc")))
    used = {s.get("accelerator", "host") for s in sess.manifest["plan"]}
    if build is samples.transformer and maccel == ["hostrelu"]:
        assert used == {"host"}  # no Relu in it: nothing to place
    else:
        assert used & set(maccel), used
    ref = ort.InferenceSession(m.SerializeToString())
    for _ in range(2):  # buffers are reused across runs
        x = rng.standard_normal(sess.input_signature[0]["shape"]).astype(np.float32)
        np.testing.assert_allclose(sess.run({"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_accelerator_buffer_alignment_reaches_the_executor(plugins, tmp_path):
    path = tcc.compile(samples.cnn(seed=1), maccel=["sim"], output=str(tmp_path / "m.tcc"))
    sess = tcc.load(path)
    assert sess.manifest["accelerators"]["sim"]["buffer_alignment"] == 128
    sess.run({"x": np.zeros((1, 3, 16, 16), np.float32)})
    sim_bufs = [b for (_, dev), b in sess._buffers.items() if dev.type == "sim"]
    assert sim_bufs and all(b.nbytes % 128 == 0 for b in sim_bufs)


def test_artifact_needing_a_missing_accelerator(plugins, tmp_path):
    path = tcc.compile(samples.cnn(seed=1), maccel=["sim"], output=str(tmp_path / "m.tcc"))
    unregister_plugin("sim")
    from tcc.dialects.ir.errors import TccError
    with pytest.raises(TccError, match="needs accelerators sim"):
        tcc.load(path)


def _sim_tensor(array, align=128):
    """`array` copied into a fresh sim-device Tensor (padded to `align` bytes)."""
    from tcc.runtime.device import get_device
    from tcc.runtime.device.tensor import Tensor
    dev = get_device("sim")
    n = array.nbytes
    buf = dev.alloc(n + (-n) % align)
    dev.copy_host_to_device(np.ascontiguousarray(array), buf, stream=dev.active_stream)
    dev.active_stream.sync()
    return Tensor(buf, array.shape, array.dtype)


def test_outputs_stay_on_the_accelerator_device_when_asked(plugins, rng, tmp_path):
    from tcc.runtime.device.tensor import Tensor
    m = samples.cnn(seed=int(rng.integers(1 << 30)))
    sess = tcc.load(tcc.compile(m, maccel=["sim"], output=str(tmp_path / "m.tcc")))
    x = rng.standard_normal(sess.input_signature[0]["shape"]).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    (y,) = sess.run({"x": x}, output_device="sim")
    assert isinstance(y, Tensor) and y.device.type == "sim"
    assert y.shape == want.shape and y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-5)
    (y2,) = sess.run({"x": x}, output_device="sim")  # a new tensor each call: y is not overwritten
    assert y2.buffer is not y.buffer
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-5)
    (h,) = sess.run({"x": x}, output_device="cpu")
    assert isinstance(h, np.ndarray)


@pytest.mark.parametrize("align", [128, 4])
def test_device_tensor_inputs(plugins, rng, tmp_path, align):
    """A sim-device tensor as input: used in place when its buffer meets the
    accelerator's alignment (no host buffer for it), copied on the device
    otherwise; same numbers either way."""
    m = samples.cnn(seed=int(rng.integers(1 << 30)))
    sess = tcc.load(tcc.compile(m, maccel=["sim"], output=str(tmp_path / "m.tcc")))
    first = sess.manifest["plan"][0]
    x = rng.standard_normal(sess.input_signature[0]["shape"]).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    got = sess.run({"x": _sim_tensor(x, align)})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if first.get("accelerator") == "sim" and align == 128:
        assert not [k for k in sess._buffers if k[0] == "x"]


def test_device_tensor_input_with_wrong_shape_names_the_input(plugins, rng, tmp_path):
    from tcc.runtime.signature import InputError
    sess = tcc.load(tcc.compile(samples.cnn(seed=1), maccel=["sim"], output=str(tmp_path / "m.tcc")))
    with pytest.raises(InputError, match="input 'x' has shape"):
        sess.run({"x": _sim_tensor(np.zeros((2, 3), np.float32))})


def test_host_session_output_device(tmp_path, rng):
    from tcc.runtime.device import DeviceError
    m = samples.mlp(seed=1)
    sess = tcc.load(tcc.compile(m, output=str(tmp_path / "m.tcc")))
    x = rng.standard_normal(sess.input_signature[0]["shape"]).astype(np.float32)
    a = sess.run({"x": x})[0].copy()
    np.testing.assert_array_equal(sess.run({"x": x}, output_device="cpu")[0], a)
    with pytest.raises(DeviceError):
        sess.run({"x": x}, output_device="nosuchdevice")


def test_placed_outputs_are_recycled_only_when_dropped(plugins, rng, tmp_path):
    sess = tcc.load(tcc.compile(samples.cnn(seed=3), maccel=["sim"], output=str(tmp_path / "m.tcc")))
    shape = sess.input_signature[0]["shape"]
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    first = sess.run({"x": xs[0]})[0]
    keep = first.copy()
    second = sess.run({"x": xs[1]})[0]
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, keep)
    addresses = {sess.run({"x": xs[2]})[0].ctypes.data for _ in range(3)}
    assert len(addresses) == 1


def _at_page_end(x):
    """`x` copied to the very end of a mapped page whose next page is
    inaccessible: reading one byte past it faults."""
    import ctypes
    import mmap
    page = mmap.PAGESIZE
    size = -(-x.nbytes // page) * page
    mm = mmap.mmap(-1, size + page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(base + size, page, 0) == 0  # PROT_NONE
    y = np.frombuffer(mm, x.dtype, x.size, size - x.nbytes).reshape(x.shape)
    y[...] = x
    return y, mm


def test_cpu_plan_runs_as_direct_calls(tmp_path, rng):
    """A plan living in host memory (cpu accelerator steps) runs as direct
    native calls: the caller's input read in place wherever it lies (at the
    very end of a page: nothing read past it), outputs written in place and
    recycled only once dropped, the same numbers as the general path (also
    for a read-only input); inputs it does not take as they are (strided,
    another dtype or shape, a list) go through the general path's
    conversions and one-line errors."""
    from tcc.runtime.signature import InputError
    # the first layer (K 301, N 12) runs gemm_narrow.c's vector loads over the input's rows
    m = samples.mlp_matmul(batch=7, sizes=(301, 12, 30), seed=int(rng.integers(1 << 30)))
    sess = tcc.load(tcc.compile(m, maccel=["cpu"], output=str(tmp_path / "m.tcc")))
    assert sess._direct is not None
    x = rng.standard_normal((7, 301)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    direct = sess.run({"x": x})[0]
    np.testing.assert_allclose(direct, ref, rtol=1e-4, atol=1e-5)
    calls = sess._direct
    sess._direct = None
    general = sess.run({"x": x})[0]
    sess._direct = calls
    np.testing.assert_array_equal(direct, general)
    edge, mm = _at_page_end(x)
    np.testing.assert_array_equal(sess.run({"x": edge})[0], direct)
    np.testing.assert_array_equal(sess.run([edge])[0], direct)
    readonly = np.frombuffer(x.tobytes(), np.float32).reshape(x.shape)
    np.testing.assert_array_equal(sess.run({"x": readonly})[0], direct)
    del edge
    mm.close()
    wide = np.zeros((7, 602), np.float32)
    wide[:, ::2] = x
    np.testing.assert_array_equal(sess.run({"x": wide[:, ::2]})[0], direct)
    np.testing.assert_allclose(sess.run({"x": x.tolist()})[0], direct, rtol=1e-6)
    with pytest.raises(InputError, match="input 'x' has shape"):
        sess.run({"x": x[:3]})
    with pytest.raises(InputError, match="input 'x' has dtype float64"):
        sess.run({"x": x.astype(np.float64)})
    with pytest.raises(InputError, match="unknown input 'y'"):
        sess.run({"y": x})
    with pytest.raises(InputError, match="unknown output 'z'"):
        sess.run({"x": x}, output_names=["z"])
    # outputs: a kept one is never overwritten; a dropped one's memory is reused
    xs = [rng.standard_normal((7, 301)).astype(np.float32) for _ in range(3)]
    first = sess.run({"x": xs[0]})[0]
    keep = first.copy()
    second = sess.run({"x": xs[1]})[0]
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, keep)
    addresses = {sess.run({"x": xs[2]})[0].ctypes.data for _ in range(3)}
    assert len(addresses) == 1
