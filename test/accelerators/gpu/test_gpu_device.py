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
    from .helpers import compile_partition, device_buffers, download, onnxruntime_outputs, random_inputs
    rm, ins, outs = compile_partition(model)
    dev = default_registry.get_device("gpu:0")
    mod = plugin.tcc_load_runtime_module(rm, dev)
    feeds = random_inputs(model)
    stream = dev.create_stream()
    bufs = device_buffers(dev, stream, feeds, ins, outs)
    fn = mod.get_function("gpu_0")
    fn.run(bufs, stream)
    results = download(dev, stream, bufs[len(ins):], outs)
    # the executor's policy (eager, capture, replay) captures every plan, GEMMs included,
    # and the replayed graph gives the same answer
    for _ in range(3):
        fn(bufs, stream)
    assert fn.capture_error is None, fn.capture_error
    again = download(dev, stream, bufs[len(ins):], outs)
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
