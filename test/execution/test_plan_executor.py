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
