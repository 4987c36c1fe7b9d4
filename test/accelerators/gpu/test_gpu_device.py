"""GPU-only tests: the device conformance kit on gpu:0, and compiled
partitions run on the GPU against onnxruntime. They skip, with the reason,
where cupy, a driver or a GPU is missing."""
import numpy as np
import pytest


def _gpu_skip_reason():
    try:
        import cupy
    except Exception as e:  # noqa: BLE001
        return f"cupy is not importable ({type(e).__name__}); install tcc[gpu-cuda13] or tcc[gpu-cuda12]"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        return f"no usable CUDA driver/GPU ({type(e).__name__}: {str(e).splitlines()[0]})"
    return None if n > 0 else "no NVIDIA GPU is visible"


REASON = _gpu_skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

if REASON is None:
    from tcc.runtime.device import default_registry
    from tcc.runtime.device.conformance_suite import *  # noqa: F401,F403
    from tcc.accelerators.gpu.device import GpuDeviceManagerFactory

    default_registry.register(GpuDeviceManagerFactory(), replace=True)

    @pytest.fixture(scope="module")
    def tcc_device():
        return default_registry.get_device("gpu:0")


def _run_on_gpu(model):
    from tcc.accelerators.gpu import plugin
    from tcc.runtime.device import default_registry
    from .helpers import compile_partition, onnxruntime_outputs, random_inputs
    rm, ins, outs = compile_partition(model)
    dev = default_registry.get_device("gpu:0")
    mod = plugin.tcc_load_runtime_module(rm, dev)
    feeds = random_inputs(model)
    stream = dev.create_stream()
    bufs = []
    for k in ins:
        x = np.ascontiguousarray(feeds[k])
        b = dev.alloc(x.nbytes)
        dev.copy_host_to_device(x, b, stream=stream)
        bufs.append(b)
    results = []
    for shape, dt in outs:
        r = np.empty(shape, dt)
        bufs.append(dev.alloc(r.nbytes))
        results.append(r)
    fn = mod.get_function("gpu_0")
    fn(bufs, stream)
    for r, b in zip(results, bufs[len(ins):]):
        dev.copy_device_to_host(b, r, stream=stream)
    stream.sync()
    # replay through a CUDA graph gives the same answer
    graph = fn.capture(bufs, stream)
    graph.launch(stream.cs)
    again = [np.empty_like(r) for r in results]
    for r, b in zip(again, bufs[len(ins):]):
        dev.copy_device_to_host(b, r, stream=stream)
    stream.sync()
    for a, r in zip(again, results):
        np.testing.assert_array_equal(a, r)
    return results, onnxruntime_outputs(model, feeds)


def test_gpu_op_families_match_onnxruntime():
    from . import models
    for name, model in sorted(models.family_cases().items()):
        got, ref = _run_on_gpu(model)
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("name", ["elementwise_chain", "softmax_layernorm", "mlp", "cnn", "transformer",
                                  "resnet18_small", "mobilenetv2_small"])
def test_gpu_samples_match_onnxruntime(name):
    from .test_gpu_codegen import SAMPLES
    got, ref = _run_on_gpu(SAMPLES[name]())
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4)


def test_dlpack_zero_copy_import():
    import cupy
    from tcc.runtime.device import Tensor
    x = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    t = Tensor.from_dlpack(x)
    assert t.device.type == "gpu" and t.buffer.ptr == x.data.ptr
    np.testing.assert_array_equal(t.numpy(), cupy.asnumpy(x))
